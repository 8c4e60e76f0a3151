#!/usr/bin/env bash
# make fuzz: run every go test -fuzz target for a while (default 10m each);
# the seed corpora under testdata/fuzz run in `make test` already.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-10m}
export GOFLAGS=-mod=mod
for pkg in $(go list ./exporter/...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "fuzz: $pkg $target for $time"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$time" "$pkg" 2>&1 | tail -n 3
	done
done
