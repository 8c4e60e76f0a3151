package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// TestGuestHistogram: the guest latency histograms (issue 38, item 6),
// against fio inside the guest, on a plain QEMU (fspair sets them over QMP)
// for raw and qcow2 images in the three aio modes, and on a libvirt domain
// (raw, aio native; qcow2, aio threads). libvirt here is older than 12.1,
// so its statistics have no histograms: with the default flags each disk
// must say so (fspair_disk_guest_info{histogram="libvirt_too_old"}) and
// export none; with --guest.libvirt-monitor-histograms fspair sets and
// reads them through libvirt's monitor pass-through, and they must hold
// what the plain QEMU's hold.
//
// Per disk, over one fio run of 4 KiB O_DIRECT random reads and writes
// (psync, one request at a time: every fio I/O is one guest request) with
// an fdatasync every 16 writes (a flush of the guest's disk), per
// operation, each of which must have had requests:
//
//   - the increase of fspair_disk_guest_request_duration_seconds' count
//     equals the increase of the guest's requests plus failed requests, as
//     fspair exports them (an operation's failures have no series before
//     the first: none failed; libvirt gives none)
//     and as QEMU's query-blockstats (asked by the test) counts them,
//     exactly, and is at least fio's request count;
//   - fio's completion-latency p99 is above the lower bound of the
//     histogram's p99 bucket: QEMU times each request from its device
//     taking it to completing it, inside the time fio sees in the guest,
//     so the guest's p99 cannot be below QEMU's. The text scrape has the
//     classic layout, a bucket every 4x (2 us, 8 us, ..., 8.4 s).
//
// Whether fio's p99 falls in the same bucket is logged, not asserted, on
// that run: in this lab's TCG guests it mostly does not (2026-11-29, three
// runs: fio's p99 0.75 to 4.0 ms, the histogram's p99 bucket (32, 128] us
// to (0.512, 2.048] ms, one to two buckets below), the guest's own share
// (its block layer, the virtio notification and the interrupt, emulated)
// being most of what fio measures. So two more jobs run with QEMU
// throttling the disk, which puts most of fio's time inside QEMU's:
//
//   - at throttledIOPS (about 16 ms a request), fio's median must fall in
//     the histogram's median bucket, read and write, on every disk;
//   - at slowIOPS (about 250 ms a request, the middle of the bucket
//     (131, 524] ms, so that the host's scheduling, which delayed the
//     faster throttle's slowest requests by up to 130 ms under load, cannot
//     move a p99 across a bound), fio's p99 must fall in the histogram's
//     p99 bucket, read and write. That job takes 40 s a disk, so make test
//     runs it on three, one of each aio mode, raw and qcow2 among them:
//     two plain QEMU disks (p99Subset) and the libvirt domain's qcow2 disk
//     (aio threads); -guesthist.all (make guesthist) runs it on all eight.
func TestGuestHistogram(t *testing.T) {
	ctx := context.Background()
	l := lab.ForTest(t)
	h, err := l.NewHostFS(ctx, "ext4", 2048)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("qemu", func(t *testing.T) {
		ex := startExporter(t, "--discovery.proc.qmp", "--guest.interval=500ms", "--guest.timeout=2s")
		var disks []lab.DiskConfig
		for _, format := range []string{"raw", "qcow2"} {
			for _, m := range aioModes {
				id := fmt.Sprintf("h%s%s", format[:1], m.aio[:2])
				path := h.Path(id + "." + format)
				if err := makeDataImage(ctx, path, format); err != nil {
					t.Fatal(err)
				}
				disks = append(disks, lab.DiskConfig{ID: id, File: path, Format: format, Cache: m.cache, AIO: m.aio})
			}
		}
		eachPathDisk(ctx, t, l, "e2e-guest-hist", disks, func(t *testing.T, vm *lab.VM, g *pathVM, d lab.DiskConfig, dev string) {
			waitHistogramStatus(t, ex, d.File, "ok")
			checkGuestHistogram(ctx, t, ex, g, d.File, dev, p99Subset(d.Format, d.AIO), func(iops int) error {
				_, err := vm.QMP(ctx, "block_set_io_throttle", map[string]any{"device": "drive-" + d.ID,
					"bps": 0, "bps_rd": 0, "bps_wr": 0, "iops": iops, "iops_rd": 0, "iops_wr": 0})
				return err
			})
		})
	})
	t.Run("libvirt", func(t *testing.T) {
		requireLibvirtTools(t)
		ensureLibvirt(t, l)
		g, guest, disks := startPathDomain(ctx, t, l, "fspair-e2e-hist", []lab.DomainDisk{
			{File: h.Path("lh0.raw"), Format: "raw", Cache: "none", IO: "native"},
			{File: h.Path("lh1.qcow2"), Format: "qcow2", Cache: "writeback", IO: "threads"},
		})
		t.Run("default", func(t *testing.T) {
			ex := startExporterWith(t, "--guest.interval=500ms", "--guest.timeout=2s")
			for _, d := range disks {
				s := waitHistogramStatus(t, ex, d.File, "libvirt_too_old")
				if n := len(s.series("fspair_disk_guest_request_duration_seconds", map[string]string{"source_file": d.File})); n != 0 {
					t.Errorf("%s: %d guest histogram series with histogram=libvirt_too_old, want none", d.Target, n)
				}
			}
		})
		t.Run("monitor", func(t *testing.T) {
			ex := startExporterWith(t, "--guest.interval=500ms", "--guest.timeout=2s", "--guest.libvirt-monitor-histograms")
			for _, d := range disks {
				t.Run(d.Target, func(t *testing.T) {
					dev, err := domainGuestDevice(ctx, guest, d.Target)
					if err != nil {
						t.Fatal(err)
					}
					waitHistogramStatus(t, ex, d.File, "ok")
					// The slow p99 job on the qcow2 disk (aio threads) in
					// make test, on both with -guesthist.all.
					p99 := *flagGuestHistAll || d.Format == "qcow2"
					checkGuestHistogram(ctx, t, ex, g, d.File, dev, p99, func(iops int) error {
						_, err := lab.Virsh(ctx, "blkdeviotune", g.name, d.Target, "--total-iops-sec", fmt.Sprint(iops), "--live")
						return err
					})
				})
			}
		})
	})
}

// waitHistogramStatus waits until the disk of image file is read from its
// guest source (status ok) and says histogram, and returns that scrape.
func waitHistogramStatus(t *testing.T, ex *exporter, file, histogram string) scrape {
	t.Helper()
	s, _ := ex.waitFor(t, 30*time.Second, "histogram="+histogram+" for "+file, func(s scrape) bool {
		info := s.series("fspair_disk_guest_info", map[string]string{"source_file": file})
		return len(info) == 1 && labelsOf(info[0])["status"] == "ok" && labelsOf(info[0])["histogram"] == histogram
	})
	return s
}

// throttledIOPS is the request rate QEMU's throttling holds a disk to for
// the same-bucket check of the median: one request at a time then waits
// about 1/60 s (16.7 ms) in QEMU, the middle of the classic bucket (8.19,
// 32.8] ms, so that QEMU's share is most of what fio sees and the guest's
// own path (1-2 ms in TCG) cannot move fio's median out of it.
const throttledIOPS = 60

// slowIOPS is the rate for the same-bucket check of the p99: 250 ms a
// request, whose slowest requests can be delayed by 270 ms (or hurried by
// 120) before they leave the classic bucket (131, 524] ms. QEMU's leaky
// bucket lets a request through without waiting only while its level is
// under a tenth of a second's rate, which at 4 IOPS is the first request.
const slowIOPS = 4

var flagGuestHistAll = flag.Bool("guesthist.all", false,
	"TestGuestHistogram: check the p99 at slowIOPS on every disk, not one of each aio mode and format")

// p99Subset says whether the slow p99 job runs on the plain QEMU disk of
// this format and aio mode (with -guesthist.all, on every disk): in make
// test qcow2 with aio native and raw with io_uring; the libvirt domain's
// qcow2 disk has aio threads.
func p99Subset(format, aio string) bool {
	if *flagGuestHistAll {
		return true
	}
	switch aio {
	case "io_uring":
		return format == "raw"
	case "native":
		return format == "qcow2"
	}
	return false
}

// checkGuestHistogram runs the fio job on the guest device dev of the
// image file and checks the disk's guest histograms against the guest's
// requests, QEMU's and fio's (TestGuestHistogram); then, with QEMU
// throttling the disk (throttle(iops); throttle(0) lifts it), a shorter
// job whose fio median must fall in the histogram's median bucket, and
// when p99 is set, a slower one whose fio p99 must fall in the
// histogram's p99 bucket. The median job's p99 is logged: QEMU's throttle
// at 60 IOPS is bursty (p99s of 20-150 ms), a p99 is the third slowest of
// about 200 requests, and the guest's own path and the host's scheduling
// put fio's p99 across a bucket bound from QEMU's in 5 of 16 checks
// (2026-11-29T19:26Z, load average 5; the medians were all in the same
// bucket).
func checkGuestHistogram(ctx context.Context, t *testing.T, ex *exporter, g *pathVM, file, dev string, p99 bool, throttle func(iops int) error) {
	t.Helper()
	job := func(ioSize string) histRun {
		s0, b0 := g.settled(t, ex, file)
		res, err := lab.RunFio(ctx, g.run, g.name, lab.FioJob{Args: fioArgs(dev, "randrw", "4k", "32m", "--io_size="+ioSize, "--percentile_list=50:99", "--fdatasync=16")})
		if err != nil {
			t.Fatal(err)
		}
		s1, b1 := g.settled(t, ex, file)
		return histRun{s0, s1, b0, b1, res}
	}
	for _, c := range job("8m").ops(t, file) {
		t.Logf("%s", c)
	}
	if err := throttle(throttledIOPS); err != nil {
		t.Fatalf("throttle the disk to %d IOPS: %v", throttledIOPS, err)
	}
	defer func() {
		if err := throttle(0); err != nil {
			t.Errorf("lift the throttle: %v", err)
		}
	}()
	for _, c := range job("1600k").ops(t, file) {
		t.Logf("throttled to %d IOPS, %s", throttledIOPS, c)
		if c.op != "flush" && !c.p50.same() {
			t.Errorf("throttled to %d IOPS, %s: fio's clat median %g s is not in the histogram's median bucket (%g, %g] s", throttledIOPS, c.op, c.p50.fio, c.p50.lo, c.p50.hi)
		}
	}
	if !p99 {
		return
	}
	if err := throttle(slowIOPS); err != nil {
		t.Fatalf("throttle the disk to %d IOPS: %v", slowIOPS, err)
	}
	// 160 requests, about 80 of each direction: a p99 is then the
	// slowest or second slowest, in fio's percentiles and the histogram's.
	for _, c := range job("640k").ops(t, file) {
		t.Logf("throttled to %d IOPS, %s", slowIOPS, c)
		if c.op != "flush" && !c.p99.same() {
			t.Errorf("throttled to %d IOPS, %s: fio's clat p99 %g s is not in the histogram's p99 bucket (%g, %g] s", slowIOPS, c.op, c.p99.fio, c.p99.lo, c.p99.hi)
		}
	}
}

// histRun is one fio job between two settled scrapes and QEMU's statistics.
type histRun struct {
	s0, s1 scrape
	b0, b1 lab.BlockIOStats
	res    *lab.FioResult
}

// quantileCheck is a quantile of one operation: the classic bucket (lo, hi]
// of the histogram that holds it and fio's value, in seconds.
type quantileCheck struct{ lo, hi, fio float64 }

func (q quantileCheck) same() bool { return q.fio > q.lo && q.fio <= q.hi }

// histOp is what a histRun gave one operation: the histogram's count and,
// for reads and writes (fio does not time flushes), the median and p99.
type histOp struct {
	op             string
	count, fioReqs float64
	p50, p99       quantileCheck
}

func (c histOp) String() string {
	if c.op == "flush" {
		return fmt.Sprintf("flush: %v requests", c.count)
	}
	return fmt.Sprintf("%s: %v requests (fio %v); histogram median in (%g, %g] s, fio's %g s: same bucket %v; p99 in (%g, %g] s, fio's %g s: same bucket %v",
		c.op, c.count, c.fioReqs, c.p50.lo, c.p50.hi, c.p50.fio, c.p50.same(), c.p99.lo, c.p99.hi, c.p99.fio, c.p99.same())
}

// ops checks, per operation, the histogram's count against the guest's
// requests, QEMU's and fio's, and fio's p99 against the lower bound of
// the histogram's p99 bucket (QEMU's time of a request is inside the
// guest's), and returns what it found.
func (r histRun) ops(t *testing.T, file string) []histOp {
	t.Helper()
	fio := fioClat(t, r.res)
	var out []histOp
	for _, c := range []struct {
		op           string
		qemu0, qemu1 uint64
		fioReqs      float64
	}{
		{"read", r.b0.RdOperations + r.b0.FailedRd, r.b1.RdOperations + r.b1.FailedRd, float64(r.res.Total().Read.TotalIOs)},
		{"write", r.b0.WrOperations + r.b0.FailedWr, r.b1.WrOperations + r.b1.FailedWr, float64(r.res.Total().Write.TotalIOs)},
		{"flush", r.b0.FlushOperations + r.b0.FailedFlush, r.b1.FlushOperations + r.b1.FailedFlush, 0},
	} {
		k := map[string]string{"source_file": file, "op": c.op}
		count := r.s1.value(t, "fspair_disk_guest_request_duration_seconds", k) - r.s0.value(t, "fspair_disk_guest_request_duration_seconds", k)
		// An operation's errors series starts with its first failure:
		// absent is 0 (value's 0 for no series), as QEMU's failed count
		// beside it says.
		reqs := r.s1.value(t, "fspair_disk_guest_requests_total", k) + r.s1.value(t, "fspair_disk_guest_request_errors_total", k) -
			r.s0.value(t, "fspair_disk_guest_requests_total", k) - r.s0.value(t, "fspair_disk_guest_request_errors_total", k)
		if count != reqs || count != float64(c.qemu1-c.qemu0) {
			t.Errorf("%s: histogram count grew by %v, requests and failures by %v (QEMU: %d)", c.op, count, reqs, c.qemu1-c.qemu0)
		}
		if c.qemu1 == c.qemu0 {
			// fio syncs every 16 writes (the kernel flushes the
			// device): each operation must have been counted.
			t.Errorf("%s: no request during the run, so the histogram's count was compared at 0 only", c.op)
		}
		h := histOp{op: c.op, count: count, fioReqs: c.fioReqs}
		if q, ok := fio[c.op]; ok {
			if count < c.fioReqs {
				t.Errorf("%s: histogram count grew by %v, fio did %v requests", c.op, count, c.fioReqs)
			}
			h.p50.lo, h.p50.hi = quantileBucket(t, r.s0, r.s1, k, 0.5)
			h.p99.lo, h.p99.hi = quantileBucket(t, r.s0, r.s1, k, 0.99)
			h.p50.fio, h.p99.fio = q["50.000000"], q["99.000000"]
			if h.p99.fio <= h.p99.lo {
				t.Errorf("%s: fio's clat p99 %g s is below the histogram's p99 bucket (%g, %g] s: QEMU timed longer than the guest", c.op, h.p99.fio, h.p99.lo, h.p99.hi)
			}
		}
		out = append(out, h)
	}
	return out
}

// fioClat is fio's completion-latency median and p99 of each direction, in
// seconds, by percentile as fio's JSON names them ("50.000000",
// "99.000000"; clat_ns.percentile, one job).
func fioClat(t *testing.T, res *lab.FioResult) map[string]map[string]float64 {
	t.Helper()
	type clat struct {
		Clat struct {
			Percentile map[string]float64 `json:"percentile"`
		} `json:"clat_ns"`
	}
	var out struct {
		Jobs []struct {
			Read  clat `json:"read"`
			Write clat `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(res.Raw, &out); err != nil || len(out.Jobs) != 1 {
		t.Fatalf("fio clat percentiles: %v (%d jobs)", err, len(out.Jobs))
	}
	p := map[string]map[string]float64{}
	for dir, c := range map[string]clat{"read": out.Jobs[0].Read, "write": out.Jobs[0].Write} {
		p[dir] = map[string]float64{}
		for _, q := range []string{"50.000000", "99.000000"} {
			v, ok := c.Clat.Percentile[q]
			if !ok {
				t.Fatalf("fio has no %s clat percentile %s", dir, q)
			}
			p[dir][q] = v / 1e9
		}
	}
	return p
}

// quantileBucket is the classic bucket (lower, upper bound in seconds)
// holding the q-quantile of the observations a guest latency histogram
// series gained between two scrapes.
func quantileBucket(t *testing.T, s0, s1 scrape, k map[string]string, q float64) (lo, hi float64) {
	t.Helper()
	lo, hi, ok := windowBucket(s0, s1, "fspair_disk_guest_request_duration_seconds", k, q)
	if !ok {
		t.Fatalf("no observation in histogram %v", k)
	}
	return lo, hi
}

// windowBucket is the classic bucket (lower, upper bound) of histogram
// name{k} holding the q-quantile of the observations it gained between two
// scrapes; ok false when it gained none. The upper bound is +Inf when the
// quantile lies beyond every finite bucket.
func windowBucket(s0, s1 scrape, name string, k map[string]string, q float64) (lo, hi float64, ok bool) {
	cum := func(s scrape) map[float64]float64 {
		out := map[float64]float64{math.Inf(1): 0}
		ms := s.series(name, k)
		if len(ms) == 1 {
			h := ms[0].GetHistogram()
			for _, b := range h.GetBucket() {
				out[b.GetUpperBound()] = float64(b.GetCumulativeCount())
			}
			out[math.Inf(1)] = float64(h.GetSampleCount())
		}
		return out
	}
	c0, c1 := cum(s0), cum(s1)
	var bounds []float64
	for b := range c1 {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := c1[math.Inf(1)] - c0[math.Inf(1)]
	if total <= 0 {
		return 0, 0, false
	}
	rank := math.Ceil(q * total)
	for _, b := range bounds {
		if c1[b]-c0[b] >= rank {
			return lo, b, true
		}
		lo = b
	}
	return lo, math.Inf(1), true // not reached: +Inf holds the total
}
