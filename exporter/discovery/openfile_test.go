package discovery

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestFileIDFollowsTheOpenFile: a disk whose VMM process holds its image
// open is identified by the file the process holds, through its descriptor,
// also after a new file is renamed over the path and after the path is
// removed. The test process plays the VMM.
func TestFileIDFollowsTheOpenFile(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldID := idOf(t, held)
	d := &Discoverer{opts: Options{ProcRoot: "/proc"}}
	self := os.Getpid()
	link := filepath.Join("/proc", strconv.Itoa(self), "fd", strconv.Itoa(int(held.Fd())))

	check := func(when string, disk Disk, wantID fileID, wantOpen string) {
		t.Helper()
		id, ok := d.fileID(&disk, map[int][]fdLink{})
		if !ok || id != wantID {
			t.Errorf("%s: identity %v (found %v), want %v", when, id, ok, wantID)
		}
		if disk.OpenPath != wantOpen {
			t.Errorf("%s: OpenPath %q, want %q", when, disk.OpenPath, wantOpen)
		}
	}

	check("file in place", Disk{SourceFile: img, PID: self}, heldID, link)
	// Through a symbolic link: found by identity.
	sym := filepath.Join(dir, "via-link.img")
	if err := os.Symlink(img, sym); err != nil {
		t.Fatal(err)
	}
	check("path through a symlink", Disk{SourceFile: sym, PID: self}, heldID, link)

	// A new file renamed over the path: the process keeps the old one.
	tmp := filepath.Join(dir, "new.img")
	if err := os.WriteFile(tmp, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, img); err != nil {
		t.Fatal(err)
	}
	newID, _, ok := statID(img)
	if !ok || newID == heldID {
		t.Fatalf("rename did not put a new file at %s", img)
	}
	check("replaced while open", Disk{SourceFile: img, PID: self}, heldID, link)
	// Without a process the path is all there is.
	check("replaced, no process known", Disk{SourceFile: img}, newID, "")

	// A second process opening the path now holds the new file; as the
	// test process opens it too, the file at the path wins over the
	// unlinked one.
	second, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	link2 := filepath.Join("/proc", strconv.Itoa(self), "fd", strconv.Itoa(int(second.Fd())))
	check("both open", Disk{SourceFile: img, PID: self}, newID, link2)
	second.Close()

	// Removed: still the file held open.
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	check("removed while open", Disk{SourceFile: img, PID: self}, heldID, link)
	if target, err := os.Readlink(link); err != nil || !strings.HasSuffix(target, " (deleted)") {
		t.Errorf("link of a removed file reads %q; the kernel marks it \" (deleted)\"", target)
	}

	// A process that holds nothing of the kind: the path, as before.
	other := filepath.Join(dir, "other.img")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	otherID, _, _ := statID(other)
	check("not held open", Disk{SourceFile: other, PID: self}, otherID, "")
	// A process that is gone: the path.
	check("process gone", Disk{SourceFile: other, PID: 1 << 30}, otherID, "")
}

func idOf(t *testing.T, f *os.File) fileID {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fileID{uint64(st.Dev), st.Ino}
}
