package collector

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
)

// Label values of the kernel's enums (bpf/disk.bpf.c), in their order.
var (
	opNames    = []string{"read", "write", "flush", "discard", "write_zeroes", "allocate"}
	dirNames   = opNames[:2]
	ifaceNames = []string{"syscall", "linux_aio", "io_uring"}
	syncModes  = []string{"dsync", "flush"}
)

// diskLabels identify a VM disk, named as the libvirt exporter names them so
// that the two join.
var diskLabels = []string{"domain", "uuid", "target_device", "source_file"}

func diskDesc(name, help string, extra ...string) *prometheus.Desc {
	return describe(prometheus.BuildFQName(namespace, "disk", name), help,
		append(append([]string{}, diskLabels...), extra...))
}

var (
	diskInfo = diskDesc("info",
		"A VM disk followed by fspair: image format, guest and host file systems, cache and aio modes. Always 1.",
		"format", "guest_fs", "guest_fs_source", "host_fs", "host_mountpoint", "host_device",
		"cache", "aio", "discovery")
	diskRequests = diskDesc("requests_total",
		"Requests the VM completed on its image file without error, by operation.", "op")
	diskBytes = diskDesc("bytes_total",
		"Bytes the VM's completed requests moved (discard, write_zeroes, allocate: the range they covered), by operation.", "op")
	diskErrors = diskDesc("request_errors_total",
		"Requests on the image file that failed, by operation; an operation's series starts with its first failure "+
			"(absent: none failed since fspair started following the disk).", "op")
	diskLatency = diskDesc("request_duration_seconds",
		"Time from submission to completion of requests on the image file, as the VMM waits for them, by operation.", "op")
	diskSize = diskDesc("request_size_bytes",
		"Size of read and write requests on the image file, at submission.", "op")
	diskSeek = diskDesc("seek_distance_bytes",
		"Signed distance from a request's start to the end of an earlier request on the disk, in submission order: "+
			"reference=previous is the request just before, reference=nearest16 the closest of the last 16. "+
			"A sample: one request in 8 of each disk.", "reference")
	diskSequential = diskDesc("sequential_requests_total",
		"Reads and writes that start within their own length of the end of one of the last 16 requests.", "op")
	diskRandom = diskDesc("random_requests_total",
		"Reads and writes that are not sequential.", "op")
	diskSyncWrites = diskDesc("sync_writes_total",
		"Writes that had to be durable on completion: mode=dsync by O_DSYNC/RWF_DSYNC, "+
			"mode=flush by a flush covering at most 4 writes (write+fsync patterns).", "mode")
	diskOutstanding = diskDesc("outstanding_requests",
		"Requests in flight on the disk when a request is issued, counting itself. A sample: one request in 8 of each disk.")
	diskInterarrival = diskDesc("interarrival_seconds",
		"Time between consecutive submissions of timed requests on the disk. A sample: one request in 8 of each disk.")
	diskSubmissions = diskDesc("submissions_total",
		"Requests submitted, by the interface the VMM used: syscall (aio=threads), linux_aio (aio=native), io_uring.", "interface")
	diskFormatRequests = diskDesc("format_metadata_requests_total",
		"Requests on qcow2 metadata clusters (L1/L2 tables, refcounts, header): the format's own I/O, not the guest's.", "op")
	diskFormatBytes = diskDesc("format_metadata_bytes_total",
		"Bytes of requests on qcow2 metadata clusters.", "op")
	diskPunted = diskDesc("io_uring_punted_total",
		"io_uring requests the kernel handed to io-wq worker threads instead of completing inline.")
	diskVirtualSize = diskDesc("virtual_size_bytes",
		"Size of the disk as the guest sees it.")
	// The guest/host cache pair: what the host page cache did for the
	// VMM's synchronous reads and writes (aio=threads) and for linux-aio
	// direct I/O (aio=native); io_uring requests are not classified.
	diskCacheReads = diskDesc("host_cache_reads_total",
		"Reads on the image file (aio=threads and aio=native) by what the host page cache did: hit (no device read), miss (the read waited for the device), direct (cache bypassed, cache=none/directsync).", "result")
	diskCacheReadBytes = diskDesc("host_cache_read_bytes_total",
		"Bytes of reads on the image file (aio=threads and aio=native), by host page cache result.", "result")
	diskUnfollowed = diskDesc("unfollowed",
		"A request path of the disk that the probe mode's attached programs do not follow (measure=requests: its requests "+
			"are not counted, so their counters' 0 is not a real 0; measure=latency: counted at submission, untimed). "+
			"Present only for such paths; always 1. See fspair_probe_mode_info.", "op", "path", "measure")
	diskCacheWriteBytes = diskDesc("host_cache_write_bytes_total",
		"Bytes of writes on the image file (aio=threads and aio=native) by what the host page cache did: absorbed (landed on pages already dirty, written back once for several writes), dirtied (turned clean pages dirty), direct (cache bypassed).", "result")
)

// Label values of enum cache_result in bpf/disk.bpf.c, in order, for reads and writes.
var (
	cacheReadResults  = []string{"hit", "miss", "direct"}
	cacheWriteResults = []string{"absorbed", "dirtied", "direct"}
)

// Histogram bucket upper bounds, matching the slots in bpf/disk.bpf.c.
var (
	latencyBounds      = pow2Bounds(24, 1e-6) // 1 us .. 8.4 s
	sizeBounds         = pow2Bounds(15, 512)  // 512 B .. 8 MiB
	outstandingBounds  = pow2Bounds(9, 1)     // 1 .. 256
	interarrivalBounds = latencyBounds
	seekBounds         = seekDistanceBounds()
)

// shape is a histogram's kernel slots (bounds), the bounds its classic
// buckets keep, and its native layout.
type shape struct {
	bounds []float64
	keep   []bool // keep[i]: bounds[i] is a classic bucket's le
	native *nativeLayout
}

// The classic layouts: which of the kernel's bounds a classic histogram
// writes as buckets. The kernel counts latency and sizes every 2x and seek
// distance every 4x; a classic bucket is a series, so written whole a
// typical disk was 418 series, and the budget is 200 (issue 18; native
// histograms, one series each, keep every slot). A classic bucket kept is
// the cumulative count at its bound, exact; the slots between two kept
// bounds are merged, which loses resolution and nothing else. Kept:
//   - request latency (fspair_disk_request_duration_seconds, and the host
//     devices' histograms): every 4x, 2 us .. 8.4 s. What the guest waits
//     for, and what histogram_quantile is asked about: the finest layout.
//   - the host stages (fspair_disk_stage_seconds{stage=host_queue|device}):
//     every 8x, 4 us .. 8.4 s. The dashboards draw them as heatmaps and
//     read their means from _sum and _count.
//   - stage="file": no bucket, only _sum and _count (and le="+Inf"). Its
//     slots are those of fspair_disk_request_duration_seconds{op=read|write},
//     which carries the distribution.
//   - inter-arrival time: no bucket. No rule or dashboard reads its
//     distribution; its mean is _sum over _count.
//   - request sizes: every 4x, 1 KiB .. 4 MiB (4 KiB a bound).
//   - outstanding requests: every 4x, 1 .. 256.
//   - seek distance: every 64x, 0 and -1 (a sequential request, d = 0, is
//     the bucket between them), +-4 KiB, 256 KiB, 16 MiB, 1 GiB, 64 GiB.
//
// 191 series for the typical disk (TestSeriesPerDisk).

// keepIf is the keep flags of n bounds: bound i is kept where f(i).
func keepIf(n int, f func(i int) bool) []bool {
	k := make([]bool, n)
	for i := range k {
		k[i] = f(i)
	}
	return k
}

// keepEvery keeps every step-th of n bounds, counting down from the last.
func keepEvery(n, step int) []bool {
	return keepIf(n, func(i int) bool { return (n-1-i)%step == 0 })
}

// The native layouts. Each BPF slot holds the values v with
// bound[k-1] < v <= bound[k] (pow2_bucket and seek_bucket in bpf/; the
// first slot everything up to its bound, the last everything above the
// last bound), which is how Prometheus counts a positive native bucket:
// (base^(i-1), base^i]. Where a classic bound is a power of the schema's
// base the native bucket is the same bucket; elsewhere the shift is said.
//
//   - request sizes, 512 B * 2^k: schema 0, slot k to bucket 9+k, exact.
//     The first slot (0 to 512 bytes; QEMU issues whole sectors, so
//     512-byte requests in practice) is the zero bucket, threshold 512:
//     bucket 9, (256, 512], would claim that none was 256 bytes or less.
//   - outstanding requests, 2^k: schema 0, slot k to bucket k, exact; the
//     first slot (1, counting the request itself) is bucket 0, (0.5, 1],
//     and the zero bucket (threshold 0) stays empty.
//   - latency and inter-arrival, 1 us * 2^k: 1 us is 2^-19.93 s, no power
//     of 2. Schema 0, slot k to bucket k-20, upper bound 2^(k-20) s =
//     0.954 us * 2^k: every boundary 4.63% below the classic one (an
//     observation of 1.0 to 1.048 times a classic bound is counted one
//     bucket low in the native bucket's terms; quantiles read from native
//     buckets come out up to 4.63% low). A finer schema would put the
//     boundaries closer (schema 4: 0.4% off) but claim 16 buckets an
//     octave where the kernel counted one, and histogram_quantile would
//     interpolate inside a sixteenth of the true bucket. The first slot
//     (0 to 1 us) is the zero bucket, threshold 2^-20 s.
//   - seek distance, signed, 4 KiB * 4^k: schema -1 (base 4), exact in
//     magnitude: slot (B_(k-1), B_k] to positive bucket 6+k; slots -1
//     and 0 and the first positive slot, -4 KiB < d <= 4 KiB (sequential
//     and near-sequential requests), are the zero bucket, threshold 4096.
//     Backward slot le=-B_k counts -B_(k+1) < d <= -B_k (the classic
//     le includes -B_k) and goes to negative bucket 7+k, which in the
//     native convention is -B_(k+1) <= d < -B_k: a distance of exactly
//     -B_k (or -B_(k+1)) is counted one bucket off that convention, the
//     one error of this layout, at single byte values.
//
// The +Inf slot goes to the bucket above the last bound (latency: (8, 16]
// s; sizes (8, 16] MiB; outstanding (256, 512]; seek (64, 256] GiB either
// way): everything beyond the last bound is counted there, as the classic
// +Inf bucket counts it. Counts and sums are the kernel's, so native and
// classic agree on both exactly.
var (
	latencyNative = pow2Native(len(latencyBounds), -20, true)
	latencyShape  = shape{latencyBounds, keepEvery(len(latencyBounds), 2), latencyNative}
	stageShape    = shape{latencyBounds, keepEvery(len(latencyBounds), 3), latencyNative}
	// stage="file" and the inter-arrival time: _sum and _count only.
	unbucketedLatencyShape = shape{latencyBounds, make([]bool, len(latencyBounds)), latencyNative}
	interarrivalShape      = unbucketedLatencyShape
	sizeShape              = shape{sizeBounds, keepIf(len(sizeBounds), func(i int) bool { return i%2 == 1 && i < len(sizeBounds)-1 }),
		pow2Native(len(sizeBounds), 9, true)}
	outstandingShape = shape{outstandingBounds, keepEvery(len(outstandingBounds), 2),
		pow2Native(len(outstandingBounds), 0, false)}
	// seekBounds[12-k] is -B_k, [13] -1, [14] 0, [15+k] B_k.
	seekShape = shape{seekBounds, keepIf(len(seekBounds), func(i int) bool {
		return i == 13 || i == 14 || (i < 13 && (12-i)%3 == 0) || (i > 14 && (i-15)%3 == 0)
	}), seekNative()}
)

// pow2Native is the schema 0 layout of slots whose bound k is 2^(first+k),
// the last slot +Inf; the first slot is the zero bucket (threshold
// 2^first) when zero, else bucket first.
func pow2Native(bounds int, first int32, zero bool) *nativeLayout {
	l := &nativeLayout{schema: 0}
	for k := 0; k <= bounds; k++ {
		if k == 0 && zero {
			l.zero = []int{0}
			l.zeroThreshold = math.Ldexp(1, int(first))
			continue
		}
		l.pos = append(l.pos, slotIndex{k, first + int32(k)})
	}
	return l
}

// seekNative is the schema -1 layout of seek_bucket()'s slots (seekBounds):
// 0..12 backward, farthest first; 13 (-4 KiB < d < 0), 14 (0), 15 (0 < d
// <= 4 KiB); 16..27 forward; 28 +Inf. B_k = 4096 * 4^k = 4^(6+k).
func seekNative() *nativeLayout {
	l := &nativeLayout{schema: -1, zeroThreshold: 4096, zero: []int{13, 14, 15}}
	for s := 12; s >= 0; s-- { // slot s: |d| from B_(12-s), bucket 7+12-s
		l.neg = append(l.neg, slotIndex{s, int32(19 - s)})
	}
	for s := 16; s <= 28; s++ { // slot s: d up to B_(s-15), bucket 6+s-15
		l.pos = append(l.pos, slotIndex{s, int32(s - 9)})
	}
	return l
}

func pow2Bounds(n int, unit float64) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = unit * math.Ldexp(1, i)
	}
	return b
}

// seekDistanceBounds mirrors seek_bucket(): -B12..-B0, -1, 0, B0..B12 with
// B_k = 4 KiB * 4^k.
func seekDistanceBounds() []float64 {
	var b []float64
	for k := 12; k >= 0; k-- {
		b = append(b, -4096*math.Pow(4, float64(k)))
	}
	b = append(b, -1, 0)
	for k := 0; k <= 12; k++ {
		b = append(b, 4096*math.Pow(4, float64(k)))
	}
	return b
}

// histogram builds a const histogram with sh's classic buckets from
// per-slot counts whose last slot is +Inf; sum is in the histogram's unit.
func histogram(desc *prometheus.Desc, sh shape, slots []uint64, sum float64, labels ...string) (prometheus.Metric, error) {
	if len(slots) != len(sh.bounds)+1 {
		return nil, fmt.Errorf("histogram %s: %d slots for %d bounds", desc, len(slots), len(sh.bounds))
	}
	buckets := make(map[float64]uint64, len(sh.bounds))
	var cum uint64
	for i, b := range sh.bounds {
		cum += slots[i]
		if sh.keep[i] {
			buckets[b] = cum
		}
	}
	cum += slots[len(sh.bounds)]
	return prometheus.NewConstHistogram(desc, cum, sum, buckets, labels...)
}

// CounterReader reads a disk slot's kernel counters.
type CounterReader interface {
	Counters(slot uint32) (probe.Counters, error)
}

// BatchCounterReader reads many disks' counters at once: got(i, c) with
// the counters of slots[i] (c valid until got returns), or failed(i, err).
// probe.Probes does, in a few system calls rather than one a disk; a
// scrape reads every disk so when its CounterReader is one.
type BatchCounterReader interface {
	CountersInto(slots []uint32, got func(i int, c *probe.Counters), failed func(i int, err error))
}

// CoverageReader says which request paths of a disk the probes do not
// follow (probe.Probes does); a CounterReader that is not one follows all.
type CoverageReader interface {
	Unfollowed(fs, cache, aio string) []probe.Gap
}

// unfollowed lists a tracked disk's gaps, if counters can tell them.
func unfollowed(counters CounterReader, d *inventory.Disk) []probe.Gap {
	c, ok := counters.(CoverageReader)
	if !ok || !d.Tracked {
		return nil
	}
	return c.Unfollowed(d.HostFS.FSType, d.Cache, d.AIO)
}

// DiskLister lists the tracked disks.
type DiskLister interface {
	Disks() []inventory.Disk
}

// DiskCollector exports the request stream of every tracked VM disk.
type DiskCollector struct {
	inv      DiskLister
	counters CounterReader
}

// NewDiskCollector returns the disk collector.
func NewDiskCollector(inv DiskLister, counters CounterReader) *DiskCollector {
	return &DiskCollector{inv: inv, counters: counters}
}

// Update implements Collector.
func (c *DiskCollector) Update(ch chan<- prometheus.Metric) error {
	for _, d := range c.inv.Disks() {
		k := []string{d.Domain, d.UUID, d.TargetDevice, d.SourceFile}
		ch <- prometheus.MustNewConstMetric(diskInfo, prometheus.GaugeValue, 1, append(k,
			orUnknown(d.ImageFormat), orUnknown(d.GuestFS), d.GuestFSSource, orUnknown(hostLabel(d.HostFS.FSType)),
			hostLabel(d.HostFS.MountPoint), hostLabel(d.HostFS.Device), orUnknown(d.Cache), orUnknown(d.AIO), d.Source)...)
		if d.VirtualSize > 0 {
			ch <- prometheus.MustNewConstMetric(diskVirtualSize, prometheus.GaugeValue, float64(d.VirtualSize), k...)
		}
		for _, g := range unfollowed(c.counters, &d) {
			ch <- prometheus.MustNewConstMetric(diskUnfollowed, prometheus.GaugeValue, 1, with(k, g.Op, g.Path, g.Missing)...)
		}
		if !d.Tracked {
			continue
		}
		s, err := c.counters.Counters(d.Slot)
		if err != nil {
			return err
		}
		if err := emitCounters(ch, k, &s); err != nil {
			return err
		}
	}
	return nil
}

func orUnknown(v string) string {
	if v == "" {
		return "unknown"
	}
	return v
}

func with(k []string, v ...string) []string {
	return append(append(make([]string, 0, len(k)+len(v)), k...), v...)
}

func emitCounters(ch chan<- prometheus.Metric, k []string, s *probe.Counters) error {
	counter := func(d *prometheus.Desc, v uint64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), with(k, extra...)...)
	}
	hist := func(d *prometheus.Desc, sh shape, slots []uint64, sum float64, extra ...string) error {
		m, err := histogram(d, sh, slots, sum, with(k, extra...)...)
		if err == nil {
			ch <- m
		}
		return err
	}
	for i, op := range opNames {
		counter(diskRequests, s.Requests[i], op)
		counter(diskBytes, s.Bytes[i], op)
		counter(diskErrors, s.Errors[i], op)
		if err := hist(diskLatency, latencyShape, s.Latency[i][:], float64(s.LatencySumNs[i])/1e9, op); err != nil {
			return err
		}
	}
	for i, op := range dirNames {
		if err := hist(diskSize, sizeShape, s.Size[i][:], float64(s.SizeSum[i]), op); err != nil {
			return err
		}
		// The first stage of fspair_disk_stage_seconds (the host collector
		// adds host_queue and device): the image-file request itself.
		if err := hist(diskStage, unbucketedLatencyShape, s.Latency[i][:], float64(s.LatencySumNs[i])/1e9, "file", op); err != nil {
			return err
		}
		counter(diskSequential, s.Sequential[i], op)
		counter(diskRandom, s.Random[i], op)
		counter(diskFormatRequests, s.FormatRequests[i], op)
		counter(diskFormatBytes, s.FormatBytes[i], op)
	}
	if err := hist(diskSeek, seekShape, s.SeekPrev[:], float64(s.SeekPrevSum), "previous"); err != nil {
		return err
	}
	if err := hist(diskSeek, seekShape, s.SeekNear[:], float64(s.SeekNearSum), "nearest16"); err != nil {
		return err
	}
	for i, m := range syncModes {
		counter(diskSyncWrites, s.SyncWrites[i], m)
	}
	if err := hist(diskOutstanding, outstandingShape, s.Outstanding[:], float64(s.OutstandingSum)); err != nil {
		return err
	}
	if err := hist(diskInterarrival, interarrivalShape, s.Interarrival[:], float64(s.InterarrivalSumNs)/1e9); err != nil {
		return err
	}
	for i, name := range ifaceNames {
		counter(diskSubmissions, s.Submissions[i], name)
	}
	counter(diskPunted, s.IoUringPunted)
	for i := range cacheReadResults {
		counter(diskCacheReads, s.CacheReads[i], cacheReadResults[i])
		counter(diskCacheReadBytes, s.CacheReadBytes[i], cacheReadResults[i])
		counter(diskCacheWriteBytes, s.CacheWriteBytes[i], cacheWriteResults[i])
	}
	return nil
}
