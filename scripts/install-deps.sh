#!/usr/bin/env bash
# make deps: installs what fspair's build, tests and demo need on Debian 12
# (run as root) and builds what make demo runs. Idempotent: packages already
# present are left alone, cached builds are reused.
#
# The steps that take long run side by side and print one line when they
# start (with what a cold run took on a 2-core machine) and one when they
# end; their own output (apt, the Go tool's downloads) goes to a log file the
# line names, under $FSPAIR_BUILD_LOG_DIR (default /var/tmp/fspair-build),
# and a failure prints that log's tail:
#   - the Debian packages (apt-get), then the lab's guest kit (kernel package
#     and initramfs, tests/lab/kit.sh), which needs them;
#   - Prometheus and Alertmanager (scripts/promstack.sh build demo);
#   - fspair's own binaries that make demo runs (Go modules and compile).
# Thanos and the other tools only make test or make fleet use are built there,
# on first use. README.md "Two commands" has the measured times.
set -euo pipefail
cd "$(dirname "$0")/.."

# What make demo needs (make deps). Usage: install-deps.sh [test]; with
# `test`, also what only make test uses (make test runs it so: a newcomer's
# make deps installs no more than the demo needs).
pkgs=(
	prometheus-node-exporter prometheus-libvirt-exporter  # the native stack (scripts/stack.sh)
	qemu-system-x86 qemu-utils           # the VM lab
	fio xfsprogs btrfs-progs e2fsprogs util-linux fdisk
	busybox-static cpio kmod             # the lab's guest initramfs
	libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients  # the demo's libvirt VM (not -system: it pulls systemd)
	curl jq ca-certificates
	chromium fonts-dejavu-core           # the report's PNG (headless), which the demo renders
)
test_pkgs=(
	clang llvm libbpf-dev bpftool        # make generate (BPF C -> bpf2go)
	prometheus                           # Debian's 2.42: the rule tests and query walk also run on 2.x
	docker-compose                       # deploy tests: `docker-compose config` on compose.yaml (no engine needed)
	libbpf-tools                         # reference tools to check figures against
	strace                               # the start-failure test checks nothing was loaded
	python3 python3-venv                 # dashboards/gen: grafana-foundation-sdk in a venv
)
mode=${1:-demo}
case $mode in
demo) ;;
test) pkgs+=("${test_pkgs[@]}") ;;
*) echo "usage: $0 [test]" >&2; exit 2 ;;
esac
# The dashboards' schema check (scripts/dashboards.sh schema) runs on node
# and npm; a node that brings its own npm (a nodejs package from elsewhere)
# must not be replaced by Debian's npm, which conflicts with it.
[ "$mode" = demo ] || command -v npm >/dev/null || pkgs+=(nodejs npm)
# The lab's packages (tests/lab/packages.txt): the guests' tools; a line
# whose comment starts with "test:" (the held-out workloads' programs,
# Filebench's build tools) only in test mode.
if [ -f tests/lab/packages.txt ]; then
	while read -r line; do
		p=${line%%#*}; p=${p//[[:space:]]/}
		[ -n "$p" ] || continue
		case $line in
		*'# test:'*) [ "$mode" = test ] && pkgs+=("$p") ;;
		*) pkgs+=("$p") ;;
		esac
	done < tests/lab/packages.txt
fi

logdir=${FSPAIR_BUILD_LOG_DIR:-/var/tmp/fspair-build}
mkdir -p "$logdir"
start=$(date +%s)

# step NAME WHAT COLD CMD...: CMD in the background with its output in
# NAME.log; its pid lands in steps[NAME]. COLD is what it took cold on a
# 2-core machine (README.md "Two commands"), or empty when nothing is to do.
declare -A steps
step() {
	local name=$1 what=$2 cold=$3
	shift 3
	: >"$logdir/$name.log"
	echo "deps: $what${cold:+ (cold on 2 cores: $cold)}; log in $logdir/$name.log"
	"$@" >>"$logdir/$name.log" 2>&1 &
	steps[$name]=$!
}

# finish NAME WHAT: waits for step NAME and says how it ended; a failure
# shows the log's tail and returns 1.
finish() {
	local name=$1 what=$2
	if wait "${steps[$name]}"; then
		echo "deps: $what done at $(($(date +%s) - start)) s"
		return 0
	fi
	echo "deps: $what FAILED; the last lines of $logdir/$name.log:" >&2
	tail -n 25 "$logdir/$name.log" | sed 's/^/  /' >&2
	return 1
}

command -v go >/dev/null || { echo "install-deps: Go is required (go.mod names the version)"; exit 1; }

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The Debian packages, then the guest kit (kit.sh needs busybox, fio, kmod).
apt_then_kit() {
	if [ ${#missing[@]} -gt 0 ]; then
		echo "install-deps: installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" || return 1
	fi
	# Tracepoint programs attach by event ids read from tracefs.
	if [ ! -d /sys/kernel/tracing/events ]; then
		mount -t tracefs tracefs /sys/kernel/tracing || return 1
	fi
	bash tests/lab/kit.sh "${FSPAIR_LAB_CACHE:-/var/tmp/fspair-lab-cache}"
}
if [ ${#missing[@]} -gt 0 ]; then
	step packages "installing ${#missing[@]} Debian packages, then the lab's guest kit" "about 1.5 min" apt_then_kit
else
	step packages "all ${#pkgs[@]} Debian packages present; the lab's guest kit" "" apt_then_kit
fi

# The pinned Prometheus and Alertmanager (deploy/versions.env), built from
# the Go module proxy into a cache outside the repository; promstack.sh
# prints its own lines (and says where its logs go).
promstack_demo() {
	bash scripts/promstack.sh build demo
}
promstack_demo &
steps[promstack]=$!

# The Go compiler's own garbage collector: off until a compile's heap
# reaches GOMEMLIMIT. A cold build of fspair's binaries then took 22% less
# CPU (93-95 s against 118-122 s, two rounds each, README.md "Two commands"),
# and a build is CPU-bound on 2 cores. The largest compile stays under the
# limit; past it the collector runs as usual. FSPAIR_BUILD_GOENV overrides.
export FSPAIR_BUILD_GOENV=${FSPAIR_BUILD_GOENV:-GOGC=off GOMEMLIMIT=1536MiB}

# fspair's binaries that make demo runs, so that it starts at once.
demo_binaries() {
	export GOFLAGS=-mod=mod
	# shellcheck disable=SC2086
	export $FSPAIR_BUILD_GOENV
	go build -o bin/fspair_exporter ./exporter &&
		go build -o bin/fspair-demo ./tests/demo &&
		go build -o bin/fspair-rules-gen ./rules/gen &&
		go build -o bin/fspair-report ./report
}
step binaries "building fspair's exporter and demo tools" "about 2.5 min" demo_binaries

rc=0
finish packages "Debian packages and guest kit" || rc=1
finish binaries "fspair's binaries" || rc=1
wait "${steps[promstack]}" || { echo "deps: Prometheus/Alertmanager FAILED (scripts/promstack.sh says why above)" >&2; rc=1; }
[ "$rc" = 0 ] || exit 1
echo "deps: ready in $(($(date +%s) - start)) s (make demo next; make test builds Thanos and the test tools on first use)"
