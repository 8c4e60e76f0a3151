package diskimage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Crafted hostile images. Each case states the exact outcome the parsers
// must give (TestCraftedProbe, TestCraftedQcow2Header, TestCraftedMetadata),
// and TestFuzzSeeds writes every case into the seed corpus of each fuzz
// target that reads that kind of input, so the fuzzers start from them.

// junk is 4 KiB of what a hostile guest puts in a label: quotes, newlines,
// backslashes, label-syntax characters, control bytes and invalid UTF-8
// (a lone continuation byte, a truncated sequence, an encoded surrogate).
var junk = func() string {
	const pattern = "\"q\"\n\\{}=,\xff\xc3(\xed\xa0\x80\t\r\x7f label\x1b[2J "
	return strings.Repeat(pattern, 4096/len(pattern)+1)[:4096]
}()

// junkSane is what sanitize makes of junk cut to n bytes.
func junkSane(n int) string { return sanitize([]byte(junk[:n]), n) }

// outcome is what a test asserts about an Info.
type outcome struct {
	Format, Table, FS, Reason string
	Label, UUID               string
	Part, Parts               int // GuestFSPartition, len(Partitions)
	Notes                     []string
	Backing, BackingFmt       string
}

func outcomeOf(info *Info) outcome {
	return outcome{
		Format: info.Format, Table: info.PartitionTable, FS: info.GuestFS, Reason: info.Reason,
		Label: info.FSLabel, UUID: info.FSUUID, Part: info.GuestFSPartition, Parts: len(info.Partitions),
		Notes: info.Notes, Backing: info.BackingFile, BackingFmt: info.BackingFormat,
	}
}

func (o outcome) equal(p outcome) bool {
	n1, n2 := o.Notes, p.Notes
	o.Notes, p.Notes = nil, nil
	return reflect.DeepEqual(o, p) && slices.Equal(n1, n2)
}

// metaOutcome is what a test asserts about Qcow2Metadata with the default
// cluster limit: the error, or the counts of the layout.
type metaOutcome struct {
	Err                       string
	Clusters, Skipped, Ranges int
	Truncated                 bool
}

// probeCase is a crafted image and what probing it must give. Cases whose
// meta is set are qcow2 images, also mapped by Qcow2Metadata.
type probeCase struct {
	name string
	img  *sparseImage
	want outcome
	meta *metaOutcome
}

const (
	uuidExt   = "10111213-1415-1617-1819-1a1b1c1d1e1f"
	uuidXFS   = "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"
	uuidBtrfs = "b0b1b2b3-b4b5-b6b7-b8b9-babbbcbdbebf"
	uuidLUKS  = "0b8a2b1c-6c69-4a41-9c3a-2b7b0c3d4e5f"
	diskGUID  = "00000042-0000-0000-0000-000000000000"
)

func raw(fs, reason string) outcome {
	return outcome{Format: FormatRaw, Table: TableNone, FS: fs, Reason: reason}
}

// fsCases are unpartitioned raw disks: superblocks and signatures.
func fsCases() []probeCase {
	var cs []probeCase
	add := func(name string, want outcome, fill func(*sparseImage)) {
		img := &sparseImage{size: 8 * mib}
		fill(img)
		cs = append(cs, probeCase{name: name, img: img, want: want})
	}
	le, be := binary.LittleEndian, binary.BigEndian
	ext := func(edit func(sb []byte)) func(*sparseImage) {
		return func(i *sparseImage) {
			sb := extSuper(ext4Feat[0], ext4Feat[1], ext4Feat[2], "e")
			edit(sb)
			i.write(1024, sb)
		}
	}
	xfs := func(edit func(sb []byte)) func(*sparseImage) {
		return func(i *sparseImage) {
			writeXFS(i, 0, "x")
			sb := make([]byte, 512)
			i.ReadAt(sb, 0)
			edit(sb)
			i.write(0, sb)
		}
	}
	btrfs := func(edit func(sb []byte), fixCRC bool) func(*sparseImage) {
		return func(i *sparseImage) {
			sb := btrfsSuper([]byte("b"))
			edit(sb)
			if fixCRC {
				le.PutUint32(sb[0:], crc32.Checksum(sb[32:], castagnoli))
			}
			i.write(btrfsSuperOff, sb)
		}
	}
	withLabel := func(o outcome, label, uuid string) outcome { o.Label, o.UUID = label, uuid; return o }

	add("ext2", withLabel(raw(FSExt2, ""), "e2", uuidExt), func(i *sparseImage) { writeExt(i, 0, ext2Feat, "e2") })
	add("ext3", withLabel(raw(FSExt3, ""), "e3", uuidExt), func(i *sparseImage) { writeExt(i, 0, ext3Feat, "e3") })
	add("ext4-quote-newline-label", withLabel(raw(FSExt4, ""), `a"b?c`, uuidExt), func(i *sparseImage) { writeExt(i, 0, ext4Feat, "a\"b\nc") })
	// 16 label bytes of junk, and 4 KiB of it right after the superblock.
	add("ext4-junk-label", withLabel(raw(FSExt4, ""), junkSane(16), uuidExt), func(i *sparseImage) {
		writeExt(i, 0, ext4Feat, junk[:16])
		i.write(2048, []byte(junk))
	})
	add("ext4-invalid-utf8-label", withLabel(raw(FSExt4, ""), "caf??", uuidExt), func(i *sparseImage) { writeExt(i, 0, ext4Feat, "caf\xc3\xa9") })
	add("ext4-zero-uuid", withLabel(raw(FSExt4, ""), "e", ""), ext(func(sb []byte) { clear(sb[0x68:0x78]) }))
	add("ext-log-block-size-7", raw(FSUnknown, ReasonNoFS), ext(func(sb []byte) { le.PutUint32(sb[0x18:], 7) }))
	add("ext-log-block-size-max", raw(FSUnknown, ReasonNoFS), ext(func(sb []byte) { le.PutUint32(sb[0x18:], 0xFFFFFFFF) }))
	add("ext-zero-blocks", raw(FSUnknown, ReasonNoFS), ext(func(sb []byte) { le.PutUint32(sb[0x4:], 0) }))
	add("ext-zero-blocks-per-group", raw(FSUnknown, ReasonNoFS), ext(func(sb []byte) { le.PutUint32(sb[0x20:], 0) }))
	add("ext-rev-2", raw(FSUnknown, ReasonNoFS), ext(func(sb []byte) { le.PutUint32(sb[0x4C:], 2) }))
	// Huge counts are not a reason to refuse: the kernel checks them
	// against the device, which this package does not second-guess.
	add("ext-huge-counts", withLabel(raw(FSExt4, ""), "e", uuidExt), ext(func(sb []byte) {
		le.PutUint32(sb[0x4:], 0xFFFFFFFF)
		le.PutUint32(sb[0x20:], 0xFFFFFFFF)
	}))
	add("ext-journal-dev", withLabel(raw(FSUnknown, "ext journal device"), "j", uuidExt), func(i *sparseImage) { writeExt(i, 0, [3]uint32{0, 0x8, 0}, "j") })

	add("xfs-quote-newline-label", withLabel(raw(FSXFS, ""), `x"?`, uuidXFS), func(i *sparseImage) { writeXFS(i, 0, "x\"\n") })
	add("xfs-junk-label", withLabel(raw(FSXFS, ""), junkSane(12), uuidXFS), func(i *sparseImage) { writeXFS(i, 0, junk[:12]) })
	add("xfs-block-size-max", raw(FSUnknown, ReasonNoFS), xfs(func(sb []byte) { be.PutUint32(sb[4:], 0xFFFFFFFF) }))
	add("xfs-block-size-0", raw(FSUnknown, ReasonNoFS), xfs(func(sb []byte) { be.PutUint32(sb[4:], 0) }))
	add("xfs-block-size-128k", raw(FSUnknown, ReasonNoFS), xfs(func(sb []byte) { be.PutUint32(sb[4:], 128<<10) }))
	add("xfs-block-size-not-pow2", raw(FSUnknown, ReasonNoFS), xfs(func(sb []byte) { be.PutUint32(sb[4:], 4097) }))
	add("xfs-sector-gt-block", raw(FSUnknown, ReasonNoFS), xfs(func(sb []byte) { be.PutUint32(sb[4:], 1024); be.PutUint16(sb[102:], 2048) }))
	add("xfs-zero-dblocks", raw(FSUnknown, ReasonNoFS), xfs(func(sb []byte) { be.PutUint64(sb[8:], 0) }))
	add("xfs-huge-dblocks", withLabel(raw(FSXFS, ""), "x", uuidXFS), xfs(func(sb []byte) { be.PutUint64(sb[8:], 1<<63) }))
	add("xfs-version-0", raw(FSUnknown, ReasonNoFS), xfs(func(sb []byte) { be.PutUint16(sb[100:], 0xB4A0) }))
	add("xfs-version-6", raw(FSUnknown, ReasonNoFS), xfs(func(sb []byte) { be.PutUint16(sb[100:], 0xB4A6) }))

	add("btrfs-junk-label", withLabel(raw(FSBtrfs, ""), junkSane(64), uuidBtrfs), func(i *sparseImage) { writeBtrfs(i, 0, junk[:256]) })
	add("btrfs-bad-nodesize", raw(FSUnknown, ReasonNoFS), btrfs(func(sb []byte) { le.PutUint32(sb[148:], 3) }, true))
	add("btrfs-sectorsize-0", raw(FSUnknown, ReasonNoFS), btrfs(func(sb []byte) { le.PutUint32(sb[144:], 0) }, true))
	add("btrfs-node-lt-sector", raw(FSUnknown, ReasonNoFS), btrfs(func(sb []byte) { le.PutUint32(sb[144:], 65536) }, true))
	add("btrfs-wrong-bytenr", raw(FSUnknown, ReasonNoFS), btrfs(func(sb []byte) { le.PutUint64(sb[48:], 0) }, true))
	add("btrfs-bad-crc", raw(FSUnknown, ReasonNoFS), btrfs(func(sb []byte) { sb[299] = 'c' }, false))
	// Checksum types other than crc32c are not verified.
	add("btrfs-sha256-unverified", withLabel(raw(FSBtrfs, ""), "c", uuidBtrfs), btrfs(func(sb []byte) { le.PutUint16(sb[196:], 2); sb[299] = 'c' }, false))

	add("lvm2", raw(FSUnknown, ReasonLVM2), func(i *sparseImage) { writeLVM2(i, 0) })
	add("luks1", withLabel(raw(FSUnknown, ReasonLUKS), "", uuidLUKS), func(i *sparseImage) { writeLUKS(i, 0, 1) })
	add("luks2-junk", withLabel(raw(FSUnknown, ReasonLUKS), junkSane(48), junkSane(40)), func(i *sparseImage) {
		writeLUKS(i, 0, 2)
		i.write(24, []byte(junk[:48]))
		i.write(168, []byte(junk[:40]))
	})
	add("swap", raw(FSUnknown, ReasonSwap), func(i *sparseImage) { writeSwap(i, 0) })
	add("swap-64k-pages", raw(FSUnknown, ReasonSwap), func(i *sparseImage) { i.write(65536-10, []byte("SWAP-SPACE")) })
	add("ambiguous-ext4-xfs", raw(FSUnknown, "ambiguous signatures: ext4, xfs"), func(i *sparseImage) {
		writeExt(i, 0, ext4Feat, "")
		writeXFS(i, 0, "")
	})
	add("ambiguous-journal-btrfs", raw(FSUnknown, "ambiguous signatures: unknown, btrfs"), func(i *sparseImage) {
		writeExt(i, 0, [3]uint32{0, 0x8, 0}, "")
		writeBtrfs(i, 0, "")
	})
	add("empty", raw(FSUnknown, ReasonNoFS), func(*sparseImage) {})
	return cs
}

// tableCases are raw disks with MBR or GPT partition tables.
func tableCases() []probeCase {
	var cs []probeCase
	add := func(name string, size int64, want outcome, fill func(*sparseImage)) {
		img := &sparseImage{size: size}
		fill(img)
		cs = append(cs, probeCase{name: name, img: img, want: want})
	}
	mbr := func(fs, reason string, part, parts int, notes ...string) outcome {
		o := outcome{Format: FormatRaw, Table: TableMBR, FS: fs, Reason: reason, Part: part, Parts: parts, Notes: notes}
		if fs == FSExt4 {
			o.Label, o.UUID = "l", uuidExt
		}
		return o
	}
	// Logical partitions at extended start 2048 + each EBR's index, each
	// 100 sectors at 63 sectors past its EBR, linked by links.
	ebrChain := func(links ...uint32) func(*sparseImage) {
		return func(i *sparseImage) {
			i.write(0, mbrSector(mbrPart{typ: 0x05, start: 2048, count: 100000}))
			for k, link := range links {
				i.write(int64(2048+k)*512, mbrSector(mbrPart{typ: 0x83, start: 63, count: 100}, mbrPart{typ: 0x05, start: link}))
			}
		}
	}
	add("mbr-ext4-xfs", 64*mib, outcome{Format: FormatRaw, Table: TableMBR, FS: FSXFS, Label: "root", UUID: uuidXFS, Part: 2, Parts: 2}, func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{status: 0x80, typ: 0x83, start: 2048, count: 4096}, mbrPart{typ: 0x83, start: 8192, count: 100000}))
		writeExt(i, 2048*512, ext4Feat, "boot")
		writeXFS(i, 8192*512, "root")
	})
	// Two primaries over the same sectors: both show the file system; the
	// first wins the tie.
	add("mbr-overlapping-primaries", 64*mib, mbr(FSExt4, "", 1, 2), func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{typ: 0x83, start: 2048, count: 4096}, mbrPart{typ: 0x83, start: 2048, count: 4096}))
		writeExt(i, 2048*512, ext4Feat, "l")
	})
	// An extended partition overlapping a primary whose first sector is
	// the EBR: the EBR is not a file system, the logical partition is.
	add("mbr-extended-over-primary", 64*mib, mbr(FSExt4, "", 5, 3), func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{typ: 0x83, start: 2048, count: 8192}, mbrPart{typ: 0x0F, start: 2048, count: 8192}))
		i.write(2048*512, mbrSector(mbrPart{typ: 0x83, start: 2048, count: 4096}))
		writeExt(i, 4096*512, ext4Feat, "l")
	})
	// Only the first extended partition is walked.
	add("mbr-two-extended", 64*mib, mbr(FSExt4, "", 5, 3), func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{typ: 0x05, start: 2048, count: 8192}, mbrPart{typ: 0x85, start: 2048, count: 8192}))
		i.write(2048*512, mbrSector(mbrPart{typ: 0x83, start: 2048, count: 4096}))
		writeExt(i, 4096*512, ext4Feat, "l")
	})
	add("mbr-ebr-loop", 64*mib, mbr(FSUnknown, ReasonNoFS, 0, 4, "extended partition chain loops at sector 2049"), ebrChain(1, 2, 1))
	add("mbr-ebr-self", 64*mib, mbr(FSUnknown, ReasonNoFS, 0, 3, "extended partition chain loops at sector 2049"), ebrChain(1, 1))
	add("mbr-ebr-past-end", 64*mib, mbr(FSUnknown, ReasonNoFS, 0, 2, "extended partition chain points past the end of the disk"), ebrChain(0x7FFFFFFF))
	add("mbr-ebr-long-chain", 64*mib, mbr(FSUnknown, ReasonNoFS, 0, 1+maxLogical, "extended partition chain longer than 64; stopped"), func(i *sparseImage) {
		links := make([]uint32, 100)
		for k := range links {
			links[k] = uint32(k + 1)
		}
		ebrChain(links...)(i)
	})
	add("mbr-ebr-invalid", 64*mib, mbr(FSUnknown, ReasonNoFS, 0, 2, "invalid extended boot record at sector 2049"), func(i *sparseImage) {
		ebrChain(1)(i)
		i.write(2049*512, []byte(junk[:512]))
	})
	add("mbr-logical-past-end", 64*mib, mbr(FSUnknown, "partition outside the disk", 0, 2), func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{typ: 0x05, start: 2048, count: 100000}))
		i.write(2048*512, mbrSector(mbrPart{typ: 0x83, start: 0xFFFFF000, count: 100}))
	})
	add("mbr-primary-past-end", 64*mib, mbr(FSUnknown, "partition outside the disk", 0, 1), func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{typ: 0x83, start: 0xFFFFFFFF, count: 0xFFFFFFFF}))
	})
	add("mbr-empty-extents", 64*mib, mbr(FSUnknown, "partition table lists no partitions", 0, 0,
		"mbr entry 1: empty extent", "mbr entry 2: empty extent"), func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{typ: 0x83, start: 0, count: 100}, mbrPart{typ: 0x83, start: 100, count: 0}))
	})
	// A boot indicator other than 0x00/0x80 means boot code, not a table.
	add("mbr-bad-status", 64*mib, raw(FSUnknown, ReasonNoFS), func(i *sparseImage) {
		i.write(0, mbrSector(mbrPart{status: 0x81, typ: 0x83, start: 2048, count: 4096}))
		writeExt(i, 2048*512, ext4Feat, "l")
	})

	gptOut := func(fs string, parts int, notes ...string) outcome {
		o := outcome{Format: FormatRaw, Table: TableGPT, FS: fs, Parts: parts, Notes: notes}
		switch fs {
		case FSBtrfs:
			o.Label, o.UUID, o.Part = "root", uuidBtrfs, 2
		case FSUnknown:
			o.Reason = ReasonNoFS
		}
		return o
	}
	gptOutside := func(parts int, notes ...string) outcome {
		o := gptOut(FSUnknown, parts, notes...)
		o.Reason = "partition outside the disk"
		return o
	}
	gptBad := func(notes ...string) outcome {
		r := "unreadable partition table"
		if len(notes) > 0 {
			r += ": " + notes[0]
		}
		return outcome{Format: FormatRaw, Table: TableUnknown, FS: FSUnknown, Reason: r, Notes: notes}
	}
	gpt := func(name string, size int64, want outcome, o gptOpts) {
		add(name, size, want, func(i *sparseImage) {
			ss := max(o.sectorSize, 512)
			writeGPT(i, []gptPart{
				{typ: guidBytes(guidLinux), first: uint64(mib / ss), last: uint64(4*mib/ss) - 1, name: "boot\n"},
				{typ: guidBytes(guidLinux), first: uint64(4 * mib / ss), last: uint64(size/ss) - 40, name: junk[:36]},
			}, o)
			writeExt(i, mib, ext4Feat, "boot")
			writeBtrfs(i, 4*mib, "root")
		})
	}
	gpt("gpt", 64*mib, gptOut(FSBtrfs, 2), gptOpts{numEntries: 4})
	gpt("gpt-4k", 64*mib, gptOut(FSBtrfs, 2), gptOpts{numEntries: 4, sectorSize: 4096})
	gpt("gpt-no-pmbr", 64*mib, gptOut(FSBtrfs, 2), gptOpts{numEntries: 4, noPMBR: true})
	gpt("gpt-bad-header-crc", 64*mib, gptOut(FSBtrfs, 2, "gpt primary header (sector size 512) invalid: header CRC mismatch", "using backup gpt header"),
		gptOpts{numEntries: 4, badPrimaryCRC: true})
	gpt("gpt-bad-entries-crc", 64*mib, gptOut(FSBtrfs, 2, "gpt primary header (sector size 512) invalid: entry array CRC mismatch", "using backup gpt header"),
		gptOpts{numEntries: 4, badArrayCRC: true})
	gpt("gpt-both-headers-bad", 64*mib, gptBad(
		"gpt primary header (sector size 512) invalid: header CRC mismatch",
		"gpt backup header (sector size 512) invalid: header CRC mismatch",
		"protective MBR but no valid GPT header"), gptOpts{numEntries: 4, badPrimaryCRC: true, badBackupCRC: true})
	gpt("gpt-both-arrays-bad", 64*mib, gptBad(
		"gpt primary header (sector size 512) invalid: entry array CRC mismatch",
		"gpt backup header (sector size 512) invalid: entry array CRC mismatch",
		"protective MBR but no valid GPT header"), gptOpts{numEntries: 4, badArrayCRC: true, badBackupArr: true})
	bothInvalid := func(why string) outcome {
		return gptBad("gpt primary header (sector size 512) invalid: "+why,
			"gpt backup header (sector size 512) invalid: "+why, "protective MBR but no valid GPT header")
	}
	gpt("gpt-absurd-count", 64*mib, bothInvalid("4294967295 entries of 128 bytes is out of range"), gptOpts{numEntries: 0xFFFFFFFF})
	gpt("gpt-4096-entries", 64*mib, bothInvalid("4096 entries of 128 bytes is out of range"), gptOpts{numEntries: 4096})
	gpt("gpt-zero-entries", 64*mib, bothInvalid("0 entries of 128 bytes is out of range"),
		gptOpts{numEntries: 4, editHeader: func(h []byte) { binary.LittleEndian.PutUint32(h[80:], 0) }})
	for _, es := range []uint32{0, 127, 129, 8192, 1 << 31} {
		gpt(fmt.Sprintf("gpt-entry-size-%d", es), 64*mib, bothInvalid(fmt.Sprintf("entry size %d invalid", es)),
			gptOpts{numEntries: 4, editHeader: func(h []byte) { binary.LittleEndian.PutUint32(h[84:], es) }})
	}
	gpt("gpt-header-size-91", 64*mib, bothInvalid("header size 91 out of range"),
		gptOpts{numEntries: 4, editHeader: func(h []byte) { binary.LittleEndian.PutUint32(h[12:], 91) }})
	gpt("gpt-header-size-513", 64*mib, bothInvalid("header size 513 out of range"),
		gptOpts{numEntries: 4, editHeader: func(h []byte) { binary.LittleEndian.PutUint32(h[12:], 513) }})
	gpt("gpt-my-lba-wrong", 64*mib, gptBad(
		"gpt primary header (sector size 512) invalid: header says it is at LBA 7, found at 1",
		"gpt backup header (sector size 512) invalid: header says it is at LBA 7, found at 131071",
		"protective MBR but no valid GPT header"),
		gptOpts{numEntries: 4, editHeader: func(h []byte) { binary.LittleEndian.PutUint64(h[24:], 7) }})
	gpt("gpt-usable-past-end", 64*mib, bothInvalid("usable LBA range outside the disk"),
		gptOpts{numEntries: 4, editHeader: func(h []byte) { binary.LittleEndian.PutUint64(h[48:], 1<<40) }})
	gpt("gpt-array-past-end", 64*mib, bothInvalid("entry array outside the disk"),
		gptOpts{numEntries: 4, editHeader: func(h []byte) {
			binary.LittleEndian.PutUint64(h[72:], 131071)
			binary.LittleEndian.PutUint32(h[80:], 128)
		}})
	gpt("gpt-huge-disk", 1<<44, gptOut(FSBtrfs, 2, "gpt primary header (sector size 512) invalid: header CRC mismatch", "using backup gpt header"),
		gptOpts{numEntries: 4, badPrimaryCRC: true})
	add("gpt-entry-past-end", 64*mib, gptOutside(1, "gpt entry 1: extent 4611686018427387904..18446744073709551615 invalid"), func(i *sparseImage) {
		writeGPT(i, []gptPart{{typ: guidBytes(guidLinux), first: 1 << 62, last: 1<<64 - 1}}, gptOpts{numEntries: 4})
	})
	add("gpt-entry-reversed", 64*mib, gptOutside(1, "gpt entry 1: extent 5000..4000 invalid"), func(i *sparseImage) {
		writeGPT(i, []gptPart{{typ: guidBytes(guidLinux), first: 5000, last: 4000}}, gptOpts{numEntries: 4})
	})
	add("gpt-entry-runs-past-end", 64*mib, gptOut(FSUnknown, 1), func(i *sparseImage) {
		writeGPT(i, []gptPart{{typ: guidBytes(guidLinux), first: 2048, last: 1<<64 - 1}}, gptOpts{numEntries: 4})
	})
	// 130 one-MiB partitions: the first 128 are listed.
	add("gpt-130-partitions", 256*mib, gptOut(FSUnknown, maxPartitions, "more than 128 gpt partitions; the rest are ignored"), func(i *sparseImage) {
		parts := make([]gptPart, 130)
		for k := range parts {
			parts[k] = gptPart{typ: guidBytes(guidLinux), first: uint64(2048 + k*2048), last: uint64(2048 + k*2048 + 2047)}
		}
		writeGPT(i, parts, gptOpts{numEntries: 256})
	})
	// Names of lone surrogates, controls and non-ASCII code points.
	add("gpt-junk-names", 64*mib, outcome{Format: FormatRaw, Table: TableGPT, FS: FSExt4, Label: "boot", UUID: uuidExt, Part: 1, Parts: 2}, func(i *sparseImage) {
		writeGPT(i, []gptPart{
			{typ: guidBytes(guidLinux), first: 2048, last: 8191, rawName: []uint16{0xD800, 'a', 0xDC00, '\n', '"', 0xFFFF, 0x00E9, 0x202E}},
			{typ: guidBytes(guidLinux), first: 8192, last: 9000, name: junk[:36]},
		}, gptOpts{numEntries: 4})
		writeExt(i, 2048*512, ext4Feat, "boot")
	})
	return cs
}

// qcowCases are qcow2 images, 512-byte clusters unless said otherwise,
// with ext4 in the guest, and hostile edits of them.
func qcowCases() []probeCase {
	guest := &sparseImage{size: 128 << 10}
	writeExt(guest, 0, ext4Feat, "q")
	g := guest.bytes()
	var cs []probeCase
	add := func(name string, data []byte, want outcome, meta metaOutcome, edit func([]byte)) {
		d := append([]byte(nil), data...)
		if edit != nil {
			edit(d)
		}
		img := &sparseImage{size: int64(len(d))}
		img.write(0, d)
		cs = append(cs, probeCase{name: name, img: img, want: want, meta: &meta})
	}
	be := binary.BigEndian
	q := func(fs, reason string) outcome {
		o := outcome{Format: FormatQcow2, Table: TableNone, FS: fs, Reason: reason}
		if fs == FSExt4 {
			o.Label, o.UUID = "q", uuidExt
		}
		return o
	}
	// badTable: guest cluster 0 cannot be read, so neither can the
	// partition table.
	badTable := func(reason string) outcome {
		return outcome{Format: FormatQcow2, Table: TableUnknown, FS: FSUnknown, Reason: reason}
	}
	bad := func(reason string) outcome {
		return outcome{Format: FormatQcow2, Table: TableNone, FS: FSUnknown, Reason: reason}
	}
	withBacking := func(o outcome, name, format string) outcome { o.Backing, o.BackingFmt = name, format; return o }
	const unalloc = ReasonNoFS + " (backing file not opened; clusters unallocated in this image read as zeros)"
	// The v3 image is 6 clusters: header, L1 (4 entries; L1[0] = L2 at
	// 1536), refcount table (-> block at 2560), L2, data (guest cluster 2,
	// the ext superblock), refcount block.
	v3 := buildQcow2(g, qcowOpts{clusterBits: 9, backing: "base\"\n.qcow2", backingFormat: "qcow2"}).data
	plain := buildQcow2(g, qcowOpts{clusterBits: 9}).data
	// Header, L1, L2, refcount table and block; a backing file name
	// counts the header cluster a second time.
	full := metaOutcome{Clusters: 5, Ranges: 2}
	fullB := metaOutcome{Clusters: 6, Ranges: 2}
	add("qcow2-v3", v3, withBacking(q(FSExt4, ""), `base"?.qcow2`, "qcow2"), fullB, nil)
	add("qcow2-v2", buildQcow2(g, qcowOpts{version: 2, clusterBits: 9}).data, q(FSExt4, ""), full, nil)
	add("qcow2-compressed", buildQcow2(g, qcowOpts{clusterBits: 9, compress: func(int64) bool { return true }}).data, q(FSExt4, ""),
		metaOutcome{Clusters: 5, Ranges: 2}, nil)
	add("qcow2-zero-flag", buildQcow2(g, qcowOpts{clusterBits: 9, zeroFlag: true}).data, q(FSExt4, ""), metaOutcome{Clusters: 8, Ranges: 2}, nil)
	add("qcow2-extended-l2", buildQcow2(g, qcowOpts{clusterBits: 14, extL2: true}).data, q(FSExt4, ""), metaOutcome{Clusters: 5, Ranges: 2}, nil)
	// In version 2 bit 0 of an L2 entry is no zero flag: the cluster is read.
	add("qcow2-v2-zero-bit-ignored", buildQcow2(g, qcowOpts{version: 2, clusterBits: 9}).data, q(FSExt4, ""), full,
		func(d []byte) { d[1552+7] |= 1 })

	// Truncated at field boundaries of the header.
	for _, n := range []int{3, 4, 71, 72, 103} {
		want := bad(fmt.Sprintf("corrupt qcow2 image: file of %d bytes is shorter than the header", n))
		err := want.Reason
		if n < 4 {
			want = raw(FSUnknown, ReasonNoFS)
			want.Format = FormatRaw
			err = "map qcow2 metadata: not a qcow2 image"
		} else {
			err = "map qcow2 metadata: " + err
		}
		add(fmt.Sprintf("qcow2-truncated-%d", n), plain[:n], want, metaOutcome{Err: err}, nil)
	}
	// 104 bytes hold the whole v3 header: the tables lie past the end and
	// read as zeros.
	add("qcow2-truncated-104", plain[:104], q(FSUnknown, ReasonNoFS), metaOutcome{Clusters: 1, Ranges: 1, Skipped: 2}, nil)

	for _, cb := range []uint32{0, 8, 22, 31, 0xFFFFFFFF} {
		r := fmt.Sprintf("corrupt qcow2 image: cluster_bits %d outside 9..21", cb)
		add(fmt.Sprintf("qcow2-cluster-bits-%d", cb), plain, bad(r), metaOutcome{Err: "map qcow2 metadata: " + r},
			func(d []byte) { be.PutUint32(d[20:], cb) })
	}
	for _, v := range []uint32{0, 4, 0xFFFFFFFF} {
		r := fmt.Sprintf("unsupported qcow2 feature: qcow version %d", v)
		add(fmt.Sprintf("qcow2-version-%d", v), plain, bad(r), metaOutcome{Err: "map qcow2 metadata: " + r},
			func(d []byte) { be.PutUint32(d[4:], v) })
	}
	add("qcow2-version-1", plain, outcome{Format: FormatUnknown, Table: TableNone, FS: FSUnknown, Reason: "qcow version 1 image"},
		metaOutcome{Err: "map qcow2 metadata: unsupported qcow2 feature: qcow version 1"}, func(d []byte) { be.PutUint32(d[4:], 1) })

	// L1 and L2 tables pointing where they should not.
	add("qcow2-l1-huge-offsets", v3, withBacking(q(FSUnknown, unalloc), `base"?.qcow2`, "qcow2"), metaOutcome{Clusters: 5, Skipped: 4, Ranges: 2},
		func(d []byte) {
			for i := 512; i < 1024; i += 8 {
				be.PutUint64(d[i:], 0x00fffffffffffe00)
			}
		})
	add("qcow2-l1-past-eof", plain, q(FSUnknown, ReasonNoFS), metaOutcome{Clusters: 3, Skipped: 1, Ranges: 3},
		func(d []byte) { be.PutUint64(d[40:], 1<<40) })
	add("qcow2-l2-past-eof", plain, q(FSUnknown, ReasonNoFS), metaOutcome{Clusters: 4, Ranges: 2, Skipped: 1},
		func(d []byte) { be.PutUint64(d[512:], 1<<63|1<<40) })
	add("qcow2-data-past-eof", plain, q(FSUnknown, ReasonNoFS), full, func(d []byte) { be.PutUint64(d[1552:], 1<<63|1<<40) })
	// The L2 table is the L1 table; its entry for guest cluster 2 is 0.
	add("qcow2-l2-is-l1", v3, withBacking(q(FSUnknown, unalloc), `base"?.qcow2`, "qcow2"), metaOutcome{Clusters: 6, Ranges: 2},
		func(d []byte) { be.PutUint64(d[512:], 512) })
	// Guest clusters mapped onto the header, L1, refcount and L2 tables
	// themselves: the guest sees table bytes, and no file system.
	add("qcow2-data-is-tables", plain, q(FSUnknown, ReasonNoFS), full, func(d []byte) {
		for i := 0; i < 64; i++ {
			be.PutUint64(d[1536+8*i:], 1<<63|uint64(512*(1+i%3)))
		}
	})
	// Every L1 entry shares the one L2 table.
	add("qcow2-l1-shared-l2", plain, q(FSExt4, ""), full, func(d []byte) {
		for i := 0; i < 4; i++ {
			be.PutUint64(d[512+8*i:], 1<<63|1536)
		}
	})
	// With 512-byte clusters every offset the entry bits can hold is
	// aligned; with 4 KiB clusters (header, L1 at 4096, refcount table,
	// L2 at 12288, data at 16384, refcount block) it need not be.
	plain12 := buildQcow2(g, qcowOpts{clusterBits: 12}).data
	add("qcow2-l2-unaligned", plain12, badTable("corrupt qcow2 image: L2 table offset 0x3200 not cluster-aligned"),
		metaOutcome{Clusters: 4, Ranges: 2, Skipped: 1}, func(d []byte) { be.PutUint64(d[4096:], 1<<63|0x3200) })
	add("qcow2-data-unaligned", plain12, badTable("corrupt qcow2 image: data cluster offset 0x4200 not cluster-aligned"), full,
		func(d []byte) { be.PutUint64(d[12288:], 1<<63|0x4200) })
	add("qcow2-l1-size-max", v3, withBacking(q(FSExt4, ""), `base"?.qcow2`, "qcow2"), metaOutcome{Clusters: 11, Skipped: 10, Ranges: 1},
		func(d []byte) { be.PutUint32(d[36:], 1<<22) })
	add("qcow2-l1-size-over-max", plain, q(FSUnknown, "corrupt qcow2 image: L1 table of 4194305 entries exceeds 33554432 bytes"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: L1 table of 4194305 entries exceeds 33554432 bytes"},
		func(d []byte) { be.PutUint32(d[36:], 1<<22+1) })
	add("qcow2-l1-too-small", plain, q(FSUnknown, "corrupt qcow2 image: L1 table of 1 entries cannot map 131072 bytes"), full,
		func(d []byte) { be.PutUint32(d[36:], 1) })
	// 2^37 bytes of virtual size need the largest L1 table QEMU allows.
	add("qcow2-huge-virtual-size", plain, q(FSExt4, ""), metaOutcome{Clusters: 10, Skipped: 10, Ranges: 1}, func(d []byte) {
		be.PutUint64(d[24:], 1<<37)
		be.PutUint32(d[36:], 1<<22)
	})
	add("qcow2-virtual-size-over-max", plain, q(FSUnknown, "corrupt qcow2 image: virtual size 9223372036854775807 too large"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: virtual size 9223372036854775807 too large"},
		func(d []byte) { be.PutUint64(d[24:], 1<<63-1) })

	// Refcount structures.
	add("qcow2-refcount-loop", v3, withBacking(q(FSExt4, ""), `base"?.qcow2`, "qcow2"), metaOutcome{Clusters: 6, Ranges: 1}, func(d []byte) {
		be.PutUint64(d[1024:], 1024) // the refcount table is its own block
	})
	add("qcow2-refcount-past-eof", plain, q(FSExt4, ""), metaOutcome{Clusters: 3, Skipped: 1, Ranges: 2},
		func(d []byte) { be.PutUint64(d[48:], 1<<40) })
	add("qcow2-refcount-huge", plain, q(FSExt4, ""),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: refcount table of 4294967295 clusters exceeds 8388608 bytes"},
		func(d []byte) { be.PutUint32(d[56:], 0xFFFFFFFF) })
	add("qcow2-refcount-order-7", plain, q(FSUnknown, "corrupt qcow2 image: refcount_order 7"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: refcount_order 7"}, func(d []byte) { be.PutUint32(d[96:], 7) })

	// Snapshots and bitmaps (Probe ignores both).
	add("qcow2-snapshots-in-header", v3, withBacking(q(FSExt4, ""), `base"?.qcow2`, "qcow2"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: snapshot 0 L1 table at 0x514649fb00000003"}, func(d []byte) {
			be.PutUint32(d[60:], 3)
			be.PutUint64(d[64:], 0)
		})
	add("qcow2-snapshots-many", plain, q(FSExt4, ""), metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: 65537 snapshots"},
		func(d []byte) { be.PutUint32(d[60:], 65537); be.PutUint64(d[64:], 2560) })
	// Snapshots that all name the active L1 table, which is as large as
	// QEMU allows (2^22 entries, 32 MiB; 2 MiB clusters): without a read
	// budget each snapshot would read it again.
	{
		const big = 2 << 20
		img := &sparseImage{size: 35 << 20}
		h := make([]byte, 112)
		copy(h, qcowMagic)
		be.PutUint32(h[4:], 3)
		be.PutUint32(h[20:], 21)
		be.PutUint64(h[24:], 1<<30)
		be.PutUint32(h[36:], 1<<22)
		be.PutUint64(h[40:], big)
		be.PutUint32(h[60:], 64)
		be.PutUint64(h[64:], 34<<20)
		be.PutUint32(h[96:], 4)
		be.PutUint32(h[100:], 104)
		img.write(0, h)
		for i := range int64(64) {
			e := make([]byte, 12)
			be.PutUint64(e, big)
			be.PutUint32(e[8:], 1<<22)
			img.write(34<<20+40*i, e)
		}
		meta := metaOutcome{Clusters: 34, Ranges: 1, Truncated: true}
		cs = append(cs, probeCase{name: "qcow2-snapshots-share-huge-l1", img: img, want: q(FSUnknown, ReasonNoFS), meta: &meta})
	}
	snap := withSnapshotAndBitmap(buildQcow2(g, qcowOpts{clusterBits: 9}))
	add("qcow2-snapshot-bitmap", snap, q(FSExt4, ""), metaOutcome{Clusters: 10, Ranges: 2}, nil)
	// The bitmap directory is the last cluster; its table claims 2^32-1
	// entries and the snapshot the largest L1 table.
	add("qcow2-bitmap-huge-table", snap, q(FSExt4, ""), metaOutcome{Clusters: 17, Skipped: 8, Ranges: 2}, func(d []byte) {
		be.PutUint32(d[len(d)-512+8:], 0xFFFFFFFF)
		snapTab := be.Uint64(d[64:])
		be.PutUint32(d[snapTab+8:], 1<<22)
	})

	// Header fields and extensions.
	add("qcow2-ext-overrun", v3, bad("corrupt qcow2 image: header extension 0xe2792aca of 4294967280 bytes overruns the header area"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: header extension 0xe2792aca of 4294967280 bytes overruns the header area"},
		func(d []byte) { be.PutUint32(d[108:], 0xFFFFFFF0) })
	add("qcow2-ext-duplicate", plain, bad("corrupt qcow2 image: duplicate header extension 0xe2792aca"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: duplicate header extension 0xe2792aca"}, func(d []byte) {
			for _, off := range []int{104, 112} {
				be.PutUint32(d[off:], extBackingFormat)
				be.PutUint32(d[off+4:], 0)
			}
		})
	// A rejected header yields nothing read from it, its backing file name
	// included; an encrypted image's header is accepted.
	add("qcow2-extended-l2-small-clusters", v3, bad("corrupt qcow2 image: extended L2 entries with 512-byte clusters"),
		metaOutcome{Clusters: 6, Ranges: 2}, func(d []byte) { d[79] |= incompatExtL2 })
	add("qcow2-encrypted-luks", v3, withBacking(bad(ReasonEncQcow2), `base"?.qcow2`, "qcow2"), metaOutcome{Clusters: 6, Ranges: 2}, func(d []byte) { d[35] = 2 })
	add("qcow2-crypt-method-3", plain, bad("unsupported qcow2 feature: crypt_method 3"),
		metaOutcome{Err: "map qcow2 metadata: unsupported qcow2 feature: crypt_method 3"}, func(d []byte) { d[35] = 3 })
	add("qcow2-header-length-99", plain, bad("corrupt qcow2 image: header_length 99"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: header_length 99"}, func(d []byte) { be.PutUint32(d[100:], 99) })
	add("qcow2-header-length-over-cluster", plain, bad("corrupt qcow2 image: header_length 1024"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: header_length 1024"}, func(d []byte) { be.PutUint32(d[100:], 1024) })
	add("qcow2-compression-mismatch", plain, bad("corrupt qcow2 image: compression type 0 does not match feature bit"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: compression type 0 does not match feature bit"},
		func(d []byte) { d[79] |= incompatCompression })
	add("qcow2-zstd", plain, q(FSUnknown, "unsupported qcow2 feature: compression type 1"), full, func(d []byte) {
		d[79] |= incompatCompression
		be.PutUint32(d[100:], 112)
		d[104] = 1
		be.PutUint64(d[1552:], 1<<62|2048) // guest cluster 2 compressed
	})
	// Guest cluster 0 is garbage deflate: not even the partition table
	// can be read.
	add("qcow2-compressed-max", v3, withBacking(outcome{Format: FormatQcow2, Table: TableUnknown, FS: FSUnknown,
		Reason: "corrupt qcow2 image: compressed cluster at 0x800: inflate: flate: corrupt input before offset 5"}, `base"?.qcow2`, "qcow2"),
		metaOutcome{Clusters: 6, Ranges: 2}, func(d []byte) {
			// Every L2 entry compressed with the longest length.
			for i := 1536; i < 2048; i += 8 {
				be.PutUint64(d[i:], 1<<62|1<<61|2048)
			}
		})
	add("qcow2-unknown-incompat", plain, bad("unsupported qcow2 feature: unknown incompatible features 0x8000000000000000"),
		full, func(d []byte) { d[72] = 0x80 })

	// Backing file names: the name is reported sanitised and never opened.
	withName := func(cb int, name string) []byte {
		return buildQcow2(g, qcowOpts{clusterBits: cb, backing: name, backingFormat: "qcow2"}).data
	}
	b12 := metaOutcome{Clusters: 5, Ranges: 2}
	add("qcow2-backing-1023-junk", withName(12, junk[:1023]), withBacking(q(FSExt4, ""), junkSane(1023), "qcow2"), metaOutcome{Clusters: 6, Ranges: 2}, nil)
	add("qcow2-backing-1024", withName(12, junk[:1024]), bad("corrupt qcow2 image: backing file name at 128, 1024 bytes"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: backing file name at 128, 1024 bytes"}, nil)
	add("qcow2-backing-4k-junk", withName(13, junk), bad("corrupt qcow2 image: backing file name at 128, 4096 bytes"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: backing file name at 128, 4096 bytes"}, nil)
	add("qcow2-backing-past-cluster", plain, bad("corrupt qcow2 image: backing file name at 513, 4 bytes"),
		metaOutcome{Err: "map qcow2 metadata: corrupt qcow2 image: backing file name at 513, 4 bytes"},
		func(d []byte) { be.PutUint64(d[8:], 513); be.PutUint32(d[16:], 4) })
	// A name over the header fields themselves.
	add("qcow2-backing-over-header", plain, withBacking(q(FSExt4, ""), "FI?", ""), metaOutcome{Clusters: 6, Ranges: 2},
		func(d []byte) { be.PutUint64(d[8:], 1); be.PutUint32(d[16:], 7) })
	// A name past the end of a truncated file reads as zeros: no name.
	add("qcow2-backing-past-eof", plain[:150], q(FSUnknown, ReasonNoFS), metaOutcome{Clusters: 1, Skipped: 3, Ranges: 1},
		func(d []byte) { be.PutUint64(d[8:], 200); be.PutUint32(d[16:], 8) })
	// A chain that names the image itself.
	add("qcow2-backing-self", plain, withBacking(q(FSExt4, ""), "qcow2-backing-self", ""), metaOutcome{Clusters: 6, Ranges: 2}, func(d []byte) {
		copy(d[200:], "qcow2-backing-self")
		be.PutUint64(d[8:], 200)
		be.PutUint32(d[16:], uint32(len("qcow2-backing-self")))
	})
	add("qcow2-backing-format-junk", withName(12, "b"), withBacking(q(FSExt4, ""), "", junkSane(64)), b12, func(d []byte) {
		// Replace the backing format extension by 3960 bytes of
		// junk, over the name (dropped).
		be.PutUint32(d[108:], 3960)
		copy(d[112:], junk[:3960])
		clear(d[4072:4080])
		be.PutUint64(d[8:], 0)
		be.PutUint32(d[16:], 0)
	})
	add("qcow2-data-file-junk", plain, bad(fmt.Sprintf("unsupported qcow2 feature: external data file %q", junkSane(40))), full, func(d []byte) {
		d[79] |= incompatDataFile
		be.PutUint32(d[104:], extDataFile)
		be.PutUint32(d[108:], 40)
		copy(d[112:], junk[:40])
	})
	return cs
}

func allProbeCases() []probeCase {
	return slices.Concat(fsCases(), tableCases(), qcowCases())
}

func TestCraftedProbe(t *testing.T) {
	names := map[string]bool{}
	for _, c := range allProbeCases() {
		if names[c.name] {
			t.Fatalf("duplicate case %s", c.name)
		}
		names[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			r := &countingReader{r: c.img}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			info, err := Probe(r, c.img.size)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if a := after.TotalAlloc - before.TotalAlloc; a > probeMaxAlloc {
				t.Errorf("Probe allocated %d bytes", a)
			} else if testing.Verbose() {
				t.Logf("%d bytes allocated, %d bytes read in %d calls", a, r.bytes, r.calls)
			}
			checkInfo(t, info, c.img.size)
			if got := outcomeOf(info); !got.equal(c.want) {
				t.Errorf("outcome\n got %#v\nwant %#v", got, c.want)
			}
			if r.calls > probeMaxCalls || r.bytes > probeMaxBytes {
				t.Errorf("%d reads, %d bytes", r.calls, r.bytes)
			}
			if c.want.Table == TableGPT && info.DiskGUID != diskGUID {
				t.Errorf("disk GUID %q", info.DiskGUID)
			}
		})
	}
}

func TestCraftedMetadata(t *testing.T) {
	for _, c := range qcowCases() {
		t.Run(c.name, func(t *testing.T) {
			r := &countingReader{r: c.img}
			l, err := Qcow2Metadata(r, c.img.size, 0)
			if max := int64(metaMaxBytes + 112 + qcowMaxHeaderRead + qcowMaxBackingName); r.bytes > max {
				t.Errorf("read %d bytes, budget %d", r.bytes, max)
			}
			var got metaOutcome
			if err != nil {
				got.Err = err.Error()
			} else {
				got = metaOutcome{Clusters: l.Clusters, Skipped: l.Skipped, Ranges: len(l.Ranges), Truncated: l.Truncated}
			}
			if got != *c.meta {
				t.Errorf("metadata\n got %+v\nwant %+v", got, *c.meta)
			}
		})
	}
}

// headerCase is a file start and what parseQcow2Header says about it.
type headerCase struct {
	name string
	data []byte
	err  error  // the sentinel, nil for success
	msg  string // the whole error message, or the backing file name
}

func headerCases() []headerCase {
	guest := make([]byte, 64<<10)
	base := buildQcow2(guest, qcowOpts{clusterBits: 12, backing: "base.qcow2", backingFormat: "qcow2"}).data[:4096]
	v2 := buildQcow2(guest, qcowOpts{version: 2, clusterBits: 12}).data[:4096]
	var cs []headerCase
	short := func(n int) string {
		return fmt.Sprintf("corrupt qcow2 image: file of %d bytes is shorter than the header", n)
	}
	// Every field boundary of the version 3 header (docs/interop/qcow2.txt
	// "Header"), and of version 2's shorter one.
	for _, n := range []int{0, 4, 8, 16, 20, 24, 32, 36, 40, 48, 56, 60, 64, 72, 80, 88, 96, 100, 104, 112} {
		c := headerCase{name: fmt.Sprintf("v3-truncated-%d", n), data: base[:n], err: ErrCorrupt, msg: short(n)}
		switch {
		case n < 4:
			c.err, c.msg = ErrNotQcow2, "not a qcow2 image"
		case n >= 104:
			// The fixed header is complete; the extensions and the
			// name past the end read as zeros.
			c.err, c.msg = nil, ""
		}
		cs = append(cs, c)
	}
	for _, n := range []int{4, 8, 16, 20, 24, 32, 36, 40, 48, 56, 60, 64, 72} {
		c := headerCase{name: fmt.Sprintf("v2-truncated-%d", n), data: v2[:n], err: ErrCorrupt, msg: short(n)}
		if n == 72 {
			c.err, c.msg = nil, ""
		}
		cs = append(cs, c)
	}
	edit := func(name string, err error, msg string, f func(d []byte)) {
		d := append([]byte(nil), base...)
		f(d)
		cs = append(cs, headerCase{name: name, data: d, err: err, msg: msg})
	}
	be := binary.BigEndian
	edit("valid", nil, "base.qcow2", func([]byte) {})
	edit("backing-quotes-newlines", nil, `a"b?c?d`, func(d []byte) {
		copy(d[128:], "a\"b\nc\rd")
		be.PutUint32(d[16:], 7)
	})
	edit("backing-1023-junk", nil, junkSane(1023), func(d []byte) {
		copy(d[128:], junk[:1023])
		be.PutUint32(d[16:], 1023)
	})
	edit("backing-4k-junk", ErrCorrupt, "corrupt qcow2 image: backing file name at 128, 4096 bytes", func(d []byte) {
		copy(d[128:], junk)
		be.PutUint32(d[16:], 4096)
	})
	edit("backing-offset-past-cluster", ErrCorrupt, "corrupt qcow2 image: backing file name at 4097, 10 bytes",
		func(d []byte) { be.PutUint64(d[8:], 4097) })
	edit("backing-offset-max", ErrCorrupt, "corrupt qcow2 image: backing file name at 18446744073709551615, 10 bytes",
		func(d []byte) { be.PutUint64(d[8:], 1<<64-1) })
	// The name sits inside the extension area, over the backing format
	// extension: both are read.
	edit("backing-over-extension", nil, "?y*?", func(d []byte) { be.PutUint64(d[8:], 104); be.PutUint32(d[16:], 4) })
	for _, cb := range []uint32{0, 8, 22, 63, 0xFFFFFFFF} {
		edit(fmt.Sprintf("cluster-bits-%d", cb), ErrCorrupt, fmt.Sprintf("corrupt qcow2 image: cluster_bits %d outside 9..21", cb),
			func(d []byte) { be.PutUint32(d[20:], cb) })
	}
	edit("header-length-over-cluster", ErrCorrupt, "corrupt qcow2 image: header_length 1024", func(d []byte) {
		be.PutUint32(d[20:], 9)
		be.PutUint32(d[100:], 1024)
	})
	edit("header-length-huge", ErrCorrupt, "corrupt qcow2 image: file of 4096 bytes is shorter than the header",
		func(d []byte) { be.PutUint32(d[100:], 0xFFFFFFF8) })
	edit("l1-offset-unaligned", ErrCorrupt, "corrupt qcow2 image: l1_table_offset 0x1001 not cluster-aligned", func(d []byte) { be.PutUint64(d[40:], 4097) })
	edit("refcount-offset-huge", ErrCorrupt, "corrupt qcow2 image: refcount_table_offset 0xfffffffffffff000 not cluster-aligned",
		func(d []byte) { be.PutUint64(d[48:], 1<<64-4096) })
	edit("snapshots-offset-unaligned", ErrCorrupt, "corrupt qcow2 image: snapshots_offset 0x8 not cluster-aligned", func(d []byte) { be.PutUint64(d[64:], 8) })
	edit("ext-overrun", ErrCorrupt, "corrupt qcow2 image: header extension 0xe2792aca of 65536 bytes overruns the header area",
		func(d []byte) { be.PutUint32(d[108:], 65536) })
	edit("ext-bitmaps-short", ErrCorrupt, "corrupt qcow2 image: bitmaps extension of 8 bytes", func(d []byte) {
		be.PutUint32(d[104:], extBitmaps)
		be.PutUint32(d[108:], 8)
	})
	edit("ext-crypto-short", ErrCorrupt, "corrupt qcow2 image: encryption header extension of 8 bytes", func(d []byte) {
		be.PutUint32(d[104:], extCrypto)
		be.PutUint32(d[108:], 8)
	})
	// Feature table extensions may repeat; any other may not.
	edit("ext-feature-table-twice", nil, "base.qcow2", func(d []byte) {
		for _, off := range []int{104, 112} {
			be.PutUint32(d[off:], extFeatureTable)
			be.PutUint32(d[off+4:], 0)
		}
	})
	// Extensions back to back up to the end of the cluster, none ended.
	edit("ext-fill-cluster", nil, "", func(d []byte) {
		be.PutUint64(d[8:], 0)
		be.PutUint32(d[16:], 0)
		for off := 104; off+8 <= 4096; off += 8 {
			be.PutUint32(d[off:], extFeatureTable)
			be.PutUint32(d[off+4:], 0)
		}
	})
	return cs
}

func TestCraftedQcow2Header(t *testing.T) {
	for _, c := range headerCases() {
		t.Run(c.name, func(t *testing.T) {
			h, err := parseQcow2Header(bytes.NewReader(c.data), int64(len(c.data)))
			if c.err != nil {
				if !errors.Is(err, c.err) || err.Error() != c.msg {
					t.Errorf("error %v, want %v: %q", err, c.err, c.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v", err)
			}
			if h.backingFile != c.msg {
				t.Errorf("backing file %q, want %q", h.backingFile, c.msg)
			}
		})
	}
}

// TestBackingChainNotOpened probes overlays whose backing file is a FIFO
// with no writer and whose chain loops back to themselves: opening a
// backing file would block (FIFO) or recurse (loop). Neither Probe nor
// Qcow2Metadata may open anything but the image.
func TestBackingChainNotOpened(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "base.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	a, b := filepath.Join(dir, "a.qcow2"), filepath.Join(dir, "b.qcow2")
	for path, backing := range map[string]string{a: b, b: a, filepath.Join(dir, "c.qcow2"): fifo} {
		q := buildQcow2(make([]byte, mib), qcowOpts{clusterBits: 12, backing: backing, backingFormat: "qcow2"})
		if err := os.WriteFile(path, q.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ path, backing string }{{a, b}, {b, a}, {filepath.Join(dir, "c.qcow2"), fifo}} {
		done := make(chan error, 1)
		go func() {
			info, err := ProbeFile(c.path)
			if err == nil && (info.BackingFile != c.backing || !strings.Contains(info.Reason, "backing file not opened")) {
				err = fmt.Errorf("backing %q reason %q", info.BackingFile, info.Reason)
			}
			if err == nil {
				_, err = Qcow2MetadataFile(c.path, 0)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", c.path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: probing blocked: it opened the backing file %s", c.path, c.backing)
		}
	}
}

// --- seed corpus ---

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seed corpus under testdata/fuzz")

// corpusFile renders values in the "go test fuzz v1" format.
func corpusFile(vals ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case int64:
			fmt.Fprintf(&b, "int64(%d)\n", v)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", v)
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", v)
		case uint8:
			fmt.Fprintf(&b, "uint8(%d)\n", v)
		default:
			panic(fmt.Sprintf("corpusFile: %T", v))
		}
	}
	return b.Bytes()
}

// seeds returns the committed corpus: file path under testdata/fuzz and
// contents.
func seeds(t *testing.T) map[string][]byte {
	out := map[string][]byte{}
	put := func(target, name string, vals ...any) {
		p := filepath.Join(target, name)
		if _, dup := out[p]; dup {
			t.Fatalf("duplicate seed %s", p)
		}
		out[p] = corpusFile(vals...)
	}
	for i, c := range allProbeCases() {
		layout := encodeLayout(c.img)
		if img := decodeLayout(c.img.size, layout); img.size != c.img.size || !sameContents(img, c.img) {
			t.Fatalf("case %s does not round-trip through the layout encoding", c.name)
		}
		put("FuzzProbe", c.name, c.img.size, layout)
		if c.meta != nil {
			put("FuzzQcow2Metadata", c.name, c.img.size, layout, uint16(64<<(i%4)))
			put("FuzzQcow2Read", c.name, c.img.size, layout, int64(1024), uint32(2048))
			// The header cluster, where the extensions and the backing
			// file name are.
			cb := make([]byte, 4)
			c.img.ReadAt(cb, 20)
			n := min(c.img.size, 1<<min(max(binary.BigEndian.Uint32(cb), 9), 13))
			head := make([]byte, n)
			c.img.ReadAt(head, 0)
			put("FuzzQcow2Header", c.name, c.img.size, bytes.TrimRight(head, "\x00"))
			continue
		}
		put("FuzzPartitionTable", c.name, c.img.size, layout)
		if c.want.Table == TableNone {
			put("FuzzFS", c.name, c.img.size, layout, uint8(0))
		}
		if strings.HasPrefix(c.name, "gpt") {
			// The primary header and array as they are, for each
			// sector size, with and without protective MBR.
			for _, ss := range []int64{512, 4096} {
				hdr, arr := make([]byte, ss), make([]byte, 64<<10)
				c.img.ReadAt(hdr, ss)
				if string(hdr[:8]) != "EFI PART" {
					continue
				}
				c.img.ReadAt(arr, 2*ss)
				mode := uint8(2)
				if ss == 4096 {
					mode |= 1
				}
				put("FuzzGPT", c.name, c.img.size, bytes.TrimRight(hdr, "\x00"), bytes.TrimRight(arr, "\x00"), mode)
			}
		}
	}
	for _, c := range headerCases() {
		put("FuzzQcow2Header", "header-"+c.name, int64(len(c.data)), bytes.TrimRight(c.data, "\x00"))
	}
	for i, s := range []string{"", "plain", "a\"b\nc", junk, junk[:64], "stop\x00here", "caf\xc3\xa9", "  pad  ",
		"\xd8\x00a\x00\x00\xdc\n\x00", strings.Repeat("\xff", 72)} {
		put("FuzzSanitize", fmt.Sprintf("s%02d", i), []byte(s), uint16(maxLabelLen))
	}
	return out
}

// crasher matches the names go test -fuzz gives inputs that failed, which
// are committed as they are once fixed.
var crasher = regexp.MustCompile(`^[0-9a-f]{16}$`)

// TestFuzzSeeds checks that the committed seed corpus matches the seeds
// built here (run with -update-seeds to rewrite it).
func TestFuzzSeeds(t *testing.T) {
	want := seeds(t)
	for name, data := range want {
		path := filepath.Join("testdata", "fuzz", name)
		if len(data) > 64<<10 {
			t.Errorf("seed %s is %d bytes; keep seeds small", path, len(data))
		}
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
	}
	// Files that are neither generated seeds nor crashers are stale.
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
	for _, path := range files {
		rel, _ := filepath.Rel(filepath.Join("testdata", "fuzz"), path)
		if _, ok := want[rel]; ok || crasher.MatchString(filepath.Base(path)) {
			continue
		}
		if *updateSeeds {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("seed %s is not generated any more; run with -update-seeds to remove it", path)
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
