package collector

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
)

// fakeGuest gives each disk, by domain, a fixed guest status.
type fakeGuest map[string]guest.Status

func (f fakeGuest) Status(d *inventory.Disk) guest.Status {
	if s, ok := f[d.Domain]; ok {
		return s
	}
	return guest.Status{Source: guest.SourceNone, Status: guest.StatusNoMonitor, Histogram: guest.HistogramNone}
}

// randomGuest gives the disks of inv random guest statuses: some with no
// values, some with every counter, some with a source's subset, half of
// those with values never discarding.
func randomGuest(rng *rand.Rand, inv *fakeInventory) fakeGuest {
	g := fakeGuest{}
	statuses := []string{guest.StatusOK, guest.StatusStale, guest.StatusUnreachable, guest.StatusNoDevice, guest.StatusNoMonitor}
	for _, d := range inv.disks {
		st := guest.Status{Source: []string{guest.SourceQMP, guest.SourceLibvirt, guest.SourceNone}[rng.IntN(3)],
			Status: statuses[rng.IntN(len(statuses))], Histogram: guest.HistogramNone}
		if st.Status == guest.StatusOK || st.Status == guest.StatusStale {
			var r guest.Stats
			for _, f := range []*[guest.NumOps]guest.Counter{&r.Requests, &r.Bytes, &r.Failed, &r.TimeNs} {
				for op := range f {
					if rng.IntN(3) > 0 {
						f[op] = guest.Counter{V: randomCount(rng), OK: true}
					}
				}
			}
			// Half of them never discarded: QEMU's unmap counters at 0.
			if rng.IntN(2) == 0 {
				for _, f := range []*[guest.NumOps]guest.Counter{&r.Requests, &r.Bytes, &r.Failed, &r.TimeNs} {
					f[guest.OpDiscard].V = 0
				}
			}
			// Histograms: some absent, some not yet observed (all
			// zero), some with random bins.
			st.Histogram = guest.HistogramNotSet
			for _, op := range guest.HistogramOps {
				if rng.IntN(4) == 0 {
					continue
				}
				h := &r.Latency[op]
				h.OK, st.Histogram = true, guest.HistogramOK
				if rng.IntN(4) > 0 {
					for k := range h.Bins {
						h.Bins[k] = randomCount(rng)
					}
				}
			}
			st.Reading = guest.NewReading(&r, time.UnixMilli(rng.Int64N(1<<41)))
		}
		g[d.Domain] = st
	}
	return g
}

// guestOnly keeps the guest families of an exposition.
func guestOnly(t *testing.T, text string) string {
	t.Helper()
	var b bytes.Buffer
	fams := parseText(t, text)
	for _, name := range sortedKeys(fams) {
		if strings.HasPrefix(name, "fspair_disk_guest_") {
			if _, err := expfmt.MetricFamilyToText(&b, fams[name]); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// writeWithGuest writes the disks and their guest side to w and flushes
// it; err is where w keeps its error.
func writeWithGuest(t *testing.T, inv *fakeInventory, k *fakeKernel, g GuestSource, w interface {
	sink
	flush()
}, err *error) {
	t.Helper()
	var s snapshot
	s.read(inv, k, k)
	s.readGuest(g)
	writeDirect(w, &s)
	w.flush()
	if *err != nil {
		t.Fatal(*err)
	}
}

func guestDirect(t *testing.T, inv *fakeInventory, k *fakeKernel, g GuestSource) string {
	t.Helper()
	var b bytes.Buffer
	w := newTextWriter(&b)
	writeWithGuest(t, inv, k, g, w, &w.err)
	return b.String()
}

// TestGuestDirectMatchesCollector: the guest families written directly
// are what GuestDiskCollector sends through client_golang, for random
// statuses and counters (absent ones absent), and lint-clean.
func TestGuestDirectMatchesCollector(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 17))
			inv, k := randomFleet(rng, 30)
			g := randomGuest(rng, inv)

			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
				if err := NewGuestDiskCollector(inv, g).Update(ch); err != nil {
					t.Error(err)
				}
			}))
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			for _, mf := range mfs {
				if _, err := expfmt.MetricFamilyToText(&want, mf); err != nil {
					t.Fatal(err)
				}
			}
			full := guestDirect(t, inv, k, g)
			checkStructure(t, full)
			lint(t, full)
			got := guestOnly(t, full)
			ws, gs := samples(parseText(t, want.String())), samples(parseText(t, got))
			if len(ws) == 0 {
				t.Fatal("no guest samples from the collector")
			}
			for key, wv := range ws {
				if gv, ok := gs[key]; !ok || math.Float64bits(gv) != math.Float64bits(wv) {
					t.Errorf("sample %s: direct %v (present %v), collector %v", key, gv, ok, wv)
				}
			}
			for key := range gs {
				if _, ok := ws[key]; !ok {
					t.Errorf("sample %s written directly but not by the collector", key)
				}
			}
			wf, gf := parseText(t, want.String()), parseText(t, got)
			for name, w := range wf {
				if g := gf[name]; g == nil || g.GetHelp() != w.GetHelp() || g.GetType() != w.GetType() {
					t.Errorf("family %s: help or type differ", name)
				}
			}
		})
	}
}

// guestGoldenFleet is the guest side of three disks: plain QEMU read over
// QMP with histograms (flush's not yet observed; no read failed), a libvirt
// domain with stale values and libvirt too old for histograms, and a disk
// without a source.
func guestGoldenFleet() (*fakeInventory, *fakeKernel, fakeGuest) {
	disks := []inventory.Disk{goldenDisks[0], goldenDisks[0], goldenDisks[0]}
	for i, name := range []string{"plain", "lv", "other"} {
		disks[i].Domain = name
		disks[i].Slot = uint32(7 + i)
	}
	var qmp, lv guest.Stats
	for op := range guest.OpNames {
		qmp.Requests[op] = guest.Counter{V: uint64(1000 + op), OK: true}
		qmp.Failed[op] = guest.Counter{V: uint64(op), OK: true}
		qmp.TimeNs[op] = guest.Counter{V: uint64(1_234_567_891 * (op + 1)), OK: true}
	}
	for _, op := range []int{guest.OpRead, guest.OpWrite, guest.OpDiscard} {
		qmp.Bytes[op] = guest.Counter{V: uint64(4096 * (op + 1)), OK: true}
	}
	for _, op := range guest.HistogramOps {
		qmp.Latency[op].OK = true
	}
	for k := range qmp.Latency[guest.OpRead].Bins {
		qmp.Latency[guest.OpRead].Bins[k] = uint64(k % 5) // bins of every classic bucket, some empty
	}
	qmp.Latency[guest.OpWrite].Bins[0] = 2  // up to 1 us: the native zero bucket
	qmp.Latency[guest.OpWrite].Bins[7] = 40 // (64, 128] us
	qmp.Latency[guest.OpWrite].Bins[24] = 1 // above 8.4 s
	for _, op := range []int{guest.OpRead, guest.OpWrite, guest.OpFlush} {
		lv.Requests[op] = guest.Counter{V: uint64(50 + op), OK: true}
		lv.TimeNs[op] = guest.Counter{V: uint64(999 * (op + 1)), OK: true}
	}
	lv.Bytes[guest.OpRead] = guest.Counter{V: 512, OK: true}
	lv.Bytes[guest.OpWrite] = guest.Counter{V: 1024, OK: true}
	at := time.Date(2026, 11, 21, 20, 15, 0, 250e6, time.UTC)
	g := fakeGuest{
		"plain": {Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramOK, Reading: guest.NewReading(&qmp, at)},
		"lv": {Source: guest.SourceLibvirt, Status: guest.StatusStale, Histogram: guest.HistogramLibvirtTooOld,
			Reading: guest.NewReading(&lv, at.Add(-time.Minute))},
	}
	return &fakeInventory{disks: disks}, &fakeKernel{}, g
}

// golden compares got with the golden file (go test -update rewrites it)
// by equal.
func golden(t *testing.T, name, got string, equal func(got, want string) bool) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(got, string(want)) {
		t.Errorf("differs from %s (go test -update rewrites it):\n%s", path, got)
	}
}

// TestGuestGolden: the guest families of guestGoldenFleet in the text
// format (classic histograms) against testdata/guest.prom; without a guest
// source, no guest family at all.
func TestGuestGolden(t *testing.T) {
	inv, k, g := guestGoldenFleet()
	got := guestOnly(t, guestDirect(t, inv, k, g))
	golden(t, "guest.prom", got, func(got, want string) bool {
		return reflect.DeepEqual(samples(parseText(t, got)), samples(parseText(t, want)))
	})
	if s := guestDirect(t, inv, k, nil); strings.Contains(s, "fspair_disk_guest_") {
		t.Errorf("guest families written without a guest source")
	}
}

// protoWithGuest is the protobuf writer's output for the disks and their
// guest side, decoded.
func protoWithGuest(t *testing.T, inv *fakeInventory, k *fakeKernel, g GuestSource, mode Histograms) []*dto.MetricFamily {
	t.Helper()
	var b bytes.Buffer
	w := newProtoWriter(&b, mode)
	writeWithGuest(t, inv, k, g, w, &w.err)
	return decodeProto(t, b.Bytes())
}

// guestProto is the protobuf writer's guest histograms in mode, decoded
// and written out one line a series: labels, count, sum, native schema
// and zero threshold, then each bucket (upper bound: count, the zero
// bucket at 0; classic buckets as le=count).
func guestProto(t *testing.T, inv *fakeInventory, k *fakeKernel, g GuestSource, mode Histograms) string {
	t.Helper()
	var out strings.Builder
	for _, mf := range protoWithGuest(t, inv, k, g, mode) {
		if mf.GetName() != "fspair_disk_guest_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() == "domain" || l.GetName() == "op" {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			fmt.Fprintf(&out, "%s count=%d sum=%g", strings.Join(labels, ","), h.GetSampleCount(), h.GetSampleSum())
			if mode != HistogramsClassic {
				fmt.Fprintf(&out, " schema=%d zero_threshold=%g native=%s", h.GetSchema(), h.GetZeroThreshold(), sortedBuckets(nativeBuckets(t, h)))
			}
			for _, cb := range h.GetBucket() {
				fmt.Fprintf(&out, " le%g=%d", cb.GetUpperBound(), cb.GetCumulativeCount())
			}
			out.WriteString("\n")
		}
	}
	return out.String()
}

// TestGuestNativeGolden: the guest histograms of guestGoldenFleet in
// protobuf, native mode against testdata/guest_native.txt and classic mode
// against testdata/guest_classic.txt.
func TestGuestNativeGolden(t *testing.T) {
	inv, k, g := guestGoldenFleet()
	same := func(got, want string) bool { return got == want }
	golden(t, "guest_native.txt", guestProto(t, inv, k, g, HistogramsNative), same)
	golden(t, "guest_classic.txt", guestProto(t, inv, k, g, HistogramsClassic), same)
}

// TestGuestBucketForBucket: the guest's bins are the image file's slots
// (guest.LatencyBoundsNs is latencyBounds, plus the nanosecond that turns
// QEMU's [lo, hi) bins into the kernel's (lo, hi]), so the same counts
// make the same buckets in both families, classic and native.
func TestGuestBucketForBucket(t *testing.T) {
	if len(guest.LatencyBoundsNs) != len(latencyBounds) {
		t.Fatalf("%d guest bounds, %d image-file bounds", len(guest.LatencyBoundsNs), len(latencyBounds))
	}
	for k, b := range latencyBounds {
		if ns := uint64(math.Round(b * 1e9)); guest.LatencyBoundsNs[k] != ns+1 {
			t.Errorf("bound %d: guest %d ns, image file %d ns (+1 expected)", k, guest.LatencyBoundsNs[k], ns)
		}
	}
	inv, k := randomFleet(rand.New(rand.NewPCG(9, 9)), 1)
	d := &inv.disks[0]
	d.Tracked = true
	var c probe.Counters
	var st guest.Stats
	for _, op := range guest.HistogramOps {
		for s := range guest.LatencySlots {
			n := uint64((s*7+op*3)%11) * 13
			c.Latency[op][s] = n
			st.Latency[op].Bins[s] = n
		}
		c.LatencySumNs[op] = 123456789
		st.Latency[op].OK = true
		st.TimeNs[op] = guest.Counter{V: 123456789, OK: true}
		c.Requests[op] = 1
	}
	k.disk[d.Slot] = c
	g := fakeGuest{d.Domain: {Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramOK, Reading: guest.NewReading(&st, time.Time{})}}
	for _, mode := range []Histograms{HistogramsClassic, HistogramsNative} {
		fams := byName(protoWithGuest(t, inv, k, g, mode))
		img, gst := fams["fspair_disk_request_duration_seconds"].GetMetric(), fams["fspair_disk_guest_request_duration_seconds"].GetMetric()
		if len(gst) != len(guest.HistogramOps) {
			t.Fatalf("mode %d: %d guest histograms, want %d", mode, len(gst), len(guest.HistogramOps))
		}
		for i, op := range guest.HistogramOps {
			a, b := img[op].GetHistogram(), gst[i].GetHistogram()
			a.CreatedTimestamp, b.CreatedTimestamp = nil, nil
			if !reflect.DeepEqual(a.String(), b.String()) {
				t.Errorf("mode %d, %s: image file\n%v\nguest\n%v", mode, guest.OpNames[op], a, b)
			}
		}
	}
}

// TestGuestPollCollector: the poll counters by source, from the poller.
func TestGuestPollCollector(t *testing.T) {
	p := guest.New(&fakeInventory{}, guest.Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewExporter(map[string]Collector{"guest": NewGuestPollCollector(p)}, nil))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		expfmt.MetricFamilyToText(&b, mf)
	}
	for _, want := range []string{`fspair_guest_polls_total{source="libvirt"} 0`, `fspair_guest_poll_errors_total{source="qmp"} 0`,
		`fspair_scrape_collector_success{collector="guest"} 1`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %s in\n%s", want, b.String())
		}
	}
}

// TestHandlerGuest: the handler serves the guest families from its guest
// source, and the families are known as direct ones (a registry collector
// exporting one of them is refused).
func TestHandlerGuest(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(3, 3)), 5)
	g := randomGuest(rand.New(rand.NewPCG(3, 4)), inv)
	srv := newTestHandlerOpts(t, inv, k, HandlerOpts{Guest: g})
	body, resp := get(t, srv.URL, false)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	fams := parseText(t, body)
	if n := len(fams["fspair_disk_guest_info"].GetMetric()); n != len(inv.disks) {
		t.Errorf("%d guest info series, want one per disk (%d)", n, len(inv.disks))
	}
	for _, name := range []string{"fspair_disk_guest_requests_total", "fspair_disk_guest_request_duration_seconds_total",
		"fspair_disk_guest_info", "fspair_disk_guest_request_errors_total"} {
		if !directNames[name] {
			t.Errorf("%s is not among the direct families", name)
		}
	}
}

// typicalGuest is the guest side of a typical disk read over QMP: every
// counter of the four operations, the guest never discarded (QEMU's unmap
// counters at 0) and no request failed (its failed counters at 0), its
// read, write and flush histograms set and observed.
func typicalGuest() guest.Stats {
	var st guest.Stats
	for op := range guest.NumOps {
		n := uint64(1)
		if op == guest.OpDiscard {
			n = 0
		}
		st.Requests[op] = guest.Counter{V: n, OK: true}
		st.Failed[op] = guest.Counter{V: 0, OK: true}
		st.TimeNs[op] = guest.Counter{V: n, OK: true}
		if op != guest.OpFlush {
			st.Bytes[op] = guest.Counter{V: n, OK: true}
		}
	}
	for _, op := range guest.HistogramOps {
		st.Latency[op].OK = true
		st.Latency[op].Bins[op+3] = 1
	}
	return st
}

// TestGuestSeriesPerDisk is the guest side's share of a typical disk's
// series (TestSeriesPerDisk counts fspair_disk_guest_info alone, as the
// bench's disks have no guest): a plain QEMU disk read over QMP, which
// gives every counter of the four operations, that never discarded (QEMU's
// unmap counters at 0) and never failed a request (its failed counters at
// 0), with its read, write and flush histograms observed. Native mode: 10
// series before the histograms, 10 with them (their sums take the time
// counters' place); classic: 10 and 52 (15 a histogram, the image file's
// layout). A disk that discarded has 3 discard series besides (requests,
// bytes, time), whichever of its discard counters is not 0, and the errors
// series of discard too when one failed; each operation that failed adds
// its errors series. BENCHMARKS.md has the figures.
func TestGuestSeriesPerDisk(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(2, 2)), 1)
	discards := func(s *guest.Stats) []*guest.Counter {
		return []*guest.Counter{&s.Requests[guest.OpDiscard], &s.Bytes[guest.OpDiscard], &s.Failed[guest.OpDiscard],
			&s.TimeNs[guest.OpDiscard]}
	}
	count := func(st guest.Stats, hist bool) (classic, native, discard int) {
		for _, op := range guest.HistogramOps {
			st.Latency[op].OK = hist
		}
		g := fakeGuest{inv.disks[0].Domain: {Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramOK,
			Reading: guest.NewReading(&st, time.Time{})}}
		text := guestOnly(t, guestDirect(t, inv, k, g))
		classic = sampleLines(text)
		discard = strings.Count(text, `op="discard"`)
		for _, mf := range protoWithGuest(t, inv, k, g, HistogramsNative) {
			if strings.HasPrefix(mf.GetName(), "fspair_disk_guest_") {
				native += len(mf.GetMetric())
			}
		}
		return classic, native, discard
	}

	typical := typicalGuest()
	c0, n0, d0 := count(typical, false)
	c1, n1, d1 := count(typical, true)
	t.Logf("guest series of a typical disk (no discards, no failures): without histograms %d classic, %d native; with them %d classic, %d native",
		c0, n0, c1, n1)
	if c0 != 10 || n0 != 10 || c1 != 52 || n1 != 10 || d0+d1 != 0 {
		t.Errorf("guest series: without histograms %d classic, %d native; with %d, %d; %d and %d of op=discard; want 10, 10; 52, 10; none",
			c0, n0, c1, n1, d0, d1)
	}

	// A disk that discarded: one counter not 0 is enough, and brings
	// requests, bytes and time; errors only with a failed discard.
	for i := range discards(&typical) {
		d := typical
		discards(&d)[i].V = 7
		want := 3
		if discards(&d)[i] == &d.Failed[guest.OpDiscard] {
			want = 4
		}
		c, n, dn := count(d, true)
		if c != c1+want || n != n1+want || dn != want {
			t.Errorf("discard counter %d at 7: %d classic, %d native, %d of op=discard; want %d, %d, %d", i, c, n, dn, c1+want, n1+want, want)
		}
	}

	// A failed read brings its errors series, and nothing else.
	d := typical
	d.Failed[guest.OpRead].V = 1
	if c, n, _ := count(d, true); c != c1+1 || n != n1+1 {
		t.Errorf("a failed read: %d classic, %d native; want %d, %d", c, n, c1+1, n1+1)
	}
}

// TestGuestTimeOnce: the guest's time of an operation is written once, as
// the histogram's sum where the histogram is written, else as
// fspair_disk_guest_request_duration_seconds_total, with the same value,
// in the text format and in protobuf (native and classic); and the errors
// series of an operation is there only once one failed.
func TestGuestTimeOnce(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(5, 5)), 2)
	inv.disks[0].Domain, inv.disks[1].Domain = "plain", "lv"
	var qmp, lv guest.Stats
	for op := range guest.NumOps {
		qmp.Requests[op] = guest.Counter{V: 10, OK: true}
		qmp.Failed[op] = guest.Counter{V: 0, OK: true}
		qmp.TimeNs[op] = guest.Counter{V: uint64(250_000_000 * (op + 1)), OK: true}
	}
	qmp.Failed[guest.OpWrite].V = 2
	// read's histogram set and observed, flush's set and not yet observed,
	// write's not set.
	qmp.Latency[guest.OpRead] = guest.Histogram{OK: true}
	qmp.Latency[guest.OpRead].Bins[5] = 10
	qmp.Latency[guest.OpFlush] = guest.Histogram{OK: true}
	// libvirt: no failures given, no histograms.
	for _, op := range []int{guest.OpRead, guest.OpWrite, guest.OpFlush} {
		lv.Requests[op] = guest.Counter{V: 3, OK: true}
		lv.TimeNs[op] = guest.Counter{V: 1_000_000, OK: true}
	}
	g := fakeGuest{
		"plain": {Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramNotSet, Reading: guest.NewReading(&qmp, time.Time{})},
		"lv":    {Source: guest.SourceLibvirt, Status: guest.StatusOK, Histogram: guest.HistogramLibvirtTooOld, Reading: guest.NewReading(&lv, time.Time{})},
	}
	// Where each disk's time of each op is: "sum" (the histogram's),
	// "total" (the counter), with its value in seconds.
	type place struct {
		domain, op, where string
		v                 float64
	}
	want := []place{
		{"lv", "flush", "total", 0.001}, {"lv", "read", "total", 0.001}, {"lv", "write", "total", 0.001},
		{"plain", "discard", "total", 1}, {"plain", "flush", "total", 0.75}, {"plain", "read", "sum", 0.25}, {"plain", "write", "total", 0.5},
	}
	wantErrors := []string{"plain/write=2"}

	check := func(format string, fams map[string]*dto.MetricFamily) {
		t.Helper()
		var got []place
		var errs []string
		label := func(m *dto.Metric, name string) string {
			for _, l := range m.GetLabel() {
				if l.GetName() == name {
					return l.GetValue()
				}
			}
			return ""
		}
		for _, m := range fams["fspair_disk_guest_request_duration_seconds_total"].GetMetric() {
			got = append(got, place{label(m, "domain"), label(m, "op"), "total", m.GetCounter().GetValue()})
		}
		for _, m := range fams["fspair_disk_guest_request_duration_seconds"].GetMetric() {
			got = append(got, place{label(m, "domain"), label(m, "op"), "sum", m.GetHistogram().GetSampleSum()})
		}
		for _, m := range fams["fspair_disk_guest_request_errors_total"].GetMetric() {
			errs = append(errs, fmt.Sprintf("%s/%s=%g", label(m, "domain"), label(m, "op"), m.GetCounter().GetValue()))
		}
		slices.SortFunc(got, func(a, b place) int { return strings.Compare(a.domain+a.op, b.domain+b.op) })
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the guest's time\n got  %v\n want %v", format, got, want)
		}
		if !reflect.DeepEqual(errs, wantErrors) {
			t.Errorf("%s: errors series %v, want %v", format, errs, wantErrors)
		}
	}
	check("text", parseText(t, guestDirect(t, inv, k, g)))
	for _, mode := range []Histograms{HistogramsNative, HistogramsClassic} {
		check(fmt.Sprintf("protobuf, mode %d", mode), byName(protoWithGuest(t, inv, k, g, mode)))
	}
}
