// SPDX-License-Identifier: GPL-2.0
/*
 * The floor of fspair's tracepoint mode on this machine: an empty program on
 * each hook a direct request of a VMM passes there (iomap's begin and
 * completion, io_uring's submission and completion, the flush, the block
 * layer). Run under a fio job, floor prints each one's ns/event: what the
 * kernel charges a program that does nothing at that hook, the part of
 * exporter/probe's BenchmarkEngineCost figures no change to the programs
 * can take away.
 */
#include "../../../bpf/fspair.h"

char LICENSE[] SEC("license") = "GPL";

#define EMPTY(name, hook)          \
	SEC("tp_btf/" #hook)       \
	int name(u64 *ctx)         \
	{                          \
		return 0;          \
	}

EMPTY(empty_dio_rw_begin, iomap_dio_rw_begin)
EMPTY(empty_dio_complete, iomap_dio_complete)
EMPTY(empty_dio_rw_queued, iomap_dio_rw_queued)
EMPTY(empty_uring_submit, io_uring_submit_req)
EMPTY(empty_uring_complete, io_uring_complete)
EMPTY(empty_sync_enter, ext4_sync_file_enter)
EMPTY(empty_sync_exit, ext4_sync_file_exit)
EMPTY(empty_bio_queue, block_bio_queue)
EMPTY(empty_rq_complete, block_rq_complete)
