/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The tracepoint mode of disk.bpf.c, for kernels without BPF trampolines:
 * only tracepoints the file systems and iomap already have, none on a system
 * call, so no process of the host is slowed. What it sees:
 *
 * - direct I/O on ext4, XFS and Btrfs (QEMU's cache=none, aio=threads or
 *   native): iomap_dio_rw_begin and iomap_dio_complete, timed (v6.3+);
 * - io_uring reads and writes: at iomap's begin like linux-aio's (XFS's
 *   buffered ones at its tracepoints below), done at io_uring's completion
 *   (disk.h uring_enter), timed; the rest (buffered I/O on ext4 and Btrfs)
 *   at io_uring's submission (disk.bpf.c uring_fs_sees); their flushes at
 *   the file systems' fsync hooks below, in io_uring's workers;
 * - flushes: ext4_sync_file_enter/exit (timed); XFS's xfs_file_fsync and
 *   Btrfs's btrfs_sync_file fire at the start only (counted, untimed);
 * - XFS buffered reads and writes: xfs_file_buffered_read/write at the
 *   start (counted with their requested length, untimed);
 * - ext4 discards, write-zeroes and allocation: ext4_punch_hole,
 *   ext4_zero_range, ext4_fallocate_enter at the start (counted, untimed).
 *
 * What it cannot see, and user space says so per disk
 * (fspair_disk_unfollowed): buffered reads and writes of QEMU's threads
 * on ext4 and Btrfs,
 * fallocate on XFS and Btrfs, direct writes Btrfs turns into buffered ones
 * (checksummed files: v6.15+, and Debian's 6.12), and, before v6.3, any direct I/O.
 */
#ifndef FSPAIR_DISK_TRACEPOINT_H
#define FSPAIR_DISK_TRACEPOINT_H

#include "disk.h"

/* fs/xfs/libxfs/xfs_format.h: "XFSB", XFS's super block magic, also its s_magic. */
#define XFS_SB_MAGIC 0x58465342

/* XFS's inode holds the VFS inode (fs/xfs/xfs_inode.h); its offset is relocated. */
struct xfs_inode {
	struct inode i_vnode;
} __attribute__((preserve_access_index));

/* iomap_dio_rw_begin(iocb, iter, dio_flags, done_before): a direct request starts (or resumes). */
SEC("tp_btf/iomap_dio_rw_begin")
int dio_rw_begin(u64 *ctx)
{
	struct kiocb *iocb = (void *)ctx[0];
	struct iov_iter *iter = (void *)ctx[1];

	/* done_before: the rest of a request partly done already, submitted before. */
	if (ctx[3])
		return 0;
	rw_enter(iocb, iter->count, iter->data_source ? OP_WRITE : OP_READ, true);
	return 0;
}

/*
 * iomap_dio_complete(iocb, error, ret): a direct request is done, in the
 * submitter for a synchronous one, in interrupt or workqueue context for a
 * queued one. -EAGAIN: XFS retries it (a second begin, not submitted again);
 * -ENOTBLK: the file system goes on with buffered I/O, which this mode sees
 * on XFS only (rw_untimed counts the request there): elsewhere the request
 * counts whole here, untimed.
 */
static __always_inline void dio_complete_body(u64 *ctx)
{
	struct kiocb *iocb = (void *)ctx[0];
	s64 error = (s32)ctx[1], res = (s64)ctx[2];
	struct super_block *sb = iocb->ki_filp->f_inode->i_sb;
	u64 kio = (u64)iocb;
	struct inflight *rec;
	struct io_task *t;
	/* XFS's buffered fallback has a tracepoint, which counts the request (rw_untimed). */
	bool fallback_seen = error == -ENOTBLK && sb->s_magic == XFS_SB_MAGIC;

	if (!sb_tracked((u64)sb) || uring_kiocb(iocb))
		return;
	if (error < 0)
		res = error;
	if (!iocb->ki_complete) {
		t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
		if (!t || !t->call.start_ns || t->key != kio)
			return;
		if (error == -EAGAIN) {
			t->cause |= CAUSE_RETRY;
			return;
		}
		if (fallback_seen)
			return;
		if (error == -ENOTBLK) {
			t->call.timed = 0;
			res = t->call.len;
		}
		t->dio_owner = 0;
		call_finish(t, res);
		return;
	}
	if (!aio_in_direct_io)
		return;
	rec = bpf_map_lookup_elem(&inflight_aio, &kio);
	if (!rec || error == -EAGAIN)
		return;
	/* Less than asked inside its call: the file system may go on (see aio_call_begins). */
	if (res >= 0 && res < (s64)rec->len && rec->tid == (u32)bpf_get_current_pid_tgid())
		return;
	if (error == -ENOTBLK) {
		/* Still inside its call (see aio_call_begins): counted by the fallback. */
		if (fallback_seen && rec->tid)
			return;
		rec->timed = 0;
		res = rec->len;
	}
	aio_done(rec, kio, res, error != -ENOTBLK);
}

SEC("tp_btf/iomap_dio_complete")
int dio_complete(u64 *ctx)
{
	dio_complete_body(ctx);
	return 0;
}

/*
 * The same completion, a second program: the kernel skips a program
 * that is already running on the CPU (a completion in interrupt context
 * on top of one in a task, as a direct read of another process completes
 * in its own context), never another program. Of the two, the first to
 * run completes the request; the other finds it gone.
 */
SEC("tp_btf/iomap_dio_complete")
int dio_done_nested(u64 *ctx)
{
	dio_complete_body(ctx);
	return 0;
}

/* iomap_dio_rw_queued(inode, pos, len): the thread's direct request is out, to complete elsewhere. */
SEC("tp_btf/iomap_dio_rw_queued")
int dio_rw_queued(u64 *ctx)
{
	if (aio_in_direct_io)
		aio_call_queued(bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0));
	return 0;
}

/* A read or write seen only as it starts: counted with its requested length. */
static __always_inline void rw_untimed(struct kiocb *iocb, struct iov_iter *iter, u8 op)
{
	u64 kio = (u64)iocb;
	struct image_ref *img;
	struct io_task *t;
	bool dsync;

	/* A module's tracepoint arguments may be NULL as the verifier sees them (6.12). */
	if (!iocb || !iter)
		return;
	img = followed_image(iocb->ki_filp->f_inode);
	if (!img)
		return;
	dsync = op == OP_WRITE && (iocb->ki_flags & iocb_dsync);
	if (uring_kiocb(iocb)) {
		/* Timed after all: its CQE completes it. */
		uring_enter(iocb, img->slot, op, iter->count, dsync);
		return;
	}
	/*
	 * A direct request XFS falls back to buffered I/O for (its range could
	 * not be dropped from the page cache): counted once, untimed.
	 */
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
	if (t && iocb->ki_complete && t->aio_kio == kio && aio_call_finish(t, kio))
		return;
	if (t && !iocb->ki_complete && t->call.start_ns && t->key == kio) {
		t->call.timed = 0;
		call_finish(t, t->call.len);
		return;
	}
	request_untimed(img->slot, op, iocb->ki_pos, iter->count,
			iocb->ki_complete ? kiocb_iface(iocb) : IFACE_SYSCALL, dsync);
}

SEC("tp_btf/xfs_file_buffered_read")
int xfs_buffered_read(u64 *ctx)
{
	rw_untimed((struct kiocb *)ctx[0], (struct iov_iter *)ctx[1], OP_READ);
	return 0;
}

SEC("tp_btf/xfs_file_buffered_write")
int xfs_buffered_write(u64 *ctx)
{
	rw_untimed((struct kiocb *)ctx[0], (struct iov_iter *)ctx[1], OP_WRITE);
	return 0;
}

/* ext4_sync_file_enter(file, datasync) / ext4_sync_file_exit(inode, ret) */
SEC("tp_btf/ext4_sync_file_enter")
int ext4_sync_enter(u64 *ctx)
{
	flush_enter((struct file *)ctx[0]);
	return 0;
}

SEC("tp_btf/ext4_sync_file_exit")
int ext4_sync_exit(u64 *ctx)
{
	inode_call_exit((struct inode *)ctx[0], (s64)(s32)ctx[1]);
	return 0;
}

/*
 * A flush seen only as it starts, io_uring's (in its workers) included. Not
 * counted: the sync of a write on a file opened O_DSYNC (QEMU's
 * cache=writethrough/directsync), which these tracepoints cannot tell from
 * a flush; user space says so for such disks.
 */
static __always_inline void flush_untimed(struct inode *inode, u32 file_flags)
{
	struct image_ref *img = followed_image(inode);

	if (!img)
		return;
	if (file_flags & (O_DSYNC | __O_SYNC))
		return;
	request_untimed(img->slot, OP_FLUSH, 0, 0, task_iface(), false);
}

/* xfs_file_fsync(ip): the XFS inode only; no file flags to look at. */
SEC("tp_btf/xfs_file_fsync")
int xfs_fsync(u64 *ctx)
{
	struct xfs_inode *ip = (void *)ctx[0];

	if (ip)
		flush_untimed(&ip->i_vnode, 0);
	return 0;
}

/* btrfs_sync_file(file, datasync) */
SEC("tp_btf/btrfs_sync_file")
int btrfs_sync(u64 *ctx)
{
	struct file *f = (void *)ctx[0];

	if (f)
		flush_untimed(f->f_inode, f->f_flags);
	return 0;
}

/* ext4_punch_hole, ext4_zero_range, ext4_fallocate_enter: (inode, offset, len, mode). */
static __always_inline void fallocate_untimed(u64 *ctx, u8 op)
{
	struct image_ref *img = followed_image((struct inode *)ctx[0]);

	if (!img)
		return;
	request_untimed(img->slot, op, ctx[1], ctx[2], task_iface(), false);
}

SEC("tp_btf/ext4_punch_hole")
int ext4_discard(u64 *ctx)
{
	fallocate_untimed(ctx, OP_DISCARD);
	return 0;
}

SEC("tp_btf/ext4_zero_range")
int ext4_write_zeroes(u64 *ctx)
{
	fallocate_untimed(ctx, OP_WRITE_ZEROES);
	return 0;
}

SEC("tp_btf/ext4_fallocate_enter")
int ext4_allocate(u64 *ctx)
{
	fallocate_untimed(ctx, OP_ALLOCATE);
	return 0;
}

#endif /* FSPAIR_DISK_TRACEPOINT_H */
