package validate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/alerting"
	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

// The series and alert under test.
const (
	classRule   = "domain_disk:fspair_workload_class:info"
	scoreRule   = "domain_disk:fspair_workload_score:ratio"
	confRule    = "domain_disk:fspair_workload_class:confidence"
	poorPairing = "FspairPoorPairing"
	runbookPath = "runbooks/FspairPoorPairing.md"
)

// writebackDelay is how long a guest holds asynchronous writes before they
// reach the disk: Linux writes dirty pages back once they are 30 s old
// (vm.dirty_expire_centisecs = 3000, Documentation/admin-guide/sysctl/vm.rst).
// The warm-up of a run is the rule window plus this.
const writebackDelay = 30 * time.Second

// alertGrace is how long after a workload run a notification of it may
// still arrive: one evaluation, group_wait and the webhook's round trip.
const alertGrace = 30 * time.Second

// config is one validation run.
type config struct {
	kind         string
	pairs        []workload.Pair
	workloads    []workload.Workload
	rules        alerting.RuleOptions
	scrape, eval time.Duration
	runtime      time.Duration // fio runtime per workload
	record       bool          // save testdata/results-<kind>.json and splice RESULTS.md
	tables       bool          // log the per-evaluation table of every run, not only failed ones
	command      string        // how to repeat the run, for the record
	// features: the exporter's window features of each run of one of
	// workload.Workloads must meet what tests/workload's classifier is
	// built on (workload.Mismatches: the feature ranges of Expect, and
	// Classify naming the workload), over the same window as the class.
	features bool
}

// window is the short rule window, over which the class is computed.
func (c config) window() time.Duration {
	d, err := time.ParseDuration(c.rules.Short)
	if err != nil {
		return time.Minute // not reached: runValidation checks it first
	}
	return d
}

// warmup is the part of a run not counted in the share right: the short
// rule window must fill with the new workload, and the workload's
// asynchronous writes reach the disk only after the guest's write-back
// delay.
func (c config) warmup() time.Duration { return c.window() + writebackDelay }

// env is what every batch of guests shares: one exporter, one Prometheus
// with Alertmanager and webhook, and the knowledge base's verdicts.
type env struct {
	cfg      config
	ex       *workload.Exporter
	stack    *alerting.Stack
	prom     Prom
	verdicts map[string]string // verdictKey -> best|worst|contested

	mu  sync.Mutex
	res *Results
}

func verdictKey(w, guestFS, hostFS string) string { return w + " " + guestFS + "/" + hostFS }

// verdict is the knowledge base's verdict on p for class c ("" unlisted).
func (e *env) verdict(c string, p workload.Pair) string {
	return e.verdicts[verdictKey(c, p.GuestFS, p.HostFS)]
}

// runValidation runs cfg.pairs two at a time, each guest running
// cfg.workloads in turn, and checks the live class and FspairPoorPairing
// against the acceptance criteria of issue 4.
func runValidation(t *testing.T, cfg config) *Results {
	began := time.Now()
	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-time.Minute))
		defer cancel()
	}
	res := &Results{
		Kind: cfg.kind, Command: cfg.command,
		Settings: Settings{
			Short: cfg.rules.Short, Long: cfg.rules.Long, ForScale: cfg.rules.ForScale, Settle: cfg.rules.Settle,
			ScrapeSeconds: cfg.scrape.Seconds(), EvaluationSeconds: cfg.eval.Seconds(),
			RuntimeSeconds: cfg.runtime.Seconds(), WarmupSeconds: cfg.warmup().Seconds(),
			Concurrent: min(2, len(cfg.pairs)),
			Guest:      "TCG, 1 vCPU, 512 MiB, one 1 GiB virtio-blk disk, cache=none aio=native, own loop-backed host file system",
		},
	}
	if _, err := time.ParseDuration(cfg.rules.Short); err != nil {
		t.Fatalf("short window %q: %v", cfg.rules.Short, err)
	}
	e := &env{cfg: cfg, res: res}
	stage := func(format string, args ...any) {
		t.Logf("[%6.0fs] %s", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}

	stage("build exporter, generate rules (-short %s -long %s -for-scale %g)", cfg.rules.Short, cfg.rules.Long, cfg.rules.ForScale)
	bin, err := workload.BuildExporter(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rulesDir := alerting.GenerateRules(t, cfg.rules)
	res.Settings.PoorPairingFor, err = alertFor(rulesDir, poorPairing)
	if err != nil {
		t.Fatal(err)
	}

	e.ex, err = workload.StartExporter(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.ex.Close()
		if t.Failed() {
			t.Logf("exporter log (tail):\n%s", tail(e.ex.Log(), 40))
		}
	})
	addr := strings.TrimSuffix(strings.TrimPrefix(e.ex.URL, "http://"), "/metrics")
	e.stack = alerting.Start(t, alerting.Options{
		RulesDir:           rulesDir,
		ScrapeTargets:      []alerting.Target{{Address: addr}},
		ScrapeInterval:     cfg.scrape,
		EvaluationInterval: cfg.eval,
	})
	e.prom = Prom{URL: e.stack.PrometheusURL()}
	want, err := verdictRules(rulesDir)
	if err != nil {
		t.Fatal(err)
	}
	e.verdicts, err = loadVerdicts(ctx, e.stack, want)
	if err != nil {
		t.Fatal(err)
	}
	stage("prometheus %s, alertmanager %s, exporter %s; %d knowledge-base verdicts",
		e.stack.PrometheusURL(), e.stack.AlertmanagerURL(), addr, len(e.verdicts))

	for i := 0; i < len(cfg.pairs); i += 2 {
		batch := cfg.pairs[i:min(i+2, len(cfg.pairs))]
		names := make([]string, len(batch))
		for j, p := range batch {
			names[j] = p.String()
		}
		t.Run(strings.ReplaceAll(strings.Join(names, "+"), "/", "-"), func(t *testing.T) {
			e.runBatch(ctx, t, batch, stage)
		})
	}

	res.Updated = time.Now().UTC().Truncate(time.Second)
	res.Seconds = time.Since(began).Round(time.Second).Seconds()
	res.Passed = !t.Failed() && pairsPassed(res.Pairs)
	t.Logf("results:\n%s", Render(cfg.kind, res))
	if cfg.record {
		if err := saveResults(res); err != nil {
			t.Error(err)
		} else {
			t.Logf("recorded in %s and RESULTS.md", ResultsFile(cfg.kind))
		}
	}
	stage("done")
	return res
}

// saveResults writes the results file of res.Kind and splices RESULTS.md.
func saveResults(res *Results) error {
	old, err := LoadResults(ResultsFile(res.Kind))
	if err != nil {
		return err
	}
	res = Merge(old, res)
	if err := res.Save(ResultsFile(res.Kind)); err != nil {
		return err
	}
	doc, err := os.ReadFile("RESULTS.md")
	if err != nil {
		return fmt.Errorf("read RESULTS.md: %w", err)
	}
	out, err := Splice(string(doc), res.Kind, res)
	if err != nil {
		return err
	}
	if err := os.WriteFile("RESULTS.md", []byte(out), 0o644); err != nil {
		return fmt.Errorf("write RESULTS.md: %w", err)
	}
	return nil
}

// alertFor returns the `for` of alert name in the generated rules.
func alertFor(rulesDir, name string) (string, error) {
	files, err := filepath.Glob(filepath.Join(rulesDir, "*.yml"))
	if err != nil {
		return "", fmt.Errorf("list rule files: %w", err)
	}
	for _, f := range files {
		rf, err := alerting.ReadRuleFile(f)
		if err != nil {
			return "", err
		}
		for _, a := range rf.Alerts() {
			if a.Name == name {
				return a.For, nil
			}
		}
	}
	return "", fmt.Errorf("find alert %s in the rules generated into %s: not there", name, rulesDir)
}

// verdictRules counts the rules that record a verdict of the knowledge
// base in the generated rules dir: each records one series.
func verdictRules(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "fspair-kdb.rules.yml"))
	if err != nil {
		return 0, err
	}
	n := strings.Count(string(b), "record: fspair_kdb_pair_verdict\n")
	if n == 0 {
		return 0, fmt.Errorf("%s records no fspair_kdb_pair_verdict", filepath.Join(dir, "fspair-kdb.rules.yml"))
	}
	return n, nil
}

// loadVerdicts reads the knowledge base's verdicts from the rules'
// output once all want of them are there: Prometheus writes each rule's
// series as it evaluates it, so a read during the knowledge base group's
// first evaluation sees only some (4 of 33 once, and the test then took
// the others for pairs without a verdict).
func loadVerdicts(ctx context.Context, s *alerting.Stack, want int) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got := 0
	for {
		ss, err := s.Query(ctx, "fspair_kdb_pair_verdict")
		if err == nil && len(ss) >= want {
			m := map[string]string{}
			for _, x := range ss {
				m[verdictKey(x.Labels["workload"], x.Labels["guest_fs"], x.Labels["host_fs"])] = x.Labels["verdict"]
			}
			return m, nil
		}
		got = len(ss)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read fspair_kdb_pair_verdict: %d of the %d series the rules record (last error %v): %w", got, want, err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// disk is one guest of a batch and what was recorded for it.
type disk struct {
	g      *workload.Guest
	name   string
	result *PairResult
	rec    *workload.Recorder // the disk's scrapes, when the config checks features
}

// featureInterval is how often a disk's features are scraped: the
// measurement runs' 2 s, so a 1 minute window spans about 30 scrapes.
const featureInterval = 2 * time.Second

// runBatch boots one guest per pair (at most two: the machine has two
// cores and a TCG guest keeps one busy), runs every workload in all of
// them in step, and checks each run.
func (e *env) runBatch(ctx context.Context, t *testing.T, pairs []workload.Pair, stage func(string, ...any)) {
	cfg := e.cfg
	l := lab.ForTest(t)
	batchStart := time.Now()
	var disks []*disk
	// What the batch measured goes into e.res even when it stops early;
	// a failure the checks did not record (a guest that did not boot, a
	// workload that did not run) is recorded against every pair of the
	// batch.
	t.Cleanup(func() {
		recorded := false
		for _, d := range disks {
			recorded = recorded || !pairsPassed([]PairResult{*d.result})
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, d := range disks {
			if t.Failed() && !recorded {
				d.result.Problems = append(d.result.Problems, "the batch failed outside the checks: see the test log")
			}
			e.res.Pairs = append(e.res.Pairs, *d.result)
		}
	})
	for _, p := range pairs {
		name := "validate-" + strings.ReplaceAll(p.String(), "/", "-")
		stage("boot %s (%s)", name, p)
		g, err := workload.BootPair(ctx, l, p, name)
		if err != nil {
			t.Fatal(err)
		}
		disks = append(disks, &disk{g: g, name: name, result: &PairResult{Pair: p.String(), Domain: name, Measured: batchStart.UTC().Truncate(time.Second)}})
	}
	for _, d := range disks {
		info, err := e.ex.WaitDisk(ctx, d.g.Disk.File, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		p := d.g.Pair
		if info.Info["guest_fs"] != p.GuestFS || info.Info["host_fs"] != p.HostFS || info.Info["format"] != p.Format {
			t.Fatalf("%s: exporter labels %v, want guest_fs=%s host_fs=%s format=%s", d.name, info.Info, p.GuestFS, p.HostFS, p.Format)
		}
		if cfg.features {
			d.rec = e.ex.Record(ctx, d.g.Disk.File, featureInterval)
			rec := d.rec
			t.Cleanup(func() {
				if _, err := rec.Stop(); err != nil {
					t.Logf("%s: feature scrapes that failed (those points are missing): %v", d.name, err)
				}
			})
		}
	}

	// Every workload's files are laid out first, so that each switch is
	// one workload's fio run following another's in the running guest.
	// Laying out files is a burst of synchronous writes (fio creates,
	// then sync); done right before a run it would sit in the rule window
	// for a whole window and, for web, which writes almost nothing, hold
	// the class off web for all of a 5 minute window.
	marks := []mark{{"prepare", time.Now()}}
	stage("lay out the files of %v in %d guests", cfg.workloads, len(disks))
	if err := parallel(disks, func(d *disk) error {
		for _, w := range cfg.workloads {
			if err := workload.Prepare(ctx, d.g.VM, w); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// An idle lead-in of one rule window: the first run switches from
	// idle, not from the layout.
	lead := cfg.window() + cfg.eval
	marks = append(marks, mark{"idle", time.Now()})
	stage("idle for %s", lead)
	sleepUntil(ctx, time.Now().Add(lead))

	results := make([][]WorkloadResult, len(disks))
	for i := range results {
		results[i] = make([]WorkloadResult, len(cfg.workloads))
	}
	var checks sync.WaitGroup
	for k, w := range cfg.workloads {
		stage("%s: run %s in %d guests", w, cfg.runtime, len(disks))
		starts := make([]time.Time, len(disks))
		err := parallelIdx(disks, func(i int, d *disk) error {
			if d.rec != nil {
				d.rec.SetPhase(ctx, string(w))
			}
			starts[i] = time.Now()
			_, err := workload.Run(ctx, d.g.VM, w, cfg.runtime)
			if d.rec != nil {
				d.rec.SetPhase(ctx, "after:"+string(w))
			}
			return err
		})
		earliest, latest := starts[0], starts[0]
		for _, s := range starts {
			if s.Before(earliest) {
				earliest = s
			}
			if s.After(latest) {
				latest = s
			}
		}
		marks = append(marks, mark{string(w), earliest}, mark{"after " + string(w), latest.Add(cfg.runtime)})
		if err != nil {
			checks.Wait()
			collect(disks, results)
			t.Fatal(err)
		}
		// The next run starts at once; this one is checked meanwhile, once
		// the evaluation at its end (and a notification sent just before)
		// has landed.
		checks.Add(1)
		go func() {
			defer checks.Done()
			sleepUntil(ctx, latest.Add(cfg.runtime+cfg.eval+5*time.Second))
			for i, d := range disks {
				wr, err := e.checkRun(ctx, t, d, w, starts[i])
				if err != nil {
					wr = WorkloadResult{Workload: string(w), Problems: []string{"check failed: " + err.Error()}}
				}
				wr.Problems = append(wr.Problems, e.checkFeatures(t, d, w, starts[i])...)
				results[i][k] = wr
				status := "ok"
				if len(wr.Problems) > 0 {
					status = "FAIL: " + strings.Join(wr.Problems, "; ")
					t.Errorf("%s %s: %s", d.g.Pair, w, strings.Join(wr.Problems, "; "))
				}
				stage("%s %s: right %d/%d (%.2f), first right %s, settled %s, flaps %d, classes %s; %s: %s; %s",
					d.g.Pair, w, wr.Right, wr.Evaluations, wr.ShareRight, fmtSecs(wr.FirstRightSeconds),
					fmtSecs(wr.SettleSeconds), wr.Flaps, FormatCounts(wr.Classes), poorPairing, fmtAlert(wr.Alert), status)
			}
		}()
	}
	checks.Wait()
	collect(disks, results)

	// No FspairPoorPairing may ever name a class the pair is not worst
	// for, in a run or between runs (pending counts: it is on its way).
	end := time.Now()
	for _, d := range disks {
		evs, err := e.alertEvents(ctx, d, marks, batchStart, end)
		if err != nil {
			t.Fatal(err)
		}
		d.result.Alerts = evs
		if len(evs) > 0 {
			t.Logf("%s: every %s: %v", d.g.Pair, poorPairing, evs)
		}
		probs, err := e.checkNoFalseAlerts(ctx, d, batchStart, end)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range probs {
			t.Errorf("%s: %s", d.g.Pair, p)
		}
		d.result.Problems = append(d.result.Problems, probs...)
	}
}

// checkRun analyses one workload run on one disk: the class at every
// evaluation, and FspairPoorPairing.
func (e *env) checkRun(ctx context.Context, t *testing.T, d *disk, w workload.Workload, start time.Time) (WorkloadResult, error) {
	cfg := e.cfg
	// A variant (tests/workload/jobs/CLASS-NAME.fio) is right when classed as its class.
	win := Window{Want: string(w.Class()), Start: start, Runtime: cfg.runtime, Warmup: cfg.warmup(), Interval: cfg.eval}
	sel := fmt.Sprintf(`{source_file=%q}`, d.g.Disk.File)
	ss, err := e.prom.Samples(ctx, classRule+sel, start, win.End())
	if err != nil {
		return WorkloadResult{}, err
	}
	evals := ClassTimeline(ss)
	o := Analyze(evals, win)
	verdict := e.verdict(string(w.Class()), d.g.Pair)
	wr := Record(string(w), verdict, o)
	wr.Problems = Acceptance.Check(o)
	for _, s := range ss {
		for _, l := range []string{"instance", "domain", "target_device", "source_file"} {
			if s.Labels[l] == "" {
				wr.Problems = append(wr.Problems, fmt.Sprintf("%s series %v lacks label %s", classRule, s.Labels, l))
			}
		}
		if s.Labels["domain"] != d.name {
			wr.Problems = append(wr.Problems, fmt.Sprintf("%s series has domain %q, want %q", classRule, s.Labels["domain"], d.name))
		}
	}

	a, probs, err := e.checkAlert(ctx, d, w, win, verdict)
	if err != nil {
		return wr, err
	}
	wr.Alert = a
	wr.Problems = append(wr.Problems, probs...)

	t.Logf("%s %s class timeline: %s", d.g.Pair, w, timeline(evals, start))
	if len(wr.Problems) > 0 || cfg.tables {
		tab, err := e.evalTable(ctx, d, win, evals)
		if err != nil {
			t.Logf("%s %s: per-evaluation table: %v", d.g.Pair, w, err)
		} else {
			t.Logf("%s %s: every evaluation from the switch (t in s; scores and features as the rules saw them):\n%s", d.g.Pair, w, tab)
		}
	}
	return wr, nil
}

// checkFeatures checks the window features of the run of w that started
// at start on d, from the disk's own scrapes (config.features), over the
// run's part after the warm-up, which the class is judged on too: the
// previous workload's writes out of the rule window and the guest's
// write-back, and this workload alone. A variant promises no exact mix
// (tests/workload TestJobs), so only the four workloads are checked.
func (e *env) checkFeatures(t *testing.T, d *disk, w workload.Workload, start time.Time) []string {
	if d.rec == nil || w.Class() != w {
		return nil
	}
	ph := workload.Phase{Workload: w, Start: start, Runtime: e.cfg.runtime}
	f, span, err := ph.Window(d.rec.Points(), e.cfg.warmup())
	if err != nil {
		return []string{"features: " + err.Error()}
	}
	t.Logf("%s %s: features over %.0f s from %s into the run:\n%s", d.g.Pair, w, span.Seconds(), e.cfg.warmup(), workload.Describe(f))
	var probs []string
	for _, m := range workload.Mismatches(w, f) {
		probs = append(probs, "features: "+m)
	}
	return probs
}

// checkAlert reads what FspairPoorPairing did for the disk with the run's
// class: from Prometheus (ALERTS: pending, firing) and from the webhook
// (delivered by the Alertmanager). A worst pair must deliver it with its
// runbook; any other must not raise it.
func (e *env) checkAlert(ctx context.Context, d *disk, w workload.Workload, win Window, verdict string) (AlertResult, []string, error) {
	a := AlertResult{Expected: verdict == "worst"}
	var probs []string
	sel := fmt.Sprintf(`ALERTS{alertname=%q, source_file=%q, class=%q}`, poorPairing, d.g.Disk.File, string(w.Class()))
	ss, err := e.prom.Samples(ctx, sel, win.Start, win.End())
	if err != nil {
		return a, nil, err
	}
	for _, s := range ss {
		if len(s.Points) == 0 {
			continue
		}
		off := s.Points[0].T.Sub(win.Start).Round(time.Second).Seconds()
		switch s.Labels["alertstate"] {
		case "pending":
			a.PendingSeconds = minPtr(a.PendingSeconds, off)
		case "firing":
			a.FiringSeconds = minPtr(a.FiringSeconds, off)
		}
	}
	// Notifications that Prometheus sent before the run ended may still
	// be on their way.
	deadline := win.End().Add(alertGrace)
	for {
		for _, n := range e.stack.Alerts() {
			if n.Name() != poorPairing || n.Status != "firing" || n.Labels["source_file"] != d.g.Disk.File ||
				n.Labels["class"] != string(w.Class()) || n.Received.Before(win.Start) || n.Received.After(deadline) {
				continue
			}
			a.Notifications++
			if a.DeliveredSeconds == nil {
				off := n.Received.Sub(win.Start).Round(time.Second).Seconds()
				a.DeliveredSeconds = &off
				a.Receiver = n.Receiver
				a.RunbookURL = n.Annotations["runbook_url"]
				if n.Labels["guest_fs"] != d.g.Pair.GuestFS || n.Labels["host_fs"] != d.g.Pair.HostFS {
					probs = append(probs, fmt.Sprintf("%s labels guest_fs=%s host_fs=%s, want %s/%s",
						poorPairing, n.Labels["guest_fs"], n.Labels["host_fs"], d.g.Pair.GuestFS, d.g.Pair.HostFS))
				}
			}
		}
		if a.DeliveredSeconds != nil || !a.Expected || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleepUntil(ctx, time.Now().Add(time.Second))
	}
	switch {
	case a.Expected && a.DeliveredSeconds == nil:
		probs = append(probs, fmt.Sprintf("%s{class=%q} not delivered to the webhook by %s after the switch (pending %s, firing %s)",
			poorPairing, w.Class(), deadline.Sub(win.Start).Round(time.Second), fmtOpt(a.PendingSeconds), fmtOpt(a.FiringSeconds)))
	case a.Expected && !strings.HasSuffix(a.RunbookURL, runbookPath):
		probs = append(probs, fmt.Sprintf("%s runbook_url %q, want a URL of %s", poorPairing, a.RunbookURL, runbookPath))
	case !a.Expected && (a.PendingSeconds != nil || a.FiringSeconds != nil || a.DeliveredSeconds != nil):
		probs = append(probs, fmt.Sprintf("%s{class=%q} raised on a pair the knowledge base calls %q for it (pending %s, firing %s, delivered %s)",
			poorPairing, w.Class(), verdict, fmtOpt(a.PendingSeconds), fmtOpt(a.FiringSeconds), fmtOpt(a.DeliveredSeconds)))
	}
	if !a.Expected {
		// A workload on a pair that is not worst for it must not raise
		// the alert under any class once the warm-up is over. Before
		// that the window still holds the previous stage (the file
		// layout of Prepare syncs like mail), and the CI's scaled `for`
		// is shorter than that: such episodes are recorded (Alerts of
		// the pair), not failed.
		ss, err := e.prom.Samples(ctx, fmt.Sprintf(`ALERTS{alertname=%q, source_file=%q}`, poorPairing, d.g.Disk.File),
			win.Start.Add(win.Warmup), win.End())
		if err != nil {
			return a, nil, err
		}
		for _, s := range ss {
			if len(s.Points) > 0 {
				probs = append(probs, fmt.Sprintf("%s{class=%q} %s %.0fs after the switch to %s, on a pair the knowledge base calls %q for %s",
					poorPairing, s.Labels["class"], s.Labels["alertstate"], s.Points[0].T.Sub(win.Start).Seconds(), w, verdict, w))
			}
		}
	}
	return a, probs, nil
}

// checkNoFalseAlerts lists every FspairPoorPairing, pending or firing in
// Prometheus or delivered to the webhook, for the disk between from and to
// whose class the pair is not worst for.
func (e *env) checkNoFalseAlerts(ctx context.Context, d *disk, from, to time.Time) ([]string, error) {
	ss, err := e.prom.Samples(ctx, fmt.Sprintf(`ALERTS{alertname=%q, source_file=%q}`, poorPairing, d.g.Disk.File), from, to)
	if err != nil {
		return nil, err
	}
	var probs []string
	for _, s := range ss {
		c := s.Labels["class"]
		if v := e.verdict(c, d.g.Pair); v != "worst" && len(s.Points) > 0 {
			probs = append(probs, fmt.Sprintf("%s %s for class %q (verdict %q) at %s, %d evaluations",
				poorPairing, s.Labels["alertstate"], c, v, s.Points[0].T.Format("15:04:05"), len(s.Points)))
		}
	}
	for _, n := range e.stack.Alerts() {
		if n.Name() != poorPairing || n.Labels["source_file"] != d.g.Disk.File || n.Received.Before(from) {
			continue
		}
		if c := n.Labels["class"]; e.verdict(c, d.g.Pair) != "worst" {
			probs = append(probs, fmt.Sprintf("%s notification (%s) for class %q (verdict %q) received at %s",
				poorPairing, n.Status, c, e.verdict(c, d.g.Pair), n.Received.Format("15:04:05")))
		}
	}
	return probs, nil
}

// collect hands each disk the results of its runs that were checked.
func collect(disks []*disk, results [][]WorkloadResult) {
	for i, d := range disks {
		for _, r := range results[i] {
			if r.Workload != "" {
				d.result.Workloads = append(d.result.Workloads, r)
			}
		}
	}
}

// mark is the start of a stage of the guests of a batch: preparing a
// workload, running it, or after it.
type mark struct {
	name string
	at   time.Time
}

// stageAt names the stage t falls in and the time since it began.
func stageAt(marks []mark, t time.Time) (string, time.Duration) {
	name, at := "boot", time.Time{}
	for _, m := range marks {
		if m.at.After(t) {
			break
		}
		name, at = m.name, m.at
	}
	if at.IsZero() {
		return name, 0
	}
	return name, t.Sub(at)
}

// alertEvents lists the disk's FspairPoorPairing episodes in Prometheus
// (ALERTS, pending and firing, split where a gap of more than two
// evaluations shows a new episode) and the notifications the webhook
// received, in time order.
func (e *env) alertEvents(ctx context.Context, d *disk, marks []mark, from, to time.Time) ([]AlertEvent, error) {
	ss, err := e.prom.Samples(ctx, fmt.Sprintf(`ALERTS{alertname=%q, source_file=%q}`, poorPairing, d.g.Disk.File), from, to)
	if err != nil {
		return nil, err
	}
	type timed struct {
		at time.Time
		ev AlertEvent
	}
	var out []timed
	add := func(kind, class string, first, last time.Time, episode bool) {
		during, off := stageAt(marks, first)
		ev := AlertEvent{Kind: kind, Class: class, During: during, At: off.Round(time.Second).Seconds()}
		if episode {
			ev.Seconds = (last.Sub(first) + e.cfg.eval).Round(time.Second).Seconds()
		}
		out = append(out, timed{first, ev})
	}
	for _, s := range ss {
		for i := 0; i < len(s.Points); {
			j := i
			for j+1 < len(s.Points) && s.Points[j+1].T.Sub(s.Points[j].T) <= 2*e.cfg.eval {
				j++
			}
			add(s.Labels["alertstate"], s.Labels["class"], s.Points[i].T, s.Points[j].T, true)
			i = j + 1
		}
	}
	for _, n := range e.stack.Alerts() {
		if n.Name() != poorPairing || n.Labels["source_file"] != d.g.Disk.File || n.Received.Before(from) || n.Received.After(to) {
			continue
		}
		kind := "delivered"
		if n.Status == "resolved" {
			kind = "resolved"
		}
		add(kind, n.Labels["class"], n.Received, n.Received, false)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	evs := make([]AlertEvent, len(out))
	for i, x := range out {
		evs[i] = x.ev
	}
	return evs, nil
}

// feature is one column of the per-evaluation table: a PromQL expression
// over the disk's recording rules, %s the disk selector's matchers.
type feature struct{ name, expr string }

// features are the classifier's inputs and distances (group fspair.workload)
// and, for context, the per-disk features of group fspair.disk over the
// short window w they come from.
func features(w string) []feature {
	return []feature{
		{"iops", "domain_disk:fspair_disk_rw_requests:rate" + w + "{%s}"},
		{"rw_log2", `domain_disk:fspair_workload_feature:value{feature="read_write_log2",%s}`},
		{"rsize_log2", `domain_disk:fspair_workload_feature:value{feature="read_size_log2",%s}`},
		{"sync_write", `domain_disk:fspair_workload_feature:value{feature="sync_write_share",%s}`},
		{"d_web", `domain_disk:fspair_workload_distance:scaled{class="web",%s}`},
		{"d_mail", `domain_disk:fspair_workload_distance:scaled{class="mail",%s}`},
		{"d_fs", `domain_disk:fspair_workload_distance:scaled{class="fileserver",%s}`},
		{"d_rfa", `domain_disk:fspair_workload_distance:scaled{class="rfa",%s}`},
		{"flush/write", "domain_disk:fspair_disk_flushes_per_write:ratio_rate" + w + "{%s}"},
		{"write_KiB", "domain_disk:fspair_disk_request_size_bytes:mean" + w + `{op="write",%s} / 1024`},
		{"random", "sum without (op, pattern) (domain_disk:fspair_disk_pattern_requests:ratio_rate" + w + `{pattern="random",%s})`},
	}
}

var scoreClasses = []string{"web", "mail", "fileserver", "rfa", "idle", "mixed"}

// evalTable prints, for every evaluation of the run, the class chosen, the
// score of each class, the confidence and the features, each as the rules
// saw them at that evaluation's timestamp.
func (e *env) evalTable(ctx context.Context, d *disk, win Window, evals []Eval) (string, error) {
	var in []Eval
	for _, ev := range evals {
		if !ev.At.Before(win.Start) && !ev.At.After(win.End()) {
			in = append(in, ev)
		}
	}
	if len(in) == 0 {
		return "(no evaluations)", nil
	}
	matchers := fmt.Sprintf("source_file=%q", d.g.Disk.File)
	// Range queries from the first evaluation's timestamp in steps of the
	// evaluation interval land on the evaluations themselves.
	first, last := in[0].At, in[len(in)-1].At
	cols := map[string]map[int64]float64{}
	var names []string
	get := func(name, expr string, by string) error {
		ss, err := e.prom.QueryRange(ctx, expr, first, last, e.cfg.eval)
		if err != nil {
			return err
		}
		for _, s := range ss {
			n := name
			if by != "" {
				n = s.Labels[by]
			}
			if cols[n] == nil {
				cols[n] = map[int64]float64{}
			}
			for _, p := range s.Points {
				cols[n][p.T.UnixMilli()] = p.V
			}
		}
		return nil
	}
	if err := get("", scoreRule+"{"+matchers+"}", "class"); err != nil {
		return "", err
	}
	names = append(names, scoreClasses...)
	if err := get("conf", confRule+"{"+matchers+"}", ""); err != nil {
		return "", err
	}
	names = append(names, "conf")
	for _, f := range features(e.cfg.rules.Short) {
		if err := get(f.name, fmt.Sprintf(f.expr, matchers), ""); err != nil {
			return "", err
		}
		names = append(names, f.name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%6s %-11s", "t", "class")
	for _, n := range names {
		fmt.Fprintf(&b, " %10s", n)
	}
	b.WriteString("\n")
	for _, ev := range in {
		fmt.Fprintf(&b, "%6.0f %-11s", ev.At.Sub(win.Start).Seconds(), ev.Class)
		for _, n := range names {
			if v, ok := cols[n][ev.At.UnixMilli()]; ok {
				fmt.Fprintf(&b, " %10.3f", v)
			} else {
				fmt.Fprintf(&b, " %10s", "-")
			}
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// timeline prints the classes of evals from start on, run-length encoded:
// "mixed x2 (10-20s), mail x18 (30-200s)".
func timeline(evals []Eval, start time.Time) string {
	var parts []string
	for i := 0; i < len(evals); {
		if evals[i].At.Before(start) {
			i++
			continue
		}
		j := i
		for j+1 < len(evals) && evals[j+1].Class == evals[i].Class {
			j++
		}
		parts = append(parts, fmt.Sprintf("%s x%d (%.0f-%.0fs)", evals[i].Class, j-i+1,
			evals[i].At.Sub(start).Seconds(), evals[j].At.Sub(start).Seconds()))
		i = j + 1
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ", ")
}

// parallel runs fn for every disk at once and joins the errors.
func parallel(disks []*disk, fn func(*disk) error) error {
	return parallelIdx(disks, func(_ int, d *disk) error { return fn(d) })
}

func parallelIdx(disks []*disk, fn func(int, *disk) error) error {
	errs := make([]error, len(disks))
	var wg sync.WaitGroup
	for i, d := range disks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(i, d); err != nil {
				errs[i] = fmt.Errorf("%s: %w", d.name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func minPtr(p *float64, v float64) *float64 {
	if p == nil || v < *p {
		return &v
	}
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// parsePairs parses a comma-separated list of guest/host/format pairs.
func parsePairs(s string) ([]workload.Pair, error) {
	var out []workload.Pair
	for _, f := range strings.Split(s, ",") {
		p, err := workload.ParsePair(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// parseWorkloads parses a comma-separated list of workloads.
func parseWorkloads(s string) ([]workload.Workload, error) {
	var out []workload.Workload
	for _, f := range strings.Split(s, ",") {
		w, err := workload.ParseWorkload(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}
