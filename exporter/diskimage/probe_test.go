package diskimage

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const mib = 1 << 20

func probeSparse(t *testing.T, img *sparseImage) *Info {
	t.Helper()
	info, err := Probe(img, img.size)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	return info
}

func TestProbeUnpartitioned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		write   func(*sparseImage)
		fs      string
		label   string
		uuid    string
		reason  string
		wantErr bool
	}{
		{name: "ext2", write: func(i *sparseImage) { writeExt(i, 0, ext2Feat, "boot") }, fs: FSExt2, label: "boot", uuid: "10111213-1415-1617-1819-1a1b1c1d1e1f"},
		{name: "ext3", write: func(i *sparseImage) { writeExt(i, 0, ext3Feat, "") }, fs: FSExt3},
		{name: "ext4", write: func(i *sparseImage) { writeExt(i, 0, ext4Feat, "root") }, fs: FSExt4, label: "root"},
		// mkfs.ext4 -O ^has_journal: no journal, but extents make it ext4.
		{name: "ext4-nojournal", write: func(i *sparseImage) { writeExt(i, 0, [3]uint32{0x38, 0x42, 0x3}, "") }, fs: FSExt4},
		{name: "ext-journal-dev", write: func(i *sparseImage) { writeExt(i, 0, [3]uint32{0, 0x8, 0}, "") }, fs: FSUnknown, reason: "ext journal device"},
		{name: "xfs", write: func(i *sparseImage) { writeXFS(i, 0, "data") }, fs: FSXFS, label: "data", uuid: "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"},
		{name: "btrfs", write: func(i *sparseImage) { writeBtrfs(i, 0, "pool") }, fs: FSBtrfs, label: "pool", uuid: "b0b1b2b3-b4b5-b6b7-b8b9-babbbcbdbebf"},
		{name: "lvm2", write: func(i *sparseImage) { writeLVM2(i, 0) }, fs: FSUnknown, reason: ReasonLVM2},
		{name: "luks1", write: func(i *sparseImage) { writeLUKS(i, 0, 1) }, fs: FSUnknown, reason: ReasonLUKS, uuid: "0b8a2b1c-6c69-4a41-9c3a-2b7b0c3d4e5f"},
		{name: "luks2", write: func(i *sparseImage) { writeLUKS(i, 0, 2) }, fs: FSUnknown, reason: ReasonLUKS},
		{name: "swap", write: func(i *sparseImage) { writeSwap(i, 0) }, fs: FSUnknown, reason: ReasonSwap},
		{name: "empty", write: func(i *sparseImage) {}, fs: FSUnknown, reason: ReasonNoFS},
		{name: "ambiguous", write: func(i *sparseImage) { writeExt(i, 0, ext4Feat, ""); writeBtrfs(i, 0, "") }, fs: FSUnknown, reason: "ambiguous signatures: ext4, btrfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := &sparseImage{size: 64 * mib}
			tc.write(img)
			info := probeSparse(t, img)
			if info.Format != FormatRaw || info.VirtualSize != 64*mib || info.PartitionTable != TableNone {
				t.Errorf("format %q size %d table %q, want raw %d none", info.Format, info.VirtualSize, info.PartitionTable, 64*mib)
			}
			if info.GuestFS != tc.fs || info.Reason != tc.reason {
				t.Errorf("GuestFS %q Reason %q, want %q %q", info.GuestFS, info.Reason, tc.fs, tc.reason)
			}
			if info.FSLabel != tc.label {
				t.Errorf("FSLabel %q, want %q", info.FSLabel, tc.label)
			}
			if tc.uuid != "" && info.FSUUID != tc.uuid {
				t.Errorf("FSUUID %q, want %q", info.FSUUID, tc.uuid)
			}
		})
	}
}

func TestProbeRejectsBadSuperblocks(t *testing.T) {
	img := &sparseImage{size: 8 * mib}
	sb := extSuper(0, 0x2C2, 0, "")
	sb[0x18] = 40 // block size 1 KiB << 40
	img.write(1024, sb)
	xfs := make([]byte, 512)
	copy(xfs, "XFSB") // block size 0
	img.write(0, xfs)
	b := btrfsSuper(nil)
	b[100] ^= 1 // checksum no longer matches
	img.write(0x10000, b)
	info := probeSparse(t, img)
	if info.GuestFS != FSUnknown || info.Reason != ReasonNoFS {
		t.Errorf("GuestFS %q Reason %q, want unknown, %q", info.GuestFS, info.Reason, ReasonNoFS)
	}
}

func TestSanitizeLabels(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"a\"b\\c", "a\"b\\c"},
		{"line\nbreak\x7f", "line?break?"},
		{"caf\xc3\xa9", "caf??"},
		{"stop\x00here", "stop"},
		{strings.Repeat("x", 300), strings.Repeat("x", maxLabelLen)},
	} {
		if got := sanitize([]byte(tc.in), maxLabelLen); got != tc.want {
			t.Errorf("sanitize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A Btrfs label is 256 bytes: the probe must cut it to 64.
	img := &sparseImage{size: 8 * mib}
	junk := bytes.Repeat([]byte("\"}\n{"), 64)
	writeBtrfs(img, 0, string(junk))
	info := probeSparse(t, img)
	if len(info.FSLabel) != maxLabelLen || strings.ContainsAny(info.FSLabel, "\n\x00") {
		t.Errorf("FSLabel %q not sanitised", info.FSLabel)
	}
}

func TestProbeMBR(t *testing.T) {
	img := &sparseImage{size: 256 * mib}
	img.write(0, mbrSector(
		mbrPart{status: 0x80, typ: 0x83, start: 2048, count: 32768}, // 16 MiB ext4 /boot
		mbrPart{typ: 0x83, start: 34816, count: 200000},             // ~98 MiB xfs
		mbrPart{typ: 0x05, start: 300000, count: 200000},            // extended
		mbrPart{typ: 0x83, start: 500000, count: 100000},            // runs past the end: clipped
	))
	writeExt(img, 2048*512, ext4Feat, "boot")
	writeXFS(img, 34816*512, "root")
	// Two logical partitions: swap, then LVM.
	img.write(300000*512, mbrSector(mbrPart{typ: 0x82, start: 2048, count: 4096}, mbrPart{typ: 0x05, start: 8192, count: 8192}))
	writeSwap(img, (300000+2048)*512)
	img.write((300000+8192)*512, mbrSector(mbrPart{typ: 0x8e, start: 2048, count: 4096}))
	writeLVM2(img, (300000+8192+2048)*512)

	info := probeSparse(t, img)
	if info.PartitionTable != TableMBR || info.GuestFS != FSXFS || info.GuestFSPartition != 2 || info.FSLabel != "root" {
		t.Fatalf("got table %q fs %q (partition %d, label %q), want mbr xfs (2, root); notes %v",
			info.PartitionTable, info.GuestFS, info.GuestFSPartition, info.FSLabel, info.Notes)
	}
	want := []struct {
		index       int
		start, size int64
		typ, fs     string
		reason      string
	}{
		{1, 2048 * 512, 32768 * 512, "0x83", FSExt4, ""},
		{2, 34816 * 512, 200000 * 512, "0x83", FSXFS, ""},
		{3, 300000 * 512, 200000 * 512, "0x05", FSUnknown, reasonExtended},
		{4, 500000 * 512, 256*mib - 500000*512, "0x83", FSUnknown, ReasonNoFS},
		{5, (300000 + 2048) * 512, 4096 * 512, "0x82", FSUnknown, ReasonSwap},
		{6, (300000 + 8192 + 2048) * 512, 4096 * 512, "0x8e", FSUnknown, ReasonLVM2},
	}
	if len(info.Partitions) != len(want) {
		t.Fatalf("%d partitions, want %d: %+v", len(info.Partitions), len(want), info.Partitions)
	}
	for i, w := range want {
		p := info.Partitions[i]
		if p.Index != w.index || p.Start != w.start || p.Size != w.size || p.Type != w.typ || p.FS != w.fs || p.Reason != w.reason {
			t.Errorf("partition %d = %+v, want %+v", i, p, w)
		}
	}
}

func TestProbeMBRBadChains(t *testing.T) {
	for _, tc := range []struct {
		name  string
		links []uint32 // link of the EBR at extended start + i, relative to the extended start
		parts int      // logical partitions expected
		note  string
	}{
		{"past-end", []uint32{0xFFFFFFF0}, 1, "past the end"},
		{"loop", []uint32{1, 2, 1}, 3, "loops at sector"},
		{"self", []uint32{1, 1}, 2, "loops at sector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := &sparseImage{size: 64 * mib}
			img.write(0, mbrSector(mbrPart{typ: 0x0F, start: 2048, count: 100000}))
			for i, link := range tc.links {
				img.write(int64(2048+i)*512, mbrSector(mbrPart{typ: 0x83, start: 63, count: 100}, mbrPart{typ: 0x05, start: link}))
			}
			info := probeSparse(t, img)
			if info.PartitionTable != TableMBR || len(info.Partitions) != 1+tc.parts {
				t.Fatalf("table %q with %d partitions, want mbr with %d: %+v", info.PartitionTable, len(info.Partitions), 1+tc.parts, info.Partitions)
			}
			if !hasNote(info, tc.note) {
				t.Errorf("notes %q lack %q", info.Notes, tc.note)
			}
		})
	}
	// A chain longer than maxLogical stops there.
	img := &sparseImage{size: 64 * mib}
	img.write(0, mbrSector(mbrPart{typ: 0x05, start: 2048, count: 100000}))
	for i := range uint32(200) {
		img.write(int64(2048+i)*512, mbrSector(mbrPart{typ: 0x83, start: 63, count: 100}, mbrPart{typ: 0x05, start: i + 1}))
	}
	info := probeSparse(t, img)
	if len(info.Partitions) != 1+maxLogical || !hasNote(info, "longer than") {
		t.Errorf("%d partitions, notes %q", len(info.Partitions), info.Notes)
	}
}

func hasNote(info *Info, s string) bool {
	for _, n := range info.Notes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

func gptDisk(size int64, o gptOpts) *sparseImage {
	img := &sparseImage{size: size}
	ss := o.sectorSize
	if ss == 0 {
		ss = 512
	}
	mibLBA := uint64(mib / ss)
	writeGPT(img, []gptPart{
		{typ: guidBytes(guidBIOSBoot), first: mibLBA, last: 2*mibLBA - 1, name: "bios"},
		{typ: guidBytes(guidLinux), first: 2 * mibLBA, last: 34*mibLBA - 1, name: "boot"},
		{typ: guidBytes(guidLinux), first: 34 * mibLBA, last: uint64(size/ss) - 40, name: "root\n\"x\""},
	}, o)
	writeExt(img, 2*mib, ext4Feat, "boot")
	writeBtrfs(img, 34*mib, "root")
	return img
}

func TestProbeGPT(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     gptOpts
		table string
		note  string
	}{
		{name: "valid", table: TableGPT},
		{name: "4k-sectors", o: gptOpts{sectorSize: 4096}, table: TableGPT},
		{name: "bad-primary-crc", o: gptOpts{badPrimaryCRC: true}, table: TableGPT, note: "using backup"},
		{name: "bad-primary-array", o: gptOpts{badArrayCRC: true}, table: TableGPT, note: "entry array CRC mismatch"},
		{name: "no-pmbr", o: gptOpts{noPMBR: true}, table: TableGPT},
		{name: "both-bad", o: gptOpts{badPrimaryCRC: true, badBackupCRC: true}, table: TableUnknown, note: "protective MBR"},
		{name: "absurd-count", o: gptOpts{numEntries: 1 << 20}, table: TableUnknown, note: "out of range"},
		{name: "odd-entry-size", o: gptOpts{entrySize: 200, numEntries: 16}, table: TableUnknown, note: "entry size 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := gptDisk(512*mib, tc.o)
			info := probeSparse(t, img)
			if info.PartitionTable != tc.table {
				t.Fatalf("table %q, want %q; notes %v", info.PartitionTable, tc.table, info.Notes)
			}
			if tc.note != "" && !hasNote(info, tc.note) {
				t.Errorf("notes %v lack %q", info.Notes, tc.note)
			}
			if tc.table != TableGPT {
				if info.GuestFS != FSUnknown || !strings.Contains(info.Reason, "partition table") {
					t.Errorf("GuestFS %q Reason %q", info.GuestFS, info.Reason)
				}
				return
			}
			ss := max(tc.o.sectorSize, 512)
			if info.SectorSize != ss || len(info.Partitions) != 3 {
				t.Fatalf("sector size %d, %d partitions: %+v", info.SectorSize, len(info.Partitions), info.Partitions)
			}
			if info.GuestFS != FSBtrfs || info.GuestFSPartition != 3 || info.FSLabel != "root" {
				t.Errorf("guest fs %q on %d label %q, want btrfs on 3 label root", info.GuestFS, info.GuestFSPartition, info.FSLabel)
			}
			p := info.Partitions
			if p[0].Type != guidBIOSBoot || p[0].Reason != ReasonNoFS || p[1].FS != FSExt4 || p[1].Start != 2*mib || p[1].Size != 32*mib {
				t.Errorf("partitions %+v", p)
			}
			if p[2].Name != "root?\"x\"" {
				t.Errorf("name %q not sanitised as expected", p[2].Name)
			}
		})
	}
}

func TestProbeGPTHugeDisk(t *testing.T) {
	// A 16 TiB sparse disk: the backup header is read at the very end,
	// and nothing is allocated by size.
	img := gptDisk(16<<40, gptOpts{badPrimaryCRC: true})
	info := probeSparse(t, img)
	if info.PartitionTable != TableGPT || info.GuestFS != FSBtrfs {
		t.Errorf("table %q fs %q notes %v", info.PartitionTable, info.GuestFS, info.Notes)
	}
}

func TestProbePartitionedUnknownReason(t *testing.T) {
	img := &sparseImage{size: 128 * mib}
	writeGPT(img, []gptPart{
		{typ: guidBytes(guidLinux), first: 2048, last: 4095},
		{typ: guidBytes(guidLVM), first: 4096, last: 200000},
	}, gptOpts{})
	writeLVM2(img, 4096*512)
	info := probeSparse(t, img)
	if info.GuestFS != FSUnknown || info.Reason != ReasonLVM2 {
		t.Errorf("GuestFS %q Reason %q, want unknown %q", info.GuestFS, info.Reason, ReasonLVM2)
	}
}

func TestDetectFormat(t *testing.T) {
	for _, tc := range []struct {
		head, format, reason string
	}{
		{"KDMV", FormatUnknown, "vmdk image"},
		{"vhdxfile", FormatUnknown, "vhdx image"},
		{"QED\x00", FormatUnknown, "qed image"},
		{"QFI\xfb\x00\x00\x00\x01", FormatUnknown, "qcow version 1 image"},
		{"hello", FormatRaw, ReasonNoFS},
	} {
		img := &sparseImage{size: mib}
		img.write(0, []byte(tc.head))
		info := probeSparse(t, img)
		if info.Format != tc.format || info.Reason != tc.reason {
			t.Errorf("%q: format %q reason %q, want %q %q", tc.head, info.Format, info.Reason, tc.format, tc.reason)
		}
	}
}

// A guest that writes a qcow2 header into its raw disk must not change what
// ProbeAs reports when the caller knows the image is raw.
func TestProbeAsRawIgnoresGuestQcow2Header(t *testing.T) {
	q := buildQcow2(make([]byte, 4*mib), qcowOpts{})
	img := &sparseImage{size: 64 * mib}
	img.write(0, q.data)
	if info := probeSparse(t, img); info.Format != FormatQcow2 {
		t.Fatalf("autodetect: format %q, want qcow2", info.Format)
	}
	info, err := ProbeAs(img, img.size, FormatRaw)
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != FormatRaw || info.VirtualSize != 64*mib || info.Reason != "nested qcow2 image" {
		t.Errorf("ProbeAs raw: %+v", info)
	}
	if _, err := ProbeAs(img, img.size, "vmdk"); err == nil {
		t.Error("ProbeAs accepted format vmdk")
	}
}

type failingReader struct{}

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, errors.New("input/output error") }

func TestProbeReturnsReadErrors(t *testing.T) {
	if _, err := Probe(failingReader{}, 1<<30); err == nil || !strings.Contains(err.Error(), "input/output error") {
		t.Errorf("Probe on a failing reader: err %v", err)
	}
}

// --- qcow2 ---

// guestPattern returns n bytes of guest data with all-zero clusters,
// compressible clusters and random clusters mixed, for cluster size cs.
func guestPattern(n, cs int64, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for c := int64(0); c*cs < n; c++ {
		chunk := b[c*cs : min((c+1)*cs, n)]
		switch rng.IntN(4) {
		case 0: // zeros
		case 1: // compressible text
			for i := range chunk {
				chunk[i] = "fspair "[i%7]
			}
		case 2: // random
			for i := range chunk {
				chunk[i] = byte(rng.Uint32())
			}
		case 3: // half zero, so extended L2 gets zero subclusters
			for i := range chunk[:len(chunk)/2] {
				chunk[i] = byte(rng.Uint32())
			}
		}
	}
	return b
}

func TestQcow2Reader(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    qcowOpts
	}{
		{"v2", qcowOpts{version: 2}},
		{"v3", qcowOpts{}},
		{"v3-zero-flag", qcowOpts{zeroFlag: true}},
		{"512-byte-clusters", qcowOpts{clusterBits: 9}},
		{"2MiB-clusters", qcowOpts{clusterBits: 21}},
		{"extended-l2", qcowOpts{extL2: true, clusterBits: 14}},
		{"extended-l2-zero", qcowOpts{extL2: true, zeroFlag: true}},
		{"compressed", qcowOpts{compress: func(int64) bool { return true }}},
		{"compressed-some", qcowOpts{clusterBits: 12, compress: func(gc int64) bool { return gc%2 == 0 }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := tc.o.clusterBits
			if cb == 0 {
				cb = 16
			}
			cs := int64(1) << cb
			guest := guestPattern(8*mib+3*cs/2, cs, 7)
			q := buildQcow2(guest, tc.o)
			r, err := NewQcow2Reader(bytes.NewReader(q.data), int64(len(q.data)))
			if err != nil {
				t.Fatal(err)
			}
			if r.Size() != int64(len(guest)) || r.ClusterSize() != cs {
				t.Fatalf("size %d cluster %d, want %d %d", r.Size(), r.ClusterSize(), len(guest), cs)
			}
			got := make([]byte, len(guest))
			if n, err := r.ReadAt(got, 0); err != nil || n != len(got) {
				t.Fatalf("ReadAt whole disk: %d, %v", n, err)
			}
			if !bytes.Equal(got, guest) {
				t.Fatal("guest contents differ")
			}
			rng := rand.New(rand.NewPCG(3, 4))
			for range 200 {
				off := rng.Int64N(int64(len(guest)))
				n := rng.IntN(3*int(cs)) + 1
				buf := make([]byte, n)
				m, err := r.ReadAt(buf, off)
				want := guest[off:min(off+int64(n), int64(len(guest)))]
				if m != len(want) || !bytes.Equal(buf[:m], want) {
					t.Fatalf("ReadAt(%d, %d) = %d, %v: contents differ", n, off, m, err)
				}
				if m < n && err != io.EOF {
					t.Fatalf("short read at end without io.EOF: %v", err)
				}
			}
			wantUnalloc := !tc.o.zeroFlag
			if r.HitUnallocated() != wantUnalloc {
				t.Errorf("HitUnallocated %v, want %v", r.HitUnallocated(), wantUnalloc)
			}
		})
	}
}

func TestProbeQcow2(t *testing.T) {
	disk := gptDisk(128*mib, gptOpts{})
	guest := disk.bytes()
	for _, o := range []qcowOpts{{}, {version: 2, clusterBits: 12}, {extL2: true}, {compress: func(int64) bool { return true }}} {
		q := buildQcow2(guest, o)
		info, err := Probe(bytes.NewReader(q.data), int64(len(q.data)))
		if err != nil {
			t.Fatal(err)
		}
		v := o.version
		if v == 0 {
			v = 3
		}
		if info.Format != FormatQcow2 || info.Qcow2Version != v || info.ClusterSize != q.cs || info.VirtualSize != 128*mib {
			t.Errorf("%+v: header fields %+v", o, info)
		}
		if info.PartitionTable != TableGPT || info.GuestFS != FSBtrfs || info.GuestFSPartition != 3 {
			t.Errorf("%+v: table %q fs %q on %d; reason %q notes %v", o, info.PartitionTable, info.GuestFS, info.GuestFSPartition, info.Reason, info.Notes)
		}
	}
}

func TestProbeQcow2Backing(t *testing.T) {
	q := buildQcow2(make([]byte, 16*mib), qcowOpts{backing: "/var/lib/images/base.qcow2\n", backingFormat: "qcow2"})
	info, err := Probe(bytes.NewReader(q.data), int64(len(q.data)))
	if err != nil {
		t.Fatal(err)
	}
	if info.BackingFile != "/var/lib/images/base.qcow2?" || info.BackingFormat != "qcow2" {
		t.Errorf("backing %q format %q", info.BackingFile, info.BackingFormat)
	}
	if info.GuestFS != FSUnknown || !strings.HasPrefix(info.Reason, ReasonNoFS) || !strings.Contains(info.Reason, "backing file not opened") {
		t.Errorf("GuestFS %q Reason %q", info.GuestFS, info.Reason)
	}
}

// TestProbeQcow2Rejections: a qcow2 header the probe rejects yields the
// reason and nothing read from the header, above all no virtual size (a
// rejected header claiming 1 TiB must not be exported as a 1 TiB disk). An
// encrypted image or one with an external data file has a valid header whose
// guest data cannot be read here: its header fields stand.
func TestProbeQcow2Rejections(t *testing.T) {
	base := buildQcow2(make([]byte, 4*mib), qcowOpts{}).data
	type patch struct {
		off int
		b   []byte
	}
	set := func(patches ...patch) []byte {
		d := append([]byte(nil), base...)
		for _, p := range patches {
			copy(d[p.off:], p.b)
		}
		return d
	}
	at := func(off int, b ...byte) patch { return patch{off, b} }
	tib := at(24, 0, 0, 1, 0, 0, 0, 0, 0) // virtual size 1 TiB
	for _, tc := range []struct {
		name   string
		data   []byte
		reason string
		err    error
		size   int64 // VirtualSize wanted
	}{
		{"aes", set(at(35, 1)), ReasonEncQcow2, ErrEncrypted, 4 * mib},
		{"luks", set(at(35, 2)), ReasonEncQcow2, ErrEncrypted, 4 * mib},
		{"data-file", set(at(79, incompatDataFile)), "external data file", ErrUnsupported, 4 * mib},
		{"unknown-incompat", set(at(72, 0x80)), "unknown incompatible features", ErrUnsupported, 0},
		{"zstd-flag-without-type", set(at(79, incompatCompression)), "compression type", ErrCorrupt, 0},
		{"cluster-bits", set(at(23, 30)), "cluster_bits 30", ErrCorrupt, 0},
		{"version", set(at(7, 9)), "qcow version 9", ErrUnsupported, 0},
		{"l1-unaligned", set(at(47, 8)), "l1_table_offset", ErrCorrupt, 0},
		{"l1-too-small", set(at(36, 0, 0, 0, 0)), "cannot map", ErrCorrupt, 0},
		{"l1-too-small-1tib", set(tib), "cannot map", ErrCorrupt, 0},
		{"aes-l1-too-small-1tib", set(tib, at(35, 1)), "cannot map", ErrCorrupt, 0},
		{"data-file-l1-too-small-1tib", set(tib, at(79, incompatDataFile)), "cannot map", ErrCorrupt, 0},
		{"l1-too-large", set(at(36, 0xff, 0xff, 0xff, 0xff)), "exceeds", ErrCorrupt, 0},
		{"header-length", set(at(100, 0, 0, 0, 99)), "header_length 99", ErrCorrupt, 0},
		{"truncated", base[:60], "shorter than the header", ErrCorrupt, 0},
		{"huge-size", set(at(24, 0x7f)), "virtual size", ErrCorrupt, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Probe(bytes.NewReader(tc.data), int64(len(tc.data)))
			if err != nil {
				t.Fatal(err)
			}
			if info.Format != FormatQcow2 || info.GuestFS != FSUnknown || !strings.Contains(info.Reason, tc.reason) {
				t.Errorf("format %q fs %q reason %q, want qcow2 unknown containing %q", info.Format, info.GuestFS, info.Reason, tc.reason)
			}
			if info.VirtualSize != tc.size {
				t.Errorf("virtual size %d, want %d", info.VirtualSize, tc.size)
			}
			if tc.size == 0 && (info.Qcow2Version != 0 || info.ClusterSize != 0 || info.Encrypted) {
				t.Errorf("fields of a rejected header: version %d, cluster size %d, encrypted %v",
					info.Qcow2Version, info.ClusterSize, info.Encrypted)
			}
			if _, err := NewQcow2Reader(bytes.NewReader(tc.data), int64(len(tc.data))); !errors.Is(err, tc.err) {
				t.Errorf("NewQcow2Reader error %v, want %v", err, tc.err)
			}
		})
	}
}

func TestQcow2CorruptClusters(t *testing.T) {
	guest := guestPattern(2*mib, 64<<10, 1)
	guest[0] = 1 // cluster 0 allocated
	q := buildQcow2(guest, qcowOpts{compress: func(gc int64) bool { return gc == 0 }})
	l1 := int64(q.cs)     // L1 table in cluster 1
	l2 := int64(3 * q.cs) // first L2 table after header, L1 and refcount table
	entry := func(d []byte) uint64 {
		var v uint64
		for _, c := range d[l2 : l2+8] {
			v = v<<8 | uint64(c)
		}
		return v
	}
	if entry(q.data)&qcowCompressed == 0 {
		t.Fatal("builder did not compress cluster 0")
	}
	for _, tc := range []struct {
		name string
		mod  func(d []byte)
	}{
		{"garbage-deflate", func(d []byte) {
			off := entry(d) & (1<<(62-8) - 1)
			for i := range 64 {
				d[int(off)+i] = 0xff
			}
		}},
		{"l2-unaligned", func(d []byte) { d[l1+6] |= 0x02 }}, // bit 9 of the L2 offset
		{"data-unaligned", func(d []byte) {
			// A standard cluster at host offset 0x10200.
			copy(d[l2:l2+8], []byte{0x80, 0, 0, 0, 0, 0x01, 0x02, 0})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := append([]byte(nil), q.data...)
			tc.mod(d)
			r, err := NewQcow2Reader(bytes.NewReader(d), int64(len(d)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrCorrupt) {
				t.Errorf("ReadAt error %v, want ErrCorrupt", err)
			}
			info, err := Probe(bytes.NewReader(d), int64(len(d)))
			if err != nil {
				t.Fatal(err)
			}
			if info.GuestFS != FSUnknown || !strings.Contains(info.Reason, "corrupt qcow2") {
				t.Errorf("GuestFS %q Reason %q", info.GuestFS, info.Reason)
			}
		})
	}
}

// patternReader is a size-byte file whose header is hdr and whose every
// other 8-byte word is word: a qcow2 image whose tables all point at each
// other, without allocating it.
type patternReader struct {
	hdr  []byte
	word uint64
	size int64
}

func (p patternReader) ReadAt(b []byte, off int64) (int, error) {
	if off >= p.size {
		return 0, io.EOF
	}
	for i := range b {
		o := off + int64(i)
		switch {
		case o >= p.size:
			return i, io.EOF
		case o < int64(len(p.hdr)):
			b[i] = p.hdr[o]
		default:
			b[i] = byte(p.word >> (56 - 8*(o%8)))
		}
	}
	return len(b), nil
}

// Hostile qcow2 images whose L1 table is the largest QEMU allows and whose
// L1 and L2 entries all point back into the tables, or at compressed
// clusters of garbage: probing must finish quickly within its budget.
func TestProbeQcow2Hostile(t *testing.T) {
	h := make([]byte, 512)
	copy(h, qcowMagic)
	h[7] = 3
	h[23] = 9    // 512-byte clusters
	h[27] = 0x20 // virtual size 2^37: needs 2^22 L1 entries
	h[37] = 0x40 // l1_size 2^22 (32 MiB, QEMU's maximum)
	h[46] = 0x02 // l1_table_offset 512
	h[103] = 104 // header_length
	for _, word := range []uint64{
		0x400,                      // every table entry: cluster 2, inside the L1 table
		1<<62 | 1<<61 | 0x400,      // compressed, maximum length (x = 61 for 512-byte clusters)
		1<<62 | 0x3fffffffffffffff, // compressed, everything set
		0x80000000000003ff,         // unaligned
	} {
		r := &countingReader{r: patternReader{hdr: h, word: word, size: 64 << 20}}
		start := time.Now()
		info, err := Probe(r, 64<<20)
		if err != nil {
			t.Fatalf("word %#x: %v", word, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("word %#x: Probe took %v", word, d)
		}
		if r.calls > probeMaxCalls || r.bytes > probeMaxBytes {
			t.Errorf("word %#x: %d reads, %d bytes", word, r.calls, r.bytes)
		}
		if info.Format != FormatQcow2 || info.VirtualSize != 1<<37 || info.GuestFS != FSUnknown || info.Reason == "" {
			t.Errorf("word %#x: %+v", word, info)
		}
		t.Logf("word %#x: table %q reason %q", word, info.PartitionTable, info.Reason)
	}
}

func TestReadBudget(t *testing.T) {
	b := &budgetReader{r: bytes.NewReader(make([]byte, 4096)), maxCalls: 3, maxBytes: 1000}
	buf := make([]byte, 400)
	for i, want := range []error{nil, nil, ErrReadBudget, ErrReadBudget} {
		if _, err := b.ReadAt(buf, 0); err != want {
			t.Errorf("read %d: %v, want %v", i, err, want)
		}
	}
	b = &budgetReader{r: bytes.NewReader(nil), maxCalls: 1, maxBytes: 1 << 20}
	if _, err := b.ReadAt(buf, 0); err != io.EOF {
		t.Errorf("read past end: %v, want io.EOF", err)
	}
	if _, err := b.ReadAt(buf, 0); err != ErrReadBudget {
		t.Errorf("second read: %v, want ErrReadBudget", err)
	}
}
