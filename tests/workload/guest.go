package workload

import (
	"context"
	"fmt"

	"github.com/fspair/fspair/tests/lab"
)

// Sizes of a guest that BootPair boots: those of the measurements in
// FEATURES.md. 512 MiB of guest memory holds every file set in the page
// cache, which is why the jobs rely on fio's per-loop invalidation to send
// reads to the disk; 1 GiB images keep btrfs out of its small-volume mixed
// block groups.
const (
	GuestMemMiB = 512
	ImageMiB    = 1024
	HostFSMiB   = 3072
)

// Guest is a booted lab guest with one workload disk whose guest file
// system is mounted at MountPoint.
type Guest struct {
	Pair Pair
	VM   *lab.VM
	// Disk is the workload disk; Disk.File is the image file, which is the
	// source_file label of the disk's series.
	Disk lab.DiskConfig
	Dev  string // the disk's device name in the guest, e.g. "vda"
}

// BootPair makes a host file system of p.HostFS (its own loop device, so
// that guests booted side by side do not share one), the image of p on
// it, boots a guest called name with that one disk and mounts the guest
// file system. The lab owns everything made here and tears it down in Close.
func BootPair(ctx context.Context, l *lab.Lab, p Pair, name string) (*Guest, error) {
	h, err := l.NewHostFS(ctx, p.HostFS, HostFSMiB)
	if err != nil {
		return nil, fmt.Errorf("boot pair %s: %w", p, err)
	}
	d, err := MakeDisk(ctx, h, p, "wl", ImageMiB)
	if err != nil {
		return nil, fmt.Errorf("boot pair %s: %w", p, err)
	}
	// The exporter's own QMP monitor: with --discovery.proc.qmp it reads
	// the guest side of the disk over it.
	vm, err := l.StartVM(ctx, lab.VMConfig{Name: name, MemMiB: GuestMemMiB, Disks: []lab.DiskConfig{d}, FspairQMP: true})
	if err != nil {
		return nil, fmt.Errorf("boot pair %s: %w", p, err)
	}
	dev, err := vm.GuestDevice(ctx, d.ID) // the serial defaults to the id
	if err != nil {
		return nil, fmt.Errorf("boot pair %s: %w", p, err)
	}
	if err := Mount(ctx, vm, dev, p.GuestFS); err != nil {
		return nil, fmt.Errorf("boot pair %s: %w", p, err)
	}
	return &Guest{Pair: p, VM: vm, Disk: d, Dev: dev}, nil
}
