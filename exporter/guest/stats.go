// Package guest reads the guest side of each VM disk: the requests the
// guest's virtio device asked of QEMU, before QEMU merged adjacent ones into
// one image-file request and skipped flushes with nothing to flush, and the
// time they took as the guest sees it. The sources are QEMU's own block
// accounting (query-blockstats), read over a QMP monitor socket for plain
// QEMU and through libvirt's domain statistics for libvirt domains. A
// background loop reads them under deadlines and keeps the last values with
// their time; scrapes read those and never wait on QEMU or libvirt.
package guest

import "time"

// Operations, in the order of the arrays of Stats.
const (
	OpRead = iota
	OpWrite
	OpFlush
	OpDiscard
	NumOps
)

// OpNames are the op label values, as the image-file families name them.
var OpNames = [NumOps]string{"read", "write", "flush", "discard"}

// Sources of guest statistics (the source label).
const (
	SourceQMP     = "qmp"
	SourceLibvirt = "libvirt"
	SourceNone    = "none"
)

// Statuses of a disk's guest statistics (the status label).
const (
	// StatusOK: the last read succeeded.
	StatusOK = "ok"
	// StatusStale: the last read failed; the values are the last good
	// ones (their time is Reading.At).
	StatusStale = "stale"
	// StatusUnreachable: no read has succeeded yet.
	StatusUnreachable = "unreachable"
	// StatusNoDevice: the source answered but names no device for the
	// disk.
	StatusNoDevice = "no_device"
	// StatusNoMonitor: a plain QEMU whose QMP socket nobody named.
	StatusNoMonitor = "no_monitor"
	// StatusNotAllowed: QMP sockets on the QEMU command line that
	// --discovery.proc.qmp does not allow.
	StatusNotAllowed = "not_allowed"
	// StatusLibvirtMonitor: libvirt's QEMU, while libvirt does not report
	// the disk (libvirt discovery off, or libvirt not answering when the
	// disk was found): fspair never uses libvirt's own monitor.
	StatusLibvirtMonitor = "libvirt_monitor"
)

// Counter is one counter of a source; OK is false when the source does not
// give it, and then it is not exported (never a made-up zero).
type Counter struct {
	V  uint64
	OK bool
}

func set(v uint64) Counter { return Counter{V: v, OK: true} }

// Stats are a disk's guest-side counters by operation.
//
// What each source gives (QAPI BlockDeviceStats in QEMU's
// qapi/block-core.json; libvirt's VIR_DOMAIN_STATS_BLOCK, which libvirt's
// QEMU driver reads from the same query-blockstats):
//
//	                    QMP query-blockstats               libvirt
//	Requests            rd/wr/flush/unmap_operations       rd.reqs, wr.reqs, fl.reqs
//	Bytes               rd/wr/unmap_bytes                  rd.bytes, wr.bytes
//	Failed              failed_rd/wr/flush/unmap_operations  -
//	Merged              rd/wr/unmap_merged                 -
//	TimeNs              rd/wr/flush/unmap_total_time_ns    rd.times, wr.times, fl.times
type Stats struct {
	Requests, Bytes, Failed, Merged, TimeNs [NumOps]Counter
}

// The counters of Stats by index, for the tables that name each source's
// fields.
const (
	fieldRequests = iota
	fieldBytes
	fieldFailed
	fieldMerged
	fieldTime
	numFields
)

func (s *Stats) field(f int) *[NumOps]Counter {
	return [numFields]*[NumOps]Counter{&s.Requests, &s.Bytes, &s.Failed, &s.Merged, &s.TimeNs}[f]
}

// Reading is one successful read of a disk's guest statistics.
type Reading struct {
	Stats Stats
	At    time.Time
}

// Status is what the exporter knows of a disk's guest side at a scrape.
type Status struct {
	Source string // SourceQMP, SourceLibvirt, SourceNone
	Status string // StatusOK, ...
	// Reading is the last good reading, nil if none.
	Reading *Reading
}
