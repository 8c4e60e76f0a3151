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
 * belong to the VMM's memory; iomap's bios name their request instead
 * (bi_private is the struct iomap_dio, whose kiocb names the file), read at
 * completion. Where the kernel hides the address of iomap's completion
 * function, the submitting task is marked with the image it works on
 * (disk.bpf.c) and its bios are tagged at block_bio_queue instead. Service
 * time is issue to completion (the device), queue time allocation to issue
 * (the host's plugging and I/O scheduler); both from the times the block
 * layer keeps in the request when its queue collects statistics (writeback
 * throttling does, on by default), else from host_rq_issue.
 * Synchronous calls: a bio queued by a VMM thread inside a call on an image
 * is the call's doing (a page cache miss for a read, the device work of a
 * flush); page dirtying inside a write call tells absorbed from new writes.
 */
#include "call.h"

char LICENSE[] SEC("license") = "GPL";

/* Host block devices followed at once (each image's host FS device). */
#define MAX_DEVICES 256
/* Direct I/O bios in flight on followed devices. */
#define MAX_BIOS 16384

#define LAT_SLOTS 25 /* le = 2^k microseconds, as in disk.bpf.c */

/*
 * The issue time of a request in flight lives in rq_issued at an index made
 * of its device slot, hardware queue and driver tag, which no two requests in
 * flight share: an array slot costs no hash, no allocation and no delete.
 * 4 bits of device, 2 of hardware queue, 10 of tag: devices beyond 16,
 * queues beyond 4 or tags beyond 1024 may share a slot, which the request
 * pointer kept beside the time detects (such a request is counted but not
 * timed, and shows in fspair_probe_events_dropped_total{reason="request_untimed"}).
 */
#define RQ_TAG_BITS 10
#define RQ_HCTX_BITS 2
#define RQ_SLOTS (1 << 16)

enum kind {
	KIND_DATA,
	KIND_METADATA,
	KIND_OTHER,
	KIND_MAX,
};
#define KIND_SLOTS 4

/* include/linux/blk_types.h: the op is the low 8 bits of cmd_flags/bi_opf. */
#define REQ_OP_MASK 0xff
#define REQ_OP_READ 0
#define REQ_OP_WRITE 1
#define REQ_OP_FLUSH 2
#define REQ_OP_DISCARD 3
#define REQ_OP_WRITE_ZEROES 9
/* Flag bits relocated against the running kernel's enum req_flag_bits. */
#define REQ_FLAG(bit) (1U << bpf_core_enum_value(enum req_flag_bits, bit))
/* include/uapi/linux/stat.h */
#define S_IFMT 00170000
#define S_IFBLK 0060000
/* fs/btrfs: BTRFS_BTREE_INODE_OBJECTID, the inode whose pages cache the btrees. */
#define BTRFS_BTREE_INODE 1
/* include/linux/page-flags.h: PAGE_MAPPING_ANON, the low bit of page->mapping. */
#define PAGE_MAPPING_ANON 0x1
#define PAGE_SIZE 4096

/*
 * The value of device_stats: one followed block device. What every
 * completed request adds to but its two histogram buckets sits in the first
 * 128 bytes (two cache lines, the map's values start on one: see
 * device_stats), not beside the histograms they sum.
 */
struct device_counters {
	u64 requests[KIND_MAX][2]; /* by kind, read/write */
	u64 bytes[KIND_MAX][2];
	u64 service_sum_ns[2];
	u64 queue_sum_ns[2];
	u64 commits;	/* jbd2 commits, XFS log writes, Btrfs transaction commits */
	u64 flushes;
	u64 discards;
	u64 discard_bytes;
	u64 service[2][LAT_SLOTS];
	u64 queue[2][LAT_SLOTS];
	u64 pad[8]; /* to a whole number of cache lines (1,024 bytes) */
};

/*
 * The value of image_device_stats: one disk's data requests on its host
 * device. A data request's counters but its histogram buckets are the
 * first 64 bytes, one cache line (see device_stats).
 */
struct image_device_counters {
	u64 requests[2];
	u64 bytes[2];
	u64 service_sum_ns[2];
	u64 queue_sum_ns[2];
	u64 cow_extents;	/* Btrfs ordered extents written copy-on-write */
	u64 cow_bytes;
	u64 nocow_extents;	/* ... written in place (NOCOW file or preallocated extent) */
	u64 nocow_bytes;
	u64 service[2][LAT_SLOTS];
	u64 queue[2][LAT_SLOTS];
	/* What the disk's flushes (fdatasync/fsync) sent to the device. */
	u64 flush_writes[KIND_SLOTS];	   /* write bios the flushing thread queued, by kind */
	u64 flush_write_bytes[KIND_SLOTS];
	u64 flush_cache_flushes;	   /* device cache flushes (preflush or flush op) it or the journal queued */
	u64 flush_journal_writes;	   /* journal thread writes in its flush window */
	u64 flush_journal_bytes;
	u64 pad[5]; /* to a whole number of cache lines (1,024 bytes) */
};

/* The value of rq_issued. */
struct rq_issue {
	u64 rq;
	u64 issue_ns;
};


/* Block device (kernel dev_t, major << 20 | minor) -> device slot. Written by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_DEVICES);
	__type(key, u32);
	__type(value, u32);
} host_devices SEC(".maps");

/*
 * Device slot -> counters; read at scrape. Mappable only for where it puts
 * the values: a mappable array's first value starts a page (kernel
 * array_map_alloc, v5.5+), and values of whole cache lines then each start
 * a line, so that the counters a request touches together share lines.
 * User space reads it by lookup, as any array.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_DEVICES);
	__type(key, u32);
	__type(value, struct device_counters);
} device_stats SEC(".maps");

/* Disk slot -> its data requests on the host device; read at scrape. Mappable as device_stats. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_DISKS);
	__type(key, u32);
	__type(value, struct image_device_counters);
} image_device_stats SEC(".maps");

/* rq_index(request) -> the request issued there and when. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RQ_SLOTS);
	__type(key, u32);
	__type(value, struct rq_issue);
} rq_issued SEC(".maps");

/*
 * Set by user space once host_rq_issue is attached (it is loaded at start
 * and linked only when a followed device needs it, and then notes every
 * followed device's requests): before that, no request can be in
 * rq_issued, and host_rq_complete skips the lookup (6.1, and kernels
 * without the plug-cached clock whose queues keep their own issue time).
 */
u32 rq_issue_noted = 0;

/* Direct I/O bios -> the disk slot + 1 they belong to, from the submitting thread's mark. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_BIOS);
	__type(key, u64);
	__type(value, u32);
} bio_owner SEC(".maps");

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

/*
 * Addresses of iomap_dio_bio_end_io and bio_chain_endio (kallsyms, set at
 * load; 0 when hidden): a bio that ends in the first is a direct I/O bio
 * whose bi_private is its struct iomap_dio; one that ends in the second was
 * split off a bio, its bi_private.
 */
volatile const u64 iomap_dio_end_io_fn = 0;
volatile const u64 bio_chain_end_io_fn = 0;

/*
 * The block programs run for every bio and request of the host, most of
 * them on devices no image lives on: they leave after comparing the device
 * (dev_t) with this short list of the followed ones, before any map lookup,
 * task storage or other helper call. Each entry holds the device's slot
 * above its dev_t (slot << 32 | dev), so that the programs that need the
 * slot take it from here, without host_devices' lookup. With more devices
 * than slots the list is off and host_devices decides. Written by user space.
 */
u64 followed_devs[FILTER_SLOTS] = {};
u32 followed_dev_count = 0;

/* The device slot of a followed device, or -1. */
static __always_inline s64 followed_dev_slot(u32 dev)
{
	u32 n = followed_dev_count, i, *slot;

	if (n > FILTER_SLOTS) {
		slot = bpf_map_lookup_elem(&host_devices, &dev);
		return slot ? *slot : -1;
	}
	for (i = 0; i < FILTER_SLOTS; i++) {
		if (i >= n)
			break;
		if ((u32)followed_devs[i] == dev)
			return followed_devs[i] >> 32;
	}
	return -1;
}

/*
 * Device slot -> some bio on it was ever tagged in bio_owner (set by
 * host_bio_queue and host_bio_split, never cleared). A completion on a
 * device none of whose bios ever was looks no tag up: on a device of ext4
 * or XFS images, whose direct I/O bios name their request, that is every
 * completion, and bio_owner's lookup (a hash and a helper call per bio) was
 * the dearest part of another file's writeback.
 */
u8 dev_tagged[MAX_DEVICES] = {};

static __always_inline void mark_dev_tagged(s64 devslot)
{
	u32 i = bounded(devslot, MAX_DEVICES - 1);

	/* Written once: the test keeps the line shared between CPUs afterwards. */
	if (!dev_tagged[i])
		dev_tagged[i] = 1;
}

/*
 * The exporter's own reads of the images it follows (their format, guest
 * file system and qcow2 tables, read again on every image refresh, and by
 * discovery) are not the VM's: through O_DIRECT their bios name the image
 * as the VMM's do, and through the page cache their pages are the image's.
 * host_bio_queue notes each bio the exporter's process (excluded_tgid, set
 * at load as in disk.h) queues on a followed device in self_bios, and
 * host_bio_split its pieces; their completion counts them as the device's
 * other I/O, never the image's. self_inflight counts the noted bios, so
 * that a completion looks self_bios up only while one is on its way (a few
 * bios a minute per image, none in between). A noted bio whose completion
 * is never classified (past RQ_BIOS_CHARGED of one request) stays noted
 * until a later bio at its address completes, which is then taken for the
 * exporter's: one bio, once.
 */
volatile const u32 excluded_tgid = 0;
s64 self_inflight = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u64);
	__type(value, u8);
} self_bios SEC(".maps");

/* Note a bio as the exporter's own (a full self_bios leaves it the image's). */
static __always_inline void note_self_bio(u64 key)
{
	u8 one = 1;

	if (bpf_map_update_elem(&self_bios, &key, &one, BPF_NOEXIST) == 0)
		inc(&self_inflight, 1);
}

/* Whether a completing bio is the exporter's own; covered: it ends here, and is forgotten. */
static __always_inline bool self_bio_done(u64 key, bool covered)
{
	if (self_inflight <= 0 || !bpf_map_lookup_elem(&self_bios, &key))
		return false;
	if (covered && bpf_map_delete_elem(&self_bios, &key) == 0)
		inc(&self_inflight, -1);
	return true;
}

/*
 * The programs below are tp_btf: their arguments are typed kernel pointers,
 * so fields are read with plain (fault-safe) loads, not probe-read calls.
 */

/* The device slot of a request's device, its partition or for flush requests (no part) the whole disk; -1 if not followed. */
static __always_inline s64 rq_device_slot(struct request *rq)
{
	struct block_device *part = rq->part;

	if (!part)
		part = rq->q->disk->part0;
	if (!part)
		return -1;
	return followed_dev_slot(part->bd_dev);
}

static __always_inline u32 rq_index(struct request *rq, u32 dev)
{
	u32 tag = rq->tag, hctx = rq->mq_hctx->queue_num;

	return ((dev << (RQ_HCTX_BITS + RQ_TAG_BITS)) | ((hctx & ((1 << RQ_HCTX_BITS) - 1)) << RQ_TAG_BITS) |
		(tag & ((1 << RQ_TAG_BITS) - 1))) & (RQ_SLOTS - 1);
}

/*
 * The head page of a large folio, whose fields the page's are: a tail page's
 * mapping is a poison value (guest memory in transparent huge pages, large
 * page-cache folios of XFS and others).
 */
static __always_inline struct page *head_page(struct page *page)
{
	unsigned long head = 0;

	bpf_probe_read_kernel(&head, sizeof(head), &page->compound_head);
	return (head & 1) ? (struct page *)(head - 1) : page;
}

/*
 * Whose is a page on its way to the device, from its inode (its mapping's
 * host): a tracked image's (its disk slot + 1 in *owner), file system
 * metadata (the block device's own cache holds ext4 metadata and jbd2
 * journal buffers; the Btrfs btree inode caches the btrees), or other.
 */
static __always_inline u32 inode_kind(struct inode *host, u64 ino, u16 mode, u32 *owner)
{
	struct image_ref *img;

	/* Never a host, but image_of would match it with an empty place. */
	if (!host)
		return KIND_OTHER;
	img = image_of((u64)host, ino);
	if (img) {
		*owner = img->slot + 1;
		return KIND_DATA;
	}
	if ((mode & S_IFMT) == S_IFBLK || ino == BTRFS_BTREE_INODE)
		return KIND_METADATA;
	return KIND_OTHER;
}

/*
 * A tail page's kind, from its head page: an address computed from the
 * page's compound_head, not a pointer the verifier knows, so every field is
 * a probe read.
 */
static __always_inline u32 tail_page_kind(u64 head, u32 *owner)
{
	struct page *page = (struct page *)head;
	struct inode *host;
	u64 mapping = 0;

	bpf_probe_read_kernel(&mapping, sizeof(mapping), &page->mapping);
	if (!mapping || (mapping & PAGE_MAPPING_ANON))
		return KIND_OTHER;
	host = BPF_CORE_READ((struct address_space *)mapping, host);
	return inode_kind(host, BPF_CORE_READ(host, i_ino), BPF_CORE_READ(host, i_mode), owner);
}

/*
 * The words of struct page from compound_head to mapping (on every kernel
 * since v4.6 the page cache's mapping sits two words after the tail
 * pages' compound_head, in the union after flags), read in one probe read.
 */
struct page_words {
	u64 compound_head;
	u64 pad;
	u64 mapping;
};

/*
 * The kind of a bio's page (inode_kind). The page is a pointer the verifier
 * knows, loaded from the bio the block tracepoint gives: its mapping, the
 * mapping's host and the host's fields are plain (fault-safe) loads, no
 * helper call (it took six probe reads a page). Only compound_head and
 * mapping are needed as numbers, for the tail bit and the anonymous bit,
 * which the verifier forbids testing on the pointers it types them as (the
 * union's first members at their offsets are lru and mapping): one probe
 * read of both.
 */
static __always_inline u32 page_kind(struct page *page, u32 *owner)
{
	struct page_words w = {};
	struct address_space *mapping;
	struct inode *host;

	if (bpf_core_field_offset(struct page, mapping) ==
	    bpf_core_field_offset(struct page, compound_head) + offsetof(struct page_words, mapping)) {
		bpf_probe_read_kernel(&w, sizeof(w), &page->compound_head);
	} else {
		bpf_probe_read_kernel(&w.compound_head, sizeof(w.compound_head), &page->compound_head);
		bpf_probe_read_kernel(&w.mapping, sizeof(w.mapping), &page->mapping);
	}
	if (w.compound_head & 1)
		return tail_page_kind(w.compound_head - 1, owner);
	if (!w.mapping || (w.mapping & PAGE_MAPPING_ANON))
		return KIND_OTHER;
	mapping = page->mapping;
	if (!mapping)
		return KIND_OTHER;
	host = mapping->host;
	if (!host)
		return KIND_OTHER;
	return inode_kind(host, host->i_ino, host->i_mode, owner);
}

/* include/uapi/linux/magic.h: the file systems a VMM keeps shared guest memory on (memfd is tmpfs). */
#define TMPFS_MAGIC 0x01021994
#define HUGETLBFS_MAGIC 0x958458f6

/*
 * Can the page be a VMM's direct I/O buffer, its guest memory? Anonymous or
 * shared memory (memfd, tmpfs, hugetlbfs), never a page of a file's cache on
 * a disk file system: that is writeback or read-ahead, which a thread
 * marked for direct I/O queues too (Btrfs writes a truncated file back when
 * it is closed, and from Debian's 6.12 writes back the image's own pages
 * inside a direct write it turned buffered).
 */
static __always_inline bool guest_memory_page(struct page *page)
{
	u64 mapping = 0;
	unsigned long magic;

	page = head_page(page);
	bpf_probe_read_kernel(&mapping, sizeof(mapping), &page->mapping);
	if (!mapping || (mapping & PAGE_MAPPING_ANON))
		return true;
	magic = BPF_CORE_READ((struct address_space *)mapping, host, i_sb, s_magic);
	return magic == TMPFS_MAGIC || magic == HUGETLBFS_MAGIC;
}

static __always_inline u32 bio_kind(struct bio *bio, u32 opf, u32 *owner)
{
	if (opf & REQ_FLAG(__REQ_META))
		return KIND_METADATA;
	return page_kind(bio->bi_io_vec->bv_page, owner);
}

/*
 * A bio the thread in a synchronous call queues is that call's doing: a
 * read means the call missed the host page cache; during a flush, writes
 * and cache flushes are what the flush cost on the device.
 */
static __always_inline void call_bio(struct io_task *t, struct bio *bio, u32 opf)
{
	struct image_device_counters *ic;
	u32 op = opf & REQ_OP_MASK, slot, kind, owner = 0;

	if (t->call.op == OP_READ) {
		if (op == REQ_OP_READ)
			t->cause |= CAUSE_DEVICE_READ;
		return;
	}
	if (t->call.op != OP_FLUSH)
		return;
	slot = t->call.slot;
	ic = bpf_map_lookup_elem(&image_device_stats, &slot);
	if (!ic)
		return;
	if (op == REQ_OP_FLUSH || (opf & REQ_FLAG(__REQ_PREFLUSH)))
		inc(&ic->flush_cache_flushes, 1);
	if (op != REQ_OP_WRITE || !bio->bi_iter.bi_size)
		return;
	kind = bounded(bio_kind(bio, opf, &owner), KIND_SLOTS - 1);
	inc(&ic->flush_writes[kind], 1);
	inc(&ic->flush_write_bytes[kind], bio->bi_iter.bi_size);
}

/*
 * A synchronous or metadata write from a thread outside any image call (a
 * journal thread, a log worker) while flushes wait on its file system: the
 * journal commit the flush waits for. Charged to the disk whose flush
 * started last; concurrent flushes on one file system share one commit.
 */
static __always_inline void journal_bio(struct bio *bio, u32 opf)
{
	struct image_device_counters *ic;
	struct flush_window *w;
	u32 dev, slot, owner = 0, size;

	if ((opf & REQ_OP_MASK) != REQ_OP_WRITE || !bio->bi_bdev)
		return;
	if (!(opf & (REQ_FLAG(__REQ_SYNC) | REQ_FLAG(__REQ_META) | REQ_FLAG(__REQ_FUA) | REQ_FLAG(__REQ_PREFLUSH))))
		return;
	dev = bio->bi_bdev->bd_dev;
	w = bpf_map_lookup_elem(&flush_windows, &dev);
	if (!w || !w->waiters || bpf_ktime_get_ns() - w->start_ns > FLUSH_WINDOW_MAX_NS)
		return;
	size = bio->bi_iter.bi_size;
	/* Another image's writeback is its data, not a commit. */
	if (size && bio_kind(bio, opf, &owner) == KIND_DATA)
		return;
	slot = w->slot;
	ic = bpf_map_lookup_elem(&image_device_stats, &slot);
	if (!ic)
		return;
	/* An empty preflush write is how the block layer asks for a cache flush. */
	if (opf & REQ_FLAG(__REQ_PREFLUSH))
		inc(&ic->flush_cache_flushes, 1);
	if (!size)
		return;
	inc(&ic->flush_journal_writes, 1);
	inc(&ic->flush_journal_bytes, size);
}

SEC("tp_btf/block_bio_queue")
int host_bio_queue(u64 *ctx)
{
	struct bio *bio = (void *)ctx[0];
	u32 opf = bio->bi_opf;
	struct task_struct *task;
	struct io_task *t;
	s64 devslot;
	u64 key;

	/*
	 * Only bios on followed devices, before the task storage: every bio
	 * of the host passes here, and a VMM thread also reads its own
	 * binaries. A journal's commit for a flush is on the image's device.
	 */
	if (!bio->bi_bdev)
		return 0;
	devslot = followed_dev_slot(bio->bi_bdev->bd_dev);
	if (devslot < 0)
		return 0;
	/* The exporter's own read: no VM's (see self_bios). */
	if (excluded_tgid && (u32)(bpf_get_current_pid_tgid() >> 32) == excluded_tgid) {
		note_self_bio((u64)bio);
		return 0;
	}
	/*
	 * iomap's own direct I/O bios, the bulk of a cache=none disk's, leave
	 * before the task storage: none of what follows applies to them. They
	 * are never a journal's commit (jbd2 and XFS's log write through their
	 * own bios), never tagged (host_rq_complete finds their request by
	 * their end_io), and a synchronous call they belong to is a direct one,
	 * whose cache result is "direct" whatever it reads from the device
	 * (disk.h cache_account), so call_bio has nothing to note.
	 */
	if (iomap_dio_end_io_fn && (u64)bio->bi_end_io == iomap_dio_end_io_fn)
		return 0;
	/*
	 * Writeback and journal threads queue most of a device's other bios:
	 * a kernel thread never has the storage (call.h PF_KTHREAD), whose
	 * lookup it skips.
	 */
	task = bpf_get_current_task_btf();
	t = (task->flags & PF_KTHREAD) ? NULL : bpf_task_storage_get(&io_tasks, task, 0, 0);
	/*
	 * A VMM thread's bio outside a call is its own queued direct I/O
	 * (dio_owner: linux-aio, io_uring, iomap's begin in the tracepoint
	 * mode), never a commit written for another's flush: no window lookup.
	 */
	if (!t || (!t->call.start_ns && !t->dio_owner))
		journal_bio(bio, opf);
	if (!t || !(t->call.start_ns || t->dio_owner))
		return 0;
	if (t->call.start_ns)
		call_bio(t, bio, opf);
	/*
	 * Direct I/O bios are tagged here only when their end_io cannot tell:
	 * iomap's own bios name their request (when its address is known), but
	 * a file system that submits direct I/O its own way (Btrfs: its
	 * btrfs_bio, with its end_io) does not. Only bios of guest memory: a
	 * tag on a page-cache bio would outlive it (page_kind names its owner
	 * without the tag, which then is never looked up nor dropped) and be
	 * found again by a later bio at the same address. Only data reads and
	 * writes, the bios whose tag host_rq_complete looks up (and drops): not
	 * the empty flush of an O_DSYNC write, not a discard, not the log
	 * write (metadata) the thread issues for it.
	 */
	if (t->dio_owner && ((opf & REQ_OP_MASK) == REQ_OP_READ || (opf & REQ_OP_MASK) == REQ_OP_WRITE) &&
	    !(opf & REQ_FLAG(__REQ_META)) && bio->bi_iter.bi_size && (u64)bio->bi_end_io != iomap_dio_end_io_fn &&
	    guest_memory_page(bio->bi_io_vec->bv_page)) {
		key = (u64)bio;
		mark_dev_tagged(devslot);
		bpf_map_update_elem(&bio_owner, &key, &t->dio_owner, BPF_ANY);
	}
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
	u64 parent = (u64)split->bi_private, key = (u64)split;
	u32 *owner;
	s64 devslot;

	if (!split->bi_bdev)
		return 0;
	devslot = followed_dev_slot(split->bi_bdev->bd_dev);
	if (devslot < 0)
		return 0;
	if (self_inflight > 0 && bpf_map_lookup_elem(&self_bios, &parent)) {
		note_self_bio(key);
		return 0;
	}
	owner = bpf_map_lookup_elem(&bio_owner, &parent);
	if (owner) {
		mark_dev_tagged(devslot);
		bpf_map_update_elem(&bio_owner, &key, owner, BPF_ANY);
	}
	return 0;
}

SEC("tp_btf/block_rq_issue")
int host_rq_issue(u64 *ctx)
{
	struct request *rq = (void *)ctx[0];
	s64 dev = rq_device_slot(rq);
	struct rq_issue *slot;
	u32 i;

	if (dev < 0)
		return 0;
	i = rq_index(rq, dev);
	slot = bpf_map_lookup_elem(&rq_issued, &i);
	if (!slot)
		return 0;
	slot->rq = (u64)rq;
	slot->issue_ns = bpf_ktime_get_ns();
	return 0;
}

/* The disk slot + 1 of the tracked image an iomap direct request is on, else 0. */
static __always_inline u32 dio_image_owner(struct iomap_dio *dio)
{
	struct image_ref *img;
	struct inode *inode;

	if (!dio)
		return 0;
	inode = BPF_CORE_READ(dio, iocb, ki_filp, f_inode);
	if (!inode)
		return 0;
	img = image_of((u64)inode, BPF_CORE_READ(inode, i_ino));
	return img ? img->slot + 1 : 0;
}

/*
 * The disk slot + 1 a direct I/O bio belongs to, from the iomap request it
 * serves: its own, or for a piece split off a bio (up to two splits deep),
 * its parent's. 0 when it is not an iomap direct I/O bio of a tracked image.
 */
static __always_inline u32 dio_bio_owner(struct bio *bio)
{
	u64 end_io;
	u32 i;

	/* bi_private is a void pointer: the walk reads through probe reads. */
	for (i = 0; i < 3; i++) {
		end_io = (u64)BPF_CORE_READ(bio, bi_end_io);
		if (end_io == iomap_dio_end_io_fn)
			break;
		if (end_io != bio_chain_end_io_fn || !bio_chain_end_io_fn)
			return 0;
		bio = BPF_CORE_READ(bio, bi_private);
		if (!bio)
			return 0;
	}
	if (i == 3)
		return 0;
	return dio_image_owner(BPF_CORE_READ(bio, bi_private));
}

/*
 * Classify a bio: whose data, or metadata, or other. covered: this
 * completion ends the bio, whose tag (if any) is then dropped.
 */
static __always_inline u32 classify_bio(struct bio *bio, u32 dev, u32 *owner, bool covered)
{
	u64 key = (u64)bio;
	u32 kind, *dio;

	if (self_bio_done(key, covered))
		return KIND_OTHER;
	/*
	 * iomap's own direct I/O bios first, the bulk of a cache=none disk's:
	 * their pages are the VMM's memory, never page cache nor metadata, and
	 * they are never tagged (host_bio_queue), so the page's probe reads and
	 * the tag's lookup would find nothing. The bio names its request.
	 */
	if (iomap_dio_end_io_fn && (u64)bio->bi_end_io == iomap_dio_end_io_fn) {
		*owner = dio_image_owner(bio->bi_private);
		return *owner ? KIND_DATA : KIND_OTHER;
	}
	kind = bio_kind(bio, bio->bi_opf, owner);
	if (kind != KIND_OTHER)
		return kind;
	/*
	 * Direct I/O pages are the VMM's memory: the bio names its request, or
	 * was tagged when queued. iomap's own bios left above, so only a piece
	 * split off one can still name its request: a bio ending in
	 * bio_chain_endio (the first test of dio_bio_owner's walk, here without
	 * its probe read).
	 */
	if (iomap_dio_end_io_fn && bio_chain_end_io_fn && (u64)bio->bi_end_io == bio_chain_end_io_fn) {
		*owner = dio_bio_owner(bio);
		if (*owner)
			return KIND_DATA;
	}
	if (!dev_tagged[bounded(dev, MAX_DEVICES - 1)])
		return KIND_OTHER;
	dio = bpf_map_lookup_elem(&bio_owner, &key);
	if (!dio)
		return KIND_OTHER;
	*owner = *dio;
	if (covered)
		bpf_map_delete_elem(&bio_owner, &key);
	return KIND_DATA;
}

/* Bios of one request charged each to its own owner; the rest go with the last of them. */
#define RQ_BIOS_CHARGED 4

/*
 * Charge nr_bytes of a read or write request's completion to the bios it
 * ends, first bio first: the block layer merges adjacent bios of different
 * files into one request (Btrfs allocates the extents of files written back
 * together side by side), and each bio's bytes are its own owner's. Returns
 * the first bio's kind and owner, which the request and its latency count
 * under.
 */
static __always_inline u32 charge_bios(struct device_counters *dc, struct request *rq, u32 dev, u32 dir,
				       u32 nr_bytes, u32 *first_owner)
{
	struct image_device_counters *ic;
	struct bio *bio = rq->bio;
	u32 i, size, full, kind, first = KIND_OTHER, owner;

	for (i = 0; i < RQ_BIOS_CHARGED; i++) {
		if (!bio || !nr_bytes)
			break;
		full = bio->bi_iter.bi_size;
		size = full < nr_bytes && i < RQ_BIOS_CHARGED - 1 && bio->bi_next ? full : nr_bytes;
		owner = 0;
		kind = bounded(classify_bio(bio, dev, &owner, full <= nr_bytes), KIND_SLOTS - 1);
		if (i == 0) {
			first = kind;
			*first_owner = owner;
		}
		if (kind < KIND_MAX)
			inc(&dc->bytes[kind][dir], size);
		if (owner) {
			owner -= 1;
			ic = bpf_map_lookup_elem(&image_device_stats, &owner);
			if (ic)
				inc(&ic->bytes[dir], size);
		}
		nr_bytes -= size;
		bio = bio->bi_next;
	}
	return first;
}

static __always_inline void hist(u64 *slots, u64 *sum, u64 ns)
{
	inc(&slots[ns_bucket(ns, LAT_SLOTS)], 1);
	inc(sum, ns);
}

/*
 * Completion, possibly in parts (a driver may complete a request in pieces):
 * bytes are counted for every part, the request and its latency once, at
 * the part that ends it. Queue time runs from the request's allocation
 * (rq->start_time_ns, which the block layer keeps when I/O statistics are
 * on, the default) to its issue: plugging and the I/O scheduler. From 6.9
 * that allocation time is the plug's cached one: for a batch submitted
 * under one plug, the first request's, so a later request's queue time
 * also holds the submission of those before it in the batch.
 */
SEC("tp_btf/block_rq_complete")
int host_rq_complete(u64 *ctx)
{
	struct request *rq = (void *)ctx[0];
	u32 nr_bytes = (u32)ctx[2];
	s64 devslot = rq_device_slot(rq);
	u32 dev, op, kind, dir, owner = 0, i;
	u64 service = 0, queue = 0, start, issue;
	struct device_counters *dc;
	struct image_device_counters *ic;
	struct rq_issue *slot = NULL;
	bool last, queued = false;

	if (devslot < 0)
		return 0;
	dev = devslot;
	dc = bpf_map_lookup_elem(&device_stats, &dev);
	if (!dc)
		return 0;
	op = rq->cmd_flags & REQ_OP_MASK;
	if (op == REQ_OP_FLUSH) {
		inc(&dc->flushes, 1);
		return 0;
	}
	if (op == REQ_OP_DISCARD) {
		inc(&dc->discards, 1);
		inc(&dc->discard_bytes, nr_bytes);
		return 0;
	}
	if (op != REQ_OP_READ && op != REQ_OP_WRITE && op != REQ_OP_WRITE_ZEROES)
		return 0;
	/* An empty write carries a flush through the flush machinery, never issued itself. */
	if (!rq->__data_len)
		return 0;
	last = nr_bytes >= rq->__data_len;
	if (op == REQ_OP_WRITE_ZEROES) {
		/*
		 * Zeroing without a payload (ext4's lazy inode table init, zeroed
		 * extents): written, as the device's own statistics count it, and
		 * with no page to say whose, metadata or other.
		 */
		dir = REQ_OP_WRITE;
		kind = (rq->cmd_flags & REQ_FLAG(__REQ_META)) ? KIND_METADATA : KIND_OTHER;
		inc(&dc->bytes[kind][dir], nr_bytes);
	} else {
		dir = op;
		kind = charge_bios(dc, rq, dev, dir, nr_bytes, &owner);
	}
	if (kind >= KIND_MAX || !last)
		return 0;
	inc(&dc->requests[kind][dir], 1);

	/*
	 * The issue time: host_rq_issue's where it noted the request, else the
	 * block layer's own (io_start_time_ns, kept while the queue collects
	 * statistics). User space attaches host_rq_issue where the queue keeps
	 * none, and on kernels that stamp requests with a plug's cached time
	 * (blk_time_get_ns, 6.9 on), where every request of a batch submitted
	 * under one plug (linux-aio, io_uring) carries the time the first of
	 * them was allocated, before later ones were even asked for. Until it
	 * is attached, rq_issued holds nothing to look up.
	 */
	if (rq_issue_noted) {
		i = rq_index(rq, dev);
		slot = bpf_map_lookup_elem(&rq_issued, &i);
	}
	if (slot && slot->rq == (u64)rq && slot->issue_ns) {
		issue = slot->issue_ns;
		slot->rq = 0;
	} else {
		issue = rq->io_start_time_ns;
		if (!issue)
			drop(DROP_REQUEST_UNTIMED);
	}
	if (issue) {
		service = bpf_ktime_get_ns() - issue;
		hist(dc->service[dir], &dc->service_sum_ns[dir], service);
		/* Without I/O statistics on the queue the allocation time is 0: no queue time, not a zero one. */
		start = rq->start_time_ns;
		if (start && issue >= start) {
			queued = true;
			queue = issue - start;
			hist(dc->queue[dir], &dc->queue_sum_ns[dir], queue);
		}
	}
	if (!owner)
		return 0;
	/* The image's share, looked up and used in one place (6.1's verifier loses a pointer kept across). */
	owner -= 1;
	ic = bpf_map_lookup_elem(&image_device_stats, &owner);
	if (!ic)
		return 0;
	inc(&ic->requests[dir], 1);
	if (issue)
		hist(ic->service[dir], &ic->service_sum_ns[dir], service);
	if (queued)
		hist(ic->queue[dir], &ic->queue_sum_ns[dir], queue);
	return 0;
}

/*
 * A page of the image turns dirty in the host page cache. During a buffered
 * write call this is the part of the write that writeback will have to send;
 * the rest landed on pages already dirty (absorbed). Every process's pages
 * pass here: a page of a file system with no tracked image leaves on the
 * super block filter, a page of any other file on the image table, before
 * the task storage lookup.
 */
SEC("tp_btf/writeback_dirty_folio")
int host_dirty_folio(u64 *ctx)
{
	struct folio *folio = (void *)ctx[0];
	struct address_space *mapping = (void *)ctx[1];
	struct inode *host;
	struct io_task *t;
	u64 flags = 0, bytes;
	u32 nr = 1;

	if (!mapping)
		return 0;
	host = mapping->host;
	if (!host || !sb_tracked((u64)host->i_sb) || !image_of((u64)host, host->i_ino))
		return 0;
	t = bpf_task_storage_get(&io_tasks, bpf_get_current_task_btf(), 0, 0);
	if (!t || !t->call.start_ns || t->call.op != OP_WRITE || (u64)host != t->inode)
		return 0;
	bpf_probe_read_kernel(&flags, sizeof(flags), folio);
	if (flags & (1ULL << bpf_core_enum_value(enum pageflags, PG_head))) {
		if (bpf_core_field_exists(folio->_nr_pages))
			nr = folio->_nr_pages;
		else
			nr = BPF_CORE_READ((struct folio___old *)folio, _folio_nr_pages);
	}
	bytes = (u64)nr * PAGE_SIZE;
	if (t->dirtied + bytes > 0xffffffffULL)
		t->dirtied = 0xffffffff;
	else
		t->dirtied += bytes;
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

/* The tracepoint records of jbd2_end_commit and xlog_iclog_sync start with the device (dev_t). */
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

/*
 * XFS writes a log buffer (iclog) to disk: its journal commit. Counted at
 * the write, not at xfs_log_force, which also fires for forces that find
 * the log already on disk.
 */
SEC("tracepoint/xfs/xlog_iclog_sync")
int host_xfs_log_write(struct dev_event *ev)
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

	/* v6.12's verifier refuses arithmetic on a trusted pointer that may be NULL. */
	if (!fs)
		return 0;
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
	struct image_device_counters *ic;
	struct image_ref *img;
	u64 flags, len, inode;
	u32 slot;

	/* v6.12's verifier refuses arithmetic on a trusted pointer that may be NULL. */
	if (!bi || !oe)
		return 0;
	inode = (u64)&bi->vfs_inode;
	img = image_of(inode, bi->vfs_inode.i_ino);
	if (!img)
		return 0;
	slot = img->slot;
	ic = bpf_map_lookup_elem(&image_device_stats, &slot);
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
