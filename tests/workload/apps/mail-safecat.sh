#!/bin/sh
# mail-safecat: a mail server's message store under delivery and
# retrieval, in Maildir format. 16 mailbox workers run side by side; each
# loops
#   - deliver one message with safecat (Debian's safecat package), the
#     delivery step of qmail-style Maildir MDAs: write the message into
#     tmp/, fsync it, link it into new/, unlink the tmp/ name;
#   - fetch one stored message whole, picked at random, as a POP3 or IMAP
#     server does for a client's RETR or FETCH;
#   - delete the message it delivered the loop before (the client's DELE
#     and expunge), so the store keeps its size.
# Messages are 2-30 KiB. The store is filled before the run with 1,900
# messages of 2-30 KiB per mailbox (about 420 MB in all), about twice what
# the guest (AppGuestMemMiB) caches, so fetches of stored mail read the
# disk.
#
# Run by tests/workload (App) in a lab guest, with the tools disk mounted at
# /opt/apps: sh mail-safecat.sh prepare|run|clean, DIR the directory for the
# files, RUNTIME the seconds to run.
set -eu
. /opt/apps/env.sh
boxes=16
stored=1900
case $1 in
prepare)
	set --
	i=0
	while [ $i -lt $boxes ]; do
		mkdir -p "$DIR/u$i/tmp" "$DIR/u$i/new" "$DIR/u$i/cur"
		set -- "$@" --name=u$i --directory="$DIR/u$i/cur"
		i=$((i + 1))
	done
	# The stored mail: cur/m.0 ... in each mailbox, laid out by fio (a
	# read job, so that fio writes the files' contents before it would
	# read them; a write job's layout leaves them empty). size is the
	# most the files can take and bs no more than the smallest, or fio
	# skips files.
	fio --create_only=1 --ioengine=psync --rw=read --bs=1k --fallocate=none \
		--nrfiles=$stored --filesize=2k-30k --size=$((stored * 30))k \
		--filename_format='m.$filenum' "$@" >/dev/null
	# The messages delivered in the run, kept in memory (tmpfs).
	mkdir -p /tmp/mail
	k=0
	while [ $k -lt 8 ]; do
		head -c $(((k * 3 + 1) * 1024 + 1024)) /dev/urandom | base64 >/tmp/mail/msg.$k
		k=$((k + 1))
	done
	;;
run)
	rm -f /tmp/mail/stop /tmp/mail/failed
	worker() {
		box=$DIR/u$1
		n=0
		prev=
		k=$(($1 * 61))
		while [ ! -e /tmp/mail/stop ]; do
			f=$(safecat "$box/tmp" "$box/new" </tmp/mail/msg.$((n % 8))) ||
				{ echo "mailbox u$1: safecat failed" >>/tmp/mail/failed; return 1; }
			# 997 is prime, so it is coprime to the store's
			# size: k walks every stored message in a scattered order.
			k=$(((k + 997) % stored))
			cat "$box/cur/m.$k" >/dev/null ||
				{ echo "mailbox u$1: fetch of cur/m.$k failed" >>/tmp/mail/failed; return 1; }
			[ -z "$prev" ] || rm -f "$box/new/$prev"
			prev=$f
			n=$((n + 1))
		done
	}
	i=0
	while [ $i -lt $boxes ]; do
		worker $i &
		i=$((i + 1))
	done
	sleep "$RUNTIME"
	touch /tmp/mail/stop
	wait
	# A worker that failed stopped early: the run is not the workload.
	if [ -e /tmp/mail/failed ]; then
		cat /tmp/mail/failed >&2
		exit 1
	fi
	;;
clean) rm -rf /tmp/mail ;;
*) echo "usage: $0 prepare|run|clean" >&2; exit 2 ;;
esac
