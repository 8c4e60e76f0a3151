// SPDX-License-Identifier: GPL-2.0
/*
 * The trampoline floor at fspair's read and write hooks of the fentry mode
 * (bpf/disk_fentry.h): an empty fentry and fexit on ext4's read_iter and
 * write_iter. What any program at these hooks costs before it does
 * anything; the guest overhead bench (tests/matrix bench, variant
 * empty-pair) holds it attached with `floor -hold`.
 */
#include "../../../bpf/fspair.h"

char LICENSE[] SEC("license") = "GPL";

#define EMPTY_PAIR(fn, dir)                    \
	SEC("fentry/" #fn)                     \
	int pair_##dir##_enter(u64 *ctx)       \
	{                                      \
		return 0;                      \
	}                                      \
	SEC("fexit/" #fn)                      \
	int pair_##dir##_exit(u64 *ctx)        \
	{                                      \
		return 0;                      \
	}

EMPTY_PAIR(ext4_file_read_iter, read)
EMPTY_PAIR(ext4_file_write_iter, write)
