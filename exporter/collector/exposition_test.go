package collector

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	bpf "github.com/fspair/fspair/bpf/obj"
	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/hostfs"
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
)

// fakeInventory is a fixed set of disks and host devices.
type fakeInventory struct {
	disks   []inventory.Disk
	devices []inventory.Device
}

func (f *fakeInventory) Disks() []inventory.Disk     { return f.disks }
func (f *fakeInventory) Devices() []inventory.Device { return f.devices }

// fakeKernel holds the counters of each slot; a slot in fail cannot be read.
type fakeKernel struct {
	disk  map[uint32]probe.Counters
	image map[uint32]bpf.HostImageDeviceCounters
	dev   map[uint32]bpf.HostDeviceCounters
	fail  map[uint32]bool
}

var errFakeRead = errors.New("fake map read failure")

func (k *fakeKernel) Counters(slot uint32) (probe.Counters, error) {
	if k.fail[slot] {
		return probe.Counters{}, errFakeRead
	}
	return k.disk[slot], nil
}

// Unfollowed: in this fake the probes do not follow buffered I/O on Btrfs
// (as the tracepoint mode), and time no flush on XFS.
func (k *fakeKernel) Unfollowed(fs, cache, aio string) []probe.Gap {
	var gaps []probe.Gap
	for _, op := range probe.Ops {
		for _, path := range probe.DiskPaths(op, cache, aio) {
			switch {
			case fs == "btrfs" && path == probe.PathSyscallBuffered:
				gaps = append(gaps, probe.Gap{Op: op, Path: path, Missing: probe.MissingRequests})
			case fs == "xfs" && op == "flush":
				gaps = append(gaps, probe.Gap{Op: op, Path: path, Missing: probe.MissingLatency})
			}
		}
	}
	return gaps
}

func (k *fakeKernel) ImageDeviceCounters(slot uint32) (bpf.HostImageDeviceCounters, error) {
	if k.fail[slot] {
		return bpf.HostImageDeviceCounters{}, errFakeRead
	}
	return k.image[slot], nil
}

func (k *fakeKernel) DeviceCounters(slot uint32) (bpf.HostDeviceCounters, error) {
	return k.dev[slot], nil
}

// randomCount is a counter value: often zero or small, sometimes beyond
// 2^53 where a float64 no longer holds every integer.
func randomCount(rng *rand.Rand) uint64 {
	switch n := rng.IntN(20); {
	case n < 6:
		return 0
	case n < 14:
		return rng.Uint64N(1_000_000)
	case n < 19:
		return rng.Uint64N(1 << 50)
	default:
		return (1 << 53) + rng.Uint64N(1<<58)
	}
}

// fillRandom sets every integer of a generated counter struct.
func fillRandom(rng *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			// Padding (bpf2go names the BPF structs' explicit pad fields Pad) is no counter.
			if name := v.Type().Field(i).Name; name != "_" && name != "Pad" {
				fillRandom(rng, v.Field(i))
			}
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fillRandom(rng, v.Index(i))
		}
	case reflect.Uint64:
		v.SetUint(randomCount(rng))
	case reflect.Int64:
		n := int64(randomCount(rng) >> 1)
		if rng.IntN(2) == 0 {
			n = -n
		}
		v.SetInt(n)
	default:
		panic("fillRandom: unexpected field kind " + v.Kind().String())
	}
}

// randomLabel is a label value made of pieces the text format must escape
// or carry unharmed: quotes, backslashes, newlines, UTF-8, the format's own
// punctuation.
func randomLabel(rng *rand.Rand) string {
	pieces := []string{"vm", "a", `"`, `\`, "\n", `\n`, "é", "日本", "🙂", "{", "}", ",", "=", " ", `le="1"`, "#", "/srv/img", "\t"}
	var b strings.Builder
	for n := rng.IntN(6); n > 0; n-- {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

// randomFleet returns n disks (some untracked, some on Btrfs, some with
// counters that cannot be read when failing is set) on three host devices,
// with random counters and label values.
func randomFleet(rng *rand.Rand, n int) (*fakeInventory, *fakeKernel) {
	inv := &fakeInventory{}
	k := &fakeKernel{disk: map[uint32]probe.Counters{}, image: map[uint32]bpf.HostImageDeviceCounters{},
		dev: map[uint32]bpf.HostDeviceCounters{}, fail: map[uint32]bool{}}
	mounts := []hostfs.Mount{
		{FSType: "btrfs", MountPoint: "/var/lib/libvirt/images", Device: "/dev/sdb1"},
		{FSType: "ext4", MountPoint: `/srv/"odd" \dir` + "\n", Device: "/dev/nvme0n1p2"},
		{FSType: "xfs", MountPoint: "/mnt/\xff\xfebad-utf8/" + strings.Repeat("日本", 60), Device: "/dev/mapper/vg-images"},
	}
	for i, m := range mounts {
		inv.devices = append(inv.devices, inventory.Device{Name: m.Device, FSType: m.FSType, MountPoint: m.MountPoint,
			Slot: uint32(i), Disks: rng.IntN(50)})
		var c bpf.HostDeviceCounters
		fillRandom(rng, reflect.ValueOf(&c).Elem())
		k.dev[uint32(i)] = c
	}
	formats := []string{"raw", "qcow2", "unknown", ""}
	for i := 0; i < n; i++ {
		d := inventory.Disk{
			Disk: discovery.Disk{
				// The index keeps label sets distinct, as two disks
				// with the same labels cannot both be exposed.
				Domain:       fmt.Sprintf("%s-%d", randomLabel(rng), i),
				UUID:         randomLabel(rng),
				TargetDevice: randomLabel(rng),
				SourceFile:   "/var/lib/images/" + randomLabel(rng),
				Source:       []string{"libvirt", "qemu", "static"}[rng.IntN(3)],
				Cache:        []string{"none", "writeback", ""}[rng.IntN(3)],
				AIO:          []string{"native", "threads", "io_uring", ""}[rng.IntN(4)],
			},
			ImageFormat:   formats[rng.IntN(len(formats))],
			GuestFS:       []string{"ext4", "xfs", "", "ntfs"}[rng.IntN(4)],
			GuestFSSource: []string{"image", "override"}[rng.IntN(2)],
			HostFS:        mounts[rng.IntN(len(mounts))],
			Layout:        inventory.Layout{Extents: rng.Int64N(100) - 10, Allocated: rng.Int64N(1 << 40), Apparent: rng.Int64N(1 << 40)},
			Tracked:       rng.IntN(10) > 0,
			Slot:          uint32(i),
		}
		if rng.IntN(4) > 0 {
			d.VirtualSize = rng.Int64N(1 << 42)
		}
		inv.disks = append(inv.disks, d)
		var c probe.Counters
		fillRandom(rng, reflect.ValueOf(&c).Elem())
		var h bpf.HostImageDeviceCounters
		fillRandom(rng, reflect.ValueOf(&h).Elem())
		emptySome(rng, &c, &h)
		k.disk[d.Slot] = c
		k.image[d.Slot] = h
	}
	return inv, k
}

// emptySome empties about a third of a disk's histograms, as operations
// a disk never issued leave them.
func emptySome(rng *rand.Rand, c *probe.Counters, h *bpf.HostImageDeviceCounters) {
	empty := func() bool { return rng.IntN(3) == 0 }
	for i := range c.Latency {
		if empty() {
			c.Latency[i], c.LatencySumNs[i] = [25]uint64{}, 0
		}
	}
	for i := range c.Size {
		if empty() {
			c.Size[i], c.SizeSum[i] = [16]uint64{}, 0
		}
	}
	if empty() {
		c.SeekPrev, c.SeekPrevSum = [29]uint64{}, 0
	}
	if empty() {
		c.SeekNear, c.SeekNearSum = [29]uint64{}, 0
	}
	if empty() {
		c.Outstanding, c.OutstandingSum = [10]uint64{}, 0
	}
	if empty() {
		c.Interarrival, c.InterarrivalSumNs = [25]uint64{}, 0
	}
	for i := range h.Queue {
		if empty() {
			h.Queue[i], h.QueueSumNs[i] = [25]uint64{}, 0
		}
		if empty() {
			h.Service[i], h.ServiceSumNs[i] = [25]uint64{}, 0
		}
	}
}

// sameFamilies compares two expositions family by family (name, help,
// type, number of series) and sample by sample (bit for bit); gotName and
// wantName say where each came from.
func sameFamilies(t *testing.T, gotName string, gf map[string]*dto.MetricFamily, wantName string, wf map[string]*dto.MetricFamily) {
	t.Helper()
	for name, w := range wf {
		g := gf[name]
		if g == nil {
			t.Errorf("family %s: not %s", name, gotName)
			continue
		}
		if g.GetHelp() != w.GetHelp() || g.GetType() != w.GetType() {
			t.Errorf("family %s: HELP %q TYPE %s %s, HELP %q TYPE %s %s",
				name, g.GetHelp(), g.GetType(), gotName, w.GetHelp(), w.GetType(), wantName)
		}
		if len(g.GetMetric()) != len(w.GetMetric()) {
			t.Errorf("family %s: %d series %s, %d %s", name, len(g.GetMetric()), gotName, len(w.GetMetric()), wantName)
		}
	}
	for name := range gf {
		if wf[name] == nil {
			t.Errorf("family %s %s but not %s", name, gotName, wantName)
		}
	}
	ws, gs := samples(wf), samples(gf)
	for key, wv := range ws {
		gv, ok := gs[key]
		switch {
		case !ok:
			t.Errorf("sample %s: not %s", key, gotName)
		case math.Float64bits(gv) != math.Float64bits(wv):
			t.Errorf("sample %s = %v %s, %v %s", key, gv, gotName, wv, wantName)
		}
	}
	for key := range gs {
		if _, ok := ws[key]; !ok {
			t.Errorf("sample %s %s but not %s", key, gotName, wantName)
		}
	}
}

// withoutEmptyHistograms drops the histograms with no observation from
// families, and the families left empty: the direct writer leaves them out
// (histFamily.observed), the collectors send them.
func withoutEmptyHistograms(mfs []*dto.MetricFamily) []*dto.MetricFamily {
	var out []*dto.MetricFamily
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			mf.Metric = slices.DeleteFunc(mf.Metric, func(m *dto.Metric) bool { return m.GetHistogram().GetSampleCount() == 0 })
		}
		if len(mf.Metric) > 0 {
			out = append(out, mf)
		}
	}
	return out
}

// zeroLeftOut are the families whose zero series the direct writer leaves
// out where the disk's configuration cannot count them (diskVec's expect);
// the collectors send every series.
var zeroLeftOut = []string{
	"fspair_disk_requests_total", "fspair_disk_bytes_total", "fspair_disk_request_errors_total",
	"fspair_disk_format_metadata_requests_total", "fspair_disk_format_metadata_bytes_total",
	"fspair_disk_submissions_total", "fspair_disk_io_uring_punted_total",
	"fspair_disk_host_cache_reads_total", "fspair_disk_host_cache_read_bytes_total",
	"fspair_disk_host_cache_write_bytes_total",
}

// withoutLeftOut drops from want (the collectors' families) the zero series
// of zeroLeftOut that got (the direct writer's) does not have, and the
// families left empty, and returns the dropped series, sorted. A series
// with a value, or of another family, is never dropped, so that the
// comparison still fails on it.
func withoutLeftOut(want, got map[string]*dto.MetricFamily) []string {
	key := func(name string, m *dto.Metric) string {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
		}
		sort.Strings(ls)
		return name + "{" + strings.Join(ls, ",") + "}"
	}
	var dropped []string
	for _, name := range zeroLeftOut {
		w := want[name]
		if w == nil {
			continue
		}
		have := map[string]bool{}
		if g := got[name]; g != nil {
			for _, m := range g.GetMetric() {
				have[key(name, m)] = true
			}
		}
		w.Metric = slices.DeleteFunc(w.Metric, func(m *dto.Metric) bool {
			k := key(name, m)
			if m.GetCounter().GetValue() != 0 || have[k] {
				return false
			}
			dropped = append(dropped, k)
			return true
		})
		if len(w.Metric) == 0 {
			delete(want, name)
		}
	}
	sort.Strings(dropped)
	return dropped
}

// clientGolangText is what the exporter served before the direct writer,
// less the histograms with no observation: the disk and host collectors
// gathered by client_golang and encoded by its text encoder.
func clientGolangText(t testing.TB, inv *fakeInventory, k *fakeKernel) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		if err := NewDiskCollector(inv, k).Update(ch); err != nil {
			t.Error(err)
		}
		if err := NewHostCollector(inv, k).Update(ch); err != nil {
			t.Error(err)
		}
	}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range withoutEmptyHistograms(mfs) {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// directText is the direct writer's output for the same disks.
func directText(t testing.TB, inv *fakeInventory, k *fakeKernel) string {
	t.Helper()
	var b bytes.Buffer
	w := newTextWriter(&b)
	var s snapshot
	s.read(inv, k, k)
	if s.diskErr != nil || s.hostErr != nil {
		t.Fatalf("read counters: %v, %v", s.diskErr, s.hostErr)
	}
	writeDirect(w, &s)
	w.flush()
	if w.err != nil {
		t.Fatal(w.err)
	}
	return b.String()
}

func parseText(t testing.TB, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

// samples flattens parsed families into exposition samples, each keyed by
// series name and sorted labels, le as the float the parser read.
func samples(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			sort.Strings(ls)
			key := func(suffix string, extra ...string) string {
				return name + suffix + "{" + strings.Join(append(slices.Clone(ls), extra...), ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out[key("_bucket", "le="+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))] = float64(b.GetCumulativeCount())
				}
				out[key("_sum")] = h.GetSampleSum()
				out[key("_count")] = float64(h.GetSampleCount())
			default:
				out[key("?")] = math.NaN() // never equal: an unexpected type fails the comparison
			}
		}
	}
	return out
}

var leRE = regexp.MustCompile(`^([a-z_]+)_bucket\{.*le="([^"]*)"\}`)

// leSpellings lists, per histogram family, the le label values exactly as
// written: Prometheus matches le as a string.
func leSpellings(text string) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		if m := leRE.FindStringSubmatch(line); m != nil && !slices.Contains(out[m[1]], m[2]) {
			out[m[1]] = append(out[m[1]], m[2])
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

func sampleLines(text string) int {
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n
}

// checkStructure checks what the text format requires and the parser does
// not enforce: one HELP and one TYPE per family, every sample after its
// family's TYPE and before the next family's, so that a family's series are
// all together.
func checkStructure(t testing.TB, text string) {
	t.Helper()
	seen := map[string]bool{}
	var fam, typ string
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP "):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			if seen[name] {
				t.Fatalf("line %d: family %s appears a second time", i+1, name)
			}
			seen[name], fam, typ = true, name, ""
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(strings.TrimPrefix(line, "# TYPE "))
			if len(f) != 2 || f[0] != fam || typ != "" {
				t.Fatalf("line %d: TYPE %q not right after the HELP of family %s", i+1, line, fam)
			}
			typ = f[1]
		case line == "" || strings.HasPrefix(line, "#"):
			t.Fatalf("line %d: unexpected %q", i+1, line)
		default:
			name := line[:strings.IndexAny(line, "{ ")]
			ok := name == fam
			if typ == "histogram" {
				ok = name == fam+"_bucket" || name == fam+"_sum" || name == fam+"_count"
			}
			if !ok || typ == "" {
				t.Fatalf("line %d: sample %s outside its family (current family %s, type %q)", i+1, name, fam, typ)
			}
		}
	}
}

func lint(t testing.TB, text string) {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestDirectMatchesCollectors: for disks with random counters and label
// values full of characters the format escapes, the direct writer's output
// parses into the same families, help, types, series and values as the
// disk and host collectors' output through client_golang (less the zero
// series the direct writer leaves out), with the same le spellings, and is
// well-formed and lint-clean.
func TestDirectMatchesCollectors(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			inv, k := randomFleet(rand.New(rand.NewPCG(seed, 6)), 30)
			want, got := clientGolangText(t, inv, k), directText(t, inv, k)
			if !strings.Contains(got, "fspair_disk_unfollowed{") {
				t.Error("no fspair_disk_unfollowed series for a fleet with buffered disks on Btrfs")
			}
			checkStructure(t, got)
			lint(t, got)

			gotFams, wantFams := parseText(t, got), parseText(t, want)
			left := withoutLeftOut(wantFams, gotFams)
			if len(left) == 0 {
				t.Error("no zero series left out for a fleet of raw images and known aio and cache modes")
			}
			sameFamilies(t, "written directly", gotFams, "by the collectors", wantFams)
			if g, w := sampleLines(got), sampleLines(want)-len(left); g != w {
				t.Errorf("%d sample lines written directly, %d by the collectors", g, w)
			}
			if g, w := leSpellings(got), leSpellings(want); !reflect.DeepEqual(g, w) {
				t.Errorf("le spellings differ:\ndirect     %v\ncollectors %v", g, w)
			}
			if t.Failed() {
				t.Logf("first lines of the direct output:\n%s", head(got, 20))
			}
		})
	}
}

func head(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// TestDirectGolden: the golden file of the disk collector (testdata/disk.prom,
// from TestDiskExposition's fixture) is also what the direct writer gives,
// but for the histograms with no observation and the zero series the disk's
// configuration (qcow2, aio=native, cache=none) does not expect.
func TestDirectGolden(t *testing.T) {
	inv := &fakeInventory{disks: goldenDisks}
	k := &fakeKernel{disk: map[uint32]probe.Counters{7: goldenCounters()}}
	var b bytes.Buffer
	w := newTextWriter(&b)
	var s snapshot
	s.read(inv, k, nil)
	if s.diskErr != nil {
		t.Fatal(s.diskErr)
	}
	writeDirect(w, &s)
	w.flush()
	raw, err := os.ReadFile(filepath.Join("testdata", "disk.prom"))
	if err != nil {
		t.Fatal(err)
	}
	golden := string(raw)
	var want []*dto.MetricFamily
	for _, mf := range parseText(t, golden) {
		want = append(want, mf)
	}
	wantFams := map[string]*dto.MetricFamily{}
	for _, mf := range withoutEmptyHistograms(want) {
		wantFams[mf.GetName()] = mf
	}
	got := parseText(t, b.String())
	series := func(name string, extra ...string) string {
		ls := append([]string{`domain="web1"`, `source_file="/var/lib/libvirt/images/web1.qcow2"`, `target_device="vda"`,
			`uuid="6f1c0e58-6a3c-4d7e-9d34-1b2c3d4e5f60"`}, extra...)
		sort.Strings(ls)
		return name + "{" + strings.Join(ls, ",") + "}"
	}
	wantLeft := []string{
		// Flushes move no bytes.
		series("fspair_disk_bytes_total", `op="flush"`),
		// The disk never allocated; it did discard and write_zeroes.
		series("fspair_disk_bytes_total", `op="allocate"`),
		series("fspair_disk_requests_total", `op="allocate"`),
		// Errors only from an operation's first: the disk had one write fail.
		series("fspair_disk_request_errors_total", `op="allocate"`),
		series("fspair_disk_request_errors_total", `op="discard"`),
		series("fspair_disk_request_errors_total", `op="flush"`),
		series("fspair_disk_request_errors_total", `op="read"`),
		series("fspair_disk_request_errors_total", `op="write_zeroes"`),
		// aio=native: linux-aio, and syscall for what QEMU's thread pool does.
		series("fspair_disk_submissions_total", `interface="io_uring"`),
		series("fspair_disk_io_uring_punted_total"),
	}
	sort.Strings(wantLeft)
	if left := withoutLeftOut(wantFams, got); !reflect.DeepEqual(left, wantLeft) {
		t.Errorf("zero series left out:\n%s\nwant:\n%s", strings.Join(left, "\n"), strings.Join(wantLeft, "\n"))
	}
	if g, w := samples(got), samples(wantFams); !reflect.DeepEqual(g, w) {
		t.Errorf("direct output differs from testdata/disk.prom:\n%s", b.String())
	}
	if g, w := leSpellings(b.String()), leSpellings(golden); !reflect.DeepEqual(g, w) {
		t.Errorf("le spellings differ from testdata/disk.prom:\n%v\n%v", g, w)
	}
}

// TestCountedNeverLeftOut: a series the disk's configuration does not
// expect is still written once the kernel counted something in it, in both
// formats; the zero ones beside it are left out, and the expected zero ones
// written.
func TestCountedNeverLeftOut(t *testing.T) {
	d := goldenDisks[0]
	d.ImageFormat, d.AIO, d.Cache = "raw", "threads", "none"
	var c probe.Counters
	c.Requests[slices.Index(opNames, "read")] = 10
	c.FormatRequests[slices.Index(dirNames, "read")] = 3
	c.Submissions[slices.Index(ifaceNames, "linux_aio")] = 4
	c.CacheReads[slices.Index(cacheReadResults, "hit")] = 2
	inv := &fakeInventory{disks: []inventory.Disk{d}}
	k := &fakeKernel{disk: map[uint32]probe.Counters{d.Slot: c}}

	for format, fams := range map[string]map[string]*dto.MetricFamily{
		"text":     parseText(t, directText(t, inv, k)),
		"protobuf": byName(directProto(t, inv, k, HistogramsNative)),
	} {
		// value of the family's series whose extra label has the value,
		// and whether it was written.
		value := func(family, label, v string) (float64, bool) {
			for _, m := range fams[family].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == label && l.GetValue() == v || label == "" {
						return m.GetCounter().GetValue(), true
					}
				}
			}
			return 0, false
		}
		for _, w := range []struct {
			family, label, value string
			want                 float64
			written              bool
		}{
			{"fspair_disk_format_metadata_requests_total", "op", "read", 3, true}, // counted on a raw image
			{"fspair_disk_format_metadata_requests_total", "op", "write", 0, false},
			{"fspair_disk_format_metadata_bytes_total", "op", "read", 0, false},
			{"fspair_disk_submissions_total", "interface", "linux_aio", 4, true}, // counted with aio=threads
			{"fspair_disk_submissions_total", "interface", "syscall", 0, true},   // expected with aio=threads
			{"fspair_disk_submissions_total", "interface", "io_uring", 0, false},
			{"fspair_disk_io_uring_punted_total", "", "", 0, false},
			{"fspair_disk_host_cache_reads_total", "result", "hit", 2, true}, // counted with cache=none
			{"fspair_disk_host_cache_reads_total", "result", "miss", 0, false},
			{"fspair_disk_host_cache_reads_total", "result", "direct", 0, true}, // expected with cache=none
			{"fspair_disk_host_cache_read_bytes_total", "result", "hit", 0, false},
			{"fspair_disk_requests_total", "op", "read", 10, true},
			{"fspair_disk_requests_total", "op", "flush", 0, true},
			{"fspair_disk_requests_total", "op", "discard", 0, false},
		} {
			got, written := value(w.family, w.label, w.value)
			if written != w.written || got != w.want {
				t.Errorf("%s: %s{%s=%q}: written %v, value %v; want written %v, value %v",
					format, w.family, w.label, w.value, written, got, w.written, w.want)
			}
		}
	}
}

func TestLabelEscaping(t *testing.T) {
	got := labelPairs("a", "x\"y\\z\nw", "b", "é\xff")
	want := `a="x\"y\\z\nw",b="é` + "\uFFFD" + `"`
	if got != want {
		t.Errorf("labelPairs = %s, want %s", got, want)
	}
	if f := newFamily("m", "line\\one\nline two", "counter"); f.header != "# HELP m line\\\\one\\nline two\n# TYPE m counter\n" {
		t.Errorf("header = %q", f.header)
	}
}

// TestLeLikeClientGolang: bucket bounds are spelt as client_golang spells
// them, for every bound the exporter uses.
func TestLeLikeClientGolang(t *testing.T) {
	for _, bounds := range [][]float64{latencyBounds, sizeBounds, outstandingBounds, seekBounds} {
		h := prometheus.MustNewConstHistogram(prometheus.NewDesc("h", "h", nil, nil), 0, 0,
			func() map[float64]uint64 {
				m := map[float64]uint64{}
				for _, b := range bounds {
					m[b] = 0
				}
				return m
			}())
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) { ch <- h }))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := expfmt.MetricFamilyToText(&b, mfs[0]); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, line := range strings.Split(b.String(), "\n") {
			if i := strings.Index(line, `le="`); i >= 0 {
				want = append(want, `,le="`+line[i+4:strings.Index(line[i+4:], `"`)+i+4]+`"} `)
			}
		}
		all := shape{bounds: bounds, keep: keepIf(len(bounds), func(int) bool { return true })}
		if got := newHistFamily("h", "h", all).le; !reflect.DeepEqual(got, want) {
			t.Errorf("le labels\n got %q\nwant %q", got, want)
		}
	}
}

// newTestHandler serves a random fleet through the handler, with a
// registry holding a collector of the Exporter and a promhttp error counter.
func newTestHandler(t *testing.T, inv *fakeInventory, k *fakeKernel, extra ...prometheus.Collector) *httptest.Server {
	t.Helper()
	return newTestHandlerOpts(t, inv, k, HandlerOpts{GzipLevel: kgzip.BestSpeed}, extra...)
}

func newTestHandlerOpts(t *testing.T, inv *fakeInventory, k *fakeKernel, opts HandlerOpts, extra ...prometheus.Collector) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewExporter(map[string]Collector{"probe": collectorFunc(func(ch chan<- prometheus.Metric) error {
		ch <- prometheus.MustNewConstMetric(probeAttached, prometheus.GaugeValue, 1, "pread64_enter", "tracepoint/syscalls/sys_enter_pread64")
		return nil
	})}, nil))
	reg.MustRegister(extra...)
	opts.Registry = reg
	h, err := NewHandler(reg, inv, k, k, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type collectorFunc func(ch chan<- prometheus.Metric) error

func (f collectorFunc) Update(ch chan<- prometheus.Metric) error { return f(ch) }

// get scrapes url, asking for gzip or not, and returns the body as text.
func get(t *testing.T, url string, gz bool) (string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if gz {
		// Prometheus's own header.
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		// The standard library's reader, as Prometheus uses.
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp
}

// TestHandler: one response holds the registry's families and the direct
// ones, well-formed, compressed when asked, with the disk and host sides
// reported as collectors.
func TestHandler(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(42, 6)), 20)
	srv := newTestHandler(t, inv, k)
	plain, resp := get(t, srv.URL, false)
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("Content-Encoding %q without Accept-Encoding", ce)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	zipped, resp := get(t, srv.URL, true)
	if ce := resp.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Errorf("Content-Encoding %q, want gzip", ce)
	}
	for _, text := range []string{plain, zipped} {
		checkStructure(t, text)
		lint(t, text)
		fams := parseText(t, text)
		success := map[string]float64{}
		for _, m := range fams["fspair_scrape_collector_success"].GetMetric() {
			success[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
		if want := map[string]float64{"disk": 1, "host": 1, "probe": 1}; !reflect.DeepEqual(success, want) {
			t.Errorf("fspair_scrape_collector_success %v, want %v", success, want)
		}
		for _, name := range []string{"fspair_probe_attached", "promhttp_metric_handler_errors_total", "fspair_disk_info", "fspair_host_device_service_seconds"} {
			if fams[name] == nil {
				t.Errorf("no %s in the response", name)
			}
		}
	}
	direct := directText(t, inv, k)
	if !strings.HasSuffix(plain, direct) {
		t.Error("the response does not end with the direct families")
	}
}

// TestHandlerReadFailure: a disk whose counters cannot be read keeps its
// info series, loses its counters, and marks the disk and host sides
// failed; the other disks are all there.
func TestHandlerReadFailure(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(7, 6)), 10)
	for i := range inv.disks {
		inv.disks[i].Tracked = true
	}
	bad := inv.disks[3]
	k.fail[bad.Slot] = true
	text, _ := get(t, newTestHandler(t, inv, k).URL, false)
	fams := parseText(t, text)
	for _, m := range fams["fspair_scrape_collector_success"].GetMetric() {
		c := m.GetLabel()[0].GetValue()
		if want := map[string]float64{"disk": 0, "host": 0, "probe": 1}[c]; m.GetGauge().GetValue() != want {
			t.Errorf("fspair_scrape_collector_success{collector=%q} = %v, want %v", c, m.GetGauge().GetValue(), want)
		}
	}
	count := func(name, source string) int {
		n := 0
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source_file" && l.GetValue() == source {
					n++
				}
			}
		}
		return n
	}
	if count("fspair_disk_info", bad.SourceFile) != 1 || count("fspair_disk_requests_total", bad.SourceFile) != 0 ||
		count("fspair_disk_device_requests_total", bad.SourceFile) != 0 {
		t.Error("the unreadable disk: want its info series and no counters")
	}
	// Every readable disk: read, write, flush, and the other operations
	// it did.
	want := 0
	for _, d := range inv.disks {
		if d.Slot == bad.Slot {
			continue
		}
		c := k.disk[d.Slot]
		for j, op := range opNames {
			if op == "read" || op == "write" || op == "flush" || c.Requests[j] != 0 || c.Errors[j] != 0 {
				want++
			}
		}
	}
	if n := len(fams["fspair_disk_requests_total"].GetMetric()); n != want {
		t.Errorf("%d fspair_disk_requests_total series, want %d (9 readable disks)", n, want)
	}
}

// TestHandlerNameClash: a registry family that the handler also writes
// directly would break the format (a family twice): the scrape fails loudly.
func TestHandlerNameClash(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(9, 6)), 2)
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fspair_disk_info", Help: "clash"})
	srv := newTestHandler(t, inv, k, clash)
	_, resp := get(t, srv.URL, false)
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                              false,
		"gzip":                          true,
		"identity":                      false,
		"deflate, gzip;q=1.0, *;q=0.5":  true,
		"gzip;q=0":                      false,
		"br, *;q=0.1":                   true,
		"GZIP ; Q=0.5":                  true,
		"identity, gzip;q=0, *;q=0":     false,
		"x-gzip":                        true,
		"gzip;q=0, *":                   false,
		"*":                             true,
		"zstd;q=1.0, gzip;q=0.000, br":  false,
		"deflate;q=0.5, gzip ;q = 0.25": true,
	} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}

// benchFleet is the fleet scripts/bench.sh makes: n raw images on one host
// file system, with counters as a busy disk has them.
func benchFleet(n int) (*fakeInventory, *fakeKernel) {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	inv := &fakeInventory{devices: []inventory.Device{{Name: "/dev/vda1", FSType: "ext4", MountPoint: "/", Disks: n}}}
	k := &fakeKernel{disk: map[uint32]probe.Counters{}, image: map[uint32]bpf.HostImageDeviceCounters{},
		dev: map[uint32]bpf.HostDeviceCounters{}}
	var dc bpf.HostDeviceCounters
	fillRandom(rng, reflect.ValueOf(&dc).Elem())
	k.dev[0] = dc
	for i := 1; i <= n; i++ {
		d := inventory.Disk{
			Disk: discovery.Disk{Domain: fmt.Sprintf("vm%d", i), UUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i),
				TargetDevice: "vda", SourceFile: fmt.Sprintf("/var/tmp/fspair-bench.Xq3vR1/d%d.img", i), Source: "static"},
			ImageFormat: "raw", GuestFS: "unknown", GuestFSSource: "image", VirtualSize: 1 << 30,
			HostFS:  hostfs.Mount{FSType: "ext4", MountPoint: "/", Device: "/dev/vda1"},
			Layout:  inventory.Layout{Extents: 0, Apparent: 1 << 30},
			Tracked: true, Slot: uint32(i),
		}
		inv.disks = append(inv.disks, d)
		var c probe.Counters
		fillRandom(rng, reflect.ValueOf(&c).Elem())
		var h bpf.HostImageDeviceCounters
		fillRandom(rng, reflect.ValueOf(&h).Elem())
		k.disk[d.Slot] = c
		k.image[d.Slot] = h
	}
	return inv, k
}

// BenchmarkScrape: the per-disk and per-device families at 10, 100 and 1000
// disks, through client_golang (the collectors, gathered and text-encoded,
// as promhttp did) and written directly, to a discarding writer.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		inv, k := benchFleet(n)
		series := sampleLines(directText(b, inv, k))
		b.Run(fmt.Sprintf("path=client_golang/disks=%d", n), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewExporter(map[string]Collector{"disk": NewDiskCollector(inv, k), "host": NewHostCollector(inv, k)}, nil))
			b.ReportAllocs()
			for b.Loop() {
				mfs, err := reg.Gather()
				if err != nil {
					b.Fatal(err)
				}
				w := bufio.NewWriter(io.Discard)
				for _, mf := range mfs {
					if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
						b.Fatal(err)
					}
				}
				w.Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(series), "ns/series")
		})
		b.Run(fmt.Sprintf("path=direct/disks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var s snapshot
			for b.Loop() {
				w := newTextWriter(io.Discard)
				s.read(inv, k, k)
				writeDirect(w, &s)
				w.flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(series), "ns/series")
		})
		// The protobuf renderer over the same snapshot, per mode; its
		// ns/series is per series of the text (a native histogram is
		// one series where the text writes 27).
		for _, mode := range []Histograms{HistogramsNative, HistogramsBoth} {
			b.Run(fmt.Sprintf("path=direct-proto-%s/disks=%d", mode, n), func(b *testing.B) {
				b.ReportAllocs()
				var s snapshot
				cw := &countingWriter{}
				for b.Loop() {
					cw.n = 0
					w := newProtoWriter(cw, mode)
					s.read(inv, k, k)
					writeDirect(w, &s)
					w.flush()
				}
				b.ReportMetric(float64(cw.n), "bytes")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(series), "ns/series")
			})
		}
		// Compressed as the handler compresses (its gzip, level 1), and
		// with the standard library's at levels 1 and 6 (6 is what the
		// exporter used before).
		for _, c := range []struct {
			name  string
			level int
			new   func(io.Writer, int) (io.WriteCloser, error)
		}{
			{"klauspost", 1, func(w io.Writer, l int) (io.WriteCloser, error) { return kgzip.NewWriterLevel(w, l) }},
			{"stdlib", 1, func(w io.Writer, l int) (io.WriteCloser, error) { return gzip.NewWriterLevel(w, l) }},
			{"stdlib", 6, func(w io.Writer, l int) (io.WriteCloser, error) { return gzip.NewWriterLevel(w, l) }},
		} {
			b.Run(fmt.Sprintf("path=direct+gzip-%s-%d/disks=%d", c.name, c.level, n), func(b *testing.B) {
				b.ReportAllocs()
				var s snapshot
				cw := &countingWriter{}
				for b.Loop() {
					cw.n = 0
					zw, err := c.new(cw, c.level)
					if err != nil {
						b.Fatal(err)
					}
					w := newTextWriter(zw)
					s.read(inv, k, k)
					writeDirect(w, &s)
					w.flush()
					zw.Close()
				}
				b.ReportMetric(float64(cw.n), "gzip-bytes")
				b.ReportMetric(float64(series), "series")
			})
		}
	}
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// TestHandlerQueuesScrapes: scrapers beyond MaxRequestsInFlight wait their
// turn instead of failing; one that cannot get a slot within its timeout
// gets 503.
func TestHandlerQueuesScrapes(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(7, 7)), 5)
	srv := newTestHandlerOpts(t, inv, k, HandlerOpts{MaxRequestsInFlight: 2, MaxWait: 30 * time.Second})
	var wg sync.WaitGroup
	codes := make(chan int, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	n := 0
	for c := range codes {
		n++
		if c != http.StatusOK {
			t.Errorf("a queued scrape got %d, want 200", c)
		}
	}
	if n != 40 {
		t.Errorf("%d of 40 scrapes answered", n)
	}

	// Every slot held: a scrape with a 0.2 s timeout gives up with 503.
	h, err := NewHandler(prometheus.NewRegistry(), inv, k, k, HandlerOpts{MaxRequestsInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	h.inflight <- struct{}{}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "0.2")
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("scrape with every slot held: %d, want 503", rec.Code)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %s, want about the scraper's 0.2 s timeout", d)
	}
}

// batchKernel is fakeKernel read in batches (as probe.Probes is), each
// batch answered last slot first, so that a value given to the wrong row
// shows.
type batchKernel struct{ *fakeKernel }

func (k batchKernel) CountersInto(slots []uint32, got func(i int, c *probe.Counters), failed func(i int, err error)) {
	var c probe.Counters // one buffer for all, as probe.Probes has
	for i := len(slots) - 1; i >= 0; i-- {
		var err error
		if c, err = k.Counters(slots[i]); err != nil {
			failed(i, err)
		} else {
			got(i, &c)
		}
	}
}

func (k batchKernel) ImageDeviceCountersInto(slots []uint32, got func(i int, h *bpf.HostImageDeviceCounters), failed func(i int, err error)) {
	var h bpf.HostImageDeviceCounters
	for i := len(slots) - 1; i >= 0; i-- {
		var err error
		if h, err = k.ImageDeviceCounters(slots[i]); err != nil {
			failed(i, err)
		} else {
			got(i, &h)
		}
	}
}

// TestSnapshotBatchRead: a snapshot read in batches writes what one read
// disk by disk writes, a disk that cannot be read included (it keeps its
// info series, loses its counters, and the error is the scrape's).
func TestSnapshotBatchRead(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(11, 5)), 300)
	k.fail[inv.disks[17].Slot] = true
	k.fail[inv.disks[250].Slot] = true
	inv.disks[17].Tracked, inv.disks[250].Tracked = true, true
	text := func(counters CounterReader, host HostSource) (string, *snapshot) {
		var b bytes.Buffer
		w := newTextWriter(&b)
		s := &snapshot{}
		for range 2 { // a reused snapshot, as the handler's
			s.read(inv, counters, host)
		}
		writeDirect(w, s)
		w.flush()
		if w.err != nil {
			t.Fatal(w.err)
		}
		return b.String(), s
	}
	one, s1 := text(k, k)
	batched, s2 := text(batchKernel{k}, batchKernel{k})
	if one != batched {
		t.Errorf("read in batches, the exposition differs from the one read disk by disk (%d and %d bytes)", len(batched), len(one))
	}
	for _, e := range []struct {
		name string
		a, b error
	}{{"disk", s1.diskErr, s2.diskErr}, {"host", s1.hostErr, s2.hostErr}} {
		if e.a == nil || e.b == nil || e.a.Error() != e.b.Error() {
			t.Errorf("%s side's error: disk by disk %v, in batches %v; want the same, not nil", e.name, e.a, e.b)
		}
	}
	if !strings.Contains(batched, "fspair_disk_requests_total") {
		t.Error("no counters written")
	}
}
