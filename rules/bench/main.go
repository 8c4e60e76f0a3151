// Command bench measures what the fspair rules cost a real Prometheus at scale.
//
// It serves synthetic exporter metrics for -disks VM disks (the metric names and
// labels of fspair_exporter, counters growing at the rates of the four workload
// archetypes and an idle disk), runs two Prometheus servers that scrape them,
// one with the rule files loaded and one without, and after a warm-up reports
// each rule group's evaluation time (Prometheus' own measurement, median over
// the sampled evaluations) and the CPU time the rules add per evaluation
// (CPU of the server with rules minus the one without, so scraping and the
// storage's own work cancel out).
//
//	go run ./rules/bench -disks 2000 -warmup 65m
//
// -rules rules/fleet loads the fleet's split (the per-host file and the one
// Thanos Ruler evaluates) and reports their groups apart (name@file): the
// Ruler's groups are the ones that run over every disk of a fleet. -queries
// times single PromQL expressions on a server without rules instead (what one
// rule's parts cost per series), and -hold keeps it up for ad-hoc queries.
//
// -cost measures each rule apart from what else the machine runs: after the
// warm-up the server is stopped and another started on its data that scrapes
// and evaluates nothing, and there each rule's expression is run alone on what
// the rules last recorded, costed in the server's CPU time (what evaluating it
// takes, however many cores other work holds) beside its wall time. Per group
// and in total, these add up to what one evaluation of every rule costs; the
// live evaluation times above are wall times of groups that run at once and
// share the cores with everything else. It fails unless every recording
// rule's expression returns, in every pass, about the series the live server
// held for the rule as of the costing's time (the "check" lines: a costing on
// lost inputs understates the cost). It says whether every group kept up and
// how many scrapes failed in the warm-up, and how many disks' workload classes
// had settled at the stop: a class settles 6 minutes after its last change,
// which at 10,000 disks on one core came 3-5 minutes into the warm-up, so
// 10 minutes is at the edge of the steady state (every class settled; 2,000
// and 10,000 of 10,000 in two runs of the box rules) and -warmup 12m or more
// reaches it; the fitted classifier's rules at 10,000 disks on one core fell
// behind and settled no class in 10 minutes (2026-11-30).
//
// The long-window rules read an hour of their own history; with a warm-up
// shorter than the long window they read less and cost less than in steady
// state, which the report says.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fspair/fspair/tests/alerting"
)

func main() { os.Exit(run()) }

// archetype rates per second: read, write, flush requests; read, write bytes;
// random and sequential reads and writes; durable writes.
type archetype struct {
	name                                             string
	read, write, flush, rb, wb, rr, sr, rw, sw, sync float64
}

var archetypes = []archetype{
	{"web", 90, 10, 0.1, 90 * 16384, 10 * 4096, 85, 5, 0, 10, 0},
	{"mail", 32, 64, 32, 32 * 16384, 64 * 8192, 28, 4, 52, 12, 52},
	{"fileserver", 40, 60, 0.6, 40 * 262144, 60 * 262144, 20, 20, 3, 57, 0},
	{"rfa", 65, 35, 0.35, 65 * 8192, 35 * 8192, 64, 1, 33, 2, 0},
	{"idle", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
}

var fsNames = []string{"ext4", "xfs", "btrfs"}

// Classic bucket bounds of the histograms the rules read by their buckets,
// as the exporter writes them in text (README.md, "Classic buckets"): the
// latency histograms (image file, guest) every 4x from 2 us, the host_queue
// and device stages every 8x from 4 us; the file stage has none.
var (
	latencyBounds = slotBounds(1, 2, 12)
	stageBounds   = slotBounds(2, 3, 8)
)

// slotBounds returns n bounds of the kernel's log2 slots (1 us * 2^k), from
// slot first, every step slots.
func slotBounds(first, step, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 1e-6 * math.Ldexp(1, first+i*step)
	}
	return out
}

// exposition renders the synthetic exporter's metrics at elapsed seconds.
func exposition(disks int, elapsed float64) []byte {
	var b strings.Builder
	b.Grow(disks * 16384)
	line := func(name, labels string, v float64) {
		b.WriteString(name)
		b.WriteByte('{')
		b.WriteString(labels)
		b.WriteString("} ")
		b.WriteString(strconv.FormatFloat(v, 'f', -1, 64))
		b.WriteByte('\n')
	}
	// histogram writes a classic histogram of n requests of mean seconds
	// each, all in the first bucket whose bound is at least mean.
	histogram := func(name, labels string, bounds []float64, n, mean float64) {
		for _, le := range bounds {
			line(name+"_bucket", labels+fmt.Sprintf(`,le="%g"`, le), n*float64(btoi(le >= mean)))
		}
		line(name+"_bucket", labels+`,le="+Inf"`, n)
		line(name+"_sum", labels, n*mean)
		line(name+"_count", labels, n)
	}
	for i := 0; i < disks; i++ {
		a := archetypes[i%len(archetypes)]
		dev := fmt.Sprintf("/dev/vd%d", i/100)
		hostFS := fsNames[(i/100)%3]
		k := fmt.Sprintf(`domain="vm%d",uuid="00000000-0000-0000-0000-%012d",target_device="vda",source_file="/srv/%s/vm%d.qcow2"`, i, i, hostFS, i)
		line("fspair_disk_info", k+fmt.Sprintf(`,format="qcow2",guest_fs="%s",guest_fs_source="image",host_fs="%s",host_device="%s",host_mountpoint="/srv/%s",cache="none",aio="native",discovery="libvirt"`,
			fsNames[i%3], hostFS, dev, hostFS), 1)
		t := elapsed
		per := map[string][2]float64{"read": {a.read, a.rb}, "write": {a.write, a.wb}, "flush": {a.flush, 0}, "discard": {}, "write_zeroes": {}, "allocate": {}}
		for _, op := range []string{"read", "write", "flush", "discard", "write_zeroes", "allocate"} {
			n := math.Floor(per[op][0] * t)
			l := k + `,op="` + op + `"`
			line("fspair_disk_requests_total", l, n)
			line("fspair_disk_bytes_total", l, math.Floor(per[op][1]*t))
			line("fspair_disk_request_errors_total", l, 0)
			histogram("fspair_disk_request_duration_seconds", l, latencyBounds, n, 0.001)
		}
		for _, d := range []struct {
			op                 string
			n, random, seq, by float64
		}{{"read", a.read, a.rr, a.sr, a.rb}, {"write", a.write, a.rw, a.sw, a.wb}} {
			l := k + `,op="` + d.op + `"`
			line("fspair_disk_random_requests_total", l, math.Floor(d.random*t))
			line("fspair_disk_sequential_requests_total", l, math.Floor(d.seq*t))
			line("fspair_disk_device_requests_total", l, math.Floor(d.n*t))
			line("fspair_disk_device_bytes_total", l, math.Floor(d.by*1.3*t))
			line("fspair_disk_format_metadata_requests_total", l, 0)
			for _, stage := range []string{"file", "host_queue", "device"} {
				sl := k + `,stage="` + stage + `",op="` + d.op + `"`
				n := math.Floor(d.n * t)
				if stage == "file" {
					line("fspair_disk_stage_seconds_sum", sl, n*0.0005)
					line("fspair_disk_stage_seconds_count", sl, n)
				} else {
					histogram("fspair_disk_stage_seconds", sl, stageBounds, n, 0.0005)
				}
			}
		}
		line("fspair_disk_sync_writes_total", k+`,mode="flush"`, math.Floor(a.sync*t))
		line("fspair_disk_sync_writes_total", k+`,mode="dsync"`, 0)
		for _, src := range [][2]string{{"call", "data"}, {"call", "metadata"}, {"call", "other"}, {"journal", "metadata"}} {
			l := k + `,source="` + src[0] + `",kind="` + src[1] + `"`
			line("fspair_disk_flush_device_writes_total", l, math.Floor(a.flush*2*t))
			line("fspair_disk_flush_device_write_bytes_total", l, math.Floor(a.flush*8192*t))
		}
		line("fspair_disk_flush_device_cache_flushes_total", k, math.Floor(a.flush*t))
		// One disk in three as the tracepoint mode reports one on XFS: flushes counted untimed.
		if i%3 == 1 {
			line("fspair_disk_unfollowed", k+`,op="flush",path="syscall",measure="latency"`, 1)
		}
		// The guest side: QEMU merged a fifth of the reads and writes and
		// skipped half the flushes (the guest asks more than the file sees).
		line("fspair_disk_guest_info", k+`,source="qmp",status="ok",histogram="ok"`, 1)
		for _, g := range []struct {
			op        string
			n, by, ms float64
		}{{"read", a.read * 1.25, a.rb, 0.002}, {"write", a.write * 1.25, a.wb, 0.003}, {"flush", a.flush * 2, 0, 0.005}} {
			l := k + `,op="` + g.op + `"`
			line("fspair_disk_guest_requests_total", l, math.Floor(g.n*t))
			// The exporter writes the guest's time as this counter only
			// where it writes no histogram (libvirt sources); both here, so
			// that the rule's every branch has series to read.
			line("fspair_disk_guest_request_duration_seconds_total", l, math.Floor(g.n*t)*g.ms)
			histogram("fspair_disk_guest_request_duration_seconds", l, latencyBounds, math.Floor(g.n*t), g.ms)
			if g.op != "flush" {
				line("fspair_disk_guest_bytes_total", l, math.Floor(g.by*t))
			}
		}
	}
	for j := 0; j < (disks+99)/100; j++ {
		fs := fsNames[j%3]
		d := fmt.Sprintf(`host_device="/dev/vd%d",host_fs="%s",host_mountpoint="/srv/%s"`, j, fs, fs)
		for _, kind := range []string{"data", "metadata", "other"} {
			for _, op := range []string{"read", "write"} {
				line("fspair_host_device_bytes_total", d+`,kind="`+kind+`",op="`+op+`"`, math.Floor(2e6*elapsed))
				line("fspair_host_device_requests_total", d+`,kind="`+kind+`",op="`+op+`"`, math.Floor(200*elapsed))
			}
		}
		line("fspair_host_device_vm_disks", d, 100)
	}
	line("fspair_probe_attached", `program="disk_pwrite64_enter"`, 1)
	line("fspair_probe_events_dropped_total", `reason="inflight_full"`, 0)
	line("fspair_discovery_source_up", `source="libvirt"`, 1)
	return []byte(b.String())
}

type server struct {
	name, url string
	cmd       *exec.Cmd
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startPrometheus(bin, dir, name, target string, rules []string, scrape, eval time.Duration, extra []string) (*server, error) {
	var cfg strings.Builder
	// The scrape may take its whole interval: at 10,000 disks on a busy
	// core the synthetic exporter renders and Prometheus reads the
	// exposition for longer than the default 10s, and a scrape that times
	// out marks every scraped series stale.
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", scrape, scrape, eval)
	if len(rules) > 0 {
		cfg.WriteString("rule_files:\n")
		for _, r := range rules {
			fmt.Fprintf(&cfg, "  - %q\n", r)
		}
	}
	fmt.Fprintf(&cfg, "scrape_configs:\n  - job_name: fspair\n    static_configs:\n      - targets: [%q]\n", target)
	return launch(bin, dir, name, cfg.String(), extra, 30*time.Second)
}

// launch starts Prometheus with configuration cfg on the data directory
// dir/name/data and waits up to ready for it to answer /-/ready. Its log
// goes to dir/name/prometheus.log, after that of an earlier server there.
func launch(bin, dir, name, cfg string, extra []string, ready time.Duration) (*server, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", d, err)
	}
	if err := os.WriteFile(filepath.Join(d, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("write config: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(d, "prometheus.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log: %w", err)
	}
	defer logf.Close()
	args := append([]string{"--config.file=" + filepath.Join(d, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(d, "data"), "--web.listen-address=" + addr}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (install the Debian package prometheus): %w", bin, err)
	}
	s := &server{name: name, url: "http://" + addr, cmd: cmd}
	start := time.Now()
	for said := time.Duration(0); time.Since(start) < ready; time.Sleep(500 * time.Millisecond) {
		if resp, err := http.Get(s.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		// A server on a big head replays its WAL for minutes.
		if w := time.Since(start).Truncate(30 * time.Second); w > said {
			said = w
			fmt.Fprintf(os.Stderr, "waiting for prometheus %s to be ready (its WAL replayed): %s\n", name, w)
		}
	}
	s.stop()
	return nil, fmt.Errorf("prometheus %s not ready after %s; see %s", name, ready, logf.Name())
}

func (s *server) stop() { s.stopWithin(20 * time.Second) }

// stopWithin interrupts the server and kills it if it has not exited
// within d.
func (s *server) stopWithin(d time.Duration) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// cpuSeconds is the process's user+system CPU time from /proc.
func (s *server) cpuSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu of %s: %w", s.name, err)
	}
	// Fields after the parenthesised command name; utime and stime are 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	const clkTck = 100 // USER_HZ on Linux
	return (u + st) / clkTck, nil
}

// groupTimes are Prometheus' own evaluation times of the last evaluation:
// per group, and per rule (keyed "group/rule"), in seconds, with each
// group's interval.
type groupTimes struct {
	group, rule, interval map[string]float64
}

// listedGroup is one rule group as /api/v1/rules lists it.
type listedGroup struct {
	Name           string    `json:"name"`
	File           string    `json:"file"`
	Interval       float64   `json:"interval"`
	EvaluationTime float64   `json:"evaluationTime"`
	LastEvaluation time.Time `json:"lastEvaluation"`
	Rules          []struct {
		Health         string            `json:"health"`
		LastError      string            `json:"lastError"`
		Name           string            `json:"name"`
		Query          string            `json:"query"`
		Type           string            `json:"type"`
		Labels         map[string]string `json:"labels"`
		EvaluationTime float64           `json:"evaluationTime"`
	} `json:"rules"`
}

// listGroups returns the server's rule groups, failing on a rule in error.
// The fleet's two files (rules/fleet) share group names: a name that
// repeats gets its file's, as name@file.
func (s *server) listGroups() ([]listedGroup, error) {
	resp, err := http.Get(s.url + "/api/v1/rules")
	if err != nil {
		return nil, fmt.Errorf("query rules: %w", err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []listedGroup `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("decode rules: %w", err)
	}
	seen := map[string]int{}
	for _, gr := range r.Data.Groups {
		seen[gr.Name]++
	}
	for i, gr := range r.Data.Groups {
		if seen[gr.Name] > 1 {
			r.Data.Groups[i].Name += "@" + strings.TrimSuffix(filepath.Base(gr.File), ".rules.yml")
		}
		for _, rule := range gr.Rules {
			if rule.Health == "err" {
				return nil, fmt.Errorf("rule %s in group %s fails: %s", rule.Name, r.Data.Groups[i].Name, rule.LastError)
			}
		}
	}
	return r.Data.Groups, nil
}

// ruleKey names a rule in a group: a name repeats within a group (one per
// label set), the index keeps them apart.
func ruleKey(group string, i int, name string) string {
	return fmt.Sprintf("%s/%02d %s", group, i, name)
}

func (s *server) groups() (groupTimes, error) {
	g := groupTimes{group: map[string]float64{}, rule: map[string]float64{}, interval: map[string]float64{}}
	groups, err := s.listGroups()
	if err != nil {
		return g, err
	}
	for _, gr := range groups {
		for i, rule := range gr.Rules {
			g.rule[ruleKey(gr.Name, i, rule.Name)] = rule.EvaluationTime
		}
		g.group[gr.Name] = gr.EvaluationTime
		g.interval[gr.Name] = gr.Interval
	}
	return g, nil
}

func (s *server) headSeries() string {
	// These servers do not scrape themselves: read the gauge from /metrics.
	m, err := http.Get(s.url + "/metrics")
	if err != nil {
		return "?"
	}
	defer m.Body.Close()
	mb, _ := io.ReadAll(m.Body)
	for _, l := range strings.Split(string(mb), "\n") {
		if strings.HasPrefix(l, "prometheus_tsdb_head_series ") {
			return strings.TrimPrefix(l, "prometheus_tsdb_head_series ")
		}
	}
	return "?"
}

func median(v []float64) float64 {
	sort.Float64s(v)
	if len(v) == 0 {
		return math.NaN()
	}
	return v[len(v)/2]
}

// options are the bench's flags.
type options struct {
	disks, samples       int
	bin, rulesDir        string
	warmup, scrape, eval time.Duration
	hold, cost           bool
	queries              string
	extra                []string
}

func run() int {
	var o options
	flag.IntVar(&o.disks, "disks", 2000, "synthetic VM disks (100 per host device)")
	flag.StringVar(&o.bin, "prometheus", "", "Prometheus binary (default: the pinned one of deploy/versions.env, scripts/promstack.sh)")
	flag.StringVar(&o.rulesDir, "rules", "rules", "directory with the generated rule files")
	flag.DurationVar(&o.warmup, "warmup", 15*time.Minute, "scrape and evaluate this long before measuring (>= the long window for steady state)")
	flag.IntVar(&o.samples, "samples", 5, "evaluations to measure")
	flag.DurationVar(&o.scrape, "scrape", 15*time.Second, "scrape interval")
	flag.DurationVar(&o.eval, "eval", time.Minute, "rule evaluation interval")
	extra := flag.String("prometheus-flags", "", "more flags for both servers, space-separated (for example --enable-feature=concurrent-rule-eval)")
	flag.StringVar(&o.queries, "queries", "", "after the warm-up, time each PromQL expression of this file (one a line, # comments) on a server without rules, print them and stop; with -cost, cost them beside the rules on the server with them (a rewritten rule against the rule as it is)")
	flag.BoolVar(&o.cost, "cost", false, "after the warm-up, stop the server, start one on its data that scrapes and evaluates nothing, and cost each rule alone there on what the rules last recorded: the server's CPU time and the query's wall time, median of -samples runs; fails if a rule reads fewer series than the live server held (no server without rules)")
	flag.BoolVar(&o.hold, "hold", false, "after the warm-up, keep the server with rules up for ad-hoc PromQL (its URL printed) until interrupted, and measure nothing")
	flag.Parse()
	o.extra = strings.Fields(*extra)
	if n := btoi(o.hold) + btoi(o.cost) + btoi(o.queries != "" && !o.cost); n > 1 {
		fmt.Fprintln(os.Stderr, "bench: -hold, -cost and -queries exclude each other (but -cost takes -queries)")
		return 2
	}
	if o.bin == "" {
		p, err := alerting.PinnedBinary("prometheus")
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		o.bin = p
	}
	if err := bench(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

func bench(o options) error {
	var exprs []string
	if o.queries != "" {
		b, err := os.ReadFile(o.queries)
		if err != nil {
			return fmt.Errorf("read queries: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				exprs = append(exprs, l)
			}
		}
		if len(exprs) == 0 {
			return fmt.Errorf("%s has no query", o.queries)
		}
	}
	ruleFiles, err := filepath.Glob(filepath.Join(o.rulesDir, "*.rules.yml"))
	if err != nil || len(ruleFiles) == 0 {
		return fmt.Errorf("no *.rules.yml in %s: run from the repository root or pass -rules", o.rulesDir)
	}
	alerts, _ := filepath.Glob(filepath.Join(o.rulesDir, "*.alerts.yml"))
	ruleFiles = append(ruleFiles, alerts...)
	for i, f := range ruleFiles {
		if ruleFiles[i], err = filepath.Abs(f); err != nil {
			return fmt.Errorf("resolve %s: %w", f, err)
		}
	}
	dir, err := os.MkdirTemp("", "fspair-rules-bench-")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(dir)

	start := time.Now()
	var mu sync.Mutex
	cache := map[int64][]byte{}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		// Both servers scrape within the same second; render once per second.
		sec := int64(time.Since(start).Seconds())
		mu.Lock()
		body, ok := cache[sec]
		if !ok {
			body = exposition(o.disks, float64(sec))
			cache = map[int64][]byte{sec: body}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	defer srv.Shutdown(context.Background())
	target := l.Addr().String()

	if len(exprs) > 0 && !o.cost {
		// Timed alone: no rule evaluation competes with the queries.
		ruleFiles = nil
	}
	with, err := startPrometheus(o.bin, dir, "with-rules", target, ruleFiles, o.scrape, o.eval, o.extra)
	if err != nil {
		return err
	}
	defer with.stop()
	if o.hold {
		return holdOpen(with, o.warmup)
	}
	if o.cost {
		return ruleCost(with, dir, o, ruleFiles, exprs)
	}
	if len(exprs) > 0 {
		return timeQueries(with, o.disks, o.warmup, exprs)
	}
	without, err := startPrometheus(o.bin, dir, "without-rules", target, nil, o.scrape, o.eval, o.extra)
	if err != nil {
		return err
	}
	defer without.stop()

	fmt.Printf("# fspair rules bench %s: %d disks, rules %s, scrape %s, evaluation %s, warm-up %s, %d evaluations measured\n",
		time.Now().UTC().Format(time.RFC3339), o.disks, strings.Join(relPaths(ruleFiles), " "), o.scrape, o.eval, o.warmup, o.samples)
	if len(o.extra) > 0 {
		fmt.Printf("# prometheus flags: %s\n", strings.Join(o.extra, " "))
	}
	warmUp(o.warmup)
	if _, err := with.groups(); err != nil {
		return err
	}
	c0w, err := with.cpuSeconds()
	if err != nil {
		return err
	}
	c0o, err := without.cpuSeconds()
	if err != nil {
		return err
	}
	times, ruleTimes := map[string][]float64{}, map[string][]float64{}
	var intervals map[string]float64
	for i := 0; i < o.samples; i++ {
		time.Sleep(o.eval)
		g, err := with.groups()
		if err != nil {
			return err
		}
		for name, t := range g.group {
			times[name] = append(times[name], t)
		}
		for name, t := range g.rule {
			ruleTimes[name] = append(ruleTimes[name], t)
		}
		intervals = g.interval
		fmt.Fprintf(os.Stderr, "measured %d of %d evaluations\n", i+1, o.samples)
	}
	c1w, _ := with.cpuSeconds()
	c1o, _ := without.cpuSeconds()
	var names []string
	for n := range times {
		names = append(names, n)
	}
	sort.Strings(names)
	var sum, worst, perMinute float64
	for _, n := range names {
		m := median(times[n])
		sum += m
		worst = math.Max(worst, m)
		iv := intervals[n]
		if iv <= 0 {
			iv = o.eval.Seconds()
		}
		perMinute += m * 60 / iv
		fmt.Printf("group %-24s every %4.0fs %8.1f ms (median; min %.1f max %.1f)\n", n, iv, m*1000, minOf(times[n])*1000, maxOf(times[n])*1000)
	}
	n := float64(o.samples)
	fmt.Printf("groups sum %.3f s, slowest %.3f s per evaluation (wall, as Prometheus measures it); %.3f s per minute with each group at its interval\n", sum, worst, perMinute)
	printTopRules(ruleTimes, 15)
	fmt.Printf("cpu per evaluation: with rules %.2f s, without %.2f s, rules add %.2f s\n",
		(c1w-c0w)/n, (c1o-c0o)/n, ((c1w-c0w)-(c1o-c0o))/n)
	fmt.Printf("head series: with rules %s, without %s\n", with.headSeries(), without.headSeries())
	if o.warmup < time.Hour {
		fmt.Println("note: warm-up shorter than 1h: the long-window rules read less history than in steady state")
	}
	return nil
}

// warmUp sleeps d, saying so each minute.
func warmUp(d time.Duration) {
	for waited := time.Duration(0); waited < d; waited += time.Minute {
		fmt.Fprintf(os.Stderr, "warming up: %s of %s\n", waited, d)
		time.Sleep(min(time.Minute, d-waited))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// timeQueries waits out the warm-up and prints each expression's evaluation
// time as the server measures it (stats evalTotalTime, median of 3 runs),
// its result's series and the time per result series.
func timeQueries(s *server, disks int, warmup time.Duration, exprs []string) error {
	time.Sleep(warmup)
	fmt.Printf("# query times at %d disks after %s (evalTotalTime, median of 3)\n", disks, warmup)
	for _, e := range exprs {
		var times []float64
		n := 0
		for i := 0; i < 3; i++ {
			resp, err := http.Get(s.url + "/api/v1/query?stats=all&query=" + url.QueryEscape(e))
			if err != nil {
				return fmt.Errorf("query %s: %w", e, err)
			}
			var r queryAnswer
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if err != nil {
				return fmt.Errorf("decode %s: %w", e, err)
			}
			if r.Status != "success" {
				return fmt.Errorf("query %s: %s", e, r.Error)
			}
			n = len(r.Data.Result)
			times = append(times, r.Data.Stats.Timings.EvalTotalTime)
		}
		m := median(times)
		fmt.Printf("%8.1f ms %7d series %6.2f us a series  %s\n", m*1000, n, m*1e6/float64(max(n, 1)), e)
	}
	return nil
}

// queryAnswer is an instant query's answer with its statistics (stats=all).
type queryAnswer struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []json.RawMessage `json:"result"`
		Stats  struct {
			Timings struct {
				EvalTotalTime float64 `json:"evalTotalTime"`
			} `json:"timings"`
		} `json:"stats"`
	} `json:"data"`
}

// relPaths shortens absolute rule file paths to the working directory's.
func relPaths(files []string) []string {
	wd, _ := os.Getwd()
	out := make([]string, len(files))
	for i, f := range files {
		if r, err := filepath.Rel(wd, f); err == nil {
			f = r
		}
		out[i] = f
	}
	return out
}

// holdOpen waits out the warm-up, prints the server's URL and keeps it up
// until the process is interrupted: a loaded Prometheus to time queries on.
func holdOpen(s *server, warmup time.Duration) error {
	time.Sleep(warmup)
	fmt.Printf("prometheus with rules at %s (data in %s); interrupt to stop\n", s.url, s.name)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	return nil
}

// printTopRules prints the n rules with the highest median evaluation time.
func printTopRules(times map[string][]float64, n int) {
	type rt struct {
		name string
		t    float64
	}
	var all []rt
	for name, v := range times {
		all = append(all, rt{name, median(v)})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].t > all[j].t })
	for i := 0; i < len(all) && i < n; i++ {
		fmt.Printf("rule %-90s %8.1f ms\n", all[i].name, all[i].t*1000)
	}
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}
