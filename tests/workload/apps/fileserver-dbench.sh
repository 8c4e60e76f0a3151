#!/bin/sh
# fileserver-dbench: dbench 4.0 (Debian's dbench package), the file-server
# load of Samba's NetBench run on a local file system: each client replays
# the loadfile client.txt, the calls a Windows client made against a file
# server (create and open documents, read and write them in pieces, look up
# attributes, list directories, rename, delete, flush), in a tree of its own.
#
# Run by tests/workload (App) in a lab guest, with the tools disk mounted at
# /opt/apps: sh fileserver-dbench.sh prepare|run|clean, DIR the directory
# for the files, RUNTIME the seconds to run.
#
# 16 clients (a TCG guest's one vCPU runs them in turn). dbench reads back
# what its clients wrote moments before, so in a guest with memory to
# spare every read is a page-cache hit and the disk sees only writes and
# flushes. BALLAST_MIB, if set, takes that much of the guest's memory
# first (a file on tmpfs, which without swap stays in memory, as the
# memory of the server's other programs would), leaving the page cache too
# small for the clients' trees. dbench runs its own short warm-up before
# the timed part; the lab's window starts 35 s in either way.
set -eu
. /opt/apps/env.sh
case $1 in
prepare)
	mkdir -p "$DIR"
	if [ -n "${BALLAST_MIB:-}" ]; then
		mkdir -p /dev/shm/ballast
		dd if=/dev/zero of=/dev/shm/ballast/fill bs=1M count="$BALLAST_MIB" 2>/dev/null
	fi
	;;
run) dbench -D "$DIR" -t "$RUNTIME" -c /opt/apps/data/client.txt 16 >/tmp/dbench.log 2>&1 ||
	{ tail -20 /tmp/dbench.log >&2; exit 1; } ;;
clean) rm -rf /dev/shm/ballast ;;
*) echo "usage: $0 prepare|run|clean" >&2; exit 2 ;;
esac
