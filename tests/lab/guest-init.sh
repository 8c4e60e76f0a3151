#!/bin/sh
# /init of the lab guest (busybox sh). Mounts the pseudo file systems, loads
# the modules listed in /etc/lab-modules, configures the user-mode network if
# a virtio-net device is present, then hands over to busybox init, which
# reaps orphans and respawns the control shell (lab-ctl) on ttyS1.
# Progress goes to the kernel console (ttyS0), which the host logs to a file.
export PATH=/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs tmpfs /run

echo "lab-init: loading modules" >/dev/console
for m in $(cat /etc/lab-modules); do
	modprobe "$m" || echo "lab-init: modprobe $m failed" >/dev/console
done

# QEMU user-mode networking: the guest is 10.0.2.15, the gateway 10.0.2.2
# (QEMU documentation, "Network emulation", user mode defaults).
ip link set lo up
if [ -e /sys/class/net/eth0 ]; then
	ip link set eth0 up
	ip addr add 10.0.2.15/24 dev eth0
	ip route add default via 10.0.2.2
fi

echo "lab-init: starting control channel on ttyS1" >/dev/console
exec /usr/bin/busybox init
