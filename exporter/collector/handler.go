package collector

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// HandlerOpts configure the metrics handler.
type HandlerOpts struct {
	Logger *slog.Logger
	// MaxRequestsInFlight bounds concurrent scrapes (0: no bound). A scrape
	// beyond it waits for a slot, up to MaxWait or the scraper's own
	// timeout (Prometheus sends it as X-Prometheus-Scrape-Timeout-Seconds),
	// whichever is shorter, then gets 503: the bound caps memory, and a
	// burst of scrapers (load tests, several Prometheus servers) is served
	// in turn instead of refused.
	MaxRequestsInFlight int
	// MaxWait is how long a scrape may wait for a slot (default 10 s,
	// Prometheus' default scrape timeout).
	MaxWait time.Duration
	// Registry, if set, gets promhttp_metric_handler_errors_total{cause},
	// the count of failed gathers and writes, under the name the exporter
	// served it by before.
	Registry prometheus.Registerer
	// GzipLevel is the compression level when the scraper accepts gzip
	// (Prometheus does): 1 (gzip.BestSpeed) to 9, or 0
	// (gzip.NoCompression) to answer uncompressed always. The compressor
	// is github.com/klauspost/compress's: at level 1 it compressed the
	// bench's exposition of a thousand disks (100 MB) in 44 ms where
	// compress/gzip took 95 ms, to the same size (37:1 and 35:1).
	GzipLevel int
}

// Handler serves the exposition: the registry's families (the exporter's
// own metrics, the Go runtime, the process), then the per-disk and
// per-host-device families written straight from the kernel counters
// (exposition.go). The response is the text format 0.0.4 whatever the
// scraper prefers: the protocol lets it name preferences, and every
// Prometheus reads text.
type Handler struct {
	gatherer prometheus.Gatherer
	inv      HostLister
	counters CounterReader
	host     HostSource
	opts     HandlerOpts
	logger   *slog.Logger
	inflight chan struct{}
	errs     *prometheus.CounterVec

	snapshots sync.Pool // *snapshot, so that the rows are not allocated again each scrape
	gzips     sync.Pool // *gzip.Writer
}

// NewHandler returns the metrics handler over the registry g and the disks
// and host devices of inv, whose counters it reads from counters and host.
func NewHandler(g prometheus.Gatherer, inv HostLister, counters CounterReader, host HostSource, opts HandlerOpts) (*Handler, error) {
	if opts.GzipLevel < gzip.NoCompression || opts.GzipLevel > gzip.BestCompression {
		return nil, fmt.Errorf("gzip level %d: want %d (never compress) to %d", opts.GzipLevel, gzip.NoCompression, gzip.BestCompression)
	}
	h := &Handler{gatherer: g, inv: inv, counters: counters, host: host, opts: opts, logger: opts.Logger}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxRequestsInFlight > 0 {
		h.inflight = make(chan struct{}, opts.MaxRequestsInFlight)
	}
	h.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promhttp_metric_handler_errors_total",
		Help: "Total number of internal errors encountered by the promhttp metric handler.",
	}, []string{"cause"})
	h.errs.WithLabelValues("gathering")
	h.errs.WithLabelValues("encoding")
	if opts.Registry != nil {
		if err := opts.Registry.Register(h.errs); err != nil {
			return nil, fmt.Errorf("register handler error counter: %w", err)
		}
	}
	return h, nil
}

// waitSlot waits for a free scrape slot; false when the wait ran out or
// the scraper went away.
func (h *Handler) waitSlot(r *http.Request) bool {
	wait := h.opts.MaxWait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if s, err := strconv.ParseFloat(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64); err == nil && s > 0 {
		wait = min(wait, time.Duration(s*float64(time.Second)))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case h.inflight <- struct{}{}:
		return true
	case <-timer.C:
		return false
	case <-r.Context().Done():
		return false
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.inflight != nil {
		select {
		case h.inflight <- struct{}{}:
		default:
			if !h.waitSlot(r) {
				http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", h.opts.MaxRequestsInFlight),
					http.StatusServiceUnavailable)
				return
			}
		}
		defer func() { <-h.inflight }()
	}

	s, _ := h.snapshots.Get().(*snapshot)
	if s == nil {
		s = &snapshot{}
	}
	defer h.snapshots.Put(s)
	s.read(h.inv, h.counters, h.host)
	if s.diskErr != nil {
		h.logger.Error("collector failed", "collector", "disk", "err", s.diskErr)
	}
	if s.hostErr != nil {
		h.logger.Error("collector failed", "collector", "host", "err", s.hostErr)
	}

	mfs, err := prometheus.Gatherers{h.gatherer, scrapeOutcome(s)}.Gather()
	if err == nil {
		for _, mf := range mfs {
			if directNames[mf.GetName()] {
				err = fmt.Errorf("family %s is both in the registry and written directly", mf.GetName())
				break
			}
		}
	}
	if err != nil {
		h.logger.Error("gather metrics", "err", err)
		h.errs.WithLabelValues("gathering").Inc()
		http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}

	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	w.Header().Set("Content-Type", string(format))
	t := newTextWriter(w)
	var gz *gzip.Writer
	if h.opts.GzipLevel != gzip.NoCompression && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		gz = h.gzipWriter(w)
		w.Header().Set("Content-Encoding", "gzip")
		t.dst = gz
	}
	enc := expfmt.NewEncoder(t, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil && t.err == nil {
			t.err = err
		}
	}
	writeDirect(t, s)
	t.flush()
	if gz != nil {
		if err := gz.Close(); err != nil && t.err == nil {
			t.err = err
		}
		h.gzips.Put(gz)
	}
	if t.err != nil {
		h.errs.WithLabelValues("encoding").Inc()
		h.logger.Error("write metrics", "err", t.err)
	}
}

func (h *Handler) gzipWriter(w http.ResponseWriter) *gzip.Writer {
	if gz, ok := h.gzips.Get().(*gzip.Writer); ok {
		gz.Reset(w)
		return gz
	}
	gz, _ := gzip.NewWriterLevel(w, h.opts.GzipLevel) // the level was checked in NewHandler
	return gz
}

// acceptsGzip reads an Accept-Encoding header (RFC 9110 section 12.5.3):
// gzip with a quality above zero, or, when gzip is not named, * with one.
func acceptsGzip(header string) bool {
	gzipQ, anyQ := -1.0, -1.0
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			if k, v, ok := strings.Cut(p, "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		switch strings.ToLower(strings.TrimSpace(coding)) {
		case "gzip", "x-gzip":
			gzipQ = q
		case "*":
			anyQ = q
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return anyQ > 0
}

// scrapeOutcome reports the reading of the disk and host counters as the
// Exporter reports its collectors: fspair_scrape_collector_success and
// _duration_seconds, collector="disk" and "host".
func scrapeOutcome(s *snapshot) prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		for _, c := range []struct {
			name string
			dur  time.Duration
			err  error
		}{{"disk", s.diskDur, s.diskErr}, {"host", s.hostDur, s.hostErr}} {
			ok := 1.0
			if c.err != nil {
				ok = 0
			}
			ch <- prometheus.MustNewConstMetric(scrapeDuration, prometheus.GaugeValue, c.dur.Seconds(), c.name)
			ch <- prometheus.MustNewConstMetric(scrapeSuccess, prometheus.GaugeValue, ok, c.name)
		}
	}))
	return reg
}
