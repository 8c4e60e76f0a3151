package collector

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
	"github.com/fspair/fspair/tests/alerting"
)

// growingKernel is one disk whose histograms take the same observations
// again at every reading: every count is n times the first reading's, so
// that rates are positive and the shape of each histogram (what a
// quantile or a bucket's share reads) stays the same whenever Prometheus
// scraped.
type growingKernel struct{ n atomic.Uint64 }

func (g *growingKernel) Counters(uint32) (probe.Counters, error) {
	n := g.n.Add(1)
	var c probe.Counters
	c.Requests[0] = 10 * n
	// Reads: 3 of 1 us or less, 5 in (512 us, 1.024 ms], 2 above 8.4 s.
	c.Latency[0][0], c.Latency[0][10], c.Latency[0][24] = 3*n, 5*n, 2*n
	c.LatencySumNs[0] = 21_000_000_000 * n
	// Read sizes: 1 of 512 bytes or less, 4 in (2, 4] KiB.
	c.Size[0][0], c.Size[0][3] = n, 4*n
	c.SizeSum[0] = 16_896 * n
	// Seeks: 2 back by [4, 16) KiB, 5 sequential, 3 forward by
	// (1, 4] MiB, 1 beyond 64 GiB.
	c.SeekPrev[12], c.SeekPrev[14], c.SeekPrev[20], c.SeekPrev[28] = 2*n, 5*n, 3*n, n
	c.SeekPrevSum = int64(n) * (1 << 37)
	// Outstanding: 6 alone, 4 with 3 or 4 in flight.
	c.Outstanding[0], c.Outstanding[2] = 6*n, 4*n
	c.OutstandingSum = 22 * n
	return c, nil
}

// promBucket is one bucket of a native histogram as the query API gives
// it, the count as a share of the histogram's count.
type promBucket struct{ lower, upper, share float64 }

// TestPrometheusReadsNativeHistograms: the pinned Prometheus 3, scraping a
// handler in native mode with scrape_native_histograms (so it asks for
// protobuf, compressed), stores native histograms with the buckets
// disk.go documents, reads them with histogram_count(rate()) and
// histogram_quantile, and stores no classic series of them.
func TestPrometheusReadsNativeHistograms(t *testing.T) {
	ctx, base, protoScrapes := promScraping(t, HistogramsNative, "scrape_native_histograms: true")

	// Three scrapes make a rate over the last 10 s.
	rate := `histogram_count(rate(fspair_disk_request_duration_seconds{op="read"}[10s]))`
	for {
		v, err := alerting.Query(ctx, base, rate)
		if err == nil && len(v) == 1 && v[0].Value > 0 && protoScrapes.Load() >= 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v, %v after %d protobuf scrapes", rate, v, err, protoScrapes.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// histogram_quantile interpolates inside the native bucket that holds
	// the median: (2^-11, 2^-10] s, the classic bucket le=0.001024 less
	// 4.6% (disk.go).
	q := `histogram_quantile(0.5, rate(fspair_disk_request_duration_seconds{op="read"}[10s]))`
	v, err := alerting.Query(ctx, base, q)
	if err != nil || len(v) != 1 || !(v[0].Value > 0x1p-11 && v[0].Value <= 0x1p-10) {
		t.Errorf("%s = %v, %v; want in (2^-11, 2^-10]", q, v, err)
	}
	// A ratio of count to sum is the first reading's whatever the scrape.
	q = `histogram_sum(fspair_disk_request_duration_seconds{op="read"}) / histogram_count(fspair_disk_request_duration_seconds{op="read"})`
	if v, err := alerting.Query(ctx, base, q); err != nil || len(v) != 1 || math.Abs(v[0].Value-2.1) > 1e-9 {
		t.Errorf("%s = %v, %v; want 2.1", q, v, err)
	}
	q = `count({__name__=~"fspair_disk_.*_(bucket|sum|count)"})`
	if v, err := alerting.Query(ctx, base, q); err != nil || len(v) != 0 {
		t.Errorf("%s = %v, %v; want no classic series", q, v, err)
	}
	q = `fspair_disk_requests_total{op="read"}`
	if v, err := alerting.Query(ctx, base, q); err != nil || len(v) != 1 || v[0].Value <= 0 {
		t.Errorf("%s = %v, %v; want a counter", q, v, err)
	}

	const zl = 0x1p-20
	for _, c := range []struct {
		sel  string
		want []promBucket
	}{
		{`fspair_disk_request_duration_seconds{op="read"}`, []promBucket{{-zl, zl, 0.3}, {0x1p-11, 0x1p-10, 0.5}, {8, 16, 0.2}}},
		{`fspair_disk_request_size_bytes{op="read"}`, []promBucket{{-512, 512, 0.2}, {2048, 4096, 0.8}}},
		{`fspair_disk_seek_distance_bytes{reference="previous"}`, []promBucket{
			{-16384, -4096, 2.0 / 11}, {-4096, 4096, 5.0 / 11}, {1 << 20, 1 << 22, 3.0 / 11}, {1 << 36, 1 << 38, 1.0 / 11}}},
		{`fspair_disk_outstanding_requests`, []promBucket{{0.5, 1, 0.6}, {2, 4, 0.4}}},
	} {
		got, err := queryBuckets(ctx, base, c.sel)
		if err != nil {
			t.Errorf("%s: %v", c.sel, err)
			continue
		}
		if !bucketsMatch(got, c.want) {
			t.Errorf("%s: Prometheus reads buckets %v, want %v", c.sel, got, c.want)
		}
	}
}

// TestPrometheusProtobufWithoutNative is the case --histograms=native
// does not suit: a Prometheus that asks for protobuf (scrape_protocols)
// without ingesting native histograms keeps of a native-only histogram
// its count and sum, and no bucket but +Inf.
func TestPrometheusProtobufWithoutNative(t *testing.T) {
	ctx, base, protoScrapes := promScraping(t, HistogramsNative, "scrape_protocols: [PrometheusProto]")
	q := `fspair_disk_request_duration_seconds_count{op="read"}`
	for {
		v, err := alerting.Query(ctx, base, q)
		if err == nil && len(v) == 1 && protoScrapes.Load() >= 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v, %v after %d protobuf scrapes", q, v, err, protoScrapes.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	q = `fspair_disk_request_duration_seconds_bucket{op="read"}`
	v, err := alerting.Query(ctx, base, q)
	if err != nil || len(v) != 1 || v[0].Labels["le"] != "+Inf" {
		t.Errorf("%s = %v, %v; want the +Inf bucket alone", q, v, err)
	}
	q = `fspair_disk_request_duration_seconds{op="read"}`
	if v, err := alerting.Query(ctx, base, q); err != nil || len(v) != 0 {
		t.Errorf("%s = %v, %v; want no native histogram", q, v, err)
	}
}

// TestPrometheusReadsBoth: in both mode, a Prometheus that keeps classic
// histograms too (always_scrape_classic_histograms) has each histogram
// twice from one protobuf scrape: the native one and the classic series,
// with the same count.
func TestPrometheusReadsBoth(t *testing.T) {
	ctx, base, protoScrapes := promScraping(t, HistogramsBoth, "scrape_native_histograms: true\n    always_scrape_classic_histograms: true")
	q := `histogram_count(fspair_disk_request_duration_seconds{op="read"}) - on() fspair_disk_request_duration_seconds_count{op="read"}`
	for {
		v, err := alerting.Query(ctx, base, q)
		if err == nil && len(v) == 1 && protoScrapes.Load() >= 2 {
			if v[0].Value != 0 {
				t.Errorf("%s = %v: native and classic counts differ", q, v[0].Value)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v, %v after %d protobuf scrapes", q, v, err, protoScrapes.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	q = `fspair_disk_request_duration_seconds_bucket{op="read"}`
	if v, err := alerting.Query(ctx, base, q); err != nil || len(v) != classicBuckets(latencyShape) {
		t.Errorf("%s: %d series, %v; want %d", q, len(v), err, classicBuckets(latencyShape))
	}
}

// promScraping starts the pinned Prometheus scraping, every second, a
// handler in mode over one disk of growingKernel, with job settings
// jobExtra; it returns a context for the test's queries, the Prometheus
// URL and the count of protobuf scrapes served.
func promScraping(t *testing.T, mode Histograms, jobExtra string) (context.Context, string, *atomic.Int64) {
	t.Helper()
	bin, err := alerting.PinnedBinary("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	inv := &fakeInventory{disks: []inventory.Disk{{
		Disk:    discovery.Disk{Domain: "vm1", UUID: "u1", TargetDevice: "vda", SourceFile: "/srv/vm1.img", Source: "static"},
		Tracked: true,
	}}}
	h, err := NewHandler(prometheus.NewRegistry(), inv, &growingKernel{}, nil,
		HandlerOpts{GzipLevel: kgzip.BestSpeed, Histograms: mode})
	if err != nil {
		t.Fatal(err)
	}
	protoScrapes := &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if negotiate(r.Header) == fmtProto && acceptsGzip(r.Header.Get("Accept-Encoding")) {
			protoScrapes.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	target, _ := url.Parse(srv.URL)
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: fspair
    %s
    static_configs: [{targets: [%q]}]
`, jobExtra, target.Host)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, err := alerting.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	d, err := alerting.StartDaemon("prometheus", bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("Prometheus' log:\n%s", d.Log())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	base := "http://" + addr
	if err := d.WaitReady(ctx, base+"/-/ready"); err != nil {
		t.Fatal(err)
	}
	return ctx, base, protoScrapes
}

// queryBuckets reads the one native histogram sel selects from the query
// API: its buckets, counts as shares of its count, lowest first.
func queryBuckets(ctx context.Context, base, sel string) ([]promBucket, error) {
	var resp struct {
		Data struct {
			Result []struct {
				Histogram [2]any `json:"histogram"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := alerting.GetJSON(ctx, base+"/api/v1/query?query="+url.QueryEscape(sel), &resp); err != nil {
		return nil, err
	}
	if len(resp.Data.Result) != 1 {
		return nil, fmt.Errorf("%d results, want 1", len(resp.Data.Result))
	}
	h, ok := resp.Data.Result[0].Histogram[1].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no native histogram: %v", resp.Data.Result[0])
	}
	count, err := strconv.ParseFloat(fmt.Sprint(h["count"]), 64)
	if err != nil || count <= 0 {
		return nil, fmt.Errorf("count %v: %v", h["count"], err)
	}
	var out []promBucket
	for _, b := range h["buckets"].([]any) {
		f := b.([]any)
		var v [3]float64
		for i := range v {
			if v[i], err = strconv.ParseFloat(fmt.Sprint(f[i+1]), 64); err != nil {
				return nil, fmt.Errorf("bucket %v: %w", f, err)
			}
		}
		out = append(out, promBucket{v[0], v[1], v[2] / count})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lower < out[j].lower })
	return out, nil
}

func bucketsMatch(got, want []promBucket) bool {
	if len(got) != len(want) {
		return false
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	for i := range got {
		if !near(got[i].lower, want[i].lower) || !near(got[i].upper, want[i].upper) || !near(got[i].share, want[i].share) {
			return false
		}
	}
	return true
}
