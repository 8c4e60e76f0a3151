package probe

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fspair/fspair/exporter/hostfs"
)

func sh(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// testFS gives a test a directory on a file system of type fs of its own,
// and the block device under it: a fresh one made with mkfs on a loop
// device (unmounted and detached at cleanup), or, where FSPAIR_TEST_MOUNTS
// names a mount of that type (fs=dir,...; the kernel matrix's guests have
// no mkfs), a fresh directory on it.
func testFS(t *testing.T, fs string) (dev, dir string) {
	t.Helper()
	for _, kv := range strings.Split(os.Getenv("FSPAIR_TEST_MOUNTS"), ",") {
		if k, mnt, ok := strings.Cut(kv, "="); ok && k == fs {
			dir, err := os.MkdirTemp(mnt, "probe-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			m, err := hostfs.Lookup(dir)
			if err != nil || m.FSType != fs {
				t.Fatalf("FSPAIR_TEST_MOUNTS: %s is not %s (%+v, %v)", mnt, fs, m, err)
			}
			return m.Device, dir
		}
	}
	return loopFS(t, "mkfs."+fs, 512)
}

// loopDevice attaches a sparse file of sizeMiB at backing to a loop device;
// the test's cleanup detaches it.
func loopDevice(t testing.TB, backing string, sizeMiB int64) string {
	t.Helper()
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, sizeMiB<<20); err != nil {
		t.Fatal(err)
	}
	loop := sh(t, "losetup", "-f", "--show", backing)
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
	return loop
}

// loopFS makes a file system of sizeMiB with mkfs on a loop device and
// mounts it; the test's cleanup unmounts and detaches it.
func loopFS(t testing.TB, mkfs string, sizeMiB int64) (loop, mnt string) {
	t.Helper()
	dir := t.TempDir()
	loop = loopDevice(t, filepath.Join(dir, "fs.img"), sizeMiB)
	args := []string{"-q"}
	if mkfs == "mkfs.ext4" {
		// Inode tables and journal zeroed now: by default a fresh ext4
		// zeroes them from a kernel thread after mounting, whose writes
		// land in the middle of a test's device accounting (a 2 MiB
		// zeroing in flight between the BPF counters and /sys/block,
		// which counts a request only at its completion, failed
		// TestHostDeviceAttribution once).
		args = append(args, "-E", "lazy_itable_init=0,lazy_journal_init=0")
	}
	sh(t, mkfs, append(args, loop)...)
	mnt = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, "mount", loop, mnt)
	t.Cleanup(func() {
		// A file system just used may be busy for a moment (Btrfs
		// finishes its transaction in a worker): up to 20 s, since on a
		// loaded 2-core host (lab guests beside the test) 5 s was seen
		// to fall short once.
		var out []byte
		var err error
		for i := 0; i < 200; i++ {
			if out, err = exec.Command("umount", mnt).CombinedOutput(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Another process that walks the host's mounts (a node_exporter of
		// a stack beside the tests held a test's mount point open for
		// minutes) is not this test's doing: detach the mount lazily, the
		// loop device goes with its last user. One of this process's own
		// (a leaked file) or none to be found fails the test.
		holders := mountHolders(mnt)
		if len(holders) == 0 || slices.ContainsFunc(holders, func(h mountHolder) bool { return h.pid == os.Getpid() }) {
			t.Errorf("umount %s: %v: %s (held by %v)", mnt, err, out, holders)
			return
		}
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount -l %s: %v: %s (held by %v)", mnt, err, out, holders)
			return
		}
		t.Logf("umount %s: held by %v, not by this test: detached lazily", mnt, holders)
	})
	return loop, mnt
}

// mountHolder is a process with a file, its working directory or its root
// under a mount point.
type mountHolder struct {
	pid  int
	comm string
}

// mountHolders lists the processes that hold something under mnt open.
func mountHolders(mnt string) []mountHolder {
	var out []mountHolder
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		links, _ := filepath.Glob(filepath.Join(dir, "fd", "*"))
		for _, l := range append(links, filepath.Join(dir, "cwd"), filepath.Join(dir, "root")) {
			if to, err := os.Readlink(l); err == nil && (to == mnt || strings.HasPrefix(to, mnt+"/")) {
				comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
				out = append(out, mountHolder{pid, strings.TrimSpace(string(comm))})
				break
			}
		}
	}
	return out
}

// trackFile opens path and tracks it as slot, for this process only.
func trackFile(t testing.TB, p *Probes, path string, slot uint32) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ino, err := p.Inode(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Track(ino, slot, ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetVMM(slot, uint32(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	if err := p.SetProcesses([]uint32{uint32(os.Getpid())}, false); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestBtrfsSubvolumeImage: an image in a Btrfs subvolume, whose st_dev is
// the subvolume's anonymous device rather than the file system's, is
// followed like any other (the probes key images by inode, not st_dev).
func TestBtrfsSubvolumeImage(t *testing.T) {
	_, mnt := loopFS(t, "mkfs.btrfs", 256) // a subvolume of its own: needs btrfs-progs
	sh(t, "btrfs", "subvolume", "create", filepath.Join(mnt, "images"))
	// Two files with the same inode number in two subvolumes: only the tracked one counts.
	img := filepath.Join(mnt, "images", "disk.img")
	other := filepath.Join(mnt, "disk.img")
	for _, p := range []string{img, other} {
		if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var a, b, m unix.Stat_t
	if err := unix.Stat(img, &a); err != nil {
		t.Fatal(err)
	}
	unix.Stat(other, &b)
	unix.Stat(mnt, &m)
	if a.Dev == m.Dev {
		t.Fatalf("subvolume st_dev %d equals the mount's %d: the case under test did not arise", a.Dev, m.Dev)
	}
	t.Logf("subvolume file dev=%d ino=%d; top-level file dev=%d ino=%d", a.Dev, a.Ino, b.Dev, b.Ino)

	forModes(t, func(t *testing.T, m Mode) {
		p := load(t, m)
		trackFile(t, p, img, 5)
		cache := cacheFor(t, p, img)
		f, g := openAs(t, img, cache), openAs(t, other, cache)
		buf := alignedBuf(t, 4096)
		for i := 0; i < 7; i++ {
			unix.Pwrite(f, buf, int64(i)*4096)
			unix.Pwrite(g, buf, int64(i)*4096)
		}
		c, err := p.Counters(5)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(7)
		if counted, _ := coverage(t, p, img, cache, "threads", "write"); !counted {
			want = 0 // Btrfs turns direct writes buffered (v6.15, and Debian's 6.12), out of the tracepoint mode's sight
		}
		if c.Requests[opWrite] != want {
			t.Errorf("subvolume image (%s): %d writes counted, want %d", cache, c.Requests[opWrite], want)
		}
	})
}
