package collector

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
)

// acceptProm3Native is the Accept header of Prometheus 3 with
// scrape_native_histograms: true (its default scrape_protocols then put
// PrometheusProto first); acceptProm3 the one without, which never asks
// for protobuf.
const (
	acceptProm3Native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6," +
		"application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4," +
		"text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
	acceptProm3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4," +
		"text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)

// decodeProto reads delimited MetricFamily messages, as Prometheus does.
func decodeProto(t testing.TB, b []byte) []*dto.MetricFamily {
	t.Helper()
	dec := expfmt.NewDecoder(bytes.NewReader(b), expfmt.NewFormat(expfmt.TypeProtoDelim))
	var out []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decode protobuf family %d: %v", len(out)+1, err)
		}
		out = append(out, mf)
	}
}

// directProto is the protobuf writer's output for the disks, decoded.
func directProto(t testing.TB, inv *fakeInventory, k *fakeKernel, mode Histograms) []*dto.MetricFamily {
	t.Helper()
	var b bytes.Buffer
	w := newProtoWriter(&b, mode)
	var s snapshot
	s.read(inv, k, k)
	writeDirect(w, &s)
	w.flush()
	if w.err != nil {
		t.Fatal(w.err)
	}
	return decodeProto(t, b.Bytes())
}

func byName(mfs []*dto.MetricFamily) map[string]*dto.MetricFamily {
	m := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		m[mf.GetName()] = mf
	}
	return m
}

// withInfBucket adds the +Inf bucket that protobuf leaves implicit (and
// the text parser reads) to every histogram, so that samples() compares
// them: for the classic and both modes, in which every histogram is
// classic too, even one without a finite bucket.
func withInfBucket(mfs []*dto.MetricFamily) {
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				inf, n := math.Inf(+1), h.GetSampleCount()
				h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: &inf, CumulativeCount: &n})
			}
		}
	}
}

// TestProtoMatchesText: in classic and both modes the protobuf families
// are the text's, family for family (name, help, type), series for series
// (labels, values, classic buckets, sums, counts); in native mode the
// same but for the histograms, which have no classic buckets and the same
// sums and counts.
func TestProtoMatchesText(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(21, 4)), 40)
	textOut := directText(t, inv, k)
	for _, mode := range []Histograms{HistogramsClassic, HistogramsBoth, HistogramsNative} {
		t.Run(mode.String(), func(t *testing.T) {
			mfs := directProto(t, inv, k, mode)
			if got := byName(mfs); len(got) != len(mfs) {
				t.Errorf("%d families in %d messages: a family is split", len(got), len(mfs))
			}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					h := m.GetHistogram()
					if h == nil {
						continue
					}
					// Classic buckets in the classic and both modes are
					// compared with the text's below (a classic
					// histogram may have none: stage="file",
					// inter-arrival time); the native mode has none.
					if len(h.GetBucket()) > 0 && !mode.classic() {
						t.Fatalf("%s in mode %s: classic buckets", mf.GetName(), mode)
					}
					if native := h.Schema != nil; native != mode.native() {
						t.Fatalf("%s in mode %s: native histogram %v", mf.GetName(), mode, native)
					}
				}
			}
			if mode.classic() {
				withInfBucket(mfs)
			}
			text := parseText(t, textOut)
			if mode == HistogramsNative {
				// Of the histograms only the sums and counts compare.
				text = withoutBuckets(text)
			}
			sameFamilies(t, "in protobuf", byName(mfs), "in the text", text)
		})
	}
}

// withoutBuckets drops the classic buckets of every histogram.
func withoutBuckets(fams map[string]*dto.MetricFamily) map[string]*dto.MetricFamily {
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				h.Bucket = nil
			}
		}
	}
	return fams
}

// nativeBuckets expands a native histogram into its buckets: upper bound
// (negative for the negative buckets, mirrored: the one nearest zero) to
// count, the zero bucket at 0.
func nativeBuckets(t *testing.T, h *dto.Histogram) map[float64]uint64 {
	t.Helper()
	l := nativeLayout{schema: h.GetSchema()}
	out := map[float64]uint64{}
	if h.GetZeroCount() > 0 {
		out[0] = h.GetZeroCount()
	}
	expand := func(spans []*dto.BucketSpan, deltas []int64, sign float64) {
		var idx int32
		var c int64
		d := 0
		for i, s := range spans {
			if i == 0 {
				idx = s.GetOffset()
			} else {
				idx += s.GetOffset()
			}
			for j := uint32(0); j < s.GetLength(); j++ {
				if d >= len(deltas) {
					t.Fatalf("spans cover more buckets than %d deltas", len(deltas))
				}
				c += deltas[d]
				d++
				if c < 0 {
					t.Fatalf("bucket %d: count %d", idx, c)
				}
				if c > 0 {
					out[sign*l.bucketBound(idx)] = uint64(c)
				}
				idx++
			}
		}
		if d != len(deltas) {
			t.Fatalf("%d deltas for %d buckets", len(deltas), d)
		}
	}
	expand(h.GetNegativeSpan(), h.GetNegativeDelta(), -1)
	expand(h.GetPositiveSpan(), h.GetPositiveDelta(), +1)
	return out
}

// documentedBucket is where disk.go says a classic bucket (by its upper
// bound le) goes in the native histogram, by the family's unit: the upper
// bound of its native bucket as nativeBuckets keys it. Written from the
// comment, not from the layout tables, so that a table that strays from
// the comment fails.
func documentedBucket(family string, le float64) float64 {
	const toNative = 0x1p-20 / 1e-6 // latency: 2^(k-20) for 1e-6*2^k
	switch {
	case strings.HasSuffix(family, "_seconds"):
		switch {
		case math.IsInf(le, +1):
			return 16
		case le == 1e-6:
			return 0
		}
		return le * toNative
	case family == "fspair_disk_request_size_bytes":
		switch {
		case math.IsInf(le, +1):
			return 16 << 20
		case le == 512:
			return 0
		}
		return le
	case family == "fspair_disk_outstanding_requests":
		if math.IsInf(le, +1) {
			return 512
		}
		return le
	case family == "fspair_disk_seek_distance_bytes":
		switch {
		case math.IsInf(le, +1):
			return 1 << 38 // 4^19
		case le == -1 || le == 0 || le == 4096:
			return 0
		case le < 0:
			return 4 * le // d in (4le, le]: the negative bucket of magnitude up to 4|le|
		}
		return le
	}
	return math.NaN()
}

// TestNativeBuckets: every native histogram of a random fleet holds the
// kernel's counts where disk.go says: its buckets add up to its count
// (zero bucket included), and each is the sum of the classic slots the
// layout documents for it; boundaries sit at powers of the schema's base.
func TestNativeBuckets(t *testing.T) {
	withEveryClassicBucket(t)
	inv, k := randomFleet(rand.New(rand.NewPCG(5, 17)), 30)
	classic := byName(directProto(t, inv, k, HistogramsClassic))
	native := directProto(t, inv, k, HistogramsNative)
	seen := map[string]int{}
	for _, mf := range native {
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		cm := classic[mf.GetName()].GetMetric()
		for i, m := range mf.GetMetric() {
			h, ch := m.GetHistogram(), cm[i].GetHistogram()
			if !slices.EqualFunc(m.GetLabel(), cm[i].GetLabel(), func(a, b *dto.LabelPair) bool { return a.GetName() == b.GetName() && a.GetValue() == b.GetValue() }) {
				t.Fatalf("%s series %d: labels differ between modes", mf.GetName(), i)
			}
			got := nativeBuckets(t, h)
			var total uint64
			for _, c := range got {
				total += c
			}
			if total != h.GetSampleCount() || h.GetSampleCount() != ch.GetSampleCount() || h.GetSampleSum() != ch.GetSampleSum() {
				t.Errorf("%s series %d: buckets add up to %d, count %d, sum %v; classic count %d, sum %v",
					mf.GetName(), i, total, h.GetSampleCount(), h.GetSampleSum(), ch.GetSampleCount(), ch.GetSampleSum())
			}
			want := map[float64]uint64{}
			var prev uint64
			for _, b := range append(ch.GetBucket(), &dto.Bucket{UpperBound: proto64(math.Inf(+1)), CumulativeCount: proto64u(ch.GetSampleCount())}) {
				if n := b.GetCumulativeCount() - prev; n > 0 {
					want[documentedBucket(mf.GetName(), b.GetUpperBound())] += n
				}
				prev = b.GetCumulativeCount()
			}
			if !mapsEqual(got, want) {
				t.Errorf("%s series %d: native buckets\n%v\nwant (documented layout)\n%v", mf.GetName(), i, sortedBuckets(got), sortedBuckets(want))
			}
			if zt := h.GetZeroThreshold(); got[0] > 0 && zt <= 0 {
				t.Errorf("%s: zero bucket of threshold %v holds %d", mf.GetName(), zt, got[0])
			}
			seen[mf.GetName()]++
		}
	}
	for _, name := range []string{"fspair_disk_request_duration_seconds", "fspair_disk_stage_seconds", "fspair_disk_interarrival_seconds",
		"fspair_disk_request_size_bytes", "fspair_disk_outstanding_requests", "fspair_disk_seek_distance_bytes",
		"fspair_host_device_service_seconds", "fspair_host_device_queue_seconds"} {
		if seen[name] == 0 {
			t.Errorf("no native histogram of %s checked", name)
		}
	}
}

// withEveryClassicBucket makes the classic histograms keep every kernel
// slot's bound until the test ends, so that a test can compare native
// buckets with the slots one by one.
func withEveryClassicBucket(t *testing.T) {
	shapes := []*shape{&latencyShape, &stageShape, &unbucketedLatencyShape, &interarrivalShape, &sizeShape, &outstandingShape, &seekShape}
	saved := make([][]bool, len(shapes))
	for i, sh := range shapes {
		saved[i] = sh.keep
		sh.keep = keepIf(len(sh.bounds), func(int) bool { return true })
	}
	fams := directFamilies
	directFamilies = newDirectFamilies()
	t.Cleanup(func() {
		for i, sh := range shapes {
			sh.keep = saved[i]
		}
		directFamilies = fams
	})
}

// classicBuckets is the number of classic buckets of sh, +Inf included.
func classicBuckets(sh shape) int {
	n := 1
	for _, k := range sh.keep {
		if k {
			n++
		}
	}
	return n
}

// TestClassicLayouts: the classic buckets are the documented ones (disk.go)
// and every one is a kernel slot's bound, so that each is exact.
func TestClassicLayouts(t *testing.T) {
	kept := func(sh shape) []float64 {
		var b []float64
		for i, k := range sh.keep {
			if k {
				b = append(b, sh.bounds[i])
			}
		}
		return b
	}
	pow2 := func(unit float64, exps ...int) []float64 {
		var b []float64
		for _, e := range exps {
			b = append(b, unit*math.Ldexp(1, e))
		}
		return b
	}
	const G = 1 << 30
	for _, c := range []struct {
		name string
		sh   shape
		want []float64
	}{
		{"request latency, every 4x from 2 us", latencyShape, pow2(1e-6, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23)},
		{"host stages, every 8x from 4 us", stageShape, pow2(1e-6, 2, 5, 8, 11, 14, 17, 20, 23)},
		{"stage file, none", unbucketedLatencyShape, nil},
		{"inter-arrival, none", interarrivalShape, nil},
		{"sizes, every 4x from 1 KiB to 4 MiB", sizeShape, pow2(1, 10, 12, 14, 16, 18, 20, 22)},
		{"outstanding, every 4x", outstandingShape, []float64{1, 4, 16, 64, 256}},
		{"seek, every 64x", seekShape, []float64{-64 * G, -1 * G, -16 << 20, -256 << 10, -4096, -1, 0, 4096, 256 << 10, 16 << 20, 1 * G, 64 * G}},
	} {
		if got := kept(c.sh); !slices.Equal(got, c.want) {
			t.Errorf("%s: classic bounds %v, want %v", c.name, got, c.want)
		}
		if len(c.sh.keep) != len(c.sh.bounds) {
			t.Errorf("%s: %d keep flags for %d slots' bounds", c.name, len(c.sh.keep), len(c.sh.bounds))
		}
	}
}

// TestNativeZeroThresholds: the zero thresholds are the documented ones.
func TestNativeZeroThresholds(t *testing.T) {
	for _, c := range []struct {
		name   string
		l      *nativeLayout
		schema int32
		zt     float64
	}{
		{"latency", latencyShape.native, 0, 0x1p-20},
		{"size", sizeShape.native, 0, 512},
		{"outstanding", outstandingShape.native, 0, 0},
		{"seek", seekShape.native, -1, 4096},
	} {
		if c.l.schema != c.schema || c.l.zeroThreshold != c.zt {
			t.Errorf("%s: schema %d, zero threshold %v; want %d, %v", c.name, c.l.schema, c.l.zeroThreshold, c.schema, c.zt)
		}
		n := len(c.l.zero) + len(c.l.pos) + len(c.l.neg)
		slots := map[int]bool{}
		for _, s := range c.l.zero {
			slots[s] = true
		}
		for _, o := range append(slices.Clone(c.l.pos), c.l.neg...) {
			slots[o.slot] = true
		}
		if len(slots) != n {
			t.Errorf("%s: a slot is placed twice", c.name)
		}
	}
	if got := len(latencyShape.native.zero) + len(latencyShape.native.pos); got != len(latencyBounds)+1 {
		t.Errorf("latency layout places %d slots, want %d", got, len(latencyBounds)+1)
	}
	if got := len(seekShape.native.zero) + len(seekShape.native.pos) + len(seekShape.native.neg); got != len(seekBounds)+1 {
		t.Errorf("seek layout places %d slots, want %d", got, len(seekBounds)+1)
	}
}

func proto64(v float64) *float64 { return &v }
func proto64u(v uint64) *uint64  { return &v }

func mapsEqual(a, b map[float64]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sortedBuckets(m map[float64]uint64) string {
	var ks []float64
	for k := range m {
		ks = append(ks, k)
	}
	sort.Float64s(ks)
	var b strings.Builder
	for _, k := range ks {
		b.WriteString(strconv.FormatFloat(k, 'g', 6, 64) + ":" + strconv.FormatUint(m[k], 10) + " ")
	}
	return b.String()
}

// TestNegotiation: the handler answers text unless the Accept header ranks
// delimited protobuf first, compressed or not as Accept-Encoding says;
// the protobuf answer carries the registry's families too (the exporter's
// own metrics) and native histograms in the default mode.
func TestNegotiation(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(3, 9)), 8)
	srv := newTestHandlerOpts(t, inv, k, HandlerOpts{GzipLevel: kgzip.BestSpeed, Histograms: HistogramsNative})
	textCT, protoCT := string(formats[fmtText]), string(formats[fmtProto])
	for _, c := range []struct {
		name, accept string
		want         string
	}{
		{"none", "", textCT},
		{"prometheus 3", acceptProm3, textCT},
		{"prometheus 3 native", acceptProm3Native, protoCT},
		{"protobuf only", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", protoCT},
		{"protobuf below text", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.1,text/plain;version=0.0.4;q=0.9", textCT},
		{"protobuf text encoding", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text", textCT},
	} {
		for _, gz := range []bool{false, true} {
			r := fetchAs(srv.URL, gz, c.accept)
			if r.err != nil || r.code != http.StatusOK {
				t.Fatalf("%s, gzip %v: %v, status %d", c.name, gz, r.err, r.code)
			}
			if r.contentType != c.want {
				t.Errorf("%s, gzip %v: Content-Type %q, want %q", c.name, gz, r.contentType, c.want)
			}
			if gotGz := r.encoding == "gzip"; gotGz != gz {
				t.Errorf("%s, gzip %v: Content-Encoding %q", c.name, gz, r.encoding)
			}
			var fams map[string]*dto.MetricFamily
			if c.want == protoCT {
				fams = byName(decodeProto(t, []byte(r.text)))
				h := fams["fspair_disk_request_duration_seconds"].GetMetric()[0].GetHistogram()
				if h.Schema == nil || len(h.GetBucket()) > 0 {
					t.Errorf("%s: histogram not native only: %v", c.name, h)
				}
			} else {
				fams = parseText(t, r.text)
			}
			for _, name := range []string{"fspair_disk_info", "fspair_scrape_collector_success", "promhttp_metric_handler_errors_total", "fspair_probe_attached"} {
				if fams[name] == nil {
					t.Errorf("%s, gzip %v: no %s", c.name, gz, name)
				}
			}
		}
	}
}

// TestHandlerSharesCollectionAcrossFormats: text and protobuf scrapes that
// arrive together share one collection, and each format's gzip scrapes
// one compressed body.
func TestHandlerSharesCollectionAcrossFormats(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(8, 1)), 10)
	reg := prometheus.NewRegistry()
	gh := newGatedHandler(t, reg, inv, k, HandlerOpts{GzipLevel: kgzip.BestSpeed, Registry: reg, Histograms: HistogramsBoth})
	const n = 16
	accept := func(i int) string {
		if i%4 >= 2 {
			return acceptProm3Native
		}
		return ""
	}
	res := gh.burstWith(t, n, func(i int) scrapeResult { return fetchAs(gh.srv.URL, i%2 == 0, accept(i)) })
	if c := gh.collections.Load(); c != 1 {
		t.Errorf("%d scrapes at once made %d collections, want 1", n, c)
	}
	for i, r := range res {
		ref := res[i%4]
		if r.text != ref.text {
			t.Errorf("scrape %d: body differs from scrape %d's, of the same format", i, i%4)
		}
		if i%2 == 0 && !bytes.Equal(r.raw, ref.raw) {
			t.Errorf("scrape %d: compressed body differs from scrape %d's; the format's compressed body is shared", i, i%4)
		}
	}
	if res[0].text != res[1].text || res[2].text != res[3].text || res[0].text == res[2].text {
		t.Error("the two formats' bodies are not each the same compressed or not, or are the same")
	}
	fams := byName(decodeProto(t, []byte(res[3].text)))
	if got := len(fams["fspair_disk_info"].GetMetric()); got != len(inv.disks) {
		t.Errorf("protobuf: %d fspair_disk_info series, want %d", got, len(inv.disks))
	}
}

func TestParseHistograms(t *testing.T) {
	for _, s := range []string{"classic", "native", "both"} {
		h, err := ParseHistograms(s)
		if err != nil || h.String() != s {
			t.Errorf("ParseHistograms(%q) = %v, %v", s, h, err)
		}
	}
	if _, err := ParseHistograms("nativ"); err == nil || !strings.Contains(err.Error(), "want classic, native or both") {
		t.Errorf("ParseHistograms(nativ): %v", err)
	}
	if _, err := NewHandler(prometheus.NewRegistry(), &fakeInventory{}, nil, nil, HandlerOpts{Histograms: 7}); err == nil {
		t.Error("NewHandler took histograms mode 7")
	}
}

// TestSeriesPerDisk is the series budget of one disk (ext4 host, host-side
// counters read), by family, as Prometheus stores them: a text scrape's
// samples, a protobuf scrape's metrics in native mode (one series a
// histogram). Three disks: a typical active one (raw image, aio=native,
// cache=none; reads, writes and flushes, never a discard, no request
// failed) without guest values (fspair_disk_guest_info alone: the bench's
// static disks), the same with its guest side read over QMP (typicalGuest:
// TestGuestSeriesPerDisk has its families), and the worst case (qcow2, aio
// and cache unknown, every operation done, every histogram observed, no
// guest values). The budget: 60 in native mode, with the guest side or
// without; 200 in classic mode without it. README.md has the totals; a
// change to them is a change to the budget, to be made there too.
func TestSeriesPerDisk(t *testing.T) {
	fill := func(slots []uint64) {
		for i := range slots {
			slots[i] = 1
		}
	}
	typical := func(d *inventory.Disk, c *probe.Counters) {
		d.ImageFormat, d.AIO, d.Cache = "raw", "native", "none"
		for _, op := range []string{"read", "write", "flush"} {
			j := slices.Index(opNames, op)
			c.Requests[j] = 1
			fill(c.Latency[j][:])
		}
		fill(c.Bytes[:len(dirNames)])
		for i := range c.Size {
			fill(c.Size[i][:])
		}
		fill(c.SeekPrev[:])
		fill(c.SeekNear[:])
		fill(c.Outstanding[:])
		fill(c.Interarrival[:])
		fill(c.Sequential[:])
		fill(c.Random[:])
		fill(c.SyncWrites[:])
		// Reads and writes by linux-aio, flushes by QEMU's thread pool.
		c.Submissions[slices.Index(ifaceNames, "syscall")] = 1
		c.Submissions[slices.Index(ifaceNames, "linux_aio")] = 1
		// cache=none: the host page cache is bypassed.
		direct := slices.Index(cacheReadResults, "direct")
		c.CacheReads[direct], c.CacheReadBytes[direct], c.CacheWriteBytes[direct] = 1, 1, 1
	}
	worst := func(d *inventory.Disk, c *probe.Counters) {
		d.ImageFormat, d.AIO, d.Cache = "qcow2", "", ""
		ones(reflect.ValueOf(c).Elem())
		c.Bytes[slices.Index(opNames, "flush")] = 0 // the kernel counts none
	}
	tc, tn := seriesPerDisk(t, typical, nil)
	wc, wn := seriesPerDisk(t, worst, nil)
	g := typicalGuest()
	gc, gn := seriesPerDisk(t, typical, &g)

	var names []string
	for _, m := range []map[string]int{wc, tc, gc} {
		for n := range m {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	var tct, tnt, gct, gnt, wct, wnt int
	var table strings.Builder
	fmt.Fprintf(&table, "| family | typical, classic | typical, native | typical with guest side, classic | typical with guest side, native | worst case, classic | worst case, native |\n")
	for _, n := range names {
		fmt.Fprintf(&table, "| %s | %d | %d | %d | %d | %d | %d |\n", n, tc[n], tn[n], gc[n], gn[n], wc[n], wn[n])
		tct, tnt, gct, gnt, wct, wnt = tct+tc[n], tnt+tn[n], gct+gc[n], gnt+gn[n], wct+wc[n], wnt+wn[n]
	}
	fmt.Fprintf(&table, "| total | %d | %d | %d | %d | %d | %d |\n", tct, tnt, gct, gnt, wct, wnt)
	t.Logf("series per disk, classic (text) and native (protobuf):\n%s", table.String())
	const budget = 60 // series per active disk in native mode, with its guest side or without
	if tnt > budget || gnt > budget {
		t.Errorf("%d series for a typical disk in native mode, %d with its guest side: over the budget of %d", tnt, gnt, budget)
	}
	const classicBudget = 200 // without the guest side
	if tct > classicBudget {
		t.Errorf("%d series for a typical disk in classic mode, over the budget of %d", tct, classicBudget)
	}
	if tct != 191 || tnt != 50 || gct != 242 || gnt != 59 || wct != 260 || wnt != 77 {
		t.Errorf("series per disk, classic and native: typical %d and %d, with its guest side %d and %d, worst case %d and %d; "+
			"README.md says 191 and 50, 242 and 59, 260 and 77", tct, tnt, gct, gnt, wct, wnt)
	}
}

// seriesPerDisk counts the series of one disk, by family, in a text
// scrape (classic) and a protobuf scrape in native mode. set gives the
// disk its configuration and counters, from zero; the host-side counters
// are random but for the host-side histograms, all observed. g is its
// guest side, read over QMP; nil, none.
func seriesPerDisk(t *testing.T, set func(d *inventory.Disk, c *probe.Counters), g *guest.Stats) (classic, native map[string]int) {
	inv, k := randomFleet(rand.New(rand.NewPCG(1, 1)), 1)
	d := &inv.disks[0]
	d.Tracked, d.VirtualSize, d.HostFS.FSType = true, 1<<30, "ext4"
	d.Layout.Extents = 1
	var c probe.Counters
	set(d, &c)
	k.disk[d.Slot] = c
	h := k.image[d.Slot]
	for i := range h.Queue {
		ones(reflect.ValueOf(&h.Queue[i]).Elem())
		ones(reflect.ValueOf(&h.Service[i]).Elem())
	}
	k.image[d.Slot] = h
	inv.devices = nil // the per-device families are per host device, not per disk

	var s snapshot
	s.read(inv, k, k)
	src := fakeGuest{} // no guest values: fspair_disk_guest_info alone, as in the bench
	if g != nil {
		src[d.Domain] = guest.Status{Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramOK,
			Reading: guest.NewReading(g, time.Time{})}
	}
	s.readGuest(src)
	var b bytes.Buffer
	tw := newTextWriter(&b)
	writeDirect(tw, &s)
	tw.flush()
	classic = map[string]int{}
	for _, line := range strings.Split(b.String(), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			name := line[:strings.IndexAny(line, "{ ")]
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base := strings.TrimSuffix(name, suffix); base != name && text0(t, b.String(), base) {
					name = base
				}
			}
			classic[name]++
		}
	}
	b.Reset()
	pw := newProtoWriter(&b, HistogramsNative)
	writeDirect(pw, &s)
	pw.flush()
	native = map[string]int{}
	for _, mf := range decodeProto(t, b.Bytes()) {
		native[mf.GetName()] = len(mf.GetMetric())
	}
	return classic, native
}

// ones sets every integer of a generated counter struct to 1.
func ones(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).Name != "_" {
				ones(v.Field(i))
			}
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			ones(v.Index(i))
		}
	case reflect.Uint64:
		v.SetUint(1)
	case reflect.Int64:
		v.SetInt(1)
	default:
		panic("ones: unexpected field kind " + v.Kind().String())
	}
}

// text0 says whether base is a histogram family of the exposition.
func text0(t *testing.T, text, base string) bool {
	return strings.Contains(text, "# TYPE "+base+" histogram\n")
}
