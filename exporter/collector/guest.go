package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/inventory"
)

// The guest side of each disk (exporter/guest): what the guest's virtio
// device asked of QEMU, before QEMU merged adjacent requests into one
// image-file request and skipped flushes with nothing written since the
// last, from QEMU's query-blockstats (over QMP, or libvirt's domain
// statistics). Counters a source does not give are absent, never zero.
//
// An operation's counters follow the image file's rule (opSeen): read,
// write and flush are written for every disk with guest values, discard
// only once the guest has done one (guestOpSeen). query-blockstats has the
// unmap counters of every device, at 0 where the guest never discarded
// (and always in QEMU 7.2, whose virtio-blk does not count discards:
// tests/lab/README.md), and most guests never discard: three series a
// disk (over QMP: requests, bytes, time) that would stand at 0 for good.
// A counter is monotonic, so once written a series stays; it starts at its
// first value, and rate() and increase() miss the step from the 0 left out
// to that value (the guest's first discards, once per disk), as on the
// image file.
//
// Two families are narrower still, to keep a typical disk within its
// series budget (BENCHMARKS.md, "Guest latency histograms"):
//   - fspair_disk_guest_request_errors_total: an operation's series
//     starts with its first failure (QEMU's failed_*_operations not 0), as
//     the image file's fspair_disk_request_errors_total does. Absent over
//     QMP: QEMU counted no failure of that operation; from libvirt: not
//     given (fspair_disk_guest_info's source tells which).
//   - fspair_disk_guest_request_duration_seconds_total: written only for
//     the operations whose fspair_disk_guest_request_duration_seconds
//     histogram is not (discard, libvirt without histograms, QMP before a
//     histogram is set or has its first observation); where the histogram
//     is written its sum is the same value (QEMU's *_total_time_ns since
//     the VM started), so the series would say it twice. A rule reads the
//     time as the counter or the histogram's sum, whichever there is.

var guestOpExtra = extraLabels("op", guest.OpNames[:])

// guestOps is what the help of the counter families by operation says of
// which operations a disk has.
const guestOps = " op=discard only once the guest has done one, its series starting at their first value."

var (
	guestInfo = diskDesc("guest_info",
		"Where the guest side of a VM disk comes from: source=qmp (query-blockstats on a QMP monitor), libvirt (libvirt's domain block statistics) or none; "+
			"status=ok, stale (the last read failed: the values are the last good ones), unreachable, no_device, "+
			"no_monitor (plain QEMU whose QMP socket nobody named), not_allowed (QMP sockets on its command line, --discovery.proc.qmp off), "+
			"libvirt_monitor (libvirt's QEMU, libvirt not reporting it: fspair never uses libvirt's monitor); "+
			"histogram=ok (fspair_disk_guest_request_duration_seconds has the disk's read, write and flush), not_set (none yet: over QMP fspair has just set them; "+
			"from libvirt the domain's XML asks for none), refused (QEMU refused block-latency-histogram-set: before 4.0, or a drive without a guest device), "+
			"other_bounds (set by someone else on other bounds: left alone, not exported), libvirt_too_old (libvirt before 12.1 has none, and --guest.libvirt-monitor-histograms is off), "+
			"none (no guest values). Always 1.",
		"source", "status", "histogram")
	guestRequests = diskDesc("guest_requests_total",
		"Requests the guest's virtio device completed, by operation, before QEMU merged adjacent ones (QEMU's rd/wr/flush/unmap_operations; "+
			"flushes include those QEMU skipped because nothing was written since the last);"+guestOps, "op")
	guestBytes = diskDesc("guest_bytes_total",
		"Bytes the guest's requests moved, by operation (QEMU's rd/wr/unmap_bytes);"+guestOps, "op")
	guestErrors = diskDesc("guest_request_errors_total",
		"Guest requests that failed, by operation (QEMU's failed_*_operations; QMP only); an operation's series starts with its first failure: "+
			"absent, QEMU counted none (source=qmp) or the source does not give them (source=libvirt).", "op")
	guestTime = diskDesc("guest_request_duration_seconds_total",
		"Total time the guest's requests took as the guest sees it, from the device receiving them to completing them, by operation "+
			"(QEMU's *_total_time_ns), for the operations that fspair_disk_guest_request_duration_seconds does not have "+
			"(where it has one, its sum is this value);"+guestOps, "op")
	guestLatency = diskDesc("guest_request_duration_seconds",
		"Time the guest's requests took as the guest sees it, by operation (read, write, flush), from QEMU's latency histograms on the bounds of "+
			"fspair_disk_request_duration_seconds, bucket for bucket. The count is of requests since the histogram was set, failed ones included: "+
			"its increase is that of fspair_disk_guest_requests_total plus fspair_disk_guest_request_errors_total (absent: none failed). "+
			"The sum is QEMU's total time since the VM started, which fspair_disk_guest_request_duration_seconds_total carries for the operations "+
			"without a histogram: read both as rates.", "op")
	guestReadTime = diskDesc("guest_last_read_timestamp_seconds",
		"When the guest-side values of the disk were read from their source.")
)

// GuestSource is what the guest families read: the background poller's
// last result for a disk.
type GuestSource interface {
	Status(d *inventory.Disk) guest.Status
}

// readGuest fills the rows' guest side; with no source the guest families
// are left out altogether.
func (s *snapshot) readGuest(src GuestSource) {
	for i := range s.disks {
		r := &s.disks[i]
		r.hasGuest = src != nil
		if src != nil {
			r.guest = src.Status(r.d)
			r.guestInfo = s.memo.guestInfo(r.guest.Source, r.guest.Status, r.guest.Histogram)
		}
	}
}

// guestCounter is a counter family by operation of the guest's values:
// where its values are in Stats, the divisor to its unit (other than 1:
// nanoseconds to seconds, written as floats, as client_golang writes
// them), and which operations' series a disk has (of those its source
// gives).
type guestCounter struct {
	desc    *prometheus.Desc
	divisor float64
	get     func(c *guest.Counters) *[guest.NumOps]guest.Counter
	written func(g *guest.Reading, op int) bool
}

// guestCounters are the counter families, for the direct writer and
// GuestDiskCollector alike.
var guestCounters = []guestCounter{
	{guestRequests, 1, func(c *guest.Counters) *[guest.NumOps]guest.Counter { return &c.Requests }, guestOpSeen},
	{guestBytes, 1, func(c *guest.Counters) *[guest.NumOps]guest.Counter { return &c.Bytes }, guestOpSeen},
	{guestErrors, 1, func(c *guest.Counters) *[guest.NumOps]guest.Counter { return &c.Failed }, guestFailed},
	{guestTime, 1e9, func(c *guest.Counters) *[guest.NumOps]guest.Counter { return &c.TimeNs }, guestTimeAsCounter},
}

// guestFamilies are the direct writers of the guest families.
func guestFamilies() []directFamily {
	fams := []directFamily{guestInfoFamily(), guestLatencyFamily(), guestReadTimeFamily()}
	for _, c := range guestCounters {
		fams = append(fams, guestVec(c))
	}
	return fams
}

func guestInfoFamily() directFamily {
	f := familyOf(guestInfo, "gauge")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.disks {
			r := &s.disks[i]
			if r.hasGuest {
				t.uint(f, r.labels, r.guestInfo, 1)
			}
		}
	}}
}

// guestReading returns the row's guest values, nil when it has none.
func guestReading(r *diskRow) *guest.Reading {
	if !r.hasGuest {
		return nil
	}
	return r.guest.Reading
}

// guestVec writes a guest counter family.
func guestVec(c guestCounter) directFamily {
	f := familyOf(c.desc, "counter")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.disks {
			r := &s.disks[i]
			g := guestReading(r)
			if g == nil {
				continue
			}
			for op, v := range c.get(&g.Counters) {
				switch {
				case !v.OK, !c.written(g, op):
				case c.divisor == 1:
					t.uint(f, r.labels, guestOpExtra[op], v.V)
				default:
					t.float(f, r.labels, guestOpExtra[op], float64(v.V)/c.divisor)
				}
			}
		}
	}}
}

// guestOpSeen says whether a disk's guest values have the series of an
// operation: read, write and flush always, discard once any of its
// counters is not 0 (a request done or failed; the others follow from
// one), so that nothing QEMU counted is left out.
func guestOpSeen(g *guest.Reading, op int) bool {
	return everyGuestDoes(guest.OpNames[op]) ||
		g.Requests[op].V != 0 || g.Bytes[op].V != 0 || g.Failed[op].V != 0 || g.TimeNs[op].V != 0
}

// guestFailed: an operation's errors series starts with its first failure.
func guestFailed(g *guest.Reading, op int) bool {
	return g.Failed[op].V != 0
}

// guestTimeAsCounter: the guest's time of an operation is a counter of its
// own where the operation's histogram, whose sum it is, is not written.
func guestTimeAsCounter(g *guest.Reading, op int) bool {
	return guestOpSeen(g, op) && !guestHistogramWritten(g, op)
}

// guestHistogramWritten says whether the operation's histogram is written:
// the source gives it on fspair's bounds and it has an observation (the
// direct writer leaves out a histogram with none; histFamily.observed).
func guestHistogramWritten(g *guest.Reading, op int) bool {
	return g.HistogramOK(op) && g.Observed(op)
}

// guestLatencyFamily is fspair_disk_guest_request_duration_seconds: QEMU's
// bins are the image file's slots (guest.LatencyBoundsNs), so the
// histogram has the image file's layouts, classic and native.
func guestLatencyFamily() directFamily {
	h := histFamilyOf(guestLatency, latencyShape)
	return directFamily{h.name, func(t sink, s *snapshot) {
		t.family(&h.family)
		buf := make([]uint64, guest.LatencySlots)
		for i := range s.disks {
			r := &s.disks[i]
			g := guestReading(r)
			if g == nil {
				continue
			}
			for _, op := range guest.HistogramOps {
				if guestHistogramWritten(g, op) {
					t.histogram(h, r.labels, guestOpExtra[op], g.Bins(op, buf), guestSeconds(&g.Counters, op))
				}
			}
		}
	}}
}

// guestSeconds is the guest's total time of an operation in seconds, the
// sum of its histogram; 0 where the source gives none.
func guestSeconds(c *guest.Counters, op int) float64 {
	return float64(c.TimeNs[op].V) / 1e9
}

func guestReadTimeFamily() directFamily {
	f := familyOf(guestReadTime, "gauge")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.disks {
			r := &s.disks[i]
			if g := guestReading(r); g != nil {
				t.float(f, r.labels, lbl{}, float64(g.At.UnixMilli())/1e3)
			}
		}
	}}
}

// GuestDiskCollector sends the guest families through client_golang: the
// reference the direct writer is tested against (TestGuestDirectMatchesCollector).
type GuestDiskCollector struct {
	inv DiskLister
	src GuestSource
}

// NewGuestDiskCollector returns the guest collector.
func NewGuestDiskCollector(inv DiskLister, src GuestSource) *GuestDiskCollector {
	return &GuestDiskCollector{inv: inv, src: src}
}

// Update implements Collector.
func (c *GuestDiskCollector) Update(ch chan<- prometheus.Metric) error {
	for _, d := range c.inv.Disks() {
		k := []string{d.Domain, d.UUID, d.TargetDevice, d.SourceFile}
		st := c.src.Status(&d)
		ch <- prometheus.MustNewConstMetric(guestInfo, prometheus.GaugeValue, 1, with(k, st.Source, st.Status, st.Histogram)...)
		g := st.Reading
		if g == nil {
			continue
		}
		for _, gc := range guestCounters {
			for op, v := range gc.get(&g.Counters) {
				if v.OK && gc.written(g, op) {
					ch <- prometheus.MustNewConstMetric(gc.desc, prometheus.CounterValue, float64(v.V)/gc.divisor, with(k, guest.OpNames[op])...)
				}
			}
		}
		for _, op := range guest.HistogramOps {
			if !guestHistogramWritten(g, op) {
				continue // as the direct writer, no histogram before its first observation
			}
			st := g.Stats()
			m, err := histogram(guestLatency, latencyShape, st.Latency[op].Bins[:], guestSeconds(&st.Counters, op), with(k, guest.OpNames[op])...)
			if err != nil {
				return err
			}
			ch <- m
		}
		ch <- prometheus.MustNewConstMetric(guestReadTime, prometheus.GaugeValue, float64(g.At.UnixMilli())/1e3, k...)
	}
	return nil
}

// GuestPollSource is what the guest poll collector reads.
type GuestPollSource interface {
	Stats() guest.PollStats
}

var (
	guestPolls = prometheus.NewDesc("fspair_guest_polls_total",
		"Reads of guest-side statistics, by source: one per QMP monitor session, one per libvirt call.", []string{"source"}, nil)
	guestPollErrors = prometheus.NewDesc("fspair_guest_poll_errors_total",
		"Reads of guest-side statistics that failed or did not finish within --guest.timeout, by source; the disks keep their last values.", []string{"source"}, nil)
	guestRoundDuration = prometheus.NewDesc("fspair_guest_round_duration_seconds",
		"Time the last round of guest-side reads took, with the time it gave way to scrapes (at most a fifth of --guest.interval).", nil, nil)
)

// GuestPollCollector reports on the guest-side reads themselves.
type GuestPollCollector struct{ src GuestPollSource }

// NewGuestPollCollector returns the guest poll collector.
func NewGuestPollCollector(src GuestPollSource) *GuestPollCollector {
	return &GuestPollCollector{src: src}
}

// Update implements Collector.
func (c *GuestPollCollector) Update(ch chan<- prometheus.Metric) error {
	s := c.src.Stats()
	for _, src := range guest.Sources() {
		ch <- prometheus.MustNewConstMetric(guestPolls, prometheus.CounterValue, float64(s.Polls[src]), src)
		ch <- prometheus.MustNewConstMetric(guestPollErrors, prometheus.CounterValue, float64(s.Errors[src]), src)
	}
	if s.Rounds > 0 {
		ch <- prometheus.MustNewConstMetric(guestRoundDuration, prometheus.GaugeValue, s.LastDuration.Seconds())
	}
	return nil
}
