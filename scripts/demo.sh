#!/usr/bin/env bash
# make demo: the native stack (scripts/stack.sh: Prometheus with the rules,
# Alertmanager, node and libvirt exporters, fspair_exporter) and two lab VMs
# on two file-system pairs. Extra arguments go to the demo (e.g.
# --duration=2m to stop by itself; go run ./tests/demo -h lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "demo: run as root (loop devices, mounts, BPF)"; exit 1; }
bash scripts/install-deps.sh
export GOFLAGS=-mod=mod
go build -o bin/fspair_exporter ./exporter
go build -o bin/fspair-demo ./tests/demo
# The demo regenerates the rules with the site knowledge base the pair lab
# measured (docs/kdb/site.yaml).
go build -o bin/fspair-rules-gen ./rules/gen
# ... and renders the report (report/) from its Prometheus every few minutes.
go build -o bin/fspair-report ./report
exec bin/fspair-demo --exporter=bin/fspair_exporter --rules.gen=bin/fspair-rules-gen --report=bin/fspair-report "$@"
