#!/usr/bin/env bash
# Runs `make demo` as a newcomer would and, while it runs, walks every query
# of every dashboard against its Prometheus (tests/k6 TestQueryWalk, build
# tag querywalk: each panel and variable query must parse and return data,
# instant and over the last 5 minutes, but for the few the walk lists as
# unable to in a short demo). The walk waits, up to $walk_wait, until the
# long-window rule groups (every 3m, rules/fspair.rules.yml) have evaluated
# on the VMs' data; then the demo is stopped. Then checks that the per-disk
# summary the demo prints from Prometheus shows both lab VMs' disks with
# traffic, that it said where to look, and that the stack stopped with it.
set -euo pipefail
cd "$(dirname "$0")/.."
stackdir=/var/tmp/fspair-demo
# Upper bounds: the walk usually ends 3 to 6 minutes after the VMs start.
# The web VM's class settles on web after a couple of minutes (the writes
# that lay out its files weigh in the 5m window until reads outnumber
# them), and the three chained 3m groups (disk.long, efficiency.long,
# fleet) take their turns anywhere in their interval; FspairPoorPairing
# fires on the mail VM once it has been classed mail for the demo's
# scaled `for` (3m). The demo stops as soon as the walk ends.
walk_wait=11m
demo_max=17m
log=$(mktemp)
work=$(mktemp -d)
demo_pid=
tail_pid=
cleanup() {
	if [ -n "$demo_pid" ] && kill -0 "$demo_pid" 2>/dev/null; then
		kill -TERM "$demo_pid" 2>/dev/null || true
		wait "$demo_pid" 2>/dev/null || true
	fi
	[ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
	rm -rf "$log" "$work"
}
trap cleanup EXIT

# The walk's test binary first, so that building it does not take the
# demo's CPU.
echo "demo-smoke: building the dashboards' query walk (go test -tags querywalk -c ./tests/k6)"
GOFLAGS=-mod=mod go test -tags querywalk -c -o "$work/walk.test" ./tests/k6/

echo "demo-smoke: starting the demo (stopped after the walk, at most $demo_max)"
bash scripts/demo.sh --duration="$demo_max" --summary.interval=35s --stack.dir="$stackdir" >"$log" 2>&1 &
demo_pid=$!
# The demo's output, as it comes, without the lab's boot chatter.
tail -n +1 -f --pid="$demo_pid" "$log" | grep --line-buffered -v '^lab: ' &
tail_pid=$!

# The demo prints "demo: running" once both VMs run their workloads.
until grep -q '^demo: running' "$log"; do
	if ! kill -0 "$demo_pid" 2>/dev/null; then
		rc=0
		wait "$demo_pid" || rc=$?
		demo_pid=
		echo "demo-smoke: the demo ended (exit $rc) before its VMs ran"
		exit 1
	fi
	sleep 2
done
prom=$(sed -n 's/^PROMETHEUS_URL=//p' "$stackdir/stack.env")
[ -n "$prom" ] || { echo "demo-smoke: no PROMETHEUS_URL in $stackdir/stack.env"; exit 1; }

# The VM disk dashboard opens on the first domain in sorted order: on a
# host with only the demo's VMs, demo-mail. Naming it keeps the walk on
# the demo's disk when other QEMU guests run (the exporter follows them too).
# The per-class rows must show the demo's two classes: the walk waits until
# demo-web is classed web and demo-mail mail.
echo "demo-smoke: walking the dashboards' queries against $prom (waiting up to $walk_wait for the rules)"
walk_rc=0
(cd tests/k6 && "$work/walk.test" -test.run '^TestQueryWalk$' -test.v -test.count=1 -test.timeout=20m \
	-prometheus "$prom" -wait "$walk_wait" -var domain=demo-mail -classes demo-web=web,demo-mail=mail) | sed -u 's/^/walk | /' || walk_rc=$?

echo "demo-smoke: stopping the demo"
kill -TERM "$demo_pid" 2>/dev/null || true
demo_rc=0
wait "$demo_pid" || demo_rc=$?
demo_pid=
sleep 1
kill "$tail_pid" 2>/dev/null || true
tail_pid=

[ "$demo_rc" = 0 ] || { echo "demo-smoke: the demo exited with $demo_rc"; exit 1; }
[ "$walk_rc" = 0 ] || { echo "demo-smoke: the dashboards' query walk failed (the walk | lines above)"; exit 1; }
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
echo "demo-smoke: every dashboard query ran on the demo's data; both disks reported with I/O; the stack stopped"
