package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

// Host devices of -hostdev: what the lab's host file systems sit on
// (issue 20, part 3: the published runs had real disks with seek and
// flush costs; the lab's loop devices over a file in the page cache have
// almost none, docs/kdb/README.md).
//
// This kernel has no device mapper (no /dev/mapper/control), so a
// throttled dm-delay device is not among them. The two that cost are built
// from loop devices and the lab machine's own disk. Measured in guests
// (README.md, "What each condition changes"): they make the host device's
// writes up to 14 times slower and take the cost out of plain loop's
// flushes, but leave the TCG guests' throughput, which their emulated CPU
// sets, within the noise.
const (
	// HostDevLoop is a loop device over a sparse file (tests/lab
	// NewHostFS): its writes end in the lab machine's page cache; a flush
	// makes the loop driver fsync the backing file (drivers/block/loop.c,
	// lo_req_flush), so flushes reach the disk but the writes between them
	// are cached.
	HostDevLoop = "loop"
	// HostDevDirect is a loop device with direct I/O on its backing file
	// (losetup --direct-io=on, LO_FLAGS_DIRECT_IO): writes bypass the
	// page cache and reach the lab machine's disk as they are made, not
	// only at a flush; reads are not cached either.
	HostDevDirect = "loop-direct"
	// HostDevSync is a loop device over a file on an ext4 mounted -o sync
	// (every write to the file is synchronous, mount(8)), itself on a
	// loop device with direct I/O: each write the host file system sends
	// waits for the lab machine's disk, as on a disk without a write
	// cache.
	HostDevSync = "loop-sync"
)

// HostDevices are -hostdev's values.
var HostDevices = []string{HostDevLoop, HostDevDirect, HostDevSync}

// bootHostDev is workload.BootPair with the host file system on dev
// (HostDevDirect or HostDevSync), everything made in the lab's work
// directory and torn down by the lab's Close; it returns the guest and a
// description of the host storage for the report.
func bootHostDev(ctx context.Context, l *lab.Lab, p workload.Pair, dev string) (*workload.Guest, string, error) {
	fail := func(err error) (*workload.Guest, string, error) {
		return nil, "", fmt.Errorf("boot pair %s on %s: %w", p, dev, err)
	}
	base := l.Dir
	var desc string
	switch dev {
	case HostDevDirect:
		loop, err := attachLoop(ctx, l, filepath.Join(base, "hostdev-"+p.HostFS+".img"), workload.HostFSMiB, p.HostFS, true)
		if err != nil {
			return fail(err)
		}
		mi, _ := mountOf(base)
		desc = fmt.Sprintf("%s on its own loop device with direct I/O (%s, %s) over a file in %s (%s)", p.HostFS, loop, loopDIO(loop), base, mi)
		dir := filepath.Join(base, "hostdev-"+p.HostFS)
		if err := mountDev(ctx, l, loop, dir, p.HostFS, ""); err != nil {
			return fail(err)
		}
		g, err := bootOn(ctx, l, p, dir, "wl", true)
		return g, desc, err
	case HostDevSync:
		// The outer file system holds the inner backing file, with room
		// for its metadata.
		outer, err := attachLoop(ctx, l, filepath.Join(base, "hostdev-sync.img"), workload.HostFSMiB+512, "ext4", true)
		if err != nil {
			return fail(err)
		}
		syncDir := filepath.Join(base, "hostdev-sync")
		if err := mountDev(ctx, l, outer, syncDir, "ext4", "sync,dirsync"); err != nil {
			return fail(err)
		}
		inner, err := attachLoop(ctx, l, filepath.Join(syncDir, p.HostFS+".img"), workload.HostFSMiB, p.HostFS, false)
		if err != nil {
			return fail(err)
		}
		dir := filepath.Join(base, "hostdev-"+p.HostFS)
		if err := mountDev(ctx, l, inner, dir, p.HostFS, ""); err != nil {
			return fail(err)
		}
		mi, _ := mountOf(base)
		desc = fmt.Sprintf("%s on its own loop device (%s) over a file on an ext4 mounted -o sync,dirsync, on a loop device with direct I/O (%s, %s) over a file in %s (%s)",
			p.HostFS, inner, outer, loopDIO(outer), base, mi)
		g, err := bootOn(ctx, l, p, dir, "wl", true)
		return g, desc, err
	}
	return fail(fmt.Errorf("unknown host device %q", dev))
}

// bootOn makes the image id.<format> in dir (a mounted p.HostFS), boots
// the guest and mounts the guest file system, as workload.BootPair does;
// qmp gives the exporter its own QMP monitor (lab.VMConfig.FspairQMP), as
// BootPair's guests have.
func bootOn(ctx context.Context, l *lab.Lab, p workload.Pair, dir, id string, qmp bool) (*workload.Guest, error) {
	h := &lab.HostFS{Type: p.HostFS, Dir: dir}
	d, err := workload.MakeDisk(ctx, h, p, id, workload.ImageMiB)
	if err != nil {
		return nil, err
	}
	l.Defer(func() error { return os.Remove(d.File) })
	vm, err := l.StartVM(ctx, lab.VMConfig{Name: "kdb", MemMiB: workload.GuestMemMiB, Disks: []lab.DiskConfig{d}, FspairQMP: qmp})
	if err != nil {
		return nil, err
	}
	gdev, err := vm.GuestDevice(ctx, d.ID)
	if err != nil {
		return nil, err
	}
	if err := workload.Mount(ctx, vm, gdev, p.GuestFS); err != nil {
		return nil, err
	}
	return &workload.Guest{Pair: p, VM: vm, Disk: d, Dev: gdev}, nil
}

// attachLoop makes a sizeMiB file at path with an fsType file system and
// attaches it to a free loop device, with direct I/O when dio; the lab's
// Close detaches it and removes the file.
func attachLoop(ctx context.Context, l *lab.Lab, path string, sizeMiB int, fsType string, dio bool) (string, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create backing file: %w", err)
	}
	l.Defer(func() error { return os.Remove(path) })
	err = f.Truncate(int64(sizeMiB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("size backing file %s: %w", path, err)
	}
	mkfs := map[string][]string{"ext4": {"mkfs.ext4", "-q", "-F"}, "xfs": {"mkfs.xfs", "-q", "-f"}, "btrfs": {"mkfs.btrfs", "-q", "-f"}}[fsType]
	if mkfs == nil {
		return "", fmt.Errorf("make %s on %s: unknown file system", fsType, path)
	}
	if _, err := sh(ctx, mkfs[0], append(mkfs[1:], path)...); err != nil {
		return "", err
	}
	args := []string{"--find", "--show"}
	if dio {
		args = append(args, "--direct-io=on")
	}
	out, err := sh(ctx, "losetup", append(args, path)...)
	if err != nil {
		return "", err
	}
	loop := strings.TrimSpace(out)
	l.Defer(func() error {
		return retry(func() error { _, err := sh(context.Background(), "losetup", "--detach", loop); return err })
	})
	return loop, nil
}

// mountDev mounts dev (fsType) at dir with opts; the lab's Close unmounts.
func mountDev(ctx context.Context, l *lab.Lab, dev, dir, fsType, opts string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create mount point: %w", err)
	}
	l.Defer(func() error { return os.Remove(dir) })
	args := []string{"-t", fsType}
	if opts != "" {
		args = append(args, "-o", opts)
	}
	if _, err := sh(ctx, "mount", append(args, dev, dir)...); err != nil {
		return err
	}
	l.Defer(func() error {
		return retry(func() error { _, err := sh(context.Background(), "umount", dir); return err })
	})
	return nil
}

// loopDIO says whether the kernel took direct I/O for a loop device
// (/sys/block/loopN/loop/dio): losetup falls back to buffered I/O when the
// backing file system cannot do it.
func loopDIO(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "dio"))
	if err != nil {
		return "dio unknown"
	}
	return "dio=" + strings.TrimSpace(string(b))
}

// sh runs a command and returns its output, or an error carrying it.
func sh(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// retry retries fn for up to 30 s: a QEMU that just exited may still hold
// its image while the kernel closes it (as tests/lab's unmount does).
func retry(fn func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
