package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DataDisk writes the directory tree dir into a new ext4 image at image
// (mke2fs -d, files owned by root, labelled serial) with room to spare, and
// returns it as a read-only disk whose virtio serial is serial, by which
// the guest finds it. Guests mount it to run what the kit lacks (bundled
// programs, their data, scripts) without touching the disks under test.
func DataDisk(ctx context.Context, dir, image, serial string) (DiskConfig, error) {
	var size int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			size += fi.Size() + 4096
		}
		return err
	})
	if err != nil {
		return DiskConfig{}, fmt.Errorf("size the data disk of %s: %w", dir, err)
	}
	// ext4's metadata (inode tables, journal) and slack: half again plus
	// 64 MiB, in whole MiB.
	mib := (size*3/2)>>20 + 64
	_ = os.Remove(image)
	out, err := exec.CommandContext(ctx, "mke2fs", "-q", "-F", "-t", "ext4", "-L", serial,
		"-E", "root_owner=0:0", "-d", dir, image, fmt.Sprintf("%dM", mib)).CombinedOutput()
	if err != nil {
		return DiskConfig{}, fmt.Errorf("make the data disk with mke2fs -d %s: %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return DiskConfig{ID: serial, File: image, Format: "raw", ReadOnly: true}, nil
}
