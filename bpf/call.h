/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What disk.bpf.c and host.bpf.c share about the requests a VMM has in
 * flight: the operations, the record of a request, and the thread state
 * both objects read and write through the shared task storage io_tasks.
 */
#ifndef FSPAIR_CALL_H
#define FSPAIR_CALL_H

#include "fspair.h"

/* Disks tracked at once; user space may raise it before load (--bpf.max-disks). */
#define MAX_DISKS 1024
/* Image files (a disk's image plus a margin for replaced files kept until their last close). */
#define MAX_IMAGES (MAX_DISKS * 2)

/* Operations, the `op` label. */
enum op {
	OP_READ,
	OP_WRITE,
	OP_FLUSH,
	OP_DISCARD,
	OP_WRITE_ZEROES,
	OP_ALLOCATE,
	OP_MAX,
};

/* A request between submission and completion. */
struct inflight {
	u64 start_ns;
	u64 len;
	u64 pos;
	u32 slot;
	u8 op;
	u8 format; /* qcow2 metadata, counted apart from guest data */
	u8 timed;  /* start_ns is the submission time: the completion has a latency */
	u32 tgid; /* linux-aio: the submitting process */
	union {
		u32 dev; /* flushes: the image file system's dev_t, for its flush window */
		/*
		 * linux-aio in the tracepoint and syscall modes: the submitting
		 * thread while the request is inside its call (iomap began it and
		 * has neither queued nor completed it), 0 once queued.
		 */
		u32 tid;
	};
};

/*
 * The value of disk_by_inode (disk.h; host.bpf.c reads it too): the disk an
 * image file is, and the process that runs it, so that one lookup tells a
 * file-system hook both whether the file is followed and whether the
 * current thread is the one to follow.
 */
struct image_ref {
	u32 slot; /* disk slot */
	u32 vmm;  /* the VMM's tgid; 0: unknown, every process but the exporter and kernel threads */
};

/*
 * The image table: the tracked images by inode (kernel address), read by
 * every file-system hook and host program that meets a file, page or
 * direct request, most of which are not an image's. An open-addressing
 * table in one array value, probed in place: a file that is not an image
 * leaves after one or two loads, and an image is found without a helper
 * call (disk_by_inode, a hash map, costs a jhash and a call on every
 * lookup, hit or miss).
 *
 * Written by user space (exporter/probe imageTable) through the mapped
 * value, one aligned 8-byte store at a time, so a program sees an entry
 * whole: an entry's ref is stored before its inode, and an image leaves
 * by its inode turning into IMAGE_TOMBSTONE (entries never move, so a
 * probe never misses an image that stays). An image whose IMAGE_PROBES
 * places from its home are all taken lives in disk_by_inode only; while
 * any does (overflow), a probe that finds neither the inode nor an empty
 * place asks disk_by_inode. disk_by_inode holds every image as well.
 */
#define IMAGE_TABLE_BITS 12
#define IMAGE_TABLE_SLOTS (1 << IMAGE_TABLE_BITS) /* twice MAX_IMAGES: probes stay short */
#define IMAGE_PROBES 8
#define IMAGE_TOMBSTONE 1ULL /* an image left this place; probing goes on past it */

struct image_entry {
	struct image_ref ref; /* stored before inode */
	u64 inode;	      /* 0: never used (a probe stops), IMAGE_TOMBSTONE: freed */
};

struct image_table {
	u64 overflow; /* images in disk_by_inode only */
	u64 pad[7];
	struct image_entry e[IMAGE_TABLE_SLOTS];
};

/* One value, the whole table; owned by disk.bpf.c, shared at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct image_table);
} image_table SEC(".maps");

/* Image inode (kernel address) -> its disk slot and VMM; every image, for the overflow. Written by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_IMAGES);
	__type(key, u64);
	__type(value, struct image_ref);
} disk_by_inode SEC(".maps");

/*
 * An inode's home in the image table: Fibonacci hashing of its inode
 * number (exporter/probe imageHome). Not of its address, which the
 * verifier keeps a pointer, on which no arithmetic is allowed; the address
 * is what an entry is compared with.
 */
static __always_inline u32 image_home(u64 ino)
{
	return (ino * 0x9E3779B97F4A7C15ULL) >> (64 - IMAGE_TABLE_BITS);
}

/*
 * The image an inode (its kernel address, and its i_ino) is, or NULL: the
 * table first, disk_by_inode on overflow.
 */
static __always_inline struct image_ref *image_of(u64 inode, u64 ino)
{
	struct image_table *tbl;
	struct image_entry *e;
	u32 zero = 0, h, i;
	u64 k;

	tbl = bpf_map_lookup_elem(&image_table, &zero);
	if (!tbl)
		return NULL;
	h = image_home(ino);
	for (i = 0; i < IMAGE_PROBES; i++) {
		e = &tbl->e[(h + i) & (IMAGE_TABLE_SLOTS - 1)];
		k = *(volatile u64 *)&e->inode;
		if (k == inode)
			return &e->ref;
		if (!k)
			return NULL;
	}
	if (!*(volatile u64 *)&tbl->overflow)
		return NULL;
	return bpf_map_lookup_elem(&disk_by_inode, &inode);
}

/* Bits of io_task.cause: what the host did for the thread's synchronous call. */
#define CAUSE_DIRECT 1      /* the call went through iomap direct I/O */
#define CAUSE_DEVICE_READ 2 /* the call queued a read on the host device */
#define CAUSE_RETRY 4       /* the file system retries the call's direct I/O (tracepoint mode) */

/*
 * include/linux/sched.h: a kernel thread (kworkers completing direct I/O
 * run file-system calls too). Never followed (disk.h vmm_thread), so never
 * given io_tasks storage.
 */
#define PF_KTHREAD 0x00200000

/*
 * The value of io_tasks, one per VMM thread that touched an image: its
 * synchronous call in progress (call.start_ns != 0) with what the host did
 * for it so far, and the image the thread is doing direct I/O on. Task
 * storage is cheaper than a hash keyed by thread id on every pread/pwrite
 * and every bio, and is freed with the thread.
 */
struct io_task {
	struct inflight call;
	u64 key;       /* what the call is on: its kiocb (read/write) or file (flush, fallocate) */
	u64 inode;     /* the call's image inode (kernel address) */
	u32 dirtied;   /* bytes of host page cache the call turned dirty (saturating) */
	u32 dio_owner; /* disk slot + 1 of the image in direct I/O, 0 = none */
	u8 cause;
	u8 pad[7];
	u64 aio_kio; /* the kiocb of this thread's linux-aio request inside its call (see inflight.tid) */
};

/*
 * The value of flush_windows, keyed by a host file system's dev_t: flushes
 * in progress on its images. Journal threads (jbd2, the XFS log workers)
 * write the commit a flush waits for; while a window is open their writes
 * are charged to the disk whose flush started last.
 */
struct flush_window {
	u64 start_ns; /* of the latest flush */
	u32 waiters;
	u32 slot;
};

/* A window whose flushes have not ended for this long is stale (a thread died in the call). */
#define FLUSH_WINDOW_MAX_NS (30ULL * 1000 * 1000 * 1000)

/* Each VMM thread's synchronous call and direct I/O mark; owned by disk.bpf.c, shared at load. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct io_task);
} io_tasks SEC(".maps");

/* Host file systems with flushes in progress at once. */
#define MAX_FLUSH_WINDOWS 256

/* Host file system dev_t -> its flushes in progress; owned by disk.bpf.c, shared at load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FLUSH_WINDOWS);
	__type(key, u32);
	__type(value, struct flush_window);
} flush_windows SEC(".maps");

/*
 * The file-system hooks of the fentry and tracepoint modes run for every
 * read, write, flush and fallocate of every file on the host's ext4, XFS
 * and Btrfs file systems, and host_dirty_folio for every page any process
 * dirties. Most are not on a tracked image: they leave after comparing the
 * file's super block with this short list, before any map lookup or other
 * helper call. With more super blocks than slots the first filter is off
 * and every file takes the next filter. Written by user space into each
 * object (each has its own copy).
 */
u64 tracked_sbs[FILTER_SLOTS] = {};
u32 tracked_sb_count = 0;

static __always_inline bool sb_tracked(u64 sb)
{
	u32 n = tracked_sb_count;

	return n > FILTER_SLOTS || filter_has(tracked_sbs, n, sb);
}

/* Why an event was lost, the `reason` label of fspair_probe_events_dropped_total. */
enum drop {
	DROP_INFLIGHT_FULL,
	DROP_BAD_SLOT,
	DROP_IO_URING_FIXED_FILE,
	DROP_IOV_TOO_LONG,
	DROP_REQUEST_UNTIMED, /* a host request completed without its issue time: counted, not timed */
	/*
	 * An asynchronous request whose completion no program saw (a
	 * trampoline skips a program that interrupts itself on one CPU): found
	 * when its kiocb carries a new request, and counted then as done,
	 * untimed.
	 */
	DROP_COMPLETION_UNSEEN,
	DROP_MAX,
};

/* Events lost, by enum drop; shared by both objects. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_MAX);
	__type(key, u32);
	__type(value, u64);
} events_dropped SEC(".maps");

static __always_inline void drop(u32 reason)
{
	u64 *v = bpf_map_lookup_elem(&events_dropped, &reason);

	if (v)
		*v += 1; /* per-CPU: no atomic needed */
}

#endif /* FSPAIR_CALL_H */
