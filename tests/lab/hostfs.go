package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// HostFS is a host file system on a loop device over a sparse file, mounted
// inside a work directory. Image files for guests are created in Dir.
type HostFS struct {
	Type    string // ext4, xfs or btrfs
	Backing string // sparse file behind the loop device
	Loop    string // /dev/loopN
	Dir     string // mount point

	mu     sync.Mutex
	undo   []func() error // LIFO: unmount, detach, remove
	closed bool
}

// mkfsArgs are the quiet, non-interactive mkfs invocations per file system.
// -f lets xfs and btrfs overwrite a file that held another file system.
var mkfsArgs = map[string][]string{
	"ext4":  {"mkfs.ext4", "-q", "-F"},
	"xfs":   {"mkfs.xfs", "-q", "-f"},
	"btrfs": {"mkfs.btrfs", "-q", "-f"},
}

// NewHostFS creates a sizeMiB sparse file in workDir, attaches it to a free
// loop device, makes a fsType file system on it and mounts it under workDir.
// On error everything done so far is undone. Close undoes it all.
func NewHostFS(ctx context.Context, fsType string, sizeMiB int, workDir string) (*HostFS, error) {
	if _, ok := mkfsArgs[fsType]; !ok {
		return nil, fmt.Errorf("host file system %q: want ext4, xfs or btrfs", fsType)
	}
	if sizeMiB <= 0 {
		return nil, fmt.Errorf("host file system size %d MiB: must be positive", sizeMiB)
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, fmt.Errorf("create work dir %s: %w", workDir, err)
	}
	dir, err := os.MkdirTemp(workDir, "hostfs-"+fsType+"-")
	if err != nil {
		return nil, fmt.Errorf("create host fs dir: %w", err)
	}
	h := &HostFS{Type: fsType, Backing: dir + ".img", Dir: dir}
	h.undo = append(h.undo, func() error { return os.Remove(dir) })
	if err := h.setup(ctx, sizeMiB); err != nil {
		return nil, errors.Join(err, h.Close())
	}
	return h, nil
}

func (h *HostFS) setup(ctx context.Context, sizeMiB int) error {
	f, err := os.OpenFile(h.Backing, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create host fs backing file: %w", err)
	}
	h.undo = append(h.undo, func() error { return os.Remove(h.Backing) })
	err = f.Truncate(int64(sizeMiB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("size host fs backing file: %w", err)
	}

	// mkfs on the file before attaching it: same bytes, and no window in
	// which a half-made loop device exists.
	args := append(append([]string{}, mkfsArgs[h.Type][1:]...), h.Backing)
	if _, err := run(ctx, mkfsArgs[h.Type][0], args...); err != nil {
		return fmt.Errorf("make %s host fs: %w", h.Type, err)
	}

	out, err := run(ctx, "losetup", "--find", "--show", h.Backing)
	if err != nil {
		return fmt.Errorf("attach loop device: %w", err)
	}
	h.Loop = strings.TrimSpace(out)
	h.undo = append(h.undo, func() error { return detachLoop(h.Loop) })

	if _, err := run(ctx, "mount", "-t", h.Type, h.Loop, h.Dir); err != nil {
		return fmt.Errorf("mount %s host fs: %w", h.Type, err)
	}
	h.undo = append(h.undo, func() error { return unmount(h.Dir) })
	return nil
}

// Path returns the path of name inside the host file system.
func (h *HostFS) Path(name string) string { return filepath.Join(h.Dir, name) }

// Close unmounts the file system, detaches the loop device and removes the
// backing file and mount point. It is safe to call more than once. Stop the
// guests using images on it first: an open image keeps the mount busy.
func (h *HostFS) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	var errs []error
	for i := len(h.undo) - 1; i >= 0; i-- {
		if err := h.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tear down %s host fs %s: %w", h.Type, h.Dir, err)
	}
	return nil
}

// unmount unmounts dir, retrying for a few seconds: a QEMU process that just
// exited may still hold its image files while the kernel finishes closing
// them.
func unmount(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for {
		if _, err = run(ctx, "umount", dir); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unmount %s: %w", dir, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// detachLoop detaches a loop device, retrying like unmount.
func detachLoop(dev string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for {
		if _, err = run(ctx, "losetup", "--detach", dev); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("detach %s: %w", dev, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var _ io.Closer = (*HostFS)(nil)
