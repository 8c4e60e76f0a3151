#!/usr/bin/env python3
"""Medians and ranges of BenchmarkCPUCost's rounds, by case and build.

    python3 bench/cpucost/summary.py bench/results-cpucost-41.txt
    python3 bench/cpucost/summary.py bench/results-cpucost-41-guest.txt
    python3 bench/cpucost/summary.py --markdown FILE   # the same as tables

Reads the records of bench/cpucost/rounds.sh (this host) and of
`go run ./tests/matrix cpucost` (a two-vCPU guest): "### BUILD round N ..."
then the benchmark's result lines. For each case (mode/workload/jobs) and
metric (bpf-ns/req, req/s, lost-writes and every program's ns/req): each
build's median (min-max) over the rounds, and each other build over atomic
round by round (the runs of a round are paired). Then, per build, what a
second CPU on the same disk adds: 2jobs-1image minus 2jobs-2images of the
same run, seconds apart, round by round and the median.
"""
import re
import statistics
import sys
from collections import defaultdict

FIRST = ["bpf-ns/req", "req/s", "lost-writes"]

markdown = "--markdown" in sys.argv[1:]
path = [a for a in sys.argv[1:] if a != "--markdown"][0]

runs = defaultdict(lambda: defaultdict(dict))  # case -> metric -> (build, round) -> value
build = rnd = None
for line in open(path):
    m = re.match(r"### (\w+) round (\d+)", line)
    if m:
        build, rnd = m.group(1), int(m.group(2))
        continue
    # GOMAXPROCS above 1 suffixes the name with -N (the guest's runs start
    # with one CPU online: no suffix).
    m = re.match(r"BenchmarkCPUCost/(\S+?)(?:-\d+)?\s+\d+\s+\d+ ns/op\s+(.*)", line)
    if not m or build is None:
        continue
    fields = m.group(2).split()
    for value, unit in zip(fields[0::2], fields[1::2]):
        runs[m.group(1)][unit][(build, rnd)] = float(value)

builds = sorted({b for c in runs.values() for v in c.values() for b, _ in v},
                key=lambda b: (b != "atomic", b))


def metric_order(metrics):
    return [m for m in FIRST if m in metrics] + sorted(m for m in metrics if m not in FIRST)




def cell(xs):
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f})" if xs else "-"


if markdown:
    print("| case | metric | " + " | ".join(f"{b}: median (range)" for b in builds) + " | " +
          " | ".join(f"{b} / atomic, paired by round: median" for b in builds if b != "atomic") + " |")
    print("|---|---|" + "---:|" * (2 * len(builds) - 1))
    for case, metrics in runs.items():
        for metric in metric_order(metrics):
            vals = metrics[metric]
            cells = [cell([v for (bb, _), v in vals.items() if bb == b]) + f", n={sum(1 for bb, _ in vals if bb == b)}"
                     for b in builds]
            ratios = []
            for other in builds:
                if other == "atomic":
                    continue
                rs = [vals[(other, r)] / vals[("atomic", r)] for (bb, r) in vals
                      if bb == other and vals.get(("atomic", r))]
                ratios.append(f"{statistics.median(rs):.2f}" if rs else "-")
            print(f"| {case} | {metric} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    print()
    print("| mode/workload | program | " + " | ".join(f"{b}: 1 image minus 2, by round (median)" for b in builds) + " |")
    print("|---|---|" + "---|" * len(builds))
    for case in sorted(runs):
        if not case.endswith("/2jobs-1image"):
            continue
        two = case.replace("/2jobs-1image", "/2jobs-2images")
        for metric in metric_order(runs[case]):
            if not metric.endswith("ns/req") or two not in runs:
                continue
            one_img, two_img = runs[case][metric], runs[two].get(metric, {})
            cells = []
            for b in builds:
                diffs = [one_img[k] - two_img[k] for k in sorted(one_img) if k[0] == b and k in two_img]
                cells.append(f"{' '.join(f'{d:.0f}' for d in diffs)} ({statistics.median(diffs):.0f})" if diffs else "-")
            print(f"| {case.removesuffix('/2jobs-1image')} | {metric} | " + " | ".join(cells) + " |")
    sys.exit(0)

for case, metrics in runs.items():
    print(f"== {case}")
    for metric in metric_order(metrics):
        vals = metrics[metric]
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

print("== a second CPU on the same disk: 2jobs-1image minus 2jobs-2images in the same run, ns/req")
for case in sorted(runs):
    if not case.endswith("/2jobs-1image"):
        continue
    two = case.replace("/2jobs-1image", "/2jobs-2images")
    if two not in runs:
        continue
    print(f"  {case.removesuffix('/2jobs-1image')}:")
    for metric in metric_order(runs[case]):
        if not metric.endswith("ns/req"):
            continue
        one_img, two_img = runs[case][metric], runs[two].get(metric, {})
        cells = []
        for b in builds:
            diffs = [one_img[k] - two_img[k] for k in sorted(one_img) if k[0] == b and k in two_img]
            if diffs:
                cells.append(f"{b} {' '.join(f'{d:.0f}' for d in diffs)} (median {statistics.median(diffs):.0f})")
        if cells:
            print(f"    {metric}: {'; '.join(cells)}")
