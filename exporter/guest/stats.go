// Package guest reads the guest side of each VM disk: the requests the
// guest's virtio device asked of QEMU, before QEMU merged adjacent ones into
// one image-file request and skipped flushes with nothing to flush, and the
// time they took as the guest sees it. The sources are QEMU's own block
// accounting (query-blockstats), read over a QMP monitor socket for plain
// QEMU and through libvirt's domain statistics for libvirt domains. A
// background loop reads them under deadlines and keeps the last values with
// their time; scrapes read those and never wait on QEMU or libvirt.
package guest

import (
	"time"

	"github.com/fspair/fspair/exporter/wordpack"
)

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

// Latency histograms of a disk's guest side (the histogram label of
// fspair_disk_guest_info): whether the disk has one, and if not, why.
const (
	// HistogramOK: the source gives the disk's read, write and flush
	// histograms on fspair's bounds.
	HistogramOK = "ok"
	// HistogramNotSet: the source gives none (yet). Over QMP fspair has
	// just set them and the next read has them; from libvirt (12.1 or
	// later) the domain's XML asks for none (README, "Guest side").
	HistogramNotSet = "not_set"
	// HistogramRefused: QEMU refused block-latency-histogram-set: older
	// than 4.0 (the command was x-block-latency-histogram-set in 2.12 to
	// 3.1), or the drive has no guest device to set it on. fspair logs
	// QEMU's reason once and tries again after RefusedRetry.
	HistogramRefused = "refused"
	// HistogramOtherBounds: a histogram someone else set, on other bounds:
	// fspair leaves it alone and exports none, as its bins do not map to
	// fspair's buckets.
	HistogramOtherBounds = "other_bounds"
	// HistogramLibvirtTooOld: a libvirt domain, libvirt older than 12.1
	// (no histograms in its statistics), and fspair not allowed to use
	// libvirt's monitor pass-through (Options.LibvirtMonitor) to set and
	// read them.
	HistogramLibvirtTooOld = "libvirt_too_old"
	// HistogramNone: no guest values at all (the status says why).
	HistogramNone = "none"
)

// LatencySlots is the number of bins of a guest latency histogram: the
// slots of the image file's latency histogram in bpf/disk.bpf.c (24 bounds,
// 1 us * 2^k, and the bin above the last).
const LatencySlots = 25

// LatencyBoundsNs are the bin boundaries fspair sets, in nanoseconds.
// QEMU's bins are [b[k-1], b[k]) (BlockLatencyHistogramInfo in
// qapi/block-core.json; block_latency_histogram_account() in
// block/accounting.c) and the kernel's slots (0, 1 us * 2^k] (ns_bucket()
// in bpf/fspair.h): with b[k] = 1 us * 2^k + 1 ns, QEMU's integer
// latencies fall in the same slot as the kernel's, bin for slot.
var LatencyBoundsNs = func() [LatencySlots - 1]uint64 {
	var b [LatencySlots - 1]uint64
	for k := range b {
		b[k] = 1000<<k + 1
	}
	return b
}()

// HistogramOps are the operations QEMU keeps latency histograms of (read,
// write, flush; QEMU 8.1 added zone append, which fspair does not
// count; none for discards).
var HistogramOps = [...]int{OpRead, OpWrite, OpFlush}

// Histogram is a guest latency histogram: the count of requests in each
// slot of LatencyBoundsNs, the last one above the last bound. OK is false
// when the source gives none on fspair's bounds.
type Histogram struct {
	Bins [LatencySlots]uint64
	OK   bool
}

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
//	TimeNs              rd/wr/flush/unmap_total_time_ns    rd.times, wr.times, fl.times
//
// Latency holds the histograms, read with the counters in one query: QMP's
// rd/wr/flush_latency_histogram, libvirt's latency_histogram.<op> (12.1
// and later). A histogram counts from when it was set, failed requests
// included (block_account_one_io() in QEMU's block/accounting.c), so its
// count grows as Requests plus Failed do, and equals them only from the
// VM's start.
//
// QEMU's rd/wr/unmap_merged (guest requests it merged into an adjacent one
// before issuing it to the image file) are not read: no rule, panel or
// alert used them, and the guest's requests less the image file's
// (fspair_disk_requests_total) show the merging (BENCHMARKS.md, "Guest
// latency histograms").
type Stats struct {
	Counters
	Latency [NumOps]Histogram
}

// Counters are Stats' counters, without the histograms.
type Counters struct {
	Requests, Bytes, Failed, TimeNs [NumOps]Counter
}

// The counters of Stats by index, for the tables that name each source's
// fields.
const (
	fieldRequests = iota
	fieldBytes
	fieldFailed
	fieldTime
	numFields
)

func (s *Counters) field(f int) *[NumOps]Counter {
	return [numFields]*[NumOps]Counter{&s.Requests, &s.Bytes, &s.Failed, &s.TimeNs}[f]
}

// Reading is one successful read of a disk's guest statistics. The poll
// keeps one a disk, and a scrape may still hold the round's before: at
// 10,000 VMs two rounds of dense Stats were 23 MB of the exporter's live
// heap, most of it histogram bins at zero (a disk's requests fall in a few
// of the 25 slots, and discards have none). A reading keeps its counters
// as they are and its histograms packed: a bitmap of the non-zero bins
// and those bins in order.
type Reading struct {
	Counters
	At time.Time

	histOK  uint8                // bit op: Latency[op].OK
	binMask [binMaskWords]uint64 // bit op*LatencySlots+k: Latency[op].Bins[k] != 0
	bins    []uint64
}

const binMaskWords = (NumOps*LatencySlots + 63) / 64

// NewReading is s read at at.
func NewReading(s *Stats, at time.Time) *Reading {
	r := &Reading{Counters: s.Counters, At: at}
	var bins [NumOps * LatencySlots]uint64
	for op := range s.Latency {
		if s.Latency[op].OK {
			r.histOK |= 1 << op
		}
		copy(bins[op*LatencySlots:], s.Latency[op].Bins[:])
	}
	r.bins = wordpack.Pack(r.binMask[:], bins[:], func(n int) []uint64 { return make([]uint64, n) })
	return r
}

// HistogramOK says whether the source gave op's histogram on fspair's
// bounds (Histogram.OK).
func (r *Reading) HistogramOK(op int) bool { return r.histOK&(1<<op) != 0 }

// Observed says whether op's histogram has a request in any slot.
func (r *Reading) Observed(op int) bool {
	return wordpack.Any(r.binMask[:], op*LatencySlots, LatencySlots)
}

// Bins is op's histogram bins, unpacked into buf (LatencySlots long at
// least).
func (r *Reading) Bins(op int, buf []uint64) []uint64 {
	return wordpack.Unpack(r.binMask[:], r.bins, op*LatencySlots, LatencySlots, buf)
}

// Stats is the reading's values, unpacked.
func (r *Reading) Stats() Stats {
	s := Stats{Counters: r.Counters}
	for op := range s.Latency {
		r.Bins(op, s.Latency[op].Bins[:])
		s.Latency[op].OK = r.HistogramOK(op)
	}
	return s
}

// Status is what the exporter knows of a disk's guest side at a scrape.
type Status struct {
	Source string // SourceQMP, SourceLibvirt, SourceNone
	Status string // StatusOK, ...
	// Histogram says whether the reading has latency histograms
	// (HistogramOK, ...).
	Histogram string
	// Reading is the last good reading, nil if none.
	Reading *Reading
}
