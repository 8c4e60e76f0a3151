#!/usr/bin/env bash
# The fspair stack without Docker, on loopback: the pinned Prometheus with
# fspair's rules and Alertmanager (deploy/versions.env, built into a cache by
# scripts/promstack.sh on first use), and from Debian 12 packages the node exporter, the
# libvirt exporter (when libvirtd answers) and fspair_exporter, with the
# configuration files compose.yaml mounts (deploy/prometheus,
# deploy/alertmanager, rules/). Grafana is not packaged for Debian 12: the
# dashboards in dashboards/ are for a Grafana elsewhere (or compose.yaml).
#
#   scripts/stack.sh start  [--dir DIR]   start everything, wait until ready
#   scripts/stack.sh status [--dir DIR]   one line per component; exit 3 if
#                                         one that was started is not up
#   scripts/stack.sh stop   [--dir DIR]   stop what start started
#
# DIR (default /var/tmp/fspair-stack) holds the data, logs (DIR/log), pid
# files (DIR/run) and DIR/stack.env with the URLs. Listen addresses (and
# the binaries) can be changed in the environment; the defaults keep clear
# of the ports the Debian packages' own services use:
#   FSPAIR_STACK_PROMETHEUS_ADDR   127.0.0.1:19090
#   FSPAIR_STACK_ALERTMANAGER_ADDR 127.0.0.1:19093
#   FSPAIR_STACK_NODE_ADDR         127.0.0.1:19100
#   FSPAIR_STACK_LIBVIRT_ADDR      127.0.0.1:19177
#   FSPAIR_STACK_EXPORTER_ADDR     127.0.0.1:19477
#   FSPAIR_STACK_LIBVIRT_SOCKET    /var/run/libvirt/libvirt-sock-ro
#   FSPAIR_EXPORTER_BIN            bin/fspair_exporter (make build)
#   FSPAIR_PROMETHEUS              the pinned Prometheus (scripts/promstack.sh),
#                                  e.g. /usr/bin/prometheus for Debian's 2.42
#   FSPAIR_ALERTMANAGER            the pinned Alertmanager, likewise
#   FSPAIR_EXPORTER_ARGS           extra flags for fspair_exporter
#   FSPAIR_STACK_PROBE_MODE        auto (fspair_exporter --probe.mode)
#   FSPAIR_STACK_RULES             the rule files' directory, default rules/ (make
#                                  demo: rules generated with the site knowledge
#                                  base the pair lab measured, docs/kdb/site.yaml)
# Needs root: fspair_exporter loads BPF programs.
#
# The lab fleet (README.md "A fleet"; make fleet):
#   scripts/stack.sh fleet start|status|stop [--dir DIR]
# runs tests/fleet/lab (built into DIR/bin): three simulated KVM hosts with
# synthetic disks, each a Prometheus (deploy/fleet/prometheus.yml, the
# per-host rules) and a Thanos sidecar, Thanos Query, Thanos Ruler (the fleet
# rules) and an Alertmanager, on loopback; no root needed. DIR (default
# /var/tmp/fspair-fleet) holds DIR/fleet.env with the URLs and the log
# DIR/log/fleet.log, where each notification delivered is printed.
#   FSPAIR_FLEET_QUERY_ADDR        127.0.0.1:19192 (Thanos Query, the data source)
#   FSPAIR_FLEET_ARGS              more flags for tests/fleet/lab (e.g. -committed-rules)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

usage() {
	echo "usage: $0 start|stop|status [--dir DIR]; $0 fleet start|stop|status [--dir DIR]" >&2
	exit 2
}
[ $# -ge 1 ] || usage
cmd=$1
shift
dir=/var/tmp/fspair-stack
if [ "$cmd" = fleet ]; then
	[ $# -ge 1 ] || usage
	cmd=fleet-$1
	shift
	dir=/var/tmp/fspair-fleet
fi
while [ $# -gt 0 ]; do
	case $1 in
	--dir) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
	--dir=*) dir=${1#--dir=}; shift ;;
	*) usage ;;
	esac
done
dir=$(realpath -m "$dir")

prom_addr=${FSPAIR_STACK_PROMETHEUS_ADDR:-127.0.0.1:19090}
am_addr=${FSPAIR_STACK_ALERTMANAGER_ADDR:-127.0.0.1:19093}
node_addr=${FSPAIR_STACK_NODE_ADDR:-127.0.0.1:19100}
libvirt_addr=${FSPAIR_STACK_LIBVIRT_ADDR:-127.0.0.1:19177}
exporter_addr=${FSPAIR_STACK_EXPORTER_ADDR:-127.0.0.1:19477}
libvirt_socket=${FSPAIR_STACK_LIBVIRT_SOCKET:-/var/run/libvirt/libvirt-sock-ro}
exporter_bin=${FSPAIR_EXPORTER_BIN:-$repo/bin/fspair_exporter}
rules_dir=$(realpath -m "${FSPAIR_STACK_RULES:-$repo/rules}")

# Components in start order; stop goes the other way.
components=(alertmanager prometheus node-exporter libvirt-exporter fspair-exporter)
fleet_query_addr=${FSPAIR_FLEET_QUERY_ADDR:-127.0.0.1:19192}

die() {
	echo "stack: $*" >&2
	exit 1
}

# addr_of NAME: the listen address of a component.
addr_of() {
	case $1 in
	prometheus) echo "$prom_addr" ;;
	alertmanager) echo "$am_addr" ;;
	node-exporter) echo "$node_addr" ;;
	libvirt-exporter) echo "$libvirt_addr" ;;
	fspair-exporter) echo "$exporter_addr" ;;
	fleet) echo "$fleet_query_addr" ;;
	esac
}

# ready_path NAME: the URL path that answers 200 once NAME serves. The
# exporters' landing pages: served by the server that serves /metrics
# (fspair_exporter's once its programs are attached and the first
# discovery round ran), without the cost of a scrape.
ready_path() {
	case $1 in
	prometheus | alertmanager | fleet) echo /-/ready ;;
	*) echo / ;;
	esac
}

# pid_of NAME: the pid of a running component started here, or nothing.
# The pid file's process must still run the binary it was started with,
# so a pid reused by another process is not taken for it; a binary
# replaced since (make build) shows as "PATH (deleted)" (fs/d_path.c).
pid_of() {
	local f=$dir/run/$1.pid pid exe now
	[ -f "$f" ] || return 0
	read -r pid exe <"$f" || return 0
	[ -n "$pid" ] && [ -d "/proc/$pid" ] || return 0
	now=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0
	if [ "$now" = "$exe" ] || [ "$now" = "$exe (deleted)" ]; then
		echo "$pid"
	fi
	return 0
}

# alive PID: whether the process runs; an exited one its parent has not
# reaped yet (a zombie; these daemons' parent is whatever adopted them) does
# not. The state follows the last ")" of /proc/PID/stat (proc(5)).
alive() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "${st%% *}" != Z ]
}

# listening ADDR: whether something accepts TCP connections on ADDR.
listening() {
	local host=${1%:*} port=${1##*:}
	(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

# who_listens ADDR: the process listening on ADDR's port, for messages.
who_listens() {
	command -v ss >/dev/null || return 0
	ss -Hltnp "sport = :${1##*:}" 2>/dev/null | grep -o 'users:(("[^"]*",pid=[0-9]*' | head -n 1 | sed 's/users:(("\(.*\)",pid=\(.*\)/\1, pid \2/'
}

# ready NAME: whether NAME answers 200 on its ready path.
ready() {
	curl -fsS -m 2 -o /dev/null "http://$(addr_of "$1")$(ready_path "$1")" 2>/dev/null
}

# libvirt_reachable: whether libvirtd answers on its read-only socket.
libvirt_reachable() {
	[ -S "$libvirt_socket" ] || return 1
	if command -v virsh >/dev/null; then
		timeout 5 virsh -r -c "qemu:///system?socket=$libvirt_socket" uri >/dev/null 2>&1
	fi
}

# launch NAME BIN ARGS...: start BIN in its own session with its output in
# DIR/log/NAME.log and its pid (and binary) in DIR/run/NAME.pid.
launch() {
	local name=$1 bin=$2
	shift 2
	local path
	path=$(command -v "$bin") || die "$name: $bin not found ($(hint "$name"))"
	path=$(realpath "$path")
	local addr
	addr=$(addr_of "$name")
	if listening "$addr"; then
		local who
		who=$(who_listens "$addr")
		die "$name: $addr is in use${who:+ by $who}; stop it or set $(addr_var "$name")"
	fi
	setsid "$path" "$@" >"$dir/log/$name.log" 2>&1 </dev/null &
	echo "$! $path" >"$dir/run/$name.pid"
}

hint() {
	case $1 in
	prometheus) echo "scripts/promstack.sh build, or set FSPAIR_PROMETHEUS" ;;
	alertmanager) echo "scripts/promstack.sh build, or set FSPAIR_ALERTMANAGER" ;;
	node-exporter) echo "Debian package prometheus-node-exporter; make deps" ;;
	libvirt-exporter) echo "Debian package prometheus-libvirt-exporter; make deps" ;;
	fspair-exporter) echo "make build, or set FSPAIR_EXPORTER_BIN" ;;
	fleet) echo "go build ./tests/fleet/lab failed" ;;
	esac
}

addr_var() {
	case $1 in
	prometheus) echo FSPAIR_STACK_PROMETHEUS_ADDR ;;
	alertmanager) echo FSPAIR_STACK_ALERTMANAGER_ADDR ;;
	node-exporter) echo FSPAIR_STACK_NODE_ADDR ;;
	libvirt-exporter) echo FSPAIR_STACK_LIBVIRT_ADDR ;;
	fspair-exporter) echo FSPAIR_STACK_EXPORTER_ADDR ;;
	fleet) echo FSPAIR_FLEET_QUERY_ADDR ;;
	esac
}

# wait_ready NAME SECONDS: wait until NAME is ready; on failure say why in
# one line (its last log line) and return 1.
wait_ready() {
	local name=$1 deadline=$((SECONDS + $2)) pid
	pid=$(pid_of "$name")
	while ! ready "$name"; do
		if [ -z "$pid" ] || ! alive "$pid"; then
			echo "stack: $name exited: $(last_line "$name") (log: $dir/log/$name.log)" >&2
			return 1
		fi
		if [ $SECONDS -ge "$deadline" ]; then
			echo "stack: $name not ready at http://$(addr_of "$name")$(ready_path "$name") after $2s: $(last_line "$name") (log: $dir/log/$name.log)" >&2
			return 1
		fi
		sleep 0.2
	done
}

last_line() {
	grep -v '^[[:space:]]*$' "$dir/log/$1.log" 2>/dev/null | tail -n 1 || true
}

# stop_one NAME: SIGTERM, then SIGKILL after 10 s.
stop_one() {
	local name=$1 pid
	pid=$(pid_of "$name")
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 100); do
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			echo "stack: $name ignored SIGTERM for 10s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
			while alive "$pid"; do sleep 0.1; done
		fi
		echo "stack: stopped $name"
	fi
	rm -f "$dir/run/$name.pid"
}

stop_all() {
	local i running=0
	for ((i = ${#components[@]} - 1; i >= 0; i--)); do
		[ -n "$(pid_of "${components[i]}")" ] && running=1
		stop_one "${components[i]}"
	done
	rm -f "$dir/run/skipped"
	[ $running = 1 ] || echo "stack: nothing running in $dir"
}

# write_targets: the file_sd target files prometheus.yml reads, with this
# stack's addresses (compose.yaml mounts deploy/prometheus/targets/compose
# in their place). A skipped libvirt exporter has no target.
write_targets() {
	local t=$dir/prometheus/targets job addr
	mkdir -p "$t"
	for job in fspair node libvirt prometheus alertmanager; do
		case $job in
		fspair) addr=$exporter_addr ;;
		node) addr=$node_addr ;;
		libvirt) addr=$libvirt_addr ;;
		prometheus) addr=$prom_addr ;;
		alertmanager) addr=$am_addr ;;
		esac
		{
			echo "# Written by scripts/stack.sh start."
			if [ "$job" = libvirt ] && [ "$libvirt" = no ]; then
				echo "[]"
			else
				echo "- targets: ['$addr']"
			fi
		} >"$t/$job.yml.tmp"
		mv "$t/$job.yml.tmp" "$t/$job.yml"
	done
}

start() {
	[ "$(id -u)" = 0 ] || die "run as root (fspair_exporter loads BPF programs)"
	command -v curl >/dev/null || die "curl not found (Debian package curl; make deps)"
	local name
	for name in "${components[@]}"; do
		if [ -n "$(pid_of "$name")" ]; then
			die "already running in $dir ($name); scripts/stack.sh stop --dir $dir first"
		fi
	done
	[ -x "$exporter_bin" ] || die "fspair-exporter: $exporter_bin not found (make build, or set FSPAIR_EXPORTER_BIN)"
	compgen -G "$rules_dir/*.yml" >/dev/null || die "prometheus: no rule files (*.yml) in $rules_dir (FSPAIR_STACK_RULES)"
	mkdir -p "$dir/log" "$dir/run" "$dir/prometheus/data" "$dir/alertmanager"
	rm -f "$dir/run/skipped"

	libvirt=yes
	local exporter_libvirt=()
	if ! libvirt_reachable; then
		libvirt=no
		exporter_libvirt=(--no-discovery.libvirt)
		echo "stack: libvirtd does not answer on $libvirt_socket: no libvirt exporter, and fspair_exporter finds QEMU processes in /proc only"
		echo libvirt-exporter >"$dir/run/skipped"
	fi

	# Prometheus resolves the paths in prometheus.yml against the directory
	# it was given the file in: the repository's file, linked here beside
	# the repository's rules (or FSPAIR_STACK_RULES) and this stack's targets.
	ln -sfn "$repo/deploy/prometheus/prometheus.yml" "$dir/prometheus/prometheus.yml"
	ln -sfn "$rules_dir" "$dir/prometheus/rules"
	write_targets

	# On any failure from here, stop what was started.
	trap 'stop_all >/dev/null 2>&1' EXIT

	local prometheus alertmanager
	prometheus=${FSPAIR_PROMETHEUS:-$(bash "$repo/scripts/promstack.sh" path prometheus)} ||
		die "prometheus: the pinned build failed (scripts/promstack.sh build)"
	alertmanager=${FSPAIR_ALERTMANAGER:-$(bash "$repo/scripts/promstack.sh" path alertmanager)} ||
		die "alertmanager: the pinned build failed (scripts/promstack.sh build)"
	launch alertmanager "$alertmanager" \
		--config.file="$repo/deploy/alertmanager/alertmanager.yml" \
		--storage.path="$dir/alertmanager" \
		--web.listen-address="$am_addr" \
		--cluster.listen-address=
	launch prometheus "$prometheus" \
		--config.file="$dir/prometheus/prometheus.yml" \
		--storage.tsdb.path="$dir/prometheus/data" \
		--web.listen-address="$prom_addr"
	# Debian's node exporter enables its systemd collector, which fails
	# every scrape on a host not booted with systemd (containers, the lab).
	local node_flags=()
	[ -d /run/systemd/system ] || node_flags=(--no-collector.systemd)
	launch node-exporter prometheus-node-exporter \
		--web.listen-address="$node_addr" "${node_flags[@]}"
	if [ "$libvirt" = yes ]; then
		launch libvirt-exporter prometheus-libvirt-exporter \
			--web.listen-address="$libvirt_addr" \
			--libvirt.uri="qemu:///system?socket=$libvirt_socket"
	fi
	# shellcheck disable=SC2086 # FSPAIR_EXPORTER_ARGS is a list of flags
	launch fspair-exporter "$exporter_bin" \
		--web.listen-address="$exporter_addr" \
		--probe.mode="${FSPAIR_STACK_PROBE_MODE:-auto}" \
		--discovery.libvirt.socket="$libvirt_socket" \
		"${exporter_libvirt[@]}" ${FSPAIR_EXPORTER_ARGS:-}

	for name in "${components[@]}"; do
		[ "$name" = libvirt-exporter ] && [ "$libvirt" = no ] && continue
		# Prometheus replays its write-ahead log before it is ready.
		wait_ready "$name" 60 || exit 1
	done
	trap - EXIT

	{
		echo "PROMETHEUS_URL=http://$prom_addr"
		echo "ALERTMANAGER_URL=http://$am_addr"
		echo "NODE_EXPORTER_URL=http://$node_addr"
		[ "$libvirt" = yes ] && echo "LIBVIRT_EXPORTER_URL=http://$libvirt_addr"
		echo "FSPAIR_EXPORTER_URL=http://$exporter_addr"
	} >"$dir/stack.env"
	echo "stack: ready in $dir (logs in $dir/log)"
	status
}

# status: one line per component; 3 if a component started is not up.
status() {
	local name pid state rc=0
	for name in "${components[@]}"; do
		pid=$(pid_of "$name")
		if [ -z "$pid" ]; then
			if grep -qx "$name" "$dir/run/skipped" 2>/dev/null; then
				state="skipped (libvirtd did not answer)"
			elif [ -f "$dir/run/$name.pid" ]; then
				state="exited: $(last_line "$name")"
				rc=3
			else
				state="stopped"
				rc=3
			fi
		elif ready "$name"; then
			state="up    http://$(addr_of "$name")  pid $pid"
		else
			state="not ready  pid $pid"
			rc=3
		fi
		printf 'stack: %-17s %s\n' "$name" "$state"
	done
	return $rc
}

# fleet_start: build the lab (and Thanos, on first use: minutes), start it
# and wait until Thanos Query sees every host and the Ruler (fleet.env).
fleet_start() {
	command -v curl >/dev/null || die "curl not found (Debian package curl; make deps)"
	[ -z "$(pid_of fleet)" ] || die "the lab fleet already runs in $dir; scripts/stack.sh fleet stop --dir $dir first"
	mkdir -p "$dir/log" "$dir/run" "$dir/bin"
	bash "$repo/scripts/promstack.sh" path thanos >/dev/null || die "fleet: the pinned Thanos did not build (scripts/promstack.sh build thanos)"
	bash "$repo/scripts/promstack.sh" path prometheus >/dev/null || die "fleet: the pinned Prometheus did not build (scripts/promstack.sh build)"
	bash "$repo/scripts/promstack.sh" path alertmanager >/dev/null || die "fleet: the pinned Alertmanager did not build (scripts/promstack.sh build)"
	(cd "$repo" && ${GO:-go} build -o "$dir/bin/fspair-fleet-lab" ./tests/fleet/lab) || die "fleet: go build ./tests/fleet/lab failed"
	rm -f "$dir/fleet.env"
	# The lab finds the repository (deploy/fleet, rules/gen) from its
	# working directory.
	# shellcheck disable=SC2086 # FSPAIR_FLEET_ARGS is a list of flags
	(cd "$repo" && launch fleet "$dir/bin/fspair-fleet-lab" -dir "$dir" -query-addr "$fleet_query_addr" ${FSPAIR_FLEET_ARGS:-})
	local deadline=$((SECONDS + 300)) pid
	# Until setsid has exec'd the lab, its pid runs another binary: give
	# pid_of a few seconds to see it.
	until [ -s "$dir/fleet.env" ] && ready fleet; do
		pid=$(pid_of fleet)
		if [ -n "$pid" ]; then
			alive "$pid" || die "fleet exited: $(last_line fleet) (log: $dir/log/fleet.log)"
		elif [ $SECONDS -ge $((deadline - 295)) ]; then
			die "fleet exited: $(last_line fleet) (log: $dir/log/fleet.log)"
		fi
		[ $SECONDS -lt "$deadline" ] || { fleet_stop; die "fleet not up after 300s (log: $dir/log/fleet.log)"; }
		sleep 0.5
	done
	echo "stack: the lab fleet runs in $dir (log and notifications: $dir/log/fleet.log; stop: make fleet-stop)"
	sed 's/^/  /' "$dir/fleet.env"
}

# fleet_stop: SIGTERM; the lab stops its daemons itself (up to 60 s).
fleet_stop() {
	local pid
	pid=$(pid_of fleet)
	if [ -z "$pid" ]; then
		echo "stack: no lab fleet running in $dir"
		rm -f "$dir/run/fleet.pid"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 600); do
		alive "$pid" || break
		sleep 0.1
	done
	alive "$pid" && die "fleet: pid $pid still running 60s after SIGTERM; see $dir/log/fleet.log"
	rm -f "$dir/run/fleet.pid"
	echo "stack: stopped the lab fleet"
}

fleet_status() {
	local pid
	pid=$(pid_of fleet)
	if [ -z "$pid" ]; then
		echo "stack: fleet stopped"
		return 3
	fi
	if ! ready fleet; then
		echo "stack: fleet not ready  pid $pid"
		return 3
	fi
	echo "stack: fleet up    Thanos Query http://$fleet_query_addr  pid $pid"
	sed 's/^/  /' "$dir/fleet.env" 2>/dev/null || true
}

case $cmd in
start) start ;;
stop) stop_all ;;
status) status ;;
fleet-start) fleet_start ;;
fleet-stop) fleet_stop ;;
fleet-status) fleet_status ;;
*) usage ;;
esac
