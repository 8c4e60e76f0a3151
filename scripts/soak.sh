#!/usr/bin/env bash
# make soak: run the lab for a while with VMs coming and going under one
# exporter, and report its memory, descriptors, goroutines, counts and
# errors over time (TestSoak in tests/e2e/soak_test.go, build tag soak).
#
#   scripts/soak.sh [DURATION]
#
# DURATION is a Go duration (30m, the default; 1h; 90s for a smoke run;
# the memory trend is judged only with 10 samples after a 5-minute warm-up).
# The run needs what the lab needs (root, loop devices, QEMU, fio in the
# kit; see tests/lab/README.md) and boots one guest.
#
# Environment:
#   FSPAIR_SOAK_DIR     where results go (default /var/tmp/fspair-soak):
#                       soak-<UTC stamp>.csv (one row per sample),
#                       soak-<stamp>.txt (the summary), soak-<stamp>-exporter.log
#                       and soak-<stamp>.log (the go test output)
#   FSPAIR_SOAK_SAMPLE  time between samples (default 30s)
#
# Not part of make test. On a shared machine, wrap the run:
#   flock /var/tmp/fspair-lab.lock scripts/soak.sh 30m
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-30m}
dir=${FSPAIR_SOAK_DIR:-/var/tmp/fspair-soak}
mkdir -p "$dir"

# Seconds in a Go duration (h, m, s parts), for go test's own timeout.
secs=$(awk -v d="$duration" 'BEGIN {
	s = 0; rest = d
	while (match(rest, /^[0-9.]+(h|ms|m|s)/)) {
		part = substr(rest, 1, RLENGTH); rest = substr(rest, RLENGTH + 1)
		if (part ~ /ms$/) { s += substr(part, 1, length(part) - 2) / 1000 }
		else { v = substr(part, 1, length(part) - 1); u = substr(part, length(part))
			s += v * (u == "h" ? 3600 : u == "m" ? 60 : 1) }
	}
	if (rest != "" || s <= 0) { print "bad"; exit }
	print int(s + 0.5)
}')
if [[ $secs == bad ]]; then
	echo "soak: duration '$duration' is not a Go duration such as 30m or 1h30m" >&2
	exit 2
fi

stamp=$(date -u +%Y%m%dT%H%M%SZ)
log="$dir/soak-$stamp.log"
export GOFLAGS=-mod=mod FSPAIR_SOAK_DURATION="$duration" FSPAIR_SOAK_DIR="$dir" FSPAIR_SOAK_STAMP="$stamp"
echo "soak: $duration, results in $dir/soak-$stamp.{csv,txt,log}; a line every ${FSPAIR_SOAK_SAMPLE:-30s}"
# Setup (kit, host file system, guest boot) and teardown take a few
# minutes on top of the run.
rc=0
go test -tags soak -count=1 -p 1 -timeout "$((secs + 1200))s" -run '^TestSoak$' -v ./tests/e2e/ 2>&1 | tee "$log" || rc=$?
if [[ -f $dir/soak-$stamp.txt ]]; then
	echo
	cat "$dir/soak-$stamp.txt"
fi
if [[ $rc -ne 0 ]]; then
	echo "soak: failed (see $log); after a killed run sweep leftovers with tests/lab/cleanup.sh" >&2
fi
exit "$rc"
