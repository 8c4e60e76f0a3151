package diskimage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"unicode/utf16"
)

// Partition table names reported in Info.PartitionTable.
const (
	TableNone    = "none"
	TableMBR     = "mbr"
	TableGPT     = "gpt"
	TableUnknown = "unknown"
)

// Limits on what the partition table may make us read or report.
const (
	// maxGPTArrayBytes caps the GPT partition entry array. The UEFI spec
	// asks for at least 16 KiB (128 entries of 128 bytes); common tools
	// write exactly that. 256 KiB leaves room for 2048 entries.
	maxGPTArrayBytes = 256 << 10
	// maxGPTEntrySize caps a single entry; the spec allows 128 * 2^n.
	maxGPTEntrySize = 4096
	// maxPartitions bounds the partitions reported and probed.
	maxPartitions = 128
	// maxLogical bounds the extended-partition chain walk.
	maxLogical = 64
	// maxNotes bounds Info.Notes.
	maxNotes = 16
)

// mbrEntry is one 16-byte partition record of an MBR or EBR (UEFI spec 2.10,
// table 5.2 "Legacy MBR Partition Record"): boot indicator at 0, OS type at 4,
// starting LBA at 8 and size in LBA at 12, both little-endian.
type mbrEntry struct {
	status, typ  byte
	start, count uint32
}

func parseMBR(sec []byte) (entries [4]mbrEntry, ok bool) {
	if binary.LittleEndian.Uint16(sec[510:]) != 0xAA55 {
		return entries, false
	}
	for i := range 4 {
		e := sec[446+16*i : 446+16*(i+1)]
		entries[i] = mbrEntry{
			status: e[0],
			typ:    e[4],
			start:  binary.LittleEndian.Uint32(e[8:]),
			count:  binary.LittleEndian.Uint32(e[12:]),
		}
		// The boot indicator is 0x00 or 0x80; anything else means
		// these 64 bytes are boot code or a file system's boot
		// sector, not a partition table.
		if e[0] != 0 && e[0] != 0x80 {
			return entries, false
		}
	}
	return entries, true
}

func isExtended(t byte) bool { return t == 0x05 || t == 0x0F || t == 0x85 }

// tableResult is what the partition table parsers hand back to Probe.
type tableResult struct {
	kind       string
	sectorSize int64
	diskGUID   string
	parts      []Partition
	notes      []string
}

func (t *tableResult) note(format string, a ...any) {
	if len(t.notes) < maxNotes {
		t.notes = append(t.notes, fmt.Sprintf(format, a...))
	}
}

// readTable finds the partition table of disk d. It returns kind TableNone
// when there is none; Probe then probes the whole disk for a file system.
func readTable(d section) (*tableResult, error) {
	res := &tableResult{kind: TableNone, sectorSize: 512}
	sec0 := make([]byte, 512)
	if err := d.read(sec0, 0); err != nil {
		return nil, err
	}
	entries, mbrOK := parseMBR(sec0)
	protective := false
	used := 0
	if mbrOK {
		for _, e := range entries {
			if e.typ == 0xEE {
				protective = true
			}
			if e.typ != 0 {
				used++
			}
		}
	}
	// A GPT disk starts with a protective MBR (UEFI 2.10 §5.2.3); hybrid
	// MBRs carry other entries besides the 0xEE one. GPT wins either way,
	// as it does for the Linux kernel. Look for a header even without a
	// protective MBR, in case the MBR was overwritten.
	for _, ss := range []int64{512, 4096} {
		g, err := readGPT(d, ss, protective, res)
		if err != nil {
			return nil, err
		}
		if g {
			return res, nil
		}
	}
	if protective {
		res.kind = TableUnknown
		res.note("protective MBR but no valid GPT header")
		return res, nil
	}
	if !mbrOK || used == 0 {
		return res, nil
	}
	// XFS keeps its superblock in sector 0 and a vfat/NTFS boot sector
	// ends in 0x55AA like an MBR: a file system there means the disk is
	// not partitioned, whatever bytes 446..509 happen to be.
	if _, ok := probeXFS(sec0); ok || probeOther(sec0) == "vfat" || probeOther(sec0) == "ntfs" {
		return res, nil
	}
	res.kind = TableMBR
	if err := readMBR(d, entries, res); err != nil {
		return nil, err
	}
	return res, nil
}

// readMBR lists the primary partitions and walks the extended partition's
// EBR chain. Each EBR holds the logical partition (start relative to the
// EBR) and a link to the next EBR (start relative to the extended partition).
// The walk is bounded by maxLogical and stops at the first EBR seen twice.
func readMBR(d section, entries [4]mbrEntry, res *tableResult) error {
	sectors := d.size / 512
	var ext *mbrEntry
	for i, e := range entries {
		if e.typ == 0 {
			continue
		}
		if e.start == 0 || e.count == 0 {
			res.note("mbr entry %d: empty extent", i+1)
			continue
		}
		p := Partition{Index: i + 1, Type: fmt.Sprintf("0x%02x", e.typ)}
		p.Start, p.Size = clipExtent(int64(e.start), int64(e.count), 512, sectors)
		if isExtended(e.typ) {
			p.FS, p.Reason = FSUnknown, reasonExtended
			if ext == nil {
				ext = &entries[i]
			}
		}
		res.parts = append(res.parts, p)
	}
	if ext == nil {
		return nil
	}
	seen := map[int64]bool{}
	base := int64(ext.start)
	next := base
	sec := make([]byte, 512)
	for n := 0; ; n++ {
		if n == maxLogical {
			res.note("extended partition chain longer than %d; stopped", maxLogical)
			return nil
		}
		if seen[next] {
			res.note("extended partition chain loops at sector %d", next)
			return nil
		}
		seen[next] = true
		if next >= sectors {
			res.note("extended partition chain points past the end of the disk")
			return nil
		}
		if err := d.read(sec, next*512); err != nil {
			return err
		}
		ebr, ok := parseMBR(sec)
		if !ok {
			res.note("invalid extended boot record at sector %d", next)
			return nil
		}
		if l := ebr[0]; l.typ != 0 && l.count != 0 && len(res.parts) < maxPartitions {
			p := Partition{Index: 5 + n, Type: fmt.Sprintf("0x%02x", l.typ)}
			p.Start, p.Size = clipExtent(next+int64(l.start), int64(l.count), 512, sectors)
			res.parts = append(res.parts, p)
		}
		link := ebr[1]
		if link.typ == 0 || link.start == 0 {
			return nil
		}
		next = base + int64(link.start)
	}
}

// clipExtent converts a sector extent to bytes, clipped to the disk. A
// partition starting past the end gets Start at the end and Size 0.
func clipExtent(start, count, sectorSize, sectors int64) (int64, int64) {
	if start >= sectors {
		return sectors * sectorSize, 0
	}
	if count > sectors-start {
		count = sectors - start
	}
	return start * sectorSize, count * sectorSize
}

// GPT header (UEFI 2.10 §5.3.2, table 5.5), little-endian.
type gptHeader struct {
	myLBA, altLBA         uint64
	firstUsable           uint64
	lastUsable            uint64
	diskGUID              []byte
	entryLBA              uint64
	numEntries, entrySize uint32
	entriesCRC            uint32
}

// parseGPTHeader checks the signature, the header size and the header
// CRC32 (computed with the CRC field zeroed).
func parseGPTHeader(sec []byte) (*gptHeader, string) {
	le := binary.LittleEndian
	if string(sec[0:8]) != "EFI PART" {
		return nil, "no signature"
	}
	hs := le.Uint32(sec[12:])
	if hs < 92 || int(hs) > len(sec) {
		return nil, fmt.Sprintf("header size %d out of range", hs)
	}
	h := make([]byte, hs)
	copy(h, sec[:hs])
	want := le.Uint32(h[16:])
	clear(h[16:20])
	if crc32.ChecksumIEEE(h) != want {
		return nil, "header CRC mismatch"
	}
	return &gptHeader{
		myLBA:       le.Uint64(sec[24:]),
		altLBA:      le.Uint64(sec[32:]),
		firstUsable: le.Uint64(sec[40:]),
		lastUsable:  le.Uint64(sec[48:]),
		diskGUID:    sec[56:72],
		entryLBA:    le.Uint64(sec[72:]),
		numEntries:  le.Uint32(sec[80:]),
		entrySize:   le.Uint32(sec[84:]),
		entriesCRC:  le.Uint32(sec[88:]),
	}, ""
}

// readGPT tries the primary header at LBA 1 and, if that is missing or bad
// and there is reason to expect a GPT, the backup header in the last LBA
// (UEFI 2.10 §5.3.2: "If the primary GPT is corrupt, software must check the
// last LBA of the device to see if it has a valid GPT Header").
func readGPT(d section, ss int64, protective bool, res *tableResult) (bool, error) {
	lbas := d.size / ss
	if lbas < 3 {
		return false, nil
	}
	sec := make([]byte, ss)
	if err := d.read(sec, ss); err != nil {
		return false, err
	}
	primarySig := string(sec[0:8]) == "EFI PART"
	ok, why, err := tryGPT(d, ss, sec, 1, res)
	if err != nil || ok {
		return ok, err
	}
	if !protective && !primarySig {
		return false, nil
	}
	if primarySig {
		res.note("gpt primary header (sector size %d) invalid: %s", ss, why)
	}
	if err := d.read(sec, (lbas-1)*ss); err != nil {
		return false, err
	}
	ok, why, err = tryGPT(d, ss, sec, uint64(lbas-1), res)
	if err != nil {
		return false, err
	}
	if ok {
		res.note("using backup gpt header")
		return true, nil
	}
	if string(sec[0:8]) == "EFI PART" {
		res.note("gpt backup header (sector size %d) invalid: %s", ss, why)
	}
	return false, nil
}

// tryGPT validates the header in sec, read from LBA at, and its entry array.
// On success it fills res.
func tryGPT(d section, ss int64, sec []byte, at uint64, res *tableResult) (bool, string, error) {
	h, why := parseGPTHeader(sec)
	if h == nil {
		return false, why, nil
	}
	lbas := uint64(d.size / ss)
	switch {
	case h.myLBA != at:
		return false, fmt.Sprintf("header says it is at LBA %d, found at %d", h.myLBA, at), nil
	case h.firstUsable > h.lastUsable || h.lastUsable >= lbas:
		return false, "usable LBA range outside the disk", nil
	case h.entrySize < 128 || h.entrySize > maxGPTEntrySize || h.entrySize&(h.entrySize-1) != 0:
		return false, fmt.Sprintf("entry size %d invalid", h.entrySize), nil
	case h.numEntries == 0 || uint64(h.numEntries)*uint64(h.entrySize) > maxGPTArrayBytes:
		return false, fmt.Sprintf("%d entries of %d bytes is out of range", h.numEntries, h.entrySize), nil
	}
	arrayLen := int64(h.numEntries) * int64(h.entrySize)
	if h.entryLBA == 0 || h.entryLBA >= lbas || uint64(arrayLen) > (lbas-h.entryLBA)*uint64(ss) {
		return false, "entry array outside the disk", nil
	}
	arr := make([]byte, arrayLen)
	if err := d.read(arr, int64(h.entryLBA)*ss); err != nil {
		return false, "", err
	}
	if crc32.ChecksumIEEE(arr) != h.entriesCRC {
		return false, "entry array CRC mismatch", nil
	}
	res.kind = TableGPT
	res.sectorSize = ss
	res.diskGUID = formatGUID(h.diskGUID)
	res.parts = res.parts[:0]
	le := binary.LittleEndian
	for i := range int(h.numEntries) {
		e := arr[i*int(h.entrySize):]
		if allZero(e[0:16]) {
			continue // unused entry
		}
		if len(res.parts) == maxPartitions {
			res.note("more than %d gpt partitions; the rest are ignored", maxPartitions)
			break
		}
		first, last := le.Uint64(e[32:]), le.Uint64(e[40:])
		p := Partition{Index: i + 1, Type: formatGUID(e[0:16]), PartUUID: formatGUID(e[16:32]), Name: gptName(e[56:128])}
		if last < first || first >= lbas {
			res.note("gpt entry %d: extent %d..%d invalid", i+1, first, last)
			p.Start, p.Size = int64(lbas)*ss, 0
		} else {
			// last is inclusive; both are < 2^64 and first < lbas,
			// so last-first+1 only overflows when last is huge, and
			// clipExtent caps the count at the disk anyway.
			count := last - first + 1
			if count == 0 || count > lbas {
				count = lbas
			}
			p.Start, p.Size = clipExtent(int64(first), int64(count), ss, int64(lbas))
		}
		res.parts = append(res.parts, p)
	}
	return true, "", nil
}

// formatGUID writes a GUID stored in the UEFI mixed-endian layout (UEFI 2.10
// appendix A: the first three fields little-endian, the rest as bytes) in
// canonical lower-case form.
func formatGUID(b []byte) string {
	if len(b) < 16 {
		return ""
	}
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x",
		binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint16(b[4:]),
		binary.LittleEndian.Uint16(b[6:]), b[8:10], b[10:16])
}

// gptName decodes the 36 UTF-16LE code units of a partition name and
// sanitises the result.
func gptName(b []byte) string {
	u := make([]uint16, 0, 36)
	for i := 0; i+1 < len(b) && i < 72; i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	var buf bytes.Buffer
	for _, r := range utf16.Decode(u) {
		if r < 0x80 {
			buf.WriteByte(byte(r))
		} else {
			buf.WriteByte('?')
		}
	}
	return sanitize(buf.Bytes(), maxLabelLen)
}

// reasonExtended marks the MBR extended partition container, which holds
// the logical partitions rather than a file system.
const reasonExtended = "extended partition"
