package hostfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrNotFound is returned by Lookup when no mount in the table contains the
// path (only possible with a mount table that lacks "/").
var ErrNotFound = errors.New("no mount contains path")

// Table is a snapshot of one mount namespace's mount table together with the
// sysfs used to resolve block devices. Load it once per discovery cycle and
// look up many files against it.
type Table struct {
	Mounts []Mount
	// SysRoot is where sysfs is mounted, "/sys" unless testing.
	SysRoot string

	// statBlock returns the device number of a block device node; tests
	// replace it so fixtures do not depend on the machine's /dev.
	statBlock func(path string) (major, minor uint32, ok bool)
}

// LoadTable reads a mountinfo file (normally /proc/self/mountinfo) and
// remembers sysRoot (normally /sys) for device resolution.
func LoadTable(mountinfoPath, sysRoot string) (*Table, error) {
	f, err := os.Open(mountinfoPath)
	if err != nil {
		return nil, fmt.Errorf("open mountinfo: %w", err)
	}
	defer f.Close()
	mounts, err := ParseMountinfo(f)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", mountinfoPath, err)
	}
	return &Table{Mounts: mounts, SysRoot: sysRoot}, nil
}

// Lookup returns the mount holding path in the caller's mount namespace,
// reading /proc/self/mountinfo and /sys. Callers looking up many files should
// use LoadTable and Table.Lookup.
func Lookup(path string) (Mount, error) {
	t, err := LoadTable("/proc/self/mountinfo", "/sys")
	if err != nil {
		return Mount{}, err
	}
	return t.Lookup(path)
}

// Lookup resolves path (symlinks included) to its real path and returns the
// mount it lives on, with Device, DeviceMajor/DeviceMinor and BackingFile
// filled where they can be resolved.
//
// The mount is chosen by path, not by the file's st_dev: on btrfs every
// subvolume has its own anonymous st_dev (fs/btrfs/inode.c btrfs_getattr()
// reports the subvolume's anon_dev), which matches no mountinfo line for a
// subvolume that is not itself mounted.
func (t *Table) Lookup(path string) (Mount, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Mount{}, fmt.Errorf("resolve path %s: %w", path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return Mount{}, fmt.Errorf("resolve path %s: %w", path, err)
	}
	m, ok := t.Find(real)
	if !ok {
		return Mount{}, fmt.Errorf("look up %s: %w", real, ErrNotFound)
	}
	t.resolveDevice(&m)
	return m, nil
}

// Find returns the mount that holds the already resolved absolute path
// realPath: the one with the longest mount point that is a path prefix of
// realPath. Among mounts on the same mount point the last one in mountinfo
// order wins, because that is the one stacked on top and visible (mounts are
// listed in the order they were attached to the namespace). Bind mounts need
// no special case: they appear as mounts of their own.
func (t *Table) Find(realPath string) (Mount, bool) {
	realPath = filepath.Clean(realPath)
	best := -1
	bestLen := -1
	for i := range t.Mounts {
		// The kernel prints clean paths; cleaning guards fixtures and
		// fuzzed input ("//x").
		mp := filepath.Clean(t.Mounts[i].MountPoint)
		if !under(realPath, mp) {
			continue
		}
		if len(mp) >= bestLen {
			best, bestLen = i, len(mp)
		}
	}
	if best < 0 {
		return Mount{}, false
	}
	m := t.Mounts[best]
	m.Optional = append([]string(nil), m.Optional...)
	return m, true
}

// under reports whether p equals dir or lies below it.
func under(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	dir = strings.TrimSuffix(dir, "/")
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// resolveDevice fills the Device fields of m.
//
// For a file system on a block device the st_dev in mountinfo is that device.
// btrfs reports an anonymous device (major 0) even for the mount's own
// subvolume, so for it, and for any other anonymous device, the mount source
// is used when it names a device node.
func (t *Table) resolveDevice(m *Mount) {
	if m.Major != 0 && t.isBlockDev(m.Major, m.Minor) {
		m.DeviceMajor, m.DeviceMinor = m.Major, m.Minor
		m.Device = t.deviceName(m.Source, m.Major, m.Minor)
	} else if strings.HasPrefix(m.Source, "/dev/") {
		if major, minor, ok := t.sourceDev(m.Source); ok {
			m.DeviceMajor, m.DeviceMinor = major, minor
			m.Device = m.Source
		}
	}
	if m.Device != "" {
		m.BackingFile = t.loopBackingFile(m.DeviceMajor, m.DeviceMinor)
	}
}

func (t *Table) sysDevBlock(major, minor uint32) string {
	return filepath.Join(t.sysRoot(), "dev", "block", formatDev(major, minor))
}

func (t *Table) sysRoot() string {
	if t.SysRoot == "" {
		return "/sys"
	}
	return t.SysRoot
}

func (t *Table) isBlockDev(major, minor uint32) bool {
	_, err := os.Stat(t.sysDevBlock(major, minor))
	return err == nil
}

// deviceName names the device node of major:minor: the mount source when it
// is a node of that device (so operators see /dev/mapper/vg-lv rather than
// /dev/dm-3), else /dev/<kernel name> from sysfs, with device-mapper devices
// under /dev/mapper.
func (t *Table) deviceName(source string, major, minor uint32) string {
	if strings.HasPrefix(source, "/dev/") {
		if ma, mi, ok := t.stat(source); ok && ma == major && mi == minor {
			return source
		}
	}
	dir := t.sysDevBlock(major, minor)
	if name, err := readSmall(filepath.Join(dir, "dm", "name")); err == nil && name != "" {
		return "/dev/mapper/" + name
	}
	link, err := os.Readlink(dir)
	if err != nil {
		return ""
	}
	return "/dev/" + filepath.Base(link)
}

// sourceDev finds the device number of a mount source such as /dev/loop3:
// from the node itself, or, when /dev is not the host's (a container), from
// /sys/class/block/<name>/dev.
func (t *Table) sourceDev(source string) (major, minor uint32, ok bool) {
	if ma, mi, ok := t.stat(source); ok {
		return ma, mi, true
	}
	s, err := readSmall(filepath.Join(t.sysRoot(), "class", "block", filepath.Base(source), "dev"))
	if err != nil {
		return 0, 0, false
	}
	ma, mi, err := parseDev(s)
	if err != nil {
		return 0, 0, false
	}
	return ma, mi, true
}

// loopBackingFile returns the backing file of a loop device or of a
// partition on one ("" otherwise). The sysfs attribute is documented in the
// kernel's Documentation/ABI/testing/sysfs-block-loop.
func (t *Table) loopBackingFile(major, minor uint32) string {
	dir := t.sysDevBlock(major, minor)
	if s, err := readSmall(filepath.Join(dir, "loop", "backing_file")); err == nil {
		return s
	}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		// The partition's directory sits inside its disk's; resolve the
		// /sys/dev/block symlink first, since Join cleans ".." lexically.
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return ""
		}
		if s, err := readSmall(filepath.Join(filepath.Dir(real), "loop", "backing_file")); err == nil {
			return s
		}
	}
	return ""
}

func (t *Table) stat(p string) (major, minor uint32, ok bool) {
	if t.statBlock != nil {
		return t.statBlock(p)
	}
	return statBlockDev(p)
}

func statBlockDev(p string) (major, minor uint32, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return 0, 0, false
	}
	return devMajor(uint64(st.Rdev)), devMinor(uint64(st.Rdev)), true
}

// devMajor and devMinor split a Linux dev_t as glibc's gnu_dev_major/minor
// do (include/linux/kdev_t.h new_decode_dev for the 32-bit form).
func devMajor(dev uint64) uint32 {
	return uint32((dev>>8)&0xfff) | uint32((dev>>32)&^0xfff)
}

func devMinor(dev uint64) uint32 {
	return uint32(dev&0xff) | uint32((dev>>12)&^0xff)
}

// readSmall reads a sysfs attribute, trimmed. sysfs attributes are at most a
// page; a path can be up to PATH_MAX.
func readSmall(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 8192)
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return "", err
	}
	return strings.TrimRight(string(buf[:n]), "\n"), nil
}

// formatDev is the "major:minor" form used by mountinfo and sysfs.
func formatDev(major, minor uint32) string {
	return strconv.FormatUint(uint64(major), 10) + ":" + strconv.FormatUint(uint64(minor), 10)
}
