// SPDX-License-Identifier: GPL-2.0
/*
 * host: what the host block layer does underneath each VM disk image.
 *
 * Every request on a block device holding a tracked image's host file
 * system is classified when it is issued:
 *   data     - the image's own pages or direct I/O, charged to its disk;
 *   metadata - the file system's journal and metadata: requests flagged
 *              REQ_META, pages of the block device's own cache (ext4
 *              metadata and jbd2 journal buffers), the Btrfs btree inode;
 *   other    - everything else on the device.
 * Attribution: a buffered page names its inode (page->mapping->host), so
 * writeback from kworkers is charged to the right image. Direct I/O pages
 * belong to the VMM's memory, so the submitting task is marked at
 * iomap_dio_rw_begin with the image it works on and its bios are tagged at
 * block_bio_queue. Service time is issue to completion (the device), queue
 * time insert to issue (the host's I/O scheduler).
 */
#include "fspair.h"

char LICENSE[] SEC("license") = "GPL";

/* Host block devices followed at once (each image's host FS device). */
#define MAX_DEVICES 256
/* Mirrors disk.bpf.c: the map is shared, loaded once. */
#define MAX_DISKS 1024
#define MAX_IMAGES (MAX_DISKS * 2)
/* Requests and bios in flight on followed devices. */
#define MAX_RQ 16384

#define LAT_SLOTS 25 /* le = 2^k microseconds, as in disk.bpf.c */

enum kind {
	KIND_DATA,
	KIND_METADATA,
	KIND_OTHER,
	KIND_MAX,
};

/* include/linux/blk_types.h: the op is the low 8 bits, REQ_META bit 12 (__REQ_META). */
#define REQ_OP_MASK 0xff
#define REQ_OP_READ 0
#define REQ_OP_WRITE 1
#define REQ_OP_FLUSH 2
#define REQ_OP_DISCARD 3
#define REQ_META (1U << 12)
/* include/uapi/linux/stat.h */
#define S_IFMT 00170000
#define S_IFBLK 0060000
/* fs/btrfs: BTRFS_BTREE_INODE_OBJECTID, the inode whose pages cache the btrees. */
#define BTRFS_BTREE_INODE 1
/* include/linux/page-flags.h: PAGE_MAPPING_ANON, the low bit of page->mapping. */
#define PAGE_MAPPING_ANON 0x1

/* The value of device_stats: one followed block device. */
struct device_counters {
	u64 requests[KIND_MAX][2]; /* by kind, read/write */
	u64 bytes[KIND_MAX][2];
	u64 commits;	/* jbd2 commits, XFS log forces, Btrfs transaction commits */
	u64 flushes;
	u64 discards;
	u64 discard_bytes;
	u64 service[2][LAT_SLOTS];
	u64 service_sum_ns[2];
	u64 queue[2][LAT_SLOTS];
	u64 queue_sum_ns[2];
};

/* The value of image_device_stats: one disk's data requests on its host device. */
struct image_device_counters {
	u64 cow_extents;	/* Btrfs ordered extents written copy-on-write */
	u64 cow_bytes;
	u64 nocow_extents;	/* ... written in place (NOCOW file or preallocated extent) */
	u64 nocow_bytes;
	u64 requests[2];
	u64 bytes[2];
	u64 service[2][LAT_SLOTS];
	u64 service_sum_ns[2];
	u64 queue[2][LAT_SLOTS];
	u64 queue_sum_ns[2];
};

/* A request between insert/issue and completion. */
struct rq_info {
	u64 insert_ns;
	u64 issue_ns;
	u32 owner; /* disk slot + 1; 0 = no image */
	u32 dev;   /* device slot */
	u8 kind;
	u8 dir;
	u8 pad[6];
};

/* Image inode -> disk slot: the same map as disk.bpf.c's, shared at load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_IMAGES);
	__type(key, u64);
	__type(value, u32);
} disk_by_inode SEC(".maps");

/* Block device (kernel dev_t, major << 20 | minor) -> device slot. Written by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_DEVICES);
	__type(key, u32);
	__type(value, u32);
} host_devices SEC(".maps");

/* Device slot -> counters; read at scrape. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_DEVICES);
	__type(key, u32);
	__type(value, struct device_counters);
} device_stats SEC(".maps");

/* Disk slot -> its data requests on the host device; read at scrape. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_DISKS);
	__type(key, u32);
	__type(value, struct image_device_counters);
} image_device_stats SEC(".maps");

/* Requests in flight on followed devices, by struct request. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_RQ);
	__type(key, u64);
	__type(value, struct rq_info);
} requests SEC(".maps");

/* Direct I/O bios -> the disk slot + 1 they belong to, from the submitting task's mark. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_RQ);
	__type(key, u64);
	__type(value, u32);
} bio_owner SEC(".maps");

/* The image (disk slot + 1) a task is doing direct I/O on, between iomap begin and its return. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, u32);
} dio_owner SEC(".maps");

/* Btrfs file system id -> device slot: Btrfs events name the file system, not a device. */
struct btrfs_fsid {
	u8 b[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_DEVICES);
	__type(key, struct btrfs_fsid);
	__type(value, u32);
} btrfs_devices SEC(".maps");

static __always_inline u32 *device_slot(struct block_device *bdev)
{
	u32 dev;

	if (!bdev)
		return NULL;
	dev = BPF_CORE_READ(bdev, bd_dev);
	return bpf_map_lookup_elem(&host_devices, &dev);
}

/* The device of a request: its partition, or for flush requests (no part) the whole disk. */
static __always_inline u32 *rq_device_slot(struct request *rq)
{
	struct block_device *part = BPF_CORE_READ(rq, part);

	if (!part)
		part = BPF_CORE_READ(rq, q, disk, part0);
	return device_slot(part);
}

SEC("tp_btf/iomap_dio_rw_begin")
int host_dio_begin(u64 *ctx)
{
	struct kiocb *iocb = (void *)ctx[0];
	struct task_struct *task = bpf_get_current_task_btf();
	u64 inode = (u64)BPF_CORE_READ(iocb, ki_filp, f_inode);
	u32 *slot = bpf_map_lookup_elem(&disk_by_inode, &inode);
	u32 *mark;

	if (!slot) {
		/* Clear a mark left from an image, keep untouched tasks free of storage. */
		mark = bpf_task_storage_get(&dio_owner, task, 0, 0);
		if (mark)
			*mark = 0;
		return 0;
	}
	mark = bpf_task_storage_get(&dio_owner, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (mark)
		*mark = *slot + 1;
	return 0;
}

static __always_inline void dio_end(void)
{
	u32 *mark = bpf_task_storage_get(&dio_owner, bpf_get_current_task_btf(), 0, 0);

	if (mark)
		*mark = 0;
}

/*
 * The submitter returns from an asynchronous direct I/O: its bios are out.
 * A synchronous one keeps the mark until the task's next iomap direct I/O
 * (clearing at iomap_dio_complete would race with completions in interrupt
 * context on top of another submitter); only bios on followed devices are
 * tagged, so a stale mark can only touch a host FS device's direct I/O that
 * bypasses iomap.
 */
SEC("tp_btf/iomap_dio_rw_queued")
int host_dio_queued(u64 *ctx)
{
	dio_end();
	return 0;
}


SEC("tp_btf/block_bio_queue")
int host_bio_queue(u64 *ctx)
{
	struct bio *bio = (void *)ctx[0];
	u64 key = (u64)bio;
	u32 *mark;

	mark = bpf_task_storage_get(&dio_owner, bpf_get_current_task_btf(), 0, 0);
	if (!mark || !*mark || !device_slot(BPF_CORE_READ(bio, bi_bdev)))
		return 0;
	bpf_map_update_elem(&bio_owner, &key, mark, BPF_ANY);
	return 0;
}

/*
 * A bio too large for the device is split; the piece split off is chained
 * to the rest (bio_chain: its bi_private is the parent) and inherits its
 * owner.
 */
SEC("tp_btf/block_split")
int host_bio_split(u64 *ctx)
{
	struct bio *split = (void *)ctx[0];
	u64 parent = (u64)BPF_CORE_READ(split, bi_private), key = (u64)split;
	u32 *owner = bpf_map_lookup_elem(&bio_owner, &parent);

	if (owner)
		bpf_map_update_elem(&bio_owner, &key, owner, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_insert")
int host_rq_insert(u64 *ctx)
{
	struct request *rq = (void *)ctx[0];
	struct rq_info info = {};
	u64 key = (u64)rq;

	if (!rq_device_slot(rq))
		return 0;
	info.insert_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&requests, &key, &info, BPF_ANY);
	return 0;
}

/* Classify a request by its first bio: whose data, or metadata, or other. */
static __always_inline void classify(struct request *rq, struct rq_info *info)
{
	struct bio *bio = BPF_CORE_READ(rq, bio);
	u64 bkey = (u64)bio, mapping, inode;
	struct inode *host;
	u32 *owner, *slot;

	info->kind = KIND_OTHER;
	info->owner = 0;
	if (!bio)
		return;
	owner = bpf_map_lookup_elem(&bio_owner, &bkey);
	if (owner) {
		info->owner = *owner;
		info->kind = KIND_DATA;
		bpf_map_delete_elem(&bio_owner, &bkey);
		return;
	}
	if (BPF_CORE_READ(rq, cmd_flags) & REQ_META) {
		info->kind = KIND_METADATA;
		return;
	}
	mapping = (u64)BPF_CORE_READ(bio, bi_io_vec, bv_page, mapping);
	if (!mapping || (mapping & PAGE_MAPPING_ANON))
		return;
	host = BPF_CORE_READ((struct address_space *)mapping, host);
	inode = (u64)host;
	slot = bpf_map_lookup_elem(&disk_by_inode, &inode);
	if (slot) {
		info->owner = *slot + 1;
		info->kind = KIND_DATA;
		return;
	}
	if ((BPF_CORE_READ(host, i_mode) & S_IFMT) == S_IFBLK || BPF_CORE_READ(host, i_ino) == BTRFS_BTREE_INODE)
		info->kind = KIND_METADATA;
}

SEC("tp_btf/block_rq_issue")
int host_rq_issue(u64 *ctx)
{
	struct request *rq = (void *)ctx[0];
	u64 key = (u64)rq;
	struct rq_info *info, fresh = {};
	u32 *dev = rq_device_slot(rq);
	u32 op;

	if (!dev)
		return 0;
	info = bpf_map_lookup_elem(&requests, &key);
	if (!info)
		info = &fresh;
	op = BPF_CORE_READ(rq, cmd_flags) & REQ_OP_MASK;
	info->issue_ns = bpf_ktime_get_ns();
	info->dev = *dev;
	info->dir = op == REQ_OP_WRITE;
	classify(rq, info);
	if (info == &fresh)
		bpf_map_update_elem(&requests, &key, &fresh, BPF_ANY);
	return 0;
}

static __always_inline void hist(u64 *slots, u64 *sum, u64 ns)
{
	inc(&slots[pow2_bucket((ns + 999) / 1000, LAT_SLOTS)], 1);
	inc(sum, ns);
}

SEC("tp_btf/block_rq_complete")
int host_rq_complete(u64 *ctx)
{
	struct request *rq = (void *)ctx[0];
	u64 nr_bytes = (u32)ctx[2];
	u64 key = (u64)rq, now = bpf_ktime_get_ns(), service, queue = 0;
	struct device_counters *dc;
	struct image_device_counters *ic;
	struct rq_info *info = bpf_map_lookup_elem(&requests, &key);
	u32 dev, owner, op, kind, dir;

	if (!info || !info->issue_ns)
		return 0;
	dev = info->dev;
	dc = bpf_map_lookup_elem(&device_stats, &dev);
	if (!dc)
		goto out;
	op = BPF_CORE_READ(rq, cmd_flags) & REQ_OP_MASK;
	if (op == REQ_OP_FLUSH) {
		inc(&dc->flushes, 1);
		goto out;
	}
	if (op == REQ_OP_DISCARD) {
		inc(&dc->discards, 1);
		inc(&dc->discard_bytes, nr_bytes);
		goto out;
	}
	if (op != REQ_OP_READ && op != REQ_OP_WRITE)
		goto out;
	kind = bounded(info->kind, 3);
	if (kind >= KIND_MAX)
		goto out;
	dir = bounded(info->dir, 1);
	service = now - info->issue_ns;
	if (info->insert_ns && info->issue_ns > info->insert_ns)
		queue = info->issue_ns - info->insert_ns;
	inc(&dc->requests[kind][dir], 1);
	inc(&dc->bytes[kind][dir], nr_bytes);
	hist(dc->service[dir], &dc->service_sum_ns[dir], service);
	hist(dc->queue[dir], &dc->queue_sum_ns[dir], queue);
	owner = info->owner;
	if (!owner)
		goto out;
	owner -= 1;
	ic = bpf_map_lookup_elem(&image_device_stats, &owner);
	if (!ic)
		goto out;
	inc(&ic->requests[dir], 1);
	inc(&ic->bytes[dir], nr_bytes);
	hist(ic->service[dir], &ic->service_sum_ns[dir], service);
	hist(ic->queue[dir], &ic->queue_sum_ns[dir], queue);
out:
	bpf_map_delete_elem(&requests, &key);
	return 0;
}

static __always_inline void count_commit(u32 *slot)
{
	struct device_counters *dc;

	if (!slot)
		return;
	dc = bpf_map_lookup_elem(&device_stats, slot);
	if (dc)
		inc(&dc->commits, 1);
}

/* The tracepoint records of jbd2_end_commit and xfs_log_force start with the device (dev_t). */
struct dev_event {
	u64 common;
	u32 dev;
};

/* ext4's journal (jbd2) commits a transaction. */
SEC("tracepoint/jbd2/jbd2_end_commit")
int host_jbd2_commit(struct dev_event *ev)
{
	u32 dev = ev->dev;

	count_commit(bpf_map_lookup_elem(&host_devices, &dev));
	return 0;
}

/* XFS forces its log to disk (fsync, log space, periodic). */
SEC("tracepoint/xfs/xfs_log_force")
int host_xfs_log_force(struct dev_event *ev)
{
	u32 dev = ev->dev;

	count_commit(bpf_map_lookup_elem(&host_devices, &dev));
	return 0;
}

SEC("tp_btf/btrfs_transaction_commit")
int host_btrfs_commit(u64 *ctx)
{
	struct btrfs_fs_info *fs = (void *)ctx[0];
	struct btrfs_fsid id = {};

	bpf_probe_read_kernel(&id, sizeof(id), BPF_CORE_READ(fs, fs_devices)->fsid);
	count_commit(bpf_map_lookup_elem(&btrfs_devices, &id));
	return 0;
}

/* fs/btrfs/ordered-data.h: flag bits of an ordered extent. */
#define BTRFS_ORDERED_NOCOW 1
#define BTRFS_ORDERED_PREALLOC 2

/*
 * Btrfs starts an ordered extent for every range of data it writes: a
 * copy-on-write one allocates new space (and later frees the old, with
 * checksums and extent tree updates), a NOCOW or preallocated one writes in
 * place.
 */
SEC("tp_btf/btrfs_ordered_extent_add")
int host_btrfs_ordered(u64 *ctx)
{
	struct btrfs_inode *bi = (void *)ctx[0];
	struct btrfs_ordered_extent *oe = (void *)ctx[1];
	u64 inode = (u64)&bi->vfs_inode;
	u32 *slot = bpf_map_lookup_elem(&disk_by_inode, &inode);
	struct image_device_counters *ic;
	u64 flags, len;

	if (!slot)
		return 0;
	ic = bpf_map_lookup_elem(&image_device_stats, slot);
	if (!ic)
		return 0;
	flags = BPF_CORE_READ(oe, flags);
	len = BPF_CORE_READ(oe, num_bytes);
	if (flags & ((1UL << BTRFS_ORDERED_NOCOW) | (1UL << BTRFS_ORDERED_PREALLOC))) {
		inc(&ic->nocow_extents, 1);
		inc(&ic->nocow_bytes, len);
	} else {
		inc(&ic->cow_extents, 1);
		inc(&ic->cow_bytes, len);
	}
	return 0;
}
