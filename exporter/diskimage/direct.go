package diskimage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directAlign is the offset, length and memory alignment of the exporter's
// O_DIRECT reads: a page, a multiple of every logical block size below it.
const directAlign = 4096

// DirectReader reads an image file with O_DIRECT, past the host page
// cache. The exporter reads an image's header, tables and guest
// superblocks again and again; on a disk the VMM opened with O_DIRECT
// (cache=none, directsync) pages the exporter left in the page cache are
// a cost the VM pays: each direct write over them must drop them first,
// and where the kernel cannot (the exporter reading them at that moment)
// the file system turns the VM's direct write into a buffered one. Reads
// the file system refuses with O_DIRECT (EINVAL) go through the buffered
// descriptor instead.
type DirectReader struct {
	direct   *os.File
	buffered *os.File
}

// OpenDirect opens the file f has open again, with O_DIRECT (through
// /proc/self/fd, so it is that file whatever its path names now). It
// fails where the file system has no O_DIRECT (tmpfs before Linux 6.6).
func OpenDirect(f *os.File) (*DirectReader, error) {
	d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s with O_DIRECT: %w", f.Name(), err)
	}
	return &DirectReader{direct: d, buffered: f}, nil
}

// Close closes the O_DIRECT descriptor (not f).
func (r *DirectReader) Close() error { return r.direct.Close() }

// ReadAt reads the aligned blocks around [off, off+len(p)) and copies
// what p asks for.
func (r *DirectReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s at %d: negative offset", r.direct.Name(), off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	start := off &^ (directAlign - 1)
	end := (off + int64(len(p)) + directAlign - 1) &^ (directAlign - 1)
	buf := alignedBytes(int(end - start))
	got := 0
	for got < len(buf) {
		n, err := unix.Pread(int(r.direct.Fd()), buf[got:], start+int64(got))
		if errors.Is(err, unix.EINVAL) {
			return r.buffered.ReadAt(p, off)
		}
		if err != nil {
			return 0, &os.PathError{Op: "read", Path: r.direct.Name(), Err: err}
		}
		got += n
		// End of file, or a last block read in part.
		if n == 0 || n%directAlign != 0 {
			break
		}
	}
	skip := int(off - start)
	if got <= skip {
		return 0, io.EOF
	}
	n := copy(p, buf[skip:got])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// alignedBytes is n bytes starting on a directAlign boundary.
func alignedBytes(n int) []byte {
	b := make([]byte, n+directAlign)
	pad := int(-uintptr(unsafe.Pointer(&b[0])) & (directAlign - 1))
	return b[pad : pad+n : pad+n]
}
