#!/usr/bin/env bash
# The pinned Prometheus, Alertmanager and Thanos (deploy/versions.env), built
# from the Go module proxy into a cache outside the repository, keyed by version:
#
#   scripts/promstack.sh build        build what is missing of all three (make test)
#   scripts/promstack.sh build demo   the Prometheus server and Alertmanager only,
#                                     side by side (make deps: what make demo runs;
#                                     promtool is built by `build` or on first use)
#   scripts/promstack.sh build thanos build Thanos only (the lab fleet)
#   scripts/promstack.sh path NAME    print the path of prometheus, promtool,
#                                     alertmanager, amtool or thanos (building
#                                     first if missing)
#   scripts/promstack.sh versions     print what each cached binary reports
#
# Cache: $FSPAIR_PROMSTACK_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/fspair/promstack,
# one directory per component and version (prometheus-3.16.0/, alertmanager-0.35.0/).
# A build lands in a temporary directory and is moved into place whole, so
# an interrupted build leaves nothing half-made. The binaries carry their
# version (-ldflags on prometheus/common/version; go install alone leaves it
# empty). Alertmanager's module lacks its compiled web UI (ui/app/dist, which
# the binary embeds): it is built from a copy of the module with placeholder
# pages there; its API and amtool do not use the UI. Thanos (the lab fleet,
# deploy/fleet) is built from a copy of its module too: its go.mod has replace
# directives, which `go install module@version` refuses, and names a newer Go
# patch release than Debian's, which GOTOOLCHAIN=auto fetches from the proxy.
# Prometheus is built with its build tag remove_all_sd: of its service
# discoveries it keeps static, file and http ones, the only ones fspair's
# configurations use; the others (Kubernetes, the clouds, Consul ...) were
# most of a cold build (609 s of CI's first run on 2026-11-27).
# `build` builds all three (make test runs the lab fleet); `build demo`
# Prometheus and Alertmanager (make deps: the demo never runs Thanos, which
# make test and make fleet build on first use); `build thanos` Thanos alone.
#
# Each build prints one line when it starts (what, and what a cold build took
# on a 2-core machine) and one when it ends; the Go tool's own output (module
# downloads, compiler errors) goes to a log file the first line names
# ($FSPAIR_BUILD_LOG_DIR, default /var/tmp/fspair-build), and a failure
# prints that log's last lines.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../deploy/versions.env
. "$repo/deploy/versions.env"

cache=${FSPAIR_PROMSTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fspair/promstack}
go=${GO:-go}
prom_dir=$cache/prometheus-$PROMETHEUS_VERSION
am_dir=$cache/alertmanager-$ALERTMANAGER_VERSION
thanos_dir=$cache/thanos-$THANOS_VERSION

die() {
	echo "promstack: $*" >&2
	exit 1
}

logdir=${FSPAIR_BUILD_LOG_DIR:-/var/tmp/fspair-build}
# What each cold build took on a 2-core machine with an empty Go module cache
# (README.md "Two commands": the server and Alertmanager side by side with
# the rest of make deps, promtool from its CPU time, Thanos alone); the start
# line says it so a newcomer knows how long to wait.
COLD_PROMETHEUS="about 4.5 min"
COLD_PROMTOOL="about 1.5 min"
COLD_ALERTMANAGER="about 3.5 min"
COLD_THANOS="about 7 min"

# started NAME VERSION COLD: the one line a build prints as it starts, naming
# its log (truncated: it holds this build's output only). COLD is what a cold
# build took on a 2-core machine (measured: README.md "Two commands").
started() {
	mkdir -p "$logdir"
	: >"$logdir/$1.log"
	echo "promstack: building $1 $2 into $cache (cold on 2 cores: $3; Go's output in $logdir/$1.log)" >&2
}

# failed NAME MESSAGE: the log's tail, then MESSAGE, and exit.
failed() {
	echo "promstack: the last lines of $logdir/$1.log:" >&2
	tail -n 25 "$logdir/$1.log" | sed 's/^/  /' >&2
	die "$2"
}

# module_version X.Y.Z: the Go module version of a Prometheus release
# (3.16.0 -> v0.316.0: minor padded to two digits).
module_version() {
	local major minor patch
	IFS=. read -r major minor patch <<<"$1"
	printf 'v0.%d%02d.%d\n' "$major" "$minor" "$patch"
}

# ldflags PKGVERSION: the version stamp prometheus/common/version reads.
ldflags() {
	local v=github.com/prometheus/common/version
	echo "-s -w -X $v.Version=$1 -X $v.Revision=module-proxy -X $v.Branch=release -X $v.BuildUser=fspair -X $v.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
}

# The module cache is read-only and the build must not see the caller's
# GOFLAGS (the Makefile exports -mod=mod for fspair's own module).
# $FSPAIR_BUILD_GOENV: the compiler's garbage collector (scripts/install-deps.sh).
gobuild() {
	env GOFLAGS= GOWORK=off CGO_ENABLED=0 ${FSPAIR_BUILD_GOENV:-GOGC=off GOMEMLIMIT=1536MiB} "$go" "$@"
}

# build_prom CMD COLD: one of Prometheus's commands (prometheus, promtool)
# into prom_dir. They are built apart because the demo runs only the server:
# promtool alone cost more than half again the server's cold build
# (README.md "Two commands"), and only the tests use it.
build_prom() {
	local cmd=$1 cold=$2 mod start tmp
	[ -x "$prom_dir/$cmd" ] && return
	command -v "$go" >/dev/null || die "go not found (make deps)"
	mod=$(module_version "$PROMETHEUS_VERSION")
	start=$(date +%s)
	mkdir -p "$prom_dir"
	started "$cmd" "$PROMETHEUS_VERSION" "$cold"
	tmp=$(mktemp -d "$cache/.$cmd.XXXXXX")
	GOBIN=$tmp gobuild install -trimpath -tags remove_all_sd -ldflags "$(ldflags "$PROMETHEUS_VERSION")" \
		"github.com/prometheus/prometheus/cmd/$cmd@$mod" >>"$logdir/$cmd.log" 2>&1 ||
		{ rm -rf "$tmp"; failed "$cmd" "build $cmd $PROMETHEUS_VERSION ($mod) failed: the Go module proxy must be reachable the first time"; }
	chmod 755 "$tmp/$cmd"
	# A rename within the cache: the binary appears whole or not at all.
	mv "$tmp/$cmd" "$prom_dir/$cmd"
	rm -rf "$tmp"
	echo "promstack: $cmd $PROMETHEUS_VERSION built in $(($(date +%s) - start)) s ($prom_dir)" >&2
}

build_prometheus() { build_prom prometheus "$COLD_PROMETHEUS"; }
build_promtool() { build_prom promtool "$COLD_PROMTOOL"; }

# module_src NAME MODULE@VERSION TMP: a writable copy of the module's source
# in TMP/src (the module cache is read-only), for the builds that must
# change it or that `go install module@version` refuses. On failure TMP is
# removed and the script dies naming NAME.
module_src() {
	local name=$1 mod=$2 tmp=$3 src
	# go mod download -json reports a failure in its JSON ("Error"), so
	# that goes to the log too.
	src=$(cd "$tmp" && gobuild mod download -json "$mod" 2>&1 | tee -a "$logdir/$name.log" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') ||
		{ rm -rf "$tmp"; failed "$name" "download $name ${mod#*@} failed: the Go module proxy must be reachable the first time"; }
	[ -n "$src" ] && [ -d "$src" ] || { rm -rf "$tmp"; die "download $name ${mod#*@}: no module directory"; }
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
}

build_alertmanager() {
	[ -x "$am_dir/alertmanager" ] && [ -x "$am_dir/amtool" ] && return
	command -v "$go" >/dev/null || die "go not found (make deps)"
	local start tmp
	start=$(date +%s)
	mkdir -p "$cache"
	started Alertmanager "$ALERTMANAGER_VERSION" "$COLD_ALERTMANAGER"
	tmp=$(mktemp -d "$cache/.alertmanager.XXXXXX")
	module_src Alertmanager "github.com/prometheus/alertmanager@v$ALERTMANAGER_VERSION" "$tmp"
	# The two UIs the binary serves from its embedded app/dist.
	for ui in elm mantine; do
		mkdir -p "$tmp/src/ui/app/dist/$ui"
		printf '<!doctype html><title>Alertmanager</title><p>Built by fspair without the web UI: use the API or amtool.</p>\n' \
			>"$tmp/src/ui/app/dist/$ui/index.html"
	done
	mkdir -p "$tmp/bin"
	(cd "$tmp/src" && gobuild build -trimpath -ldflags "$(ldflags "$ALERTMANAGER_VERSION")" \
		-o "$tmp/bin/" ./cmd/alertmanager ./cmd/amtool) >>"$logdir/Alertmanager.log" 2>&1 ||
		{ rm -rf "$tmp"; failed Alertmanager "build Alertmanager $ALERTMANAGER_VERSION failed"; }
	chmod 755 "$tmp/bin"
	rm -rf "$am_dir"
	mv "$tmp/bin" "$am_dir"
	rm -rf "$tmp"
	echo "promstack: Alertmanager $ALERTMANAGER_VERSION built in $(($(date +%s) - start)) s ($am_dir)" >&2
}

build_thanos() {
	[ -x "$thanos_dir/thanos" ] && return
	command -v "$go" >/dev/null || die "go not found (make deps)"
	local start tmp
	start=$(date +%s)
	mkdir -p "$cache"
	started Thanos "$THANOS_VERSION" "$COLD_THANOS"
	tmp=$(mktemp -d "$cache/.thanos.XXXXXX")
	GOTOOLCHAIN=auto module_src Thanos "github.com/thanos-io/thanos@v$THANOS_VERSION" "$tmp"
	mkdir -p "$tmp/bin"
	# The build tags of Thanos's own releases (its .promu.yml): slicelabels
	# above all, since Thanos hands Prometheus's labels.Labels over as the
	# slice layout; built with the default layout, Query panics on the
	# first store it meets.
	(cd "$tmp/src" && GOTOOLCHAIN=auto gobuild build -trimpath -tags netgo,slicelabels \
		-ldflags "$(ldflags "$THANOS_VERSION")" -o "$tmp/bin/" ./cmd/thanos) >>"$logdir/Thanos.log" 2>&1 ||
		{ rm -rf "$tmp"; failed Thanos "build Thanos $THANOS_VERSION failed (its Go toolchain comes from the module proxy too)"; }
	chmod 755 "$tmp/bin"
	rm -rf "$thanos_dir"
	mv "$tmp/bin" "$thanos_dir"
	rm -rf "$tmp"
	echo "promstack: Thanos $THANOS_VERSION built in $(($(date +%s) - start)) s ($thanos_dir)" >&2
}

binary() {
	case $1 in
	prometheus) build_prometheus && echo "$prom_dir/$1" ;;
	promtool) build_promtool && echo "$prom_dir/$1" ;;
	alertmanager | amtool) build_alertmanager && echo "$am_dir/$1" ;;
	thanos) build_thanos && echo "$thanos_dir/$1" ;;
	*) die "unknown binary $1 (prometheus, promtool, alertmanager, amtool, thanos)" ;;
	esac
}

case ${1:-} in
build)
	start=$(date +%s)
	case ${2:-all} in
	thanos)
		build_thanos
		echo "promstack: Thanos $THANOS_VERSION ready in $cache ($(($(date +%s) - start)) s)"
		;;
	demo | all)
		# Prometheus and Alertmanager side by side: each spends much of a
		# cold build waiting on module downloads, which overlap the other's
		# compiling (README.md "Two commands" has the figures).
		build_prometheus &
		prom=$!
		build_alertmanager &
		am=$!
		rc=0
		wait "$prom" || rc=1
		wait "$am" || rc=1
		[ "$rc" = 0 ] || exit 1
		if [ "${2:-all}" = demo ]; then
			echo "promstack: Prometheus $PROMETHEUS_VERSION and Alertmanager $ALERTMANAGER_VERSION ready in $cache ($(($(date +%s) - start)) s)"
		else
			build_promtool
			build_thanos
			echo "promstack: Prometheus $PROMETHEUS_VERSION, Alertmanager $ALERTMANAGER_VERSION and Thanos $THANOS_VERSION ready in $cache ($(($(date +%s) - start)) s)"
		fi
		;;
	*) die "usage: $0 build [demo|thanos]" ;;
	esac
	;;
path)
	[ $# -eq 2 ] || die "usage: $0 path prometheus|promtool|alertmanager|amtool|thanos"
	binary "$2"
	;;
versions)
	for b in prometheus promtool alertmanager amtool thanos; do
		p=$(binary "$b")
		echo "$b: $("$p" --version 2>&1 | head -1)"
	done
	;;
*)
	echo "usage: $0 build [demo|thanos] | path NAME | versions" >&2
	exit 2
	;;
esac
