#!/usr/bin/env bash
# make demo: the native stack (scripts/stack.sh: Prometheus with the rules,
# Alertmanager, node and libvirt exporters, fspair_exporter) and two lab VMs
# on two file-system pairs. Extra arguments go to the demo (e.g.
# --duration=2m to stop by itself; go run ./tests/demo -h lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "demo: run as root (loop devices, mounts, BPF)"; exit 1; }
# make deps: the packages, the guest kit, Prometheus and Alertmanager, and
# the demo's binaries (bin/fspair_exporter, fspair-demo, fspair-rules-gen
# that regenerates the rules with the pair lab's site knowledge base,
# fspair-report that renders the report every few minutes); seconds warm.
bash scripts/install-deps.sh
exec bin/fspair-demo --exporter=bin/fspair_exporter --rules.gen=bin/fspair-rules-gen --report=bin/fspair-report "$@"
