#!/bin/sh
# lab-ctl: the guest end of the lab control channel, run by busybox init on
# ttyS1 (the second serial port; the kernel console is on ttyS0 so kernel
# messages never mix with command output).
#
# Protocol, one line per message, all payloads base64 so that neither the
# tty nor the shell can alter them:
#   host -> guest:  LAB-RUN <id> <timeout-seconds|0> <base64 of a shell script>
#   guest -> host:  @@LAB-BEGIN <id>@@
#                   <base64 of the script's stdout+stderr, wrapped lines>
#                   @@LAB-END <id> <exit status>@@
# A request whose script does not decode is answered "@@LAB-BADREQ <id>@@".
# A command line limit > 0 kills the script after that many seconds.
# The guest announces itself with "@@LAB-READY@@" whenever the shell starts.
# Lines that are not LAB-RUN requests are ignored.
export PATH=/usr/bin:/usr/sbin
export HOME=/root
cd /

# Raw mode: no echo, no CR/LF translation, no line editing characters.
# 115200 baud: QEMU's 16550A model raises the receive timeout interrupt after
# four character times at the programmed speed (hw/char/serial.c), so the
# default 9600 baud would hold the tail of every command line back ~4 ms.
stty 115200 raw -echo
printf '\n@@LAB-READY@@\n'

while IFS= read -r line; do
	set -f
	# shellcheck disable=SC2086 # splitting the line into fields is the point
	set -- $line
	set +f
	case "$1" in
	LAB-RUN)
		id=$2 limit=$3
		script=/tmp/lab-cmd.$id out=/tmp/lab-out.$id
		if ! printf '%s\n' "$4" | base64 -d >"$script" 2>/dev/null; then
			printf '@@LAB-BADREQ %s@@\n' "$id"
			continue
		fi
		if [ "$limit" -gt 0 ] 2>/dev/null; then
			timeout -s KILL "$limit" sh "$script" </dev/null >"$out" 2>&1
		else
			sh "$script" </dev/null >"$out" 2>&1
		fi
		rc=$?
		printf '@@LAB-BEGIN %s@@\n' "$id"
		base64 <"$out"
		printf '@@LAB-END %s %d@@\n' "$id" "$rc"
		rm -f "$script" "$out"
		;;
	esac
done
