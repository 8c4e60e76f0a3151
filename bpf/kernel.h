/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel types fspair's probes read, declared with
 * preserve_access_index so that every field access is a CO-RE relocation
 * resolved against the running kernel's BTF at load time. Only the fields
 * used are declared: their offsets come from the kernel, not from here.
 */
#ifndef FSPAIR_KERNEL_H
#define FSPAIR_KERNEL_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;
typedef _Bool bool;
#define true 1
#define false 0
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

/* BPF UAPI (map types, helper flags), as in the kernel's include/uapi/linux/bpf.h. */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};
enum { BPF_ANY = 0, BPF_NOEXIST = 1, BPF_EXIST = 2 };
/* include/uapi/linux/bpf.h map flags */
enum { BPF_F_NO_PREALLOC = 1, BPF_F_MMAPABLE = 1 << 10 };
enum { BPF_LOCAL_STORAGE_GET_F_CREATE = 1 };

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct iovec {
	void *iov_base;
	unsigned long iov_len;
};

struct super_block {
	__u32 s_dev;
	unsigned long s_magic;
};

struct inode {
	unsigned short i_mode;
	unsigned long i_ino;
	struct super_block *i_sb;
};

struct btrfs_inode {
	struct inode vfs_inode;
};

struct btrfs_ordered_extent {
	__u64 num_bytes;
	unsigned long flags;
};

struct btrfs_fs_devices {
	__u8 fsid[16];
};

struct btrfs_fs_info {
	struct btrfs_fs_devices *fs_devices;
};

struct address_space {
	struct inode *host;
};

struct page {
	struct address_space *mapping;
	unsigned long compound_head; /* bit 0 set: a tail page, the rest its head */
};

/*
 * _nr_pages is only valid in a large folio (PG_head set in the flags word,
 * the first word of every folio); it was _folio_nr_pages before v6.14.
 */
struct folio {
	struct address_space *mapping;
	unsigned int _nr_pages;
};

struct folio___old {
	unsigned int _folio_nr_pages;
};

struct bio_vec {
	struct page *bv_page;
};

struct block_device {
	__u32 bd_dev;
};

struct bvec_iter {
	unsigned int bi_size;
};

struct bio {
	struct bio *bi_next; /* the next bio of a request */
	struct block_device *bi_bdev;
	__u32 bi_opf;
	struct bvec_iter bi_iter;
	struct bio_vec *bi_io_vec;
	void *bi_end_io;
	void *bi_private;
};

struct gendisk {
	struct block_device *part0;
};

struct request_queue {
	struct gendisk *disk;
};

struct blk_mq_hw_ctx {
	unsigned int queue_num;
};

struct request {
	struct request_queue *q;
	struct blk_mq_hw_ctx *mq_hctx;
	int tag;
	__u32 cmd_flags;
	unsigned int __data_len;
	__u64 start_time_ns;
	__u64 io_start_time_ns;
	struct bio *bio;
	struct block_device *part;
};

struct file {
	struct inode *f_inode;
	unsigned int f_flags;
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
};

struct files_struct {
	struct fdtable *fdt;
};

struct task_struct {
	unsigned int flags;
	int tgid;
	struct files_struct *files;
};

struct kiocb {
	struct file *ki_filp;
	long long ki_pos;
	void *ki_complete;
	int ki_flags;
};

struct iov_iter {
	bool data_source;
	unsigned long count;
};

/* fs/iomap/direct-io.c: a direct request in progress. */
struct iomap_dio {
	struct kiocb *iocb;
};

/* kernel/bpf/task_iter.c: the context of a task_file iterator program. */
struct bpf_iter_meta {
	void *seq;
};

struct bpf_iter__task_file {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	__u32 fd;
	struct file *file;
};

/* io_uring/io_uring.h: the submission queue entry as the kernel keeps it. */
struct io_cqe {
	__u64 user_data;
	__s32 res;
	int fd;
};

struct io_kiocb {
	struct file *file;
	__u8 opcode;
	__u64 flags;
	struct io_cqe cqe;
	void *async_data;
};

/* io_uring/rw.h: the command data of read/write requests (overlays io_kiocb.cmd). */
struct io_rw {
	struct kiocb kiocb;
	__u64 addr;
	__u32 len;
	__u32 flags;
};

/* io_uring/rw.h: prepared vectored requests keep their imported iterator here (v6.10+). */
struct io_async_rw {
	struct iov_iter iter;
};

struct io_uring_cqe {
	__u64 user_data;
	__s32 res;
	__u32 flags;
};

struct io_event {
	__u64 data;
	__u64 obj;
};

/* fs/aio.c: the kernel side of a linux-aio request; rw is its first member. */
struct aio_kiocb {
	struct kiocb rw;
	struct io_event ki_res;
};

#pragma clang attribute pop

/* include/linux/page-flags.h; the value is relocated against the running kernel. */
enum pageflags {
	PG_head = 6,
};

/* include/linux/blk_types.h; relocated likewise. */
enum req_flag_bits {
	__REQ_SYNC = 11,
	__REQ_META = 12,
	__REQ_FUA = 17,
	__REQ_PREFLUSH = 18,
};

/* include/uapi/linux/aio_abi.h: the user-space iocb (UAPI, fixed layout). */
struct iocb {
	__u64 aio_data;
	__u32 aio_key;
	__u32 aio_rw_flags;
	__u16 aio_lio_opcode;
	__s16 aio_reqprio;
	__u32 aio_fildes;
	__u64 aio_buf;
	__u64 aio_nbytes;
	__s64 aio_offset;
	__u64 aio_reserved2;
	__u32 aio_flags;
	__u32 aio_resfd;
};

/* Opaque pointers of tracepoint prototypes. */
struct io_ring_ctx;

/*
 * The context of syscalls/sys_enter_* and sys_exit_* tracepoints: the layout
 * printed in /sys/kernel/tracing/events/syscalls/<event>/format, an ABI that
 * has not changed since syscall tracepoints were added (v2.6.33): 8 bytes of
 * common fields, the syscall number padded to 8, then the arguments as longs.
 */
struct syscall_enter_ctx {
	__u64 common;
	__s32 nr;
	__s32 pad;
	__u64 args[6];
};

struct syscall_exit_ctx {
	__u64 common;
	__s32 nr;
	__s32 pad;
	__s64 ret;
};

#endif /* FSPAIR_KERNEL_H */
