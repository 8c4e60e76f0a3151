// Package diskimage identifies a virtual machine disk image from its own
// bytes: the container format (raw or qcow2), the guest-visible size, the
// partition table and the file system the guest keeps on it.
//
// Every byte of an image is guest-controlled. The guest writes the partition
// table and the superblocks, and a guest that can write a raw image can make it
// look like any other format. The package therefore treats its input as
// hostile: all sizes and offsets read from the image are checked before they
// are used, no buffer is sized from an untrusted field without a cap, every
// pointer chain (extended partitions) is bounded and loop-checked, and Probe
// reads at most a few MiB in total no matter what the image says. A malformed
// image yields an Info whose Reason says what was found, never a panic.
//
// The on-disk formats are taken from their published descriptions:
//
//   - qcow2: QEMU docs/interop/qcow2.txt.
//   - GPT and MBR: UEFI Specification 2.10, chapter 5 "GUID Partition Table
//     (GPT) Disk Layout".
//   - ext2/3/4: Linux Documentation/filesystems/ext4/super.rst.
//   - XFS: "XFS Algorithms & Data Structures", chapter "On-disk Superblock"
//     (xfs-documentation, design/XFS_Filesystem_Structure).
//   - Btrfs: btrfs-progs Documentation/dev/On-disk-format.rst.
//   - LUKS: cryptsetup docs/on-disk-format.pdf and on-disk-format-luks2.pdf.
//   - LVM2: lvm2 lib/label/label.h (struct label_header).
//   - Linux swap: include/linux/swap.h (union swap_header).
//
// Reading a live image while QEMU writes it is racy by nature; Probe reports
// what the bytes said at the moment they were read.
package diskimage
