package collector

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
	// Reuse is how long a finished collection keeps serving the scrapes
	// that arrive after it (0: never; each arrival after a collection
	// ended starts the next). Under a burst of scrapers (a load test,
	// several Prometheus servers at once) the counters are then read and
	// compressed once per Reuse instead of once per scrape; a scrape is
	// served counters at most Reuse plus one collection's duration old.
	Reuse time.Duration
	// Guest, if set, gives each disk's guest side (the fspair_disk_guest_*
	// families), as the background poller last read it.
	Guest GuestSource
	// Histograms is what the protobuf scrapes get of each histogram
	// (proto.go); text scrapes get classic histograms whatever it says.
	Histograms Histograms
	// Hold, if set, is called as a scrape begins, and what it returns as
	// the scrape ends: the background work that gives way to scrapes (the
	// guest poll: guest.Gate) waits meanwhile.
	Hold func() (release func())
}

// Handler serves the exposition: the registry's families (the exporter's
// own metrics, the Go runtime, the process), then the per-disk and
// per-host-device families written straight from the kernel counters
// (exposition.go). The response is protobuf (delimited MetricFamily
// messages) when the scraper's Accept header prefers it, the text format
// 0.0.4 otherwise (OpenMetrics is not offered: Prometheus falls back to
// text). Scrapes that arrive while another's collection (counters read,
// registry gathered) is under way share it (collection), whichever format
// each wants: a format is a renderer over the one snapshot.
type Handler struct {
	gatherer prometheus.Gatherer
	inv      HostLister
	counters CounterReader
	host     HostSource
	opts     HandlerOpts
	logger   *slog.Logger
	inflight chan struct{}
	errs     *prometheus.CounterVec

	mu  sync.Mutex
	cur *collection // the collection under way, if any
	// last is the latest finished collection while it may be reused
	// (opts.Reuse), until lastEnd+Reuse; the handler holds a reference.
	last    *collection
	lastEnd time.Time
	// collectHook, if set, runs at the start of each collection (tests).
	collectHook func()

	snapshots spares[snapshot]         // so that the rows are not allocated again each collection
	gzips     sync.Pool                // *gzip.Writer
	bodies    spares[bytes.Buffer]     // compressed responses
	gzipSize  [numFormats]atomic.Int64 // length of the last compressed response held, by format
}

// NewHandler returns the metrics handler over the registry g and the disks
// and host devices of inv, whose counters it reads from counters and host.
func NewHandler(g prometheus.Gatherer, inv HostLister, counters CounterReader, host HostSource, opts HandlerOpts) (*Handler, error) {
	if opts.GzipLevel < gzip.NoCompression || opts.GzipLevel > gzip.BestCompression {
		return nil, fmt.Errorf("gzip level %d: want %d (never compress) to %d", opts.GzipLevel, gzip.NoCompression, gzip.BestCompression)
	}
	if opts.Reuse < 0 {
		return nil, fmt.Errorf("collection reuse %s: want 0 or more", opts.Reuse)
	}
	if opts.Histograms < HistogramsClassic || opts.Histograms > HistogramsBoth {
		return nil, fmt.Errorf("histograms %s: want classic, native or both", opts.Histograms)
	}
	h := &Handler{gatherer: g, inv: inv, counters: counters, host: host, opts: opts, logger: opts.Logger}
	h.snapshots.max, h.bodies.max = 1, int(numFormats)
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
	if h.opts.Hold != nil {
		defer h.opts.Hold()()
	}

	gz := h.opts.GzipLevel != gzip.NoCompression && acceptsGzip(r.Header.Get("Accept-Encoding"))
	f := negotiate(r.Header)
	c, reused := h.collection(f, gz)
	defer h.release(c)
	if c.err != nil {
		h.errs.WithLabelValues("gathering").Inc()
		http.Error(w, "An error has occurred while serving metrics:\n\n"+c.err.Error(), http.StatusInternalServerError)
		return
	}

	w.Header().Set("Content-Type", string(formats[f]))
	var err error
	switch {
	case !gz:
		err = c.render(w, f, h.opts.Histograms)
	case !reused && c.loneGzip[f]:
		// The only scrape of its collection that wants it compressed
		// in this format (a Prometheus on its own): compressed into
		// the connection as it is written, with no body held in
		// memory. Scrapes that reuse the collection later share one
		// compressed body.
		w.Header().Set("Content-Encoding", "gzip")
		err = h.writeGzip(w, c, f)
	default:
		var body []byte
		body, err = c.gzipped(h, f)
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if _, werr := w.Write(body); err == nil {
			err = werr
		}
	}
	if err != nil {
		h.errs.WithLabelValues("encoding").Inc()
		if clientGone(r, err) {
			// A scraper that gave up (its timeout) or went away: the
			// response is lost, the exporter is fine.
			h.logger.Debug("write metrics: client went away", "remote", r.RemoteAddr, "err", err)
			return
		}
		h.logger.Error("write metrics", "err", err)
	}
}

// clientGone tells whether a failed write was the client closing the
// connection: the server cancels the request's context when it sees the
// connection close, and a write into a closed socket fails with EPIPE or
// ECONNRESET.
func clientGone(r *http.Request, err error) bool {
	return r.Context().Err() != nil || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// format is a format served: the index of its Content-Type in formats.
type format int

const (
	fmtText format = iota
	fmtProto
	numFormats
)

// formats are the Content-Types served, with no escaping parameter: every
// name is a legacy Prometheus name, the same escaped or not.
var formats = [numFormats]expfmt.Format{
	fmtText:  expfmt.NewFormat(expfmt.TypeTextPlain),
	fmtProto: expfmt.NewFormat(expfmt.TypeProtoDelim),
}

// negotiate picks the format by the Accept header, as client_golang's
// promhttp does (expfmt.Negotiate, by quality): protobuf when the scraper
// ranks delimited MetricFamily messages first among what it names (and
// what is served), the text format otherwise.
func negotiate(h http.Header) format {
	if expfmt.Negotiate(h).FormatType() == expfmt.TypeProtoDelim {
		return fmtProto
	}
	return fmtText
}

// errCollectionAborted is what the scrapes sharing a collection get when
// it ended without a result (it panicked).
var errCollectionAborted = errors.New("metrics collection aborted")

// A collection is one reading of the kernel counters and one gathering of
// the registry, shared by every scrape that arrives while it runs: under
// a burst of scrapers (issue 6's load test runs 200 at once) each would
// otherwise read every map and gather the registry itself, and the
// scrapers would compete for the CPU with work whose result is the same.
//
// A scrape joins a collection already under way, so what it is served may
// have been read before it arrived, by at most one collection's duration:
// the part of a scrape before the writing, a fraction of the whole
// scrape's 1.7 ms at ten disks and 45 ms at a thousand (BENCHMARKS.md,
// Scrape). Counters then lag the scrape's timestamp by up to that much.
// Only one runs at a time. Without reuse (HandlerOpts.Reuse 0) nothing is
// kept beyond the collection: a scrape that arrives after one ended starts
// the next, and the last scrape of a collection returns its buffers. With
// reuse, the latest finished collection also serves the scrapes that
// arrive within Reuse of its end, and is returned once a later one
// replaces it. Either way a scraper's next scrape is served from the same
// collection as its last one or a later one, so its counters never go
// back.
type collection struct {
	done chan struct{} // closed when s, mfs and err are set
	s    *snapshot
	mfs  []*dto.MetricFamily
	err  error // the gathering failed: every scrape answers 500
	// Scrapes served from it (and the handler, while it may be reused),
	// and how many of those that shared it while it was under way accept
	// gzip, by format: both under Handler.mu. loneGzip, set when done is
	// closed, says that exactly one of those did in the format.
	refs        int
	gzipScrapes [numFormats]int
	loneGzip    [numFormats]bool

	// The compressed response, when several scrapes want it: made by the
	// first of them and sent as it is to the others (compressing costs
	// as much as writing the text: BenchmarkScrape). A scrape alone in
	// wanting gzip compresses straight into its connection instead: a
	// body held whole is about 6 MB at a thousand disks.
	// One for each format.
	gzOnce [numFormats]sync.Once
	gz     [numFormats]*bytes.Buffer
	gzErr  [numFormats]error
}

// collection returns the collection under way, waiting for its end, or
// the last finished one while it may be reused (reused true), or runs a
// new one; f and gz are the scrape's format and whether it accepts gzip.
func (h *Handler) collection(f format, gz bool) (c *collection, reused bool) {
	h.mu.Lock()
	c = h.cur
	if c == nil && h.last != nil && time.Since(h.lastEnd) < h.opts.Reuse {
		c = h.last
		c.refs++
		h.mu.Unlock()
		return c, true
	}
	if c == nil {
		c = &collection{done: make(chan struct{}), err: errCollectionAborted}
		h.cur = c
	}
	c.refs++
	if gz {
		c.gzipScrapes[f]++
	}
	if c.refs > 1 {
		h.mu.Unlock()
		<-c.done
		return c, false
	}
	h.mu.Unlock()
	defer func() {
		// Unpublished before it is released, so that a scrape arriving
		// now starts a fresh collection (or reuses this one, when it
		// succeeded and reuse is on) rather than join it.
		var old *collection
		h.mu.Lock()
		h.cur = nil
		for i, n := range c.gzipScrapes {
			c.loneGzip[i] = n == 1
		}
		if h.opts.Reuse > 0 && c.err == nil {
			old = h.last
			h.last, h.lastEnd = c, time.Now()
			c.refs++ // the handler's, dropped when a later one replaces it
		}
		h.mu.Unlock()
		close(c.done)
		if old != nil {
			h.release(old)
		}
	}()
	h.collect(c)
	return c, false
}

// collect reads the counters and gathers the registry into c. The
// outcome is logged once for all the scrapes that share it.
func (h *Handler) collect(c *collection) {
	if h.collectHook != nil {
		h.collectHook()
	}
	s := h.snapshots.get()
	c.s = s
	s.read(h.inv, h.counters, h.host)
	s.readGuest(h.opts.Guest)
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
	}
	c.mfs, c.err = mfs, err
}

// release ends a scrape's use of c; the last one returns its buffers.
func (h *Handler) release(c *collection) {
	h.mu.Lock()
	c.refs--
	last := c.refs == 0
	h.mu.Unlock()
	if !last {
		return
	}
	if c.s != nil {
		c.s.drop()
		h.snapshots.put(c.s)
	}
	for _, b := range c.gz {
		if b != nil {
			h.bodies.put(b)
		}
	}
}

// render writes the exposition of c to w in format f: the registry's
// families, then the direct ones, each format through its writer over the
// same walk (sink). Several scrapes may render one collection at once:
// rendering only reads it.
func (c *collection) render(w io.Writer, f format, mode Histograms) error {
	var t interface {
		io.Writer // the registry's families, encoded by expfmt
		sink
		finish() error
	}
	if f == fmtProto {
		t = newProtoWriter(w, mode)
	} else {
		t = newTextWriter(w)
	}
	var err error
	enc := expfmt.NewEncoder(t, formats[f])
	for _, mf := range c.mfs {
		if e := enc.Encode(mf); e != nil && err == nil {
			err = e
		}
	}
	if p, ok := t.(*protoWriter); ok {
		p.direct(c.s, protoParts(len(c.s.disks)))
	} else {
		writeDirect(t, c.s)
	}
	if e := t.finish(); err == nil {
		err = e
	}
	return err
}

// gzipped returns the compressed exposition of c in format f, compressing
// it on the first call; err is an error of the rendering, which every
// scrape served this body reports as its own, as it would had it rendered
// it.
func (c *collection) gzipped(h *Handler, f format) ([]byte, error) {
	c.gzOnce[f].Do(func() {
		c.gzErr[f] = errCollectionAborted
		buf := h.bodies.get()
		buf.Reset()
		// Sized for the last body, so that it is not grown (and
		// copied) a dozen times from empty.
		buf.Grow(int(h.gzipSize[f].Load()) * 9 / 8)
		err := h.writeGzip(buf, c, f)
		h.gzipSize[f].Store(int64(buf.Len()))
		c.gz[f], c.gzErr[f] = buf, err
	})
	if c.gz[f] == nil {
		return nil, c.gzErr[f]
	}
	return c.gz[f].Bytes(), c.gzErr[f]
}

// writeGzip writes the compressed exposition of c in format f to w.
func (h *Handler) writeGzip(w io.Writer, c *collection, f format) error {
	gz := h.gzipWriter(w)
	defer h.gzips.Put(gz)
	err := c.render(gz, f, h.opts.Histograms)
	if cerr := gz.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

func (h *Handler) gzipWriter(w io.Writer) *gzip.Writer {
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
