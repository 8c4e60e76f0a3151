package collector

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/inventory"
)

// gatedHandler is a handler whose collections are counted and can be held
// open, so that a test can make scrapes arrive while one is under way.
type gatedHandler struct {
	h           *Handler
	srv         *httptest.Server
	collections atomic.Int64
	started     chan struct{} // a collection started
	release     chan struct{} // closed: held collections go on
}

func newGatedHandler(t *testing.T, g prometheus.Gatherer, inv *fakeInventory, k *fakeKernel, opts HandlerOpts) *gatedHandler {
	t.Helper()
	h, err := NewHandler(g, inv, k, k, opts)
	if err != nil {
		t.Fatal(err)
	}
	gh := &gatedHandler{h: h, started: make(chan struct{}, 100), release: make(chan struct{})}
	h.collectHook = func() {
		gh.collections.Add(1)
		gh.started <- struct{}{}
		<-gh.release
	}
	gh.srv = httptest.NewServer(h)
	t.Cleanup(gh.srv.Close)
	return gh
}

// waiting returns how many scrapes are being served from the collection
// under way (0 if none is).
func (gh *gatedHandler) waiting() int {
	gh.h.mu.Lock()
	defer gh.h.mu.Unlock()
	if gh.h.cur == nil {
		return 0
	}
	return gh.h.cur.refs
}

// scrapeResult is one answered scrape.
type scrapeResult struct {
	code        int
	encoding    string
	contentType string
	raw         []byte // the body as sent
	text        string // inflated if it was gzip
	err         error
}

// fetch scrapes url from any goroutine (it reports errors instead of
// failing the test).
func fetch(url string, gz bool) scrapeResult { return fetchAs(url, gz, "") }

// fetchAs is fetch with an Accept header (none if "").
func fetchAs(url string, gz bool, accept string) scrapeResult {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		return scrapeResult{err: err}
	}
	defer resp.Body.Close()
	r := scrapeResult{code: resp.StatusCode, encoding: resp.Header.Get("Content-Encoding"), contentType: resp.Header.Get("Content-Type")}
	if r.raw, r.err = io.ReadAll(resp.Body); r.err != nil {
		return r
	}
	r.text = string(r.raw)
	if r.encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(r.raw))
		if err != nil {
			r.err = fmt.Errorf("gzip body: %w", err)
			return r
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			r.err = fmt.Errorf("gzip body: %w", err)
			return r
		}
		r.text = string(b)
	}
	return r
}

// burst starts n scrapes while the first collection is held, waits until
// all of them wait on it, lets it go and returns the answers, in order:
// even indexes ask for gzip, odd ones do not.
func (gh *gatedHandler) burst(t *testing.T, n int) []scrapeResult {
	t.Helper()
	return gh.burstWith(t, n, func(i int) scrapeResult { return fetch(gh.srv.URL, i%2 == 0) })
}

// burstWith is burst with scrape i made by get(i).
func (gh *gatedHandler) burstWith(t *testing.T, n int, get func(i int) scrapeResult) []scrapeResult {
	t.Helper()
	out := make([]scrapeResult, n)
	var wg sync.WaitGroup
	scrape := func(i int) {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = get(i) }()
	}
	scrape(0)
	select {
	case <-gh.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first scrape did not start a collection")
	}
	for i := 1; i < n; i++ {
		scrape(i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for gh.waiting() < n {
		if time.Now().After(deadline) {
			close(gh.release)
			wg.Wait()
			t.Fatalf("%d of %d scrapes joined the collection under way", gh.waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(gh.release)
	wg.Wait()
	for i, r := range out {
		if r.err != nil {
			t.Fatalf("scrape %d: %v", i, r.err)
		}
	}
	return out
}

// TestHandlerSharesCollection: scrapes that arrive while a collection is
// under way are served from it (one reading of the counters for all), and
// each gets a complete response, the same text whether compressed or not;
// the gzip clients get the same compressed bytes.
func TestHandlerSharesCollection(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(11, 6)), 12)
	for i := range inv.disks {
		inv.disks[i].Tracked = true
	}
	reg := prometheus.NewRegistry()
	gh := newGatedHandler(t, reg, inv, k, HandlerOpts{GzipLevel: kgzip.BestSpeed, Registry: reg})
	const n = 24
	res := gh.burst(t, n)
	if c := gh.collections.Load(); c != 1 {
		t.Errorf("%d scrapes at once made %d collections, want 1", n, c)
	}
	want := res[1].text // plain
	checkStructure(t, want)
	lint(t, want)
	if !strings.HasSuffix(want, directText(t, inv, k)) {
		t.Error("the response does not end with the direct families of the fleet")
	}
	fams := parseText(t, want)
	if got := len(fams["fspair_disk_info"].GetMetric()); got != len(inv.disks) {
		t.Errorf("%d fspair_disk_info series, want %d", got, len(inv.disks))
	}
	for i, r := range res {
		if r.code != http.StatusOK {
			t.Errorf("scrape %d: status %d", i, r.code)
		}
		wantEnc := ""
		if i%2 == 0 {
			wantEnc = "gzip"
		}
		if r.encoding != wantEnc {
			t.Errorf("scrape %d: Content-Encoding %q, want %q", i, r.encoding, wantEnc)
		}
		if r.text != want {
			t.Errorf("scrape %d (encoding %q): response differs from scrape 1's (%d bytes, want %d)", i, r.encoding, len(r.text), len(want))
		}
		if i%2 == 0 && !bytes.Equal(r.raw, res[0].raw) {
			t.Errorf("scrape %d: compressed body differs from scrape 0's; the collection's compressed body is shared", i)
		}
	}
	if gh.waiting() != 0 {
		t.Errorf("a collection is still published after all its scrapes answered")
	}
	if gh.h.gzipSize[fmtText].Load() != int64(len(res[0].raw)) {
		t.Errorf("held compressed body of %d bytes, sent %d", gh.h.gzipSize[fmtText].Load(), len(res[0].raw))
	}
}

// TestHandlerSharedFailure: a collection that fails fails every scrape
// that shared it the same way: a gathering error answers 500 to all and
// counts one handler error each; unreadable counters answer 200 with the
// disk and host collectors marked failed for all.
func TestHandlerSharedFailure(t *testing.T) {
	const n = 10
	t.Run("gathering", func(t *testing.T) {
		inv, k := randomFleet(rand.New(rand.NewPCG(12, 6)), 3)
		errGather := errors.New("registry on fire")
		g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return nil, errGather })
		gh := newGatedHandler(t, g, inv, k, HandlerOpts{GzipLevel: kgzip.BestSpeed})
		res := gh.burst(t, n)
		if c := gh.collections.Load(); c != 1 {
			t.Errorf("%d collections, want 1", c)
		}
		for i, r := range res {
			if r.code != http.StatusInternalServerError || !strings.Contains(r.text, errGather.Error()) {
				t.Errorf("scrape %d: status %d, body %q; want 500 naming the gathering error", i, r.code, head(r.text, 200))
			}
		}
		if got := testutil.ToFloat64(gh.h.errs.WithLabelValues("gathering")); got != n {
			t.Errorf("promhttp_metric_handler_errors_total{cause=\"gathering\"} = %v, want %d (one per failed scrape)", got, n)
		}
	})
	t.Run("counters", func(t *testing.T) {
		inv, k := randomFleet(rand.New(rand.NewPCG(13, 6)), 6)
		for i := range inv.disks {
			inv.disks[i].Tracked = true
		}
		bad := inv.disks[2]
		k.fail[bad.Slot] = true
		gh := newGatedHandler(t, prometheus.NewRegistry(), inv, k, HandlerOpts{GzipLevel: kgzip.BestSpeed})
		res := gh.burst(t, n)
		if c := gh.collections.Load(); c != 1 {
			t.Errorf("%d collections, want 1", c)
		}
		for i, r := range res {
			if r.code != http.StatusOK {
				t.Errorf("scrape %d: status %d, want 200", i, r.code)
				continue
			}
			fams := parseText(t, r.text)
			success := map[string]float64{}
			for _, m := range fams["fspair_scrape_collector_success"].GetMetric() {
				success[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
			if success["disk"] != 0 || success["host"] != 0 || len(success) != 2 {
				t.Errorf("scrape %d: fspair_scrape_collector_success %v, want disk and host 0", i, success)
			}
			if got, want := len(fams["fspair_disk_requests_total"].GetMetric()), (len(inv.disks)-1)*len(opNames); got != want {
				t.Errorf("scrape %d: %d fspair_disk_requests_total series, want %d (all but the unreadable disk)", i, got, want)
			}
		}
	})
}

// TestHandlerFreshCollection: a scrape that arrives after the previous
// collection ended gets a collection of its own, with the counters as
// they are then; nothing is cached between collections. A gzip scrape
// alone on its collection compresses straight into its connection.
func TestHandlerFreshCollection(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(14, 6)), 4)
	for i := range inv.disks {
		inv.disks[i].Tracked = true
	}
	gh := newGatedHandler(t, prometheus.NewRegistry(), inv, k, HandlerOpts{GzipLevel: kgzip.BestSpeed})
	close(gh.release) // collections run freely
	d := inv.disks[0]
	sel := fmt.Sprintf(`fspair_disk_requests_total{domain=%q,uuid=%q,target_device=%q,source_file=%q,op="read"} `,
		d.Domain, d.UUID, d.TargetDevice, d.SourceFile)
	for i, gz := range []bool{true, true, false, false, true} {
		c := k.disk[d.Slot]
		c.Requests[0] = uint64(1000 + i)
		k.disk[d.Slot] = c
		r := fetch(gh.srv.URL, gz)
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("scrape %d: status %d, %v", i, r.code, r.err)
		}
		if want := sel + fmt.Sprint(1000+i) + "\n"; !strings.Contains(r.text, want) {
			t.Errorf("scrape %d (gzip %v): no %q in the response: served an earlier collection", i, gz, strings.TrimSpace(want))
		}
		if got := gh.collections.Load(); got != int64(i+1) {
			t.Errorf("after %d scrapes one after the other: %d collections, want %d", i+1, got, i+1)
		}
	}
	// Alone on their collections, the gzip scrapes compressed into their
	// connections: no body was held.
	if n := gh.h.gzipSize[fmtText].Load(); n != 0 {
		t.Errorf("a lone gzip scrape held a compressed body (%d bytes)", n)
	}
}

// TestHandlerReuse: with Reuse, scrapes that arrive within the window
// after a collection ended are served from it (the counters as they were
// read, no new collection), gzip scrapes from one compressed body; the
// first scrape after the window starts a fresh collection, and the one it
// replaces is released.
func TestHandlerReuse(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(16, 6)), 4)
	for i := range inv.disks {
		inv.disks[i].Tracked = true
	}
	gh := newGatedHandler(t, prometheus.NewRegistry(), inv, k, HandlerOpts{GzipLevel: kgzip.BestSpeed, Reuse: time.Hour})
	close(gh.release)
	d := inv.disks[0]
	sel := fmt.Sprintf(`fspair_disk_requests_total{domain=%q,uuid=%q,target_device=%q,source_file=%q,op="read"} `,
		d.Domain, d.UUID, d.TargetDevice, d.SourceFile)
	set := func(v uint64) {
		c := k.disk[d.Slot]
		c.Requests[0] = v
		k.disk[d.Slot] = c
	}
	set(500)
	var bodies [][]byte
	for i, gz := range []bool{true, true, false, true} {
		if i > 0 {
			set(uint64(500 + i)) // read by no collection: the first one is reused
		}
		r := fetch(gh.srv.URL, gz)
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("scrape %d: status %d, %v", i, r.code, r.err)
		}
		if want := sel + "500\n"; !strings.Contains(r.text, want) {
			t.Errorf("scrape %d (gzip %v) within the reuse window: no %q", i, gz, strings.TrimSpace(want))
		}
		if i > 0 && gz {
			bodies = append(bodies, r.raw)
		}
	}
	if got := gh.collections.Load(); got != 1 {
		t.Errorf("4 scrapes within the reuse window: %d collections, want 1", got)
	}
	if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) {
		t.Errorf("the gzip scrapes that reused the collection were not sent one compressed body")
	}

	// The window ends: the next scrape reads the counters afresh.
	gh.h.mu.Lock()
	first := gh.h.last
	gh.h.lastEnd = time.Now().Add(-2 * time.Hour)
	gh.h.mu.Unlock()
	set(600)
	r := fetch(gh.srv.URL, true)
	if r.err != nil || r.code != http.StatusOK {
		t.Fatalf("scrape after the window: status %d, %v", r.code, r.err)
	}
	if want := sel + "600\n"; !strings.Contains(r.text, want) {
		t.Errorf("scrape after the reuse window: no %q: served the old collection", strings.TrimSpace(want))
	}
	if got := gh.collections.Load(); got != 2 {
		t.Errorf("after the window: %d collections, want 2", got)
	}
	gh.h.mu.Lock()
	defer gh.h.mu.Unlock()
	if first == nil || first.refs != 0 {
		t.Errorf("the replaced collection is still referenced (%v)", first)
	}
	if gh.h.last == first || gh.h.last.refs != 1 {
		t.Errorf("the new collection is not the one held for reuse, or is held more than once")
	}
}

// TestHandlerSharedQueued: with the in-flight bound, scrapes queued for a
// slot and then joining collections under way are every one answered in
// full (TestHandlerSharesCollection checks the sharing itself).
func TestHandlerSharedQueued(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(15, 6)), 5)
	h, err := NewHandler(prometheus.NewRegistry(), inv, k, k, HandlerOpts{MaxRequestsInFlight: 4, GzipLevel: kgzip.BestSpeed})
	if err != nil {
		t.Fatal(err)
	}
	var collections atomic.Int64
	h.collectHook = func() { collections.Add(1); time.Sleep(5 * time.Millisecond) }
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	want := directText(t, inv, k)
	const n = 60
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := fetch(srv.URL, i%3 == 0)
			if r.err != nil || r.code != http.StatusOK {
				t.Errorf("scrape %d: status %d, %v", i, r.code, r.err)
				return
			}
			if !strings.HasSuffix(r.text, want) {
				t.Errorf("scrape %d: incomplete response (%d bytes)", i, len(r.text))
			}
		}()
	}
	wg.Wait()
	t.Logf("%d scrapes, %d collections", n, collections.Load())
}

// TestClientGone: a write that failed because the scraper closed the
// connection (its context cancelled, EPIPE, ECONNRESET, wrapped as the
// writers wrap them) is told apart from a failure of the exporter's.
func TestClientGone(t *testing.T) {
	live := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := live.WithContext(ctx)
	cases := []struct {
		name string
		r    *http.Request
		err  error
		want bool
	}{
		{"context cancelled", gone, errors.New("write: i/o timeout"), true},
		{"broken pipe", live, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{"reset, wrapped", live, fmt.Errorf("flush gzip: %w", os.NewSyscallError("write", syscall.ECONNRESET)), true},
		{"exporter's own failure", live, errors.New("gzip: invalid compression level"), false},
	}
	for _, c := range cases {
		if got := clientGone(c.r, c.err); got != c.want {
			t.Errorf("%s: clientGone = %v, want %v", c.name, got, c.want)
		}
	}
}

// holdProbe is a GuestSource that notes, as the scrape reads it, how many
// holds of HandlerOpts.Hold are open.
type holdProbe struct {
	open     *atomic.Int32
	duringOK atomic.Bool
}

func (h *holdProbe) Status(d *inventory.Disk) guest.Status {
	if h.open.Load() == 1 {
		h.duringOK.Store(true)
	}
	return guest.Status{Source: guest.SourceNone, Status: guest.StatusNoMonitor, Histogram: guest.HistogramNone}
}

// TestHandlerHolds: each scrape holds HandlerOpts.Hold while it reads and
// writes, and lets go when it is done.
func TestHandlerHolds(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(3, 4)), 20)
	var open, calls atomic.Int32
	src := &holdProbe{open: &open}
	srv := newTestHandlerOpts(t, inv, k, HandlerOpts{Guest: src, Hold: func() func() {
		calls.Add(1)
		open.Add(1)
		return func() { open.Add(-1) }
	}})
	for _, gz := range []bool{false, true} {
		get(t, srv.URL, gz)
	}
	if !src.duringOK.Load() {
		t.Error("the guest side was read with no hold open")
	}
	if calls.Load() != 2 || open.Load() != 0 {
		t.Errorf("after two scrapes: %d holds taken, %d still open; want 2 and 0", calls.Load(), open.Load())
	}
}
