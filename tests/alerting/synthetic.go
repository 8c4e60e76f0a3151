package alerting

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Workload is a synthetic request stream: per-second rates and shapes from
// which a SyntheticTarget derives every counter of a disk as rate x elapsed
// time, so that rate() over any window gives back these numbers.
type Workload struct {
	ReadIOPS, WriteIOPS float64 // reads and writes per second
	FlushPerWrite       float64 // flushes (fdatasync) per write
	ReadSize, WriteSize float64 // bytes per request
	RandomRead          float64 // share of reads that are random, 0..1
	RandomWrite         float64 // share of writes that are random, 0..1
	SyncWrite           float64 // share of writes that had to be durable (mode="flush"), 0..1
	Outstanding         float64 // requests in flight at issue, counting itself

	// Latencies of the file stage (as the VMM waits) and of the host
	// device, in seconds.
	ReadLatency, WriteLatency, FlushLatency float64
	DeviceReadLatency, DeviceWriteLatency   float64
	// DeviceReadShare is the share of read bytes the host device serves
	// (the rest comes from the host page cache).
	DeviceReadShare float64
}

// The four workloads of the knowledge base
// (../shared/kdb/published-findings.yaml, workloads) as request streams on
// the image file, each where the lab recorded its fio model
// (tests/workload/jobs/CLASS.fio; "recorded" below is its six windows in
// tests/workload/testdata/features.json, one per guest/host pair). The
// shape that decides the class (reads per write, mean read and write size,
// durable share of writes, flushes per write, random share of writes) is
// the fio model's centre in rules/classes.yaml (the class's `others: fio`,
// the median of those windows, per guest file system where it gives one),
// and lies inside the class's box in the boxes the fit replaced
// (tests/workload/testdata/classes-fitbase.yaml), set on the same runs: the
// tests that need a class paired get it from either model. The Filebench
// programs' own centres would not do: each lies outside its box (mail's 0.18-0.35 of
// writes durable against 0.90-1.00, rfa's write-only stream against 10-15
// reads per write, web's 18 KiB reads against 10.4-10.6 KiB, fileserver's
// 52 KiB against 96-102 KiB). Where a class runs on two guest file systems
// in the tests (mail: xfs and ext4) a value lies between the two centres,
// within a unit of each. Log2 values are the model's features
// (rules/classes.yaml). Rates, latencies, queue depth and the device's
// share of reads do not decide the class; they serve what the tests assert
// (write amplification and latency overhead need 64 KiB/s of guest writes
// and a request per second per stage).
var (
	// WorkloadMail: delete, create+append+fsync, read+append+fsync, read
	// (varmail.f, mail.fio): small appends each made durable, and about as
	// many small reads. Runs on xfs and ext4 in the tests.
	WorkloadMail = Workload{
		// 0.944 reads per write (log2 -0.08): the centre's 0.946; the
		// six recorded windows 0.68-1.34 at 296-380 requests/s.
		ReadIOPS: 170, WriteIOPS: 180,
		// 0.77 flushes per write (log2 -0.38): between the centre on
		// ext4 (0.688, -0.54) and on xfs (0.858, -0.22).
		FlushPerWrite: 0.77,
		// Mean read 11,110 B (log2 13.44, the centre; recorded
		// 10,835-11,110 B). Mean write 9.5 KiB (log2 13.25): between the
		// centre on ext4 (12.9 KiB, 13.69) and on xfs (6.9 KiB, 12.78).
		ReadSize: 11110, WriteSize: 9728,
		// Random share of reads 0.9 (recorded 0.90-0.96; no feature);
		// of writes 0.14, the centre (recorded 0.10-0.28).
		RandomRead: 0.9, RandomWrite: 0.14,
		// 0.99 of writes durable: the centre (recorded 0.90-1.00).
		SyncWrite:   0.99,
		Outstanding: 2, ReadLatency: 0.0008, WriteLatency: 0.0012, FlushLatency: 0.004,
		DeviceReadLatency: 0.0006, DeviceWriteLatency: 0.0008, DeviceReadShare: 0.6,
	}
	// WorkloadWeb: open, read whole file, close x10, then one append to a
	// shared log (webserver.f, web.fio): small reads and, hundreds of reads
	// apart, a write-back of the log. Runs on xfs in the tests.
	WorkloadWeb = Workload{
		// 600 reads per write (log2 9.23): the centre's 592 (recorded
		// 392-965).
		ReadIOPS: 900, WriteIOPS: 1.5,
		// 0.2 flushes per write (log2 -2.32): the centre on xfs (0.204,
		// -2.29; recorded on xfs 0.133 and 0.312).
		FlushPerWrite: 0.2,
		// Mean read 10.5 KiB (log2 13.39, the centre; recorded
		// 10,703-10,787 B). Mean write 314 KiB (log2 18.29): the centre on
		// xfs (18.27; recorded on xfs 304,576 and 325,905 B).
		ReadSize: 10752, WriteSize: 321536,
		// Random share of reads 0.9 (recorded 0.89-0.94); of writes 0.59,
		// the centre (recorded 0.53-0.81).
		RandomRead: 0.9, RandomWrite: 0.59,
		// 0.23 of writes durable: the centre on xfs (recorded on xfs 0.125
		// and 0.333).
		SyncWrite:   0.23,
		Outstanding: 8, ReadLatency: 0.0006, WriteLatency: 0.001, FlushLatency: 0.003,
		DeviceReadLatency: 0.0005, DeviceWriteLatency: 0.0007, DeviceReadShare: 0.7,
	}
	// WorkloadFileserver: create+write whole file, append, read whole
	// file, delete (fileserver.f, fileserver.fio): large reads and writes,
	// asynchronous. Runs on ext4 in the tests.
	WorkloadFileserver = Workload{
		// 0.474 reads per write (log2 -1.08): the centre's 0.473
		// (recorded 0.44-0.50 at 193-280 requests/s).
		ReadIOPS: 90, WriteIOPS: 190,
		// 0.0027 flushes per write (log2 -8.53): the centre on ext4
		// (0.00274, -8.51; recorded on ext4 0.002-0.003).
		FlushPerWrite: 0.0027,
		// Mean read 104,184 B (log2 16.67, the centre; recorded on ext4
		// 104,179-104,191 B). Mean write 52,600 B (log2 15.68, the centre;
		// recorded on ext4 52,477-52,788 B).
		ReadSize: 104184, WriteSize: 52600,
		// Random share of reads 0.88 (recorded 0.87-0.93); of writes
		// 0.34, the centre (recorded 0.33-0.36).
		RandomRead: 0.88, RandomWrite: 0.34,
		// No durable writes: the centre (recorded 0.000-0.013).
		SyncWrite:   0,
		Outstanding: 16, ReadLatency: 0.002, WriteLatency: 0.002, FlushLatency: 0.02,
		DeviceReadLatency: 0.0015, DeviceWriteLatency: 0.0015, DeviceReadShare: 0.5,
	}
	// WorkloadRFA: open x3, append, read x2 (randomfileaccess.f, rfa.fio):
	// many small reads per write, writes asynchronous but for the journal's
	// commits. Runs on xfs in the tests.
	WorkloadRFA = Workload{
		// 14 reads per write (log2 3.81): the centre's 14 (recorded
		// 10.2-15.1 at 530-557 requests/s).
		ReadIOPS: 490, WriteIOPS: 35,
		// 0.15 flushes per write (log2 -2.74): the centre on xfs (0.154,
		// -2.7; recorded on xfs 0.146 and 0.163).
		FlushPerWrite: 0.15,
		// Mean read 8,830 B (log2 13.11, the centre; recorded
		// 8,784-8,833 B). Mean write 40 KiB (log2 15.32): the centre's
		// 39.4 KiB (15.3; recorded 32,420-42,351 B).
		ReadSize: 8830, WriteSize: 40960,
		// Random share of reads 0.32 (recorded 0.31-0.33: small files
		// read in 8 KiB pieces count as sequential); of writes 0.79, the
		// centre (recorded 0.55-0.83).
		RandomRead: 0.32, RandomWrite: 0.79,
		// 0.06 of writes durable: the centre (recorded 0.05-0.07).
		SyncWrite:   0.06,
		Outstanding: 4, ReadLatency: 0.0009, WriteLatency: 0.0009, FlushLatency: 0.01,
		DeviceReadLatency: 0.0007, DeviceWriteLatency: 0.0007, DeviceReadShare: 0.8,
	}
)

// SyntheticDisk is one VM disk a SyntheticTarget exports.
type SyntheticDisk struct {
	Domain, UUID, TargetDevice, SourceFile string
	Format                                 string // raw, qcow2
	GuestFS, HostFS                        string // ext4, xfs, btrfs
	HostDevice, HostMountpoint             string
	Cache, AIO                             string // defaults none, native
	Workload                               Workload
	// DataAmplification is host-device data bytes written for the image
	// per guest byte written; MetadataAmplification the host file
	// system's journal and metadata bytes per guest byte written. Zero
	// picks HostAmplification[HostFS].
	DataAmplification, MetadataAmplification float64
}

// HostAmplification is the data and metadata bytes the host device wrote
// per guest byte for an fsync-heavy guest, as measured in the host-side
// test (tests/e2e TestHostSide: ext4 1.54, XFS 1.10, Btrfs 3.92 in all).
var HostAmplification = map[string][2]float64{
	"ext4":  {1.0, 0.54},
	"xfs":   {1.0, 0.10},
	"btrfs": {1.0, 2.92},
}

// SyntheticTarget serves fspair_exporter's exposition for synthetic disks
// on loopback. Every counter grows linearly from the moment the target
// started, so rates are exact and stable.
type SyntheticTarget struct {
	srv   *http.Server
	addr  string
	start time.Time

	mu    sync.Mutex
	disks []SyntheticDisk
	now   func() time.Time
}

// NewSyntheticTarget starts serving /metrics for disks on 127.0.0.1.
func NewSyntheticTarget(disks []SyntheticDisk) (*SyntheticTarget, error) {
	return NewSyntheticTargetAt("127.0.0.1:0", disks)
}

// NewSyntheticTargetAt starts serving /metrics for disks on addr (host:port,
// e.g. ":9101" in a container of the lab fleet).
func NewSyntheticTargetAt(addr string, disks []SyntheticDisk) (*SyntheticTarget, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for synthetic target: %w", err)
	}
	t := &SyntheticTarget{addr: l.Addr().String(), start: time.Now(), now: time.Now}
	t.SetDisks(disks)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(t.Exposition())
	})
	t.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go t.srv.Serve(l)
	return t, nil
}

// Addr is the host:port to scrape.
func (t *SyntheticTarget) Addr() string { return t.addr }

// SetDisks replaces the exported disks (counters keep counting from the
// target's start).
func (t *SyntheticTarget) SetDisks(disks []SyntheticDisk) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.disks = append([]SyntheticDisk(nil), disks...)
}

// Close stops serving; Prometheus then sees the target down.
func (t *SyntheticTarget) Close() error {
	return t.srv.Close()
}

// Histogram bounds as the exporter has them (exporter/collector/disk.go):
// latency 1 us .. 8.4 s, size 512 B .. 8 MiB, in-flight 1 .. 256, signed seek
// distance in powers of 4 from 4 KiB.
var (
	latencyBounds = pow2(24, 1e-6)
	sizeBounds    = pow2(15, 512)
	outstBounds   = pow2(9, 1)
	seekBounds    = seekDistanceBounds()
)

func pow2(n int, unit float64) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = unit * math.Ldexp(1, i)
	}
	return b
}

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

// exposition accumulates metric families in text format.
type exposition struct {
	fams  map[string]*family
	order []string
}

type family struct {
	typ   string
	lines []string
}

func (e *exposition) add(name, typ string, labels [][2]string, v float64) {
	f := e.fams[name]
	if f == nil {
		f = &family{typ: typ}
		e.fams[name] = f
		e.order = append(e.order, name)
	}
	f.lines = append(f.lines, sample(name, labels, v))
}

// histogram adds a histogram whose count observations all equal mean.
func (e *exposition) histogram(name string, labels [][2]string, bounds []float64, count, mean float64) {
	e.histogramFunc(name, labels, bounds, allAt(count, mean), count, count*mean)
}

// allAt is the cumulative count of a histogram whose count observations
// all equal v: none below v's bucket, all from it.
func allAt(count, v float64) func(float64) float64 {
	return func(b float64) float64 {
		if v <= b {
			return count
		}
		return 0
	}
}

// histogramFunc adds a histogram with cum(b) observations at or below
// each bound b.
func (e *exposition) histogramFunc(name string, labels [][2]string, bounds []float64, cum func(float64) float64, count, sum float64) {
	f := e.fams[name]
	if f == nil {
		f = &family{typ: "histogram"}
		e.fams[name] = f
		e.order = append(e.order, name)
	}
	for _, b := range bounds {
		f.lines = append(f.lines, sample(name+"_bucket", with(labels, "le", fmtFloat(b)), cum(b)))
	}
	f.lines = append(f.lines,
		sample(name+"_bucket", with(labels, "le", "+Inf"), count),
		sample(name+"_sum", labels, sum),
		sample(name+"_count", labels, count))
}

func (e *exposition) bytes() []byte {
	var b bytes.Buffer
	sort.Strings(e.order)
	for _, n := range e.order {
		f := e.fams[n]
		fmt.Fprintf(&b, "# HELP %s Synthetic series of tests/alerting, shaped like fspair_exporter's.\n", n)
		fmt.Fprintf(&b, "# TYPE %s %s\n", n, f.typ)
		for _, l := range f.lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func sample(name string, labels [][2]string, v float64) string {
	var b strings.Builder
	b.WriteString(name)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%q", l[0], l[1])
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(fmtFloat(v))
	return b.String()
}

func fmtFloat(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return fmt.Sprintf("%g", v)
}

func with(base [][2]string, extra ...string) [][2]string {
	l := append([][2]string(nil), base...)
	for i := 0; i+1 < len(extra); i += 2 {
		l = append(l, [2]string{extra[i], extra[i+1]})
	}
	return l
}

func def(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Exposition renders the metrics as of now.
func (t *SyntheticTarget) Exposition() []byte {
	t.mu.Lock()
	disks := append([]SyntheticDisk(nil), t.disks...)
	el := t.now().Sub(t.start).Seconds()
	t.mu.Unlock()

	e := &exposition{fams: map[string]*family{}}
	type dev struct {
		labels                  [][2]string
		disks                   float64
		dataW, dataR, metaW     float64
		reqDataW, reqDataR      float64
		writeLat, readLat       float64
		commits, flushes        float64
		readLatSum, writeLatSum float64
	}
	devs := map[string]*dev{}
	var devOrder []string
	for _, d := range disks {
		w := d.Workload
		l := [][2]string{{"domain", d.Domain}, {"uuid", d.UUID}, {"target_device", d.TargetDevice}, {"source_file", d.SourceFile}}
		e.add("fspair_disk_info", "gauge", with(l,
			"format", def(d.Format, "raw"), "guest_fs", d.GuestFS, "guest_fs_source", "image",
			"host_fs", d.HostFS, "host_mountpoint", d.HostMountpoint, "host_device", d.HostDevice,
			"cache", def(d.Cache, "none"), "aio", def(d.AIO, "native"), "discovery", "static"), 1)

		reads, writes := w.ReadIOPS*el, w.WriteIOPS*el
		flushes := writes * w.FlushPerWrite
		rbytes, wbytes := reads*w.ReadSize, writes*w.WriteSize
		ops := []struct {
			op         string
			n, b, lat  float64
			size, rand float64
		}{
			{"read", reads, rbytes, w.ReadLatency, w.ReadSize, w.RandomRead},
			{"write", writes, wbytes, w.WriteLatency, w.WriteSize, w.RandomWrite},
			{"flush", flushes, 0, w.FlushLatency, 0, 0},
			{"discard", 0, 0, 0, 0, 0},
			{"write_zeroes", 0, 0, 0, 0, 0},
			{"allocate", 0, 0, 0, 0, 0},
		}
		var seqN, randN float64
		for _, o := range ops {
			ol := with(l, "op", o.op)
			e.add("fspair_disk_requests_total", "counter", ol, math.Floor(o.n))
			e.add("fspair_disk_bytes_total", "counter", ol, math.Floor(o.b))
			e.add("fspair_disk_request_errors_total", "counter", ol, 0)
			e.histogram("fspair_disk_request_duration_seconds", ol, latencyBounds, math.Floor(o.n), o.lat)
			if o.op != "read" && o.op != "write" {
				continue
			}
			e.histogram("fspair_disk_request_size_bytes", ol, sizeBounds, math.Floor(o.n), o.size)
			e.add("fspair_disk_sequential_requests_total", "counter", ol, math.Floor(o.n*(1-o.rand)))
			e.add("fspair_disk_random_requests_total", "counter", ol, math.Floor(o.n*o.rand))
			seqN += math.Floor(o.n * (1 - o.rand))
			randN += math.Floor(o.n * o.rand)
			e.histogram("fspair_disk_stage_seconds", with(l, "op", o.op, "stage", "file"), latencyBounds, math.Floor(o.n), o.lat)
		}
		// Seek distances: sequential requests land at 0, random ones far
		// away (past 256 MiB), which is what a uniform random stream over a
		// large disk mostly shows.
		const far = 268435456
		for _, ref := range []string{"previous", "nearest16"} {
			e.histogramFunc("fspair_disk_seek_distance_bytes", with(l, "reference", ref), seekBounds, func(b float64) float64 {
				c := 0.0
				if b >= 0 {
					c += seqN
				}
				if b >= far {
					c += randN
				}
				return c
			}, seqN+randN, randN*far)
		}
		e.add("fspair_disk_sync_writes_total", "counter", with(l, "mode", "dsync"), 0)
		e.add("fspair_disk_sync_writes_total", "counter", with(l, "mode", "flush"), math.Floor(writes*w.SyncWrite))
		subs := math.Floor(reads + writes + flushes)
		iface := map[string]string{"native": "linux_aio", "threads": "syscall", "io_uring": "io_uring"}[def(d.AIO, "native")]
		for _, i := range []string{"syscall", "linux_aio", "io_uring"} {
			v := 0.0
			if i == iface {
				v = subs
			}
			e.add("fspair_disk_submissions_total", "counter", with(l, "interface", i), v)
		}
		e.add("fspair_disk_io_uring_punted_total", "counter", l, 0)
		e.histogram("fspair_disk_outstanding_requests", l, outstBounds, subs, math.Max(1, w.Outstanding))
		if rate := w.ReadIOPS + w.WriteIOPS*(1+w.FlushPerWrite); rate > 0 {
			e.histogram("fspair_disk_interarrival_seconds", l, latencyBounds, subs, 1/rate)
		}
		for _, op := range []string{"read", "write"} {
			e.add("fspair_disk_format_metadata_requests_total", "counter", with(l, "op", op), 0)
			e.add("fspair_disk_format_metadata_bytes_total", "counter", with(l, "op", op), 0)
		}
		e.add("fspair_disk_virtual_size_bytes", "gauge", l, 10737418240)

		// Host side: the image's data on the device and the device's
		// share of journal and metadata writes caused by this disk.
		amp := HostAmplification[d.HostFS]
		dataAmp, metaAmp := d.DataAmplification, d.MetadataAmplification
		if dataAmp == 0 {
			dataAmp = amp[0]
		}
		if metaAmp == 0 {
			metaAmp = amp[1]
		}
		devRB, devWB := math.Floor(rbytes*w.DeviceReadShare), math.Floor(wbytes*dataAmp)
		devRN, devWN := math.Floor(reads*w.DeviceReadShare), math.Floor(writes*dataAmp)
		e.add("fspair_disk_device_requests_total", "counter", with(l, "op", "read"), devRN)
		e.add("fspair_disk_device_requests_total", "counter", with(l, "op", "write"), devWN)
		e.add("fspair_disk_device_bytes_total", "counter", with(l, "op", "read"), devRB)
		e.add("fspair_disk_device_bytes_total", "counter", with(l, "op", "write"), devWB)
		for _, s := range []struct {
			op        string
			n, dl, ql float64
		}{{"read", devRN, w.DeviceReadLatency, w.DeviceReadLatency / 10}, {"write", devWN, w.DeviceWriteLatency, w.DeviceWriteLatency / 10}} {
			e.histogram("fspair_disk_stage_seconds", with(l, "op", s.op, "stage", "device"), latencyBounds, s.n, s.dl)
			e.histogram("fspair_disk_stage_seconds", with(l, "op", s.op, "stage", "host_queue"), latencyBounds, s.n, s.ql)
		}
		// Flush cost: a flush writes back the synced data itself and makes
		// the journal commit the metadata that describes it.
		synced := wbytes * w.SyncWrite
		for _, f := range []struct {
			source, kind string
			b            float64
		}{
			{"call", "data", synced * dataAmp}, {"call", "metadata", 0}, {"call", "other", 0},
			{"journal", "data", 0}, {"journal", "metadata", synced * metaAmp}, {"journal", "other", 0},
		} {
			fl := with(l, "source", f.source, "kind", f.kind)
			e.add("fspair_disk_flush_device_write_bytes_total", "counter", fl, math.Floor(f.b))
			e.add("fspair_disk_flush_device_writes_total", "counter", fl, math.Floor(f.b/4096))
		}
		e.add("fspair_disk_flush_device_cache_flushes_total", "counter", l, math.Floor(flushes))
		if d.HostFS == "btrfs" {
			e.add("fspair_disk_btrfs_extents_total", "counter", with(l, "mode", "cow"), math.Floor(writes))
			e.add("fspair_disk_btrfs_extents_total", "counter", with(l, "mode", "nocow"), 0)
			e.add("fspair_disk_btrfs_extent_bytes_total", "counter", with(l, "mode", "cow"), math.Floor(wbytes))
			e.add("fspair_disk_btrfs_extent_bytes_total", "counter", with(l, "mode", "nocow"), 0)
		}
		// The guest side, as QEMU's query-blockstats gives it over QMP:
		// the guest asked a quarter more reads and writes than reached
		// the file (QEMU merged them) and half again as many flushes
		// (QEMU skipped those with nothing to flush); QEMU adds
		// guestOverhead to each request.
		const guestOverhead = 0.0001
		e.add("fspair_disk_guest_info", "gauge", with(l, "source", "qmp", "status", "ok", "histogram", "ok"), 1)
		e.add("fspair_disk_guest_last_read_timestamp_seconds", "gauge", l, float64(t.now().Unix()))
		for _, g := range []struct {
			op               string
			n, bytes, timeNs float64
		}{
			{"read", reads * 1.25, rbytes, reads * 1.25 * (w.ReadLatency + guestOverhead)},
			{"write", writes * 1.25, wbytes, writes * 1.25 * (w.WriteLatency + guestOverhead)},
			{"flush", flushes * 1.5, 0, flushes*w.FlushLatency + flushes*1.5*guestOverhead},
			{"discard", 0, 0, 0},
		} {
			gl := with(l, "op", g.op)
			e.add("fspair_disk_guest_requests_total", "counter", gl, math.Floor(g.n))
			e.add("fspair_disk_guest_request_errors_total", "counter", gl, 0)
			e.add("fspair_disk_guest_request_duration_seconds_total", "counter", gl, g.timeNs)
			if g.op != "discard" {
				// QEMU's latency histogram of the operation, on the image
				// file's bounds (the exporter's guestLatencyFamily): its
				// count is the guest's requests (none failed), its sum
				// the guest's total time, every request at their mean.
				n := math.Floor(g.n)
				mean := 0.0
				if g.n > 0 {
					mean = g.timeNs / g.n
				}
				e.histogramFunc("fspair_disk_guest_request_duration_seconds", gl, latencyBounds, allAt(n, mean), n, g.timeNs)
			}
			if g.op != "flush" {
				e.add("fspair_disk_guest_bytes_total", "counter", gl, math.Floor(g.bytes))
			}
		}
		e.add("fspair_disk_image_extents", "gauge", l, 64)
		e.add("fspair_disk_image_allocated_bytes", "gauge", l, 4294967296)
		e.add("fspair_disk_image_apparent_bytes", "gauge", l, 10737418240)

		dv := devs[d.HostDevice]
		if dv == nil {
			dv = &dev{labels: [][2]string{{"host_device", d.HostDevice}, {"host_fs", d.HostFS}, {"host_mountpoint", d.HostMountpoint}}}
			devs[d.HostDevice] = dv
			devOrder = append(devOrder, d.HostDevice)
		}
		dv.disks++
		dv.dataR += devRB
		dv.dataW += devWB
		dv.metaW += math.Floor(wbytes * metaAmp)
		dv.reqDataR += devRN
		dv.reqDataW += devWN
		dv.readLatSum += devRN * w.DeviceReadLatency
		dv.writeLatSum += devWN * w.DeviceWriteLatency
		dv.commits += math.Floor(flushes)
		dv.flushes += math.Floor(flushes)
	}
	for _, name := range devOrder {
		dv := devs[name]
		l := dv.labels
		metaN := math.Floor(dv.metaW / 4096)
		for _, k := range []struct {
			kind           string
			rn, wn, rb, wb float64
		}{
			{"data", dv.reqDataR, dv.reqDataW, dv.dataR, dv.dataW},
			{"metadata", 0, metaN, 0, dv.metaW},
			{"other", 0, 0, 0, 0},
		} {
			e.add("fspair_host_device_requests_total", "counter", with(l, "kind", k.kind, "op", "read"), k.rn)
			e.add("fspair_host_device_requests_total", "counter", with(l, "kind", k.kind, "op", "write"), k.wn)
			e.add("fspair_host_device_bytes_total", "counter", with(l, "kind", k.kind, "op", "read"), k.rb)
			e.add("fspair_host_device_bytes_total", "counter", with(l, "kind", k.kind, "op", "write"), k.wb)
		}
		e.add("fspair_host_device_commits_total", "counter", l, dv.commits)
		e.add("fspair_host_device_flushes_total", "counter", l, dv.flushes)
		e.add("fspair_host_device_discards_total", "counter", l, 0)
		e.add("fspair_host_device_discard_bytes_total", "counter", l, 0)
		for _, s := range []struct {
			op     string
			n, sum float64
		}{{"read", dv.reqDataR, dv.readLatSum}, {"write", dv.reqDataW + metaN, dv.writeLatSum}} {
			mean := 0.0
			if s.n > 0 {
				mean = s.sum / s.n
			}
			e.histogram("fspair_host_device_service_seconds", with(l, "op", s.op), latencyBounds, s.n, mean)
			e.histogram("fspair_host_device_queue_seconds", with(l, "op", s.op), latencyBounds, s.n, mean/10)
		}
		e.add("fspair_host_device_vm_disks", "gauge", l, dv.disks)
	}

	// The exporter's report on itself: everything healthy, in the fentry mode.
	e.add("fspair_probe_mode_info", "gauge", [][2]string{{"mode", "fentry"}, {"requested", "auto"}}, 1)
	e.add("fspair_probe_stats_enabled", "gauge", nil, 0)
	for _, p := range [][2]string{{"register_image", "iter/task_file"}, {"ext4_read_enter", "fentry/ext4_file_read_iter"},
		{"ext4_read_exit", "fexit/ext4_file_read_iter"}, {"ext4_write_enter", "fentry/ext4_file_write_iter"},
		{"ext4_write_exit", "fexit/ext4_file_write_iter"}, {"ext4_fsync_enter", "fentry/ext4_sync_file"},
		{"ext4_fsync_exit", "fexit/ext4_sync_file"}, {"dio_complete_exit", "fexit/iomap_dio_complete"},
		{"host_rq_complete", "tp_btf/block_rq_complete"}} {
		e.add("fspair_probe_attached", "gauge", [][2]string{{"program", p[0]}, {"hook", p[1]}}, 1)
	}
	for _, r := range []string{"inflight_full", "bad_slot", "io_uring_fixed_file", "iov_too_long"} {
		e.add("fspair_probe_events_dropped_total", "counter", [][2]string{{"reason", r}}, 0)
	}
	for _, s := range []string{"libvirt", "qemu", "static"} {
		e.add("fspair_discovery_source_up", "gauge", [][2]string{{"source", s}}, 1)
		e.add("fspair_discovery_errors_total", "counter", [][2]string{{"source", s}}, 0)
	}
	for _, c := range []string{"disk", "host", "probe", "discovery"} {
		e.add("fspair_scrape_collector_success", "gauge", [][2]string{{"collector", c}}, 1)
	}
	e.add("fspair_discovery_refreshes_total", "counter", nil, math.Floor(el/5))
	e.add("fspair_image_errors_total", "counter", nil, 0)
	e.add("fspair_disks_tracked", "gauge", nil, float64(len(disks)))
	e.add("fspair_disks_max", "gauge", nil, 1024)
	e.add("fspair_disks_over_limit", "gauge", nil, 0)
	return e.bytes()
}
