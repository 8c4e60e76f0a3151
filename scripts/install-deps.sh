#!/usr/bin/env bash
# Installs what fspair's build, tests and demo need on Debian 12 (run as root).
# Idempotent: packages already present are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(
	clang llvm libbpf-dev bpftool        # make generate (BPF C -> bpf2go)
	prometheus                           # Debian's 2.42: the rule tests and query walk also run on 2.x
	prometheus-node-exporter prometheus-libvirt-exporter  # the native stack (scripts/stack.sh)
	docker-compose                       # deploy tests: `docker-compose config` on compose.yaml (no engine needed)
	qemu-system-x86 qemu-utils           # the VM lab
	fio xfsprogs btrfs-progs e2fsprogs util-linux fdisk
	busybox-static cpio kmod             # the lab's guest initramfs
	libbpf-tools                         # reference tools to check figures against
	libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients  # libvirt discovery test (not -system: it pulls systemd)
	curl jq ca-certificates strace        # strace: the start-failure test checks nothing was loaded
	chromium fonts-dejavu-core           # make report: the PNG of the report page (headless)
	python3 python3-venv                 # dashboards/gen: grafana-foundation-sdk in a venv
)
# The dashboards' schema check (scripts/dashboards.sh schema) runs on node
# and npm; a node that brings its own npm (a nodejs package from elsewhere)
# must not be replaced by Debian's npm, which conflicts with it.
command -v npm >/dev/null || pkgs+=(nodejs npm)
if [ -f tests/lab/packages.txt ]; then
	while read -r p; do
		p=${p%%#*}; p=${p//[[:space:]]/}
		[ -n "$p" ] && pkgs+=("$p")
	done < tests/lab/packages.txt
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
	echo "install-deps: all ${#pkgs[@]} packages present"
fi

# Tracepoint programs attach by event ids read from tracefs.
if [ ! -d /sys/kernel/tracing/events ]; then
	mount -t tracefs tracefs /sys/kernel/tracing
fi
command -v go >/dev/null || { echo "install-deps: Go is required (go.mod names the version)"; exit 1; }

# The pinned Prometheus, Alertmanager and Thanos (deploy/versions.env), built from the
# Go module proxy into a cache outside the repository on first use.
bash scripts/promstack.sh build
