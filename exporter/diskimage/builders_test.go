package diskimage

// Builders for synthetic images used by the unit and fuzz tests. They write
// just the structures the probe reads, following the same format
// descriptions as the package (see doc.go), so the tests do not depend on
// the code under test to lay images out.

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sort"
)

// sparseImage is an io.ReaderAt of size bytes that are zero except for the
// chunks written into it. It lets tests describe large disks without
// allocating them.
type sparseImage struct {
	size   int64
	chunks []sparseChunk
}

type sparseChunk struct {
	off  int64
	data []byte
}

func (s *sparseImage) write(off int64, data []byte) {
	s.chunks = append(s.chunks, sparseChunk{off, append([]byte(nil), data...)})
}

func (s *sparseImage) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if off >= s.size {
		return 0, io.EOF
	}
	n := len(p)
	if int64(n) > s.size-off {
		n = int(s.size - off)
	}
	clear(p[:n])
	// Later writes win, as with a file.
	for _, c := range s.chunks {
		lo, hi := max(off, c.off), min(off+int64(n), c.off+int64(len(c.data)))
		if lo < hi {
			copy(p[lo-off:hi-off], c.data[lo-c.off:hi-c.off])
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// bytes materialises the image (small images only).
func (s *sparseImage) bytes() []byte {
	b := make([]byte, s.size)
	s.ReadAt(b, 0)
	return b
}

// --- partition tables ---

type mbrPart struct {
	status, typ  byte
	start, count uint32
}

// mbrSector returns a 512-byte MBR or EBR with up to four entries.
func mbrSector(parts ...mbrPart) []byte {
	s := make([]byte, 512)
	for i, p := range parts {
		e := s[446+16*i:]
		e[0], e[4] = p.status, p.typ
		binary.LittleEndian.PutUint32(e[8:], p.start)
		binary.LittleEndian.PutUint32(e[12:], p.count)
	}
	s[510], s[511] = 0x55, 0xAA
	return s
}

type gptPart struct {
	typ         [16]byte
	first, last uint64 // inclusive LBAs
	name        string
	rawName     []uint16 // UTF-16 code units written instead of name
}

// guidBytes encodes a canonical GUID string in the UEFI mixed-endian layout.
func guidBytes(s string) [16]byte {
	var b [16]byte
	h := make([]byte, 0, 32)
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			h = append(h, s[i])
		}
	}
	var raw [16]byte
	for i := range 16 {
		var v byte
		for _, c := range h[2*i : 2*i+2] {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= c - '0'
			case c >= 'a' && c <= 'f':
				v |= c - 'a' + 10
			case c >= 'A' && c <= 'F':
				v |= c - 'A' + 10
			}
		}
		raw[i] = v
	}
	b[0], b[1], b[2], b[3] = raw[3], raw[2], raw[1], raw[0]
	b[4], b[5] = raw[5], raw[4]
	b[6], b[7] = raw[7], raw[6]
	copy(b[8:], raw[8:])
	return b
}

const (
	guidLinux    = "0fc63daf-8483-4772-8e79-3d69d8477de4"
	guidBIOSBoot = "21686148-6449-6e49-6f74-656e65656646"
	guidLVM      = "e6d6d379-f507-44c2-a23c-238f2a3df928"
)

// gptOpts lets tests break a GPT in specific ways.
type gptOpts struct {
	sectorSize    int64
	numEntries    uint32 // default 128
	entrySize     uint32 // default 128
	badPrimaryCRC bool
	badBackupCRC  bool
	badArrayCRC   bool // primary array only
	badBackupArr  bool // backup array only
	noPMBR        bool
	// editHeader changes a header (primary and backup alike) before its
	// CRC is computed, so the damage is in the fields, not the CRC.
	editHeader func(h []byte)
}

// writeGPT writes a protective MBR and primary and backup GPTs to img.
func writeGPT(img *sparseImage, parts []gptPart, o gptOpts) {
	ss := o.sectorSize
	if ss == 0 {
		ss = 512
	}
	if o.numEntries == 0 {
		o.numEntries = 128
	}
	if o.entrySize == 0 {
		o.entrySize = 128
	}
	lbas := uint64(img.size / ss)
	// An absurd entry count only needs to be claimed, not written.
	arr := make([]byte, min(int(o.numEntries)*int(o.entrySize), 1<<20))
	for i, p := range parts {
		e := arr[i*int(o.entrySize):]
		copy(e[0:], p.typ[:])
		e[16] = byte(i + 1) // unique GUID, any non-zero value
		binary.LittleEndian.PutUint64(e[32:], p.first)
		binary.LittleEndian.PutUint64(e[40:], p.last)
		name := p.rawName
		if name == nil {
			for _, r := range p.name {
				name = append(name, uint16(r))
			}
		}
		for j, u := range name[:min(len(name), 36)] {
			binary.LittleEndian.PutUint16(e[56+2*j:], u)
		}
	}
	arrSectors := (uint64(len(arr)) + uint64(ss) - 1) / uint64(ss)
	if !o.noPMBR {
		cnt := uint32(0xFFFFFFFF)
		if lbas-1 < uint64(cnt) {
			cnt = uint32(lbas - 1)
		}
		img.write(0, mbrSector(mbrPart{typ: 0xEE, start: 1, count: cnt}))
	}
	header := func(my, alt, entryLBA uint64, badCRC bool) []byte {
		h := make([]byte, ss)
		copy(h, "EFI PART")
		binary.LittleEndian.PutUint32(h[8:], 0x00010000)
		binary.LittleEndian.PutUint32(h[12:], 92)
		binary.LittleEndian.PutUint64(h[24:], my)
		binary.LittleEndian.PutUint64(h[32:], alt)
		binary.LittleEndian.PutUint64(h[40:], 2+arrSectors)
		binary.LittleEndian.PutUint64(h[48:], lbas-2-arrSectors)
		h[56] = 0x42 // disk GUID
		binary.LittleEndian.PutUint64(h[72:], entryLBA)
		binary.LittleEndian.PutUint32(h[80:], o.numEntries)
		binary.LittleEndian.PutUint32(h[84:], o.entrySize)
		binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(arr))
		if o.editHeader != nil {
			o.editHeader(h)
		}
		hs := min(max(int64(binary.LittleEndian.Uint32(h[12:])), 92), ss)
		crc := crc32.ChecksumIEEE(h[:hs])
		if badCRC {
			crc++
		}
		binary.LittleEndian.PutUint32(h[16:], crc)
		return h
	}
	img.write(ss, header(1, lbas-1, 2, o.badPrimaryCRC))
	primaryArr := arr
	if o.badArrayCRC {
		primaryArr = append([]byte(nil), arr...)
		primaryArr[0] ^= 0xFF
	}
	img.write(2*ss, primaryArr)
	backupArrLBA := lbas - 1 - arrSectors
	backupArr := arr
	if o.badBackupArr {
		backupArr = append([]byte(nil), arr...)
		backupArr[0] ^= 0xFF
	}
	img.write(int64(backupArrLBA)*ss, backupArr)
	img.write(int64(lbas-1)*ss, header(lbas-1, 1, backupArrLBA, o.badBackupCRC))
}

// --- file system superblocks ---

// extSuper returns the 1024-byte ext superblock for the given features.
func extSuper(compat, incompat, roCompat uint32, label string) []byte {
	sb := make([]byte, 1024)
	le := binary.LittleEndian
	le.PutUint32(sb[0x4:], 16384)  // s_blocks_count_lo
	le.PutUint32(sb[0x18:], 2)     // s_log_block_size: 4 KiB
	le.PutUint32(sb[0x20:], 32768) // s_blocks_per_group
	le.PutUint16(sb[0x38:], 0xEF53)
	le.PutUint32(sb[0x4C:], 1) // s_rev_level
	le.PutUint32(sb[0x5C:], compat)
	le.PutUint32(sb[0x60:], incompat)
	le.PutUint32(sb[0x64:], roCompat)
	for i := range 16 {
		sb[0x68+i] = byte(0x10 + i)
	}
	copy(sb[0x78:0x88], label)
	return sb
}

// Feature sets as mke2fs writes them by default for each type
// (e2fsprogs misc/mke2fs.conf).
var (
	ext2Feat = [3]uint32{0x38, 0x2, 0x3}     // ext_attr,resize_inode,dir_index; filetype; sparse_super,large_file
	ext3Feat = [3]uint32{0x3C, 0x2, 0x3}     // + has_journal
	ext4Feat = [3]uint32{0x3C, 0x2C2, 0x46B} // + extents,64bit,flex_bg; huge_file,dir_nlink,extra_isize,metadata_csum
)

func writeExt(img *sparseImage, off int64, f [3]uint32, label string) {
	img.write(off+1024, extSuper(f[0], f[1], f[2], label))
}

func writeXFS(img *sparseImage, off int64, label string) {
	sb := make([]byte, 512)
	be := binary.BigEndian
	copy(sb, "XFSB")
	be.PutUint32(sb[4:], 4096)
	be.PutUint64(sb[8:], 76800)
	for i := range 16 {
		sb[32+i] = byte(0xA0 + i)
	}
	be.PutUint16(sb[100:], 0xB4A5)
	be.PutUint16(sb[102:], 512)
	copy(sb[108:120], label)
	img.write(off, sb)
}

func btrfsSuper(label []byte) []byte {
	sb := make([]byte, 4096)
	le := binary.LittleEndian
	for i := range 16 {
		sb[32+i] = byte(0xB0 + i)
	}
	le.PutUint64(sb[48:], 0x10000)
	copy(sb[64:], btrfsMagic)
	le.PutUint32(sb[144:], 4096)
	le.PutUint32(sb[148:], 16384)
	le.PutUint32(sb[152:], 16384)
	copy(sb[299:299+256], label)
	le.PutUint32(sb[0:], crc32.Checksum(sb[32:], crc32.MakeTable(crc32.Castagnoli)))
	return sb
}

func writeBtrfs(img *sparseImage, off int64, label string) {
	img.write(off+0x10000, btrfsSuper([]byte(label)))
}

func writeLVM2(img *sparseImage, off int64) {
	s := make([]byte, 512)
	copy(s, "LABELONE")
	binary.LittleEndian.PutUint64(s[8:], 1)
	copy(s[24:], "LVM2 001")
	img.write(off+512, s)
}

func writeLUKS(img *sparseImage, off int64, version uint16) {
	h := make([]byte, 592)
	copy(h, "LUKS\xba\xbe")
	binary.BigEndian.PutUint16(h[6:], version)
	copy(h[168:], "0b8a2b1c-6c69-4a41-9c3a-2b7b0c3d4e5f")
	img.write(off, h)
}

func writeSwap(img *sparseImage, off int64) {
	img.write(off+4096-10, []byte("SWAPSPACE2"))
}

// --- qcow2 ---

type qcowOpts struct {
	version     int // 2 or 3
	clusterBits int
	extL2       bool
	// compress stores guest clusters for which it returns true with
	// deflate when that makes them smaller.
	compress func(gc int64) bool
	// zeroFlag marks all-zero guest clusters with the zero flag (v3) or
	// zero subcluster bits (extended L2) instead of leaving them
	// unallocated.
	zeroFlag      bool
	backing       string
	backingFormat string
	cryptMethod   uint32
	incompat      uint64 // extra incompatible bits
}

type qcowImage struct {
	data []byte
	meta []Range // metadata clusters, sorted and merged
	cs   int64
}

// buildQcow2 lays out a qcow2 image for the guest contents guest (of
// virtual size len(guest)): header cluster, L1 table, refcount table, then
// L2 tables and data clusters in guest order, then refcount blocks with
// exact refcounts, so that the result passes "qemu-img check".
func buildQcow2(guest []byte, o qcowOpts) qcowImage {
	if o.version == 0 {
		o.version = 3
	}
	if o.clusterBits == 0 {
		o.clusterBits = 16
	}
	cs := int64(1) << o.clusterBits
	es := int64(8)
	if o.extL2 {
		es = 16
	}
	l2Entries := cs / es
	size := int64(len(guest))
	nGuest := (size + cs - 1) / cs
	l1Size := (nGuest + l2Entries - 1) / l2Entries
	l1Clusters := max(1, (l1Size*8+cs-1)/cs)

	var out bytes.Buffer
	grow := func(n int64) int64 { // allocate n bytes, cluster-aligned
		off := int64(out.Len())
		out.Write(make([]byte, (n+cs-1)/cs*cs))
		return off
	}
	refs := map[int64]int{} // host cluster index -> refcount
	alloc := func(n int64) int64 {
		off := grow(n)
		for c := off / cs; c < (off+n+cs-1)/cs; c++ {
			refs[c]++
		}
		return off
	}
	var meta []Range
	addMeta := func(off, n int64) { meta = append(meta, Range{off, off + (n+cs-1)/cs*cs}) }

	hdr := alloc(cs)
	addMeta(hdr, cs)
	l1Off := alloc(l1Clusters * cs)
	addMeta(l1Off, l1Clusters*cs)
	rtOff := alloc(cs)
	addMeta(rtOff, cs)

	l1 := make([]uint64, l1Size)
	l2s := map[int64][]byte{}
	be := binary.BigEndian
	for gc := range nGuest {
		chunk := guest[gc*cs : min((gc+1)*cs, size)]
		full := make([]byte, cs)
		copy(full, chunk)
		zero := allZero(full)
		if zero && !o.zeroFlag {
			continue
		}
		l1i := gc / l2Entries
		if l1[l1i] == 0 {
			off := alloc(cs)
			addMeta(off, cs)
			l1[l1i] = uint64(off) | 1<<63
			l2s[off] = make([]byte, cs)
		}
		e := l2s[int64(l1[l1i]&qcowOffsetMask)][(gc%l2Entries)*es:]
		switch {
		case zero && o.extL2:
			be.PutUint64(e[8:], 0xFFFFFFFF<<32)
			continue
		case zero:
			be.PutUint64(e, 1) // zero flag
			continue
		}
		if o.compress != nil && o.compress(gc) {
			var z bytes.Buffer
			w, _ := flate.NewWriter(&z, flate.BestCompression)
			w.Write(full)
			w.Close()
			if int64(z.Len()) < cs {
				off := alloc(int64(z.Len()))
				copy(out.Bytes()[off:], z.Bytes())
				x := 62 - (o.clusterBits - 8)
				extra := uint64((int64(z.Len())+511)/512 - 1)
				be.PutUint64(e, qcowCompressed|extra<<x|uint64(off))
				continue
			}
		}
		off := alloc(cs)
		copy(out.Bytes()[off:], full)
		be.PutUint64(e, uint64(off)|1<<63)
		if o.extL2 {
			var bm uint64
			sub := cs / 32
			for i := range int64(32) {
				if allZero(full[i*sub : (i+1)*sub]) {
					bm |= 1 << (32 + i)
				} else {
					bm |= 1 << i
				}
			}
			be.PutUint64(e[8:], bm)
		}
	}
	// Refcount blocks, 16-bit entries: each covers cs/2 clusters. They
	// must count themselves.
	perBlock := cs / 2
	total := int64(out.Len()) / cs
	nBlocks := int64(0)
	for (total+nBlocks+perBlock-1)/perBlock > nBlocks {
		nBlocks++
	}
	rbOff := alloc(nBlocks * cs)
	addMeta(rbOff, nBlocks*cs)
	img := out.Bytes()
	for i := range nBlocks {
		be.PutUint64(img[rtOff+8*i:], uint64(rbOff+i*cs))
	}
	for c, n := range refs {
		be.PutUint16(img[rbOff+2*c:], uint16(n))
	}
	for i, e := range l1 {
		be.PutUint64(img[l1Off+8*int64(i):], e)
	}
	for off, l2 := range l2s {
		copy(img[off:], l2)
	}

	// Header (docs/interop/qcow2.txt "Header").
	h := img[hdr:]
	copy(h, qcowMagic)
	be.PutUint32(h[4:], uint32(o.version))
	be.PutUint32(h[20:], uint32(o.clusterBits))
	be.PutUint64(h[24:], uint64(size))
	be.PutUint32(h[32:], o.cryptMethod)
	be.PutUint32(h[36:], uint32(l1Size))
	be.PutUint64(h[40:], uint64(l1Off))
	be.PutUint64(h[48:], uint64(rtOff))
	be.PutUint32(h[56:], 1)
	ext := 72
	if o.version == 3 {
		inc := o.incompat
		if o.extL2 {
			inc |= incompatExtL2
		}
		be.PutUint64(h[72:], inc)
		be.PutUint32(h[96:], 4)
		be.PutUint32(h[100:], 104)
		ext = 104
	}
	if o.backingFormat != "" {
		be.PutUint32(h[ext:], extBackingFormat)
		be.PutUint32(h[ext+4:], uint32(len(o.backingFormat)))
		copy(h[ext+8:], o.backingFormat)
		ext += 8 + (len(o.backingFormat)+7)&^7
	}
	ext += 8 // end-of-extensions marker (zeros)
	if o.backing != "" {
		be.PutUint64(h[8:], uint64(ext))
		be.PutUint32(h[16:], uint32(len(o.backing)))
		copy(h[ext:], o.backing)
	}
	return qcowImage{data: img, meta: mergeRanges(meta), cs: cs}
}

func mergeRanges(rs []Range) []Range {
	rs = append([]Range(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	var out []Range
	for _, r := range rs {
		if n := len(out); n > 0 && r.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// withSnapshotAndBitmap appends to a built v3 image without header
// extensions an internal snapshot whose L1 table is a copy of the active
// one, and a bitmaps extension with one bitmap whose table points at one
// data cluster. Everything appended is metadata.
func withSnapshotAndBitmap(q qcowImage) []byte {
	cs := q.cs
	d := append([]byte(nil), q.data...)
	be := binary.BigEndian
	grow := func() int64 {
		off := int64(len(d))
		d = append(d, make([]byte, cs)...)
		return off
	}
	// Snapshot L1 table: a copy of the active L1 (cluster 1).
	snapL1 := grow()
	copy(d[snapL1:snapL1+cs], d[cs:2*cs])
	// Snapshot table with one entry: ID "1", name "snap".
	snapTab := grow()
	e := d[snapTab:]
	be.PutUint64(e[0:], uint64(snapL1))
	be.PutUint32(e[8:], be.Uint32(d[36:]))
	be.PutUint16(e[12:], 1)
	be.PutUint16(e[14:], 4)
	be.PutUint32(e[36:], 16) // extra data: vm state size, disk size
	copy(e[40+16:], "1snap")
	be.PutUint32(d[60:], 1)
	be.PutUint64(d[64:], uint64(snapTab))
	// Bitmap: table of two entries, one pointing at a data cluster.
	bmData := grow()
	bmTable := grow()
	be.PutUint64(d[bmTable:], uint64(bmData))
	bmDir := grow()
	be.PutUint64(d[bmDir:], uint64(bmTable))
	be.PutUint32(d[bmDir+8:], 2)
	d[bmDir+16], d[bmDir+17] = 1, 16
	be.PutUint16(d[bmDir+18:], 2)
	copy(d[bmDir+24:], "b0")
	// Bitmaps header extension replaces the end marker at 104.
	ext := d[104:]
	be.PutUint32(ext[0:], extBitmaps)
	be.PutUint32(ext[4:], 24)
	be.PutUint32(ext[8:], 1)
	be.PutUint64(ext[16:], 32)
	be.PutUint64(ext[24:], uint64(bmDir))
	clear(ext[32:40])
	return d
}
