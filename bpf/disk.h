/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every attach mode of disk.bpf.c shares: the per-disk maps, the
 * bookkeeping of a request at submission and at completion, the thread
 * state of synchronous calls, and the filters that decide whether a request
 * is on a tracked image. The programs of each mode (disk_fentry.h,
 * disk_tracepoint.h, disk_syscall.h) only find the request's file, position,
 * length and result at their hook and hand them to submit() and complete(),
 * so a mode changes what the kernel pays, never what the counters mean.
 *
 * Identity: user space holds each image open, so its struct inode cannot be
 * evicted and the inode's address is a stable key for the file. It also holds
 * across Btrfs subvolumes, whose st_dev does not name the super block.
 *
 * Concurrency: the per-disk counters are updated with atomic adds. The seek
 * state (last request end, the ring of the last 16 ends, the submission
 * sequence) is updated without a lock because tracing programs cannot take
 * bpf_spin_lock; two requests on the same disk at the same instant on two
 * CPUs may see each other's half-written state. This only blurs the order of
 * requests that were concurrent in the first place; counts and bytes stay
 * exact.
 *
 * Cost: what every request pays is kept to its exact counters, which sit in
 * its operation's 128 bytes of the disk's counters (struct op_counters), one
 * bucket of its latency and of its size histogram, and the sequential rule
 * (the previous request's end first, the ring of 16 only when that misses).
 * What is only shape (seek distances, inter-arrival, outstanding) is counted
 * for one request in SHAPE_SAMPLE of each disk; the clock is read only for a
 * request whose latency is kept.
 */
#ifndef FSPAIR_DISK_H
#define FSPAIR_DISK_H

#include "call.h"

/* Requests in flight on tracked images at once, across all disks. */
#define MAX_INFLIGHT 16384
/* qcow2 metadata clusters marked across all qcow2 disks. */
#define MAX_FORMAT_CLUSTERS 262144
/* The seek history: the closest of the last 16 requests, as vscsiStats measures it. */
#define SEEK_HISTORY 16
/*
 * The shape histograms (seek distances, inter-arrival, outstanding) count
 * one request in SHAPE_SAMPLE of each disk, in submission order: a shape
 * needs a sample, not every request, and each sampled request costs eight
 * more atomic adds and the full scan of the seek history. Requests, bytes,
 * latency, size and the sequential/random counts stay per request. User
 * space may set every request (the probe package's tests do: they check
 * single requests' buckets).
 */
#define SHAPE_SAMPLE 8
volatile const u32 shape_sample_mask = SHAPE_SAMPLE - 1;
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

/*
 * The exact counters of one operation on one disk, together: a request adds
 * to these 128 bytes (two cache lines) and to one bucket of each of its
 * histograms, not to a dozen places across the disk's counters.
 */
struct op_counters {
	u64 requests;		/* completed without error */
	u64 bytes;		/* bytes completed (discard/write_zeroes: range length) */
	u64 latency_sum_ns;
	u64 size_sum;		/* reads, writes: bytes at submission */
	u64 sequential;		/* reads, writes */
	u64 random;
	u64 errors;		/* completed with an error */
	u64 dsync;		/* writes: synchronous by O_DSYNC/RWF_DSYNC (enum sync_mode SYNC_DSYNC) */
	/* Synchronous reads and writes by what the host page cache did, by enum cache_result. */
	u64 cache_requests[CACHE_SLOTS]; /* reads */
	u64 cache_bytes[CACHE_SLOTS];	 /* reads, writes */
};

/*
 * The value of disk_stats: every counter and histogram of one disk, the
 * exact per-request counters first (by operation), the shape sample last.
 * User space reads it into the exposition's view (exporter/probe Counters).
 */
struct counters {
	struct op_counters op[OP_MAX];
	u64 submissions[IFACE_SLOTS];
	u64 sync_flush;			/* writes synchronous by flush (enum sync_mode SYNC_FLUSH) */
	u64 io_uring_punted;		/* io_uring requests handed to io-wq workers */
	u64 format_requests[2];		/* qcow2 metadata reads, writes */
	u64 format_bytes[2];
	u64 latency[OP_MAX][LAT_SLOTS];
	u64 size[2][SIZE_SLOTS];	/* reads, writes at submission */
	/* Shape: one request in SHAPE_SAMPLE (see there). */
	u64 seek_prev[SEEK_SLOTS];	/* distance from the end of the previous request */
	u64 seek_near[SEEK_SLOTS];	/* distance from the closest of the last 16 ends */
	s64 seek_prev_sum;
	s64 seek_near_sum;
	u64 outstanding[QD_SLOTS];
	u64 outstanding_sum;
	u64 interarrival[IAT_SLOTS];
	u64 interarrival_sum_ns;
	u64 pad[7]; /* to a whole number of cache lines (3,136 bytes): see disk_stats */
};

/*
 * The value of disk_seek: submission-order state of one disk. What every
 * request reads or writes is in the first cache line, the ring after it;
 * 192 bytes, three whole lines (see disk_stats).
 */
struct seek_state {
	u64 submitted;	    /* requests submitted (their sequence: ring index and shape sample) */
	s64 inflight;
	u64 last_end;
	u64 last_submit_ns; /* of the last timed request (only those read the clock) */
	u64 writes_since_flush;
	u64 recent_end[SEEK_HISTORY];
	u64 pad[3];
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

/* Value of registration: what the kernel says of one of the exporter's fds. */
struct registration {
	u64 inode; /* struct inode *, the image's key */
	u64 sb;	   /* struct super_block *, for the fentry programs' first filter */
	u64 ino;   /* its i_ino, the image table's hash (call.h image_home) */
};


/*
 * Disk slot -> counters and histograms; read at scrape. Mappable only for
 * where it puts the values: a mappable array's first value starts a page
 * (kernel array_map_alloc, v5.5+), and values of whole cache lines then
 * each start a line, so that an operation's 128 bytes are two lines, not
 * three. User space reads it by lookup, as any array.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_DISKS);
	__type(key, u32);
	__type(value, struct counters);
} disk_stats SEC(".maps");

/* Disk slot -> submission-order state. Mappable as disk_stats. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
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

/*
 * Processes that run a tracked disk (VMM tgids); all when track_all_tasks.
 * Read first only by the hooks that see no file before walking the fd
 * table (the syscall mode's, io_uring's submission); the file-system hooks
 * find the VMM in the image table's entry, with the disk.
 */
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

/* Images being registered at once (one discovery round's new files). */
#define MAX_REGISTRATIONS 4096

/* The exporter's fd -> its inode and super block, filled by register_image. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_REGISTRATIONS);
	__type(key, u32);
	__type(value, struct registration);
} registrations SEC(".maps");

/* The exporter's own tgid: only its fds are registered. */
volatile const u32 self_tgid = 0;
/*
 * The process whose requests are never the VM's: the exporter itself, whose
 * image checks (format, guest file system, qcow2 tables) read the images.
 * User space sets it to self_tgid; only the probe package's own tests,
 * which play the VM from the same process, leave it at 0.
 */
volatile const u32 excluded_tgid = 0;
/*
 * linux-aio requests in inflight_aio: while none are, direct I/O
 * completions skip the lookup. An entry the LRU evicts leaves the count
 * high, which only costs that lookup.
 */
u64 aio_in_direct_io = 0;
/*
 * Set by user space when the syscall mode's iomap programs (direct I/O
 * begin and complete) are attached: linux-aio requests are then timed to
 * their completion. Without them (kernels before 6.3) a request is counted
 * when io_submit returns, untimed.
 */
u32 aio_dio_traced = 0;
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

/*
 * Flags of struct kiocb.ki_flags (include/linux/fs.h). v5.19 renumbered them
 * (commit ce71bfea207b) so that IOCB_DSYNC/IOCB_SYNC/IOCB_NOWAIT equal the
 * RWF_* flags; user space sets the older values on older kernels.
 */
volatile const u32 iocb_dsync = 0x2 | 0x4; /* IOCB_DSYNC | IOCB_SYNC */
volatile const u32 iocb_nowait = 0x8;      /* IOCB_NOWAIT */
/* include/uapi/asm-generic/fcntl.h (x86): the file is open for direct I/O. */
#define O_DIRECT 00040000
/* include/linux/sched.h: the thread is an io_uring worker (iou-wrk), v5.12+. */
#define PF_IO_WORKER 0x00000010
/* include/linux/errno.h: the request was queued and completes elsewhere. */
#define EIOCBQUEUED 529
/* The file system goes on with a direct request another way: buffered (-ENOTBLK) or retried (-EAGAIN). */
#define ENOTBLK 15
#define EAGAIN 11

/*
 * The kernel's completion callbacks of asynchronous kiocbs (fs/aio.c
 * aio_complete_rw, io_uring/rw.c io_complete_rw and io_complete_rw_iopoll),
 * from /proc/kallsyms at load; 0 when the kernel hides its addresses, and
 * then an asynchronous request that is not io_uring's counts as linux-aio.
 */
volatile const u64 aio_complete_fn = 0;
volatile const u64 io_uring_complete_fn = 0;
volatile const u64 io_uring_iopoll_fn = 0;

/*
 * Is the current thread the one to follow on this image: its VMM's, or,
 * for a disk without a known VMM, any process's but the exporter's own and
 * a kernel thread's.
 */
static __always_inline bool vmm_thread(const struct image_ref *img)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_struct *task;

	if (img->vmm)
		return img->vmm == tgid;
	if (tgid == excluded_tgid)
		return false;
	task = bpf_get_current_task_btf();
	return !(task->flags & PF_KTHREAD);
}

/*
 * The image an inode (a BTF pointer) is, when the current thread is to be
 * followed on it: the super block first (no helper call: most files leave
 * here), then the image table (call.h image_of), whose entry names the
 * disk and its VMM.
 */
static __always_inline struct image_ref *followed_image(struct inode *inode)
{
	struct image_ref *img;

	if (!sb_tracked((u64)inode->i_sb))
		return NULL;
	img = image_of((u64)inode, inode->i_ino);
	if (!img || !vmm_thread(img))
		return NULL;
	return img;
}

/*
 * May a request of the current thread be a VM's: is its process one that
 * runs a tracked disk? The first filter of the hooks that have no file yet
 * (see vmm_tgids); the image's own VMM is checked once the file is known
 * (vmm_thread). Never the exporter's own; when every process is followed (a
 * disk without a known VMM), not a kernel thread's either.
 */
static __always_inline bool task_followed(u32 tgid)
{
	struct task_struct *task;

	if (tgid == excluded_tgid)
		return false;
	if (!track_all_tasks)
		return bpf_map_lookup_elem(&vmm_tgids, &tgid) != NULL;
	task = bpf_get_current_task_btf();
	return !(task->flags & PF_KTHREAD);
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

/*
 * The image a file (not a BTF pointer: probe reads) is, or NULL when it is
 * not a tracked image or not this thread's VMM's: the super block first,
 * then the one lookup.
 */
static __always_inline struct image_ref *file_image(struct file *f)
{
	struct image_ref *img;
	struct inode *inode;

	if (!f)
		return NULL;
	inode = BPF_CORE_READ(f, f_inode);
	if (!inode || !sb_tracked((u64)BPF_CORE_READ(inode, i_sb)))
		return NULL;
	img = image_of((u64)inode, BPF_CORE_READ(inode, i_ino));
	if (!img || !vmm_thread(img))
		return NULL;
	return img;
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
 * The exact counters of an operation: op is bounded where the verifier sees
 * it (v6.1's loses the bound of a byte loaded through the callers' branches
 * on it), and past OP_MAX it is refused.
 */
static __always_inline struct op_counters *op_of(struct counters *st, u8 op)
{
	u32 i = bounded(op, 7);

	return i < OP_MAX ? &st->op[i] : NULL;
}

/*
 * Account a request at submission: its size, the sequential rule,
 * synchronous writes, and for one request in SHAPE_SAMPLE the shape
 * (seek distances, outstanding, inter-arrival). timed: its latency is kept,
 * so the clock is read (and the inter-arrival time of a sample is known).
 * Fills rec. Returns false if the request is not to be followed further.
 */
static __always_inline bool submit(struct inflight *rec, u32 slot, u8 op, u64 pos, u64 len,
				   u8 iface, bool dsync, bool timed)
{
	struct counters *st;
	struct seek_state *sk;
	struct op_counters *oc;
	u64 now = 0, prev, best = ~0ULL, end = pos + len, n, seq;
	s64 d, dbest = 0;
	bool sampled, near = false;
	u32 i, dir;

	st = bpf_map_lookup_elem(&disk_stats, &slot);
	sk = bpf_map_lookup_elem(&disk_seek, &slot);
	oc = st ? op_of(st, op) : NULL;
	if (!st || !sk || !oc) {
		drop(DROP_BAD_SLOT);
		return false;
	}
	if (timed)
		now = bpf_ktime_get_ns();
	rec->start_ns = now;
	rec->len = len;
	rec->pos = pos;
	rec->slot = slot;
	rec->op = op;
	rec->format = 0;
	rec->timed = timed;

	if ((op == OP_READ || op == OP_WRITE) && format_metadata(slot, pos)) {
		rec->format = 1;
		return true;
	}

	/* The sequence needs no atomic: a race only blurs which request is sampled. */
	seq = sk->submitted;
	sk->submitted = seq + 1;
	sampled = !(seq & shape_sample_mask);
	inc(&st->submissions[bounded(iface, IFACE_SLOTS - 1)], 1);
	n = inc(&sk->inflight, 1) + 1;
	prev = sk->last_submit_ns;
	if (timed)
		sk->last_submit_ns = now;
	if (sampled) {
		inc(&st->outstanding[pow2_bucket(n, QD_SLOTS)], 1);
		inc(&st->outstanding_sum, n);
		if (timed && prev && now > prev) {
			inc(&st->interarrival[ns_bucket(now - prev, IAT_SLOTS)], 1);
			inc(&st->interarrival_sum_ns, now - prev);
		}
	}

	if (op == OP_FLUSH) {
		n = __sync_lock_test_and_set(&sk->writes_since_flush, 0);
		if (n > 0 && n <= SYNC_EPOCH_MAX)
			inc(&st->sync_flush, n);
		return true;
	}
	if (op != OP_READ && op != OP_WRITE)
		return true;
	dir = bounded(op, 1);

	inc(&st->size[dir][pow2_bucket((len + 511) / 512, SIZE_SLOTS)], 1);
	inc(&oc->size_sum, len);
	if (op == OP_WRITE) {
		if (dsync)
			inc(&oc->dsync, 1);
		else
			inc(&sk->writes_since_flush, 1);
	}

	/*
	 * Sequential rule: the request starts within its own length of the end
	 * of one of the last 16 requests on the disk. Distance 0 is a strict
	 * continuation; up to one request length absorbs the reordering of
	 * concurrent workers (request N+1 entering before N). The first request
	 * on a disk has no history and counts as random. The previous request's
	 * end is the likeliest and is tried first; the ring is scanned when it
	 * misses. A sampled request scans it for the nearest end, whose distance
	 * is counted; any other only asks whether an end is within reach, one
	 * unsigned compare an end: |pos - e| <= len is pos + len - e <= 2 len
	 * in u64 (offsets and lengths below 2^62).
	 */
	n = seq < SEEK_HISTORY ? seq : SEEK_HISTORY;
	if (seq > 0) {
		d = (s64)(pos - sk->last_end);
		best = abs_s64(d);
		dbest = d;
		near = best <= len;
		if (sampled) {
			inc(&st->seek_prev[seek_bucket(d)], 1);
			inc(&st->seek_prev_sum, d);
		}
	}
	if (seq > 0 && sampled) {
		for (i = 0; i < SEEK_HISTORY; i++) {
			if (i >= n)
				break;
			d = (s64)(pos - sk->recent_end[i]);
			if (abs_s64(d) < best) {
				best = abs_s64(d);
				dbest = d;
			}
		}
		near = best <= len;
		inc(&st->seek_near[seek_bucket(dbest)], 1);
		inc(&st->seek_near_sum, dbest);
	} else if (seq > 0 && !near) {
		for (i = 0; i < SEEK_HISTORY; i++) {
			if (i >= n)
				break;
			near |= pos + len - sk->recent_end[i] <= 2 * len;
		}
	}
	if (near)
		inc(&oc->sequential, 1);
	else
		inc(&oc->random, 1);

	sk->last_end = end;
	sk->recent_end[seq & (SEEK_HISTORY - 1)] = end;
	return true;
}

/* Account a completion: ret is bytes done (>= 0) or a negative errno. */
static __always_inline void complete(struct inflight *rec, s64 ret)
{
	u32 slot = rec->slot;
	struct counters *st = bpf_map_lookup_elem(&disk_stats, &slot);
	struct seek_state *sk = bpf_map_lookup_elem(&disk_seek, &slot);
	struct op_counters *oc;
	u32 op = bounded(rec->op, 7);
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
	oc = &st->op[op];
	inc(&sk->inflight, -1);
	if (ret < 0) {
		inc(&oc->errors, 1);
		return;
	}
	/* fallocate returns 0: its bytes are the range it covered. */
	bytes = (op == OP_READ || op == OP_WRITE) ? (u64)ret : (op == OP_FLUSH ? 0 : rec->len);
	inc(&oc->requests, 1);
	inc(&oc->bytes, bytes);
	/* A hook that sees only the submission counts the request, untimed. */
	if (!rec->timed)
		return;
	lat = bpf_ktime_get_ns() - rec->start_ns;
	inc(&oc->latency_sum_ns, lat);
	inc(&st->latency[op][ns_bucket(lat, LAT_SLOTS)], 1);
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

/*
 * Park a submitted synchronous call on an image inode in the thread's
 * storage until its exit. A direct one (the file open with O_DIRECT) also
 * marks the thread with its disk, for the host programs: its pages are the
 * VMM's memory and name no inode.
 */
static __always_inline struct io_task *call_park(struct inflight *rec, u64 inode, u64 key, bool direct)
{
	struct io_task *t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0,
						 BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (!t) {
		drop(DROP_INFLIGHT_FULL);
		return NULL;
	}
	t->call = *rec;
	t->key = key;
	t->inode = inode;
	t->dirtied = 0;
	t->cause = direct ? CAUSE_DIRECT : 0;
	if (direct)
		t->dio_owner = rec->slot + 1;
	return t;
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

/* A read or write of ret > 0 bytes that bypassed the host page cache. */
static __always_inline void cache_direct(struct counters *st, u8 op, s64 ret)
{
	if (op == OP_READ) {
		inc(&st->op[OP_READ].cache_requests[CACHE_DIRECT], 1);
		inc(&st->op[OP_READ].cache_bytes[CACHE_DIRECT], ret);
	} else if (op == OP_WRITE) {
		inc(&st->op[OP_WRITE].cache_bytes[CACHE_DIRECT], ret);
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
		inc(&st->op[OP_READ].cache_requests[r], 1);
		inc(&st->op[OP_READ].cache_bytes[r], ret);
		return;
	}
	/* A partial-page write dirties a whole page: cap at the bytes written. */
	dirtied = t->dirtied < (u64)ret ? t->dirtied : (u64)ret;
	inc(&st->op[OP_WRITE].cache_bytes[CACHE_MISS], dirtied);
	inc(&st->op[OP_WRITE].cache_bytes[CACHE_HIT], ret - dirtied);
}

/* A synchronous call ended with ret: count it and clear it. */
static __always_inline void call_finish(struct io_task *t, s64 ret)
{
	complete(&t->call, ret);
	if (ret > 0 && (t->call.op == OP_READ || t->call.op == OP_WRITE))
		cache_account(t, ret);
	if (t->call.dev)
		flush_window_close(t->call.dev);
	t->call.start_ns = 0;
}

/*
 * Requests seen where they reach the file system (the fentry and tracepoint
 * modes). The hook hands over the kernel's own kiocb, so file, position and
 * flags are the same whichever system call or ring carried the request.
 */

/* How an asynchronous read or write was submitted. */
static __always_inline u8 kiocb_iface(struct kiocb *iocb)
{
	u64 fn = (u64)iocb->ki_complete;
	struct task_struct *task;

	if (fn == io_uring_complete_fn || fn == io_uring_iopoll_fn)
		return IFACE_IO_URING;
	if (fn == aio_complete_fn)
		return IFACE_LINUX_AIO;
	task = bpf_get_current_task_btf();
	return (task->flags & PF_IO_WORKER) ? IFACE_IO_URING : IFACE_LINUX_AIO;
}

/* The interface of a flush or fallocate, which carry no kiocb: io_uring runs them in its workers. */
static __always_inline u8 task_iface(void)
{
	struct task_struct *task = bpf_get_current_task_btf();

	return (task->flags & PF_IO_WORKER) ? IFACE_IO_URING : IFACE_SYSCALL;
}

/* A request in inflight_aio completed with res (bytes or -errno); direct: through iomap direct I/O. */
static __always_inline void aio_done(struct inflight *rec, u64 kio, s64 res, bool direct)
{
	u32 slot = rec->slot;
	struct counters *st;

	complete(rec, res);
	/* Direct I/O bypassed the host page cache. */
	if (res > 0 && !rec->format && direct) {
		st = bpf_map_lookup_elem(&disk_stats, &slot);
		if (st)
			cache_direct(st, rec->op, res);
	}
	if (bpf_map_delete_elem(&inflight_aio, &kio) == 0 && aio_in_direct_io)
		inc(&aio_in_direct_io, -1);
}

/*
 * linux-aio seen through iomap (the tracepoint and syscall modes). iomap
 * says when a direct request begins, when it is queued (its bios are out:
 * it completes elsewhere) and when it completes. A request can also leave
 * iomap with neither: a write whose range the host page cache could not
 * drop falls back to buffered I/O (-ENOTBLK; another reader of the image
 * file, a backup or a copy, leaves such pages), a read at or past the end
 * of the file, an error before any bio. That request was done inside its
 * call. So while a request is inside its call, its record names the
 * submitting thread (tid) and the thread names its kiocb (aio_kio); what
 * next runs in that thread (its next request's begin, io_submit's return,
 * XFS's buffered fallback on the same kiocb) finds the request still
 * inside and counts it done with its length, untimed.
 */
static __always_inline void aio_call_begins(struct inflight *rec, u64 kio, struct io_task *t)
{
	if (!t)
		return;
	rec->tid = (u32)bpf_get_current_pid_tgid();
	t->aio_kio = kio;
}

/* iomap queued the thread's request: it completes elsewhere. */
static __always_inline void aio_call_queued(struct io_task *t)
{
	struct inflight *rec;
	u64 kio;

	if (!t || !t->aio_kio)
		return;
	kio = t->aio_kio;
	t->aio_kio = 0;
	rec = bpf_map_lookup_elem(&inflight_aio, &kio);
	if (rec && rec->tid == (u32)bpf_get_current_pid_tgid())
		rec->tid = 0;
}

/* The thread's request on kiocb kio, if still inside its call, is done there: true if it was. */
static __always_inline bool aio_call_finish(struct io_task *t, u64 kio)
{
	struct inflight *rec;

	t->aio_kio = 0;
	rec = bpf_map_lookup_elem(&inflight_aio, &kio);
	if (!rec || rec->tid != (u32)bpf_get_current_pid_tgid())
		return false;
	rec->timed = 0;
	aio_done(rec, kio, rec->len, false);
	return true;
}

/*
 * The thread begins another request: the one it left inside its call, if
 * any, is done. Not when kio is that request again (a retry of the same
 * kiocb, which the caller tells apart; 0: never).
 */
static __always_inline void aio_call_ended(struct io_task *t, u64 kio)
{
	if (t && t->aio_kio && t->aio_kio != kio)
		aio_call_finish(t, t->aio_kio);
}

/*
 * A kiocb about to enter inflight_aio for a request at pos: an entry
 * already there is this very request again (true), or an earlier request
 * whose kiocb was freed and reused. If that one was still inside its call
 * (see aio_call_begins), it was done there; if not, the probes missed its
 * completion (a completion program the kernel skipped because it
 * interrupted itself). Either way it is counted now, untimed; a missed
 * completion is said as a drop (completion_unseen).
 */
static __always_inline bool aio_kiocb_again(u64 kio, u64 pos, u8 op, bool direct)
{
	struct inflight *old = bpf_map_lookup_elem(&inflight_aio, &kio);
	bool in_call;

	if (!old)
		return false;
	if (old->pos == pos && old->op == op)
		return true;
	in_call = old->tid != 0;
	old->timed = 0;
	aio_done(old, kio, old->len, direct && !in_call);
	if (!in_call)
		drop(DROP_COMPLETION_UNSEEN);
	return false;
}

/*
 * Is the kiocb an io_uring read's or write's: it completes through
 * io_uring's callbacks (kiocb_iface's addresses). When the kernel hides
 * them, none is, and io_uring's requests are followed as linux-aio's are,
 * to their kiocb's completion.
 */
static __always_inline bool uring_kiocb(struct kiocb *iocb)
{
	u64 fn = (u64)iocb->ki_complete;

	return fn && (fn == io_uring_complete_fn || fn == io_uring_iopoll_fn);
}

/*
 * An io_uring read or write reached the file system (the fentry and
 * tracepoint modes; the syscall mode follows io_uring at submission, where
 * it must walk the fd table). The kiocb is the io_kiocb's first member
 * (io_uring/rw.h: struct io_rw overlays io_kiocb.cmd, which starts it since
 * v6.0), so io_uring_done finds the request by the same key at its
 * completion, whose CQE gives its whole result. The file system may see one
 * request more than once: a no-wait attempt in the submitter that returns
 * -EAGAIN, then again in an io-wq worker or after a poll, and a short
 * buffered read goes on with the rest at a later position: the first sight
 * counts it and starts its latency, the others find it here. An entry that
 * is not this request (another op, or a position outside it) is one whose
 * completion the programs missed, its io_kiocb since reused.
 *
 * What the latency is, then: from the file system's first sight of the
 * request to its CQE. The time the request waited in the submission ring
 * is not in it, nor io-wq's queueing of a request forced to a worker before
 * any attempt (IOSQE_ASYNC, which QEMU does not set); io-wq's queueing
 * after a no-wait attempt is.
 */
static __always_inline void uring_enter(struct kiocb *iocb, u32 slot, u8 op, u64 len, bool dsync)
{
	u64 kio = (u64)iocb, pos = iocb->ki_pos;
	struct inflight rec = {}, *old;

	old = bpf_map_lookup_elem(&inflight_uring, &kio);
	if (old) {
		if (old->op == op && pos >= old->pos && pos - old->pos <= old->len)
			return;
		drop(DROP_COMPLETION_UNSEEN);
	}
	if (!submit(&rec, slot, op, pos, len, IFACE_IO_URING, dsync, true))
		return;
	if (bpf_map_update_elem(&inflight_uring, &kio, &rec, BPF_ANY))
		drop(DROP_INFLIGHT_FULL);
}

/*
 * A read or write of len bytes reached the file system. A synchronous call
 * is parked in the thread's storage until its end (rw_exit, or iomap's
 * completion in the tracepoint mode); a linux-aio request in inflight_aio by
 * kiocb until it completes, wherever that is; an io_uring request in
 * inflight_uring until its CQE (uring_enter). A direct write that XFS retries under
 * another lock reaches here twice and is submitted once. iomap: the hook is
 * iomap's begin (the tracepoint mode), which may not be followed by its
 * completion (see aio_call_begins); the fentry mode sees every call return.
 */
static __always_inline void rw_enter(struct kiocb *iocb, u64 len, u8 op, bool iomap)
{
	struct file *f = iocb->ki_filp;
	struct inode *inode = f->f_inode;
	u64 kio = (u64)iocb;
	struct inflight rec = {};
	struct image_ref *img;
	struct io_task *t;
	bool direct, dsync;
	u32 slot;

	img = followed_image(inode);
	if (!img)
		return;
	slot = img->slot;
	direct = f->f_flags & O_DIRECT;
	dsync = op == OP_WRITE && (iocb->ki_flags & iocb_dsync);
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t && direct)
		t->dio_owner = slot + 1;
	if (uring_kiocb(iocb)) {
		uring_enter(iocb, slot, op, len, dsync);
		return;
	}
	if (!iocb->ki_complete) {
		if (!t) {
			drop(DROP_INFLIGHT_FULL);
			return;
		}
		if (t->call.start_ns && t->key == (u64)iocb && (t->cause & CAUSE_RETRY)) {
			t->cause &= ~CAUSE_RETRY;
			return;
		}
		/* iomap: the thread's previous call left it without completing (see aio_call_begins). */
		if (iomap && t->call.start_ns) {
			t->call.timed = 0;
			call_finish(t, t->call.len);
		}
		if (!submit(&rec, slot, op, iocb->ki_pos, len, IFACE_SYSCALL, dsync, true))
			return;
		t->call = rec;
		t->key = kio;
		t->inode = (u64)inode;
		t->dirtied = 0;
		t->cause = direct ? CAUSE_DIRECT : 0;
		return;
	}
	if (iomap)
		aio_call_ended(t, kio);
	else if (t)
		t->aio_kio = kio; /* inside its call until rw_exit (see dio_completed) */
	if (aio_kiocb_again(kio, iocb->ki_pos, op, direct)) {
		/* Begun again, perhaps by another thread (io_uring's worker after a no-wait try, uring_kiocb). */
		struct inflight *again = iomap ? bpf_map_lookup_elem(&inflight_aio, &kio) : NULL;

		if (again)
			aio_call_begins(again, kio, t);
		return;
	}
	if (!submit(&rec, slot, op, iocb->ki_pos, len, kiocb_iface(iocb), dsync, true))
		return;
	rec.tgid = bpf_get_current_pid_tgid() >> 32;
	if (iomap)
		aio_call_begins(&rec, kio, t);
	if (bpf_map_update_elem(&inflight_aio, &kio, &rec, BPF_NOEXIST)) {
		drop(DROP_INFLIGHT_FULL);
		return;
	}
	inc(&aio_in_direct_io, 1);
}

/*
 * A request the hook sees only at submission (tracepoints that fire as the
 * file system starts it): counted as done with its length, untimed (and so
 * without a clock read).
 */
static __always_inline void request_untimed(u32 slot, u8 op, u64 pos, u64 len, u8 iface, bool dsync)
{
	struct inflight rec = {};

	if (!submit(&rec, slot, op, pos, len, iface, dsync, false))
		return;
	complete(&rec, (op == OP_READ || op == OP_WRITE) ? (s64)len : 0);
}

/*
 * A flush of a file reached the file system (vfs_fsync_range, or a file
 * system's fsync tracepoint). Not followed when the thread is inside a
 * write on the same image: that is the sync an O_DSYNC write does for
 * itself. io_uring's flushes (IORING_OP_FSYNC) run here in its workers
 * (iou-wrk, task_iface) and are counted here like any other, timed from
 * the file system's call: io-wq's queueing before it is not in the latency.
 */
static __always_inline void flush_enter(struct file *f)
{
	struct inode *inode = f->f_inode;
	struct inflight rec = {};
	struct image_ref *img;
	struct io_task *t;

	img = followed_image(inode);
	if (!img)
		return;
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t) {
		drop(DROP_INFLIGHT_FULL);
		return;
	}
	if (t->call.start_ns && t->call.op == OP_WRITE && t->inode == (u64)inode)
		return;
	if (!submit(&rec, img->slot, OP_FLUSH, 0, 0, task_iface(), false, true))
		return;
	if (!rec.format)
		flush_window_open(&rec, f);
	t->call = rec;
	t->key = (u64)inode;
	t->inode = (u64)inode;
	t->dirtied = 0;
	t->cause = 0;
}

/* The end of a flush or fallocate call on inode, with its result. */
static __always_inline void inode_call_exit(struct inode *inode, s64 ret)
{
	struct io_task *t;

	if (!sb_tracked((u64)inode->i_sb) || !image_of((u64)inode, inode->i_ino))
		return;
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
	if (!t || !t->call.start_ns || t->key != (u64)inode || t->call.op < OP_FLUSH)
		return;
	call_finish(t, ret);
}

/* fallocate(2) modes (include/uapi/linux/falloc.h) as the op they carry out for QEMU. */
static __always_inline u8 fallocate_op(u32 mode)
{
	if (mode & FALLOC_FL_PUNCH_HOLE)
		return OP_DISCARD;
	if (mode & FALLOC_FL_ZERO_RANGE)
		return OP_WRITE_ZEROES;
	return OP_ALLOCATE;
}

#endif /* FSPAIR_DISK_H */
