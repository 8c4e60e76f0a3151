package workload

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// exposition builds a scrape of one disk with the given counters, in the
// exporter's metric names and labels.
func exposition(file string, c map[string]float64) string {
	k := fmt.Sprintf(`domain="d",uuid="",target_device="wl",source_file=%q`, file)
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE fspair_disk_info gauge\nfspair_disk_info{%s,format=\"raw\",guest_fs=\"ext4\",host_fs=\"xfs\"} 1\n", k)
	b.WriteString("# TYPE fspair_disk_requests_total counter\n")
	for _, op := range []string{"read", "write", "flush"} {
		fmt.Fprintf(&b, "fspair_disk_requests_total{%s,op=%q} %g\n", k, op, c["req_"+op])
	}
	// As the exporter writes them: an operation's errors series only
	// from its first failure.
	b.WriteString("# TYPE fspair_disk_request_errors_total counter\n")
	for _, op := range []string{"read", "write", "flush"} {
		if c["err_"+op] != 0 {
			fmt.Fprintf(&b, "fspair_disk_request_errors_total{%s,op=%q} %g\n", k, op, c["err_"+op])
		}
	}
	b.WriteString("# TYPE fspair_disk_bytes_total counter\n")
	for _, op := range []string{"read", "write"} {
		fmt.Fprintf(&b, "fspair_disk_bytes_total{%s,op=%q} %g\n", k, op, c["bytes_"+op])
	}
	for _, kind := range []string{"sequential", "random"} {
		fmt.Fprintf(&b, "# TYPE fspair_disk_%s_requests_total counter\n", kind)
		for _, op := range []string{"read", "write"} {
			fmt.Fprintf(&b, "fspair_disk_%s_requests_total{%s,op=%q} %g\n", kind, k, op, c[kind+"_"+op])
		}
	}
	b.WriteString("# TYPE fspair_disk_sync_writes_total counter\n")
	for _, m := range []string{"dsync", "flush"} {
		fmt.Fprintf(&b, "fspair_disk_sync_writes_total{%s,mode=%q} %g\n", k, m, c["sync_"+m])
	}
	b.WriteString("# TYPE fspair_disk_device_bytes_total counter\n")
	fmt.Fprintf(&b, "fspair_disk_device_bytes_total{%s,op=\"write\"} %g\n", k, c["dev_bytes_write"])
	hist := func(name, labels string, count, sum float64) {
		fmt.Fprintf(&b, "# TYPE %s histogram\n%s_bucket{%s%s,le=\"+Inf\"} %g\n%s_sum{%s%s} %g\n%s_count{%s%s} %g\n",
			name, name, k, labels, count, name, k, labels, sum, name, k, labels, count)
	}
	hist("fspair_disk_request_duration_seconds", `,op="read"`, c["req_read"], c["lat_read"])
	hist("fspair_disk_outstanding_requests", "", c["req_read"]+c["req_write"], c["outstanding"])
	// The image's space, only when the test gives it (runs recorded
	// before it was kept have none).
	for _, g := range []string{"allocated", "apparent"} {
		if v, ok := c["image_"+g]; ok {
			fmt.Fprintf(&b, "# TYPE fspair_disk_image_%s_bytes gauge\nfspair_disk_image_%s_bytes{%s} %g\n", g, g, k, v)
		}
	}
	return b.String()
}

func snapshot(t *testing.T, file string, at time.Time, c map[string]float64) Snapshot {
	t.Helper()
	fams, err := ParseMetrics([]byte(exposition(file, c)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadDisk(fams, file, at)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCompute(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := snapshot(t, "/img/a.raw", t0, map[string]float64{
		"req_read": 100, "req_write": 50, "req_flush": 5, "bytes_read": 1e6, "bytes_write": 1e6,
		"lat_read": 1, "outstanding": 300, "dev_bytes_write": 1e6,
	})
	b := snapshot(t, "/img/a.raw", t0.Add(10*time.Second), map[string]float64{
		// +300 reads of 16 KiB, +100 writes of 8 KiB, +50 flushes.
		"req_read": 400, "req_write": 150, "req_flush": 55, "bytes_read": 1e6 + 300*16384, "bytes_write": 1e6 + 100*8192,
		"random_read": 240, "sequential_read": 60, "random_write": 25, "sequential_write": 75,
		"sync_dsync": 10, "sync_flush": 70, "lat_read": 1 + 300*0.002, "outstanding": 300 + 400*1.5,
		"dev_bytes_write": 1e6 + 2*100*8192,
	})
	f := Compute(a, b)
	want := Features{
		FeatIOPS: 40, FeatReadShare: 0.75, FeatReadByteShare: 300 * 16384 / (300*16384 + 100*8192.0),
		FeatRandomReadShare: 0.8, FeatRandomWriteShare: 0.25, FeatSyncWriteShare: 0.8,
		FeatFlushesPerWrite: 0.5, FeatFlushRate: 5, FeatMeanReadSize: 16384, FeatMeanWriteSize: 8192,
		FeatReadWriteRatio: 3, FeatWriteAmplification: 2, FeatFileReadLatency: 0.002, FeatMeanOutstanding: 1.5,
	}
	for n, v := range want {
		if got, ok := f[n]; !ok || math.Abs(got-v) > 1e-9*math.Max(1, math.Abs(v)) {
			t.Errorf("%s = %v (present %v), want %v", n, got, ok, v)
		}
	}
	// No write latency samples, no device stage counters: those features
	// are absent rather than zero.
	for _, n := range []string{FeatFileWriteLatency, FeatDeviceReadLatency, FeatFlushLatency} {
		if v, ok := f[n]; ok {
			t.Errorf("%s = %v, want absent", n, v)
		}
	}
	// Failed writes are issued writes: a synchronous write counted at
	// submission that then fails keeps the share at most 1.
	// +100 completed and +50 failed writes, 150 of them synchronous; no
	// errors series in a (none failed yet), and none of read or flush in
	// the second snapshot: absent counts as 0.
	c := map[string]float64{"req_write": 150, "err_write": 50, "sync_flush": 150, "req_flush": 55, "req_read": 400}
	e := Compute(a, snapshot(t, "/img/a.raw", t0.Add(10*time.Second), c))
	if e[FeatSyncWriteShare] != 1 || math.Abs(e[FeatFlushesPerWrite]-1.0/3) > 1e-12 || math.Abs(e[FeatReadShare]-2.0/3) > 1e-12 {
		t.Errorf("with failed writes: sync %v, flushes/write %v, read share %v; want 1, 1/3, 2/3",
			e[FeatSyncWriteShare], e[FeatFlushesPerWrite], e[FeatReadShare])
	}
	if got := Compute(a, a); len(got) != 0 {
		t.Errorf("features of an empty window: %v, want none", got)
	}
}

func TestReadDiskMissing(t *testing.T) {
	fams, err := ParseMetrics([]byte(exposition("/img/a.raw", nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDisk(fams, "/img/other.raw", time.Now()); err == nil || !strings.Contains(err.Error(), ErrNoDisk.Error()) {
		t.Errorf("ReadDisk of a missing disk: %v, want ErrNoDisk", err)
	}
}

func TestWindows(t *testing.T) {
	t0 := time.Unix(0, 0)
	var pts []Point
	for i := 0; i <= 10; i++ {
		// 10 reads per second, then writes only from t=5s on.
		c := map[string]float64{"req_read": float64(min(i, 5) * 10), "req_write": float64(max(i-5, 0) * 10)}
		phase := "web"
		if i > 5 {
			phase = "mail"
		}
		pts = append(pts, Point{Snapshot: snapshot(t, "/f", t0.Add(time.Duration(i)*time.Second), c), Phase: phase})
	}
	ws := Windows(pts, 3*time.Second)
	if len(ws) != 8 {
		t.Fatalf("%d windows of 3s over 10s of 1s scrapes, want 8", len(ws))
	}
	first, last := ws[0], ws[len(ws)-1]
	if first.At != 3 || first.Span != 3 || first.Features[FeatReadShare] != 1 || first.Phase != "web" {
		t.Errorf("first window %+v", first)
	}
	if last.At != 10 || last.Features[FeatReadShare] != 0 || last.Phase != "mail" {
		t.Errorf("last window %+v", last)
	}
}

func TestParsePair(t *testing.T) {
	for _, s := range []string{"ext4/xfs/raw", "btrfs/btrfs/qcow2", "xfs/ext4/raw/writeback"} {
		p, err := ParsePair(s)
		if err != nil {
			t.Errorf("ParsePair(%q): %v", s, err)
			continue
		}
		if p.String() != s {
			t.Errorf("ParsePair(%q).String() = %q", s, p.String())
		}
	}
	if p, _ := ParsePair("ext4/xfs/raw"); p.aio() != "native" || p.Cache != "none" {
		t.Errorf("default cache/aio: %+v, %s", p, p.aio())
	}
	for _, s := range []string{"ext4/xfs", "zfs/xfs/raw", "ext4/xfs/vmdk", "ext4/xfs/raw/none/x"} {
		if _, err := ParsePair(s); err == nil {
			t.Errorf("ParsePair(%q) succeeded", s)
		}
	}
}

func TestRange(t *testing.T) {
	r := Range{Min: 0.2, Max: math.NaN()}
	if !r.Contains(0.2) || r.Contains(0.1) || !r.Contains(1e9) || r.String() != ">= 0.2" {
		t.Errorf("Range %v", r)
	}
}

// TestFeaturesFile checks the committed measurements against the
// classifier: the file covers every workload on at least four pairs, every
// run is classified as its workload, every run lies in Expect, and
// FEATURES.md shows the current numbers.
func TestFeaturesFile(t *testing.T) {
	res, err := LoadResults("testdata/features.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) == 0 {
		t.Fatal("testdata/features.json has no runs; run TestMeasure (see FEATURES.md)")
	}
	pairs := map[Workload]map[string]bool{}
	for _, run := range res.Runs {
		if pairs[run.Workload] == nil {
			pairs[run.Workload] = map[string]bool{}
		}
		pairs[run.Workload][run.Pair] = true
		if run.From == nil || run.To == nil {
			t.Errorf("%s on %s: window scrapes not stored", run.Workload, run.Pair)
		} else {
			again := Compute(*run.From, *run.To)
			for _, n := range again.Names() {
				if math.Abs(again[n]-run.Features[n]) > 1e-9*math.Max(1, math.Abs(again[n])) {
					t.Errorf("%s on %s: stored %s = %v, Compute gives %v: run TestRender (-tags measure)", run.Workload, run.Pair, n, run.Features[n], again[n])
				}
			}
		}
		if got := Classify(run.Features); got != Class(run.Workload) {
			t.Errorf("%s on %s classified %s", run.Workload, run.Pair, got)
		}
		for _, n := range sortedKeys(Expect[run.Workload]) {
			r := Expect[run.Workload][n]
			v, ok := run.Features[n]
			if !ok || !r.Contains(v) {
				t.Errorf("%s on %s: %s = %s, outside the expected %s", run.Workload, run.Pair, n, fv(run.Features, n), r)
			}
		}
	}
	for _, w := range Workloads {
		if len(pairs[w]) < 4 {
			t.Errorf("%s measured on %d pairs, want at least 4", w, len(pairs[w]))
		}
	}
	for _, s := range res.Switches {
		if fr := FirstRight(Windows(s.Points, SwitchWindow), s.SwitchAt, Class(s.To)); fr < 0 || fr > 60 {
			t.Errorf("switch %s->%s on %s: class right %.0fs after the switch, want within 60s", s.From, s.To, s.Pair, fr)
		}
	}
	doc, err := os.ReadFile("FEATURES.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Splice(string(doc), res)
	if err != nil {
		t.Fatal(err)
	}
	if want != string(doc) {
		t.Error("FEATURES.md is stale: run go test -tags measure ./tests/workload/ -run TestRender")
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name string
		f    Features
		want Class
	}{
		{"idle", Features{FeatIOPS: 0.2, FeatReadShare: 1, FeatMeanReadSize: 4096}, Idle},
		{"nothing", Features{}, Idle},
		{"web", Features{FeatIOPS: 200, FeatReadShare: 0.999, FeatReadWriteRatio: 500, FeatRandomReadShare: 0.9, FeatMeanReadSize: 10 << 10, FeatSyncWriteShare: 0.5}, Class(Web)},
		{"web without writes", Features{FeatIOPS: 200, FeatReadShare: 1, FeatRandomReadShare: 0.9, FeatMeanReadSize: 10 << 10}, Class(Web)},
		{"mail", Features{FeatIOPS: 300, FeatReadShare: 0.5, FeatReadWriteRatio: 1, FeatRandomReadShare: 0.9, FeatMeanReadSize: 10 << 10, FeatSyncWriteShare: 0.95}, Class(Mail)},
		{"fileserver", Features{FeatIOPS: 300, FeatReadShare: 0.3, FeatReadWriteRatio: 0.5, FeatRandomReadShare: 0.9, FeatMeanReadSize: 100 << 10, FeatSyncWriteShare: 0}, Class(Fileserver)},
		{"rfa", Features{FeatIOPS: 500, FeatReadShare: 0.93, FeatReadWriteRatio: 13, FeatRandomReadShare: 0.33, FeatMeanReadSize: 8 << 10, FeatSyncWriteShare: 0.06}, Class(RFA)},
		// As many writes as reads, small, nothing durable: no rule.
		{"mixed", Features{FeatIOPS: 500, FeatReadShare: 0.5, FeatReadWriteRatio: 1, FeatRandomReadShare: 0.9, FeatMeanReadSize: 8 << 10, FeatSyncWriteShare: 0.1}, Mixed},
		// Random small reads, a few writes: rfa whatever the random share.
		{"rfa random", Features{FeatIOPS: 500, FeatReadShare: 0.9, FeatReadWriteRatio: 9, FeatRandomReadShare: 0.95, FeatMeanReadSize: 8 << 10, FeatSyncWriteShare: 0.1}, Class(RFA)},
		{"writes only", Features{FeatIOPS: 500, FeatReadShare: 0, FeatReadWriteRatio: 0, FeatSyncWriteShare: 1}, Mixed},
	} {
		if got := Classify(c.f); got != c.want {
			t.Errorf("%s: Classify = %s, want %s", c.name, got, c.want)
		}
	}
}

// TestMismatches: a window that meets its workload's ranges has none; one
// of another workload names each feature out of range and the class it
// got.
func TestMismatches(t *testing.T) {
	mail := Features{FeatIOPS: 300, FeatReadShare: 0.5, FeatReadWriteRatio: 1, FeatRandomReadShare: 0.9, FeatMeanReadSize: 10 << 10, FeatSyncWriteShare: 0.95}
	if m := Mismatches(Mail, mail); len(m) != 0 {
		t.Errorf("mail's window against mail: %v, want none", m)
	}
	m := Mismatches(Fileserver, mail)
	want := []string{
		"mean_read_bytes = 10.0 KiB, want " + Expect[Fileserver][FeatMeanReadSize].String(),
		"sync_write_share = 0.95, want " + Expect[Fileserver][FeatSyncWriteShare].String(),
		"classified mail",
	}
	if !slices.Equal(m, want) {
		t.Errorf("mail's window against fileserver:\n got %q\nwant %q", m, want)
	}
	// A feature the window lacks (no reads: no mean read size) is a
	// mismatch too.
	noReads := Features{FeatIOPS: 300, FeatReadShare: 0, FeatReadWriteRatio: 0, FeatSyncWriteShare: 0.95}
	if m := Mismatches(Mail, noReads); !slices.Contains(m, "mean_read_bytes = -, want "+Expect[Mail][FeatMeanReadSize].String()) {
		t.Errorf("a window without reads against mail: %q, want the missing mean read size named", m)
	}
}

// TestComputeGuest: the guest side's features, on what the guest asked
// (ReadDisk takes them from fspair_disk_guest_*), beside the image file's;
// without a guest side they are absent.
func TestComputeGuest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := Snapshot{Time: t0, Requests: map[string]float64{"read": 0, "write": 0},
		GuestRequests: map[string]float64{"read": 0, "write": 0, "flush": 0}, GuestBytes: map[string]float64{"read": 0, "write": 0}}
	b := Snapshot{Time: t0.Add(10 * time.Second), Requests: map[string]float64{"read": 200, "write": 50},
		// 300 guest reads of 4 KiB merged into 200, 100 writes of 8 KiB into 50, 80 flushes.
		GuestRequests: map[string]float64{"read": 300, "write": 100, "flush": 80},
		GuestBytes:    map[string]float64{"read": 300 * 4096, "write": 100 * 8192}}
	f := Compute(a, b)
	want := Features{FeatGuestReadShare: 0.75, FeatGuestMeanReadSize: 4096, FeatGuestMeanWriteSize: 8192,
		FeatGuestFlushesPerWrite: 0.8, FeatGuestReadWriteRatio: 3, FeatReadMergeRatio: 1.5, FeatWriteMergeRatio: 2}
	for n, v := range want {
		if got, ok := f[n]; !ok || math.Abs(got-v) > 1e-12 {
			t.Errorf("%s = %v (present %v), want %v", n, got, ok, v)
		}
	}
	b.GuestRequests, b.GuestBytes = nil, nil
	for _, n := range GuestFeatureNames {
		if v, ok := Compute(a, b)[n]; ok {
			t.Errorf("without a guest side %s = %v, want absent", n, v)
		}
	}
}

// TestImageGrowthShare: the image's growth in allocated space over the
// bytes written, read from the scrapes' gauges; absent where either
// snapshot lacks the gauge (a run recorded before it was kept) or nothing
// was written.
func TestImageGrowthShare(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := snapshot(t, "/img/a.qcow2", t0, map[string]float64{"req_write": 10, "bytes_write": 1 << 20,
		"image_allocated": 64 << 20, "image_apparent": 65 << 20})
	if a.ImageAllocated != 64<<20 || a.ImageApparent != 65<<20 {
		t.Fatalf("image space read as %v / %v, want %v / %v", a.ImageAllocated, a.ImageApparent, 64<<20, 65<<20)
	}
	// 8 MiB written, of which 6 MiB landed where the image had no space.
	b := snapshot(t, "/img/a.qcow2", t0.Add(10*time.Second), map[string]float64{"req_write": 20, "bytes_write": 9 << 20,
		"image_allocated": 70 << 20, "image_apparent": 71 << 20})
	if got := Compute(a, b)[FeatImageGrowthShare]; math.Abs(got-0.75) > 1e-12 {
		t.Errorf("growth share %v, want 0.75", got)
	}
	// Rewrites of space the image has: no growth.
	c := snapshot(t, "/img/a.qcow2", t0.Add(20*time.Second), map[string]float64{"req_write": 30, "bytes_write": 17 << 20,
		"image_allocated": 70 << 20, "image_apparent": 71 << 20})
	if got, ok := Compute(b, c)[FeatImageGrowthShare]; !ok || got != 0 {
		t.Errorf("growth share on rewrites %v (present %v), want 0", got, ok)
	}
	old := snapshot(t, "/img/a.qcow2", t0, map[string]float64{"req_write": 10, "bytes_write": 1 << 20})
	if v, ok := Compute(old, b)[FeatImageGrowthShare]; ok {
		t.Errorf("growth share %v without the image's space in the first snapshot, want absent", v)
	}
	if v, ok := Compute(c, c)[FeatImageGrowthShare]; ok {
		t.Errorf("growth share %v without writes, want absent", v)
	}
}
