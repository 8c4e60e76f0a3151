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
			r := &guest.Reading{At: time.UnixMilli(rng.Int64N(1 << 41))}
			for _, f := range []*[guest.NumOps]guest.Counter{&r.Stats.Requests, &r.Stats.Bytes, &r.Stats.Failed, &r.Stats.TimeNs} {
				for op := range f {
					if rng.IntN(3) > 0 {
						f[op] = guest.Counter{V: randomCount(rng), OK: true}
					}
				}
			}
			// Half of them never discarded: QEMU's unmap counters at 0.
			if rng.IntN(2) == 0 {
				for _, f := range []*[guest.NumOps]guest.Counter{&r.Stats.Requests, &r.Stats.Bytes, &r.Stats.Failed, &r.Stats.TimeNs} {
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
				h := &r.Stats.Latency[op]
				h.OK, st.Histogram = true, guest.HistogramOK
				if rng.IntN(4) > 0 {
					for k := range h.Bins {
						h.Bins[k] = randomCount(rng)
					}
				}
			}
			st.Reading = r
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
// QMP with histograms (flush's not yet observed), a libvirt domain with
// stale values and libvirt too old for histograms, and a disk without a
// source.
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
		"plain": {Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramOK, Reading: &guest.Reading{Stats: qmp, At: at}},
		"lv": {Source: guest.SourceLibvirt, Status: guest.StatusStale, Histogram: guest.HistogramLibvirtTooOld,
			Reading: &guest.Reading{Stats: lv, At: at.Add(-time.Minute)}},
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
	g := fakeGuest{d.Domain: {Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramOK, Reading: &guest.Reading{Stats: st}}}
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

// TestGuestSeriesPerDisk is the guest side's share of a typical disk's
// series (TestSeriesPerDisk counts fspair_disk_guest_info alone, as the
// bench's disks have no guest): a plain QEMU disk read over QMP, which
// gives every counter of the four operations, that never discarded (QEMU's
// unmap counters at 0), with its read, write and flush histograms
// observed. Native mode: 13 series before the histograms, 16 with them;
// classic: 13 and 58 (15 a histogram, the image file's layout). A disk
// that discarded has the 4 discard series besides, whichever of its
// discard counters is not 0. BENCHMARKS.md has the figures.
func TestGuestSeriesPerDisk(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(2, 2)), 1)
	var st guest.Stats
	for _, f := range []*[guest.NumOps]guest.Counter{&st.Requests, &st.Failed, &st.TimeNs} {
		for op := range f {
			f[op] = guest.Counter{V: 1, OK: true}
		}
	}
	for _, op := range []int{guest.OpRead, guest.OpWrite, guest.OpDiscard} {
		st.Bytes[op] = guest.Counter{V: 1, OK: true}
	}
	discards := func(s *guest.Stats) []*guest.Counter {
		return []*guest.Counter{&s.Requests[guest.OpDiscard], &s.Bytes[guest.OpDiscard], &s.Failed[guest.OpDiscard],
			&s.TimeNs[guest.OpDiscard]}
	}
	count := func(st guest.Stats, hist bool) (classic, native, discard int) {
		for _, op := range guest.HistogramOps {
			st.Latency[op].OK = hist
			st.Latency[op].Bins[op+3] = 1
		}
		g := fakeGuest{inv.disks[0].Domain: {Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramOK,
			Reading: &guest.Reading{Stats: st}}}
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

	typical := st
	for _, c := range discards(&typical) {
		c.V = 0
	}
	c0, n0, d0 := count(typical, false)
	c1, n1, d1 := count(typical, true)
	t.Logf("guest series of a typical disk (no discards): without histograms %d classic, %d native; with them %d classic, %d native", c0, n0, c1, n1)
	if c0 != 13 || n0 != 13 || c1 != 58 || n1 != 16 || d0+d1 != 0 {
		t.Errorf("guest series: without histograms %d classic, %d native; with %d, %d; %d and %d of op=discard; want 13, 13; 58, 16; none",
			c0, n0, c1, n1, d0, d1)
	}

	// A disk that discarded: one counter not 0 is enough, and brings
	// all four.
	for i := range discards(&st) {
		d := typical
		discards(&d)[i].V = 7
		c, n, dn := count(d, true)
		if c != c1+4 || n != n1+4 || dn != 4 {
			t.Errorf("discard counter %d at 7: %d classic, %d native, %d of op=discard; want %d, %d, 4", i, c, n, dn, c1+4, n1+4)
		}
	}
}
