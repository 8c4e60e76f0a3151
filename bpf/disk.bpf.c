// SPDX-License-Identifier: GPL-2.0
/*
 * disk: the request stream a VM issues on its disk image file.
 *
 * QEMU turns each guest request into a read, write, flush or fallocate on
 * the image file: from its worker threads (aio=threads), through linux-aio
 * (aio=native) or through io_uring (aio=io_uring). These programs follow
 * them, match the file to a tracked image by its inode, and aggregate per
 * disk in the kernel; user space reads the maps at scrape time.
 *
 * Three attach modes, chosen by user space (exporter/probe), each a set of
 * the programs below with the same maps and the same counters:
 *   fentry     - trampolines on the file systems' functions (disk_fentry.h);
 *   tracepoint - the file systems' and iomap's tracepoints (disk_tracepoint.h);
 *   syscall    - system call tracepoints (disk_syscall.h), complete but
 *                slowing every system call on the host.
 * The io_uring programs and the registration iterator here run in all three
 * (io_uring's submission in the tracepoint and syscall modes only).
 */
#include "disk.h"
#include "disk_fentry.h"
#include "disk_tracepoint.h"
#include "disk_syscall.h"

char LICENSE[] SEC("license") = "GPL";

/* Bytes of a prepared io_uring read/write, from its imported iterator when the kernel has one. */
static __always_inline u64 io_uring_len(struct io_kiocb *req, u8 opcode)
{
	struct io_rw *rw = (void *)req;
	struct io_async_rw *arw = NULL;

	if (opcode == IORING_OP_READV || opcode == IORING_OP_WRITEV) {
		if (bpf_core_field_exists(arw->iter)) {
			arw = BPF_CORE_READ(req, async_data);
			if (arw)
				return BPF_CORE_READ(arw, iter.count);
		}
		return iov_bytes((const struct iovec *)BPF_CORE_READ(rw, addr), BPF_CORE_READ(rw, len));
	}
	return BPF_CORE_READ(rw, len);
}

/*
 * What the tracepoint mode's file-system hooks see of io_uring's reads and
 * writes (bits of uring_submit_rest, set by user space as its programs
 * attach): there, the submission hook takes only the rest.
 */
#define URING_REST 1		  /* the tracepoint mode: take only what no file-system hook sees */
#define URING_SEEN_DIRECT 2	  /* iomap_dio_rw_begin: direct I/O on ext4, XFS and Btrfs */
#define URING_SEEN_BTRFS_DWRITE 4 /* Btrfs's direct writes reach iomap (before 6.12, see below) */
#define URING_SEEN_XFS_READ 8	  /* xfs_file_buffered_read */
#define URING_SEEN_XFS_WRITE 16	  /* xfs_file_buffered_write */
/*
 * 0 in the syscall mode: every io_uring read, write and flush is taken at
 * submission. The fentry mode does not load the submission hook.
 */
u32 uring_submit_rest = 0;

/* include/uapi/linux/magic.h */
#define BTRFS_SUPER_MAGIC 0x9123683E

/*
 * Will a file-system hook of the tracepoint mode see this read or write on
 * f (not a BTF pointer: probe reads)? Direct I/O reaches iomap's begin on
 * every file system but for Btrfs's direct writes to files with checksums,
 * which Btrfs turns buffered before iomap (commit 968f19c5b1b7, in
 * Debian's 6.12 too: the kernel matrix counted none at iomap on 6.12.117;
 * user space leaves URING_SEEN_BTRFS_DWRITE off from 6.12 on, as
 * exporter/probe's requirement says); buffered I/O has tracepoints on XFS
 * only. A request taken here that a hook sees after all (a Btrfs file
 * without checksums) is found there by its io_kiocb, the same key, and
 * not counted again (disk.h uring_enter).
 */
static __always_inline bool uring_fs_sees(struct file *f, u8 op)
{
	u32 seen = uring_submit_rest;
	u64 magic = BPF_CORE_READ(f, f_inode, i_sb, s_magic);

	if (BPF_CORE_READ(f, f_flags) & O_DIRECT) {
		if (magic == BTRFS_SUPER_MAGIC && op == OP_WRITE)
			return seen & URING_SEEN_BTRFS_DWRITE;
		return seen & URING_SEEN_DIRECT;
	}
	if (magic == XFS_SB_MAGIC)
		return seen & (op == OP_READ ? URING_SEEN_XFS_READ : URING_SEEN_XFS_WRITE);
	return false;
}

/*
 * aio=io_uring where no hook at the file system sees a request: every
 * request in the syscall mode, and in the tracepoint mode the reads and
 * writes its file-system tracepoints miss (buffered I/O on ext4 and Btrfs:
 * uring_fs_sees); the fentry mode sees them all at the kiocb. The request is
 * traced where it is submitted, in the submitting thread (so the fd
 * resolves in its file table), and completed by the same struct io_kiocb
 * (io_uring_done), wherever it ran: inline, after a poll, or punted to an
 * iou-wrk thread. Its latency starts here, so it holds the time in the
 * submission ring and io-wq's queueing, which the kiocb path's does not.
 * Every process's submissions pass here and no file is known before the
 * walk of the fd table (three probe reads): the process is looked up first
 * (vmm_tgids), which costs another process's submission less than the walk
 * (measured on this host: 70-96 ns a run against 222-272 ns with the walk
 * first), and the image's own VMM once the file is found. Registered
 * (fixed) files resolve through the ring's table and are not followed
 * here; in the tracepoint mode the kiocb path follows those it sees, so a
 * drop is counted in the syscall mode only.
 */
static __always_inline int uring_submit(struct io_kiocb *req)
{
	struct io_rw *rw = (void *)req;
	struct inflight rec;
	u64 key = (u64)req;
	struct image_ref *img;
	struct file *f;
	u8 opcode, op;
	bool dsync = false;

	if (!task_followed(bpf_get_current_pid_tgid() >> 32))
		return 0;
	opcode = BPF_CORE_READ(req, opcode);
	switch (opcode) {
	case IORING_OP_READV:
	case IORING_OP_READ_FIXED:
	case IORING_OP_READ:
		op = OP_READ;
		break;
	case IORING_OP_WRITEV:
	case IORING_OP_WRITE_FIXED:
	case IORING_OP_WRITE:
		op = OP_WRITE;
		dsync = BPF_CORE_READ(rw, flags) & (RWF_DSYNC | RWF_SYNC);
		break;
	case IORING_OP_FSYNC:
		/* The tracepoint mode counts io_uring's flushes at the fsync hooks, in its workers. */
		if (uring_submit_rest)
			return 0;
		op = OP_FLUSH;
		break;
	default:
		return 0;
	}
	if (BPF_CORE_READ(req, flags) & REQ_F_FIXED_FILE) {
		if (!uring_submit_rest)
			drop(DROP_IO_URING_FIXED_FILE);
		return 0;
	}
	f = fd_file(BPF_CORE_READ(req, cqe.fd));
	/* A request the file system will see (cache=none) leaves before the image's lookup. */
	if (!f || (uring_submit_rest && uring_fs_sees(f, op)))
		return 0;
	img = file_image(f);
	if (!img)
		return 0;
	if (op == OP_FLUSH) {
		if (!submit(&rec, img->slot, op, 0, 0, IFACE_IO_URING, false, true))
			return 0;
	} else if (!submit(&rec, img->slot, op, BPF_CORE_READ(rw, kiocb.ki_pos), io_uring_len(req, opcode),
			   IFACE_IO_URING, dsync, true)) {
		return 0;
	}
	if (bpf_map_update_elem(&inflight_uring, &key, &rec, BPF_ANY))
		drop(DROP_INFLIGHT_FULL);
	return 0;
}

/* The tracepoint is io_uring_submit_req since v6.2 (commit 2b8e976b9842), io_uring_submit_sqe before. */
SEC("tp_btf/io_uring_submit_req")
int io_uring_submit(u64 *ctx)
{
	return uring_submit((struct io_kiocb *)ctx[0]);
}

SEC("tp_btf/io_uring_submit_sqe")
int io_uring_submit_sqe(u64 *ctx)
{
	return uring_submit((struct io_kiocb *)ctx[0]);
}

/*
 * The completion of a request in inflight_uring, whichever mode put it
 * there: the CQE's result is the whole request's.
 * io_uring_complete(ctx, req, cqe) since v6.14; before,
 * io_uring_complete(ctx, req, user_data, res, cflags, extra1, extra2).
 * User space reads the running kernel's prototype and sets this.
 */
volatile const u32 io_uring_complete_has_cqe = 1;

SEC("tp_btf/io_uring_complete")
int io_uring_done(u64 *ctx)
{
	u64 key = ctx[1];
	struct inflight *rec = bpf_map_lookup_elem(&inflight_uring, &key);
	s64 res;

	if (!rec)
		return 0;
	if (io_uring_complete_has_cqe)
		res = BPF_CORE_READ((struct io_uring_cqe *)ctx[2], res);
	else
		res = (s32)ctx[3];
	complete(rec, res);
	bpf_map_delete_elem(&inflight_uring, &key);
	return 0;
}

/*
 * io_uring_queue_async_work(req, rw): a request goes to an io-wq worker, on
 * a hook of its own in every mode. The file is the request's once an
 * attempt has been made (io_assign_file at issue): the punts that matter,
 * a no-wait attempt that could not go on, are found by the file's super
 * block and the one lookup, before or without any record of the request
 * (the tracepoint mode sees no attempt that fails before iomap). A request
 * forced to a worker before any attempt (IOSQE_ASYNC) has no file yet and
 * is not counted.
 */
SEC("tp_btf/io_uring_queue_async_work")
int io_uring_punt(u64 *ctx)
{
	struct io_kiocb *req = (void *)ctx[0];
	struct file *f = req->file;
	struct image_ref *img;
	struct counters *st;
	u32 slot;

	if (!f)
		return 0;
	img = followed_image(f->f_inode);
	if (!img)
		return 0;
	slot = img->slot;
	st = bpf_map_lookup_elem(&disk_stats, &slot);
	if (st)
		inc(&st->io_uring_punted, 1);
	return 0;
}

/*
 * Registration: user space lists fds of its own (the images it holds open)
 * in registrations and reads this iterator once; for each listed fd it
 * reports the inode, the key the image is tracked by, and its super block,
 * for the first filter of the file-system hooks. No hook on any system call.
 */
SEC("iter/task_file")
int register_image(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *f = ctx->file;
	struct registration *r;
	u32 fd = ctx->fd;

	if (!task || !f || task->tgid != self_tgid)
		return 0;
	r = bpf_map_lookup_elem(&registrations, &fd);
	if (!r)
		return 0;
	r->inode = (u64)f->f_inode;
	r->sb = (u64)f->f_inode->i_sb;
	r->ino = f->f_inode->i_ino;
	return 0;
}
