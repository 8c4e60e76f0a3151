#!/bin/bash
# Builds exporter/probe's test binary from an experiment whose counter adds
# are plain (bpf/fspair.h FSPAIR_PLAIN_ADD: wrong under concurrency, never
# shipped), for BenchmarkCPUCost's comparison of counter layouts. The BPF
# objects are generated in a copy of the tree: the worktree's bpf/obj stays
# as committed. The environment passes through (CGO_ENABLED=0 gives the
# static binary a guest runs: tests/matrix cpucost -plain).
#
#   bash bench/cpucost/plain.sh OUT
set -euo pipefail
out=$(realpath -m "$1")
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
git ls-files -z | xargs -0 tar -cf - | tar -C "$work" -xf -
sed -i 's/-mcpu=v3"/-mcpu=v3 -DFSPAIR_PLAIN_ADD"/' "$work/bpf/obj/gen.go"
(cd "$work" && nice -n 10 go generate ./bpf/obj && nice -n 10 go test -c -o "$out" ./exporter/probe)
if objdump_out=$(llvm-objdump -d "$work/bpf/obj/disk_bpfel.o" "$work/bpf/obj/host_bpfel.o" 2>/dev/null); then
	if grep -q 'lock \*' <<<"$objdump_out"; then
		echo "the plain build still has atomic adds" >&2
		exit 1
	fi
fi
