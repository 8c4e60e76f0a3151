package diskimage

import (
	"errors"
	"fmt"
	"io"
)

// ErrReadBudget is returned when probing an image would need more reads or
// more bytes than the fixed budget allows. Probe reports it in Info.Reason
// rather than as an error: an image that needs that much reading to be
// identified is not one this package can identify cheaply.
var ErrReadBudget = errors.New("read budget exhausted")

// Probe's read budget. The largest legitimate reads are GPT entry arrays
// (primary and backup, capped at maxGPTArrayBytes each) and, for qcow2, compressed
// clusters (at most 2 * 2 MiB of input each); everything else is a few KiB
// per partition. The call cap bounds work on images built from tiny reads,
// such as 512-byte-cluster qcow2 files whose every cluster is mapped
// somewhere else.
const (
	probeMaxBytes = 8 << 20
	probeMaxCalls = 1 << 15
)

// hostError marks a failure of the underlying file (EIO and the like), as
// opposed to a problem with the image's contents. Probe returns the former as
// an error and turns the latter into Info.Reason.
type hostError struct{ err error }

func (e *hostError) Error() string { return e.err.Error() }
func (e *hostError) Unwrap() error { return e.err }

// budgetReader counts the reads and bytes going to the underlying file and
// refuses further reads once either limit is reached.
type budgetReader struct {
	r                  io.ReaderAt
	calls, bytes       int64
	maxCalls, maxBytes int64
}

func (b *budgetReader) ReadAt(p []byte, off int64) (int, error) {
	b.calls++
	b.bytes += int64(len(p))
	if b.calls > b.maxCalls || b.bytes > b.maxBytes {
		return 0, ErrReadBudget
	}
	n, err := b.r.ReadAt(p, off)
	if err != nil && err != io.EOF {
		err = &hostError{err}
	}
	return n, err
}

// readZero fills p from r at off. Bytes at or beyond limit, and bytes the
// reader cannot supply because the file ends, read as zeros: a truncated
// image then behaves like one whose tail was never written, which is how QEMU
// treats reads past the end of a raw file too.
func readZero(r io.ReaderAt, p []byte, off, limit int64) error {
	if off < 0 {
		return fmt.Errorf("read at negative offset %d", off)
	}
	want := len(p)
	if off >= limit {
		want = 0
	} else if int64(want) > limit-off {
		want = int(limit - off)
	}
	n := 0
	if want > 0 {
		var err error
		n, err = r.ReadAt(p[:want], off)
		if err != nil && err != io.EOF {
			return err
		}
		if n > want {
			n = want
		}
	}
	clear(p[n:])
	return nil
}

// section is a window [off, off+size) of a larger reader, the way a partition
// is a window of a disk. Reads past its end read as zeros.
type section struct {
	r         io.ReaderAt
	off, size int64
}

func (s section) read(p []byte, at int64) error {
	if at < 0 || at >= s.size {
		clear(p)
		return nil
	}
	limit := s.size - at
	if int64(len(p)) > limit {
		clear(p[limit:])
		p = p[:limit]
	}
	return readZero(s.r, p, s.off+at, s.off+s.size)
}
