/* SPDX-License-Identifier: GPL-2.0 */
/* Helpers shared by fspair's BPF programs: bucket arithmetic and counters. */
#ifndef FSPAIR_H
#define FSPAIR_H

#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#ifndef FSPAIR_PLAIN_ADD
/* Atomic add on a map value shared by all CPUs (lock xadd); yields the old value. */
#define inc(p, v) __sync_fetch_and_add((p), (v))
#else
/*
 * An experiment, never the default (BENCHMARKS.md, "Many CPUs"): a load and
 * a store, which loses updates when two CPUs add at once: the lock's own
 * cost taken away, the lines still shared (their transfers still paid).
 */
#define inc(p, v) ({ typeof(*(p)) __old = *(p); *(p) = __old + (v); __old; })
#endif

/*
 * v & mask, computed where the verifier sees it: the empty asm hides the
 * value's origin from clang, which would otherwise drop a mask it can prove
 * redundant, leaving the verifier with a reloaded value it cannot bound.
 */
static __always_inline u32 bounded(u32 v, u32 mask)
{
	asm volatile("" : "+r"(v));
	return v & mask;
}

/* Floor of log2(v) for v > 0; 0 for v == 0. Branch-free steps keep the verifier happy. */
static __always_inline u32 log2_u64(u64 v)
{
	u32 r = 0, s;

	s = (v > 0xFFFFFFFFULL) << 5; v >>= s; r |= s;
	s = (v > 0xFFFF) << 4; v >>= s; r |= s;
	s = (v > 0xFF) << 3; v >>= s; r |= s;
	s = (v > 0xF) << 2; v >>= s; r |= s;
	s = (v > 0x3) << 1; v >>= s; r |= s;
	r |= (v >> 1);
	return r;
}

/*
 * Bucket of a power-of-two histogram whose upper bounds are 2^0, 2^1 ...
 * 2^(slots-2) units and +Inf: the smallest k with v <= 2^k, capped at the
 * +Inf bucket. v is already in the histogram's unit.
 */
static __always_inline u32 pow2_bucket(u64 v, u32 slots)
{
	u32 k;

	if (v <= 1)
		return 0;
	k = log2_u64(v - 1) + 1; /* ceil(log2(v)) */
	return k < slots - 1 ? k : slots - 1;
}

/*
 * The bucket of a duration of ns nanoseconds in a histogram whose bounds are
 * 2^k microseconds: pow2_bucket((ns + 999) / 1000, slots), without the
 * 64-bit divide (x86's div takes tens of cycles, and every latency and
 * inter-arrival time paid one). ceil(ns / 1000) <= 2^k is ns <= 1000 << k,
 * and for 2^c <= ns < 2^(c+1) the smallest such k is c - 9 or c - 8
 * (1000 is between 2^9 and 2^10; 1000 << 54 still fits in 64 bits). Equal
 * to the divided form for every ns below 2^63 (checked exhaustively to
 * 5e7, around every power of two and 1000 << k, and on 5e7 random values).
 */
static __always_inline u32 ns_bucket(u64 ns, u32 slots)
{
	u32 k;

	if (ns <= 1000)
		return 0;
	k = log2_u64(ns) - 9;
	k += ns > (1000ULL << k);
	return k < slots - 1 ? k : slots - 1;
}

/*
 * The first filters of the programs that run for every file, bio or
 * request of the host: short lists of the followed super blocks and
 * devices, which user space writes into globals, so that the common case
 * (not followed) leaves after a few comparisons, before any helper call.
 */
#define FILTER_SLOTS 16

/* Is v among the first n values of list? n past FILTER_SLOTS: unknown, the list is off. */
static __always_inline bool filter_has(const u64 *list, u32 n, u64 v)
{
	u32 i;

	for (i = 0; i < FILTER_SLOTS; i++) {
		if (i >= n)
			break;
		if (list[i] == v)
			return true;
	}
	return false;
}

#endif /* FSPAIR_H */
