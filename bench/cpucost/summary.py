#!/usr/bin/env python3
"""Medians and ranges of bench/cpucost/rounds.sh's results, by case and build.

    python3 bench/cpucost/summary.py bench/results-cpucost-41.txt

For each case (workload/jobs) and metric (bpf-ns/req, req/s and the named
programs' ns/req): each build's median (min-max) over the rounds, and
each other build over atomic round by round (the runs of a round are paired).
"""
import re
import statistics
import sys
from collections import defaultdict

METRICS = ["bpf-ns/req", "req/s", "lost-writes", "dio-rw-begin-ns/req", "dio-complete-ns/req",
           "host-rq-complete-ns/req", "xfs-buffered-write-ns/req", "host-dirty-folio-ns/req"]

runs = defaultdict(lambda: defaultdict(dict))  # case -> metric -> (build, round) -> value
build = rnd = None
for line in open(sys.argv[1]):
    m = re.match(r"### (\w+) round (\d+)", line)
    if m:
        build, rnd = m.group(1), int(m.group(2))
        continue
    m = re.match(r"BenchmarkCPUCost/tracepoint/(\S+?)-\d+\s+\d+\s+\d+ ns/op\s+(.*)", line)
    if not m:
        continue
    fields = m.group(2).split()
    for value, unit in zip(fields[0::2], fields[1::2]):
        runs[m.group(1)][unit][(build, rnd)] = float(value)

builds = sorted({b for c in runs.values() for v in c.values() for b, _ in v})
for case, metrics in runs.items():
    print(f"== {case}")
    for metric in METRICS:
        vals = metrics.get(metric)
        if not vals:
            continue
        cells = []
        for b in builds:
            xs = [v for (bb, _), v in vals.items() if bb == b]
            if xs:
                cells.append(f"{b} {statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f}, n={len(xs)})")
        rounds = sorted({r for _, r in vals})
        ratio = ""
        for other in builds:
            if other == "atomic":
                continue
            ratios = [vals[(other, r)] / vals[("atomic", r)] for r in rounds
                      if (other, r) in vals and vals.get(("atomic", r))]
            if ratios:
                ratio += f"; {other}/atomic median {statistics.median(ratios):.3f} [{' '.join(f'{x:.2f}' for x in ratios)}]"
        print(f"  {metric}: {'; '.join(cells)}{ratio}")
