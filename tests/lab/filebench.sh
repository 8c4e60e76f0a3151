#!/bin/bash
# filebench.sh builds Filebench from its source tarball into a tree a lab
# guest runs it from, and packs that tree as an initramfs archive that the
# lab appends to the kit's (VMConfig.Initramfs) for the runs that need it.
# Filebench is a lab tool only: nothing of it is shipped with fspair.
#
# Usage: filebench.sh CACHE_DIR TARBALL
#
# The build lands in CACHE_DIR/filebench-<tarball>-<recipe>/, <tarball> the
# first 16 hex digits of the tarball's sha256 and <recipe> of this script's
# and bundle.sh's, so that a second build of the same source is the reuse of
# a directory (seconds). It holds:
#   root/              the install tree: Filebench configured with prefix
#                      /usr/local (the binary loads its random-variable
#                      plugins from /usr/local/lib/filebench at run time) and
#                      installed with DESTDIR, plus every shared library the
#                      binary and the plugins load, at the host's paths
#   filebench.cpio.gz  root/usr as a gzip-compressed newc archive
#   filebench.env      VERSION, TARBALL_SHA256, KEY
#   COMPLETE           written last; a directory without it is rebuilt
# Builds of the same cache directory are serialised with flock. On success
# the last line on stdout is the build directory; progress goes to stderr.
#
# Needs (Debian 12): gcc, make, bison, flex, autoconf, automake, libtool
# (tests/lab/packages.txt), tar, gzip, cpio, sha256sum, flock, ldd.
set -euo pipefail

cache=${1:?usage: filebench.sh CACHE_DIR TARBALL}
tarball=${2:?usage: filebench.sh CACHE_DIR TARBALL}
here=$(cd "$(dirname "$0")" && pwd)

stage() { printf 'filebench: [%3ds] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'filebench: error: %s\n' "$*" >&2; exit 1; }

[ -r "$tarball" ] || die "tarball $tarball not readable (the Filebench source snapshot is shared/vendor/filebench/ beside the repository)"
missing=""
for tool in gcc make bison flex autoconf automake aclocal autoheader libtoolize tar gzip cpio sha256sum flock ldd ldconfig; do
	command -v "$tool" >/dev/null || missing="$missing $tool"
done
[ -z "$missing" ] || die "missing:$missing; install the packages in tests/lab/packages.txt (apt-get install -y gcc make bison flex autoconf automake libtool)"

sum=$(sha256sum "$tarball" | cut -d' ' -f1)
recipe=$(cat "$here/filebench.sh" "$here/bundle.sh" | sha256sum | cut -c1-8)
key="${sum:0:16}-$recipe"
out="$cache/filebench-$key"

mkdir -p "$cache"
exec 9>"$cache/.filebench.lock"
flock 9

# Builds of other tarballs or recipes that nothing used for a month go; a
# reused build is touched to mark it in use.
find "$cache" -mindepth 1 -maxdepth 1 -name 'filebench-*' ! -name "filebench-$key" -mtime +30 -exec rm -rf {} + 2>/dev/null || true

if [ -f "$out/COMPLETE" ]; then
	touch "$out"
	stage "reusing $out"
	echo "$out"
	exit 0
fi

stage "building Filebench from $(basename "$tarball") (sha256 ${sum:0:16}...) in $out; a cold build took 58-89 s on 2 cores"
rm -rf "$out" "$out.tmp"
mkdir -p "$out.tmp"
work=$(mktemp -d "$cache/filebench-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log="$out.tmp/build.log"

# step NAME CMD...: runs CMD with its output in the build log; a failure
# names the step and shows the log's tail, which is where the cause is.
step() {
	local name=$1
	shift
	stage "$name"
	if ! "$@" >>"$log" 2>&1; then
		tail -n 25 "$log" | sed 's/^/filebench:   | /' >&2
		die "$name failed (the last lines of $log are above; the whole log stays there)"
	fi
}

stage "unpack"
tar -xzf "$tarball" -C "$work" || die "unpack $tarball failed: is it a gzip-compressed tar?"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)
[ -n "$src" ] && [ -f "$src/configure.ac" ] || die "$tarball holds no Filebench source tree (no <dir>/configure.ac)"
version=$(sed -n 's/^AC_INIT(\[filebench\], *\[\([^]]*\)\].*/\1/p' "$src/configure.ac")

cd "$src"
# The bootstrap the project documents (README, "Building"); the snapshot is
# a git archive, so no configure script ships in it.
step "bootstrap (libtoolize, aclocal, autoheader, automake, autoconf)" \
	sh -c 'libtoolize -q && aclocal && autoheader && automake --add-missing && autoconf'
step "configure --prefix=/usr/local" ./configure -q --prefix=/usr/local
step "compile (make -j$(nproc))" make -j"$(nproc)"
root="$out.tmp/root"
step "install into $root" make install DESTDIR="$root"
cd /

bin="$root/usr/local/bin/filebench"
plugins="$root/usr/local/lib/filebench"
[ -x "$bin" ] || die "make install left no $bin"
ls "$plugins"/libcvar-gamma.so >/dev/null 2>&1 || die "make install left no $plugins/libcvar-gamma.so (the personalities' file sizes need it)"
# libtool's archives and static libraries: the binary dlopens the .so only.
find "$plugins" \( -name '*.la' -o -name '*.a' \) -delete

stage "copy the shared libraries Filebench and its plugins load"
# bundle.sh puts libraries at the paths ldd prints; into a usr-merged
# scratch tree like the kit's root, so that they land under usr/ and the
# archive holds usr/ only (the kit's /lib, /lib64 and /bin are symlinks
# into /usr, which an archive entry of those names would replace).
libs="$work/libs"
mkdir -p "$libs"/usr/{bin,lib,lib64}
ln -s usr/lib "$libs/lib"
ln -s usr/lib64 "$libs/lib64"
ln -s usr/bin "$libs/bin"
# bundle.sh takes programs: the plugins are shared objects, which libtool
# installs executable, but say so rather than rely on it.
chmod 0755 "$plugins"/libcvar-*.so
"$here/bundle.sh" "$libs" "$bin" "$plugins"/libcvar-*.so || die "bundle.sh could not copy the libraries of $bin"
# glibc loads libgcc_s at run time (dlopen, which ldd cannot see) for
# pthread_exit; without it Filebench aborts when its threads end ("libgcc_s.so.1
# must be installed for pthread_exit to work").
# awk reads the whole list: leaving at the first match would end ldconfig
# with SIGPIPE once its list outgrows the pipe (64 KiB), failing the
# pipeline under pipefail.
gcc_s=$(ldconfig -p | awk '/libgcc_s\.so\.1 .*x86-64/ && !found { print $NF; found = 1 }')
[ -n "$gcc_s" ] || die "libgcc_s.so.1 not found by ldconfig -p (install libgcc-s1)"
mkdir -p "$libs$(dirname "$gcc_s")"
cp -L "$gcc_s" "$libs$gcc_s"
for d in lib lib64; do
	mkdir -p "$root/usr/$d"
	cp -a "$libs/usr/$d/." "$root/usr/$d/"
done

stage "pack initramfs archive"
(cd "$root" && find usr -print0 | sort -z | cpio --null -o -H newc --quiet | gzip -1) >"$out.tmp/filebench.cpio.gz"
{
	echo "VERSION=$version"
	echo "TARBALL=$(basename "$tarball")"
	echo "TARBALL_SHA256=$sum"
	echo "KEY=$key"
} >"$out.tmp/filebench.env"
date -u +%FT%TZ >"$out.tmp/COMPLETE"
mv "$out.tmp" "$out"
stage "Filebench $version ready: $out ($(du -sh "$out/filebench.cpio.gz" | cut -f1) archive)"
echo "$out"
