/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The fentry mode of disk.bpf.c, the production path: requests followed
 * where they reach the host file system, on BPF trampolines. Only calls into
 * the hooked functions pay, and a file that is not a tracked image leaves
 * after a super block comparison: no system call of any process is slowed.
 *
 * - reads and writes: fentry/fexit on each file system's read_iter and
 *   write_iter, which pread/pwrite/preadv/pwritev, linux-aio and io_uring
 *   all reach (the kiocb gives file, position, flags; the iov_iter the
 *   length at entry; fexit the result);
 * - linux-aio direct I/O returns -EIOCBQUEUED and completes at
 *   iomap_dio_complete (fexit), in interrupt or workqueue context;
 * - flushes: vfs_fsync_range, which fdatasync/fsync, io_uring's and
 *   linux-aio's fsync all call; discards, write-zeroes and allocation:
 *   vfs_fallocate;
 * - io_uring requests are counted by the io_uring tracepoints
 *   (disk.bpf.c), as in every mode; here they only mark the thread.
 *
 * Hooks measured to attach on Debian 12's 6.1 and 6.12 cloud kernels
 * (tests/matrix). XFS and Btrfs are modules: their programs attach once the
 * module is loaded (user space retries when a tracked image lands on one).
 */
#ifndef FSPAIR_DISK_FENTRY_H
#define FSPAIR_DISK_FENTRY_H

#include "disk.h"

/*
 * One program pair per file system and direction; fentry and fexit see the
 * same arguments, and fexit the result after them. ctx[0] is the kiocb,
 * ctx[1] the iov_iter (its count is the request's length at entry; the
 * file system consumes it), ctx[2] in fexit the bytes done or -errno.
 */
#define RW_HOOKS(fs, fn, dir, op)                                  \
	SEC("fentry/" #fn)                                         \
	int fs##_##dir##_enter(u64 *ctx)                           \
	{                                                          \
		struct kiocb *iocb = (void *)ctx[0];               \
		struct iov_iter *iter = (void *)ctx[1];            \
                                                                   \
		rw_enter(iocb, iter->count, op);                   \
		return 0;                                          \
	}                                                          \
	SEC("fexit/" #fn)                                          \
	int fs##_##dir##_exit(u64 *ctx)                            \
	{                                                          \
		rw_exit((struct kiocb *)ctx[0], (s64)ctx[2]);      \
		return 0;                                          \
	}

/*
 * A read or write on a file system returned ret. A synchronous call is done
 * (whatever happened inside, direct I/O falling back to buffered included);
 * an asynchronous one is done unless it was queued (-EIOCBQUEUED), or was
 * completed inside the call by iomap already.
 */
static __always_inline void rw_exit(struct kiocb *iocb, s64 ret)
{
	struct file *f = iocb->ki_filp;
	u64 kio = (u64)iocb;
	struct inflight *rec;
	struct io_task *t;

	if (!sb_tracked((u64)f->f_inode->i_sb))
		return;
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
	if (t)
		t->dio_owner = 0;
	if (!iocb->ki_complete) {
		if (t && t->call.start_ns && t->key == kio)
			call_finish(t, ret);
		return;
	}
	/*
	 * Queued: it completes elsewhere. -EAGAIN on a no-wait attempt: the
	 * submitter tries again with the same kiocb (io_uring's inline attempt
	 * of a request it followed with a fixed file, which its tracepoints
	 * could not resolve), found in inflight_aio and not submitted twice.
	 */
	if (ret == -EIOCBQUEUED || (ret == -EAGAIN && (iocb->ki_flags & iocb_nowait)) || !aio_in_direct_io)
		return;
	rec = bpf_map_lookup_elem(&inflight_aio, &kio);
	if (rec)
		aio_done(rec, kio, ret, f->f_flags & O_DIRECT);
}

RW_HOOKS(ext4, ext4_file_read_iter, read, OP_READ)
RW_HOOKS(ext4, ext4_file_write_iter, write, OP_WRITE)
RW_HOOKS(xfs, xfs_file_read_iter, read, OP_READ)
RW_HOOKS(xfs, xfs_file_write_iter, write, OP_WRITE)
RW_HOOKS(btrfs, btrfs_file_read_iter, read, OP_READ)
RW_HOOKS(btrfs, btrfs_file_write_iter, write, OP_WRITE)

/*
 * A queued direct request completes: iomap_dio_complete runs from the bio
 * completion (or its workqueue) and returns the bytes done or -errno. It
 * also runs inside the call for synchronous direct I/O, which is not in
 * inflight_aio.
 */
SEC("fexit/iomap_dio_complete")
int dio_complete_exit(u64 *ctx)
{
	struct iomap_dio *dio = (void *)ctx[0];
	s64 ret = (s64)ctx[1];
	struct inflight *rec;
	u64 kio;

	if (!aio_in_direct_io)
		return 0;
	kio = (u64)dio->iocb;
	rec = bpf_map_lookup_elem(&inflight_aio, &kio);
	if (!rec || ret == -ENOTBLK || ret == -EAGAIN)
		return 0;
	aio_done(rec, kio, ret, true);
	return 0;
}

/* vfs_fsync_range(file, start, end, datasync) */
SEC("fentry/vfs_fsync_range")
int vfs_fsync_enter(u64 *ctx)
{
	flush_enter((struct file *)ctx[0]);
	return 0;
}

SEC("fexit/vfs_fsync_range")
int vfs_fsync_exit(u64 *ctx)
{
	struct file *f = (void *)ctx[0];

	inode_call_exit(f->f_inode, (s64)(s32)ctx[4]);
	return 0;
}

/* vfs_fallocate(file, mode, offset, len) */
SEC("fentry/vfs_fallocate")
int vfs_fallocate_enter(u64 *ctx)
{
	struct file *f = (void *)ctx[0];
	struct inode *inode = f->f_inode;
	struct inflight rec = {};
	u32 *slot;

	slot = inode_slot(inode);
	if (!slot || !task_followed(bpf_get_current_pid_tgid() >> 32))
		return 0;
	if (submit(&rec, *slot, fallocate_op(ctx[1]), ctx[2], ctx[3], task_iface(), false))
		call_park(&rec, (u64)inode, (u64)inode);
	return 0;
}

SEC("fexit/vfs_fallocate")
int vfs_fallocate_exit(u64 *ctx)
{
	struct file *f = (void *)ctx[0];

	inode_call_exit(f->f_inode, (s64)(s32)ctx[4]);
	return 0;
}

#endif /* FSPAIR_DISK_FENTRY_H */
