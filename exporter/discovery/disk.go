// Package discovery finds the disks of the virtual machines running on a KVM
// host and the image files behind them, from libvirt, from the command lines
// and open files of QEMU processes in /proc, and from a static configuration
// file.
package discovery

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Source names, used in Disk.Source and as keys of Result.Errors.
const (
	SourceLibvirt = "libvirt"
	SourceStatic  = "static"
	SourceQEMU    = "qemu"
)

// Cache mode reported for a disk found only through an open file descriptor
// with O_DIRECT: the host page cache is bypassed, but whether QEMU also
// reports a write cache to the guest ("none" vs "directsync") is unknown.
const CacheDirect = "direct"

// Disk is one VM disk backed by an image file on a host file system.
type Disk struct {
	Domain       string // VM name (libvirt domain name, QEMU -name guest=, or config)
	UUID         string
	TargetDevice string // libvirt target dev (vda); for plain QEMU the -device id, else drive id / node-name; "" if unknown
	SourceFile   string // absolute path of the image file as the VMM named it
	Source       string // "libvirt" | "qemu" | "static"
	PID          int    // VMM process id, 0 if unknown
	Format       string // as configured: raw|qcow2|"" (the exporter also reads the header itself)
	Cache        string // none|writeback|writethrough|directsync|unsafe|"" ; also derive from cache.direct/no-flush
	AIO          string // threads|native|io_uring|""
	Discard      string // unmap|ignore|""
	ReadOnly     bool
	GuestFS      string // operator override ("" = detect from image bytes)

	// OpenPath is where to open the image file the VM uses:
	// /proc/PID/fd/N when discovery found the VMM process holding it
	// open, "" to open SourceFile. The two differ when the image was
	// replaced (a new file renamed over SourceFile) or removed while the
	// VM runs: the VM keeps reading and writing the file it opened.
	OpenPath string

	// QMP are QMP monitor sockets of the disk's VMM that fspair may read
	// the guest side of the disk from (query-blockstats), in the order to
	// try them: the one the operator named (Config.QMPMonitors), or those
	// on the QEMU command line when Options.ProcQMP allows them. QMPNote
	// says why there is none (QMPNoteLibvirt, QMPNoteNotAllowed, "").
	QMP     []string
	QMPNote string
}

// cacheMode names the QEMU cache mode for the three flags it is made of
// (QEMU docs, "-drive cache=": none is direct, writethrough is
// writeback=off, unsafe is no-flush). direct together with no-flush has no
// name of its own; it is reported as unsafe because flushes are dropped,
// which is what matters for data safety.
func cacheMode(direct, noFlush, writeback bool) string {
	switch {
	case noFlush:
		return "unsafe"
	case direct && writeback:
		return "none"
	case direct:
		return "directsync"
	case writeback:
		return "writeback"
	default:
		return "writethrough"
	}
}

// cacheModeFlags is the inverse of cacheMode for the -drive cache= option
// (bdrv_parse_cache_mode() in QEMU's block.c, which also accepts "off").
func cacheModeFlags(mode string) (direct, noFlush, writeback bool, ok bool) {
	switch mode {
	case "none", "off":
		return true, false, true, true
	case "directsync":
		return true, false, false, true
	case "writeback":
		return false, false, true, true
	case "writethrough":
		return false, false, false, true
	case "unsafe":
		return false, true, true, true
	}
	return false, false, false, false
}

// normalizeDiscard maps QEMU's and libvirt's spellings to unmap/ignore.
func normalizeDiscard(s string) string {
	switch s {
	case "unmap", "on":
		return "unmap"
	case "ignore", "off":
		return "ignore"
	}
	return ""
}

// normalizeUUID returns u in the lower case 8-4-4-4-12 form, accepting also
// the 32 hex digit form, or "" if u is not a UUID.
func normalizeUUID(u string) string {
	h := strings.ReplaceAll(u, "-", "")
	if len(h) != 32 || (len(u) != 32 && len(u) != 36) {
		return ""
	}
	if len(u) == 36 && (u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-') {
		return ""
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return ""
	}
	return formatUUID(b)
}

func formatUUID(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Bounds on the strings of a Disk that become label values of every
// per-disk series (domain, target_device, source_file, cache, aio).
// client_golang refuses a label value that is not valid UTF-8
// (prometheus.NewConstMetric; MustNewConstMetric panics), and neither a QEMU
// command line, which holds whatever bytes its starter put there, nor
// libvirt XML bounds their length.
const (
	// maxNameLen bounds the VM name and the target device. libvirt keeps
	// a domain in files named after it (<name>.xml, <name>.pid), so
	// NAME_MAX bounds the names it accepts.
	maxNameLen = 255
	// maxPathLen is PATH_MAX less its NUL: open(2) fails with
	// ENAMETOOLONG on longer paths, so no image file has one.
	maxPathLen = 4095
)

// boundLabels makes the label strings of d valid UTF-8 and bounded: the VM
// name and target device have invalid bytes replaced and are cut to
// maxNameLen at a rune boundary; cache and aio modes outside the known ones
// become "" (reported as unknown). The image path cannot be changed, since
// it is the file the exporter opens and the key other series join on: a
// disk whose path is not valid UTF-8 or longer than maxPathLen cannot be
// reported, and boundLabels returns an error saying so.
func boundLabels(d *Disk) error {
	if !utf8.ValidString(d.SourceFile) || len(d.SourceFile) > maxPathLen {
		return fmt.Errorf("disk %s of %s: image path %q cannot be a label value (not valid UTF-8 or longer than %d bytes)",
			boundName(d.TargetDevice), boundName(d.Domain), truncate(d.SourceFile), maxPathLen)
	}
	d.Domain = boundName(d.Domain)
	d.TargetDevice = boundName(d.TargetDevice)
	if !slices.Contains(validCaches, d.Cache) && d.Cache != CacheDirect {
		d.Cache = ""
	}
	if !slices.Contains(validAIOs, d.AIO) {
		d.AIO = ""
	}
	return nil
}

func boundName(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxNameLen {
		return s
	}
	n := maxNameLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
