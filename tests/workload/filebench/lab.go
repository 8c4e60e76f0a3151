package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fspair/fspair/rules/classifier"
	"github.com/fspair/fspair/tests/alerting"
	"github.com/fspair/fspair/tests/workload"
	"gopkg.in/yaml.v3"
)

// The lab's recorded windows that are not the Filebench series (issue 37):
// what the live fitted model does on them beside the boxes it replaced (the
// fit's base), on the
// fio models, their held-out variants, the real programs, the workload
// switch and the pair lab's runs, and what the lab tests and the demo that
// assert a class would see. Paths are from the repository's root, as the
// command's other defaults.
const (
	labGuestFeatures = "tests/workload/testdata/guest-features.json"
	labVariants      = "tests/workload/testdata/variants.json"
	labApps          = "tests/workload/testdata/apps.json"
	labPairLab       = "docs/kdb/state" // tests/kdb's state: settings.json and runs.jsonl
	labKDB           = "rules/kdb/pairs.yaml"
)

// The generated block -lab -write replaces in rules/README.md.
const (
	labBegin = "<!-- BEGIN GENERATED lab windows: go run ./tests/workload/filebench -lab -write -->"
	labEnd   = "<!-- END GENERATED lab windows -->"
)

// labWindow is the rules' short window in the lab tests that assert a
// class (tests/validate's CI subset, tests/alerting): the switch is classed
// over windows of this width, one ending at each scrape, as those tests
// evaluate every 5 s.
const labWindow = time.Minute

// A labSource is one kind of recorded window.
type labSource struct {
	Name string
	Obs  []workload.Observation
}

// labSources reads every recorded non-Filebench window under root: the fio
// models (fio, the runs the live boxes were set on), the same jobs
// recorded with the guest side, the pair lab's mail and fileserver jobs on
// the nine pairs, the held-out fio variants and the real programs (each as
// its one steady-state window per run and as its disjoint sub-windows),
// the workload switch, and the synthetic disks of the tests that run the
// rules on a synthetic exporter.
func labSources(root, fio string) ([]labSource, error) {
	load := func(p string) (*workload.Results, error) {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		return workload.LoadResults(p)
	}
	var models, guest, variants, apps *workload.Results
	for _, f := range []struct {
		path string
		res  **workload.Results
	}{{fio, &models}, {labGuestFeatures, &guest}, {labVariants, &variants}, {labApps, &apps}} {
		var err error
		if *f.res, err = load(f.path); err != nil {
			return nil, err
		}
	}
	pairLab, err := pairLabRuns(filepath.Join(root, labPairLab))
	if err != nil {
		return nil, err
	}
	if len(models.Runs) == 0 || len(variants.Runs) == 0 || len(apps.Runs) == 0 || len(pairLab) == 0 {
		return nil, fmt.Errorf("lab data under %s: a source has no runs (fio models %d, variants %d, apps %d, pair lab %d)",
			root, len(models.Runs), len(variants.Runs), len(apps.Runs), len(pairLab))
	}
	var switches []workload.Observation
	for _, s := range models.Switches {
		switches = append(switches, switchObservations(s, labWindow)...)
	}
	return []labSource{
		{"fio models (features.json, the live boxes' training runs)", named(workload.FioObservations(models), "fio")},
		{"fio models again, guest side read (guest-features.json)", named(workload.FioObservations(guest), "fio-guest")},
		{"fio models in the pair lab (docs/kdb/state)", named(workload.FioObservations(&workload.Results{Runs: pairLab}), "pair-lab")},
		{"fio variants, one window per run", named(workload.FioObservations(&workload.Results{Runs: wholeRuns(variants.Runs)}), "variants")},
		{"fio variants, sub-windows", named(workload.FioObservations(variants), "variants-sub")},
		{"real programs, one window per run", named(workload.FioObservations(&workload.Results{Runs: wholeRuns(apps.Runs)}), "apps")},
		{"real programs, sub-windows", named(workload.FioObservations(apps), "apps-sub")},
		{"workload switch (features.json), 1m windows", named(switches, "switch")},
		{"synthetic disks (tests/alerting, dashboards, tests/fleet)", syntheticObservations()},
	}, nil
}

// named sets the Source of obs.
func named(obs []workload.Observation, src string) []workload.Observation {
	for i := range obs {
		obs[i].Source = src
	}
	return obs
}

// wholeRuns returns runs without their sub-windows, so that
// FioObservations gives each run's one steady-state window.
func wholeRuns(runs []workload.RunResult) []workload.RunResult {
	out := slices.Clone(runs)
	for i := range out {
		out[i].Windows = nil
	}
	return out
}

// pairLabRun is what the evaluation reads of one of the pair lab's runs
// (tests/kdb Run): the job, the pair and the first and last scrapes of its
// window, after the run's warm-up.
type pairLabRun struct {
	Pair     string            `json:"pair"`
	Workload workload.Workload `json:"workload"`
	Window   float64           `json:"window_seconds"`
	From     workload.Snapshot `json:"from"`
	To       workload.Snapshot `json:"to"`
}

// pairLabRuns reads the pair lab's state directory: every run's window as
// a run, its pair written GUEST/HOST/FORMAT[/CACHE] with the state's image
// format and cache mode, as the other results files write pairs.
func pairLabRuns(dir string) ([]workload.RunResult, error) {
	b, err := os.ReadFile(filepath.Join(dir, "settings.json"))
	if err != nil {
		return nil, fmt.Errorf("read the pair lab's settings: %w", err)
	}
	var set struct{ Format, Cache string }
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("read the pair lab's settings: %w", err)
	}
	suffix := "/" + set.Format
	if set.Cache != "" && set.Cache != "none" {
		suffix += "/" + set.Cache
	}
	f, err := os.Open(filepath.Join(dir, "runs.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("read the pair lab's runs: %w", err)
	}
	defer f.Close()
	var out []workload.RunResult
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for line := 1; sc.Scan(); line++ {
		var r pairLabRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("pair lab runs.jsonl line %d: %w", line, err)
		}
		out = append(out, workload.RunResult{Workload: r.Workload, Pair: r.Pair + suffix, WindowSeconds: r.Window,
			Features: workload.Compute(r.From, r.To), Measured: r.To.Time})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the pair lab's runs: %w", err)
	}
	return out, nil
}

// switchObservations classes a recording of one guest switching workload
// over windows of width, one ending at each scrape, as one disk's
// evaluations (the hysteresis carries from each to the next). A window is
// the new workload's once it ends after the new run's first scrape (as
// tests/validate times a switch from the run's start), and settled when it
// ran its workload alone: a change of phase takes a scrape at once, so
// what ran from one scrape to the next is the phase of the first, and
// every scrape from the window's start to before its end must be of its
// workload's run (or the sync after it). The windows holding a layout or
// the switch are the first minutes.
func switchObservations(s workload.Switch, width time.Duration) []workload.Observation {
	if len(s.Points) == 0 {
		return nil
	}
	t0 := s.Points[0].Time
	at := func(p workload.Point) float64 { return p.Time.Sub(t0).Seconds() }
	newRun := math.Inf(1) // the new run's first scrape, seconds from the first
	for _, p := range s.Points {
		if p.Phase == string(s.To) {
			newRun = at(p)
			break
		}
	}
	run := fmt.Sprintf("%s->%s@%s", s.From, s.To, s.Pair)
	var out []workload.Observation
	for _, w := range workload.Windows(s.Points, width) {
		truth := s.From
		if w.At > newRun {
			truth = s.To
		}
		settled := true
		for _, p := range s.Points {
			if t := at(p); t >= w.At-w.Span && t < w.At && p.Phase != string(truth) && p.Phase != "after:"+string(truth) {
				settled = false
			}
		}
		x, iops := workload.ModelInputs(w.Features)
		out = append(out, workload.Observation{Truth: truth, Run: run, Pair: s.Pair, GuestFS: workload.GuestFS(s.Pair),
			End: w.At, Inputs: x, IOPS: iops, Settled: settled})
	}
	return out
}

// syntheticDisks are the synthetic disks of the tests that run the rules on
// tests/alerting's synthetic exporter and need their class paired: the
// mail disks of tests/alerting TestAlertPath and dashboards' prom_test
// (xfs on btrfs, ext4 on ext4) and tests/fleet's other VMs. Only the guest
// file system and the workload matter to the class.
var syntheticDisks = []struct {
	pair string
	w    workload.Workload
	load alerting.Workload
}{
	{"xfs/btrfs/raw", workload.Mail, alerting.WorkloadMail},
	{"ext4/ext4/raw", workload.Mail, alerting.WorkloadMail},
	{"xfs/xfs/qcow2", workload.Web, alerting.WorkloadWeb},
	{"ext4/xfs/qcow2", workload.Fileserver, alerting.WorkloadFileserver},
	{"xfs/ext4/qcow2", workload.RFA, alerting.WorkloadRFA},
}

// syntheticObservations are the synthetic disks' steady windows: their
// counters grow at constant rates, so every window is the same.
func syntheticObservations() []workload.Observation {
	var out []workload.Observation
	for _, d := range syntheticDisks {
		l := d.load
		x := classifier.Inputs(classifier.Counts{Reads: l.ReadIOPS, Writes: l.WriteIOPS, ReadBytes: l.ReadIOPS * l.ReadSize,
			WriteBytes: l.WriteIOPS * l.WriteSize, SyncWrites: l.SyncWrite * l.WriteIOPS, Flushes: l.FlushPerWrite * l.WriteIOPS,
			RandomWrites: l.RandomWrite * l.WriteIOPS})
		out = append(out, workload.Observation{Truth: d.w, Run: string(d.w) + "@" + d.pair, Pair: d.pair, GuestFS: workload.GuestFS(d.pair),
			Inputs: x, IOPS: l.ReadIOPS + l.WriteIOPS, Settled: true, Source: "synthetic"})
	}
	return out
}

// labEval is one source's windows classed by the boxes the fit replaced
// and by the fitted model, window for window.
type labEval struct {
	Source        string
	Boxes, Fitted []workload.Evaluated
}

// evaluateLab classes every source's windows with both models.
func evaluateLab(boxes, fitted *classifier.Model, srcs []labSource) []labEval {
	out := make([]labEval, 0, len(srcs))
	for _, s := range srcs {
		out = append(out, labEval{Source: s.Name, Boxes: workload.Evaluate(boxes, s.Obs), Fitted: workload.Evaluate(fitted, s.Obs)})
	}
	return out
}

// labFigures are what one model does on a group of windows: issue 37's
// figures (Targets) and what the pairing gate makes of them.
type labFigures struct {
	Targets
	Early int // windows in the first minutes (a layout, a switch)
	// PairedRight counts the settled windows right at the gate's
	// min_confidence or more (a workload class then gets its verdict;
	// idle is paired on settling alone), PairedWrong the settled windows
	// of a wrong workload class at min_confidence or more: a verdict, and
	// FspairPoorPairing where the pair is worst for it, on the wrong class.
	PairedRight, PairedWrong int
	WrongAs                  map[string]int // settled wrong windows by the class chosen
}

// workloadClass reports whether c is one of the four workload classes,
// the ones the gate and the verdicts act on.
func workloadClass(c string) bool { return slices.Contains(classifier.Workloads, c) }

// paired reports whether the rules would pair e's class once settled: a
// workload class at min_confidence or more, idle and mixed always.
func paired(e workload.Evaluated, minConf float64) bool {
	return !workloadClass(e.Class) || e.Confidence >= minConf
}

func figuresOf(ev []workload.Evaluated, minConf float64) labFigures {
	f := labFigures{Targets: targets(ev), WrongAs: map[string]int{}}
	for _, e := range ev {
		if !e.Settled {
			f.Early++
			continue
		}
		switch {
		case e.Right() && paired(e, minConf):
			f.PairedRight++
		case !e.Right() && workloadClass(e.Class) && paired(e, minConf):
			f.PairedWrong++
		}
		if !e.Right() {
			f.WrongAs[e.Class]++
		}
	}
	return f
}

// tally spells counts by class as Tally does, "-" for none.
func tally(n map[string]int) string {
	if len(n) == 0 {
		return "-"
	}
	return countText(n)
}

// versus writes the boxes' and the fitted model's figure of the same
// windows side by side, "boxes → fitted".
func versus(live, cand string) string { return live + " → " + cand }

func frac(n, d int) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", n, d)
}

// byExpected splits windows by the class they should get, in Workloads'
// order, then idle.
func byExpected(live, cand []workload.Evaluated) (classes []string, l, c map[string][]workload.Evaluated) {
	l, c = map[string][]workload.Evaluated{}, map[string][]workload.Evaluated{}
	for i := range live {
		l[live[i].Expect] = append(l[live[i].Expect], live[i])
		c[cand[i].Expect] = append(c[cand[i].Expect], cand[i])
	}
	for _, k := range append(slices.Clone(classifier.Workloads), classifier.Idle) {
		if len(l[k]) > 0 {
			classes = append(classes, k)
		}
	}
	return classes, l, c
}

// renderLab writes the tables: per source and class, the boxes'
// figures beside the fitted model's; then every group of windows either got
// wrong; then what the lab tests and the demo assert, on this evidence.
func renderLab(w io.Writer, live *classifier.Model, evs []labEval, checks []labCheck) {
	minConf := live.Settle.MinConfidence.V()
	fmt.Fprintf(w, "Each cell is the boxes the fit replaced (tests/workload/testdata/classes-fitbase.yaml) → the live fitted model (rules/classes.yaml). *Settled* windows are the steady-state ones (a run's "+
		"window after its warm-up; for the switch, the windows that hold one workload's run alone): *right* counts "+
		"those; the confidence columns count every window, as the Filebench tables do; *paired* is right at the "+
		"gate's min_confidence (%.2g) or more, what gets a verdict; *verdict on a wrong class* counts settled windows "+
		"of a wrong workload class at %.2g or more.\n\n", minConf, minConf)
	fmt.Fprintf(w, "| source | class | settled windows | right | at >= 0.9: right | wrong: below 0.5 | first minutes: wrong at >= 0.9 | paired (right, >= %.2g) | verdict on a wrong class | wrong, chosen instead |\n", minConf)
	fmt.Fprintf(w, "|---|---|---:|---|---|---|---|---|---|---|\n")
	for _, ev := range evs {
		classes, l, c := byExpected(ev.Boxes, ev.Fitted)
		rows := append(classes, "all")
		l["all"], c["all"] = ev.Boxes, ev.Fitted
		for i, k := range rows {
			fl, fc := figuresOf(l[k], minConf), figuresOf(c[k], minConf)
			early := "-"
			if fl.Early > 0 {
				early = versus(fmt.Sprint(fl.EarlyConfidentWrong), fmt.Sprint(fc.EarlyConfidentWrong))
			}
			name := ""
			if i == 0 {
				name = ev.Source
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", name, k, fl.Settled,
				versus(frac(fl.SettledRight, fl.Settled), frac(fc.SettledRight, fc.Settled)),
				versus(frac(fl.ConfidentRight, fl.Confident), frac(fc.ConfidentRight, fc.Confident)),
				versus(frac(fl.WrongLow, fl.Wrong), frac(fc.WrongLow, fc.Wrong)),
				early,
				versus(frac(fl.PairedRight, fl.Settled), frac(fc.PairedRight, fc.Settled)),
				versus(fmt.Sprint(fl.PairedWrong), fmt.Sprint(fc.PairedWrong)),
				versus(tally(fl.WrongAs), tally(fc.WrongAs)))
		}
	}
	renderLabWrong(w, evs)
	renderChecks(w, minConf, evs, checks)
}

// renderLabWrong lists, per source, workload and pair, the settled windows
// either model got wrong: what each chose, at what confidence.
func renderLabWrong(w io.Writer, evs []labEval) {
	fmt.Fprintf(w, "\n#### Settled windows either model classes wrong, by source, workload and pair\n\n")
	fmt.Fprintf(w, "| source | workload | pair | windows | boxes: chosen (confidence) | live: chosen (confidence) |\n|---|---|---|---:|---|---|\n")
	for _, ev := range evs {
		type key struct{ workload, pair string }
		var order []key
		groups := map[key][]int{}
		for i, e := range ev.Boxes {
			if !e.Settled || (e.Right() && ev.Fitted[i].Right()) {
				continue
			}
			k := key{string(e.Truth), e.Pair}
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], i)
		}
		for _, k := range order {
			n := 0
			for _, e := range ev.Boxes {
				if e.Settled && string(e.Truth) == k.workload && e.Pair == k.pair {
					n++
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s |\n", ev.Source, k.workload, k.pair, n,
				chosen(ev.Boxes, groups[k]), chosen(ev.Fitted, groups[k]))
		}
	}
}

// chosen spells the classes of the windows idx of ev with their
// confidence ranges, "rfa 2 (0.12-0.30), mail 1 (0.95)", right ones
// marked.
func chosen(ev []workload.Evaluated, idx []int) string {
	type span struct {
		n      int
		lo, hi float64
	}
	by := map[string]*span{}
	var names []string
	for _, i := range idx {
		e := ev[i]
		name := e.Class
		if e.Right() {
			name += " (right)"
		}
		s, ok := by[name]
		if !ok {
			s = &span{lo: math.Inf(1), hi: math.Inf(-1)}
			by[name] = s
			names = append(names, name)
		}
		s.n++
		s.lo, s.hi = math.Min(s.lo, e.Confidence), math.Max(s.hi, e.Confidence)
	}
	parts := make([]string, len(names))
	for i, name := range names {
		s := by[name]
		r := fmt.Sprintf("%.2f", s.lo)
		if hi := fmt.Sprintf("%.2f", s.hi); hi != r {
			r += "-" + hi
		}
		parts[i] = fmt.Sprintf("%s %d (%s)", name, s.n, r)
	}
	return strings.Join(parts, ", ")
}

// kdbVerdicts reads the published knowledge base's verdicts (rules/kdb/
// pairs.yaml): verdict by workload and GUEST/HOST.
func kdbVerdicts(path string) (map[string]map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the knowledge base: %w", err)
	}
	var kb struct {
		Workloads []struct {
			Name  string
			Pairs []struct{ Pair, Verdict string }
		}
	}
	if err := yaml.Unmarshal(b, &kb); err != nil {
		return nil, fmt.Errorf("read the knowledge base %s: %w", path, err)
	}
	out := map[string]map[string]string{}
	for _, w := range kb.Workloads {
		out[w.Name] = map[string]string{}
		for _, p := range w.Pairs {
			out[w.Name][p.Pair] = p.Verdict
		}
	}
	return out, nil
}

// A labCheck is one thing a lab test or the demo asserts of the live class,
// and the recorded windows that stand for it (settled ones: the tests judge
// the class after their warm-up).
type labCheck struct {
	Where, Asserts string
	Sources        []string // Observation.Source of the evidence
	Match          func(o workload.Observation) bool
	// Paired: the window's right class must be paired (at min_confidence
	// or more), for a verdict or an alert the test waits for. Forbid: a
	// class that must not be paired on the window (a verdict or an alert
	// the test fails on).
	Paired func(o workload.Observation) bool
	Forbid func(o workload.Observation, class string) bool
	// AnyClass: the test needs a class paired, whichever (a join on
	// domain_disk:fspair_class_pair:info), not the right one.
	AnyClass bool
}

// checkResult is what one model does on a check's windows.
type checkResult struct {
	Windows, Right, NeedPaired, Paired, Forbidden int
	ev                                            []workload.Evaluated
}

// holds applies the tests' own bar: the class right on 90% of the
// evaluations judged (tests/validate Acceptance; not for a check of
// AnyClass), every needed verdict or alert on 90% of them, and no
// forbidden one ever (an alert raised, even pending, while a workload runs
// on a pair not worst for it fails the run).
func (r checkResult) holds(anyClass bool) string {
	switch {
	case r.Windows == 0:
		return "no recorded windows"
	case !anyClass && float64(r.Right) < 0.9*float64(r.Windows), float64(r.Paired) < 0.9*float64(r.NeedPaired), r.Forbidden > 0:
		return "**fails**"
	}
	for _, e := range r.ev {
		if e.Right() && workloadClass(e.Class) && e.Confidence < tie {
			// Right by a margin a window of another length, or the class
			// held from the workload before, would tip.
			return "holds, at a tie"
		}
	}
	return "holds"
}

// tie is a confidence below which a right class stands level with the
// runner-up (scores within 0.05; the hysteresis bonus is 0.15).
const tie = 0.05

// describe spells the result: its counts, the classes chosen with their
// confidences, and whether the test's bar holds.
func (r checkResult) describe(anyClass bool) string {
	if r.Windows == 0 {
		return "-"
	}
	s := fmt.Sprintf("right %d/%d", r.Right, r.Windows)
	if r.NeedPaired > 0 {
		s += fmt.Sprintf(", paired %d/%d", r.Paired, r.NeedPaired)
	}
	if r.Forbidden > 0 {
		s += fmt.Sprintf(", %d paired as a class that fails the test", r.Forbidden)
	}
	idx := make([]int, len(r.ev))
	for i := range idx {
		idx[i] = i
	}
	return s + "; " + chosen(r.ev, idx) + ": " + r.holds(anyClass)
}

func runCheck(c labCheck, ev []workload.Evaluated, minConf float64) checkResult {
	var r checkResult
	for _, e := range ev {
		if !e.Settled || !slices.Contains(c.Sources, e.Source) || !c.Match(e.Observation) {
			continue
		}
		r.Windows++
		r.ev = append(r.ev, e)
		if e.Right() {
			r.Right++
		}
		if c.Paired != nil && c.Paired(e.Observation) {
			r.NeedPaired++
			if (e.Right() || c.AnyClass) && paired(e, minConf) {
				r.Paired++
			}
		}
		if !e.Right() && workloadClass(e.Class) && paired(e, minConf) && c.Forbid != nil && c.Forbid(e.Observation, e.Class) {
			r.Forbidden++
		}
	}
	return r
}

// labChecks are the lab tests' and the demo's assertions on the class
// (tests/validate, scripts/demo-smoke.sh, tests/alerting, dashboards'
// prom_test, tests/fleet), each with the recorded windows nearest to what
// it runs: the same job or program on the same pair and host settings.
// kdb gives the published verdicts the validation runs judge alerts by.
func labChecks(kdb map[string]map[string]string) []labCheck {
	worst := func(class, pair string) bool { return kdb[class][workload.PairOf(pair)] == "worst" }
	own := func(o workload.Observation) bool { return worst(string(o.Truth.Class()), o.Pair) }
	// tests/validate fails a run on any FspairPoorPairing raised while its
	// workload runs on a pair not worst for it: that of a wrong class the
	// pair is worst for.
	other := func(o workload.Observation, class string) bool { return !own(o) && worst(class, o.Pair) }
	is := func(pair string, ws ...workload.Workload) func(workload.Observation) bool {
		return func(o workload.Observation) bool { return o.Pair == pair && slices.Contains(ws, o.Truth) }
	}
	var out []labCheck
	fio := []string{"fio", "fio-guest", "pair-lab", "switch"}
	for _, p := range []string{"ext4/xfs/raw", "xfs/xfs/raw"} {
		for _, w := range workload.Workloads {
			a := "class right on >= 90% of evaluations after the warm-up"
			if worst(string(w), p) {
				a += "; FspairPoorPairing delivered (the pair is worst for it)"
			}
			out = append(out, labCheck{Where: "TestValidate (make test), 1m window", Asserts: fmt.Sprintf("%s on %s: %s; no FspairPoorPairing for a class the pair is not worst for", w, p, a),
				Sources: fio, Match: is(p, w), Paired: own, Forbid: other})
		}
	}
	variants := workload.Variants()
	for _, p := range []string{"ext4/xfs/raw/writeback", "xfs/ext4/qcow2"} {
		for _, c := range workload.Workloads {
			var ws []workload.Workload
			for _, v := range variants {
				if v.Class() == c {
					ws = append(ws, v)
				}
			}
			out = append(out, labCheck{Where: "TestValidateHeldOut (own target)", Asserts: fmt.Sprintf("%s variants on %s: as TestValidate", c, p),
				Sources: []string{"variants"}, Match: is(p, ws...), Paired: own, Forbid: other})
		}
	}
	for _, p := range []string{"ext4/xfs/raw", "xfs/xfs/raw", "btrfs/btrfs/raw", "ext4/btrfs/raw", "xfs/ext4/qcow2", "ext4/ext4/raw"} {
		out = append(out, labCheck{Where: "TestValidateFull (make validate), 5m window", Asserts: fmt.Sprintf("the four jobs on %s: as TestValidate", p),
			Sources: fio, Match: is(p, workload.Workloads...), Paired: own, Forbid: other})
	}
	always := func(workload.Observation) bool { return true }
	// The demo acts on the site's verdicts (docs/kdb/site.yaml: btrfs/ext4
	// worst for mail), and demo-smoke fails on any verdict shown on a
	// class other than the VM's: a paired class the knowledge base rates
	// on the pair.
	anyOther := func(o workload.Observation, class string) bool {
		return class != string(o.Truth.Class()) && kdb[class][workload.PairOf(o.Pair)] != ""
	}
	out = append(out,
		labCheck{Where: "demo-smoke (make test)", Asserts: "demo-mail (mail.fio, btrfs/ext4/raw, cache none, aio native): mail, \"worst, site*\", FspairPoorPairing firing; no verdict on another class",
			Sources: []string{"pair-lab"}, Match: is("btrfs/ext4/raw", workload.Mail), Paired: always, Forbid: anyOther},
		labCheck{Where: "demo-smoke (make test)", Asserts: "demo-web (web.fio, xfs/ext4/raw, cache none, aio native): web, \"best, published\", no alert; no verdict on another class",
			Sources: []string{"fio", "fio-guest", "pair-lab"}, Match: func(o workload.Observation) bool {
				return strings.HasPrefix(o.Pair, "xfs/ext4/") && o.Truth == workload.Web
			}, Paired: always, Forbid: anyOther},
		labCheck{Where: "tests/alerting TestAlertPath (make test, synthetic)", Asserts: "mail-worst (xfs/btrfs): mail, FspairPoorPairing delivered; mail-best (ext4/ext4): classed mail",
			Sources: []string{"synthetic"}, Match: is2("xfs/btrfs/raw", "ext4/ext4/raw", workload.Mail), Paired: own, Forbid: other},
		labCheck{Where: "dashboards prom_test (make test, synthetic)", Asserts: "both mail disks: a pair verdict (domain_disk:fspair_pair_verdict:info)",
			Sources: []string{"synthetic"}, Match: is2("xfs/btrfs/raw", "ext4/ext4/raw", workload.Mail), Paired: always, Forbid: other},
		labCheck{Where: "tests/fleet (make test, synthetic)", Asserts: "the mail VMs (ext4/ext4, xfs/btrfs): mail, paired (the fleet's best mail pair, FspairWriteAmplificationHigh on xfs/btrfs)",
			Sources: []string{"synthetic"}, Match: is2("xfs/btrfs/raw", "ext4/ext4/raw", workload.Mail), Paired: always},
		labCheck{Where: "tests/fleet (make test, synthetic)", Asserts: "the web, fileserver and rfa VMs: a class paired, whichever (the fleet dashboard's join on domain_disk:fspair_class_pair:info needs one per disk)",
			Sources: []string{"synthetic"}, Match: func(o workload.Observation) bool { return o.Truth != workload.Mail }, Paired: always, AnyClass: true},
	)
	return out
}

// is2 matches windows of w on either of two pairs.
func is2(a, b string, w workload.Workload) func(workload.Observation) bool {
	return func(o workload.Observation) bool { return (o.Pair == a || o.Pair == b) && o.Truth == w }
}

// renderChecks writes, per assertion, what each model does on its
// recorded windows and whether the test's own bar holds there.
func renderChecks(w io.Writer, minConf float64, evs []labEval, checks []labCheck) {
	var boxes, fitted []workload.Evaluated
	for _, ev := range evs {
		boxes, fitted = append(boxes, ev.Boxes...), append(fitted, ev.Fitted...)
	}
	fmt.Fprintf(w, "\n#### What the lab tests and the demo assert, on the recorded windows\n\n")
	fmt.Fprintf(w, "Settled windows of the same job or program on the same pair and host settings; *paired* is right at %.2g or more (a verdict, the alert), counted where the test needs it.\n\n", minConf)
	fmt.Fprintf(w, "| test | asserts | evidence | boxes | live model |\n|---|---|---|---|---|\n")
	for _, c := range checks {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", c.Where, c.Asserts, strings.Join(c.Sources, ", "),
			runCheck(c, boxes, minConf).describe(c.AnyClass), runCheck(c, fitted, minConf).describe(c.AnyClass))
	}
}

// labReport classes every recorded non-Filebench window with the fit's
// base (-fit-base) and the live model (-classes) and prints the tables;
// with -write it puts them in -rules-readme.
func labReport(o *Options, stdout io.Writer) error {
	text, err := labTables(".", o.FitBase, o.Classes, o.Fio)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, text)
	if !o.Write {
		return nil
	}
	return replaceBlock(o.RulesReadme, labBegin, labEnd, text)
}

// labTables renders the tables from the repository at root, with the
// fit's base (the boxes) and the live model at those paths (relative to
// the working directory, as -fit-base and -classes are) and the fio
// models' results at fio (relative to root).
func labTables(root, base, classes, fio string) (string, error) {
	boxes, err := classifier.Load(base)
	if err != nil {
		return "", fmt.Errorf("load the fit's base: %w", err)
	}
	live, err := classifier.Load(classes)
	if err != nil {
		return "", fmt.Errorf("load the live model: %w", err)
	}
	srcs, err := labSources(root, fio)
	if err != nil {
		return "", err
	}
	kdb, err := kdbVerdicts(filepath.Join(root, labKDB))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	renderLab(&b, live, evaluateLab(boxes, live, srcs), labChecks(kdb))
	return b.String(), nil
}
