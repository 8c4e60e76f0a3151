package discovery

import (
	"bufio"
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// buildProc copies the fixture proc tree of testdata/proc into a temporary
// directory and creates the symlinks each process's "links" file lists
// (exe, cwd, fd/N; git keeps no absolute or dangling symlinks portably).
// "@TMP@" in command lines and link targets becomes the image directory,
// which is returned along with the proc root.
func buildProc(t *testing.T) (procRoot, imgDir string) {
	t.Helper()
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	procRoot, imgDir = filepath.Join(tmp, "proc"), filepath.Join(tmp, "img")
	subst := func(s string) string { return strings.ReplaceAll(s, "@TMP@", imgDir) }
	src := filepath.Join("testdata", "proc")
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(procRoot, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if d.Name() != "links" {
			return os.WriteFile(dst, []byte(subst(string(b))), 0o644)
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			line := sc.Text()
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, target, _ := strings.Cut(line, " ")
			l := filepath.Join(filepath.Dir(dst), name)
			if err := os.MkdirAll(filepath.Dir(l), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(subst(target), l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return procRoot, imgDir
}

// writeQcow2 writes a minimal qcow2 version 3 header naming backing.
func writeQcow2(t *testing.T, p, backing string) {
	t.Helper()
	hdr := make([]byte, 512)
	copy(hdr, qcow2Magic)
	binary.BigEndian.PutUint32(hdr[4:], 3)
	if backing != "" {
		binary.BigEndian.PutUint64(hdr[8:], 256)
		binary.BigEndian.PutUint32(hdr[16:], uint32(len(backing)))
		copy(hdr[256:], backing)
	}
	if err := os.WriteFile(p, hdr, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeSized(t *testing.T, p string, size int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// fixtureImages creates the files the fixture processes hold open.
func fixtureImages(t *testing.T, img string) {
	t.Helper()
	if err := os.MkdirAll(img, 0o755); err != nil {
		t.Fatal(err)
	}
	writeQcow2(t, filepath.Join(img, "web01.qcow2"), filepath.Join(img, "base.qcow2"))
	writeQcow2(t, filepath.Join(img, "base.qcow2"), "")
	writeQcow2(t, filepath.Join(img, "hotplug.qcow2"), "hotplug-base.qcow2")
	writeQcow2(t, filepath.Join(img, "hotplug-base.qcow2"), "")
	writeQcow2(t, filepath.Join(img, "hot-ro.qcow2"), "")
	writeSized(t, filepath.Join(img, "hot.raw"), 2<<20)
	writeSized(t, filepath.Join(img, "small.raw"), 4096)
	writeSized(t, filepath.Join(img, "web01.log"), 100)
	writeSized(t, filepath.Join(img, "vars.fd"), 2<<20)
	writeSized(t, filepath.Join(img, "ro.raw"), 2<<20)
	writeSized(t, filepath.Join(img, "odd.raw"), 2<<20+100)
	writeSized(t, filepath.Join(img, "vm2", "disk.raw"), 1<<20)
	if err := os.Symlink(".", filepath.Join(img, "links")); err != nil {
		t.Fatal(err)
	}
}

func TestScanProcFixture(t *testing.T) {
	// The fixture's fdinfo flags are the x86-64 (asm-generic) values:
	// O_DIRECT is 040000 there but differs on arm64, ppc64 and others.
	if syscall.O_DIRECT != 0o40000 {
		t.Fatalf("fixture fdinfo flags assume O_DIRECT = 040000, this architecture has %#o", syscall.O_DIRECT)
	}
	procRoot, img := buildProc(t)
	fixtureImages(t, img)

	vms, stats, err := ScanProc(procRoot)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Processes != 5 || stats.QEMU != 2 || stats.Vanished != 1 || stats.Skipped != 0 || stats.HotPlugged != 3 {
		t.Errorf("stats = %+v, want 5 processes, 2 QEMU, 1 vanished, 0 skipped, 3 hot-plugged", stats)
	}
	if len(vms) != 2 {
		t.Fatalf("got %d VMs, want 2: %+v", len(vms), vms)
	}
	web, vm2 := vms[0], vms[1]
	if web.PID != 4242 || web.Name != "web01" || vm2.PID != 4243 || vm2.Name != "vm2" {
		t.Fatalf("VMs %d/%s and %d/%s", web.PID, web.Name, vm2.PID, vm2.Name)
	}
	uuid := "8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b"
	base := Disk{Domain: "web01", UUID: uuid, Source: SourceQEMU, PID: 4242}
	d := func(f func(*Disk)) Disk { x := base; f(&x); return x }
	diffDisks(t, web.Disks, []Disk{
		d(func(x *Disk) {
			x.TargetDevice, x.SourceFile, x.Format, x.Cache, x.AIO, x.Discard =
				"virtio-disk0", filepath.Join(img, "links", "web01.qcow2"), "qcow2", "none", "native", "unmap"
		}),
		// From the fd scan, in descriptor name order.
		d(func(x *Disk) {
			x.SourceFile, x.Format, x.Cache = filepath.Join(img, "hotplug.qcow2"), "qcow2", CacheDirect
		}),
		d(func(x *Disk) { x.SourceFile = filepath.Join(img, "hot.raw") }),
		d(func(x *Disk) { x.SourceFile, x.Format, x.ReadOnly = filepath.Join(img, "hot-ro.qcow2"), "qcow2", true }),
	})
	diffDisks(t, vm2.Disks, []Disk{{
		Domain: "vm2", TargetDevice: "virtio0", SourceFile: filepath.Join(img, "vm2", "disk.raw"), Source: SourceQEMU,
		PID: 4243, Format: "raw", Cache: "writethrough", AIO: "threads", Discard: "ignore",
	}})
}

func TestScanProcMissingRoot(t *testing.T) {
	if _, _, err := ScanProc(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("scanning a missing proc root succeeded")
	}
}

func TestReadQcow2BackingBounds(t *testing.T) {
	for _, direct := range []bool{false, true} {
		dir := t.TempDir()
		p := filepath.Join(dir, "bad.qcow2")
		hdr := make([]byte, 64)
		copy(hdr, qcow2Magic)
		binary.BigEndian.PutUint64(hdr[8:], 1<<62) // offset far beyond the file
		binary.BigEndian.PutUint32(hdr[16:], 10)
		if err := os.WriteFile(p, hdr, 0o644); err != nil {
			t.Fatal(err)
		}
		if name, ok := readQcow2Backing(p, direct); !ok || name != "" {
			t.Errorf("direct %v: got %q, %v; want qcow2 without backing name", direct, name, ok)
		}
		binary.BigEndian.PutUint64(hdr[8:], 32)
		binary.BigEndian.PutUint32(hdr[16:], 1<<20) // longer than the 1023 the spec allows
		if err := os.WriteFile(p, hdr, 0o644); err != nil {
			t.Fatal(err)
		}
		if name, ok := readQcow2Backing(p, direct); !ok || name != "" {
			t.Errorf("direct %v: got %q, %v; want qcow2 without backing name", direct, name, ok)
		}
		// A backing name across the first 4 KiB block's end.
		hdr = append(make([]byte, 4090), "base.qcow2"...)
		copy(hdr, qcow2Magic)
		binary.BigEndian.PutUint64(hdr[8:], 4090)
		binary.BigEndian.PutUint32(hdr[16:], 10)
		if err := os.WriteFile(p, hdr, 0o644); err != nil {
			t.Fatal(err)
		}
		if name, ok := readQcow2Backing(p, direct); !ok || name != "base.qcow2" {
			t.Errorf("direct %v: got %q, %v; want qcow2 backed by base.qcow2", direct, name, ok)
		}
		if _, ok := readQcow2Backing(filepath.Join(dir, "missing"), direct); ok {
			t.Errorf("direct %v: missing file reported as qcow2", direct)
		}
	}
}
