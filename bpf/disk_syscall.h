/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The syscall mode of disk.bpf.c: QEMU's requests followed on the system
 * call tracepoints it issues them with: pread64/pwrite64/preadv/pwritev(2)
 * from its worker threads (aio=threads), io_submit (aio=native) with iomap
 * for the completion, fdatasync/fsync for guest flushes and fallocate for
 * discards and write-zeroes.
 *
 * It sees every request whatever the host file system, and costs the whole
 * host: enabling any syscall tracepoint sets the tracing work flag on every
 * thread (kernel/tracepoint.c syscall_regfunc), so every system call of
 * every process takes the traced slow path. User space loads it only when
 * asked for (--probe.mode=syscall).
 */
#ifndef FSPAIR_DISK_SYSCALL_H
#define FSPAIR_DISK_SYSCALL_H

#include "disk.h"

/* The file is open for direct I/O: its reads and writes bypass the host page cache. */
static __always_inline bool file_direct(struct file *f)
{
	return BPF_CORE_READ(f, f_flags) & O_DIRECT;
}

/* A synchronous call on an fd entered: follow it if the fd is a tracked image. */
static __always_inline int call_enter(u32 fd, u8 op, u64 pos, u64 len, bool dsync_call)
{
	struct inflight rec = {};
	struct image_ref *img;
	struct file *f;
	u64 inode;
	bool dsync;

	if (!task_followed(bpf_get_current_pid_tgid() >> 32))
		return 0;
	f = fd_file(fd);
	img = file_image(f);
	if (!img)
		return 0;
	inode = (u64)BPF_CORE_READ(f, f_inode);
	dsync = op == OP_WRITE && (dsync_call || (BPF_CORE_READ(f, f_flags) & (O_DSYNC | __O_SYNC)));
	if (!submit(&rec, img->slot, op, pos, len, IFACE_SYSCALL, dsync, true))
		return 0;
	if (op == OP_FLUSH && !rec.format)
		flush_window_open(&rec, f);
	call_park(&rec, inode, 0, (op == OP_READ || op == OP_WRITE) && file_direct(f));
	return 0;
}

static __always_inline int call_exit(struct syscall_exit_ctx *ctx)
{
	struct io_task *t;

	if (!task_followed(bpf_get_current_pid_tgid() >> 32))
		return 0;
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
	if (!t || !t->call.start_ns)
		return 0;
	call_finish(t, ctx->ret);
	t->dio_owner = 0; /* a synchronous call's bios are all done */
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_pread64")
int pread64_enter(struct syscall_enter_ctx *ctx)
{
	return call_enter(ctx->args[0], OP_READ, ctx->args[3], ctx->args[2], false);
}

SEC("tracepoint/syscalls/sys_exit_pread64")
int pread64_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

SEC("tracepoint/syscalls/sys_enter_pwrite64")
int pwrite64_enter(struct syscall_enter_ctx *ctx)
{
	return call_enter(ctx->args[0], OP_WRITE, ctx->args[3], ctx->args[2], false);
}

SEC("tracepoint/syscalls/sys_exit_pwrite64")
int pwrite64_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

/*
 * preadv(fd, vec, vlen, pos_l, pos_h): on 64-bit kernels pos_l holds the
 * whole offset (fs/read_write.c pos_from_hilo). The byte count is summed from
 * the iovecs only for calls on tracked images, after the cheap filters.
 */
static __always_inline int vec_enter(struct syscall_enter_ctx *ctx, u8 op, u64 rwf)
{
	u64 id = bpf_get_current_pid_tgid();
	struct inflight rec = {}; /* rec.dev stays 0: only flushes open a flush window */
	struct image_ref *img;
	struct file *f;
	u64 len, inode;
	bool dsync;

	if (!task_followed(id >> 32))
		return 0;
	f = fd_file(ctx->args[0]);
	img = file_image(f);
	if (!img)
		return 0;
	inode = (u64)BPF_CORE_READ(f, f_inode);
	len = iov_bytes((const struct iovec *)ctx->args[1], ctx->args[2]);
	dsync = op == OP_WRITE &&
		((rwf & (RWF_DSYNC | RWF_SYNC)) || (BPF_CORE_READ(f, f_flags) & (O_DSYNC | __O_SYNC)));
	if (submit(&rec, img->slot, op, ctx->args[3], len, IFACE_SYSCALL, dsync, true))
		call_park(&rec, inode, 0, file_direct(f));
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_preadv")
int preadv_enter(struct syscall_enter_ctx *ctx)
{
	return vec_enter(ctx, OP_READ, 0);
}

SEC("tracepoint/syscalls/sys_exit_preadv")
int preadv_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

SEC("tracepoint/syscalls/sys_enter_pwritev")
int pwritev_enter(struct syscall_enter_ctx *ctx)
{
	return vec_enter(ctx, OP_WRITE, 0);
}

SEC("tracepoint/syscalls/sys_exit_pwritev")
int pwritev_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

SEC("tracepoint/syscalls/sys_enter_preadv2")
int preadv2_enter(struct syscall_enter_ctx *ctx)
{
	return vec_enter(ctx, OP_READ, ctx->args[5]);
}

SEC("tracepoint/syscalls/sys_exit_preadv2")
int preadv2_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

SEC("tracepoint/syscalls/sys_enter_pwritev2")
int pwritev2_enter(struct syscall_enter_ctx *ctx)
{
	return vec_enter(ctx, OP_WRITE, ctx->args[5]);
}

SEC("tracepoint/syscalls/sys_exit_pwritev2")
int pwritev2_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

SEC("tracepoint/syscalls/sys_enter_fdatasync")
int fdatasync_enter(struct syscall_enter_ctx *ctx)
{
	return call_enter(ctx->args[0], OP_FLUSH, 0, 0, false);
}

SEC("tracepoint/syscalls/sys_exit_fdatasync")
int fdatasync_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

SEC("tracepoint/syscalls/sys_enter_fsync")
int fsync_enter(struct syscall_enter_ctx *ctx)
{
	return call_enter(ctx->args[0], OP_FLUSH, 0, 0, false);
}

SEC("tracepoint/syscalls/sys_exit_fsync")
int fsync_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

/*
 * fallocate(fd, mode, offset, len): QEMU punches holes for guest discards
 * (discard=unmap) and for write-zeroes that may unmap, uses ZERO_RANGE for
 * other write-zeroes (qcow2 cluster allocation), and plain allocation for
 * preallocation.
 */
SEC("tracepoint/syscalls/sys_enter_fallocate")
int fallocate_enter(struct syscall_enter_ctx *ctx)
{
	u64 mode = ctx->args[1];
	u8 op = OP_ALLOCATE;

	if (mode & FALLOC_FL_PUNCH_HOLE)
		op = OP_DISCARD;
	else if (mode & FALLOC_FL_ZERO_RANGE)
		op = OP_WRITE_ZEROES;
	return call_enter(ctx->args[0], op, ctx->args[2], ctx->args[3], false);
}

SEC("tracepoint/syscalls/sys_exit_fallocate")
int fallocate_exit(struct syscall_exit_ctx *ctx)
{
	return call_exit(ctx);
}

/*
 * aio=native: QEMU hands iocbs to io_submit(2) and reaps completions from the
 * shared ring without a system call, so the end of a request is seen in the
 * file system: ext4, XFS and Btrfs run direct I/O through iomap, whose
 * tracepoints carry the kernel's kiocb, embedded in struct aio_kiocb whose
 * ki_res.obj holds the user iocb pointer (fs/aio.c io_submit_one). A request
 * the file system does not do as direct I/O (Btrfs falls back to buffered
 * writes for checksummed files since v6.15 and in Debian's 6.12, and any file system may return
 * -ENOTBLK) is done inside io_submit and completes when the call returns.
 *
 * io_submit entry: every iocb on a tracked image is accounted and parked in
 * aio_pending. iomap_dio_rw_begin moves it to inflight_aio by kiocb;
 * iomap_dio_complete completes it (or, on -ENOTBLK, parks it again). At
 * io_submit exit, what is still parked was done synchronously: complete it;
 * iocbs the call did not accept are dropped from the accounting.
 */
#define AIO_BATCH_MAX 512 /* iocbs looked at per io_submit call */
#define IOCB_CMD_PREAD 0
#define IOCB_CMD_PWRITE 1
#define IOCB_CMD_PREADV 7
#define IOCB_CMD_PWRITEV 8

struct aio_walk {
	u64 iocbpp;
	u32 tgid;
	s64 ret; /* exit: iocbs accepted */
	u64 now;
};

static long aio_submit_one(u64 i, void *data)
{
	struct aio_walk *w = data;
	struct aio_key key = { .tgid = w->tgid };
	struct iocb cb = {};
	struct inflight rec;
	struct image_ref *img;
	u64 len;
	u8 op;

	if (bpf_probe_read_user(&key.iocb, sizeof(key.iocb), (void *)(w->iocbpp + i * 8)) ||
	    bpf_probe_read_user(&cb, sizeof(cb), (void *)key.iocb))
		return 0;
	switch (cb.aio_lio_opcode) {
	case IOCB_CMD_PREAD:
	case IOCB_CMD_PREADV:
		op = OP_READ;
		break;
	case IOCB_CMD_PWRITE:
	case IOCB_CMD_PWRITEV:
		op = OP_WRITE;
		break;
	default:
		return 0;
	}
	img = file_image(fd_file(cb.aio_fildes));
	if (!img)
		return 0;
	len = cb.aio_nbytes;
	if (cb.aio_lio_opcode == IOCB_CMD_PREADV || cb.aio_lio_opcode == IOCB_CMD_PWRITEV)
		len = iov_bytes((const struct iovec *)cb.aio_buf, cb.aio_nbytes);
	if (!submit(&rec, img->slot, op, cb.aio_offset, len, IFACE_LINUX_AIO,
		    cb.aio_rw_flags & (RWF_DSYNC | RWF_SYNC), true))
		return 0;
	rec.tgid = w->tgid;
	if (bpf_map_update_elem(&aio_pending, &key, &rec, BPF_ANY))
		drop(DROP_INFLIGHT_FULL);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_io_submit")
int io_submit_enter(struct syscall_enter_ctx *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	struct aio_call call = { .iocbpp = ctx->args[2], .nr = ctx->args[1] };
	struct aio_walk w = { .iocbpp = ctx->args[2], .tgid = id >> 32 };

	if (!task_followed(id >> 32) || (s64)call.nr <= 0)
		return 0;
	if (call.nr > AIO_BATCH_MAX)
		call.nr = AIO_BATCH_MAX;
	bpf_loop(call.nr, aio_submit_one, &w, 0);
	bpf_map_update_elem(&aio_calls, &id, &call, BPF_ANY);
	return 0;
}

/*
 * A linux-aio request accepted by io_submit where iomap's direct I/O is not
 * traced: counted now, untimed, and classified by its file's O_DIRECT (its
 * user iocb read again: this only runs on kernels before 6.3).
 */
static __always_inline void aio_untraced_done(struct inflight *rec, u64 user_iocb)
{
	struct iocb cb = {};
	struct counters *st;
	struct file *f;
	u32 slot = rec->slot;

	rec->timed = 0;
	complete(rec, rec->len);
	if (rec->format || bpf_probe_read_user(&cb, sizeof(cb), (void *)user_iocb))
		return;
	f = fd_file(cb.aio_fildes);
	if (!f || !file_direct(f))
		return;
	st = bpf_map_lookup_elem(&disk_stats, &slot);
	if (st)
		cache_direct(st, rec->op, rec->len);
}

static long aio_finish_one(u64 i, void *data)
{
	struct aio_walk *w = data;
	struct aio_key key = { .tgid = w->tgid };
	struct inflight *rec;
	struct seek_state *sk;
	u32 slot;

	if (bpf_probe_read_user(&key.iocb, sizeof(key.iocb), (void *)(w->iocbpp + i * 8)))
		return 0;
	rec = bpf_map_lookup_elem(&aio_pending, &key);
	if (!rec)
		return 0;
	if ((s64)i < w->ret) {
		/*
		 * Done in the call (a buffered fallback), or, where iomap's
		 * direct I/O is not traced, accepted: counted now, untimed.
		 */
		if (!aio_dio_traced)
			aio_untraced_done(rec, key.iocb);
		else
			complete(rec, rec->len);
	} else if (!rec->format) {
		/* Not accepted by the kernel: it never became a request. */
		slot = rec->slot;
		sk = bpf_map_lookup_elem(&disk_seek, &slot);
		if (sk)
			inc(&sk->inflight, -1);
	}
	bpf_map_delete_elem(&aio_pending, &key);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_io_submit")
int io_submit_exit(struct syscall_exit_ctx *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	struct aio_call *call = bpf_map_lookup_elem(&aio_calls, &id);
	struct aio_walk w = { .tgid = id >> 32, .ret = ctx->ret };

	if (!call)
		return 0;
	/* The last request the call began, if it stayed inside (see aio_call_begins). */
	aio_call_ended(bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0), 0);
	w.iocbpp = call->iocbpp;
	bpf_loop(call->nr, aio_finish_one, &w, 0);
	bpf_map_delete_elem(&aio_calls, &id);
	return 0;
}

/* The user iocb behind a kernel kiocb of linux-aio (struct aio_kiocb.rw is its first member). */
static __always_inline u64 aio_user_iocb(struct kiocb *iocb)
{
	struct aio_kiocb *req = (void *)iocb;

	return BPF_CORE_READ(req, ki_res.obj);
}

/*
 * Direct I/O on an image begins. The thread is marked with the image it
 * works on (host.bpf.c tags its bios with it: direct I/O pages are the
 * VMM's memory and name no inode) and its synchronous call, if any, is
 * known to bypass the host page cache. A linux-aio request parked at
 * io_submit moves to inflight_aio, where its completion will find it.
 */
SEC("tp_btf/iomap_dio_rw_begin")
int iomap_dio_begin(u64 *ctx)
{
	struct kiocb *iocb = (void *)ctx[0];
	struct task_struct *task = bpf_get_current_task_btf();
	u64 inode = (u64)iocb->ki_filp->f_inode, id, kio = (u64)iocb;
	struct image_ref *img = image_of(inode, iocb->ki_filp->f_inode->i_ino);
	struct aio_key key = {};
	struct inflight *rec;
	struct io_task *t;
	u32 slot;

	id = bpf_get_current_pid_tgid();
	if (!img || !vmm_thread(img)) {
		/* Clear a mark left from an image, keep untouched tasks free of storage. */
		t = bpf_task_storage_get(&io_tasks, task, 0, 0);
		if (t)
			t->dio_owner = 0;
		return 0;
	}
	slot = img->slot;
	t = bpf_task_storage_get(&io_tasks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t) {
		t->dio_owner = slot + 1;
		if (t->call.start_ns && t->call.slot == slot)
			t->cause |= CAUSE_DIRECT;
	}

	if (!aio_dio_traced || !bpf_map_lookup_elem(&aio_calls, &id))
		return 0;
	key.tgid = id >> 32;
	key.iocb = aio_user_iocb(iocb);
	rec = bpf_map_lookup_elem(&aio_pending, &key);
	/* Not parked: the request is in inflight_aio already, begun again (an XFS retry). */
	if (!rec)
		return 0;
	/* A new request: the thread's previous one, if still inside its call, was done there. */
	aio_call_ended(t, 0);
	aio_kiocb_again(kio, rec->pos, rec->op, true);
	aio_call_begins(rec, kio, t);
	if (bpf_map_update_elem(&inflight_aio, &kio, rec, BPF_ANY)) {
		drop(DROP_INFLIGHT_FULL);
		return 0;
	}
	bpf_map_delete_elem(&aio_pending, &key);
	inc(&aio_in_direct_io, 1);
	return 0;
}

/*
 * The submitter returns from an asynchronous direct I/O: its bios are out.
 * A synchronous one keeps the mark until the thread's next iomap direct I/O
 * (clearing at iomap_dio_complete would race with completions in interrupt
 * context on top of another submitter); host.bpf.c tags only bios on
 * followed devices, so a stale mark can only touch a host FS device's
 * direct I/O that bypasses iomap.
 */
SEC("tp_btf/iomap_dio_rw_queued")
int iomap_dio_queued(u64 *ctx)
{
	struct io_task *t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);

	if (t)
		t->dio_owner = 0;
	aio_call_queued(t);
	return 0;
}

static __always_inline void iomap_dio_done_body(u64 *ctx)
{
	u64 kio = ctx[0];
	s64 error = (s32)ctx[1];
	s64 ret = (s64)ctx[2];
	struct inflight *rec;
	struct aio_key key = {};

	/* Every direct I/O completes here; only linux-aio requests are looked up. */
	if (!aio_in_direct_io)
		return;
	rec = bpf_map_lookup_elem(&inflight_aio, &kio);
	if (!rec)
		return;
	if (error == -ENOTBLK || error == -EAGAIN) {
		/*
		 * The file system goes on within the call: -ENOTBLK falls back to
		 * buffered I/O, -EAGAIN retries (XFS tries a sub-block write
		 * under the shared lock first, then again under the exclusive
		 * one: a second iomap_dio_rw_begin picks the request up). QEMU
		 * does not submit RWF_NOWAIT, whose -EAGAIN would be final.
		 */
		key.iocb = aio_user_iocb((void *)kio);
		key.tgid = rec->tgid;
		bpf_map_update_elem(&aio_pending, &key, rec, BPF_ANY);
		if (bpf_map_delete_elem(&inflight_aio, &kio) == 0 && aio_in_direct_io)
			inc(&aio_in_direct_io, -1);
		return;
	}
	/* Less than asked inside its call: the file system may go on (see aio_call_begins). */
	if (error >= 0 && ret >= 0 && ret < (s64)rec->len && rec->tid == (u32)bpf_get_current_pid_tgid())
		return;
	aio_done(rec, kio, error < 0 ? error : ret, true);
}

SEC("tp_btf/iomap_dio_complete")
int iomap_dio_done(u64 *ctx)
{
	iomap_dio_done_body(ctx);
	return 0;
}

/* The same completion, a second program: see dio_done_nested. */
SEC("tp_btf/iomap_dio_complete")
int iomap_done_nested(u64 *ctx)
{
	iomap_dio_done_body(ctx);
	return 0;
}

#endif /* FSPAIR_DISK_SYSCALL_H */
