package alerting

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrNoAlert is returned by WaitAlert and WaitResolved when ctx ends before
// a matching notification arrived.
var ErrNoAlert = errors.New("no matching alert notification")

// Target is one address Prometheus scrapes, with the target labels it adds
// to every series (e.g. host="kvm1", which the example route groups by).
type Target struct {
	Address string
	Labels  map[string]string
}

// Options configure a Stack. Zero values pick the defaults noted.
type Options struct {
	// RulesDir holds the rule files (*.yml, *.yaml) Prometheus evaluates,
	// e.g. from GenerateRules. With no RulesDir and no ScrapeTargets, no
	// Prometheus runs: the stack is an Alertmanager and the webhook, for
	// tests that post alerts themselves (PostAlerts).
	RulesDir string
	// ScrapeTargets are scraped as job Job.
	ScrapeTargets []Target
	// Job is the scrape job's name (default "fspair", as the rules expect).
	Job string
	// ScrapeInterval and EvaluationInterval default to 1 s.
	ScrapeInterval, EvaluationInterval time.Duration
	// AlertmanagerExample is the configuration the test one is derived
	// from (default: deploy/alertmanager/alertmanager.yml of the repo).
	AlertmanagerExample string
	// Timing of notifications (defaults: group_wait 1 s, group_interval
	// 2 s, repeat_interval 1 h).
	Timing Timing
	// Prometheus and Alertmanager binaries (default: the pinned ones,
	// PinnedBinary; e.g. DebianPrometheus to run on 2.42).
	Prometheus, Alertmanager string
	// Dir holds the daemons' configuration and storage (default: a new
	// temporary directory, removed by Close).
	Dir string
	// StartTimeout bounds the start of each daemon (default 30 s).
	StartTimeout time.Duration
	// PrometheusFlags are more command-line flags for Prometheus, e.g.
	// --web.enable-remote-write-receiver for k6's metrics.
	PrometheusFlags []string
	// NativeHistograms makes Prometheus (3 only) store the targets'
	// histograms as native ones and no classic series: it asks for
	// protobuf, where a target that offers native histograms sends them
	// (scrape_native_histograms), and converts a text target's classic
	// histograms into native ones with its buckets as custom bounds
	// (convert_classic_histograms_to_nhcb). No _bucket, _sum or _count
	// series then: what reads them must read the histogram itself.
	NativeHistograms bool
}

// Alert is one alert as a notification carried it, or as the
// Alertmanager API lists it.
type Alert struct {
	Receiver     string // the receiver that sent it (from the webhook URL path)
	Status       string // firing or resolved
	Labels       map[string]string
	Annotations  map[string]string
	StartsAt     time.Time
	EndsAt       time.Time
	GeneratorURL string
	Fingerprint  string
	Received     time.Time // when the webhook got it
	GroupKey     string    // the notification's group (route and group_by values)
	// InhibitedBy and SilencedBy are set on alerts from ActiveAlerts:
	// the fingerprints of the alerts or silences muting this one.
	InhibitedBy, SilencedBy []string
	State                   string // ActiveAlerts: active, suppressed or unprocessed; PrometheusAlerts: pending or firing
}

// Name is the alert's alertname label.
func (a Alert) Name() string { return a.Labels["alertname"] }

// Matches reports whether every label in m has the value given.
func (a Alert) Matches(m map[string]string) bool {
	for k, v := range m {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

func (a Alert) String() string {
	keys := make([]string, 0, len(a.Labels))
	for k := range a.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s[%s via %s]{", a.Name(), a.Status, a.Receiver)
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", k, a.Labels[k])
	}
	b.WriteString("}")
	return b.String()
}

// Stack is a running Prometheus (optional), Alertmanager and webhook.
type Stack struct {
	opts      Options
	dir, tmp  string
	prom, am  *process
	promURL   string
	amURL     string
	hook      *http.Server
	hookURL   string
	closeOnce sync.Once

	mu       sync.Mutex
	alerts   []Alert
	payloads int
	changed  chan struct{} // closed and replaced on every notification
}

// Start starts a stack for a test and stops it when the test ends. On
// failure it logs the daemons' output and every notification received.
// It fails the test, never skips it, when something is missing.
func Start(t testing.TB, opts Options) *Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("start alerting stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("notifications received:\n%s", s.describeAlerts())
			if s.prom != nil {
				t.Logf("--- prometheus log ---\n%s", s.prom.out)
			}
			t.Logf("--- alertmanager log ---\n%s", s.am.out)
		}
		if err := s.Close(); err != nil {
			t.Errorf("stop alerting stack: %v", err)
		}
	})
	return s
}

// New starts the webhook, the Alertmanager and, when opts name rules or
// targets, Prometheus. Close stops them.
func New(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Job == "" {
		opts.Job = "fspair"
	}
	if opts.ScrapeInterval == 0 {
		opts.ScrapeInterval = time.Second
	}
	if opts.EvaluationInterval == 0 {
		opts.EvaluationInterval = time.Second
	}
	if opts.Timing.GroupWait == 0 {
		opts.Timing.GroupWait = time.Second
	}
	if opts.Timing.GroupInterval == 0 {
		opts.Timing.GroupInterval = 2 * time.Second
	}
	if opts.Timing.RepeatInterval == 0 {
		opts.Timing.RepeatInterval = time.Hour
	}
	runProm := opts.RulesDir != "" || len(opts.ScrapeTargets) > 0
	if opts.Prometheus == "" && runProm {
		p, err := PinnedBinary("prometheus")
		if err != nil {
			return nil, err
		}
		opts.Prometheus = p
	}
	if opts.Alertmanager == "" {
		p, err := PinnedBinary("alertmanager")
		if err != nil {
			return nil, err
		}
		opts.Alertmanager = p
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.AlertmanagerExample == "" {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		opts.AlertmanagerExample = filepath.Join(root, "deploy", "alertmanager", "alertmanager.yml")
	}
	for _, bin := range []string{opts.Alertmanager, opts.Prometheus} {
		if bin == opts.Prometheus && !runProm {
			continue
		}
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("find %s (scripts/promstack.sh build; Debian's 2.42: make deps): %w", bin, err)
		}
	}

	s := &Stack{opts: opts, dir: opts.Dir, changed: make(chan struct{})}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "fspair-alerting-")
		if err != nil {
			return nil, fmt.Errorf("make stack directory: %w", err)
		}
		s.dir, s.tmp = d, d
	}
	if err := s.startWebhook(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.startAlertmanager(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if runProm {
		if err := s.startPrometheus(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close stops the daemons and the webhook and removes the temporary
// directory.
func (s *Stack) Close() error {
	var errs []error
	s.closeOnce.Do(func() {
		for _, p := range []*process{s.prom, s.am} {
			if p != nil {
				if err := p.stop(); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if s.hook != nil {
			s.hook.Close()
		}
		if s.tmp != "" {
			if err := os.RemoveAll(s.tmp); err != nil {
				errs = append(errs, fmt.Errorf("remove stack directory: %w", err))
			}
		}
	})
	return errors.Join(errs...)
}

// PrometheusURL is the base URL of the stack's Prometheus ("" without one).
func (s *Stack) PrometheusURL() string { return s.promURL }

// AlertmanagerURL is the base URL of the stack's Alertmanager.
func (s *Stack) AlertmanagerURL() string { return s.amURL }

// WebhookURL is the base URL receivers send to; receiver R posts to
// WebhookURL()+"/"+R.
func (s *Stack) WebhookURL() string { return s.hookURL }

// Dir holds the daemons' configuration files (prometheus.yml,
// alertmanager.yml) and storage.
func (s *Stack) Dir() string { return s.dir }

func (s *Stack) startWebhook() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for webhook: %w", err)
	}
	s.hookURL = "http://" + l.Addr().String()
	s.hook = &http.Server{Handler: http.HandlerFunc(s.receive), ReadHeaderTimeout: 5 * time.Second}
	go s.hook.Serve(l)
	return nil
}

// webhookPayload is what Alertmanager's webhook integration posts
// (version 4 of its message).
type webhookPayload struct {
	Version  string `json:"version"`
	GroupKey string `json:"groupKey"`
	Receiver string `json:"receiver"`
	Status   string `json:"status"`
	Alerts   []struct {
		Status       string            `json:"status"`
		Labels       map[string]string `json:"labels"`
		Annotations  map[string]string `json:"annotations"`
		StartsAt     time.Time         `json:"startsAt"`
		EndsAt       time.Time         `json:"endsAt"`
		GeneratorURL string            `json:"generatorURL"`
		Fingerprint  string            `json:"fingerprint"`
	} `json:"alerts"`
}

func (s *Stack) receive(w http.ResponseWriter, r *http.Request) {
	var p webhookPayload
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, "decode payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	// The receiver is taken from the path the derived configuration gave
	// it, so that a notification proves which route sent it.
	recv, _ := url.PathUnescape(strings.TrimPrefix(r.URL.Path, "/"))
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.payloads++
	for _, a := range p.Alerts {
		s.alerts = append(s.alerts, Alert{
			Receiver: recv, Status: a.Status, Labels: a.Labels, Annotations: a.Annotations,
			StartsAt: a.StartsAt, EndsAt: a.EndsAt, GeneratorURL: a.GeneratorURL,
			Fingerprint: a.Fingerprint, Received: now, GroupKey: p.GroupKey,
		})
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Alerts returns every alert the webhook received, in arrival order (an
// alert repeats once per notification that carried it).
func (s *Stack) Alerts() []Alert {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Alert(nil), s.alerts...)
}

// WaitAlert waits for a firing notification of alert name whose labels
// include matchers, and returns it; ErrNoAlert (wrapped) when ctx ends
// first.
func (s *Stack) WaitAlert(ctx context.Context, name string, matchers map[string]string) (Alert, error) {
	return s.wait(ctx, name, "firing", matchers)
}

// WaitResolved waits for a resolved notification of alert name.
func (s *Stack) WaitResolved(ctx context.Context, name string, matchers map[string]string) (Alert, error) {
	return s.wait(ctx, name, "resolved", matchers)
}

func (s *Stack) wait(ctx context.Context, name, status string, matchers map[string]string) (Alert, error) {
	seen := 0
	for {
		s.mu.Lock()
		for ; seen < len(s.alerts); seen++ {
			a := s.alerts[seen]
			if a.Name() == name && a.Status == status && a.Matches(matchers) {
				s.mu.Unlock()
				return a, nil
			}
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Alert{}, fmt.Errorf("wait for %s %s %v: %w (%v); received:\n%s",
				status, name, matchers, ErrNoAlert, ctx.Err(), s.describeAlerts())
		}
	}
}

func (s *Stack) describeAlerts() string {
	as := s.Alerts()
	if len(as) == 0 {
		return "  (nothing)"
	}
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "  %s %s\n", a.Received.Format("15:04:05.000"), a)
	}
	return b.String()
}

func (s *Stack) startAlertmanager(ctx context.Context) error {
	example, err := os.ReadFile(s.opts.AlertmanagerExample)
	if err != nil {
		return fmt.Errorf("read alertmanager example: %w", err)
	}
	cfg, err := deriveAlertmanagerConfig(example, s.hookURL, s.opts.Timing)
	if err != nil {
		return err
	}
	file := filepath.Join(s.dir, "alertmanager.yml")
	if err := os.WriteFile(file, cfg, 0o644); err != nil {
		return fmt.Errorf("write alertmanager config: %w", err)
	}
	// A port picked free may be taken before the daemon binds it: retry.
	for attempt := 0; ; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		storage := filepath.Join(s.dir, fmt.Sprintf("alertmanager-data-%d", attempt))
		p, err := startProcess("alertmanager", s.opts.Alertmanager,
			"--config.file="+file,
			"--storage.path="+storage,
			"--web.listen-address="+addr,
			// No high-availability gossip: one instance, loopback only.
			"--cluster.listen-address=",
			"--log.level=debug",
		)
		if err != nil {
			return err
		}
		s.am, s.amURL = p, "http://"+addr
		sctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
		err = p.waitReady(sctx, s.amURL+"/-/ready")
		cancel()
		if err == nil {
			return nil
		}
		p.stop()
		if attempt < 2 && strings.Contains(p.out.String(), "address already in use") {
			continue
		}
		return fmt.Errorf("start alertmanager: %w", err)
	}
}

func (s *Stack) startPrometheus(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		cfg, err := prometheusConfig(s.opts, strings.TrimPrefix(s.amURL, "http://"))
		if err != nil {
			return fmt.Errorf("make prometheus config: %w", err)
		}
		file := filepath.Join(s.dir, "prometheus.yml")
		if err := os.WriteFile(file, cfg, 0o644); err != nil {
			return fmt.Errorf("write prometheus config: %w", err)
		}
		args := append([]string{
			"--config.file=" + file,
			"--storage.tsdb.path=" + filepath.Join(s.dir, fmt.Sprintf("prometheus-data-%d", attempt)),
			"--web.listen-address=" + addr,
			"--log.level=debug",
		}, s.opts.PrometheusFlags...)
		p, err := startProcess("prometheus", s.opts.Prometheus, args...)
		if err != nil {
			return err
		}
		s.prom, s.promURL = p, "http://"+addr
		sctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
		err = p.waitReady(sctx, s.promURL+"/-/ready")
		cancel()
		if err == nil {
			return s.checkRulesLoaded(ctx)
		}
		p.stop()
		if attempt < 2 && strings.Contains(p.out.String(), "address already in use") {
			continue
		}
		return fmt.Errorf("start prometheus: %w", err)
	}
}

// checkRulesLoaded makes sure Prometheus loaded at least one rule group
// when a rules directory was given: a glob that matched nothing would
// otherwise make every test of an alert wait in vain.
func (s *Stack) checkRulesLoaded(ctx context.Context) error {
	if s.opts.RulesDir == "" {
		return nil
	}
	var resp struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []any  `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := GetJSON(ctx, s.promURL+"/api/v1/rules", &resp); err != nil {
		return fmt.Errorf("list prometheus rules: %w", err)
	}
	if len(resp.Data.Groups) == 0 {
		return fmt.Errorf("prometheus loaded no rule groups from %s", s.opts.RulesDir)
	}
	return nil
}

// GetJSON decodes the JSON answer of a GET into v; an HTTP error status is
// an error after decoding (the query APIs explain their errors in the body).
func GetJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode %s (HTTP %d): %w: %.300s", u, resp.StatusCode, err, body)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %.300s", u, resp.StatusCode, body)
	}
	return nil
}

// Sample is one element of an instant-query result.
type Sample struct {
	Labels map[string]string
	Value  float64
	// Histogram is a native histogram's value (Value is 0 then).
	Histogram *Histogram
}

// Histogram is a native histogram sample as the query API returns it.
type Histogram struct {
	Count, Sum float64
	// Buckets are the populated buckets, lowest first.
	Buckets []HistogramBucket
}

// HistogramBucket is one bucket of a native histogram: Count observations
// between Lower and Upper.
type HistogramBucket struct {
	Lower, Upper, Count float64
}

// Query runs an instant PromQL query on the stack's Prometheus. A query
// Prometheus cannot parse or run returns its error message.
func (s *Stack) Query(ctx context.Context, expr string) ([]Sample, error) {
	if s.promURL == "" {
		return nil, errors.New("query: the stack runs no prometheus")
	}
	return Query(ctx, s.promURL, expr)
}

// queryResponse is the envelope of Prometheus's query API (and Thanos
// Query's, which speaks the same).
type queryResponse struct {
	Status    string   `json:"status"`
	ErrorType string   `json:"errorType"`
	Error     string   `json:"error"`
	Warnings  []string `json:"warnings"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

// parseHistogram decodes a native histogram value of the query API: count
// and sum as strings, buckets as [boundary rule, lower, upper, count].
func parseHistogram(raw json.RawMessage) (*Histogram, error) {
	var v struct {
		Count   string  `json:"count"`
		Sum     string  `json:"sum"`
		Buckets [][]any `json:"buckets"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("decode histogram: %w", err)
	}
	h := &Histogram{}
	var err error
	if h.Count, err = strconv.ParseFloat(v.Count, 64); err != nil {
		return nil, fmt.Errorf("histogram count %q: %w", v.Count, err)
	}
	if h.Sum, err = strconv.ParseFloat(v.Sum, 64); err != nil {
		return nil, fmt.Errorf("histogram sum %q: %w", v.Sum, err)
	}
	for _, b := range v.Buckets {
		if len(b) != 4 {
			return nil, fmt.Errorf("histogram bucket %v: want 4 fields", b)
		}
		var f [3]float64
		for i := range f {
			if f[i], err = parseValue(b[i+1]); err != nil {
				return nil, fmt.Errorf("histogram bucket %v: %w", b, err)
			}
		}
		h.Buckets = append(h.Buckets, HistogramBucket{Lower: f[0], Upper: f[1], Count: f[2]})
	}
	return h, nil
}

// Query runs an instant PromQL query on the Prometheus query API at base
// (a Prometheus, or Thanos Query).
func Query(ctx context.Context, base, expr string) ([]Sample, error) {
	var resp queryResponse
	err := GetJSON(ctx, base+"/api/v1/query?query="+url.QueryEscape(expr), &resp)
	if resp.Status == "error" {
		return nil, fmt.Errorf("query %q: %s: %s", expr, resp.ErrorType, resp.Error)
	}
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	var out []Sample
	switch resp.Data.ResultType {
	case "vector":
		for _, r := range resp.Data.Result {
			var v struct {
				Metric    map[string]string   `json:"metric"`
				Value     [2]any              `json:"value"`
				Histogram *[2]json.RawMessage `json:"histogram"`
			}
			if err := json.Unmarshal(r, &v); err != nil {
				return nil, fmt.Errorf("query %q: decode sample: %w", expr, err)
			}
			if v.Histogram != nil {
				h, err := parseHistogram(v.Histogram[1])
				if err != nil {
					return nil, fmt.Errorf("query %q: %w", expr, err)
				}
				out = append(out, Sample{Labels: v.Metric, Histogram: h})
				continue
			}
			f, err := parseValue(v.Value[1])
			if err != nil {
				return nil, fmt.Errorf("query %q: %w", expr, err)
			}
			out = append(out, Sample{Labels: v.Metric, Value: f})
		}
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(resp.Data.Result[0], &v); err == nil {
			f, err := parseValue(v[1])
			if err != nil {
				return nil, fmt.Errorf("query %q: %w", expr, err)
			}
			out = append(out, Sample{Value: f})
		}
	}
	return out, nil
}

// Series is one series of a range-query result: its labels and how many
// points it has.
type Series struct {
	Labels map[string]string
	Points int
}

// QueryRange runs a range query on the query API at base from start to end
// at step.
func QueryRange(ctx context.Context, base, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	q := url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	var resp queryResponse
	err := GetJSON(ctx, base+"/api/v1/query_range?"+q.Encode(), &resp)
	if resp.Status == "error" {
		return nil, fmt.Errorf("range query %q: %s: %s", expr, resp.ErrorType, resp.Error)
	}
	if err != nil {
		return nil, fmt.Errorf("range query %q: %w", expr, err)
	}
	var out []Series
	for _, r := range resp.Data.Result {
		var v struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, fmt.Errorf("range query %q: decode series: %w", expr, err)
		}
		out = append(out, Series{Labels: v.Metric, Points: len(v.Values)})
	}
	return out, nil
}

func parseValue(v any) (float64, error) {
	str, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v)
	}
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return 0, fmt.Errorf("parse sample value %q: %w", str, err)
	}
	return f, nil
}

// PostAlerts sends alerts straight to the Alertmanager's API, as
// Prometheus would; Labels and Annotations are used, StartsAt and EndsAt
// when set.
func (s *Stack) PostAlerts(ctx context.Context, alerts ...Alert) error {
	type postable struct {
		Labels       map[string]string `json:"labels"`
		Annotations  map[string]string `json:"annotations,omitempty"`
		StartsAt     *time.Time        `json:"startsAt,omitempty"`
		EndsAt       *time.Time        `json:"endsAt,omitempty"`
		GeneratorURL string            `json:"generatorURL,omitempty"`
	}
	var body []postable
	for _, a := range alerts {
		p := postable{Labels: a.Labels, Annotations: a.Annotations, GeneratorURL: a.GeneratorURL}
		if !a.StartsAt.IsZero() {
			p.StartsAt = &a.StartsAt
		}
		if !a.EndsAt.IsZero() {
			p.EndsAt = &a.EndsAt
		}
		body = append(body, p)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode alerts: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.amURL+"/api/v2/alerts", bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("post alerts: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("post alerts: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("post alerts: HTTP %d: %.300s", resp.StatusCode, msg)
	}
	return nil
}

// ActiveAlerts lists the alerts the Alertmanager holds, with their state
// (active, suppressed) and what inhibits or silences them.
func (s *Stack) ActiveAlerts(ctx context.Context) ([]Alert, error) {
	var resp []struct {
		Labels       map[string]string `json:"labels"`
		Annotations  map[string]string `json:"annotations"`
		StartsAt     time.Time         `json:"startsAt"`
		EndsAt       time.Time         `json:"endsAt"`
		GeneratorURL string            `json:"generatorURL"`
		Fingerprint  string            `json:"fingerprint"`
		Receivers    []struct {
			Name string `json:"name"`
		} `json:"receivers"`
		Status struct {
			State       string   `json:"state"`
			InhibitedBy []string `json:"inhibitedBy"`
			SilencedBy  []string `json:"silencedBy"`
		} `json:"status"`
	}
	if err := GetJSON(ctx, s.amURL+"/api/v2/alerts", &resp); err != nil {
		return nil, fmt.Errorf("list alertmanager alerts: %w", err)
	}
	var out []Alert
	for _, a := range resp {
		al := Alert{
			Status: "firing", Labels: a.Labels, Annotations: a.Annotations, StartsAt: a.StartsAt,
			EndsAt: a.EndsAt, GeneratorURL: a.GeneratorURL, Fingerprint: a.Fingerprint,
			InhibitedBy: a.Status.InhibitedBy, SilencedBy: a.Status.SilencedBy, State: a.Status.State,
		}
		if len(a.Receivers) > 0 {
			al.Receiver = a.Receivers[0].Name
		}
		out = append(out, al)
	}
	return out, nil
}

// PrometheusAlerts lists the alerts the stack's Prometheus holds, pending
// or firing (Alert.State), whose labels include matchers: what would reach
// the Alertmanager, or is about to. A test that must show an alert stays
// away checks here as well as in Alerts, since a pending alert never
// reaches the webhook.
func (s *Stack) PrometheusAlerts(ctx context.Context, matchers map[string]string) ([]Alert, error) {
	if s.promURL == "" {
		return nil, errors.New("list prometheus alerts: the stack runs no prometheus")
	}
	var resp struct {
		Data struct {
			Alerts []struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
				State       string            `json:"state"`
				ActiveAt    time.Time         `json:"activeAt"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := GetJSON(ctx, s.promURL+"/api/v1/alerts", &resp); err != nil {
		return nil, fmt.Errorf("list prometheus alerts: %w", err)
	}
	var out []Alert
	for _, a := range resp.Data.Alerts {
		al := Alert{Status: "firing", State: a.State, Labels: a.Labels, Annotations: a.Annotations, StartsAt: a.ActiveAt}
		if al.Matches(matchers) {
			out = append(out, al)
		}
	}
	return out, nil
}
