#!/bin/bash
# bundle.sh copies host programs, with every shared library they load, into a
# directory tree that a lab guest (busybox, no package manager) can run them
# from: each program to ROOT/usr/bin/<name> (symlinks followed, the name kept,
# so that mkfs.ext4 stays mkfs.ext4 for mke2fs), each library ldd resolves at
# the path ldd names under ROOT, and the dynamic loader.
#
# Usage: bundle.sh ROOT PROGRAM...
#
# The guest's kit has the host's loader and C library at their own paths, so
# programs bundled into a tree mounted elsewhere run with LD_LIBRARY_PATH
# naming the tree's library directories. Programs are linked with BIND_NOW
# (fio, for one), so every library must be there, not only those used.
set -euo pipefail

root=${1:?usage: bundle.sh ROOT PROGRAM...}
shift
die() { printf 'bundle: error: %s\n' "$*" >&2; exit 1; }
command -v ldd >/dev/null || die "ldd not found; install libc-bin"

mkdir -p "$root/usr/bin"
for prog in "$@"; do
	path=$(command -v "$prog") || die "$prog not found on this host"
	dest="$root/usr/bin/$(basename "$prog")"
	# rm first: cp onto a symlink (a busybox applet) would write through it.
	rm -f "$dest"
	cp -L "$path" "$dest"
	out=$(ldd "$path" 2>&1) || {
		# A static program has nothing more to copy.
		case "$out" in *"not a dynamic executable"*) continue ;; esac
		die "ldd $path: $out"
	}
	if grep -q 'not found' <<<"$out"; then
		die "$path needs a library this host lacks: $(grep 'not found' <<<"$out" | xargs)"
	fi
	awk '/=> \//{print $3} /^[[:space:]]*\/[^ ]*ld-linux/{print $1}' <<<"$out" | sort -u |
		while read -r lib; do
			dest="$root$lib"
			[ -e "$dest" ] && continue
			mkdir -p "$(dirname "$dest")"
			cp -L "$lib" "$dest"
		done
done
