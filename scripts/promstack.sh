#!/usr/bin/env bash
# The pinned Prometheus, Alertmanager and Thanos (deploy/versions.env), built
# from the Go module proxy into a cache outside the repository, keyed by version:
#
#   scripts/promstack.sh build        build what is missing (cold: minutes)
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
# `build` builds all three (make test runs the lab fleet); `build thanos`
# Thanos alone.
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
gobuild() {
	env GOFLAGS= GOWORK=off CGO_ENABLED=0 "$go" "$@"
}

build_prometheus() {
	[ -x "$prom_dir/prometheus" ] && [ -x "$prom_dir/promtool" ] && return
	command -v "$go" >/dev/null || die "go not found (make deps)"
	local mod start tmp
	mod=$(module_version "$PROMETHEUS_VERSION")
	start=$(date +%s)
	echo "promstack: building Prometheus $PROMETHEUS_VERSION ($mod) into $prom_dir (cold: several minutes)" >&2
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.prometheus.XXXXXX")
	GOBIN=$tmp gobuild install -trimpath -tags remove_all_sd -ldflags "$(ldflags "$PROMETHEUS_VERSION")" \
		"github.com/prometheus/prometheus/cmd/prometheus@$mod" \
		"github.com/prometheus/prometheus/cmd/promtool@$mod" ||
		{ rm -rf "$tmp"; die "build Prometheus $PROMETHEUS_VERSION failed: the Go module proxy must be reachable the first time"; }
	chmod 755 "$tmp"
	rm -rf "$prom_dir"
	mv "$tmp" "$prom_dir"
	echo "promstack: Prometheus $PROMETHEUS_VERSION built in $(($(date +%s) - start)) s" >&2
}

# module_src NAME MODULE@VERSION TMP: a writable copy of the module's source
# in TMP/src (the module cache is read-only), for the builds that must
# change it or that `go install module@version` refuses. On failure TMP is
# removed and the script dies naming NAME.
module_src() {
	local name=$1 mod=$2 tmp=$3 src
	src=$(cd "$tmp" && gobuild mod download -json "$mod" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') ||
		{ rm -rf "$tmp"; die "download $name ${mod#*@} failed: the Go module proxy must be reachable the first time"; }
	[ -n "$src" ] && [ -d "$src" ] || { rm -rf "$tmp"; die "download $name ${mod#*@}: no module directory"; }
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
}

build_alertmanager() {
	[ -x "$am_dir/alertmanager" ] && [ -x "$am_dir/amtool" ] && return
	command -v "$go" >/dev/null || die "go not found (make deps)"
	local start tmp
	start=$(date +%s)
	echo "promstack: building Alertmanager $ALERTMANAGER_VERSION into $am_dir" >&2
	mkdir -p "$cache"
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
		-o "$tmp/bin/" ./cmd/alertmanager ./cmd/amtool) ||
		{ rm -rf "$tmp"; die "build Alertmanager $ALERTMANAGER_VERSION failed"; }
	chmod 755 "$tmp/bin"
	rm -rf "$am_dir"
	mv "$tmp/bin" "$am_dir"
	rm -rf "$tmp"
	echo "promstack: Alertmanager $ALERTMANAGER_VERSION built in $(($(date +%s) - start)) s" >&2
}

build_thanos() {
	[ -x "$thanos_dir/thanos" ] && return
	command -v "$go" >/dev/null || die "go not found (make deps)"
	local start tmp
	start=$(date +%s)
	echo "promstack: building Thanos $THANOS_VERSION into $thanos_dir (cold: several minutes)" >&2
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.thanos.XXXXXX")
	GOTOOLCHAIN=auto module_src Thanos "github.com/thanos-io/thanos@v$THANOS_VERSION" "$tmp"
	mkdir -p "$tmp/bin"
	# The build tags of Thanos's own releases (its .promu.yml): slicelabels
	# above all, since Thanos hands Prometheus's labels.Labels over as the
	# slice layout; built with the default layout, Query panics on the
	# first store it meets.
	(cd "$tmp/src" && GOTOOLCHAIN=auto gobuild build -trimpath -tags netgo,slicelabels \
		-ldflags "$(ldflags "$THANOS_VERSION")" -o "$tmp/bin/" ./cmd/thanos) ||
		{ rm -rf "$tmp"; die "build Thanos $THANOS_VERSION failed (its Go toolchain comes from the module proxy too)"; }
	chmod 755 "$tmp/bin"
	rm -rf "$thanos_dir"
	mv "$tmp/bin" "$thanos_dir"
	rm -rf "$tmp"
	echo "promstack: Thanos $THANOS_VERSION built in $(($(date +%s) - start)) s" >&2
}

binary() {
	case $1 in
	prometheus | promtool) build_prometheus && echo "$prom_dir/$1" ;;
	alertmanager | amtool) build_alertmanager && echo "$am_dir/$1" ;;
	thanos) build_thanos && echo "$thanos_dir/$1" ;;
	*) die "unknown binary $1 (prometheus, promtool, alertmanager, amtool, thanos)" ;;
	esac
}

case ${1:-} in
build)
	start=$(date +%s)
	if [ "${2:-}" = thanos ]; then
		build_thanos
		echo "promstack: Thanos $THANOS_VERSION ready in $cache ($(($(date +%s) - start)) s)"
		exit 0
	fi
	build_prometheus
	build_alertmanager
	build_thanos
	echo "promstack: Prometheus $PROMETHEUS_VERSION, Alertmanager $ALERTMANAGER_VERSION and Thanos $THANOS_VERSION ready in $cache ($(($(date +%s) - start)) s)"
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
	echo "usage: $0 build [thanos] | path NAME | versions" >&2
	exit 2
	;;
esac
