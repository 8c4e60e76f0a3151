package hostfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// These tests build real file systems on loop devices. They need root and
// util-linux, btrfs-progs and xfsprogs; CI runs as root with all of them, so
// a missing piece is a failure, not a skip.

func requireRootAndTools(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates loop devices and mounts file systems: run it as root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found in PATH (install util-linux, btrfs-progs, xfsprogs): %v", tool, err)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// loopFS creates a sparse image of size bytes, attaches it to a loop
// device, formats it with mkfs and mounts it on a new directory. Everything
// is undone in t.Cleanup (in reverse order: unmount, then detach).
func loopFS(t *testing.T, dir, name string, size int64, mkfs ...string) (img, dev, mnt string) {
	t.Helper()
	img = filepath.Join(dir, name+".img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dev = run(t, "losetup", "-f", "--show", img)
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v\n%s", dev, err, out)
		}
	})
	run(t, mkfs[0], append(mkfs[1:], dev)...)
	mnt = filepath.Join(dir, name)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(t, dev, mnt)
	return img, dev, mnt
}

// mount runs mount(8) with args ending in the mount point and registers the
// unmount.
func mount(t *testing.T, args ...string) {
	t.Helper()
	run(t, "mount", args...)
	mnt := args[len(args)-1]
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	})
}

func devOf(t *testing.T, p string) (major, minor uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return devMajor(uint64(st.Dev)), devMinor(uint64(st.Dev))
}

func writeFile(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
}

func lookupOK(t *testing.T, p string) Mount {
	t.Helper()
	tab, err := LoadTable("/proc/self/mountinfo", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	m, err := tab.Lookup(p)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", p, err)
	}
	return m
}

func TestLookupLoopBtrfs(t *testing.T) {
	requireRootAndTools(t, "losetup", "mkfs.btrfs", "btrfs", "mount", "umount")
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img, dev, mnt := loopFS(t, dir, "btrfs", 256<<20, "mkfs.btrfs", "-q", "-f")
	run(t, "btrfs", "subvolume", "create", filepath.Join(mnt, "sub"))
	disk := filepath.Join(mnt, "sub", "disk.img")
	writeFile(t, disk)
	t.Cleanup(func() { os.Remove(disk) }) // before the unmount

	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	loopMaj, loopMin := devMajor(uint64(st.Rdev)), devMinor(uint64(st.Rdev))

	m := lookupOK(t, disk)
	if m.FSType != "btrfs" || m.MountPoint != mnt {
		t.Fatalf("Lookup(%s) = fstype %s on %s, want btrfs on %s", disk, m.FSType, m.MountPoint, mnt)
	}
	// The premise of matching by path: the file's st_dev is the
	// subvolume's anonymous device, which is not the mount's.
	fMaj, fMin := devOf(t, disk)
	if fMaj != 0 || (fMaj == m.Major && fMin == m.Minor) {
		t.Errorf("file st_dev %d:%d, mount %d:%d: expected a distinct anonymous device for the subvolume", fMaj, fMin, m.Major, m.Minor)
	}
	if m.Device != dev || m.DeviceMajor != loopMaj || m.DeviceMinor != loopMin {
		t.Errorf("device = %s %d:%d, want %s %d:%d", m.Device, m.DeviceMajor, m.DeviceMinor, dev, loopMaj, loopMin)
	}
	if m.BackingFile != img {
		t.Errorf("backing file = %q, want %q", m.BackingFile, img)
	}

	// A bind mount of the subvolume elsewhere is its own mount entry with
	// the same file system and device.
	bind := filepath.Join(dir, "bind")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(t, "--bind", filepath.Join(mnt, "sub"), bind)
	b := lookupOK(t, filepath.Join(bind, "disk.img"))
	if b.FSType != "btrfs" || b.MountPoint != bind || b.Device != dev || b.Root != "/sub" {
		t.Errorf("bind mount lookup = %+v, want btrfs on %s root /sub device %s", b, bind, dev)
	}

	// A symlink elsewhere resolves to the real file first.
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(disk, link); err != nil {
		t.Fatal(err)
	}
	if l := lookupOK(t, link); l.MountPoint != mnt || l.Device != dev {
		t.Errorf("symlink lookup = %+v, want the btrfs mount", l)
	}
}

func TestLookupLoopXFSStacked(t *testing.T) {
	requireRootAndTools(t, "losetup", "mkfs.xfs", "mount", "umount")
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// xfsprogs >= 5.19 refuses new file systems below 300 MB.
	img, dev, mnt := loopFS(t, dir, "xfs", 320<<20, "mkfs.xfs", "-q", "-f")
	disk := filepath.Join(mnt, "disk.img")
	writeFile(t, disk)
	t.Cleanup(func() { os.Remove(disk) })

	m := lookupOK(t, disk)
	fMaj, fMin := devOf(t, disk)
	if m.FSType != "xfs" || m.MountPoint != mnt || m.Device != dev || m.BackingFile != img {
		t.Fatalf("Lookup = %+v, want xfs on %s device %s backing %s", m, mnt, dev, img)
	}
	// For a plain block file system, st_dev, mountinfo and the device agree.
	if m.Major != fMaj || m.Minor != fMin || m.DeviceMajor != fMaj || m.DeviceMinor != fMin {
		t.Errorf("st_dev %d:%d, mountinfo %d:%d, device %d:%d: want all equal", fMaj, fMin, m.Major, m.Minor, m.DeviceMajor, m.DeviceMinor)
	}

	// Stack a tmpfs on the same mount point: the top mount wins.
	mount(t, "-t", "tmpfs", "fspair-test", mnt)
	top := filepath.Join(mnt, "top.img")
	writeFile(t, top)
	s := lookupOK(t, top)
	if s.FSType != "tmpfs" || s.Source != "fspair-test" || s.Device != "" {
		t.Errorf("stacked lookup = %+v, want the tmpfs", s)
	}
}
