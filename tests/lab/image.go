package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// MakeImage creates a guest disk image of sizeMiB at path. format is raw or
// qcow2; guestFS is ext4, xfs, btrfs or none. The guest file system is made
// on the host (the guest has no mkfs): for raw directly on the sparse file,
// for qcow2 on a temporary raw file that qemu-img then converts, which keeps
// the qcow2 sparse (only clusters mkfs wrote are allocated).
func MakeImage(ctx context.Context, path, format, guestFS string, sizeMiB int) error {
	if sizeMiB <= 0 {
		return fmt.Errorf("image %s: size %d MiB must be positive", path, sizeMiB)
	}
	if guestFS != "none" {
		if _, ok := mkfsArgs[guestFS]; !ok {
			return fmt.Errorf("image %s: guest file system %q: want ext4, xfs, btrfs or none", path, guestFS)
		}
	}
	switch format {
	case "raw":
		return makeRaw(ctx, path, guestFS, sizeMiB)
	case "qcow2":
		if guestFS == "none" {
			if _, err := run(ctx, "qemu-img", "create", "-q", "-f", "qcow2", path, fmt.Sprintf("%dM", sizeMiB)); err != nil {
				return fmt.Errorf("create qcow2 image %s: %w", path, err)
			}
			return nil
		}
		tmp := path + ".raw.tmp"
		if err := makeRaw(ctx, tmp, guestFS, sizeMiB); err != nil {
			return err
		}
		defer os.Remove(tmp)
		if _, err := run(ctx, "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", tmp, path); err != nil {
			return fmt.Errorf("convert %s to qcow2: %w", path, err)
		}
		return nil
	default:
		return fmt.Errorf("image %s: format %q: want raw or qcow2", path, format)
	}
}

func makeRaw(ctx context.Context, path, guestFS string, sizeMiB int) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create image %s: %w", path, err)
	}
	err = f.Truncate(int64(sizeMiB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(fmt.Errorf("size image %s: %w", path, err), os.Remove(path))
	}
	if guestFS == "none" {
		return nil
	}
	args := append(append([]string{}, mkfsArgs[guestFS][1:]...), path)
	if _, err := run(ctx, mkfsArgs[guestFS][0], args...); err != nil {
		return errors.Join(fmt.Errorf("make %s in image %s: %w", guestFS, path, err), os.Remove(path))
	}
	return nil
}
