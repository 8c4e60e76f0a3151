package collector

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

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
						clear(w.h)
						w.n, w.code = 0, 0
						h.ServeHTTP(w, req)
						if w.code != 0 && w.code != http.StatusOK {
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
