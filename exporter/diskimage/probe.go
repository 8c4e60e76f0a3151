package diskimage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Image formats reported in Info.Format and accepted by ProbeAs.
const (
	FormatRaw     = "raw"
	FormatQcow2   = "qcow2"
	FormatUnknown = "unknown"
)

// Info describes a disk image as read from its bytes.
type Info struct {
	// Format is FormatRaw, FormatQcow2 or FormatUnknown (another image
	// format, or a qcow2 version this package does not read).
	Format string
	// FileSize is the size of the image file (or block device) in bytes.
	FileSize int64
	// VirtualSize is the size of the disk the guest sees, in bytes; 0 for
	// a qcow2 image whose header was rejected (see below).
	VirtualSize int64

	// PartitionTable is TableNone, TableMBR, TableGPT or TableUnknown (a
	// protective MBR whose GPT headers are both invalid, or a table that
	// could not be read).
	PartitionTable string
	// SectorSize is the logical sector size the partition table was read
	// with: 512, or 4096 for a GPT found only at 4 KiB sectors.
	SectorSize int64
	// DiskGUID is the GPT disk GUID.
	DiskGUID string
	// Partitions lists the partitions in table order; for MBR the
	// extended partition container is listed too, followed by its
	// logical partitions numbered from 5.
	Partitions []Partition

	// GuestFS is the guest's file system: FSExt2, FSExt3, FSExt4, FSXFS,
	// FSBtrfs or FSUnknown. For an unpartitioned disk it is the file system
	// on the whole disk. For a partitioned disk it is the file system of the
	// largest partition whose file system is known (the first such in table
	// order on a tie); GuestFSPartition names that partition.
	GuestFS string
	// GuestFSPartition is the Index of the partition GuestFS was read
	// from, or 0 for the whole disk (or none).
	GuestFSPartition int
	// FSLabel and FSUUID come from the superblock GuestFS was read from.
	// Labels are sanitised: printable ASCII only, at most 64 bytes.
	FSLabel, FSUUID string
	// Reason says why GuestFS is FSUnknown, e.g. ReasonLVM2, ReasonLUKS,
	// ReasonSwap, ReasonNoFS, ReasonEncQcow2 or a description of corrupt
	// metadata. It is empty when GuestFS is known.
	Reason string
	// Notes lists anomalies that did not stop identification, such as a
	// bad primary GPT header or a looping extended partition chain.
	Notes []string

	// The remaining fields, and VirtualSize for qcow2, are set for qcow2
	// images whose header was accepted: valid, and with an L1 table that
	// maps the virtual size. Encrypted images and images with an external
	// data file have accepted headers (Reason says why their guest data
	// was not read); for a rejected header only Format and Reason are set.

	// Qcow2Version is 2 or 3.
	Qcow2Version int
	// ClusterSize is the qcow2 cluster size in bytes.
	ClusterSize int64
	// BackingFile is the backing file name as stored in the image
	// (sanitised, at most 1023 bytes); it is never opened.
	BackingFile string
	// BackingFormat is the backing file format from the header extension.
	BackingFormat string
	// DataFile is the external data file name, if the image has one.
	DataFile string
	// Encrypted is set when the qcow2 crypt_method is AES or LUKS.
	Encrypted bool
}

// Partition is one entry of the partition table.
type Partition struct {
	// Index is the partition number as the Linux kernel would assign it:
	// the GPT entry number, or 1-4 for MBR primaries and 5 up for logical
	// partitions.
	Index int
	// Start and Size are in bytes, clipped to the disk.
	Start, Size int64
	// Type is the GPT partition type GUID (lower case) or the MBR type
	// byte as "0x83".
	Type string
	// Name is the GPT partition name (sanitised); PartUUID the GPT unique
	// partition GUID.
	Name, PartUUID string
	// FS, FSLabel, FSUUID and Reason are as in Info, for this partition.
	FS              string
	FSLabel, FSUUID string
	Reason          string
}

// Probe identifies the image in r, which is size bytes long, detecting its
// format from its first bytes. See ProbeAs.
func Probe(r io.ReaderAt, size int64) (*Info, error) {
	return ProbeAs(r, size, "")
}

// ProbeAs identifies the image in r, which is size bytes long. format is
// FormatRaw or FormatQcow2 when the hypervisor's configuration says how it
// opens the image, or "" to detect it from the first bytes.
//
// Pass the configured format whenever it is known. A guest owns every byte of
// a raw image, including the first sector, and can make it start with a qcow2
// header; detection would then describe an image that is not what the guest
// sees (the same reason QEMU stopped probing raw images for other formats
// when writing, CVE-2008-2004).
//
// Problems with the image's contents never produce an error: they end up in
// Info.Reason and Info.Notes. The error is non-nil only when reading r fails
// or format is invalid. ProbeAs reads at most a few MiB and never panics.
func ProbeAs(r io.ReaderAt, size int64, format string) (*Info, error) {
	if size < 0 {
		return nil, fmt.Errorf("probe image: negative size %d", size)
	}
	switch format {
	case "", FormatRaw, FormatQcow2:
	default:
		return nil, fmt.Errorf("probe image: unsupported format %q", format)
	}
	b := &budgetReader{r: r, maxCalls: probeMaxCalls, maxBytes: probeMaxBytes}
	info := &Info{FileSize: size, PartitionTable: TableNone, GuestFS: FSUnknown}
	if format == "" {
		head := make([]byte, 512)
		if err := readZero(b, head, 0, size); err != nil {
			return nil, fmt.Errorf("read image header: %w", err)
		}
		var why string
		format, why = detectFormat(head)
		if format == FormatUnknown {
			info.Format, info.Reason = FormatUnknown, why
			return info, nil
		}
	}
	var err error
	switch format {
	case FormatRaw:
		info.Format, info.VirtualSize = FormatRaw, size
		err = probeDisk(section{b, 0, size}, info)
	case FormatQcow2:
		err = probeQcow2(b, size, info)
	}
	var he *hostError
	if errors.As(err, &he) {
		return nil, fmt.Errorf("read image: %w", he.err)
	}
	if err != nil {
		// Only read errors reach this point; anything else was
		// turned into a Reason on the way.
		return nil, err
	}
	return info, nil
}

// ProbeFile opens the image at path read-only and probes it, detecting its
// format. The size is the file size, or the device size for block devices.
func ProbeFile(path string) (*Info, error) {
	return ProbeFileAs(path, "")
}

// ProbeFileAs is ProbeFile with the format given as for ProbeAs.
func ProbeFileAs(path, format string) (*Info, error) {
	f, size, err := openImage(path)
	if err != nil {
		return nil, fmt.Errorf("probe image %s: %w", path, err)
	}
	defer f.Close()
	info, err := ProbeAs(f, size, format)
	if err != nil {
		return nil, fmt.Errorf("probe image %s: %w", path, err)
	}
	return info, nil
}

// openImage opens a regular file or block device read-only and returns its
// size: the file size, or for a block device (whose fstat size is 0) its end
// offset.
func openImage(path string) (*os.File, int64, error) {
	// Refuse anything else before opening: opening a FIFO for reading
	// would wait for a writer. O_NONBLOCK covers the path being replaced
	// in between, and the type is checked again on the open file.
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	if !st.Mode().IsRegular() && st.Mode()&os.ModeDevice == 0 {
		return nil, 0, errors.New("not a regular file or block device")
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, err
	}
	if st, err = f.Stat(); err != nil {
		f.Close()
		return nil, 0, err
	}
	switch {
	case st.Mode().IsRegular():
		return f, st.Size(), nil
	case st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0:
		size, err := f.Seek(0, io.SeekEnd)
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("size block device: %w", err)
		}
		return f, size, nil
	}
	f.Close()
	return nil, 0, errors.New("not a regular file or block device")
}

// detectFormat looks at the first sector. Besides qcow2 it recognises the
// other formats QEMU can open, so that their headers are not mistaken for a
// raw disk without a file system.
func detectFormat(h []byte) (format, why string) {
	switch {
	case string(h[0:4]) == qcowMagic:
		if v := uint32(h[4])<<24 | uint32(h[5])<<16 | uint32(h[6])<<8 | uint32(h[7]); v == 1 {
			return FormatUnknown, "qcow version 1 image"
		}
		return FormatQcow2, ""
	case string(h[0:4]) == "KDMV" || string(h[0:21]) == "# Disk DescriptorFile":
		return FormatUnknown, "vmdk image"
	case string(h[0:8]) == "vhdxfile":
		return FormatUnknown, "vhdx image"
	case string(h[0:8]) == "conectix":
		return FormatUnknown, "vhd image"
	case string(h[0:4]) == "QED\x00":
		return FormatUnknown, "qed image"
	case h[64] == 0x7f && h[65] == 0x10 && h[66] == 0xda && h[67] == 0xbe:
		// VDI signature 0xbeda107f, little-endian at byte 64.
		return FormatUnknown, "vdi image"
	}
	return FormatRaw, ""
}

// probeQcow2 fills the qcow2 fields of info and probes the guest disk
// through the cluster mapping.
func probeQcow2(b *budgetReader, size int64, info *Info) error {
	info.Format = FormatQcow2
	h, err := parseQcow2Header(b, size)
	if err == nil {
		err = h.validate()
	}
	if err != nil {
		// A rejected header describes nothing: a virtual size taken
		// from it would be exported as the disk's.
		return reasonFor(info, err)
	}
	info.Qcow2Version = int(h.version)
	info.ClusterSize = h.clusterSize()
	info.VirtualSize = int64(h.size)
	info.BackingFile, info.BackingFormat, info.DataFile = h.backingFile, h.backingFormat, h.dataFile
	info.Encrypted = h.cryptMethod != 0
	if h.incompat&incompatDirty != 0 {
		info.note("qcow2 dirty bit set (refcounts may be stale)")
	}
	if h.incompat&incompatCorrupt != 0 {
		info.note("qcow2 corrupt bit set")
	}
	q, err := newQcow2Reader(b, size, h)
	switch {
	case errors.Is(err, ErrEncrypted):
		info.Reason = ReasonEncQcow2
		return nil
	case err != nil:
		return reasonFor(info, err)
	}
	if err := probeDisk(section{q, 0, q.Size()}, info); err != nil {
		return err
	}
	if info.GuestFS == FSUnknown && info.BackingFile != "" && q.HitUnallocated() {
		info.Reason += " (backing file not opened; clusters unallocated in this image read as zeros)"
	}
	return nil
}

// probeDisk reads the partition table of d and the file systems on it.
func probeDisk(d section, info *Info) error {
	t, err := readTable(d)
	if err != nil {
		info.PartitionTable = TableUnknown
		return reasonFor(info, err)
	}
	info.PartitionTable, info.DiskGUID = t.kind, t.diskGUID
	if t.kind == TableMBR || t.kind == TableGPT {
		info.SectorSize = t.sectorSize
	}
	for _, n := range t.notes {
		info.note("%s", n)
	}
	switch t.kind {
	case TableUnknown:
		info.Reason = "unreadable partition table"
		if len(t.notes) > 0 {
			info.Reason += ": " + t.notes[0]
		}
		return nil
	case TableNone:
		r, err := probeFS(d)
		if err != nil {
			return reasonFor(info, err)
		}
		info.GuestFS, info.FSLabel, info.FSUUID, info.Reason = r.fs, r.label, r.uuid, r.reason
		return nil
	}

	info.Partitions = t.parts
	for i := range info.Partitions {
		p := &info.Partitions[i]
		if p.Reason != "" { // the extended partition container
			continue
		}
		p.FS = FSUnknown
		if p.Size == 0 {
			p.Reason = "partition outside the disk"
			continue
		}
		r, err := probeFS(section{d.r, d.off + p.Start, p.Size})
		if err != nil {
			var he *hostError
			if errors.As(err, &he) {
				return err
			}
			// Corrupt qcow2 clusters or an exhausted read budget:
			// say so for this partition and go on (once the budget
			// is gone, every further read fails at once).
			p.Reason = err.Error()
			continue
		}
		p.FS, p.FSLabel, p.FSUUID, p.Reason = r.fs, r.label, r.uuid, r.reason
	}

	// The guest's file system is the one on the largest partition that
	// has a known file system: small partitions with file systems are
	// usually /boot or EFI system partitions, the big one is the root.
	best, fallback := -1, -1
	for i, p := range info.Partitions {
		switch {
		case p.FS != "" && p.FS != FSUnknown:
			if best < 0 || p.Size > info.Partitions[best].Size {
				best = i
			}
		case p.Reason != reasonExtended:
			if fallback < 0 || p.Size > info.Partitions[fallback].Size {
				fallback = i
			}
		}
	}
	switch {
	case best >= 0:
		p := info.Partitions[best]
		info.GuestFS, info.GuestFSPartition, info.FSLabel, info.FSUUID = p.FS, p.Index, p.FSLabel, p.FSUUID
	case fallback >= 0:
		info.Reason = info.Partitions[fallback].Reason
	default:
		info.Reason = "partition table lists no partitions"
	}
	return nil
}

// reasonFor turns a content error into info.Reason. Read errors of the
// underlying file are passed back up.
func reasonFor(info *Info, err error) error {
	var he *hostError
	if errors.As(err, &he) {
		return err
	}
	info.GuestFS = FSUnknown
	info.Reason = err.Error()
	return nil
}

func (info *Info) note(format string, a ...any) {
	if len(info.Notes) < maxNotes {
		info.Notes = append(info.Notes, fmt.Sprintf(format, a...))
	}
}
