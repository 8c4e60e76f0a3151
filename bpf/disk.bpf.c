// SPDX-License-Identifier: GPL-2.0
/*
 * disk: the request stream a VM issues on its disk image file.
 *
 * QEMU turns each guest request into a system call or an asynchronous
 * submission on the image file: pread64/pwrite64/preadv/pwritev(2) from its
 * worker threads (aio=threads), io_submit (aio=native), io_uring (aio=io_uring),
 * fdatasync/fsync for guest flushes and fallocate for discards and
 * write-zeroes. These programs follow all of them on tracepoints only, match
 * the file to a tracked image by its inode, and aggregate per disk in the
 * kernel; user space reads the maps at scrape time.
 *
 * Identity: user space holds each image open, so its struct inode cannot be
 * evicted and the inode's address is a stable key for the file. It also holds
 * across Btrfs subvolumes, whose st_dev does not name the super block.
 *
 * Concurrency: the per-disk counters are updated with atomic adds. The seek
 * state (last request end, the ring of the last 16 ends, the flush epoch) is
 * updated without a lock because tracing programs cannot take bpf_spin_lock;
 * two requests on the same disk at the same instant on two CPUs may see each
 * other's half-written state. This only blurs the order of requests that were
 * concurrent in the first place; counts and bytes stay exact.
 */
#include "call.h"

char LICENSE[] SEC("license") = "GPL";

/* Disks tracked at once; user space may raise it before load (--bpf.max-disks). */
#define MAX_DISKS 1024
/* Image files (a disk's image plus a margin for replaced files kept until their last close). */
#define MAX_IMAGES (MAX_DISKS * 2)
/* Requests in flight on tracked images at once, across all disks. */
#define MAX_INFLIGHT 16384
/* qcow2 metadata clusters marked across all qcow2 disks. */
#define MAX_FORMAT_CLUSTERS 262144
/* The seek history: the closest of the last 16 requests, as vscsiStats measures it. */
#define SEEK_HISTORY 16
/* The most iovec entries a vectored call may carry (UIO_MAXIOV). */
#define MAX_IOV 1024

/* How QEMU issued the request, the `interface` label. */
enum iface {
	IFACE_SYSCALL,
	IFACE_LINUX_AIO,
	IFACE_IO_URING,
	IFACE_MAX,
};
/* submissions[] is sized to a power of two so that a mask bounds the index. */
#define IFACE_SLOTS 4

/* How writes became synchronous, the `mode` label. */
enum sync_mode {
	SYNC_DSYNC, /* O_DSYNC/O_SYNC on the file, RWF_DSYNC/RWF_SYNC or IOCB_DSYNC per request */
	SYNC_FLUSH, /* in a flush epoch of at most SYNC_EPOCH_MAX writes */
	SYNC_MAX,
};

/*
 * A write counts as synchronous by flush when the flush that ends its epoch
 * covers at most this many writes: an fsync() in the guest sends its data, a
 * journal transaction (descriptor, blocks, commit) and a flush; a streaming
 * writer sends many writes per flush.
 */
#define SYNC_EPOCH_MAX 4

/*
 * What the host page cache did for a synchronous read or write, the
 * `result` label: a read was a hit (no device read queued by the call) or a
 * miss; a buffered write's bytes were absorbed (landed on pages already
 * dirty, so writeback sends them once for several writes) or dirtied clean
 * pages; direct I/O bypassed the cache.
 */
enum cache_result {
	CACHE_HIT,	/* reads: hit; writes: absorbed */
	CACHE_MISS,	/* reads: miss; writes: dirtied */
	CACHE_DIRECT,
	CACHE_MAX,
};
#define CACHE_SLOTS 4

/* Histogram shapes: slot counts include the +Inf bucket. */
#define LAT_SLOTS 25  /* latency, le = 2^k microseconds, k = 0..23 (1 us .. 8.4 s) */
#define SIZE_SLOTS 16 /* request size, le = 512 * 2^k bytes, k = 0..14 (512 B .. 8 MiB) */
#define SEEK_SLOTS 29 /* signed seek distance, see seek_bucket() */
#define QD_SLOTS 10   /* outstanding requests at issue, le = 2^k, k = 0..8 */
#define IAT_SLOTS 25  /* inter-arrival time, like latency */

/* The value of disk_stats: every counter and histogram of one disk. */
struct counters {
	u64 requests[OP_MAX];		/* completed without error */
	u64 bytes[OP_MAX];		/* bytes completed (discard/write_zeroes: range length) */
	u64 errors[OP_MAX];		/* completed with an error */
	u64 latency_sum_ns[OP_MAX];
	u64 latency[OP_MAX][LAT_SLOTS];
	u64 size[2][SIZE_SLOTS];	/* reads, writes at submission */
	u64 size_sum[2];
	u64 seek_prev[SEEK_SLOTS];	/* distance from the end of the previous request */
	u64 seek_near[SEEK_SLOTS];	/* distance from the closest of the last 16 ends */
	s64 seek_prev_sum;
	s64 seek_near_sum;
	u64 sequential[2];		/* reads, writes */
	u64 random[2];
	u64 sync_writes[SYNC_MAX];
	u64 outstanding[QD_SLOTS];
	u64 outstanding_sum;
	u64 interarrival[IAT_SLOTS];
	u64 interarrival_sum_ns;
	u64 submissions[IFACE_SLOTS];
	u64 format_requests[2];		/* qcow2 metadata reads, writes */
	u64 format_bytes[2];
	u64 io_uring_punted;		/* io_uring requests handed to io-wq workers */
	/* Synchronous reads and writes by what the host page cache did, by enum cache_result. */
	u64 cache_reads[CACHE_SLOTS];
	u64 cache_read_bytes[CACHE_SLOTS];
	u64 cache_write_bytes[CACHE_SLOTS];
};

/* The value of disk_seek: submission-order state of one disk. */
struct seek_state {
	u64 last_end;
	u64 last_submit_ns;
	u64 recent_end[SEEK_HISTORY];
	u64 recent_count;
	s64 inflight;
	u64 writes_since_flush;
};

/* Flags of disk_config. */
#define DISK_ACTIVE 1
#define DISK_QCOW2 2

/* The value of disk_config: what user space knows of a disk. */
struct image_config {
	u32 flags;
	u32 cluster_bits; /* qcow2 cluster size, log2 */
};

/* Key of format_clusters: a qcow2 metadata cluster of a disk. */
struct format_cluster {
	u32 slot;
	u32 pad;
	u64 cluster;
};

/* Key of aio_pending: a user-space iocb of a process. */
struct aio_key {
	u64 iocb;
	u32 tgid;
	u32 pad;
};

/* Value of aio_calls: an io_submit(2) in progress. */
struct aio_call {
	u64 iocbpp;
	u64 nr;
};

/* Key 0 of registration: user space asks for the inode behind one of its fds. */
struct registration_req {
	u64 inode;
	u32 pending;
	u32 pad;
};

/* Image inode (kernel address) -> disk slot. Written by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_IMAGES);
	__type(key, u64);
	__type(value, u32);
} disk_by_inode SEC(".maps");

/* Disk slot -> counters and histograms; read at scrape. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_DISKS);
	__type(key, u32);
	__type(value, struct counters);
} disk_stats SEC(".maps");

/* Disk slot -> submission-order state. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_DISKS);
	__type(key, u32);
	__type(value, struct seek_state);
} disk_seek SEC(".maps");

/* Disk slot -> configuration from user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_DISKS);
	__type(key, u32);
	__type(value, struct image_config);
} disk_config SEC(".maps");

/* qcow2 metadata clusters per disk, from the image's L1 and refcount tables. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FORMAT_CLUSTERS);
	__type(key, struct format_cluster);
	__type(value, u8);
} format_clusters SEC(".maps");

/* Processes whose requests are followed (VMM tgids); all when track_all_tasks. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_DISKS);
	__type(key, u32);
	__type(value, u8);
} vmm_tgids SEC(".maps");


/* io_uring requests in flight, by struct io_kiocb. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, u64);
	__type(value, struct inflight);
} inflight_uring SEC(".maps");

/* linux-aio requests submitted but not yet in direct I/O, by (tgid, user iocb). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, struct aio_key);
	__type(value, struct inflight);
} aio_pending SEC(".maps");

/* linux-aio requests in direct I/O, by struct kiocb. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, u64);
	__type(value, struct inflight);
} inflight_aio SEC(".maps");

/* Threads inside io_submit(2) of a followed process: the call's iocb array. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, u64);
	__type(value, struct aio_call);
} aio_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct registration_req);
} registration SEC(".maps");

/* The exporter's own tgid: only its registration calls are looked at. */
volatile const u32 self_tgid = 0;
/*
 * linux-aio requests in inflight_aio: while none are, direct I/O
 * completions skip the lookup. An entry the LRU evicts leaves the count
 * high, which only costs that lookup.
 */
u64 aio_in_direct_io = 0;
/* Set by user space when a tracked disk has no known VMM process (static config without pid). */
u32 track_all_tasks = 0;

/* File flags (include/uapi/asm-generic/fcntl.h) and per-call flags (include/uapi/linux/fs.h). */
#define O_DSYNC 00010000
#define __O_SYNC 04000000
#define RWF_DSYNC 0x2
#define RWF_SYNC 0x4
/* include/linux/fs.h: IOCB_DSYNC/IOCB_SYNC equal RWF_DSYNC/RWF_SYNC since v5.19 (commit ce71bfea207b). */
#define IOCB_DSYNC RWF_DSYNC
#define IOCB_SYNC RWF_SYNC
/* include/uapi/linux/falloc.h */
#define FALLOC_FL_PUNCH_HOLE 0x02
#define FALLOC_FL_ZERO_RANGE 0x10
/* include/uapi/linux/io_uring.h opcodes (UAPI, fixed). */
#define IORING_OP_READV 1
#define IORING_OP_WRITEV 2
#define IORING_OP_FSYNC 3
#define IORING_OP_READ_FIXED 4
#define IORING_OP_WRITE_FIXED 5
#define IORING_OP_READ 22
#define IORING_OP_WRITE 23
/* io_uring/io_uring.h: REQ_F_FIXED_FILE is bit 0 of io_kiocb.flags. */
#define REQ_F_FIXED_FILE 1ULL

static __always_inline bool task_followed(u32 tgid)
{
	return track_all_tasks || bpf_map_lookup_elem(&vmm_tgids, &tgid);
}

/*
 * The struct file behind fd in the current task's file table. The task is
 * a BTF pointer, so the walk to the table is plain loads; only the array
 * slot and the file need probe reads.
 */
static __always_inline struct file *fd_file(u32 fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = task->files->fdt;
	struct file *f = NULL;

	if (fd >= fdt->max_fds)
		return NULL;
	bpf_probe_read_kernel(&f, sizeof(f), &fdt->fd[fd]);
	return f;
}

/* The disk slot of a file, or NULL when the file is not a tracked image. */
static __always_inline u32 *file_slot(struct file *f)
{
	u64 inode;

	if (!f)
		return NULL;
	inode = (u64)BPF_CORE_READ(f, f_inode);
	return bpf_map_lookup_elem(&disk_by_inode, &inode);
}

/*
 * Signed seek distance buckets. Magnitudes step by 4x from 4 KiB to 64 GiB
 * (4K, 16K, 64K, 256K, 1M ...):
 * B_k = 4096 * 4^k, k = 0..12. Slots and their upper bounds (le):
 *   0..12  le = -B_(12-slot)   (|d| in [B_k, B_k+1), the farthest first)
 *   13     le = -1             (-4 KiB < d < 0)
 *   14     le = 0              (d == 0: exactly sequential)
 *   15..27 le = B_(slot-15)    (d in (B_k-1, B_k])
 *   28     +Inf
 */
static __always_inline u32 seek_bucket(s64 d)
{
	u64 a;
	u32 k;

	if (d == 0)
		return 14;
	if (d < 0) {
		a = -d;
		if (a < 4096)
			return 13;
		k = (log2_u64(a) - 12) / 2; /* largest k with B_k <= a */
		return k > 12 ? 0 : 12 - k;
	}
	a = d;
	if (a <= 4096)
		return 15;
	k = (log2_u64(a - 1) + 1 - 12 + 1) / 2; /* smallest k with a <= B_k */
	return k > 12 ? 28 : 15 + k;
}

static __always_inline u64 abs_s64(s64 v)
{
	return v < 0 ? -v : v;
}

/* Is this request on a qcow2 metadata cluster of its disk? */
static __always_inline bool format_metadata(u32 slot, u64 pos)
{
	struct image_config *cfg = bpf_map_lookup_elem(&disk_config, &slot);
	struct format_cluster key = {};

	if (!cfg || !(cfg->flags & DISK_QCOW2) || cfg->cluster_bits < 9 || cfg->cluster_bits > 21)
		return false;
	key.slot = slot;
	key.cluster = pos >> (cfg->cluster_bits & 31);
	return bpf_map_lookup_elem(&format_clusters, &key) != NULL;
}

/*
 * Account a request at submission: shape histograms, sequential/random,
 * synchronous writes, outstanding count and inter-arrival. Fills rec.
 * Returns false if the request is not to be followed further.
 */
static __always_inline bool submit(struct inflight *rec, u32 slot, u8 op, u64 pos, u64 len,
				   u8 iface, bool dsync)
{
	struct counters *st;
	struct seek_state *sk;
	u64 now = bpf_ktime_get_ns(), prev, best = ~0ULL, end = pos + len, n;
	s64 d, dbest = 0;
	u32 i, dir;

	st = bpf_map_lookup_elem(&disk_stats, &slot);
	sk = bpf_map_lookup_elem(&disk_seek, &slot);
	if (!st || !sk) {
		drop(DROP_BAD_SLOT);
		return false;
	}
	rec->start_ns = now;
	rec->len = len;
	rec->slot = slot;
	rec->op = op;
	rec->format = 0;

	if ((op == OP_READ || op == OP_WRITE) && format_metadata(slot, pos)) {
		rec->format = 1;
		return true;
	}

	inc(&st->submissions[bounded(iface, IFACE_SLOTS - 1)], 1);
	n = inc(&sk->inflight, 1) + 1;
	inc(&st->outstanding[pow2_bucket(n, QD_SLOTS)], 1);
	inc(&st->outstanding_sum, n);
	prev = sk->last_submit_ns;
	sk->last_submit_ns = now;
	if (prev && now > prev) {
		inc(&st->interarrival[pow2_bucket((now - prev + 999) / 1000, IAT_SLOTS)], 1);
		inc(&st->interarrival_sum_ns, now - prev);
	}

	if (op == OP_FLUSH) {
		n = __sync_lock_test_and_set(&sk->writes_since_flush, 0);
		if (n > 0 && n <= SYNC_EPOCH_MAX)
			inc(&st->sync_writes[SYNC_FLUSH], n);
		return true;
	}
	if (op != OP_READ && op != OP_WRITE)
		return true;
	dir = bounded(op, 1);

	inc(&st->size[dir][pow2_bucket((len + 511) / 512, SIZE_SLOTS)], 1);
	inc(&st->size_sum[dir], len);
	if (op == OP_WRITE) {
		if (dsync)
			inc(&st->sync_writes[SYNC_DSYNC], 1);
		else
			inc(&sk->writes_since_flush, 1);
	}

	/*
	 * Sequential rule: the request starts within its own length of the end
	 * of one of the last 16 requests on the disk. Distance 0 is a strict
	 * continuation; up to one request length absorbs the reordering of
	 * concurrent workers (request N+1 entering before N). The first request
	 * on a disk has no history and counts as random.
	 */
	n = sk->recent_count;
	for (i = 0; i < SEEK_HISTORY; i++) {
		if (i >= n)
			break;
		d = (s64)(pos - sk->recent_end[i]);
		if (abs_s64(d) < best) {
			best = abs_s64(d);
			dbest = d;
		}
	}
	if (n > 0) {
		d = (s64)(pos - sk->last_end);
		inc(&st->seek_prev[seek_bucket(d)], 1);
		inc(&st->seek_prev_sum, d);
		inc(&st->seek_near[seek_bucket(dbest)], 1);
		inc(&st->seek_near_sum, dbest);
	}
	if (n > 0 && best <= len)
		inc(&st->sequential[dir], 1);
	else
		inc(&st->random[dir], 1);

	sk->last_end = end;
	i = inc(&sk->recent_count, 1);
	sk->recent_end[i & (SEEK_HISTORY - 1)] = end;
	return true;
}

/* Account a completion: ret is bytes done (>= 0) or a negative errno. */
static __always_inline void complete(struct inflight *rec, s64 ret)
{
	u32 slot = rec->slot;
	u8 op = rec->op;
	struct counters *st = bpf_map_lookup_elem(&disk_stats, &slot);
	struct seek_state *sk = bpf_map_lookup_elem(&disk_seek, &slot);
	u64 lat, bytes;

	if (!st || !sk || op >= OP_MAX)
		return;
	if (rec->format) {
		if (ret > 0 && op < 2) {
			inc(&st->format_requests[op & 1], 1);
			inc(&st->format_bytes[op & 1], ret);
		}
		return;
	}
	inc(&sk->inflight, -1);
	if (ret < 0) {
		inc(&st->errors[op], 1);
		return;
	}
	/* fallocate returns 0: its bytes are the range it covered. */
	bytes = (op == OP_READ || op == OP_WRITE) ? (u64)ret : (op == OP_FLUSH ? 0 : rec->len);
	inc(&st->requests[op], 1);
	inc(&st->bytes[op], bytes);
	lat = bpf_ktime_get_ns() - rec->start_ns;
	inc(&st->latency_sum_ns[op], lat);
	inc(&st->latency[op][pow2_bucket((lat + 999) / 1000, LAT_SLOTS)], 1);
}

struct iov_sum {
	const struct iovec *vec;
	u64 total;
};

static long iov_sum_one(u64 i, void *data)
{
	struct iov_sum *s = data;
	struct iovec v = {};

	if (bpf_probe_read_user(&v, sizeof(v), &s->vec[i]))
		return 1;
	s->total += v.iov_len;
	return 0;
}

/* Bytes described by a user iovec array. */
static __always_inline u64 iov_bytes(const struct iovec *vec, u64 vlen)
{
	struct iov_sum s = { .vec = vec };

	if (vlen > MAX_IOV) {
		drop(DROP_IOV_TOO_LONG);
		return 0;
	}
	bpf_loop(vlen, iov_sum_one, &s, 0);
	return s.total;
}

/* Park a submitted synchronous call on an image inode in the thread's storage until its exit. */
static __always_inline void call_park(struct inflight *rec, u64 inode)
{
	struct io_task *t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0,
						 BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (!t) {
		drop(DROP_INFLIGHT_FULL);
		return;
	}
	t->call = *rec;
	t->inode = inode;
	t->dirtied = 0;
	t->cause = 0;
}

/*
 * A flush on an image opens its host file system's flush window: the
 * journal threads' writes while it is open are what the flush waits for.
 * Keyed by the super block's dev_t, which is the block device's for ext4
 * and XFS; Btrfs (an anonymous dev_t) writes its log tree in the flushing
 * thread itself, which host.bpf.c charges exactly.
 */
static __always_inline void flush_window_open(struct inflight *rec, struct file *f)
{
	struct flush_window *w, fresh = {};
	u32 dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);

	rec->dev = dev;
	w = bpf_map_lookup_elem(&flush_windows, &dev);
	if (!w) {
		fresh.start_ns = rec->start_ns;
		fresh.slot = rec->slot;
		fresh.waiters = 1;
		if (bpf_map_update_elem(&flush_windows, &dev, &fresh, BPF_NOEXIST) == 0)
			return;
		w = bpf_map_lookup_elem(&flush_windows, &dev);
		if (!w)
			return;
	}
	/* A window left open by a thread that died in its flush starts afresh. */
	if (rec->start_ns - w->start_ns > FLUSH_WINDOW_MAX_NS)
		w->waiters = 0;
	w->start_ns = rec->start_ns;
	w->slot = rec->slot;
	inc(&w->waiters, 1);
}

static __always_inline void flush_window_close(u32 dev)
{
	struct flush_window *w = bpf_map_lookup_elem(&flush_windows, &dev);

	if (w && w->waiters > 0)
		inc(&w->waiters, -1);
}

/* A synchronous call on an fd entered: follow it if the fd is a tracked image. */
static __always_inline int call_enter(u32 fd, u8 op, u64 pos, u64 len, bool dsync_call)
{
	struct inflight rec = {};
	struct file *f;
	u64 inode;
	u32 *slot;
	bool dsync;

	if (!task_followed(bpf_get_current_pid_tgid() >> 32))
		return 0;
	f = fd_file(fd);
	if (!f)
		return 0;
	inode = (u64)BPF_CORE_READ(f, f_inode);
	slot = bpf_map_lookup_elem(&disk_by_inode, &inode);
	if (!slot)
		return 0;
	dsync = op == OP_WRITE && (dsync_call || (BPF_CORE_READ(f, f_flags) & (O_DSYNC | __O_SYNC)));
	if (!submit(&rec, *slot, op, pos, len, IFACE_SYSCALL, dsync))
		return 0;
	if (op == OP_FLUSH && !rec.format)
		flush_window_open(&rec, f);
	call_park(&rec, inode);
	return 0;
}

/* A read or write of ret > 0 bytes that bypassed the host page cache. */
static __always_inline void cache_direct(struct counters *st, u8 op, s64 ret)
{
	if (op == OP_READ) {
		inc(&st->cache_reads[CACHE_DIRECT], 1);
		inc(&st->cache_read_bytes[CACHE_DIRECT], ret);
	} else if (op == OP_WRITE) {
		inc(&st->cache_write_bytes[CACHE_DIRECT], ret);
	}
}

/* What the host page cache did for a synchronous read or write that moved ret > 0 bytes. */
static __always_inline void cache_account(struct io_task *t, s64 ret)
{
	u32 slot = t->call.slot;
	struct counters *st = bpf_map_lookup_elem(&disk_stats, &slot);
	u64 dirtied;
	u32 r;

	if (!st || t->call.format)
		return;
	if (t->cause & CAUSE_DIRECT) {
		cache_direct(st, t->call.op, ret);
		return;
	}
	if (t->call.op == OP_READ) {
		r = (t->cause & CAUSE_DEVICE_READ) ? CACHE_MISS : CACHE_HIT;
		inc(&st->cache_reads[r], 1);
		inc(&st->cache_read_bytes[r], ret);
		return;
	}
	/* A partial-page write dirties a whole page: cap at the bytes written. */
	dirtied = t->dirtied < (u64)ret ? t->dirtied : (u64)ret;
	inc(&st->cache_write_bytes[CACHE_MISS], dirtied);
	inc(&st->cache_write_bytes[CACHE_HIT], ret - dirtied);
}

static __always_inline int call_exit(struct syscall_exit_ctx *ctx)
{
	struct io_task *t;

	if (!task_followed(bpf_get_current_pid_tgid() >> 32))
		return 0;
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
	if (!t || !t->call.start_ns)
		return 0;
	complete(&t->call, ctx->ret);
	if (ctx->ret > 0 && (t->call.op == OP_READ || t->call.op == OP_WRITE))
		cache_account(t, ctx->ret);
	if (t->call.dev)
		flush_window_close(t->call.dev);
	t->call.start_ns = 0;
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
	struct file *f;
	u32 *slot;
	u64 len, inode;
	bool dsync;

	if (!task_followed(id >> 32))
		return 0;
	f = fd_file(ctx->args[0]);
	if (!f)
		return 0;
	inode = (u64)BPF_CORE_READ(f, f_inode);
	slot = bpf_map_lookup_elem(&disk_by_inode, &inode);
	if (!slot)
		return 0;
	len = iov_bytes((const struct iovec *)ctx->args[1], ctx->args[2]);
	dsync = op == OP_WRITE &&
		((rwf & (RWF_DSYNC | RWF_SYNC)) || (BPF_CORE_READ(f, f_flags) & (O_DSYNC | __O_SYNC)));
	if (submit(&rec, *slot, op, ctx->args[3], len, IFACE_SYSCALL, dsync))
		call_park(&rec, inode);
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
 * writes for checksummed files since v6.15, and any file system may return
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
#define ENOTBLK 15
#define EAGAIN 11

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
	u32 *slot;
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
	slot = file_slot(fd_file(cb.aio_fildes));
	if (!slot)
		return 0;
	len = cb.aio_nbytes;
	if (cb.aio_lio_opcode == IOCB_CMD_PREADV || cb.aio_lio_opcode == IOCB_CMD_PWRITEV)
		len = iov_bytes((const struct iovec *)cb.aio_buf, cb.aio_nbytes);
	if (!submit(&rec, *slot, op, cb.aio_offset, len, IFACE_LINUX_AIO,
		    cb.aio_rw_flags & (RWF_DSYNC | RWF_SYNC)))
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
		complete(rec, rec->len); /* done in the call: buffered fallback */
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
	u32 *slot = bpf_map_lookup_elem(&disk_by_inode, &inode);
	struct aio_key key = {};
	struct inflight *rec;
	struct io_task *t;

	if (!slot) {
		/* Clear a mark left from an image, keep untouched tasks free of storage. */
		t = bpf_task_storage_get(&io_tasks, task, 0, 0);
		if (t)
			t->dio_owner = 0;
		return 0;
	}
	t = bpf_task_storage_get(&io_tasks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t) {
		t->dio_owner = *slot + 1;
		if (t->call.start_ns && t->call.slot == *slot)
			t->cause |= CAUSE_DIRECT;
	}

	id = bpf_get_current_pid_tgid();
	if (!bpf_map_lookup_elem(&aio_calls, &id))
		return 0;
	key.tgid = id >> 32;
	key.iocb = aio_user_iocb(iocb);
	rec = bpf_map_lookup_elem(&aio_pending, &key);
	if (!rec)
		return 0;
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
	return 0;
}

SEC("tp_btf/iomap_dio_complete")
int iomap_dio_done(u64 *ctx)
{
	u64 kio = ctx[0];
	s64 error = (s32)ctx[1];
	s64 ret = (s64)ctx[2];
	struct inflight *rec;
	struct aio_key key = {};

	/* Every direct I/O completes here; only linux-aio requests are looked up. */
	if (!aio_in_direct_io)
		return 0;
	rec = bpf_map_lookup_elem(&inflight_aio, &kio);
	if (!rec)
		return 0;
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
	} else {
		complete(rec, error < 0 ? error : ret);
		/* linux-aio in iomap direct I/O bypassed the host page cache. */
		if (error >= 0 && ret > 0 && !rec->format) {
			u32 slot = rec->slot;
			struct counters *st = bpf_map_lookup_elem(&disk_stats, &slot);

			if (st)
				cache_direct(st, rec->op, ret);
		}
	}
	if (bpf_map_delete_elem(&inflight_aio, &kio) == 0 && aio_in_direct_io)
		inc(&aio_in_direct_io, -1);
	return 0;
}

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
 * aio=io_uring: the request is traced where it is submitted, in the
 * submitting thread (so the fd resolves in its file table), and completed by
 * the same struct io_kiocb, wherever it ran: inline, after a poll, or punted
 * to an iou-wrk thread.
 */
SEC("tp_btf/io_uring_submit_req")
int io_uring_submit(u64 *ctx)
{
	struct io_kiocb *req = (void *)ctx[0];
	u64 id = bpf_get_current_pid_tgid();
	struct io_rw *rw = (void *)req;
	struct inflight rec;
	u64 key = (u64)req;
	u8 opcode, op;
	u32 *slot;
	bool dsync = false;

	if (!task_followed(id >> 32))
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
		op = OP_FLUSH;
		break;
	default:
		return 0;
	}
	if (BPF_CORE_READ(req, flags) & REQ_F_FIXED_FILE) {
		/* Registered files resolve through the ring's table; not followed yet. */
		drop(DROP_IO_URING_FIXED_FILE);
		return 0;
	}
	slot = file_slot(fd_file(BPF_CORE_READ(req, cqe.fd)));
	if (!slot)
		return 0;
	if (op == OP_FLUSH) {
		if (!submit(&rec, *slot, op, 0, 0, IFACE_IO_URING, false))
			return 0;
	} else if (!submit(&rec, *slot, op, BPF_CORE_READ(rw, kiocb.ki_pos), io_uring_len(req, opcode),
			   IFACE_IO_URING, dsync)) {
		return 0;
	}
	if (bpf_map_update_elem(&inflight_uring, &key, &rec, BPF_ANY))
		drop(DROP_INFLIGHT_FULL);
	return 0;
}

SEC("tp_btf/io_uring_complete")
int io_uring_done(u64 *ctx)
{
	u64 key = ctx[1];
	struct io_uring_cqe *cqe = (void *)ctx[2];
	struct inflight *rec = bpf_map_lookup_elem(&inflight_uring, &key);

	if (!rec)
		return 0;
	complete(rec, BPF_CORE_READ(cqe, res));
	bpf_map_delete_elem(&inflight_uring, &key);
	return 0;
}

SEC("tp_btf/io_uring_queue_async_work")
int io_uring_punt(u64 *ctx)
{
	u64 key = ctx[0];
	struct inflight *rec = bpf_map_lookup_elem(&inflight_uring, &key);
	struct counters *st;
	u32 slot;

	if (!rec)
		return 0;
	slot = rec->slot;
	st = bpf_map_lookup_elem(&disk_stats, &slot);
	if (st)
		inc(&st->io_uring_punted, 1);
	return 0;
}

/*
 * Registration: user space calls fstatfs(2) on its own fd of an image with
 * registration.pending set; this reports the inode behind it. Only the
 * exporter's own calls are looked at.
 */
SEC("tracepoint/syscalls/sys_enter_fstatfs")
int register_image(struct syscall_enter_ctx *ctx)
{
	struct registration_req *r;
	struct file *f;
	u32 key = 0;

	if ((bpf_get_current_pid_tgid() >> 32) != self_tgid)
		return 0;
	r = bpf_map_lookup_elem(&registration, &key);
	if (!r || !r->pending)
		return 0;
	f = fd_file(ctx->args[0]);
	if (!f)
		return 0;
	r->inode = (u64)BPF_CORE_READ(f, f_inode);
	r->pending = 0;
	return 0;
}
