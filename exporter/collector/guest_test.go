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
	"github.com/prometheus/common/expfmt"

	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/inventory"
)

// fakeGuest gives each disk, by domain, a fixed guest status.
type fakeGuest map[string]guest.Status

func (f fakeGuest) Status(d *inventory.Disk) guest.Status {
	if s, ok := f[d.Domain]; ok {
		return s
	}
	return guest.Status{Source: guest.SourceNone, Status: guest.StatusNoMonitor}
}

// randomGuest gives the disks of inv random guest statuses: some with no
// values, some with every counter, some with a source's subset.
func randomGuest(rng *rand.Rand, inv *fakeInventory) fakeGuest {
	g := fakeGuest{}
	statuses := []string{guest.StatusOK, guest.StatusStale, guest.StatusUnreachable, guest.StatusNoDevice, guest.StatusNoMonitor}
	for _, d := range inv.disks {
		st := guest.Status{Source: []string{guest.SourceQMP, guest.SourceLibvirt, guest.SourceNone}[rng.IntN(3)],
			Status: statuses[rng.IntN(len(statuses))]}
		if st.Status == guest.StatusOK || st.Status == guest.StatusStale {
			r := &guest.Reading{At: time.UnixMilli(rng.Int64N(1 << 41))}
			for _, f := range []*[guest.NumOps]guest.Counter{&r.Stats.Requests, &r.Stats.Bytes, &r.Stats.Failed, &r.Stats.Merged, &r.Stats.TimeNs} {
				for op := range f {
					if rng.IntN(3) > 0 {
						f[op] = guest.Counter{V: randomCount(rng), OK: true}
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

func guestDirect(t *testing.T, inv *fakeInventory, k *fakeKernel, g GuestSource) string {
	t.Helper()
	var b bytes.Buffer
	w := newTextWriter(&b)
	var s snapshot
	s.read(inv, k, k)
	s.readGuest(g)
	writeDirect(w, &s)
	w.flush()
	if w.err != nil {
		t.Fatal(w.err)
	}
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

// TestGuestGolden: the guest families of three disks (QMP, libvirt with
// stale values, none) against testdata/guest.prom (go test -update rewrites
// it); without a guest source, no guest family at all.
func TestGuestGolden(t *testing.T) {
	disks := []inventory.Disk{goldenDisks[0], goldenDisks[0], goldenDisks[0]}
	for i, name := range []string{"plain", "lv", "other"} {
		disks[i].Domain = name
		disks[i].Slot = uint32(7 + i)
	}
	inv := &fakeInventory{disks: disks}
	k := &fakeKernel{}
	var qmp, lv guest.Stats
	for op := range guest.OpNames {
		qmp.Requests[op] = guest.Counter{V: uint64(1000 + op), OK: true}
		qmp.Failed[op] = guest.Counter{V: uint64(op), OK: true}
		qmp.TimeNs[op] = guest.Counter{V: uint64(1_234_567_891 * (op + 1)), OK: true}
	}
	for _, op := range []int{guest.OpRead, guest.OpWrite, guest.OpDiscard} {
		qmp.Bytes[op] = guest.Counter{V: uint64(4096 * (op + 1)), OK: true}
		qmp.Merged[op] = guest.Counter{V: uint64(10 * op), OK: true}
	}
	for _, op := range []int{guest.OpRead, guest.OpWrite, guest.OpFlush} {
		lv.Requests[op] = guest.Counter{V: uint64(50 + op), OK: true}
		lv.TimeNs[op] = guest.Counter{V: uint64(999 * (op + 1)), OK: true}
	}
	lv.Bytes[guest.OpRead] = guest.Counter{V: 512, OK: true}
	lv.Bytes[guest.OpWrite] = guest.Counter{V: 1024, OK: true}
	at := time.Date(2026, 11, 21, 20, 15, 0, 250e6, time.UTC)
	g := fakeGuest{
		"plain": {Source: guest.SourceQMP, Status: guest.StatusOK, Reading: &guest.Reading{Stats: qmp, At: at}},
		"lv":    {Source: guest.SourceLibvirt, Status: guest.StatusStale, Reading: &guest.Reading{Stats: lv, At: at.Add(-time.Minute)}},
	}
	got := guestOnly(t, guestDirect(t, inv, k, g))
	path := filepath.Join("testdata", "guest.prom")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(samples(parseText(t, got)), samples(parseText(t, string(want)))) {
		t.Errorf("guest families differ from %s (go test -update rewrites it):\n%s", path, got)
	}
	if s := guestDirect(t, inv, k, nil); strings.Contains(s, "fspair_disk_guest_") {
		t.Errorf("guest families written without a guest source")
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
		"fspair_disk_guest_info", "fspair_disk_guest_merged_requests_total"} {
		if !directNames[name] {
			t.Errorf("%s is not among the direct families", name)
		}
	}
}
