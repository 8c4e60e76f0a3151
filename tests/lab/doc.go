// Package lab is the VM lab behind fspair's end-to-end tests and `make demo`:
// real QEMU guests, emulated with TCG, doing real I/O on image files that
// live on loop-backed ext4, xfs and btrfs host file systems.
//
// The pieces:
//
//   - BuildKit fetches a Debian cloud kernel and packs an initramfs with
//     busybox, fio and the needed modules (kit.sh does the work; the result
//     is cached and reused).
//   - NewHostFS makes a loop-backed host file system; MakeImage makes raw and
//     qcow2 images, pre-formatted on the host with a guest file system.
//   - StartVM boots a guest with virtio-blk disks given as plain -drive and
//     -device options, so the exporter sees the command-line syntax of a
//     hand-started QEMU. The guest answers shell commands on its second
//     serial port (VM.Run, VM.Fio); QMP gives block statistics and hot plug.
//   - StartLibvirt makes sure libvirtd runs (starting virtlogd and libvirtd
//     as children when none answers); Lab.CreateDomain boots the same kit
//     as a transient libvirt domain, whose guest answers the same shell
//     protocol on a UNIX socket (Domain.Guest), so the exporter sees the
//     disks through libvirt.
//   - Lab owns a work directory and everything made in it and tears it all
//     down in Close, also when a test fails half way. cleanup.sh sweeps what
//     a killed test run left behind.
//
// Everything here needs root, loop devices and the Debian packages listed in
// packages.txt. TCG is slow and CPU-bound: run one or two guests at a time.
package lab
