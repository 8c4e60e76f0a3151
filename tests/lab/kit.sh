#!/bin/bash
# kit.sh builds the guest kit the lab boots: a Debian cloud kernel and an
# initramfs holding busybox, fio (with every shared library it links), the
# kernel modules the guests need (virtio, xfs, btrfs, virtio-net) and the lab's
# init and control-channel scripts.
#
# Usage: kit.sh CACHE_DIR
#
# The kit lands in CACHE_DIR/kit-<key>/ where <key> hashes everything that
# goes into it (these scripts, the kernel package name, the host's fio and
# busybox versions), so a changed input builds a new kit and an unchanged one
# is reused. A kit is complete only when its COMPLETE file exists; it is
# written last. Builds of the same cache directory are serialised with flock.
# On success the last line on stdout is the kit directory.
#
# The kernel package itself is kept in CACHE_DIR/debs/ under the name apt
# gives it (package, version, architecture), so a kit rebuilt for changed
# scripts does not download it again; FSPAIR_LAB_KERNEL_PKG picks another
# linux-image-*-cloud-amd64 (tests/matrix boots one kit per kernel).
#
# Needs (Debian 12, root not required except for apt-get): apt-get, dpkg-deb,
# kmod (depmod), busybox-static, fio, cpio, gzip, xz-utils, flock.
set -euo pipefail

cache=${1:?usage: kit.sh CACHE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
# The kernel is pinned: its module set, builtins (ext4, crc32c) and boot time
# are what the lab was measured with. Override for a newer Debian point release.
kernel_pkg=${FSPAIR_LAB_KERNEL_PKG:-linux-image-6.1.0-50-cloud-amd64}

stage() { printf 'kit: [%3ds] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'kit: error: %s\n' "$*" >&2; exit 1; }

for tool in apt-get dpkg-deb depmod cpio gzip xz flock ldd sha256sum dpkg-query; do
	command -v "$tool" >/dev/null || die "$tool not found; install the packages in tests/lab/packages.txt"
done
[ -x /bin/busybox ] || die "/bin/busybox not found; apt-get install busybox-static"
[ -x /usr/bin/fio ] || die "/usr/bin/fio not found; apt-get install fio"
# grep -q stops reading at the first match, and busybox then dies of
# SIGPIPE, which pipefail would report as a failure: read the whole list.
if ! /bin/busybox --list | grep -x modprobe >/dev/null; then
	die "/bin/busybox has no modprobe applet; install busybox-static"
fi

versions=$(dpkg-query -W -f='${Package}=${Version}\n' fio busybox-static 2>/dev/null || true)
key=$( { cat "$here/kit.sh" "$here/bundle.sh" "$here/guest-init.sh" "$here/lab-ctl.sh"; echo "$kernel_pkg"; echo "$versions"; } | sha256sum | cut -c1-16)
kit="$cache/kit-$key"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# Kits of other inputs that no build used for a week go; a reused kit is
# touched to mark it in use.
find "$cache" -mindepth 1 -maxdepth 1 -name 'kit-*' ! -name "kit-$key" -mtime +7 -exec rm -rf {} + 2>/dev/null || true

if [ -f "$kit/COMPLETE" ]; then
	touch "$kit"
	stage "reusing $kit"
	echo "$kit"
	exit 0
fi

stage "building kit $key in $cache"
rm -rf "$kit" "$kit.tmp"
mkdir -p "$kit.tmp"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# apt-get download drops privileges to _apt when it can; a world-readable
# directory avoids its "couldn't be accessed by user '_apt'" warning.
chmod 755 "$work"

# Downloaded packages are kept in $debs under apt's file name
# (<package>_<version>_<arch>.deb); a package name carries its kernel ABI, so
# the first file that matches it is that kernel.
debs="$cache/debs"
mkdir -p "$debs"
chmod 755 "$debs"
cached_deb() { ls "$debs/${1}_"*.deb 2>/dev/null | head -1; }
download() {
	[ -n "$(cached_deb "$1")" ] && return 0
	# apt writes a partial file under its final name; a download dir
	# of our own keeps a killed download out of the cache.
	(cd "$work" && apt-get download -q -o APT::Sandbox::User=root "$1") >&2 || return 1
	mv "$work/${1}_"*.deb "$debs/"
}
stage "download $kernel_pkg"
if [ -n "$(cached_deb "$kernel_pkg")" ]; then
	stage "using cached $(basename "$(cached_deb "$kernel_pkg")")"
elif ! download "$kernel_pkg"; then
	stage "package index missing or stale, running apt-get update"
	apt-get update -q >&2 || die "apt-get update failed"
	if ! download "$kernel_pkg"; then
		# Debian drops a kernel ABI's packages from the archive some time
		# after the next ABI ships; fall back to what the cloud kernel
		# metapackage points at now, and say so.
		current=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
			awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
		[ -n "$current" ] || die "apt-get download $kernel_pkg failed and linux-image-cloud-amd64 names no kernel; set FSPAIR_LAB_KERNEL_PKG"
		stage "WARNING: $kernel_pkg is not in the archive any more; using $current (pin it in kit.sh)"
		kernel_pkg=$current
		download "$kernel_pkg" || die "apt-get download $kernel_pkg failed"
	fi
fi
deb=$(cached_deb "$kernel_pkg")
# Marks it in use for the sweep below.
touch "$deb"
find "$debs" -name '*.deb' -mtime +30 -delete 2>/dev/null || true

stage "extract $(basename "$deb")"
dpkg-deb -x "$deb" "$work/kpkg"
kver=$(ls "$work/kpkg/lib/modules")
[ "$(echo "$kver" | wc -l)" = 1 ] || die "expected one kernel version in $deb, got: $kver"
cp "$work/kpkg/boot/vmlinuz-$kver" "$kit.tmp/vmlinuz"
# The package ships no modules.dep (its postinst runs depmod); make one to
# resolve dependencies.
depmod -b "$work/kpkg" "$kver"

root="$work/root"
stage "assemble initramfs root"
# usr-merged layout like the host, so libraries keep the paths ldd printed.
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,proc,sys,dev,tmp,run,mnt,root}
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
cp /bin/busybox "$root/usr/bin/busybox"
for applet in $(/bin/busybox --list); do
	[ -e "$root/usr/bin/$applet" ] || ln -s busybox "$root/usr/bin/$applet"
done
# The kernel's request_module() runs /sbin/modprobe (e.g. for "fs-btrfs").
ln -sf ../bin/busybox "$root/usr/sbin/modprobe"

stage "copy fio and its shared libraries"
# Libraries at the paths ldd printed (the root is usr-merged like the host).
"$here/bundle.sh" "$root" /usr/bin/fio
[ -e "$root/lib64/ld-linux-x86-64.so.2" ] || die "dynamic loader not copied"

stage "copy kernel modules"
moddir="lib/modules/$kver"
# Top-level modules; their dependencies come from modules.dep. The crypto
# ones are btrfs's optional checksum algorithms (modinfo softdep), which
# busybox modprobe does not follow on its own; loop is for tests that make
# file systems on loop devices inside the guest (exporter/probe's).
wanted="virtio_pci virtio_blk virtio_net xfs btrfs xxhash_generic blake2b_generic loop"
mods="" load=""
for m in $wanted; do
	# Built into this kernel (virtio_pci is in 6.12's cloud kernel): nothing
	# to copy or load.
	if grep -qE "(^|/)$m\.ko$" "$work/kpkg/$moddir/modules.builtin"; then
		continue
	fi
	line=$(grep -E "(^|/)$m\.ko(\.[a-z]+)?:" "$work/kpkg/$moddir/modules.dep") || die "module $m not in $kver"
	mods="$mods ${line%%:*} ${line#*:}"
	load="$load $m"
done
# Debian's 6.12 packages ship modules xz-compressed (.ko.xz), 6.1's plain;
# they are unpacked here so that busybox modprobe needs no decompressor
# (depmod below indexes the .ko names).
for rel in $(echo "$mods" | tr ' ' '\n' | sort -u); do
	mkdir -p "$root/$moddir/$(dirname "$rel")"
	case "$rel" in
	*.ko.xz) xz -dc "$work/kpkg/$moddir/$rel" >"$root/$moddir/${rel%.xz}" ;;
	*.ko) cp "$work/kpkg/$moddir/$rel" "$root/$moddir/$rel" ;;
	*) die "module $rel: compression not handled (want .ko or .ko.xz)" ;;
	esac
done
cp "$work/kpkg/$moddir"/modules.{order,builtin,builtin.modinfo} "$root/$moddir/"
depmod -b "$root" "$kver"
echo $load | tr ' ' '\n' >"$root/etc/lab-modules"

stage "install init and control channel"
install -m 0755 "$here/guest-init.sh" "$root/init"
install -m 0755 "$here/lab-ctl.sh" "$root/usr/bin/lab-ctl"
cat >"$root/etc/inittab" <<'TAB'
# busybox init: the control shell on the second serial port, respawned.
ttyS1::respawn:/usr/bin/lab-ctl
::ctrlaltdel:/bin/poweroff -f
::shutdown:/bin/sync
TAB
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
{ echo "KVER=$kver"; echo "KERNEL_PKG=$kernel_pkg"; echo "$versions"; } >"$root/etc/lab-kit"

stage "pack initramfs"
# gzip -1: the guest spends less time inflating it than a stronger level saves
# in size; the cloud kernel inflates gzip natively (CONFIG_RD_GZIP).
(cd "$root" && find . -print0 | sort -z | cpio --null -o -H newc --quiet | gzip -1) >"$kit.tmp/initramfs.img"

{
	echo "KVER=$kver"
	echo "KERNEL_PKG=$kernel_pkg"
	echo "KERNEL_DEB=$(basename "$deb")"
	echo "KEY=$key"
} >"$kit.tmp/kit.env"
date -u +%FT%TZ >"$kit.tmp/COMPLETE"
mv "$kit.tmp" "$kit"
stage "kit ready: $kit ($(du -sh "$kit/initramfs.img" | cut -f1) initramfs)"
echo "$kit"
