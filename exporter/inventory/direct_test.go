package inventory

import (
	"io"
	"os"
	"testing"

	"github.com/fspair/fspair/exporter/diskimage"
)

// TestImageReader: the exporter reads a disk the VMM opened with O_DIRECT
// with O_DIRECT too, and any other through the descriptor it holds.
func TestImageReader(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "disk")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, cache := range []string{"writeback", "writethrough", "unsafe", ""} {
		e := &entry{file: f}
		e.Cache = cache
		r, done := e.imageReader()
		done()
		if r != io.ReaderAt(f) {
			t.Errorf("cache %q: read through %T, want the held file", cache, r)
		}
	}
	d, err := diskimage.OpenDirect(f)
	if err != nil {
		t.Skipf("no O_DIRECT in %s: %v", f.Name(), err)
	}
	d.Close()
	for _, cache := range []string{"none", "directsync", "direct"} {
		e := &entry{file: f}
		e.Cache = cache
		r, done := e.imageReader()
		if _, ok := r.(*diskimage.DirectReader); !ok {
			t.Errorf("cache %q: read through %T, want *diskimage.DirectReader", cache, r)
		}
		done()
	}
}
