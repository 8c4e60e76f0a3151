package diskimage

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"strings"
)

// File system names reported in Info.GuestFS and Partition.FS.
const (
	FSExt2    = "ext2"
	FSExt3    = "ext3"
	FSExt4    = "ext4"
	FSXFS     = "xfs"
	FSBtrfs   = "btrfs"
	FSUnknown = "unknown"
)

// Reasons given when no file system is recognised. Other reasons exist (read
// errors, corrupt qcow2 metadata); these are the ones a caller may want to
// match on.
const (
	ReasonLVM2     = "lvm2 physical volume"
	ReasonLUKS     = "luks"
	ReasonSwap     = "swap"
	ReasonNoFS     = "no file system signature"
	ReasonEncQcow2 = "encrypted qcow2"
)

// maxLabelLen bounds labels and other strings copied out of the image.
const maxLabelLen = 64

// fsResult is what probeFS found in one region of the guest disk.
type fsResult struct {
	fs, label, uuid, reason string
}

// probeFS looks for a file system or a known non-file-system signature at
// the start of s. It reads at most a few KiB. Only errors from reading are
// returned; an unrecognised region is a result with a reason.
func probeFS(s section) (fsResult, error) {
	// The first 4 KiB hold the XFS superblock (offset 0), the ext superblock
	// (offset 1024), the LUKS header (offset 0), the LVM2 label (one of the
	// first four 512-byte sectors) and the swap signature for 4 KiB pages.
	head := make([]byte, 4096)
	if err := s.read(head, 0); err != nil {
		return fsResult{}, err
	}
	var found []fsResult
	if r, ok := probeExt(head[1024:2048]); ok {
		found = append(found, r)
	}
	if r, ok := probeXFS(head[:512]); ok {
		found = append(found, r)
	}
	// Btrfs keeps its primary superblock at 64 KiB
	// (btrfs-progs Documentation/dev/On-disk-format.rst, "Superblock").
	if s.size >= btrfsSuperOff+btrfsSuperLen {
		sb := make([]byte, btrfsSuperLen)
		if err := s.read(sb, btrfsSuperOff); err != nil {
			return fsResult{}, err
		}
		if r, ok := probeBtrfs(sb); ok {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
	default:
		// Two superblocks that both check out mean a stale one survived a
		// reformat; mounting would pick one by kernel probe order, which
		// this package has no business guessing.
		names := make([]string, len(found))
		for i, f := range found {
			names[i] = f.fs
		}
		return fsResult{fs: FSUnknown, reason: "ambiguous signatures: " + strings.Join(names, ", ")}, nil
	}
	if r, ok := probeLUKS(head); ok {
		return r, nil
	}
	if probeLVM2(head[:2048]) {
		return fsResult{fs: FSUnknown, reason: ReasonLVM2}, nil
	}
	ok, err := probeSwap(s, head)
	if err != nil {
		return fsResult{}, err
	}
	if ok {
		return fsResult{fs: FSUnknown, reason: ReasonSwap}, nil
	}
	if r := probeOther(head); r != "" {
		return fsResult{fs: FSUnknown, reason: r}, nil
	}
	return fsResult{fs: FSUnknown, reason: ReasonNoFS}, nil
}

// ext2/3/4 superblock, Linux Documentation/filesystems/ext4/super.rst. All
// fields little-endian; offsets relative to the superblock at byte 1024.
const (
	extMagic          = 0xEF53
	extCompatJournal  = 0x4 // COMPAT_HAS_JOURNAL
	extIncompatJDev   = 0x8 // INCOMPAT_JOURNAL_DEV: an external journal, not a file system
	extIncompatExt3OK = 0x2 | 0x4 | 0x10
	// FILETYPE | RECOVER | META_BG: the incompatible features an ext3
	// driver supports. Anything else (EXTENTS 0x40, 64BIT 0x80, FLEX_BG
	// 0x200, ...) needs ext4.
	extROCompatExt3OK = 0x1 | 0x2 | 0x4
	// SPARSE_SUPER | LARGE_FILE | BTREE_DIR; anything else (HUGE_FILE,
	// GDT_CSUM, DIR_NLINK, EXTRA_ISIZE, METADATA_CSUM, ...) needs ext4.
)

func probeExt(sb []byte) (fsResult, bool) {
	le := binary.LittleEndian
	if le.Uint16(sb[0x38:]) != extMagic {
		return fsResult{}, false
	}
	// s_log_block_size: block size is 1024 << n; the kernel accepts up to
	// 64 KiB. s_rev_level 0 or 1. A zero block count is not a file system.
	logBS := le.Uint32(sb[0x18:])
	rev := le.Uint32(sb[0x4C:])
	blocks := uint64(le.Uint32(sb[0x4:]))
	if logBS > 6 || rev > 1 || blocks == 0 || le.Uint32(sb[0x20:]) == 0 /* s_blocks_per_group */ {
		return fsResult{}, false
	}
	compat := le.Uint32(sb[0x5C:])
	incompat := le.Uint32(sb[0x60:])
	roCompat := le.Uint32(sb[0x64:])
	r := fsResult{
		uuid:  formatUUID(sb[0x68:0x78]),
		label: sanitize(sb[0x78:0x88], maxLabelLen),
	}
	switch {
	case incompat&extIncompatJDev != 0:
		return fsResult{fs: FSUnknown, reason: "ext journal device", uuid: r.uuid, label: r.label}, true
	case incompat&^extIncompatExt3OK != 0 || roCompat&^extROCompatExt3OK != 0:
		r.fs = FSExt4
	case compat&extCompatJournal != 0:
		r.fs = FSExt3
	default:
		r.fs = FSExt2
	}
	return r, true
}

// XFS superblock at byte 0, big-endian ("XFS Algorithms & Data
// Structures", On-disk Superblock): sb_magicnum 0, sb_blocksize 4,
// sb_dblocks 8, sb_uuid 32, sb_versionnum 100, sb_sectsize 102, sb_fname 108.
func probeXFS(sb []byte) (fsResult, bool) {
	be := binary.BigEndian
	if string(sb[0:4]) != "XFSB" {
		return fsResult{}, false
	}
	bs := be.Uint32(sb[4:])
	sect := uint32(be.Uint16(sb[102:]))
	ver := be.Uint16(sb[100:]) & 0xF
	if !pow2In(uint64(bs), 512, 65536) || !pow2In(uint64(sect), 512, 32768) || sect > bs ||
		be.Uint64(sb[8:]) == 0 || ver < 1 || ver > 5 {
		return fsResult{}, false
	}
	return fsResult{fs: FSXFS, uuid: formatUUID(sb[32:48]), label: sanitize(sb[108:120], maxLabelLen)}, true
}

// Btrfs superblock (btrfs-progs Documentation/dev/On-disk-format.rst),
// little-endian: csum 0..32, fsid 32, bytenr 48, magic 64, sectorsize 144,
// nodesize 148, csum_type 196, label 299 (256 bytes).
const (
	btrfsSuperOff = 64 << 10
	btrfsSuperLen = 4096
	btrfsMagic    = "_BHRfS_M"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func probeBtrfs(sb []byte) (fsResult, bool) {
	le := binary.LittleEndian
	if string(sb[64:72]) != btrfsMagic || le.Uint64(sb[48:]) != btrfsSuperOff {
		return fsResult{}, false
	}
	// sectorsize and nodesize are powers of two; nodesize is at least
	// 4 KiB and at least the sector size.
	sect := uint64(le.Uint32(sb[144:]))
	node := uint64(le.Uint32(sb[148:]))
	if !pow2In(sect, 512, 65536) || !pow2In(node, 4096, 65536) || node < sect {
		return fsResult{}, false
	}
	// csum_type 0 is crc32c over the rest of the 4 KiB superblock,
	// stored little-endian in the first 4 bytes. Other checksum types
	// (xxhash64, sha256, blake2b) are not verified.
	if le.Uint16(sb[196:]) == 0 {
		if crc32.Checksum(sb[32:], castagnoli) != le.Uint32(sb[0:]) {
			return fsResult{}, false
		}
	}
	return fsResult{fs: FSBtrfs, uuid: formatUUID(sb[32:48]), label: sanitize(sb[299:299+256], maxLabelLen)}, true
}

// LUKS1 and LUKS2 share the 6-byte magic and keep the UUID as a
// NUL-terminated string at byte 168 (cryptsetup on-disk-format documents).
func probeLUKS(h []byte) (fsResult, bool) {
	if !bytes.Equal(h[0:6], []byte("LUKS\xba\xbe")) {
		return fsResult{}, false
	}
	r := fsResult{fs: FSUnknown, reason: ReasonLUKS, uuid: sanitize(h[168:208], maxLabelLen)}
	if binary.BigEndian.Uint16(h[6:]) == 2 {
		r.label = sanitize(h[24:72], maxLabelLen)
	}
	return r, true
}

// An LVM2 physical volume carries a label in one of its first four sectors:
// "LABELONE" at byte 0 of the sector and the type "LVM2 001" at byte 24
// (lvm2 lib/label/label.h, struct label_header).
func probeLVM2(h []byte) bool {
	for off := 0; off+512 <= len(h); off += 512 {
		if string(h[off:off+8]) == "LABELONE" && string(h[off+24:off+32]) == "LVM2 001" {
			return true
		}
	}
	return false
}

// Linux swap ends its first page with "SWAPSPACE2" (or the old
// "SWAP-SPACE"), so the signature sits 10 bytes before the page end
// (include/linux/swap.h, union swap_header). The page size is the one of the
// guest that ran mkswap; try the common ones.
func probeSwap(s section, head []byte) (bool, error) {
	sig := make([]byte, 10)
	for _, page := range []int64{4096, 8192, 16384, 65536} {
		if page <= int64(len(head)) {
			copy(sig, head[page-10:page])
		} else if err := s.read(sig, page-10); err != nil {
			return false, err
		}
		if string(sig) == "SWAPSPACE2" || string(sig) == "SWAP-SPACE" {
			return true, nil
		}
	}
	return false, nil
}

// probeOther names a few more things a guest disk commonly holds, only so
// that Reason is informative. They are not reported as file systems.
func probeOther(h []byte) string {
	switch {
	case string(h[3:11]) == "NTFS    ":
		return "ntfs"
	case string(h[82:90]) == "FAT32   " || string(h[54:62]) == "FAT16   " || string(h[54:62]) == "FAT12   ":
		if binary.LittleEndian.Uint16(h[510:]) == 0xAA55 {
			return "vfat"
		}
	case string(h[0:4]) == "QFI\xfb":
		return "nested qcow2 image"
	}
	return ""
}

// sanitize turns bytes from the image into a string that is safe to put in
// a metric label or a log line: it stops at the first NUL (labels are
// NUL-padded), replaces every byte outside printable ASCII with '?', and
// keeps at most max bytes.
func sanitize(b []byte, max int) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) > max {
		b = b[:max]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out[i] = c
	}
	return strings.TrimSpace(string(out))
}

// formatUUID writes 16 bytes in the canonical 8-4-4-4-12 form, byte order
// as stored (ext, XFS and Btrfs store UUIDs as plain byte arrays). An
// all-zero UUID is reported as empty.
func formatUUID(b []byte) string {
	if len(b) != 16 || allZero(b) {
		return ""
	}
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// pow2In reports whether v is a power of two in [lo, hi].
func pow2In(v, lo, hi uint64) bool {
	return v >= lo && v <= hi && v&(v-1) == 0
}
