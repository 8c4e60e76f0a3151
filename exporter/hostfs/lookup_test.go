package hostfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFind(t *testing.T) {
	tab := &Table{Mounts: loadFixture(t, "kvmhost.txt")}
	for _, tc := range []struct {
		path   string
		wantID int
	}{
		{"/srv/vms/fast/disk.img", 32},
		{"/srv/vms/fast", 32},
		{"/srv/vms/fastx/disk.img", 31}, // prefix must end at a path separator
		{"/srv/vms/a.qcow2", 31},
		{"/var/lib/libvirt/images/a.qcow2", 30},
		{"/mnt/loop/x.img", 35}, // tmpfs stacked on the ext4: the later mount is visible
		{"/mnt/bind with space/x.img", 33},
		{"/etc/passwd", 28},
		{"/", 28},
		{"/dev/pts/3", 25},
	} {
		m, ok := tab.Find(tc.path)
		if !ok || m.ID != tc.wantID {
			t.Errorf("Find(%q) = mount %d (ok=%v), want %d", tc.path, m.ID, ok, tc.wantID)
		}
	}

	noRoot := &Table{Mounts: []Mount{{ID: 1, MountPoint: "/data", FSType: "xfs"}}}
	if m, ok := noRoot.Find("/etc/passwd"); ok {
		t.Errorf("Find outside every mount returned %+v", m)
	}
}

// fakeSys builds a sysfs tree shaped like the kernel's for the devices of
// kvmhost.txt: /sys/dev/block/M:m symlinks into /sys/devices, dm names, loop
// backing files and /sys/class/block entries.
func fakeSys(t *testing.T) string {
	t.Helper()
	sys := t.TempDir()
	mk := func(rel, content string) {
		p := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, rel string) {
		p := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	mk("devices/virtual/block/dm-0/dm/name", "vg0-images\n")
	mk("devices/virtual/block/dm-0/dev", "253:0\n")
	link("../../devices/virtual/block/dm-0", "dev/block/253:0")
	mk("devices/pci0000:00/nvme/nvme0n1/nvme0n1p2/dev", "259:2\n")
	mk("devices/pci0000:00/nvme/nvme0n1/nvme0n1p2/partition", "2\n")
	link("../../devices/pci0000:00/nvme/nvme0n1/nvme0n1p2", "dev/block/259:2")
	mk("devices/pci0000:00/sata/sdb/dev", "8:16\n")
	link("../../devices/pci0000:00/sata/sdb", "dev/block/8:16")
	link("../../devices/pci0000:00/sata/sdb", "class/block/sdb")
	mk("devices/virtual/block/loop3/dev", "7:3\n")
	mk("devices/virtual/block/loop3/loop/backing_file", "/var/tmp/scratch.ext4\n")
	link("../../devices/virtual/block/loop3", "dev/block/7:3")
	mk("devices/virtual/block/loop4/loop/backing_file", "/var/tmp/parted.img\n")
	mk("devices/virtual/block/loop4/loop4p1/dev", "259:9\n")
	mk("devices/virtual/block/loop4/loop4p1/partition", "1\n")
	link("../../devices/virtual/block/loop4/loop4p1", "dev/block/259:9")
	return sys
}

func TestResolveDevice(t *testing.T) {
	mounts := loadFixture(t, "kvmhost.txt")
	mounts = append(mounts, Mount{ID: 99, ParentID: 28, Major: 259, Minor: 9, Root: "/", MountPoint: "/mnt/part", FSType: "ext4", Source: "/dev/loop4p1"})
	tab := &Table{Mounts: mounts, SysRoot: fakeSys(t)}
	// No device node of the fixture exists on the test machine: resolution
	// must come from sysfs alone, as inside a container without the host /dev.
	tab.statBlock = func(string) (uint32, uint32, bool) { return 0, 0, false }

	for _, tc := range []struct {
		path                 string
		device               string
		major, minor         uint32
		backing, fstype, mnt string
	}{
		{"/var/lib/libvirt/images/a.qcow2", "/dev/mapper/vg0-images", 253, 0, "", "xfs", "/var/lib/libvirt/images"},
		{"/etc/hosts", "/dev/nvme0n1p2", 259, 2, "", "ext4", "/"},
		// btrfs: mountinfo says 0:40/0:41, the device comes from the source.
		{"/srv/vms/fast/d.img", "/dev/sdb", 8, 16, "", "btrfs", "/srv/vms/fast"},
		{"/mnt/bind with space/d.img", "/dev/sdb", 8, 16, "", "btrfs", "/mnt/bind with space"},
		{"/mnt/loop/x", "", 0, 0, "", "tmpfs", "/mnt/loop"},
		{"/mnt/nfs/x", "", 0, 0, "", "nfs4", "/mnt/nfs"},
		{"/mnt/part/x", "/dev/loop4p1", 259, 9, "/var/tmp/parted.img", "ext4", "/mnt/part"},
	} {
		m, ok := tab.Find(tc.path)
		if !ok {
			t.Fatalf("Find(%q) failed", tc.path)
		}
		tab.resolveDevice(&m)
		if m.Device != tc.device || m.DeviceMajor != tc.major || m.DeviceMinor != tc.minor ||
			m.BackingFile != tc.backing || m.FSType != tc.fstype || m.MountPoint != tc.mnt {
			t.Errorf("%s: got device=%q %d:%d backing=%q fstype=%s mnt=%q; want %q %d:%d %q %s %q",
				tc.path, m.Device, m.DeviceMajor, m.DeviceMinor, m.BackingFile, m.FSType, m.MountPoint,
				tc.device, tc.major, tc.minor, tc.backing, tc.fstype, tc.mnt)
		}
	}

	// The ext4 under the stacked tmpfs is on loop3: resolving that mount
	// directly yields the loop device and its backing file.
	m := mounts[10]
	tab.resolveDevice(&m)
	if m.Device != "/dev/loop3" || m.BackingFile != "/var/tmp/scratch.ext4" {
		t.Errorf("loop mount resolved to %q backing %q", m.Device, m.BackingFile)
	}
}

func TestLookupResolvesSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.img")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A fake mount exactly on the temporary directory must be found for a
	// symlink pointing into it.
	tab := &Table{Mounts: []Mount{
		{ID: 1, MountPoint: "/", FSType: "rootfs"},
		{ID: 2, MountPoint: real, FSType: "fixturefs"},
	}, SysRoot: t.TempDir()}
	m, err := tab.Lookup(link)
	if err != nil {
		t.Fatal(err)
	}
	if m.FSType != "fixturefs" {
		t.Errorf("Lookup(symlink) = %+v, want the fixturefs mount", m)
	}
	if _, err := tab.Lookup(filepath.Join(dir, "missing")); err == nil {
		t.Error("Lookup of a missing file succeeded")
	}
	if _, err := (&Table{Mounts: []Mount{{ID: 2, MountPoint: "/nonexistent", FSType: "x"}}}).Lookup(link); !errors.Is(err, ErrNotFound) {
		t.Errorf("got %v, want ErrNotFound", err)
	}
}
