//go:build measure

package workload

import (
	"context"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// Guest and image sizes of the lab runs. 512 MiB of guest memory holds
// every file set in the page cache, which is why the jobs rely on fio's
// per-loop invalidation to send reads to the disk; 1 GiB images keep btrfs
// out of its small-volume mixed block groups.
const (
	guestMemMiB = 512
	imageMiB    = 1024
	hostFSMiB   = 3072
)

// guest is a booted lab guest with one workload disk, mounted.
type guest struct {
	vm     *lab.VM
	disk   lab.DiskConfig
	dev    string
	memMiB int // the memory it booted with
}

// bootPair makes the host file system and image for p, boots a guest with
// that one disk (and the disks, port forwards and memory size of extra, if
// given) and mounts the guest file system.
func bootPair(ctx context.Context, t *testing.T, l *lab.Lab, p Pair, extra ...lab.VMConfig) guest {
	t.Helper()
	h, err := l.NewHostFS(ctx, p.HostFS, hostFSMiB)
	if err != nil {
		t.Fatal(err)
	}
	d, err := MakeDisk(ctx, h, p, "wl", imageMiB)
	if err != nil {
		t.Fatal(err)
	}
	// The exporter reads the guest side over a QMP monitor of its own.
	cfg := lab.VMConfig{Name: "workload", MemMiB: guestMemMiB, Disks: []lab.DiskConfig{d}, FspairQMP: true}
	for _, x := range extra {
		cfg.Disks = append(cfg.Disks, x.Disks...)
		cfg.HostFwd = append(cfg.HostFwd, x.HostFwd...)
		if x.MemMiB > 0 {
			cfg.MemMiB = x.MemMiB
		}
	}
	vm, err := l.StartVM(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vm.GuestDevice(ctx, d.ID) // the serial defaults to the id
	if err != nil {
		t.Fatal(err)
	}
	if err := Mount(ctx, vm, dev, p.GuestFS); err != nil {
		t.Fatal(err)
	}
	return guest{vm: vm, disk: d, dev: dev, memMiB: cfg.MemMiB}
}

// buildExporter builds the exporter into the test's temporary directory.
func buildExporter(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := BuildExporter(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
