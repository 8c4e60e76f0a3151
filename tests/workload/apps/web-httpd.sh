#!/bin/sh
# web-httpd: a static web site served by busybox httpd, which forks a
# process per connection and logs every request (-vv) to an access log on
# the same file system, loaded from the host by k6 (tests/k6/web.js,
# random files at a constant rate) through QEMU's user-mode port forward.
# The site is FILES files of 4-28 KiB (mean 16 KiB), www/f/0.html ..., laid
# out by fio: about 420 MB for 30,000 files, about twice what the guest
# (AppGuestMemMiB) caches, so a share of the requests read the disk, as on
# a web server whose content outgrows its memory.
#
# Run by tests/workload (App) in a lab guest, with the tools disk mounted at
# /opt/apps: sh web-httpd.sh prepare|run|clean, DIR the directory for the
# files, RUNTIME the seconds to run, FILES the site's size in files. The
# guest side of run only waits: the requests come from the host.
set -eu
. /opt/apps/env.sh
case $1 in
prepare)
	mkdir -p "$DIR/www/f" "$DIR/log"
	# A read job's layout writes the files' contents (a write job's
	# would leave them empty for the job to write).
	fio --name=site --create_only=1 --ioengine=psync --rw=read --bs=4k --fallocate=none \
		--directory="$DIR/www/f" --nrfiles="$FILES" --filesize=4k-28k --size=$((FILES * 28))k \
		--filename_format='$filenum.html' >/dev/null
	httpd -f -vv -p 80 -h "$DIR/www" 2>>"$DIR/log/access.log" </dev/null &
	sleep 1
	wget -q -O /dev/null http://127.0.0.1/f/0.html
	;;
run) sleep "$RUNTIME" ;;
clean) killall httpd 2>/dev/null || true ;;
*) echo "usage: $0 prepare|run|clean" >&2; exit 2 ;;
esac
