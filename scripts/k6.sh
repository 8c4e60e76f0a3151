#!/usr/bin/env bash
# Builds the pinned k6 (the load tests of tests/k6) with the Go toolchain,
# once, into a cache, and prints its path with `k6.sh path`; other arguments
# run it: `k6.sh run tests/k6/scrape.js`.
#
# Environment: FSPAIR_CACHE (default /var/cache/fspair) holds the build.
set -euo pipefail
version=v1.8.1 # pinned: the version the scripts and thresholds were written for
cache=${FSPAIR_CACHE:-/var/cache/fspair}/k6/$version
bin=$cache/bin/k6
if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	echo "k6: building go.k6.io/k6@$version (a few minutes, once)" >&2
	GOBIN=$cache/bin GOFLAGS=-mod=mod go install "go.k6.io/k6@$version" >&2
fi
"$bin" version >/dev/null || { echo "k6: $bin does not run" >&2; exit 1; }
if [ "${1:-path}" = path ]; then
	echo "$bin"
else
	exec "$bin" "$@"
fi
