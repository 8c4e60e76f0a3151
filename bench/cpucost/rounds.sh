#!/bin/bash
# Rotated rounds of exporter/probe's BenchmarkCPUCost (tracepoint mode, this
# host's CPUs, no guest), three variants: the shipped build (atomic adds on
# counters shared by every CPU); an experiment whose counter adds are plain
# (bpf/fspair.h FSPAIR_PLAIN_ADD, wrong under concurrency, never shipped);
# and the shipped build with the disk's counters in a per-CPU array
# (-cpucost.percpu). The order rotates each round. Each run takes the lab
# lock.
#
#   bash bench/cpucost/rounds.sh ROUNDS OUT
#
# The plain build is bench/cpucost/plain.sh's.
set -euo pipefail
rounds=${1:-6}
out=${2:-bench/results-cpucost-41.txt}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$root"
nice -n 10 go test -c -o "$work/atomic.test" ./exporter/probe
bash bench/cpucost/plain.sh "$work/plain.test"

{
	echo "# exporter/probe BenchmarkCPUCost, tracepoint mode, $(nproc) CPUs; atomic = $(git rev-parse --short HEAD) as built, plain = the same with -DFSPAIR_PLAIN_ADD, percpu = atomic with -cpucost.percpu (disk_stats a per-CPU array). $rounds rounds, the variants' order rotating; each run under flock /var/tmp/fspair-lab.lock."
	echo "# host: $(uname -r), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out"
# One run under the lab lock, started only while no rules bench
# (rules/bench, which measures CPU time too) runs: the lock is given back
# and taken again until none does.
run() {
	local rc
	while :; do
		rc=0
		flock /var/tmp/fspair-lab.lock bash -c '
			if pgrep -f "rules/[b]ench" >/dev/null; then exit 75; fi
			echo "### $1 round $2 $(date -u +%Y-%m-%dT%H:%M:%SZ)"
			bin=$1; flags=; if [ "$1" = percpu ]; then bin=atomic; flags=-cpucost.percpu; fi
			"$3/$bin.test" -test.run "^\$" -test.bench "CPUCost/tracepoint" -test.benchtime 1x -test.count 1 $flags 2>&1 | grep -E "^(Benchmark|--- FAIL|    [a-z_]+\.go:)"
		' run "$@" || rc=$?
		if ((rc != 75)); then return $rc; fi
		sleep 15
	done
}
variants=(atomic plain percpu)
for r in $(seq 1 "$rounds"); do
	# The variants' order rotates: each runs first, second and last in turn.
	for i in 0 1 2; do
		v=${variants[(i + r - 1) % 3]}
		run "$v" "$r" "$work" | tee -a "$out"
	done
done
