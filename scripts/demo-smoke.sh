#!/usr/bin/env bash
# Runs `make demo` for a bounded time, as a newcomer would, and checks that
# the per-disk summary it prints from the stack's Prometheus shows both lab
# VMs' disks with traffic, that it said where to look, and that the stack
# stopped with it.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
stackdir=/var/tmp/fspair-demo
echo "demo-smoke: running the demo for 80s"
bash scripts/demo.sh --duration=80s --summary.interval=35s --stack.dir="$stackdir" 2>&1 | tee "$log" | grep -v '^lab: '
for what in '  prometheus    http://' '  alerts        http://' 'stack: fspair-exporter   up'; do
	grep -qF -- "$what" "$log" || { echo "demo-smoke: the demo did not print '$what'"; exit 1; }
done
for disk in demo-web/vda demo-mail/vda; do
	row=$(grep "^$disk " "$log" | tail -n 1) || { echo "demo-smoke: no summary row for $disk"; exit 1; }
	# READ/s and WRITE/s columns must be numbers above zero.
	echo "$row" | awk -v d="$disk" '{ if ($4+0 <= 0 || $5+0 <= 0) { print "demo-smoke: " d " shows no I/O: " $0; exit 1 } }'
done
if grep -q 'level=ERROR\|demo: .*error' "$log"; then
	echo "demo-smoke: errors in the demo output"; exit 1
fi
# Nothing of the stack may outlive the demo.
left=$(bash scripts/stack.sh status --dir "$stackdir" || true)
if grep -E ' up | not ready ' <<<"$left"; then
	echo "demo-smoke: the stack still runs after the demo"; exit 1
fi
echo "demo-smoke: both disks reported with I/O; the stack stopped"
