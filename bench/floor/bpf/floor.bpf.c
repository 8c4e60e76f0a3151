// SPDX-License-Identifier: GPL-2.0
/*
 * The cost floor of a block-layer program on this machine, for make bench:
 * an empty tp_btf program (what bpf_stats charges any program), one that
 * counts in an array (a map lookup and an atomic add), and one that also
 * reads the clock (bpf_ktime_get_ns, which every latency needs).
 */
#include "../../../bpf/fspair.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} floor_count SEC(".maps");

SEC("tp_btf/block_rq_issue")
int floor_empty(u64 *ctx)
{
	return 0;
}

SEC("tp_btf/block_bio_queue")
int floor_count_only(u64 *ctx)
{
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&floor_count, &k);

	if (v)
		inc(v, 1);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int floor_clock(u64 *ctx)
{
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&floor_count, &k);

	if (v)
		inc(v, bpf_ktime_get_ns() & 1);
	return 0;
}
