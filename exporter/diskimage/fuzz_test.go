package diskimage

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The fuzz targets take an image as (size, layout): layout is a sequence of
// records "uvarint gap, uvarint length, length bytes", each chunk placed gap
// bytes after the end of the previous one, and everything else reads as
// zeros. Large sparse disks (a GPT backup header at the end, a Btrfs
// superblock at 64 KiB, qcow2 tables far apart) then fit in small seed files.
// Malformed records are decoded leniently, so every input is an image.

const (
	fuzzMaxChunks = 64
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
	switch {
	case size < 0:
		size = -size
		fallthrough
	default:
		size = min(size, fuzzMaxSize)
	}
	if size == 0 || size < 0 {
		size = pos
	}
	img.size = size
	return img
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

// countingReader checks Probe's read budget from the outside.
type countingReader struct {
	r            io.ReaderAt
	calls, bytes int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.calls++
	c.bytes += int64(len(p))
	return c.r.ReadAt(p, off)
}

func FuzzProbe(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, layout []byte) {
		img := decodeLayout(size, layout)
		for _, format := range []string{"", FormatRaw} {
			c := &countingReader{r: img}
			info, err := ProbeAs(c, img.size, format)
			if err != nil {
				t.Fatalf("ProbeAs(%q): %v", format, err)
			}
			checkInfo(t, info, img.size)
			// The budget is checked before each read, so one read may
			// overshoot it by its own length (at most one GPT array).
			if c.calls > probeMaxCalls || c.bytes > probeMaxBytes+maxGPTArrayBytes {
				t.Fatalf("ProbeAs(%q) read %d bytes in %d calls", format, c.bytes, c.calls)
			}
		}
		if r, err := NewQcow2Reader(img, img.size); err == nil {
			buf := make([]byte, 4096)
			for _, off := range []int64{0, r.Size() / 2, r.Size() - 1, r.Size()} {
				n, err := r.ReadAt(buf, off)
				if n < 0 || n > len(buf) || n < len(buf) && err == nil {
					t.Fatalf("Qcow2Reader.ReadAt(%d) = %d, %v", off, n, err)
				}
			}
		}
	})
}

func checkInfo(t *testing.T, info *Info, size int64) {
	t.Helper()
	oneOf := func(what, v string, set ...string) {
		if !slices.Contains(set, v) {
			t.Fatalf("%s %q not one of %q", what, v, set)
		}
	}
	oneOf("Format", info.Format, FormatRaw, FormatQcow2, FormatUnknown)
	oneOf("PartitionTable", info.PartitionTable, TableNone, TableMBR, TableGPT, TableUnknown)
	fss := []string{FSExt2, FSExt3, FSExt4, FSXFS, FSBtrfs, FSUnknown}
	oneOf("GuestFS", info.GuestFS, fss...)
	if info.GuestFS == FSUnknown && info.Reason == "" {
		t.Fatalf("GuestFS unknown without a reason: %+v", info)
	}
	if info.GuestFS != FSUnknown && info.Reason != "" {
		t.Fatalf("GuestFS %q with reason %q", info.GuestFS, info.Reason)
	}
	if info.Format == FormatRaw && info.VirtualSize != size {
		t.Fatalf("raw VirtualSize %d, want %d", info.VirtualSize, size)
	}
	if len(info.Partitions) > maxPartitions+1 || len(info.Notes) > maxNotes {
		t.Fatalf("%d partitions, %d notes", len(info.Partitions), len(info.Notes))
	}
	for _, s := range []string{info.FSLabel, info.FSUUID, info.DiskGUID, info.BackingFormat} {
		checkClean(t, s, maxLabelLen)
	}
	checkClean(t, info.BackingFile, qcowMaxBackingName)
	checkClean(t, info.DataFile, qcowMaxBackingName)
	for _, p := range info.Partitions {
		if p.Start < 0 || p.Size < 0 || p.Start+p.Size > info.VirtualSize {
			t.Fatalf("partition %+v outside a %d-byte disk", p, info.VirtualSize)
		}
		oneOf("Partition.FS", p.FS, fss...)
		for _, s := range []string{p.Name, p.Type, p.PartUUID, p.FSLabel, p.FSUUID} {
			checkClean(t, s, maxLabelLen)
		}
	}
}

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
}

func FuzzQcow2Metadata(f *testing.F) {
	f.Fuzz(func(t *testing.T, size int64, layout []byte, maxClusters uint16) {
		img := decodeLayout(size, layout)
		c := &countingReader{r: img}
		limit := int(maxClusters%4096) + 1
		l, err := Qcow2Metadata(c, img.size, limit)
		if err != nil {
			return
		}
		if l.Clusters > limit {
			t.Fatalf("%d clusters counted, limit %d", l.Clusters, limit)
		}
		// Reading is bounded by the clusters counted, plus the header
		// area, plus the snapshot and bitmap directory windows.
		if max := int64(limit)*l.ClusterSize + 4<<20; c.bytes > max {
			t.Fatalf("read %d bytes for %d clusters of %d bytes", c.bytes, limit, l.ClusterSize)
		}
		end := (img.size + l.ClusterSize - 1) &^ (l.ClusterSize - 1)
		for i, r := range l.Ranges {
			if r.Start >= r.End || r.Start%l.ClusterSize != 0 || r.End%l.ClusterSize != 0 || r.End > end {
				t.Fatalf("bad range %v (file %d bytes, cluster %d)", r, img.size, l.ClusterSize)
			}
			if i > 0 && r.Start <= l.Ranges[i-1].End {
				t.Fatalf("ranges not sorted and merged: %v", l.Ranges)
			}
		}
	})
}

// --- seed corpus ---

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seed corpus under testdata/fuzz")

// fuzzSeed is one committed seed: an image and the arguments to feed it.
type fuzzSeed struct {
	name string
	img  *sparseImage
}

func probeSeeds() []fuzzSeed {
	var seeds []fuzzSeed
	add := func(name string, size int64, fill func(*sparseImage)) {
		img := &sparseImage{size: size}
		fill(img)
		seeds = append(seeds, fuzzSeed{name, img})
	}
	junk := strings.Repeat("\"label\"\n\\x00{}\xff", 256) // 4 KiB of junk
	add("ext4-junk-label", 8*mib, func(i *sparseImage) {
		writeExt(i, 0, ext4Feat, "a\"b\nc")
		i.write(1024+0x78, []byte(junk[:16]))
		i.write(2048, []byte(junk))
	})
	add("ext2", 8*mib, func(i *sparseImage) { writeExt(i, 0, ext2Feat, "e2") })
	add("ext3", 8*mib, func(i *sparseImage) { writeExt(i, 0, ext3Feat, "e3") })
	add("ext-bad-blocksize", 8*mib, func(i *sparseImage) {
		sb := extSuper(0, 0x2C2, 0, "")
		binary.LittleEndian.PutUint32(sb[0x18:], 0xFFFFFFFF)
		i.write(1024, sb)
	})
	add("xfs", 8*mib, func(i *sparseImage) { writeXFS(i, 0, "x\"\n") })
	add("xfs-bad-sizes", 8*mib, func(i *sparseImage) {
		writeXFS(i, 0, "x")
		i.write(4, []byte{0xFF, 0xFF, 0xFF, 0xFF})
	})
	add("btrfs-junk-label", 8*mib, func(i *sparseImage) { writeBtrfs(i, 0, junk[:256]) })
	add("btrfs-bad-nodesize", 8*mib, func(i *sparseImage) {
		sb := btrfsSuper([]byte("b"))
		binary.LittleEndian.PutUint32(sb[148:], 3)
		i.write(0x10000, sb)
	})
	add("lvm2", 8*mib, func(i *sparseImage) { writeLVM2(i, 0) })
	add("luks2", 8*mib, func(i *sparseImage) { writeLUKS(i, 0, 2) })
	add("swap", 8*mib, func(i *sparseImage) { writeSwap(i, 0) })
	add("mbr-ext4-xfs", 64*mib, func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{status: 0x80, typ: 0x83, start: 2048, count: 4096}, mbrPart{typ: 0x83, start: 8192, count: 100000}))
		writeExt(i, 2048*512, ext4Feat, "boot")
		writeXFS(i, 8192*512, "root")
	})
	add("mbr-ebr-loop", 64*mib, func(i *sparseImage) {
		// EBRs at 2048 -> 2049 -> 2050 -> 2049 ...
		i.write(0, mbrSector(mbrPart{typ: 0x05, start: 2048, count: 100000}))
		i.write(2048*512, mbrSector(mbrPart{typ: 0x83, start: 63, count: 100}, mbrPart{typ: 0x05, start: 1}))
		i.write(2049*512, mbrSector(mbrPart{typ: 0x83, start: 63, count: 100}, mbrPart{typ: 0x05, start: 2}))
		i.write(2050*512, mbrSector(mbrPart{typ: 0x83, start: 63, count: 100}, mbrPart{typ: 0x05, start: 1}))
	})
	add("mbr-ebr-past-end", 64*mib, func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{typ: 0x05, start: 2048, count: 100000}))
		i.write(2048*512, mbrSector(mbrPart{typ: 0x83, start: 63, count: 100}, mbrPart{typ: 0x05, start: 0x7FFFFFFF}))
	})
	gpt := func(name string, size int64, o gptOpts) {
		add(name, size, func(i *sparseImage) {
			ss := max(o.sectorSize, 512)
			writeGPT(i, []gptPart{
				{typ: guidBytes(guidLinux), first: uint64(mib / ss), last: uint64(4*mib/ss) - 1, name: "boot\n"},
				{typ: guidBytes(guidLinux), first: uint64(4 * mib / ss), last: uint64(size/ss) - 40, name: junk[:36]},
			}, o)
			writeExt(i, mib, ext4Feat, "boot")
			writeBtrfs(i, 4*mib, "root")
		})
	}
	gpt("gpt", 64*mib, gptOpts{numEntries: 4})
	gpt("gpt-4k", 64*mib, gptOpts{numEntries: 4, sectorSize: 4096})
	gpt("gpt-bad-crc", 64*mib, gptOpts{numEntries: 4, badPrimaryCRC: true})
	gpt("gpt-both-bad", 64*mib, gptOpts{numEntries: 4, badPrimaryCRC: true, badBackupCRC: true})
	gpt("gpt-absurd-count", 64*mib, gptOpts{numEntries: 0xFFFFFFFF})
	gpt("gpt-huge-disk", 1<<44, gptOpts{numEntries: 4, badPrimaryCRC: true})
	add("gpt-entry-past-end", 64*mib, func(i *sparseImage) {
		writeGPT(i, []gptPart{{typ: guidBytes(guidLinux), first: 1 << 62, last: 1<<64 - 1}}, gptOpts{numEntries: 4})
	})

	for _, q := range qcowSeeds() {
		seeds = append(seeds, q)
	}
	return seeds
}

// qcowSeeds are small qcow2 images (512-byte clusters) plus hostile edits.
func qcowSeeds() []fuzzSeed {
	guest := &sparseImage{size: 128 << 10}
	writeExt(guest, 0, ext4Feat, "q")
	g := guest.bytes()
	var seeds []fuzzSeed
	add := func(name string, data []byte, edit func([]byte)) {
		d := append([]byte(nil), data...)
		if edit != nil {
			edit(d)
		}
		img := &sparseImage{size: int64(len(d))}
		img.write(0, d)
		seeds = append(seeds, fuzzSeed{name, img})
	}
	v3 := buildQcow2(g, qcowOpts{clusterBits: 9, backing: "base\"\n.qcow2", backingFormat: "qcow2"}).data
	add("qcow2-v3", v3, nil)
	add("qcow2-v2", buildQcow2(g, qcowOpts{version: 2, clusterBits: 9}).data, nil)
	add("qcow2-compressed", buildQcow2(g, qcowOpts{clusterBits: 9, compress: func(int64) bool { return true }}).data, nil)
	add("qcow2-zero-flag", buildQcow2(g, qcowOpts{clusterBits: 9, zeroFlag: true}).data, nil)
	add("qcow2-truncated", v3[:80], nil)
	be := binary.BigEndian
	// L1 at 512; first L1 entry -> L2 at 1536.
	add("qcow2-l1-huge-offsets", v3, func(d []byte) {
		for i := 512; i < 1024; i += 8 {
			be.PutUint64(d[i:], 0x00fffffffffffe00)
		}
	})
	add("qcow2-l2-points-at-l1", v3, func(d []byte) {
		be.PutUint64(d[512:], 512) // the L2 table is the L1 table
	})
	add("qcow2-l1-size-max", v3, func(d []byte) { be.PutUint32(d[36:], 1<<22) })
	add("qcow2-refcount-loop", v3, func(d []byte) {
		be.PutUint32(d[56:], 1)
		be.PutUint64(d[1024:], 1024) // refcount table points at itself
	})
	add("qcow2-snapshots", v3, func(d []byte) {
		be.PutUint32(d[60:], 3)
		be.PutUint64(d[64:], 0) // snapshot table in the header cluster
	})
	snap := withSnapshotAndBitmap(buildQcow2(g, qcowOpts{clusterBits: 9}))
	add("qcow2-snapshot-bitmap", snap, nil)
	// The bitmap directory is the last cluster; its table claims 2^32-1
	// entries and the snapshot claims the largest L1 table.
	add("qcow2-bitmap-huge-table", snap, func(d []byte) {
		be.PutUint32(d[len(d)-512+8:], 0xFFFFFFFF)
		snapTab := be.Uint64(d[64:])
		be.PutUint32(d[snapTab+8:], 1<<22)
	})
	add("qcow2-ext-overrun", v3, func(d []byte) { be.PutUint32(d[108:], 0xFFFFFFF0) })
	add("qcow2-extended-l2-small-clusters", v3, func(d []byte) { d[79] |= incompatExtL2 })
	add("qcow2-encrypted", v3, func(d []byte) { d[35] = 2 })
	add("qcow2-compressed-max", v3, func(d []byte) {
		// Every L2 entry compressed with the longest length.
		for i := 1536; i < 2048; i += 8 {
			be.PutUint64(d[i:], 1<<62|1<<61|2048)
		}
	})
	return seeds
}

func metadataSeeds() []fuzzSeed {
	var seeds []fuzzSeed
	for _, s := range qcowSeeds() {
		seeds = append(seeds, s)
	}
	return seeds
}

// corpusFile renders a seed in the "go test fuzz v1" format.
func corpusFile(vals ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case int64:
			fmt.Fprintf(&b, "int64(%d)\n", v)
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", v)
		}
	}
	return b.Bytes()
}

// TestFuzzSeeds checks that the committed seed corpus matches the seeds
// built here (run with -update-seeds to rewrite it), and that each seed
// still decodes to the image it was built from.
func TestFuzzSeeds(t *testing.T) {
	want := map[string][]byte{}
	for _, s := range probeSeeds() {
		layout := encodeLayout(s.img)
		img := decodeLayout(s.img.size, layout)
		if img.size != s.img.size || !sameContents(img, s.img) {
			t.Fatalf("seed %s does not round-trip through the layout encoding", s.name)
		}
		want[filepath.Join("FuzzProbe", s.name)] = corpusFile(s.img.size, layout)
	}
	for i, s := range metadataSeeds() {
		want[filepath.Join("FuzzQcow2Metadata", s.name)] = corpusFile(s.img.size, encodeLayout(s.img), uint16(64<<(i%4)))
	}
	for name, data := range want {
		path := filepath.Join("testdata", "fuzz", name)
		if *updateSeeds {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("seed %s is missing or stale (%v); run: go test ./exporter/diskimage -run TestFuzzSeeds -update-seeds", path, err)
		}
		if len(data) > 64<<10 {
			t.Errorf("seed %s is %d bytes; keep seeds small", path, len(data))
		}
	}
}

// sameContents compares two sparse images of equal size chunk-wise, reading
// only where either has data.
func sameContents(a, b *sparseImage) bool {
	for _, img := range []*sparseImage{a, b} {
		for _, c := range img.chunks {
			x, y := make([]byte, len(c.data)), make([]byte, len(c.data))
			a.ReadAt(x, c.off)
			b.ReadAt(y, c.off)
			if !bytes.Equal(x, y) {
				return false
			}
		}
	}
	return true
}
