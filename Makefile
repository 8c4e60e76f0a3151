# fspair: one Go module, BPF C compiled by bpf2go (objects committed).
# Tool versions are pinned here and in go.mod (the `tool` line for bpf2go).

GO        ?= go
BIN       := bin/fspair_exporter
# Time given to each fuzz target in `make fuzz` (the seed corpora also run in `make test`).
FUZZTIME  ?= 1000000x

export GOFLAGS := -mod=mod

# The Prometheus, Alertmanager and Grafana versions fspair is tested with and
# bundles (PROMETHEUS_VERSION, ALERTMANAGER_VERSION, GRAFANA_VERSION), pinned
# in one file that scripts and tests read too; `make promstack` builds the
# first two into a cache outside the repository.
include deploy/versions.env
SHELL := /bin/bash

# The kernels the kernel matrix boots in TCG guests (tests/matrix): Debian 12's
# cloud kernels, with BTF and BPF trampolines. Pinned here and nowhere else:
# make matrix runs them all; make test (lab-test: tests/matrix TestMatrixCI) and
# make bench (PARTS=kernel) run the first.
MATRIX_KERNELS ?= linux-image-6.1.0-56-cloud-amd64 linux-image-6.12.117+deb12-cloud-amd64
export FSPAIR_MATRIX_KERNELS := $(MATRIX_KERNELS)

.PHONY: test-deps promstack all build generate check-generate rules check-rules dashboards check-dashboards lint test unit-test deploy-test lab-test demo demo-smoke stack stack-stop stack-status fleet fleet-stop fleet-status bench bench-rules foundation guesthist matrix print-matrix-kernels report validate filebench filebench-live kdb kdb-quick loadtest fuzz soak deps clean

all: build

build:
	$(GO) build -o $(BIN) ./exporter

# Regenerate the BPF objects and their Go bindings (needs clang and libbpf headers).
generate:
	$(GO) generate ./bpf/obj

# Generated files must match their sources: CI regenerates and diffs.
check-generate: generate
	git diff --exit-code -- bpf/obj || { echo "bpf/obj is stale: run 'make generate' and commit"; exit 1; }

# The rule files are generated from rules/classes.yaml and rules/kdb (see rules/README.md).
rules:
	$(GO) run ./rules/gen -out rules

check-rules: rules
	git diff --exit-code -- rules/*.yml rules/fleet/*.yml || { echo "rules are stale: run 'make rules' and commit"; exit 1; }

# The Grafana dashboards are generated with grafana-foundation-sdk (pinned, in a
# venv under ~/.cache/fspair) by dashboards/gen; see dashboards/README.md.
dashboards:
	bash scripts/dashboards.sh generate

# Drift against dashboards/gen, then the model of the pinned Grafana
# (@grafana/schema; dashboards/README.md).
check-dashboards:
	bash scripts/dashboards.sh check
	bash scripts/dashboards.sh schema

lint: build
	@echo "== gofmt"; test -z "$$(gofmt -l exporter bpf tests rules bench report dashboards deploy)" || { gofmt -l exporter bpf tests rules bench report dashboards deploy; exit 1; }
	@echo "== go vet"; $(GO) vet ./...
	@echo "== promtool check metrics"; bash scripts/check-metrics.sh $(BIN)

# Everything CI runs: unit tests (with fuzz seed corpora), BPF tests against
# the running kernel, the lab end-to-end tests with real QEMU guests, and lint.
# scripts/steps.sh makes the steps in this order, each as its own goal, stops
# at the first failure, and prints when each starts, how long each took and,
# at the end, every step's time and lab-test's per package and long test.
# unit-test+deploy-test run at the same time: deploy-test mostly waits for
# Prometheus (scripts/steps.sh).
TEST_STEPS := test-deps promstack build check-generate check-rules check-dashboards lint unit-test+deploy-test lab-test kdb-quick filebench-live demo-smoke
test:
	@MAKE='$(MAKE)' bash scripts/steps.sh $(TEST_STEPS)

# What only the tests use, beyond make deps (Debian packages: clang for make
# generate, Debian's Prometheus 2.42, docker-compose, ...); seconds when present.
test-deps:
	@echo "== test dependencies (scripts/install-deps.sh test)"
	bash scripts/install-deps.sh test

# The pinned Prometheus (with promtool), Alertmanager and Thanos, built once
# into a cache outside the repository (scripts/promstack.sh; make deps builds
# the first two without promtool; cold: minutes, then seconds).
promstack:
	@echo "== Prometheus $(PROMETHEUS_VERSION), Alertmanager $(ALERTMANAGER_VERSION), Thanos $(THANOS_VERSION) (scripts/promstack.sh)"
	@start=$$(date +%s); bash scripts/promstack.sh build && echo "promstack: ready in $$(( $$(date +%s) - start )) s"

# Three packages at a time, dashboards first (20 min a package: the default
# 10 min is near exporter/probe on a loaded host): its test spends most of its
# time waiting for a real Prometheus to evaluate the rules (34 s of CPU in
# 147 s here), so with two at a time it held one of the two CPUs' turns idle.
unit-test:
	@echo "== unit and BPF tests"
	$(GO) test -count=1 -p 3 -timeout 20m ./dashboards/... ./exporter/... ./bpf/... ./rules/... ./report/... ./tests/demo/
	$(GO) test -count=1 -tags querywalk -run '^(TestConfigCounterReason|TestEmptyReason.*)$$' ./tests/k6/

lab-test:
	@echo "== lab tests (real QEMU guests; see tests/lab)"
	$(GO) test -count=1 -p 1 -timeout 75m -v ./tests/...

demo: build
	bash scripts/demo.sh

# The demo, bounded in time, with its summary checked (part of make test).
demo-smoke: build
	bash scripts/demo-smoke.sh

# The native stack (Debian packages, the same configuration files as compose.yaml).
stack: build
	bash scripts/stack.sh start

stack-stop:
	bash scripts/stack.sh stop

stack-status:
	bash scripts/stack.sh status

# The lab fleet through Thanos (README.md "A fleet"; deploy/fleet, tests/fleet):
# three simulated KVM hosts, each a Prometheus with the per-host rules and a
# Thanos sidecar, Thanos Query (the fleet's data source), Thanos Ruler with
# the fleet rules and an Alertmanager, on loopback until make fleet-stop.
fleet:
	bash scripts/stack.sh fleet start

fleet-stop:
	bash scripts/stack.sh fleet stop

fleet-status:
	bash scripts/stack.sh fleet status

# compose.yaml, the native stack, the systemd unit (root: starts the stack).
deploy-test: build
	@echo "== deploy: compose.yaml, native stack, systemd unit"
	$(GO) test -count=1 -v ./deploy/...

bench: build
	bash scripts/bench.sh

# tests/e2e TestFoundation on all 18 data disks: raw and qcow2 x QEMU's three
# aio modes on each of ext4, XFS and Btrfs (lab-test runs a covering subset of
# 6, 103 s; TestModesAgree covers every host FS x aio mode there). About 4 minutes.
foundation:
	flock /var/tmp/fspair-lab.lock $(GO) test -count=1 -v -timeout 20m ./tests/e2e/ -run 'TestFoundation$$' -foundation.all

# tests/e2e TestGuestHistogram with the slow p99 check (40 s a disk) on all
# eight disks: plain QEMU's raw and qcow2 x three aio modes, and the libvirt
# domain's two (lab-test runs it on three). About 8 minutes.
guesthist:
	flock /var/tmp/fspair-lab.lock $(GO) test -count=1 -v -timeout 30m ./tests/e2e/ -run 'TestGuestHistogram$$' -guesthist.all

# The kernel matrix (tests/matrix): on every kernel of MATRIX_KERNELS, for each
# probe mode (MATRIX_MODES; empty: the harness's default fentry,tracepoint,syscall;
# "current" for an exporter without --probe.mode), the exporter's counts against
# fio's on ext4/xfs/btrfs with psync, libaio and io_uring, the programs that did
# not attach, and exporter/probe's tests in the guest. It takes the lab lock per
# kernel itself (do not wrap it in flock). More flags in MATRIX_FLAGS, e.g.
# -out tests/matrix/RESULTS.md. About 10 minutes per kernel and mode here.
MATRIX_MODES ?=
MATRIX_FLAGS ?=
matrix:
	$(GO) run ./tests/matrix run $(if $(MATRIX_MODES),-modes '$(MATRIX_MODES)') $(MATRIX_FLAGS)

# For running tests/matrix by hand: FSPAIR_MATRIX_KERNELS="$$(make -s print-matrix-kernels)".
print-matrix-kernels:
	@echo $(MATRIX_KERNELS)

# k6 (pinned, built by scripts/k6.sh): a web service in a lab VM under load with
# k6's metrics in the same Prometheus, 200 scrapers on /metrics, and the
# dashboards' queries at the rate of a team of 20 (tests/k6; about 5 minutes).
loadtest:
	flock /var/tmp/fspair-lab.lock $(GO) test -tags loadtest -count=1 -v -timeout 25m ./tests/k6/

# The real Filebench personalities in lab guests (tests/workload/filebench,
# issue 37): each run boots a guest on a guest/host pair with its host settings,
# runs one personality (layout, then -runtime, 3m by default) under the exporter and records
# the features and the live class per window; about 4 minutes a run (36 in the default series), the lab
# lock taken per run, resumable. Not part of make test. More flags in
# FILEBENCH_FLAGS, e.g. -runs varmail@btrfs/ext4/raw/none/native -budget 1h; -runs heldout
# makes the held-out parameter variants; -runs long-layout makes again, once, the stored runs
# whose layout outlasted 120 s (their counted windows held it); -fit -write fits rules/classes.yaml.
FILEBENCH_FLAGS ?=
filebench:
	$(GO) run ./tests/workload/filebench $(FILEBENCH_FLAGS)

# The live workload class on lab guests, full matrix with production rule
# windows (tests/validate; about 4 h with the 6m settle time; CI runs a subset with short windows).
validate:
	flock /var/tmp/fspair-lab.lock $(GO) test -tags validate -count=1 -v -timeout 5h ./tests/validate/ -run 'TestValidateFull$$'

# The pair lab (tests/kdb): the knowledge base's best/worst pairs re-derived on
# this machine, 9 guest/host pairs x 4 workloads in 3 randomized blocks with
# control runs against drift (117 runs, about 3 h 10 min); KDB_SIZE=quick is
# the reduced matrix (2 blocks, 14 runs, about 7 minutes), too small to settle
# a verdict, whose first block make test runs (kdb-quick).
# It writes a site file for rules/gen (only verdicts the bootstrap settles) and
# a report, takes the lab lock pair by pair itself, and resumes after an
# interruption. More flags in KDB_FLAGS, e.g. -out docs/kdb, or on a
# real host -hostdir ext4=/srv/ext4,xfs=/srv/xfs,btrfs=/srv/btrfs (see tests/kdb/README.md).
KDB_SIZE ?= full
KDB_FLAGS ?=
kdb:
	$(GO) run ./tests/kdb -size $(KDB_SIZE) $(KDB_FLAGS)

# The reduced matrix's first block from scratch, as make test runs it: a
# fresh state (no resuming from an earlier run), its 4 cells and 3 control
# runs in 3 guest boots, the site file checked by rules/gen and promtool, the
# report written. Every run, guest and file of the tool's is made as in the
# reduced matrix; its second block (the same 7 runs in a new order, about
# 200 s) settles no more (the reduced matrix settles nothing) and is left to
# make kdb KDB_SIZE=quick.
kdb-quick: build
	@echo "== pair lab, reduced matrix, first block (tests/kdb -size quick -repeats 1)"
	d=$$(mktemp -d /var/tmp/fspair-kdb-quick.XXXXXX) && \
	$(GO) run ./tests/kdb -size quick -repeats 1 -state $$d/state -out $$d/report && \
	for f in site.yaml report.md report.html cells.json; do test -s $$d/report/$$f || { echo "kdb-quick: no $$f"; exit 1; }; done && \
	echo "kdb-quick: report and site file in $$d/report"

# Filebench live (part of make test): one real personality in a lab guest
# (Filebench built once from ../shared/vendor/filebench and cached by the
# tarball's hash), its layout and a 3-minute run, every window classed by
# the live model as the recording rules would (settling included); it fails
# unless >= 90% of the windows after the first 3 minutes are right and none
# in the first 3 minutes is wrong at confidence >= 0.9. About 5 minutes.
# The whole series and its held-out tables: tests/workload/filebench.
FILEBENCH_LIVE_RUNS ?= varmail@xfs/xfs/raw/writeback/threads
filebench-live:
	@echo "== Filebench live: $(FILEBENCH_LIVE_RUNS), classed as the rules would (tests/workload/filebench -check)"
	d=$$(mktemp -d /var/tmp/fspair-filebench-live.XXXXXX) && \
	$(GO) run ./tests/workload/filebench -runs $(FILEBENCH_LIVE_RUNS) -out $$d/results.json -report $$d/RESULTS.md -check && \
	echo "filebench-live: results in $$d"

# Rule evaluation cost in a real Prometheus at 2,000 synthetic disks (~70 minutes).
bench-rules:
	$(GO) run ./rules/bench -disks 2000 -warmup 65m

# What the dashboards show, as HTML and PNG, from a Prometheus with the fspair
# rules (e.g. the demo's): make report PROMETHEUS=http://127.0.0.1:19090 SINCE=30m
PROMETHEUS ?= http://127.0.0.1:19090
SINCE ?= 30m
report:
	$(GO) run ./report -prometheus $(PROMETHEUS) -since $(SINCE) -out fspair-report

fuzz:
	bash scripts/fuzz.sh $(FUZZTIME)

# The lab for SOAK (a Go duration) with VMs coming and going under one
# exporter: memory, descriptors, goroutines, counts and errors over time
# (scripts/soak.sh; not part of make test).
SOAK ?= 30m
soak: build
	flock /var/tmp/fspair-lab.lock bash scripts/soak.sh $(SOAK)

# What make demo needs: Debian packages, the guest kit, Prometheus and
# Alertmanager, fspair's binaries (side by side; README.md "Two commands").
deps:
	bash scripts/install-deps.sh

clean:
	rm -rf bin
