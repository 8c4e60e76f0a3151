package collector

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/inventory"
)

// countedInventory counts the collections made of it: each reads the
// disk list once.
type countedInventory struct {
	HostLister
	reads atomic.Int64
}

func (c *countedInventory) Disks() []inventory.Disk {
	c.reads.Add(1)
	return c.HostLister.Disks()
}

// discardWriter is a ResponseWriter that keeps the headers and counts the
// body, so that a benchmark measures the handler and not a recorder's
// buffer.
type discardWriter struct {
	h    http.Header
	n    int64
	code int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }
func (d *discardWriter) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }

// serve answers req into d, emptied first; false when the status is not
// 200.
func (d *discardWriter) serve(h http.Handler, req *http.Request) bool {
	clear(d.h)
	d.n, d.code = 0, 0
	h.ServeHTTP(d, req)
	return d.code == 0 || d.code == http.StatusOK
}

// BenchmarkHandlerParallel: 200 scrapers at once on the handler, as the
// k6 scrape load of issue 6 runs them (200 virtual users without pause),
// with the registry the exporter serves (Go runtime, process, its own
// collectors) and the in-flight bound at its default (40). ns/op is the
// wall time per answered scrape; collections/op how many counter reads
// and gathers each scrape cost.
func BenchmarkHandlerParallel(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		inv, k := benchFleet(n)
		for _, gz := range []bool{true, false} {
			enc := "plain"
			if gz {
				enc = "gzip"
			}
			b.Run(fmt.Sprintf("disks=%d/%s", n, enc), func(b *testing.B) {
				reg := prometheus.NewRegistry()
				reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
					NewExporter(map[string]Collector{"probe": collectorFunc(func(ch chan<- prometheus.Metric) error {
						ch <- prometheus.MustNewConstMetric(probeAttached, prometheus.GaugeValue, 1, "pread64_enter", "tracepoint/syscalls/sys_enter_pread64")
						return nil
					})}, nil))
				ci := &countedInventory{HostLister: inv}
				h, err := NewHandler(reg, ci, k, k, HandlerOpts{MaxRequestsInFlight: 40, GzipLevel: kgzip.BestSpeed, Registry: reg})
				if err != nil {
					b.Fatal(err)
				}
				var bytes atomic.Int64
				b.ReportAllocs()
				b.SetParallelism((200 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)) // 200 goroutines
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
					if gz {
						req.Header.Set("Accept-Encoding", "gzip")
					}
					w := &discardWriter{h: http.Header{}}
					for pb.Next() {
						if !w.serve(h, req) {
							b.Errorf("status %d", w.code)
						}
						bytes.Add(w.n)
					}
				})
				b.ReportMetric(float64(ci.reads.Load())/float64(b.N), "collections/op")
				b.ReportMetric(float64(bytes.Load())/float64(b.N), "bytes/op")
			})
		}
	}
}

// processCPU is the user and system CPU time the process has used, in
// ns: on a shared host a scrape's CPU varies less than its wall time.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkScrape10k: one protobuf scrape of 10,000 disks (native
// histograms, no gzip), as scripts/bench.sh part 3 times it with
// SCRAPE_DISKS=10000: through the handler, with the registry the exporter
// serves, without guest values (guest=none: no source) and with every
// disk's guest side read over QMP (guest=qmp: typicalGuest, its three
// histograms observed). ns/op is one scrape's wall time, one scraper at a
// time; cpu-ns/op the process's CPU time a scrape (the garbage
// collector's included).
func BenchmarkScrape10k(b *testing.B) {
	const n = 10000
	inv, k := benchFleet(n)
	qmp := fakeGuest{}
	for _, d := range inv.disks {
		st := typicalGuest()
		qmp[d.Domain] = guest.Status{Source: guest.SourceQMP, Status: guest.StatusOK, Histogram: guest.HistogramOK,
			Reading: guest.NewReading(&st, time.UnixMilli(1_764_480_000_000))}
	}
	for _, g := range []struct {
		name string
		src  GuestSource
	}{{"none", nil}, {"qmp", qmp}} {
		b.Run("guest="+g.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			h, err := NewHandler(reg, inv, k, k, HandlerOpts{MaxRequestsInFlight: 40, GzipLevel: kgzip.BestSpeed, Registry: reg,
				Guest: g.src, Histograms: HistogramsNative})
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Accept", string(formats[fmtProto]))
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if !w.serve(h, req) {
					b.Fatalf("status %d", w.code)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(w.n), "bytes")
		})
	}
}
