package diskimage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// DefaultMaxClusters is the metadata cluster limit Qcow2Metadata uses when
// given maxClusters <= 0. With 64 KiB clusters one L2 table maps 512 MiB, so
// this covers every L2 table of a fully allocated 100 TiB image.
const DefaultMaxClusters = 1 << 18

// Range is the half-open byte range [Start, End) of a file.
type Range struct {
	Start, End int64
}

// Qcow2Layout says where a qcow2 image file keeps its metadata.
type Qcow2Layout struct {
	// ClusterSize is the image's cluster size in bytes.
	ClusterSize int64
	// Ranges are the host-file byte ranges holding qcow2 metadata, sorted
	// and merged, each a whole number of clusters (metadata is allocated
	// in clusters, so any I/O inside such a cluster is metadata I/O): the
	// header cluster and backing file name, the encryption header, the
	// active L1 table and every L2 table it references, the refcount table
	// and every refcount block it references, the snapshot table and each
	// snapshot's L1 table and L2 tables, and the bitmap directory with the
	// bitmap tables and bitmap data clusters.
	Ranges []Range
	// Clusters is the number of metadata clusters counted (a cluster
	// shared by two structures may be counted twice).
	Clusters int
	// Truncated is set when the walk stopped at maxClusters or at its
	// read budget; Ranges then holds what was found before that.
	Truncated bool
	// Skipped counts table entries left out because they pointed past the
	// end of the file or were not cluster-aligned.
	Skipped int
}

// Contains reports whether byte off of the image file holds metadata.
func (l *Qcow2Layout) Contains(off int64) bool {
	return l.Overlaps(off, off+1)
}

// Overlaps reports whether any byte of [start, end) holds metadata.
func (l *Qcow2Layout) Overlaps(start, end int64) bool {
	i, _ := slices.BinarySearchFunc(l.Ranges, start, func(r Range, t int64) int {
		if r.End <= t {
			return -1
		}
		return 1
	})
	return i < len(l.Ranges) && l.Ranges[i].Start < end
}

// Qcow2Metadata maps the metadata of the qcow2 image in r, which is size
// bytes long (docs/interop/qcow2.txt). It reads the header, the L1 tables,
// the refcount table, the snapshot table and the bitmap directory and
// tables; it does not read L2 tables, refcount blocks or guest data. The
// walk stops after maxClusters metadata clusters (DefaultMaxClusters if
// maxClusters <= 0) or after reading 64 MiB or 2^17 times (metaMaxBytes),
// with Truncated set, so the work done and the bytes read are bounded
// whatever the header claims.
//
// QEMU allocates L2 tables and refcount blocks as the guest writes, so the
// map of a running image goes stale; call Qcow2Metadata again (cheap for
// real images: a few table reads) to refresh it. A read that races with
// QEMU moving a table (growing the L1 or refcount table) can see a
// half-updated header and fail or miss that table; the next refresh sees
// the settled state. Encrypted images and
// images with an external data file are mapped too: their metadata is
// plain qcow2.
func Qcow2Metadata(r io.ReaderAt, size int64, maxClusters int) (*Qcow2Layout, error) {
	if maxClusters <= 0 {
		maxClusters = DefaultMaxClusters
	}
	h, err := parseQcow2Header(r, size)
	if err != nil {
		return nil, fmt.Errorf("map qcow2 metadata: %w", err)
	}
	b := &budgetReader{r: r, maxCalls: metaMaxCalls, maxBytes: metaMaxBytes}
	w := &metaWalker{r: b, size: size, cs: h.clusterSize(), max: maxClusters, clusters: map[int64]struct{}{}}
	switch err := w.walk(h); {
	case errors.Is(err, ErrReadBudget):
		w.truncated = true
	case err != nil && err != errFull:
		return nil, fmt.Errorf("map qcow2 metadata: %w", err)
	}
	return w.layout(), nil
}

// Qcow2MetadataFile opens the qcow2 image at path read-only (a regular file
// or a block device) and maps its metadata as Qcow2Metadata does.
func Qcow2MetadataFile(path string, maxClusters int) (*Qcow2Layout, error) {
	f, size, err := openImage(path)
	if err != nil {
		return nil, fmt.Errorf("map qcow2 metadata of %s: %w", path, err)
	}
	defer f.Close()
	l, err := Qcow2Metadata(f, size, maxClusters)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// The read budget of a metadata walk. maxClusters alone does not bound the
// reading: every snapshot may name the same L1 table of QEMU's maximum size
// (32 MiB), which is read again for each, so that a 35 MiB image with 2 MiB
// clusters and 16384 snapshots would make the walk read 512 GiB. Real images
// need far less: the active L1 table (at most 32 MiB, and 1 MiB maps 64 TiB
// with 64 KiB clusters), the refcount table (at most 8 MiB) and one L1 table
// per snapshot.
const (
	metaMaxBytes = 64 << 20
	metaMaxCalls = 1 << 17
)

// errFull stops the walk when maxClusters is reached.
var errFull = errors.New("metadata cluster limit reached")

type metaWalker struct {
	r        io.ReaderAt
	size, cs int64
	max      int

	clusters  map[int64]struct{} // single-cluster structures, by offset
	spans     []Range            // contiguous tables
	count     int
	truncated bool
	skipped   int
}

func (w *metaWalker) walk(h *qcowHeader) error {
	// The header cluster, plus the backing file name in case it spills
	// past it (parseQcow2Header checked it starts inside).
	if err := w.span(0, w.cs); err != nil {
		return err
	}
	if h.backingOff != 0 {
		if err := w.span(int64(h.backingOff), int64(h.backingSize)); err != nil {
			return err
		}
	}
	if h.hasCrypto {
		if h.cryptoOff%uint64(w.cs) != 0 || h.cryptoOff > qcowMaxOffset || h.cryptoLen > qcowMaxOffset {
			return fmt.Errorf("%w: encryption header at %#x", ErrCorrupt, h.cryptoOff)
		}
		if err := w.span(int64(h.cryptoOff), int64(h.cryptoLen)); err != nil {
			return err
		}
	}
	// Active L1 table and the L2 tables it points to.
	if err := w.l1(int64(h.l1Off), h.l1Size); err != nil {
		return err
	}
	// Refcount table and refcount blocks. Refcount table entries keep
	// the block offset in bits 9-63.
	if rt := uint64(h.refTableClus) * uint64(w.cs); rt > qcowMaxRefTable {
		return fmt.Errorf("%w: refcount table of %d clusters exceeds %d bytes", ErrCorrupt, h.refTableClus, qcowMaxRefTable)
	}
	rtLen := int64(h.refTableClus) * w.cs
	if err := w.span(int64(h.refTableOff), rtLen); err != nil {
		return err
	}
	if err := w.table(int64(h.refTableOff), rtLen, ^uint64(0x1ff)); err != nil {
		return err
	}
	if err := w.snapshots(h); err != nil {
		return err
	}
	return w.bitmaps(h)
}

// span records the table [off, off+n), rounded out to whole clusters.
func (w *metaWalker) span(off, n int64) error {
	if n <= 0 {
		return nil
	}
	if off >= w.size {
		w.skipped++
		return nil
	}
	start := off &^ (w.cs - 1)
	end := off + min(n, w.size-off) // no overflow: off < size
	end = (end + w.cs - 1) &^ (w.cs - 1)
	k := (end - start) / w.cs
	if int64(w.count)+k > int64(w.max) {
		w.truncated = true
		return errFull
	}
	w.count += int(k)
	w.spans = append(w.spans, Range{start, end})
	return nil
}

// cluster records the single-cluster structure at off.
func (w *metaWalker) cluster(off int64) error {
	if off%w.cs != 0 || off >= w.size {
		w.skipped++
		return nil
	}
	if _, ok := w.clusters[off]; ok {
		return nil
	}
	if w.count >= w.max {
		w.truncated = true
		return errFull
	}
	w.count++
	w.clusters[off] = struct{}{}
	return nil
}

// l1 records an L1 table of n entries at off and the L2 tables it
// references.
func (w *metaWalker) l1(off int64, n uint32) error {
	if uint64(n)*8 > qcowMaxL1Bytes {
		return fmt.Errorf("%w: L1 table of %d entries exceeds %d bytes", ErrCorrupt, n, qcowMaxL1Bytes)
	}
	if err := w.span(off, int64(n)*8); err != nil {
		return err
	}
	return w.table(off, int64(n)*8, qcowOffsetMask)
}

// table reads the n-byte table of big-endian 64-bit entries at off and
// records the cluster each non-zero entry points to (entry & mask). The
// table's own clusters must already be counted by span, which bounds what
// is read here.
func (w *metaWalker) table(off, n int64, mask uint64) error {
	if off >= w.size {
		return nil
	}
	n = min(n, w.size-off)
	buf := make([]byte, min(n, 64<<10))
	for done := int64(0); done < n; {
		chunk := buf[:min(int64(len(buf)), n-done)]
		if err := readZero(w.r, chunk, off+done, w.size); err != nil {
			return fmt.Errorf("read table at %#x: %w", off+done, err)
		}
		for i := 0; i+8 <= len(chunk); i += 8 {
			if e := binary.BigEndian.Uint64(chunk[i:]) & mask; e != 0 {
				if e > qcowMaxOffset {
					w.skipped++
					continue
				}
				if err := w.cluster(int64(e)); err != nil {
					return err
				}
			}
		}
		done += int64(len(chunk))
	}
	return nil
}

// snapshots records the snapshot table (docs/interop/qcow2.txt,
// "Snapshots") and each snapshot's L1 table and L2 tables. Entries are
// 40 fixed bytes, then extra data, ID and name, padded to 8 bytes.
func (w *metaWalker) snapshots(h *qcowHeader) error {
	if h.nbSnapshots == 0 {
		return nil
	}
	if h.nbSnapshots > qcowMaxSnapshots {
		return fmt.Errorf("%w: %d snapshots", ErrCorrupt, h.nbSnapshots)
	}
	be := binary.BigEndian
	off := int64(h.snapshotsOff)
	var l1s []Range // offset, entries
	win := window{r: w.r, size: w.size}
	for i := uint32(0); i < h.nbSnapshots; i++ {
		if off >= w.size {
			return fmt.Errorf("%w: snapshot table runs past the end of the file", ErrCorrupt)
		}
		// The table's length is only known once walked; stop as soon
		// as it could not fit in QEMU's limit or in the clusters left.
		used := off - int64(h.snapshotsOff)
		if used > qcowMaxSnapTable {
			return fmt.Errorf("%w: snapshot table exceeds %d bytes", ErrCorrupt, qcowMaxSnapTable)
		}
		if used/w.cs >= int64(w.max-w.count) {
			w.truncated = true
			return errFull
		}
		fixed, err := win.at(off, 40)
		if err != nil {
			return fmt.Errorf("read snapshot %d: %w", i, err)
		}
		extra := be.Uint32(fixed[36:])
		if extra > qcowMaxSnapExtra {
			return fmt.Errorf("%w: snapshot %d has %d bytes of extra data", ErrCorrupt, i, extra)
		}
		l1s = append(l1s, Range{int64(be.Uint64(fixed[0:])), int64(be.Uint32(fixed[8:]))})
		n := int64(40) + int64(extra) + int64(be.Uint16(fixed[12:])) + int64(be.Uint16(fixed[14:]))
		off += (n + 7) &^ 7
	}
	if err := w.span(int64(h.snapshotsOff), off-int64(h.snapshotsOff)); err != nil {
		return err
	}
	for i, l1 := range l1s {
		if uint64(l1.Start)%uint64(w.cs) != 0 || uint64(l1.Start) > qcowMaxOffset {
			return fmt.Errorf("%w: snapshot %d L1 table at %#x", ErrCorrupt, i, uint64(l1.Start))
		}
		if err := w.l1(l1.Start, uint32(l1.End)); err != nil {
			return err
		}
	}
	return nil
}

// bitmaps records the bitmap directory, each bitmap table and the bitmap
// data clusters (docs/interop/qcow2.txt, "Bitmaps"). Directory entries are
// 24 fixed bytes, then extra data and name, padded to 8 bytes.
func (w *metaWalker) bitmaps(h *qcowHeader) error {
	if !h.hasBitmaps || h.nbBitmaps == 0 {
		return nil
	}
	if h.nbBitmaps > qcowMaxBitmaps || h.bitmapDirSize > uint64(h.nbBitmaps)*(24+qcowMaxSnapExtra+1024+8) ||
		h.bitmapDirO%uint64(w.cs) != 0 || h.bitmapDirO > qcowMaxOffset {
		return fmt.Errorf("%w: bitmap directory of %d entries, %d bytes at %#x", ErrCorrupt, h.nbBitmaps, h.bitmapDirSize, h.bitmapDirO)
	}
	dirOff, dirLen := int64(h.bitmapDirO), int64(h.bitmapDirSize)
	if err := w.span(dirOff, dirLen); err != nil {
		return err
	}
	be := binary.BigEndian
	win := window{r: w.r, size: w.size}
	for i, off := uint32(0), int64(0); i < h.nbBitmaps; i++ {
		if off+24 > dirLen {
			return fmt.Errorf("%w: bitmap directory shorter than %d entries", ErrCorrupt, h.nbBitmaps)
		}
		fixed, err := win.at(dirOff+off, 24)
		if err != nil {
			return fmt.Errorf("read bitmap directory entry %d: %w", i, err)
		}
		tOff, tLen := be.Uint64(fixed[0:]), int64(be.Uint32(fixed[8:]))*8
		if tOff%uint64(w.cs) != 0 || tOff > qcowMaxOffset {
			return fmt.Errorf("%w: bitmap %d table at %#x", ErrCorrupt, i, tOff)
		}
		if err := w.span(int64(tOff), tLen); err != nil {
			return err
		}
		if err := w.table(int64(tOff), tLen, qcowOffsetMask); err != nil {
			return err
		}
		n := int64(24) + int64(be.Uint32(fixed[20:])) + int64(be.Uint16(fixed[18:]))
		off += (n + 7) &^ 7
	}
	return nil
}

// layout sorts and merges what the walk found.
func (w *metaWalker) layout() *Qcow2Layout {
	rs := make([]Range, 0, len(w.spans)+len(w.clusters))
	rs = append(rs, w.spans...)
	for c := range w.clusters {
		rs = append(rs, Range{c, c + w.cs})
	}
	slices.SortFunc(rs, func(a, b Range) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	merged := rs[:0]
	for _, r := range rs {
		if n := len(merged); n > 0 && r.Start <= merged[n-1].End {
			merged[n-1].End = max(merged[n-1].End, r.End)
			continue
		}
		merged = append(merged, r)
	}
	return &Qcow2Layout{ClusterSize: w.cs, Ranges: merged, Clusters: w.count, Truncated: w.truncated, Skipped: w.skipped}
}

// window serves small reads of a table walked front to back from one 64 KiB
// buffer, so a table of many small entries costs few reads of the file.
type window struct {
	r     io.ReaderAt
	size  int64
	off   int64
	buf   []byte
	valid bool
}

func (w *window) at(off int64, n int) ([]byte, error) {
	const winSize = 64 << 10
	if !w.valid || off < w.off || off+int64(n) > w.off+int64(len(w.buf)) {
		if w.buf == nil {
			w.buf = make([]byte, winSize)
		}
		if err := readZero(w.r, w.buf, off, w.size); err != nil {
			return nil, err
		}
		w.off, w.valid = off, true
	}
	return w.buf[off-w.off : off-w.off+int64(n)], nil
}
