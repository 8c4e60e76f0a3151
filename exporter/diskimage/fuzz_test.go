package diskimage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"reflect"
	"regexp"
	"runtime/metrics"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// Fuzz targets, one per parser that takes guest-controlled bytes:
//
//	FuzzProbe           the whole pipeline: format detection, qcow2, partition tables, file systems
//	FuzzQcow2Header     the qcow2 header, its extensions and the backing file name
//	FuzzQcow2Read       the L1/L2 walk, compressed clusters and subclusters behind Qcow2Reader.ReadAt
//	FuzzQcow2Metadata   the L1/L2/refcount/snapshot/bitmap walk of Qcow2Metadata
//	FuzzPartitionTable  MBR, the EBR chain and GPT as found on a raw disk
//	FuzzGPT             GPT header and entry array with their CRCs made to match
//	FuzzFS              ext2/3/4, XFS and Btrfs superblocks, LUKS, LVM2 and swap signatures
//	FuzzSanitize        the string extraction every label, name and UUID goes through
//
// Each asserts invariants beyond "does not panic": reads bounded by the
// budget the parser documents, strings valid, printable and length-bounded,
// names from fixed sets. The seed corpora under testdata/fuzz are generated
// by TestFuzzSeeds from the crafted cases in crafted_test.go, whose exact
// outcomes TestCrafted* assert.

// Most targets take an image as (size, layout): layout is a sequence of
// records "uvarint gap, uvarint length, length bytes", each chunk placed gap
// bytes after the end of the previous one, and everything else reads as
// zeros. Large sparse disks (a GPT backup header at the end, a Btrfs
// superblock at 64 KiB, qcow2 tables far apart) then fit in small seed files.
// Malformed records are decoded leniently, so every input is an image.

const (
	fuzzMaxChunks = 512
	fuzzMaxSize   = 1 << 50
)

func decodeLayout(size int64, layout []byte) *sparseImage {
	img := &sparseImage{}
	pos := int64(0)
	for len(img.chunks) < fuzzMaxChunks && len(layout) > 0 {
		gap, n := binary.Uvarint(layout)
		if n <= 0 {
			break
		}
		layout = layout[n:]
		length, n := binary.Uvarint(layout)
		if n <= 0 {
			break
		}
		layout = layout[n:]
		length = min(length, uint64(len(layout)))
		pos += int64(min(gap, fuzzMaxSize))
		if pos > fuzzMaxSize {
			break
		}
		img.chunks = append(img.chunks, sparseChunk{pos, layout[:length]})
		pos += int64(length)
		layout = layout[length:]
	}
	img.size = clampSize(size, pos)
	return img
}

// clampSize makes a fuzzed size usable: its absolute value, at most
// fuzzMaxSize, and def when that leaves nothing.
func clampSize(size, def int64) int64 {
	if size < 0 {
		size = -size // MinInt64 stays negative
	}
	if size <= 0 {
		return def
	}
	return min(size, fuzzMaxSize)
}

// encodeLayout is the inverse of decodeLayout for a sparse image: runs of
// 32 or more zero bytes become gaps.
func encodeLayout(img *sparseImage) []byte {
	type ext struct{ lo, hi int64 }
	var exts []ext
	for _, c := range img.chunks {
		lo, hi := c.off, min(c.off+int64(len(c.data)), img.size)
		if lo < hi {
			exts = append(exts, ext{lo, hi})
		}
	}
	sort.Slice(exts, func(i, j int) bool { return exts[i].lo < exts[j].lo })
	var merged []ext
	for _, e := range exts {
		if n := len(merged); n > 0 && e.lo <= merged[n-1].hi {
			merged[n-1].hi = max(merged[n-1].hi, e.hi)
			continue
		}
		merged = append(merged, e)
	}
	var out []byte
	pos := int64(0)
	emit := func(off int64, data []byte) {
		out = binary.AppendUvarint(out, uint64(off-pos))
		out = binary.AppendUvarint(out, uint64(len(data)))
		out = append(out, data...)
		pos = off + int64(len(data))
	}
	for _, e := range merged {
		b := make([]byte, e.hi-e.lo)
		img.ReadAt(b, e.lo)
		// Split at long zero runs.
		start, zeros := -1, 0
		for i := 0; i <= len(b); i++ {
			if i < len(b) && b[i] != 0 {
				if start < 0 {
					start = i
				}
				zeros = 0
				continue
			}
			zeros++
			if start >= 0 && (zeros >= 32 || i == len(b)) {
				end := i - zeros + 1
				emit(e.lo+int64(start), b[start:end])
				start = -1
			}
		}
	}
	return out
}

// countingReader checks read budgets from the outside.
type countingReader struct {
	r            io.ReaderAt
	calls, bytes int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.calls++
	c.bytes += int64(len(p))
	return c.r.ReadAt(p, off)
}

// probeMaxAlloc bounds what one Probe may allocate. Every buffer Probe
// allocates is one it reads into (at most probeMaxBytes in total), plus
// the inflated qcow2 cluster (at most 2 MiB, reused), plus per-partition
// bookkeeping; 3x the read budget leaves room for the latter and for
// fmt and the runtime.
const probeMaxAlloc = 3 * probeMaxBytes

func FuzzProbe(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, layout []byte) {
		img := decodeLayout(size, layout)
		var infos []*Info
		for _, format := range []string{"", FormatRaw} {
			c := &countingReader{r: img}
			alloc := allocated()
			info, err := ProbeAs(c, img.size, format)
			alloc = allocated() - alloc
			if err != nil {
				// The image never fails to read: only read errors
				// are errors.
				t.Fatalf("ProbeAs(%q): %v", format, err)
			}
			checkInfo(t, info, img.size)
			// The budget reader sits above the counting reader: what
			// passed it is within the budget exactly.
			if c.calls > probeMaxCalls || c.bytes > probeMaxBytes {
				t.Fatalf("ProbeAs(%q) read %d bytes in %d calls", format, c.bytes, c.calls)
			}
			if alloc > probeMaxAlloc {
				t.Fatalf("ProbeAs(%q) allocated %d bytes", format, alloc)
			}
			infos = append(infos, info)
		}
		// Detecting raw must give what the caller saying raw gives.
		if infos[0].Format == FormatRaw && !sameInfo(infos[0], infos[1]) {
			t.Fatalf("detected raw %+v differs from configured raw %+v", infos[0], infos[1])
		}
		// Probing is a function of the bytes.
		again, err := ProbeAs(img, img.size, "")
		if err != nil || !sameInfo(again, infos[0]) {
			t.Fatalf("second probe differs: %+v, %v", again, err)
		}
	})
}

// allocated returns the bytes this process allocated on the heap so far.
// Fuzz workers run one input at a time, so the difference around a call is
// that call's. runtime/metrics reads it without stopping the world (unlike
// runtime.ReadMemStats, which would cost three times a probe); small
// allocations are counted when their span is refilled, so the figure may
// lag by a few KiB, which probeMaxAlloc leaves room for.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func sameInfo(a, b *Info) bool {
	return a.Format == b.Format && a.VirtualSize == b.VirtualSize && a.PartitionTable == b.PartitionTable &&
		a.SectorSize == b.SectorSize && a.DiskGUID == b.DiskGUID && slices.Equal(a.Partitions, b.Partitions) &&
		a.GuestFS == b.GuestFS && a.GuestFSPartition == b.GuestFSPartition && a.FSLabel == b.FSLabel &&
		a.FSUUID == b.FSUUID && a.Reason == b.Reason && slices.Equal(a.Notes, b.Notes) &&
		a.Qcow2Version == b.Qcow2Version && a.ClusterSize == b.ClusterSize && a.BackingFile == b.BackingFile &&
		a.BackingFormat == b.BackingFormat && a.DataFile == b.DataFile && a.Encrypted == b.Encrypted
}

// Fixed sets and shapes of what Probe reports.
var (
	formats  = []string{FormatRaw, FormatQcow2, FormatUnknown}
	tables   = []string{TableNone, TableMBR, TableGPT, TableUnknown}
	fsNames  = []string{FSExt2, FSExt3, FSExt4, FSXFS, FSBtrfs, FSUnknown}
	uuidRe   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	mbrTypRe = regexp.MustCompile(`^0x[0-9a-f]{2}$`)
	// fsReasonRe matches every Reason probeFS can give.
	fsReasonRe = regexp.MustCompile(`^(` + strings.Join([]string{
		regexp.QuoteMeta(ReasonLVM2), regexp.QuoteMeta(ReasonLUKS), regexp.QuoteMeta(ReasonSwap),
		regexp.QuoteMeta(ReasonNoFS), "ext journal device", "ntfs", "vfat", "nested qcow2 image",
		"ambiguous signatures: (ext[234]|xfs|btrfs|unknown)(, (ext[234]|xfs|btrfs|unknown))+",
	}, "|") + `)$`)
)

// maxReasonLen bounds Info.Reason and Partition.Reason: fixed text, numbers
// and at most one sanitised file name (quoted, so up to twice its length).
const maxReasonLen = 2*qcowMaxBackingName + 256

func checkInfo(t *testing.T, info *Info, size int64) {
	t.Helper()
	oneOf(t, "Format", info.Format, formats...)
	oneOf(t, "PartitionTable", info.PartitionTable, tables...)
	oneOf(t, "GuestFS", info.GuestFS, fsNames...)
	if info.GuestFS == FSUnknown && info.Reason == "" {
		t.Fatalf("GuestFS unknown without a reason: %+v", info)
	}
	if info.GuestFS != FSUnknown && info.Reason != "" {
		t.Fatalf("GuestFS %q with reason %q", info.GuestFS, info.Reason)
	}
	if info.Format == FormatRaw && info.VirtualSize != size {
		t.Fatalf("raw VirtualSize %d, want %d", info.VirtualSize, size)
	}
	if info.Format != FormatQcow2 && (info.Qcow2Version != 0 || info.BackingFile != "" || info.Encrypted) {
		t.Fatalf("qcow2 fields set for format %q: %+v", info.Format, info)
	}
	if info.VirtualSize < 0 || info.VirtualSize > qcowMaxOffset && info.Format == FormatQcow2 {
		t.Fatalf("VirtualSize %d", info.VirtualSize)
	}
	if len(info.Partitions) > maxPartitions+1 || len(info.Notes) > maxNotes {
		t.Fatalf("%d partitions, %d notes", len(info.Partitions), len(info.Notes))
	}
	checkUUID(t, info.FSUUID, info.Reason == ReasonLUKS)
	checkUUID(t, info.DiskGUID, false)
	checkClean(t, info.FSLabel, maxLabelLen)
	checkClean(t, info.BackingFormat, maxLabelLen)
	checkClean(t, info.BackingFile, qcowMaxBackingName)
	checkClean(t, info.DataFile, qcowMaxBackingName)
	checkText(t, info.Reason, maxReasonLen)
	for _, n := range info.Notes {
		checkText(t, n, 256)
	}
	if (info.GuestFSPartition == 0) != (info.GuestFS == FSUnknown || len(info.Partitions) == 0) {
		t.Fatalf("GuestFS %q from partition %d of %d", info.GuestFS, info.GuestFSPartition, len(info.Partitions))
	}
	for _, p := range info.Partitions {
		if p.Start < 0 || p.Size < 0 || p.Start+p.Size > info.VirtualSize {
			t.Fatalf("partition %+v outside a %d-byte disk", p, info.VirtualSize)
		}
		oneOf(t, "Partition.FS", p.FS, fsNames...)
		if p.Reason == "" && p.FS == FSUnknown || p.Reason != "" && p.FS != FSUnknown {
			t.Fatalf("partition FS %q with reason %q", p.FS, p.Reason)
		}
		checkUUID(t, p.FSUUID, p.Reason == ReasonLUKS)
		checkUUID(t, p.PartUUID, false)
		checkClean(t, p.Name, maxLabelLen)
		checkClean(t, p.FSLabel, maxLabelLen)
		checkText(t, p.Reason, maxReasonLen)
		if !uuidRe.MatchString(p.Type) && !mbrTypRe.MatchString(p.Type) {
			t.Fatalf("partition type %q", p.Type)
		}
	}
	if info.GuestFSPartition != 0 {
		// The partition GuestFS names exists and is where it came from.
		i := slices.IndexFunc(info.Partitions, func(p Partition) bool { return p.Index == info.GuestFSPartition })
		if i < 0 {
			t.Fatalf("GuestFSPartition %d not among %+v", info.GuestFSPartition, info.Partitions)
		}
		if p := info.Partitions[i]; p.FS != info.GuestFS || p.FSLabel != info.FSLabel || p.FSUUID != info.FSUUID {
			t.Fatalf("partition %+v is not where GuestFS %q came from", p, info.GuestFS)
		}
	}
}

func oneOf(t *testing.T, what, v string, set ...string) {
	t.Helper()
	if !slices.Contains(set, v) {
		t.Fatalf("%s %q not one of %q", what, v, set)
	}
}

// checkClean asserts what sanitize promises: at most max bytes of printable
// ASCII, without surrounding spaces.
func checkClean(t *testing.T, s string, max int) {
	t.Helper()
	if len(s) > max {
		t.Fatalf("string of %d bytes exceeds %d: %q", len(s), max, s)
	}
	for _, c := range []byte(s) {
		if c < 0x20 || c > 0x7e {
			t.Fatalf("unsanitised byte %#x in %q", c, s)
		}
	}
	if strings.TrimSpace(s) != s {
		t.Fatalf("untrimmed string %q", s)
	}
}

// checkText asserts that a message (Reason, a note) is one line of valid
// UTF-8 of bounded length, so it is safe in a log line.
func checkText(t *testing.T, s string, max int) {
	t.Helper()
	if len(s) > max || !utf8.ValidString(s) || strings.ContainsAny(s, "\n\r\x00") {
		t.Fatalf("message of %d bytes is not one bounded line: %q", len(s), s)
	}
}

// checkUUID asserts a UUID is empty or canonical; LUKS keeps its UUID as a
// string, which is only sanitised.
func checkUUID(t *testing.T, s string, luks bool) {
	t.Helper()
	if luks {
		checkClean(t, s, maxLabelLen)
		return
	}
	if s != "" && !uuidRe.MatchString(s) {
		t.Fatalf("UUID %q not canonical", s)
	}
}

// FuzzQcow2Header feeds a file of size bytes that starts with data (and
// reads as zeros after it) to the qcow2 header parser: fields, header
// extensions and the backing file name.
func FuzzQcow2Header(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, data []byte) {
		img := &sparseImage{size: clampSize(size, int64(len(data))), chunks: []sparseChunk{{0, data}}}
		c := &countingReader{r: img}
		h, err := parseQcow2Header(c, img.size)
		// The fixed header, the extension area and the backing file
		// name: three reads at most, whatever the fields say.
		if c.calls > 3 || c.bytes > 112+qcowMaxHeaderRead+qcowMaxBackingName {
			t.Fatalf("header parse read %d bytes in %d calls", c.bytes, c.calls)
		}
		if err != nil {
			if !errors.Is(err, ErrNotQcow2) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is not one of the package's", err)
			}
			checkText(t, err.Error(), maxReasonLen)
			return
		}
		if h.version != 2 && h.version != 3 || h.clusterBits < qcowMinClusterBits || h.clusterBits > qcowMaxClusterBits ||
			int64(h.headerLen) > h.clusterSize() || h.refcountOrder > 6 || h.cryptMethod > 2 || h.size > qcowMaxOffset {
			t.Fatalf("accepted header %+v", h)
		}
		for _, off := range []uint64{h.l1Off, h.refTableOff, h.snapshotsOff} {
			if off%uint64(h.clusterSize()) != 0 || off > qcowMaxOffset {
				t.Fatalf("accepted table offset %#x", off)
			}
		}
		checkClean(t, h.backingFile, qcowMaxBackingName)
		checkClean(t, h.backingFormat, maxLabelLen)
		checkClean(t, h.dataFile, qcowMaxBackingName)
		if h.backingOff == 0 && h.backingFile != "" {
			t.Fatalf("backing file %q without an offset", h.backingFile)
		}
		q, err := newQcow2Reader(c, img.size, h)
		switch {
		case err != nil:
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrEncrypted) {
				t.Fatalf("reader error %v is not one of the package's", err)
			}
			checkText(t, err.Error(), maxReasonLen)
		case uint64(h.l1Size)*8 > qcowMaxL1Bytes || q.Size() != int64(h.size) || q.l2Entries*q.entrySize != q.cs:
			t.Fatalf("accepted L1 of %d entries for %d bytes, %d L2 entries of %d bytes", h.l1Size, h.size, q.l2Entries, q.entrySize)
		}
	})
}

// FuzzQcow2Read reads n guest bytes at off through Qcow2Reader from a
// qcow2 image given as (size, layout).
func FuzzQcow2Read(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, layout []byte, off int64, n uint32) {
		img := decodeLayout(size, layout)
		q, err := NewQcow2Reader(img, img.size)
		if err != nil {
			return
		}
		n %= 256 << 10
		c := &countingReader{r: img}
		q.r = c
		buf := make([]byte, n)
		got, err := q.ReadAt(buf, off)
		switch {
		case got < 0 || got > len(buf) || got < len(buf) && err == nil:
			t.Fatalf("ReadAt(%d bytes at %d) = %d, %v", n, off, got, err)
		case err == io.EOF && off >= 0 && off < q.Size() && off+int64(got) != q.Size():
			t.Fatalf("io.EOF after %d bytes at %d of a %d-byte disk", got, off, q.Size())
		case err != nil && err != io.EOF && off >= 0 && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported):
			t.Fatalf("ReadAt error %v is not one of the package's", err)
		}
		if err != nil && err != io.EOF {
			checkText(t, err.Error(), maxReasonLen)
		}
		// Per cluster touched: an L1 and an L2 entry, then one data
		// read, one per subcluster, or one compressed cluster of at most
		// twice the cluster size.
		clusters := int64(n)/q.cs + 2
		if c.calls > clusters*34 || c.bytes > clusters*(16+2*q.cs) {
			t.Fatalf("%d bytes at %d read %d bytes in %d calls (cluster size %d)", n, off, c.bytes, c.calls, q.cs)
		}
		if err != nil || n < 2 {
			return
		}
		// The same bytes read again, and read in two pieces split off a
		// cluster boundary, by a fresh reader (no inflate cache).
		fresh, _ := NewQcow2Reader(img, img.size)
		b2 := make([]byte, n)
		mid := int(n) / 3
		if _, err := fresh.ReadAt(b2[:mid], off); err != nil {
			t.Fatalf("first piece: %v", err)
		}
		if _, err := fresh.ReadAt(b2[mid:], off+int64(mid)); err != nil {
			t.Fatalf("second piece: %v", err)
		}
		if !bytes.Equal(buf, b2) {
			t.Fatalf("reading %d bytes at %d in two pieces gives other bytes", n, off)
		}
	})
}

func FuzzQcow2Metadata(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, layout []byte, maxClusters uint16) {
		img := decodeLayout(size, layout)
		c := &countingReader{r: img}
		limit := int(maxClusters%4096) + 1
		l, err := Qcow2Metadata(c, img.size, limit)
		if err != nil {
			if !errors.Is(err, ErrNotQcow2) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is not one of the package's", err)
			}
			checkText(t, err.Error(), maxReasonLen)
		}
		// Reading is bounded by the walk's budget plus the header, and
		// by the clusters counted plus the header area and the snapshot
		// and bitmap directory windows.
		if max := int64(metaMaxBytes + 112 + qcowMaxHeaderRead + qcowMaxBackingName); c.bytes > max {
			t.Fatalf("read %d bytes, budget %d", c.bytes, max)
		}
		if err != nil {
			return
		}
		if max := int64(limit)*l.ClusterSize + 4<<20; c.bytes > max {
			t.Fatalf("read %d bytes for %d clusters of %d bytes", c.bytes, limit, l.ClusterSize)
		}
		if l.Clusters > limit || l.Skipped < 0 {
			t.Fatalf("%d clusters counted (limit %d), %d skipped", l.Clusters, limit, l.Skipped)
		}
		end := (img.size + l.ClusterSize - 1) &^ (l.ClusterSize - 1)
		total := int64(0)
		for i, r := range l.Ranges {
			if r.Start >= r.End || r.Start%l.ClusterSize != 0 || r.End%l.ClusterSize != 0 || r.End > end {
				t.Fatalf("bad range %v (file %d bytes, cluster %d)", r, img.size, l.ClusterSize)
			}
			if i > 0 && r.Start <= l.Ranges[i-1].End {
				t.Fatalf("ranges not sorted and merged: %v", l.Ranges)
			}
			total += (r.End - r.Start) / l.ClusterSize
		}
		// Merging only removes double counts.
		if total > int64(l.Clusters) {
			t.Fatalf("%d clusters in ranges, %d counted", total, l.Clusters)
		}
	})
}

// tableMaxCalls and tableMaxBytes bound what readTable reads: sector 0;
// for each of the two sector sizes the primary header, its array, the
// backup header and its array; and the EBR chain.
const (
	tableMaxCalls = 1 + 2*4 + maxLogical
	tableMaxBytes = 512 + 2*(2*4096+2*maxGPTArrayBytes) + maxLogical*512
)

// FuzzPartitionTable reads the partition table of a raw disk given as
// (size, layout). GPT headers need matching CRCs, which random bytes
// rarely have; FuzzGPT covers what lies behind them.
func FuzzPartitionTable(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, layout []byte) {
		img := decodeLayout(size, layout)
		checkTable(t, img)
	})
}

// FuzzGPT builds a disk around a fuzzed GPT header and entry array and reads
// its partition table. mode selects: bit 0 4 KiB sectors; bit 1 a
// protective MBR; bit 2 the header as the backup in the last LBA instead of
// the primary in LBA 1; bit 3 the signature and my_lba fields made right;
// bit 4 both CRCs made to match.
func FuzzGPT(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, hdr, entries []byte, mode uint8) {
		checkTable(t, gptImage(size, hdr, entries, mode))
	})
}

func gptImage(size int64, hdr, entries []byte, mode uint8) *sparseImage {
	ss := int64(512)
	if mode&1 != 0 {
		ss = 4096
	}
	size = max(clampSize(size, 0)%(1<<44), 3*ss)
	lbas := size / ss
	img := &sparseImage{size: size}
	if mode&2 != 0 {
		img.write(0, mbrSector(mbrPart{typ: 0xEE, start: 1, count: uint32(min(lbas-1, 0xFFFFFFFF))}))
	}
	h := make([]byte, ss)
	copy(h, hdr)
	at := uint64(1)
	if mode&4 != 0 {
		at = uint64(lbas - 1)
	}
	le := binary.LittleEndian
	if mode&8 != 0 {
		copy(h, "EFI PART")
		le.PutUint64(h[24:], at)
	}
	entryLBA := le.Uint64(h[72:])
	if len(entries) > 0 && entryLBA < uint64(lbas) {
		img.write(int64(entryLBA)*ss, entries)
	}
	if mode&16 != 0 {
		n := uint64(le.Uint32(h[80:])) * uint64(le.Uint32(h[84:]))
		if n > 0 && n <= maxGPTArrayBytes && entryLBA < uint64(lbas) {
			arr := make([]byte, n)
			img.ReadAt(arr, int64(entryLBA)*ss)
			le.PutUint32(h[88:], crc32.ChecksumIEEE(arr))
		}
		if hs := le.Uint32(h[12:]); hs >= 92 && int64(hs) <= ss {
			clear(h[16:20])
			le.PutUint32(h[16:], crc32.ChecksumIEEE(h[:hs]))
		}
	}
	img.write(int64(at)*ss, h)
	return img
}

// checkTable reads the partition table of img and checks what it found.
func checkTable(t *testing.T, img *sparseImage) {
	t.Helper()
	c := &countingReader{r: img}
	res, err := readTable(section{c, 0, img.size})
	if err != nil {
		t.Fatalf("readTable: %v", err) // the image never fails to read
	}
	if c.calls > tableMaxCalls || c.bytes > tableMaxBytes {
		t.Fatalf("readTable read %d bytes in %d calls", c.bytes, c.calls)
	}
	oneOf(t, "table", res.kind, tables...)
	if len(res.notes) > maxNotes {
		t.Fatalf("%d notes", len(res.notes))
	}
	for _, n := range res.notes {
		checkText(t, n, 256)
	}
	checkUUID(t, res.diskGUID, false)
	switch res.kind {
	case TableNone, TableUnknown:
		if len(res.parts) != 0 || res.diskGUID != "" {
			t.Fatalf("table %q with partitions %+v, disk GUID %q", res.kind, res.parts, res.diskGUID)
		}
		return
	case TableMBR:
		if len(res.parts) > 4+maxLogical || res.sectorSize != 512 || res.diskGUID != "" {
			t.Fatalf("mbr with %d partitions, sector size %d, disk GUID %q", len(res.parts), res.sectorSize, res.diskGUID)
		}
	case TableGPT:
		if len(res.parts) > maxPartitions || res.sectorSize != 512 && res.sectorSize != 4096 || res.diskGUID == "" {
			t.Fatalf("gpt with %d partitions, sector size %d, disk GUID %q", len(res.parts), res.sectorSize, res.diskGUID)
		}
	}
	prev := 0
	for i, p := range res.parts {
		if p.Index <= prev || p.Start < 0 || p.Size < 0 || p.Start+p.Size > img.size ||
			p.Start%res.sectorSize != 0 || p.Size%res.sectorSize != 0 {
			t.Fatalf("partition %d %+v on a %d-byte disk with %d-byte sectors", i, p, img.size, res.sectorSize)
		}
		prev = p.Index
		checkClean(t, p.Name, maxLabelLen)
		if res.kind == TableGPT {
			checkUUID(t, p.PartUUID, false)
			if !uuidRe.MatchString(p.Type) || p.Index > maxGPTArrayBytes/128 || p.Reason != "" {
				t.Fatalf("gpt partition %+v", p)
			}
			continue
		}
		extended := p.Reason == reasonExtended
		if !mbrTypRe.MatchString(p.Type) || p.Name != "" || p.PartUUID != "" || p.Index > 4+maxLogical ||
			p.Reason != "" && !extended || extended && (p.Index > 4 || p.FS != FSUnknown) {
			t.Fatalf("mbr partition %+v", p)
		}
	}
}

// FuzzFS probes a partition, given as (size, layout), for a file system:
// the ext, XFS, LUKS, LVM2 and swap signatures in its first 64 KiB, the
// Btrfs superblock at 64 KiB. mode bit 0 makes the Btrfs magic and bytenr
// right, bit 1 its crc32c, which random bytes rarely match.
func FuzzFS(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, layout []byte, mode uint8) {
		img := decodeLayout(size, layout)
		fixBtrfs(img, mode)
		c := &countingReader{r: img}
		r, err := probeFS(section{c, 0, img.size})
		if err != nil {
			t.Fatalf("probeFS: %v", err)
		}
		// The 4 KiB head, the Btrfs superblock, three swap signatures.
		if c.calls > 5 || c.bytes > 4096+btrfsSuperLen+3*10 {
			t.Fatalf("probeFS read %d bytes in %d calls", c.bytes, c.calls)
		}
		oneOf(t, "fs", r.fs, fsNames...)
		if r.fs == FSUnknown != (r.reason != "") {
			t.Fatalf("fs %q with reason %q", r.fs, r.reason)
		}
		if r.reason != "" && !fsReasonRe.MatchString(r.reason) {
			t.Fatalf("reason %q not from the fixed set", r.reason)
		}
		checkClean(t, r.label, maxLabelLen)
		checkUUID(t, r.uuid, r.reason == ReasonLUKS)
	})
}

func fixBtrfs(img *sparseImage, mode uint8) {
	if mode&3 == 0 {
		return
	}
	sb := make([]byte, btrfsSuperLen)
	img.ReadAt(sb, btrfsSuperOff)
	if mode&1 != 0 {
		copy(sb[64:], btrfsMagic)
		binary.LittleEndian.PutUint64(sb[48:], btrfsSuperOff)
	}
	if mode&2 != 0 {
		binary.LittleEndian.PutUint32(sb[0:], crc32.Checksum(sb[32:], castagnoli))
	}
	img.write(btrfsSuperOff, sb)
}

// FuzzSanitize checks the functions every string taken from an image goes
// through before it can reach a label or a log line.
func FuzzSanitize(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, max uint16) {
		m := int(max % 2048)
		s := sanitize(b, m)
		checkClean(t, s, m)
		if sanitize([]byte(s), m) != s {
			t.Fatalf("sanitize not idempotent on %q", s)
		}
		if i := bytes.IndexByte(b, 0); i >= 0 && len(s) > i {
			t.Fatalf("sanitize(%q) = %q reads past the NUL", b, s)
		}
		checkClean(t, gptName(b), maxLabelLen)
		checkUUID(t, formatGUID(b), false)
		if len(b) >= 16 {
			checkUUID(t, formatUUID(b[:16]), false)
			if formatGUID(b) == "" {
				t.Fatalf("formatGUID(%x) empty", b[:16])
			}
		}
	})
}

// TestCheckInfoCoversStrings guards checkInfo: every string field of Info
// and Partition comes from the image, so each must be checked there (bounded
// and sanitised, or from a fixed set). A new field fails this test until
// checkInfo checks it and it is listed here.
func TestCheckInfoCoversStrings(t *testing.T) {
	checked := map[string][]string{
		"Info": {"Format", "PartitionTable", "DiskGUID", "GuestFS", "FSLabel", "FSUUID", "Reason",
			"BackingFile", "BackingFormat", "DataFile"},
		"Partition": {"Type", "Name", "PartUUID", "FS", "FSLabel", "FSUUID", "Reason"},
	}
	for _, v := range []any{Info{}, Partition{}} {
		typ := reflect.TypeOf(v)
		var got []string
		for f := range typ.Fields() {
			if f.Type.Kind() == reflect.String {
				got = append(got, f.Name)
			}
		}
		if !slices.Equal(got, checked[typ.Name()]) {
			t.Errorf("%s has string fields %q; checkInfo checks %q", typ.Name(), got, checked[typ.Name()])
		}
	}
}
