#!/bin/bash
# cleanup.sh sweeps what killed lab runs left behind (a test binary that hit
# its timeout, Ctrl-C, a crash): QEMU processes, mounts, loop devices and
# work directories of the lab, and half-built kits in the kit cache.
#
# Usage: cleanup.sh [WORKDIR_PREFIX]
#
# WORKDIR_PREFIX defaults to ${TMPDIR:-/tmp}/fspair-lab- (lab.WorkDirPrefix
# under the directory Go's os.TempDir returns). It sweeps
#   - QEMU processes whose command line names a path under the prefix (every
#     lab guest keeps its QMP socket in the work directory) or whose guest
#     name starts with "fspairlab-" (the lab's default guest names);
#   - mounts under the prefix, deepest first;
#   - loop devices whose backing file is under the prefix;
#   - the work directories themselves.
# Run it only when no lab test is running: it cannot tell a live lab from a
# dead one.
set -u

prefix=${1:-${TMPDIR:-/tmp}/fspair-lab-}
cache=${FSPAIR_LAB_CACHE:-/var/tmp/fspair-lab-cache}
case "$prefix" in
*fspair-lab-*) ;;
*)
	echo "cleanup: refusing prefix $prefix (must contain fspair-lab-)" >&2
	exit 2
	;;
esac
[ "$(id -u)" = 0 ] || echo "cleanup: not root; unmounting and detaching will fail" >&2

failed=0
say() { echo "cleanup: $*"; }

# 1. QEMU processes.
pids=()
for d in /proc/[0-9]*; do
	pid=${d#/proc/}
	[ "$pid" = $$ ] && continue
	exe=$(readlink "$d/exe" 2>/dev/null) || continue
	case "${exe##*/}" in qemu-system-*) ;; *) continue ;; esac
	cmdline=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
	case "$cmdline" in
	*"$prefix"* | *"guest=fspairlab-"*)
		say "killing qemu pid $pid: ${cmdline:0:120}"
		kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
		;;
	esac
done
for pid in "${pids[@]}"; do
	for _ in $(seq 50); do
		[ -e "/proc/$pid" ] || break
		sleep 0.1
	done
	if [ -e "/proc/$pid" ]; then
		say "qemu pid $pid ignored SIGTERM, sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null
		sleep 0.5
	fi
done

# 2. Mounts under the prefix, deepest first. Field 5 of mountinfo is the
# mount point, with spaces escaped as \040 (proc(5)).
mapfile -t mounts < <(awk -v p="$prefix" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo |
	awk '{ print gsub("/", "/") " " $0 }' | sort -rn | cut -d' ' -f2-)
for m in "${mounts[@]}"; do
	m=$(printf '%b' "${m//\\/\\0}")
	say "unmounting $m"
	if ! umount "$m" 2>/dev/null; then
		say "  busy; detaching it lazily"
		umount -l "$m" || failed=1
	fi
done

# 3. Loop devices backed by files under the prefix.
for f in /sys/block/loop*/loop/backing_file; do
	[ -r "$f" ] || continue
	backing=$(cat "$f" 2>/dev/null) || continue
	case "$backing" in
	"$prefix"*)
		dev=/dev/$(basename "$(dirname "$(dirname "$f")")")
		say "detaching $dev ($backing)"
		losetup -d "$dev" || failed=1
		;;
	esac
done

# 4. Work directories, unless something is still mounted inside.
for dir in "$prefix"*; do
	[ -d "$dir" ] || continue
	if awk -v p="$dir/" 'index($5, p) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
		say "leaving $dir: still has mounts"
		failed=1
		continue
	fi
	say "removing $dir"
	rm -rf --one-file-system "$dir" || failed=1
done

# 5. Half-built kits, when no build holds the cache lock.
if [ -d "$cache" ]; then
	exec 9>>"$cache/.lock"
	if flock -n 9; then
		for d in "$cache"/build.* "$cache"/kit-*.tmp; do
			[ -e "$d" ] || continue
			say "removing unfinished kit build $d"
			rm -rf "$d" || failed=1
		done
		find "$cache" -maxdepth 1 -name 'scripts.*' -mmin +60 -exec rm -rf {} + 2>/dev/null
	fi
fi

[ "$failed" = 0 ] || { say "some leftovers remain (see above)"; exit 1; }
say "done"
