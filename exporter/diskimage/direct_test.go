package diskimage

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDirectReaderReadsAsBuffered: every read through DirectReader gives the
// bytes and the error a buffered read gives, unaligned offsets and
// lengths and reads across the end of a file whose size is not a whole
// number of blocks included; and it leaves no page of the file in the
// host page cache.
func TestDirectReaderReadsAsBuffered(t *testing.T) {
	dir := t.TempDir()
	if !directIO(dir) {
		t.Skipf("%s has no O_DIRECT", dir)
	}
	path := filepath.Join(dir, "disk.img")
	rng := rand.New(rand.NewSource(1))
	data := make([]byte, 1<<20+1234)
	rng.Read(data)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Written back and dropped: no page of the file cached.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	r, err := OpenDirect(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	size := int64(len(data))
	cases := [][2]int64{{0, 512}, {0, 4096}, {1, 1}, {4095, 2}, {512, 70000}, {size - 10, 10}, {size - 10, 20},
		{size, 1}, {size + 5000, 10}, {size - 5000, 4096}}
	for i := 0; i < 200; i++ {
		cases = append(cases, [2]int64{rng.Int63n(size + 8192), 1 + rng.Int63n(100000)})
	}
	for _, c := range cases {
		want := make([]byte, c[1])
		wn, werr := f.ReadAt(want, c[0])
		got := make([]byte, c[1])
		gn, gerr := r.ReadAt(got, c[0])
		if gn != wn || gerr != werr || !bytes.Equal(got[:gn], want[:wn]) {
			t.Fatalf("ReadAt(%d bytes at %d): %d, %v; buffered %d, %v", c[1], c[0], gn, gerr, wn, werr)
		}
	}
	// Only the buffered reads above cached pages (which shows the count
	// sees them): drop them, read directly again, and count.
	if n := cachedPages(t, f, size); n == 0 {
		t.Fatal("no page cached after buffered reads: mincore does not see the cache")
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 300000)
	if _, err := r.ReadAt(buf, 777); err != nil {
		t.Fatal(err)
	}
	if n := cachedPages(t, f, size); n != 0 {
		t.Errorf("%d pages of the image in the page cache after direct reads, want 0", n)
	}
}

// directIO reports whether files in dir open with O_DIRECT.
func directIO(dir string) bool {
	f, err := os.CreateTemp(dir, "odirect")
	if err != nil {
		return false
	}
	defer os.Remove(f.Name())
	f.Close()
	g, err := os.OpenFile(f.Name(), os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return false
	}
	g.Close()
	return true
}

// cachedPages counts the pages of f's first size bytes in the page cache.
func cachedPages(t *testing.T, f *os.File, size int64) int {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (size+4095)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
