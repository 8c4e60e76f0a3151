package diskimage

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Errors returned by the qcow2 functions. They are wrapped with detail;
// test for them with errors.Is.
var (
	// ErrNotQcow2 means the data does not start with the qcow2 magic.
	ErrNotQcow2 = errors.New("not a qcow2 image")
	// ErrCorrupt means a qcow2 structure violates the format
	// (docs/interop/qcow2.txt) or QEMU's own limits, so QEMU would refuse
	// the image or the read too.
	ErrCorrupt = errors.New("corrupt qcow2 image")
	// ErrUnsupported means a valid qcow2 feature this package does not
	// read: external data files, zstd-compressed clusters, version 1,
	// unknown incompatible feature bits.
	ErrUnsupported = errors.New("unsupported qcow2 feature")
	// ErrEncrypted means the guest data is encrypted (AES or LUKS
	// crypt_method), so it cannot be read without the key.
	ErrEncrypted = errors.New("encrypted qcow2 image")
)

// qcow2 layout constants from QEMU docs/interop/qcow2.txt and the
// implementation limits QEMU enforces (block/qcow2.h), which any image QEMU
// can open stays within.
const (
	qcowMagic          = "QFI\xfb"
	qcowMinClusterBits = 9  // 512-byte clusters
	qcowMaxClusterBits = 21 // QEMU's 2 MiB implementation limit
	qcowExtL2MinBits   = 14 // extended L2 entries need >= 16 KiB clusters
	qcowMaxL1Bytes     = 32 << 20
	qcowMaxRefTable    = 8 << 20
	qcowMaxBackingName = 1023
	qcowMaxSnapshots   = 65536
	qcowMaxSnapExtra   = 1024
	qcowMaxSnapTable   = 64 << 20 // QCOW_MAX_SNAPSHOTS_SIZE
	qcowMaxBitmaps     = 65535
	// qcowMaxHeaderRead caps how much of the first cluster is scanned for
	// header extensions. QEMU writes them right after the header; 64 KiB
	// holds over a thousand feature-table entries.
	qcowMaxHeaderRead = 64 << 10
	// qcowMaxOffset bounds every offset taken from the header so that
	// offset + table size cannot overflow an int64.
	qcowMaxOffset = 1 << 62

	// L1/L2/refcount-table entries keep the host offset in bits 9-55.
	qcowOffsetMask = 0x00fffffffffffe00
	qcowCompressed = 1 << 62

	incompatDirty       = 1 << 0
	incompatCorrupt     = 1 << 1
	incompatDataFile    = 1 << 2
	incompatCompression = 1 << 3
	incompatExtL2       = 1 << 4
	incompatKnown       = 1<<5 - 1

	extEnd           = 0x00000000
	extBackingFormat = 0xe2792aca
	extFeatureTable  = 0x6803f857
	extBitmaps       = 0x23852875
	extCrypto        = 0x0537be77
	extDataFile      = 0x44415441
)

// qcowHeader holds the fields of a qcow2 header (docs/interop/qcow2.txt,
// "Header" and "Header extensions") after range checks.
type qcowHeader struct {
	version       uint32
	backingOff    uint64
	backingSize   uint32
	clusterBits   uint32
	size          uint64
	cryptMethod   uint32
	l1Size        uint32
	l1Off         uint64
	refTableOff   uint64
	refTableClus  uint32
	nbSnapshots   uint32
	snapshotsOff  uint64
	incompat      uint64
	compat        uint64
	autoclear     uint64
	refcountOrder uint32
	headerLen     uint32
	compression   uint8

	backingFile   string
	backingFormat string
	dataFile      string

	hasBitmaps                bool
	nbBitmaps                 uint32
	bitmapDirSize, bitmapDirO uint64

	hasCrypto            bool
	cryptoOff, cryptoLen uint64
}

func (h *qcowHeader) clusterSize() int64 { return 1 << h.clusterBits }

// parseQcow2Header reads and checks the header and its extensions. It reads
// at most qcowMaxHeaderRead bytes plus the backing file name.
func parseQcow2Header(r io.ReaderAt, size int64) (*qcowHeader, error) {
	buf := make([]byte, 112)
	if err := readZero(r, buf, 0, size); err != nil {
		return nil, fmt.Errorf("read qcow2 header: %w", err)
	}
	if string(buf[0:4]) != qcowMagic {
		return nil, ErrNotQcow2
	}
	if size < 72 {
		return nil, fmt.Errorf("%w: file of %d bytes is shorter than the header", ErrCorrupt, size)
	}
	be := binary.BigEndian
	h := &qcowHeader{
		version:      be.Uint32(buf[4:]),
		backingOff:   be.Uint64(buf[8:]),
		backingSize:  be.Uint32(buf[16:]),
		clusterBits:  be.Uint32(buf[20:]),
		size:         be.Uint64(buf[24:]),
		cryptMethod:  be.Uint32(buf[32:]),
		l1Size:       be.Uint32(buf[36:]),
		l1Off:        be.Uint64(buf[40:]),
		refTableOff:  be.Uint64(buf[48:]),
		refTableClus: be.Uint32(buf[56:]),
		nbSnapshots:  be.Uint32(buf[60:]),
		snapshotsOff: be.Uint64(buf[64:]),
	}
	switch h.version {
	case 2:
		h.headerLen = 72
		h.refcountOrder = 4
	case 3:
		if size < 104 {
			return nil, fmt.Errorf("%w: file of %d bytes is shorter than the header", ErrCorrupt, size)
		}
		h.incompat = be.Uint64(buf[72:])
		h.compat = be.Uint64(buf[80:])
		h.autoclear = be.Uint64(buf[88:])
		h.refcountOrder = be.Uint32(buf[96:])
		h.headerLen = be.Uint32(buf[100:])
		if h.headerLen > 104 {
			h.compression = buf[104]
		}
	default:
		return nil, fmt.Errorf("%w: qcow version %d", ErrUnsupported, h.version)
	}
	if size < int64(h.headerLen) {
		return nil, fmt.Errorf("%w: file of %d bytes is shorter than the header", ErrCorrupt, size)
	}
	if h.clusterBits < qcowMinClusterBits || h.clusterBits > qcowMaxClusterBits {
		return nil, fmt.Errorf("%w: cluster_bits %d outside %d..%d", ErrCorrupt, h.clusterBits, qcowMinClusterBits, qcowMaxClusterBits)
	}
	cs := h.clusterSize()
	if h.version == 3 && (h.headerLen < 104 || h.headerLen%8 != 0 || int64(h.headerLen) > cs) {
		return nil, fmt.Errorf("%w: header_length %d", ErrCorrupt, h.headerLen)
	}
	if h.size > qcowMaxOffset {
		return nil, fmt.Errorf("%w: virtual size %d too large", ErrCorrupt, h.size)
	}
	if h.refcountOrder > 6 {
		return nil, fmt.Errorf("%w: refcount_order %d", ErrCorrupt, h.refcountOrder)
	}
	if h.cryptMethod > 2 {
		return nil, fmt.Errorf("%w: crypt_method %d", ErrUnsupported, h.cryptMethod)
	}
	if h.incompat&incompatCompression != 0 && h.compression == 0 || h.incompat&incompatCompression == 0 && h.compression != 0 {
		return nil, fmt.Errorf("%w: compression type %d does not match feature bit", ErrCorrupt, h.compression)
	}
	for _, t := range []struct {
		name string
		off  uint64
	}{{"l1_table_offset", h.l1Off}, {"refcount_table_offset", h.refTableOff}, {"snapshots_offset", h.snapshotsOff}} {
		if t.off%uint64(cs) != 0 || t.off > qcowMaxOffset {
			return nil, fmt.Errorf("%w: %s %#x not cluster-aligned", ErrCorrupt, t.name, t.off)
		}
	}

	// Header extensions run from the end of the header to the backing
	// file name, or to the end of the first cluster.
	end := cs
	if h.backingOff != 0 && h.backingOff < uint64(end) {
		end = int64(h.backingOff)
	}
	end = min(end, qcowMaxHeaderRead)
	if end > int64(h.headerLen) {
		ext := make([]byte, end)
		if err := readZero(r, ext, 0, size); err != nil {
			return nil, fmt.Errorf("read qcow2 header extensions: %w", err)
		}
		if err := h.parseExtensions(ext); err != nil {
			return nil, err
		}
	}

	if h.backingOff != 0 {
		if h.backingSize > qcowMaxBackingName || h.backingOff > uint64(cs) {
			return nil, fmt.Errorf("%w: backing file name at %d, %d bytes", ErrCorrupt, h.backingOff, h.backingSize)
		}
		name := make([]byte, h.backingSize)
		if err := readZero(r, name, int64(h.backingOff), size); err != nil {
			return nil, fmt.Errorf("read qcow2 backing file name: %w", err)
		}
		h.backingFile = sanitize(name, qcowMaxBackingName)
	}
	return h, nil
}

func (h *qcowHeader) parseExtensions(b []byte) error {
	be := binary.BigEndian
	seen := map[uint32]bool{}
	for off := int(h.headerLen); off+8 <= len(b); {
		typ, n := be.Uint32(b[off:]), be.Uint32(b[off+4:])
		if typ == extEnd {
			return nil
		}
		off += 8
		if uint64(n) > uint64(len(b)-off) {
			return fmt.Errorf("%w: header extension %#x of %d bytes overruns the header area", ErrCorrupt, typ, n)
		}
		data := b[off : off+int(n)]
		if typ != extFeatureTable && seen[typ] {
			return fmt.Errorf("%w: duplicate header extension %#x", ErrCorrupt, typ)
		}
		seen[typ] = true
		switch typ {
		case extBackingFormat:
			h.backingFormat = sanitize(data, maxLabelLen)
		case extDataFile:
			h.dataFile = sanitize(data, qcowMaxBackingName)
		case extBitmaps:
			if len(data) < 24 {
				return fmt.Errorf("%w: bitmaps extension of %d bytes", ErrCorrupt, len(data))
			}
			h.hasBitmaps = true
			h.nbBitmaps = be.Uint32(data[0:])
			h.bitmapDirSize = be.Uint64(data[8:])
			h.bitmapDirO = be.Uint64(data[16:])
		case extCrypto:
			if len(data) < 16 {
				return fmt.Errorf("%w: encryption header extension of %d bytes", ErrCorrupt, len(data))
			}
			h.hasCrypto = true
			h.cryptoOff = be.Uint64(data[0:])
			h.cryptoLen = be.Uint64(data[8:])
		}
		off += int(n+7) &^ 7
	}
	return nil
}

// Qcow2Reader reads the guest-visible contents of a qcow2 image (version 2
// or 3) by following the L1 and L2 tables (docs/interop/qcow2.txt, "Cluster
// mapping"). It never opens a backing file: clusters not allocated in this
// image read as zeros, and HitUnallocated says whether that happened.
// Zero clusters and zero subclusters read as zeros; compressed clusters
// are inflated (zlib compression type only); extended L2 entries are
// supported. Encrypted images and images with an external data file are
// rejected by NewQcow2Reader.
//
// Each ReadAt costs two small table reads per cluster touched; there is no
// table cache, which keeps memory use fixed regardless of the image. A
// Qcow2Reader is not safe for concurrent use.
type Qcow2Reader struct {
	r           io.ReaderAt
	fileSize    int64
	h           *qcowHeader
	cs          int64
	entrySize   int64 // 8, or 16 with extended L2 entries
	l2Entries   int64
	zeroFlag    bool // bit 0 of the standard descriptor means "reads as zeros"
	unallocated bool

	// The last inflated compressed cluster, keyed by its descriptor:
	// probing reads a cluster in several small pieces.
	zDesc uint64
	zBuf  []byte
}

// NewQcow2Reader checks the header of the qcow2 image in r (size bytes
// long) and returns a reader for its guest-visible contents.
func NewQcow2Reader(r io.ReaderAt, size int64) (*Qcow2Reader, error) {
	h, err := parseQcow2Header(r, size)
	if err != nil {
		return nil, err
	}
	return newQcow2Reader(r, size, h)
}

// l2EntrySize is the size of an L2 table entry: 8 bytes, or 16 with
// extended L2 entries.
func (h *qcowHeader) l2EntrySize() int64 {
	if h.incompat&incompatExtL2 != 0 {
		return 16
	}
	return 8
}

// validate checks what parseQcow2Header leaves for a reader to check: the
// incompatible features and whether the L1 table can map the virtual size.
// A header that fails it is rejected, and nothing read from it (the virtual
// size above all) describes the image.
func (h *qcowHeader) validate() error {
	switch {
	case h.incompat&^incompatKnown != 0:
		return fmt.Errorf("%w: unknown incompatible features %#x", ErrUnsupported, h.incompat&^incompatKnown)
	case h.incompat&incompatExtL2 != 0 && h.clusterBits < qcowExtL2MinBits:
		return fmt.Errorf("%w: extended L2 entries with %d-byte clusters", ErrCorrupt, h.clusterSize())
	case uint64(h.l1Size)*8 > qcowMaxL1Bytes:
		return fmt.Errorf("%w: L1 table of %d entries exceeds %d bytes", ErrCorrupt, h.l1Size, qcowMaxL1Bytes)
	}
	cs := h.clusterSize()
	perL2 := uint64(cs * (cs / h.l2EntrySize()))
	if need := (h.size + perL2 - 1) / perL2; uint64(h.l1Size) < need {
		return fmt.Errorf("%w: L1 table of %d entries cannot map %d bytes", ErrCorrupt, h.l1Size, h.size)
	}
	return nil
}

// newQcow2Reader returns a reader for an image whose header passed
// parseQcow2Header. The header is validated first, so that an encrypted image
// or one with an external data file (valid images whose guest data this
// package cannot read) is told apart from a rejected one by the error.
func newQcow2Reader(r io.ReaderAt, size int64, h *qcowHeader) (*Qcow2Reader, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	switch {
	case h.cryptMethod != 0:
		return nil, fmt.Errorf("%w: crypt_method %d", ErrEncrypted, h.cryptMethod)
	case h.incompat&incompatDataFile != 0:
		return nil, fmt.Errorf("%w: external data file %q", ErrUnsupported, h.dataFile)
	}
	q := &Qcow2Reader{r: r, fileSize: size, h: h, cs: h.clusterSize(), entrySize: h.l2EntrySize()}
	q.zeroFlag = h.version >= 3 && q.entrySize == 8
	q.l2Entries = q.cs / q.entrySize
	return q, nil
}

// Size returns the guest-visible size of the image in bytes.
func (q *Qcow2Reader) Size() int64 { return int64(q.h.size) }

// ClusterSize returns the image's cluster size in bytes.
func (q *Qcow2Reader) ClusterSize() int64 { return q.cs }

// HitUnallocated reports whether any read so far covered clusters that are
// not allocated in this image. With a backing file those bytes come from the
// backing chain, which this reader does not open.
func (q *Qcow2Reader) HitUnallocated() bool { return q.unallocated }

// ReadAt implements io.ReaderAt over the guest-visible contents. Reads past
// the virtual size return io.EOF.
func (q *Qcow2Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("qcow2 read at negative offset %d", off)
	}
	size := int64(q.h.size)
	n := 0
	for n < len(p) {
		if off >= size {
			return n, io.EOF
		}
		in := off % q.cs
		chunk := min(int64(len(p)-n), q.cs-in, size-off)
		if err := q.readCluster(p[n:n+int(chunk)], off/q.cs, in); err != nil {
			return n, err
		}
		n += int(chunk)
		off += chunk
	}
	return n, nil
}

// l2Entry returns the L2 entry (and, with extended L2 entries, the
// subcluster bitmap) for guest cluster gc. A missing L1 or L2 table yields a
// zero entry, which is an unallocated cluster.
func (q *Qcow2Reader) l2Entry(gc int64) (entry, bitmap uint64, err error) {
	l1i := gc / q.l2Entries
	if l1i >= int64(q.h.l1Size) {
		return 0, 0, nil
	}
	var b [16]byte
	if err := readZero(q.r, b[:8], int64(q.h.l1Off)+l1i*8, q.fileSize); err != nil {
		return 0, 0, fmt.Errorf("read qcow2 L1 entry %d: %w", l1i, err)
	}
	l2 := int64(binary.BigEndian.Uint64(b[:8]) & qcowOffsetMask)
	if l2 == 0 {
		return 0, 0, nil
	}
	if l2%q.cs != 0 {
		return 0, 0, fmt.Errorf("%w: L2 table offset %#x not cluster-aligned", ErrCorrupt, l2)
	}
	at := l2 + (gc%q.l2Entries)*q.entrySize
	if err := readZero(q.r, b[:q.entrySize], at, q.fileSize); err != nil {
		return 0, 0, fmt.Errorf("read qcow2 L2 entry at %#x: %w", at, err)
	}
	entry = binary.BigEndian.Uint64(b[:8])
	if q.entrySize == 16 {
		bitmap = binary.BigEndian.Uint64(b[8:])
	}
	return entry, bitmap, nil
}

// readCluster fills p with guest bytes of guest cluster gc starting at
// offset in within the cluster; in+len(p) <= cluster size.
func (q *Qcow2Reader) readCluster(p []byte, gc, in int64) error {
	entry, bitmap, err := q.l2Entry(gc)
	if err != nil {
		return err
	}
	if entry&qcowCompressed != 0 {
		data, err := q.inflate(entry)
		if err != nil {
			return err
		}
		copy(p, data[in:])
		return nil
	}
	host := int64(entry & qcowOffsetMask)
	if host%q.cs != 0 {
		return fmt.Errorf("%w: data cluster offset %#x not cluster-aligned", ErrCorrupt, host)
	}
	if q.entrySize == 8 {
		switch {
		case q.zeroFlag && entry&1 != 0:
			clear(p)
			return nil
		case host == 0:
			q.unallocated = true
			clear(p)
			return nil
		}
		return q.readHost(p, host+in)
	}
	// Extended L2 entries: 32 subclusters per cluster, allocation bits
	// 0-31 and reads-as-zero bits 32-63 of the bitmap
	// (docs/interop/qcow2.txt, "Extended L2 Entries").
	sub := q.cs / 32
	for len(p) > 0 {
		i := in / sub
		n := min(int64(len(p)), sub-in%sub)
		alloc, zero := bitmap>>i&1 != 0, bitmap>>(32+i)&1 != 0
		switch {
		case alloc && zero:
			return fmt.Errorf("%w: subcluster %d of guest cluster %d both allocated and zero", ErrCorrupt, i, gc)
		case alloc && host == 0:
			return fmt.Errorf("%w: subcluster %d of guest cluster %d allocated without a host cluster", ErrCorrupt, i, gc)
		case alloc:
			if err := q.readHost(p[:n], host+in); err != nil {
				return err
			}
		case zero:
			clear(p[:n])
		default:
			q.unallocated = true
			clear(p[:n])
		}
		p = p[n:]
		in += n
	}
	return nil
}

func (q *Qcow2Reader) readHost(p []byte, off int64) error {
	if err := readZero(q.r, p, off, q.fileSize); err != nil {
		return fmt.Errorf("read qcow2 data at %#x: %w", off, err)
	}
	return nil
}

// inflate returns the guest cluster stored compressed under descriptor
// entry. The descriptor (docs/interop/qcow2.txt, "Compressed Clusters
// Descriptor") keeps the host byte offset in bits 0..x-1 and the number of
// additional 512-byte sectors in bits x..61, x = 62 - (cluster_bits - 8).
// With compression type 0 the data is a raw deflate stream that must
// produce a full cluster.
func (q *Qcow2Reader) inflate(entry uint64) ([]byte, error) {
	if q.zBuf != nil && q.zDesc == entry {
		return q.zBuf, nil
	}
	if q.h.compression != 0 {
		return nil, fmt.Errorf("%w: compression type %d", ErrUnsupported, q.h.compression)
	}
	x := 62 - (q.h.clusterBits - 8)
	off := entry & (1<<x - 1)
	sectors := (entry>>x)&(1<<(q.h.clusterBits-8)-1) + 1
	// At most 2^(cluster_bits-8) sectors of 512 bytes: twice the cluster
	// size, 4 MiB for the largest clusters.
	n := int64(sectors*512 - off%512)
	if off > qcowMaxOffset {
		return nil, fmt.Errorf("%w: compressed cluster at %#x", ErrCorrupt, off)
	}
	src := make([]byte, n)
	if err := readZero(q.r, src, int64(off), q.fileSize); err != nil {
		return nil, fmt.Errorf("read qcow2 compressed cluster at %#x: %w", off, err)
	}
	out := q.zBuf
	if out == nil {
		out = make([]byte, q.cs)
	}
	q.zBuf = nil
	zr := flate.NewReader(bytes.NewReader(src))
	if _, err := io.ReadFull(zr, out); err != nil {
		return nil, fmt.Errorf("%w: compressed cluster at %#x: inflate: %v", ErrCorrupt, off, err)
	}
	q.zBuf, q.zDesc = out, entry
	return out, nil
}
