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
 * - flushes: each file system's fsync (ext4_sync_file, xfs_file_fsync,
 *   btrfs_sync_file), which fdatasync/fsync, io_uring's and linux-aio's
 *   fsync and O_DSYNC writes all reach; discards, write-zeroes and
 *   allocation: each file system's fallocate;
 * - io_uring reads and writes are counted here too, done at io_uring's
 *   completion tracepoint (disk.h uring_enter, disk.bpf.c io_uring_done);
 *   its flushes and fallocates reach the hooks below in io_uring's workers.
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
		rw_enter(iocb, iter->count, op, false);            \
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
 * completed inside the call by iomap already. io_uring's are done at their
 * CQE (io_uring_done), whatever the call returns.
 */
static __always_inline void rw_exit(struct kiocb *iocb, s64 ret)
{
	struct file *f = iocb->ki_filp;
	u64 kio = (u64)iocb;
	struct inflight *rec;
	struct io_task *t;

	/*
	 * Only an image's call has anything to end: any other file leaves
	 * before the task storage. (An image untracked inside its call leaves
	 * the call parked: the thread's next call on an image replaces it.)
	 */
	if (!sb_tracked((u64)f->f_inode->i_sb) || !image_of((u64)f->f_inode, f->f_inode->i_ino))
		return;
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
	if (t) {
		t->dio_owner = 0;
		t->aio_kio = 0;
	}
	if (!iocb->ki_complete) {
		if (t && t->call.start_ns && t->key == kio)
			call_finish(t, ret);
		return;
	}
	/*
	 * Queued: it completes elsewhere. -EAGAIN on a no-wait attempt: the
	 * submitter tries again with the same kiocb (io_uring's, when its
	 * callbacks' addresses are hidden: see uring_kiocb), found in
	 * inflight_aio and not submitted twice.
	 */
	if (ret == -EIOCBQUEUED || (ret == -EAGAIN && (iocb->ki_flags & iocb_nowait)) || !aio_in_direct_io ||
	    uring_kiocb(iocb))
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
static __always_inline void dio_completed(u64 *ctx)
{
	struct iomap_dio *dio = (void *)ctx[0];
	s64 ret = (s64)ctx[1];
	struct inflight *rec;
	struct io_task *t;
	u64 kio;

	if (!aio_in_direct_io)
		return;
	kio = (u64)dio->iocb;
	rec = bpf_map_lookup_elem(&inflight_aio, &kio);
	if (!rec || ret == -ENOTBLK || ret == -EAGAIN)
		return;
	/*
	 * Less than asked, inside the submitting call: the file system may go
	 * on with the rest (Btrfs writes it buffered when the range is in the
	 * page cache); rw_exit counts what the call returns.
	 */
	if (ret < (s64)rec->len) {
		t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
		if (t && t->aio_kio == kio)
			return;
	}
	aio_done(rec, kio, ret, true);
}

SEC("fexit/iomap_dio_complete")
int dio_complete_exit(u64 *ctx)
{
	dio_completed(ctx);
	return 0;
}

/*
 * The same completion, a second program: a trampoline skips a program that
 * is already running on the CPU (a read completed in hard IRQ on top of one
 * completing in soft IRQ: the kernel matrix saw 11 such misses in 1,110
 * linux-aio reads on 6.1, one of them lost), never another program. Of the
 * two, the first to run completes the request; the other finds it gone.
 */
SEC("fexit/iomap_dio_complete")
int dio_complete_nested(u64 *ctx)
{
	dio_completed(ctx);
	return 0;
}

/*
 * Flushes and fallocate at each file system's own function, which the VFS
 * calls through the file's operations: vfs_fsync_range and vfs_fallocate
 * would take one pair for all, but the compiler inlines them into their
 * system calls (Debian's 6.1: fdatasync(2) reaches ext4_sync_file without
 * calling vfs_fsync_range), while a function called through a pointer
 * cannot be inlined. Both take (file, ...) with the result in ctx[4]:
 * fsync(file, start, end, datasync), fallocate(file, mode, offset, len).
 */
#define FSYNC_HOOKS(fs, fn)                                              \
	SEC("fentry/" #fn)                                               \
	int fs##_fsync_enter(u64 *ctx)                                   \
	{                                                                \
		flush_enter((struct file *)ctx[0]);                      \
		return 0;                                                \
	}                                                                \
	SEC("fexit/" #fn)                                                \
	int fs##_fsync_exit(u64 *ctx)                                    \
	{                                                                \
		inode_call_exit(((struct file *)ctx[0])->f_inode, (s64)(s32)ctx[4]); \
		return 0;                                                \
	}

#define FALLOCATE_HOOKS(fs, fn)                                          \
	SEC("fentry/" #fn)                                               \
	int fs##_fallocate_enter(u64 *ctx)                               \
	{                                                                \
		fallocate_call_enter((struct file *)ctx[0], ctx[1], ctx[2], ctx[3]); \
		return 0;                                                \
	}                                                                \
	SEC("fexit/" #fn)                                                \
	int fs##_fallocate_exit(u64 *ctx)                                \
	{                                                                \
		inode_call_exit(((struct file *)ctx[0])->f_inode, (s64)(s32)ctx[4]); \
		return 0;                                                \
	}

/* A fallocate on a file reached its file system: follow it if it is a tracked image's. */
static __always_inline void fallocate_call_enter(struct file *f, u32 mode, u64 offset, u64 len)
{
	struct inode *inode = f->f_inode;
	struct inflight rec = {};
	struct image_ref *img;

	img = followed_image(inode);
	if (!img)
		return;
	if (submit(&rec, img->slot, fallocate_op(mode), offset, len, task_iface(), false, true))
		call_park(&rec, (u64)inode, (u64)inode, false);
}

FSYNC_HOOKS(ext4, ext4_sync_file)
FSYNC_HOOKS(xfs, xfs_file_fsync)
FSYNC_HOOKS(btrfs, btrfs_sync_file)
FALLOCATE_HOOKS(ext4, ext4_fallocate)
FALLOCATE_HOOKS(xfs, xfs_file_fallocate)
FALLOCATE_HOOKS(btrfs, btrfs_fallocate)

#endif /* FSPAIR_DISK_FENTRY_H */
