package workload

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/fspair/fspair/rules/classifier"
)

// An Observation is one classifier window of a run, in the order of its
// run: the classifier's inputs, the disk's IOPS and guest file system, and
// what ran.
type Observation struct {
	Truth   Workload // the workload that ran (its Class is the right answer unless the window is idle at the host)
	Run     string   // the run, e.g. "varmail@btrfs/ext4/raw/none/native"
	Pair    string   // GUEST/HOST[/...]: what leave-one-pair-out holds out
	GuestFS string
	End     float64 // seconds from the run's start (Filebench's start, the layout included)
	Inputs  map[string]float64
	IOPS    float64
	// Settled marks a window that ends after the run's first Settle
	// seconds: the training windows, and the ones the accuracy targets
	// count.
	Settled bool
	// Layout marks a window that holds some of the program's setup
	// (Filebench laying out its file set): the disk then does what the
	// setup does, not the workload, so no centre is fitted on it, though
	// the held-out tables still judge it.
	Layout bool
	Source string // "filebench" or "fio"
}

// Expected is the class the observation should get: the workload's, or
// idle when the host saw fewer requests than the idle ramp's top (what the
// program did stayed in the guest's page cache, so the host had nothing to
// class).
func (o Observation) Expected(m *classifier.Model) string {
	if o.IOPS < m.Idle.Bounds()[1] {
		return classifier.Idle
	}
	return string(o.Truth.Class())
}

// GuestFeatures are the features whose meaning the guest file system
// changes (how it batches durable writes into its journal or log, and the
// size it writes in): Fit gives a class ranges of its own on them per guest
// file system it has training runs on.
var GuestFeatures = []string{classifier.SyncWriteShare, classifier.FlushesPerWriteLog2, classifier.WriteSizeLog2}

// FitOptions set how Fit turns windows into boxes.
type FitOptions struct {
	// Quantile trims each end of a box: the box spans the Quantile and
	// 1-Quantile quantiles of the class's training windows (0: min, max).
	Quantile float64
	// Margin widens each box by this many of its feature's scales on both
	// sides: what a pair the training did not see may add.
	Margin float64
	// MinGuestRuns is how many training runs of a class on a guest file
	// system give it ranges of its own there, and GuestShare how much
	// narrower than the class's range over every guest such a range must
	// be to be kept (a share of its width): each costs the rules a join.
	MinGuestRuns int
	GuestShare   float64
	// GuestShift is how far, in units of its feature's scale, a guest
	// file system's centre must lie from the centre over every guest to
	// be kept, where Quantile makes the ranges centres (0.5): a centre
	// has no width to be narrower by.
	GuestShift float64
	// ScaleFloor is the least scale of a feature, as a share of the spread
	// of the class boxes' centres on it.
	ScaleFloor float64
	// FarQuantile sets the far ramp's start: that quantile of the
	// distances of training windows from their own class's box fitted
	// without their pair (0: base's ramp); the ramp starts at FarFloor
	// units at the least.
	FarQuantile, FarFloor float64
	// Missing gives a class some of whose training windows lack a mean
	// request size (no reads, or no writes, at the host) its own squared
	// distance for lacking it (Class.Missing): -2 ln of the share of its
	// windows that lack it, which is what that share is worth as a
	// Gaussian's squared distance (a share of 1 costs 0, of 0.37 one
	// squared unit, of 0.05 six), instead of the end of the far ramp.
	Missing bool
	// FioCentres lets Fit give a class's fio model windows a centre of
	// their own (Class.Others, named "fio") instead of training its main
	// centre with the programs' windows or being left out: the fio models
	// caricature a personality (mail.fio writes 90-100% durable, varmail
	// through a guest's log 6-35%), and a median over both lands where
	// neither is.
	FioCentres bool
	// ownFio are the classes whose fio windows Fit gives a centre of
	// their own.
	ownFio map[Workload]bool
	// EarlyCentres lets Fit give a class the windows of its programs'
	// first minutes past their layout (ending before the settle, with none
	// of the layout in them) as a centre of their own (Class.Others, named
	// "early"), where they lie FioApart or more from its settled centre: a
	// workload on a freshly laid out file set first touches every file
	// (webserver's first reads dirty each file's access time, which a
	// relatime guest writes back as small random writes), a shape it
	// leaves once its files have all been touched. Without it those
	// windows train nothing. It acts with FioCentres (Fit's path that
	// sets centres apart).
	EarlyCentres bool
	// ownEarly are the classes whose early windows Fit gives a centre of
	// their own.
	ownEarly map[Workload]bool
	// FarPastNear starts the far ramp no nearer than where the fitted
	// confidence's near ramp ends (the confidence is then calibrated
	// without a far ramp): the far ramp's quantile is taken over the
	// training pairs' windows, which all ran the personalities' shipped
	// parameters, so a workload with other file or I/O sizes lies beyond
	// it while still nearest its own class; the near ramp already gives
	// such a disk a low confidence.
	FarPastNear bool
	// Window is the rules' short window in seconds with which
	// LeaveOnePairOut applies the settle rules to the held-out windows'
	// confidence (EvaluateSettling); 0: none.
	Window float64
	// ConfidentRight and WrongLow are what the confidence must give the
	// windows held out inside the training set (calibrate): the share of those at
	// confidence 0.9 or more that are right, and of the wrong ones that
	// are below 0.5 (issue 37's targets: 0.95 and 0.9).
	ConfidentRight, WrongLow float64
}

// DefaultFit are the options the live model (rules/classes.yaml) is fitted with. Each class
// is its centre (Quantile 0.5: the median of its windows, per guest file
// system where that lies GuestShift units or more from the median over
// every guest), not a box: boxes spanning 5-95% of the windows overlapped
// (rfa's read/write ratio spanned mail's), a disk inside two boxes was at
// distance 0 from both and the softmax split evenly, whereas the distance
// from a centre prefers the class whose typical window is nearer. Chosen
// on the leave-one-pair-out figures of the 36 Filebench series runs
// (rules/README.md, "Held-out validation"): boxes 109 of 127 windows right
// after the first 3 minutes, centres 109, centres with Missing 114 (the
// boxes with Missing: 103).
var DefaultFit = FitOptions{Quantile: 0.5, Margin: 0, MinGuestRuns: 2, GuestShare: 0.5, GuestShift: 0.25, ScaleFloor: 0.05,
	FarQuantile: 0.99, FarFloor: 2.5, Missing: true, FioCentres: true, EarlyCentres: true, FarPastNear: true, ConfidentRight: 0.95, WrongLow: 0.9}

// Fit returns base with its features' scales and its workload boxes set
// from the settled training windows of obs: per class and feature, the
// range its windows span (trimmed by opt.Quantile), per guest file system
// on GuestFeatures where the class has opt.MinGuestRuns runs there; each
// feature's scale the pooled spread (standard deviation) of the windows
// around their class's (and guest file system's) mean. A class without
// training windows keeps base's box. Idle windows (Expected) train no
// box. Ramps, hysteresis and the feature list are base's.
func Fit(base *classifier.Model, obs []Observation, opt FitOptions) (*classifier.Model, error) {
	if opt.FarQuantile <= 0 {
		return fitBoxes(base, obs, opt)
	}
	// The fio models caricature the personalities; where a model's windows
	// contradict what the real program shows at the host, they pull the
	// class's box where no real program of it lands. Each class's fio
	// windows train its box only if that classes more of the inner
	// held-out windows right (below): the classes in Workloads' order,
	// each left out of the fio training in turn and kept out when that
	// helps.
	if opt.FioCentres {
		return fitFioCentres(base, obs, opt)
	}
	noFio := map[Workload]bool{}
	best, err := fitHeld(base, withoutFio(obs, noFio), opt)
	if err != nil {
		return nil, err
	}
	for _, c := range Workloads {
		if !hasFio(obs, c) {
			continue
		}
		noFio[c] = true
		r, err := fitHeld(base, withoutFio(obs, noFio), opt)
		if err != nil {
			return nil, err
		}
		if r.right > best.right {
			best = r
		} else {
			noFio[c] = false
		}
	}
	m := best.m
	for i := range m.Classes {
		if noFio[Workload(m.Classes[i].Name)] {
			m.Classes[i].Source += "; the fio model's windows left out of this box: they class fewer inner held-out windows right"
		}
	}
	return m, nil
}

// FioApart is how far (units, the median over its windows) a class's fio
// model windows must lie from the centre of its programs' windows to get
// a centre of their own (FioCentres).
const FioApart = 3.0

// fitFioCentres is Fit with FioCentres: the centres are first fitted on
// the programs' windows alone; a class whose fio windows lie FioApart or
// more from its programs' centre (the model is another shape of the
// class, as mail.fio's every write durable against varmail's batched
// log) gives them a centre of their own, the others' fio windows train
// their class's centre with the programs'.
func fitFioCentres(base *classifier.Model, obs []Observation, opt FitOptions) (*classifier.Model, error) {
	all := map[Workload]bool{}
	for _, c := range Workloads {
		all[c] = true
	}
	progs, err := fitBoxes(base, withoutFio(obs, all), opt)
	if err != nil {
		return nil, err
	}
	// A class without programs' windows has no centre to keep its fio
	// windows apart from: they train its centre.
	programs := programClasses(base, obs)
	apart := distancesFromOwn(progs, base, obs, func(o Observation) bool {
		return o.Source == "fio" && o.Settled && programs[o.Truth]
	})
	opt.ownFio = map[Workload]bool{}
	var why []string
	for _, c := range Workloads {
		d := apart[c]
		if len(d) == 0 {
			continue
		}
		sort.Float64s(d)
		med := quantile(d, 0.5)
		opt.ownFio[c] = med >= FioApart
		why = append(why, fmt.Sprintf("%s %.1f", c, med))
	}
	early := map[Workload]string{}
	if opt.EarlyCentres {
		opt.ownEarly, early = earlyApart(progs, base, obs, programs)
	}
	r, err := fitHeld(base, obs, opt)
	if err != nil {
		return nil, err
	}
	for i, c := range r.m.Classes {
		if why := early[Workload(c.Name)]; why != "" {
			r.m.Classes[i].Source += "; " + why
		}
		if !programs[Workload(c.Name)] && hasFio(obs, Workload(c.Name)) {
			r.m.Classes[i].Source += "; none of its programs' windows past their first minutes and layout is active at the host" +
				" (what they did stayed in the guest's page cache: idle is right for those), so its fio model's windows alone train it"
			continue
		}
		if len(apart[Workload(c.Name)]) == 0 {
			continue
		}
		how := "its fio model's windows train this centre with its programs'"
		if len(c.Others) > 0 {
			how = "its fio model's windows have a centre of their own (others)"
		}
		r.m.Classes[i].Source += fmt.Sprintf("; %s: the fio windows' median distance from the programs' centres (units): %s, %.0f or more for a centre of their own", how, strings.Join(why, ", "), FioApart)
	}
	return r.m, nil
}

// programClasses are the classes with settled windows of their programs
// (not their fio models') past the layout and active at the host.
func programClasses(base *classifier.Model, obs []Observation) map[Workload]bool {
	programs := map[Workload]bool{}
	for _, o := range obs {
		if o.Source != "fio" && o.Settled && !o.Layout && o.Expected(base) != classifier.Idle {
			programs[o.Truth] = true
		}
	}
	return programs
}

// distancesFromOwn returns, per workload, the distances of the windows of
// obs that keep selects and are active at the host from progs' centre of
// their own class.
func distancesFromOwn(progs, base *classifier.Model, obs []Observation, keep func(Observation) bool) map[Workload][]float64 {
	apart := map[Workload][]float64{}
	for _, o := range obs {
		if !keep(o) || o.Expected(base) == classifier.Idle {
			continue
		}
		c, ok := progs.Class(string(o.Truth))
		if !ok {
			continue
		}
		if d := progs.Distance(c, o.Inputs, o.GuestFS); !math.IsNaN(d) {
			apart[o.Truth] = append(apart[o.Truth], d)
		}
	}
	return apart
}

// earlyApart returns the classes with programs' windows whose early
// windows (EarlyCentres) lie FioApart or more (the median over them) from
// progs' centre of the class, and for each class with early windows what
// was measured.
func earlyApart(progs, base *classifier.Model, obs []Observation, programs map[Workload]bool) (map[Workload]bool, map[Workload]string) {
	apart := distancesFromOwn(progs, base, obs, func(o Observation) bool {
		return o.Source != "fio" && !o.Settled && !o.Layout && programs[o.Truth]
	})
	own, why := map[Workload]bool{}, map[Workload]string{}
	for c, d := range apart {
		sort.Float64s(d)
		med := quantile(d, 0.5)
		own[c] = med >= FioApart
		how := "its programs' early windows (past their layout, before the first 3 minutes end) train no centre: they lie"
		if own[c] {
			how = "its programs' early windows (past their layout, before the first 3 minutes end) have a centre of their own (others): they lie"
		}
		why[c] = fmt.Sprintf("%s %.1f units from its settled centre (the median of %d windows), %.0f or more for a centre of their own", how, med, len(d), FioApart)
	}
	return own, why
}

// describeEarly says what a class's early centre is fitted on.
func describeEarly(class string, obs []Observation, base *classifier.Model) string {
	windows := 0
	runs, pairs := map[string]bool{}, map[string]bool{}
	for _, o := range obs {
		if o.Settled || o.Layout || o.Source == "fio" || o.Expected(base) != class {
			continue
		}
		windows++
		runs[o.Run] = true
		pairs[PairOf(o.Pair)] = true
	}
	return fmt.Sprintf("fitted (tests/workload DefaultFit) on %d early windows of %d Filebench runs on %d guest/host pairs", windows, len(runs), len(pairs))
}

// heldFit is a model fitted with its far ramp, softmax, temperature and
// mixed ramp, and how many inner held-out windows it classes right.
type heldFit struct {
	m     *classifier.Model
	right int
}

// withoutFio returns obs without the fio models' windows of the classes in
// drop.
func withoutFio(obs []Observation, drop map[Workload]bool) []Observation {
	out := make([]Observation, 0, len(obs))
	for _, o := range obs {
		if o.Source == "fio" && drop[o.Truth] {
			continue
		}
		out = append(out, o)
	}
	return out
}

// hasFio reports whether obs holds fio windows of c.
func hasFio(obs []Observation, c Workload) bool {
	for _, o := range obs {
		if o.Source == "fio" && o.Truth == c {
			return true
		}
	}
	return false
}

// fitHeld fits the boxes on obs, then the far ramp, softmax, temperature
// and mixed ramp on obs's pairs left out in turn (inner held out), and
// counts the inner held-out windows of Filebench runs (the programs the
// verdicts are about; every window when obs has none) it classes right.
func fitHeld(base *classifier.Model, obs []Observation, opt FitOptions) (heldFit, error) {
	m, err := fitBoxes(base, obs, opt)
	if err != nil {
		return heldFit{}, err
	}
	// far: how far a pair's windows lie from their own class's box when
	// the boxes were fitted without that pair (leave one pair out inside
	// the training windows), so that a pair the model has not seen is
	// not called far for being new.
	var d []float64
	var held []heldOut
	anyFilebench := false
	for _, o := range obs {
		anyFilebench = anyFilebench || o.Source == "filebench"
	}
	for _, p := range pairsOf(obs, "") {
		var train, test []Observation
		for _, o := range obs {
			if PairOf(o.Pair) == p {
				test = append(test, o)
			} else {
				train = append(train, o)
			}
		}
		inner, err := fitBoxes(base, train, opt)
		if err != nil {
			return heldFit{}, fmt.Errorf("far, %s left out: %w", p, err)
		}
		for _, o := range test {
			// Every window is held out for the confidence, the first
			// minutes and the layout included: the confidence must mean
			// what it says on them too. The far ramp is set by, and the
			// right count taken over, the settled windows of the
			// workload itself.
			dist := map[string]float64{}
			for _, k := range inner.Classes {
				dist[k.Name] = inner.Distance(k, o.Inputs, o.GuestFS)
			}
			steady := o.Settled && !o.Layout
			held = append(held, heldOut{dist, o.IOPS, o.Expected(base), steady && (!anyFilebench || o.Source == "filebench")})
			if c, ok := inner.Class(o.Expected(base)); ok && steady {
				if v := inner.Distance(c, o.Inputs, o.GuestFS); !math.IsNaN(v) {
					d = append(d, v)
				}
			}
		}
	}
	if len(d) < 10 {
		return heldFit{m, 0}, nil // too few to say: base's ramps
	}
	sort.Float64s(d)
	lo := round2(math.Max(quantile(d, opt.FarQuantile), opt.FarFloor))
	hi := round2(math.Max(quantile(d, 1-(1-opt.FarQuantile)/10), lo+1))
	m.Far = classifier.Ramp{Above: []float64{lo, hi}, Source: fmt.Sprintf(
		"fitted: leaving each of the %d training pairs out in turn, the %.2f quantile of its %d settled windows' distances from their own class fitted without it (%.2f), and the %.3f quantile (%.2f) or one unit more; never below %.2f",
		len(pairsOf(obs, "")), opt.FarQuantile, len(d), quantile(d, opt.FarQuantile), 1-(1-opt.FarQuantile)/10, quantile(d, 1-(1-opt.FarQuantile)/10), opt.FarFloor)}
	// The softmax, its temperature, the mixed ramp and the confidence,
	// on the windows held out (calibrate).
	judged := 0
	for _, h := range held {
		if h.judged {
			judged++
		}
	}
	if !opt.FarPastNear {
		return calibrate(m, base, held, judged, opt), nil
	}
	// The confidence is calibrated with no far ramp; far then starts no
	// nearer than where its near ramp ends, so it only names mixed a disk
	// too far from every class for any confidence.
	far := m.Far
	m.Far = classifier.Ramp{Above: []float64{1e3, 1e3 + 1}}
	r := calibrate(m, base, held, judged, opt)
	if end := r.m.Confidence.Near.Bounds()[1]; end > lo {
		lo, hi = round2(end), round2(math.Max(hi, end+1))
		far.Above = []float64{lo, hi}
		far.Source += fmt.Sprintf("; raised to where the confidence's near ramp reaches 0 (%.2f): a disk nearer than that keeps its nearest class, at the confidence that ramp gives", end)
	}
	r.m.Far = far
	return r, nil
}

// heldOut is a window held out inside the training set: its distances
// from the classes fitted without its pair, its IOPS, the class it should
// get, and whether the right count is over it.
type heldOut struct {
	dist   map[string]float64
	iops   float64
	expect string
	judged bool
}

// Margins and Nears are the confidence ramps calibrate chooses from: their
// starts and widths, in units.
var (
	MarginStarts = []float64{0, 0.5, 1, 1.5, 2, 3, 4}
	MarginWidths = []float64{0.5, 1, 2, 3, 4}
	NearStarts   = []float64{1, 2, 3, 4, 5, 6, 8}
	NearWidths   = []float64{1, 2, 4, 8}
)

// calibrate chooses m's softmax, temperature and mixed ramp and its
// confidence ramps on the held-out windows (Calibrate), lexicographically:
// the most judged windows right, then the most of those at confidence
// 0.5 or more, among the confidences that mean what they say on every
// held-out window.
func calibrate(m, base *classifier.Model, held []heldOut, judged int, opt FitOptions) heldFit {
	// The class first: the softmax, temperature and mixed ramp that class
	// the most judged windows right (ties: the first).
	type row struct {
		ok, judged, workload bool
		d1, d2, damp, plain  float64 // plain: the spread of the scores, for idle
	}
	var chosen choice
	var rows []row
	right := -1
	for _, over := range Softmaxes {
		for _, mixed := range append([][]float64{base.Mixed.Bounds()}, MixedRamps...) {
			for _, t := range Temperatures[over] {
				c := choice{over, t, mixed}
				c.apply(m)
				m.Confidence = nil
				rs := make([]row, len(held))
				n := 0
				for i, h := range held {
					r := m.Score(h.dist, h.iops)
					d1, d2 := classifier.NearestTwo(h.dist)
					rs[i] = row{ok: r.Class == h.expect, judged: h.judged, workload: r.Class != classifier.Idle && r.Class != classifier.Mixed,
						d1: d1, d2: d2, damp: 1 - m.Idle.Of(h.iops), plain: r.Confidence}
					if rs[i].ok && h.judged {
						n++
					}
				}
				if n > right {
					chosen, rows, right = c, rs, n
				}
			}
		}
	}
	chosen.apply(m)
	m.Softmax.Source = fmt.Sprintf("fitted with the temperature and the mixed ramp, of softmaxes over %v, temperatures %v and mixed ramps %v (base's first): the combination that classes the most of the %d Filebench windows held out as for far right (%d)",
		Softmaxes, Temperatures, append([][]float64{base.Mixed.Bounds()}, MixedRamps...), judged, right)
	m.Temperature.Source = "fitted with the softmax (see there)"
	m.Mixed.Source = "fitted with the softmax (see there)"
	// Then the confidence of that choice: the ramps that give the most
	// right judged windows 0.5 or more while it means what it says on
	// every held-out window; none that does: never confident.
	cf := classifier.Confidence{Margin: classifier.Ramp{Above: []float64{1e3, 1e3 + 1}}, Near: classifier.Ramp{Below: []float64{0, 1}}}
	desc, paired := "none of them met both: no workload class is ever confident", -1
	for _, ms := range MarginStarts {
		for _, mw := range MarginWidths {
			for _, ns := range NearStarts {
				for _, nw := range NearWidths {
					try := classifier.Confidence{Margin: classifier.Ramp{Above: []float64{ms, ms + mw}}, Near: classifier.Ramp{Below: []float64{ns, ns + nw}}}
					conf, confRight, wrong, wrongLow, p := 0, 0, 0, 0, 0
					for _, w := range rows {
						v := w.plain
						if w.workload {
							v = try.Of(w.d1, w.d2) * w.damp
						}
						if v >= 0.9 {
							conf++
							if w.ok {
								confRight++
							}
						}
						if !w.ok {
							wrong++
							if v < 0.5 {
								wrongLow++
							}
						} else if w.judged && v >= 0.5 {
							p++
						}
					}
					if (conf > 0 && float64(confRight) < opt.ConfidentRight*float64(conf)) ||
						(wrong > 0 && float64(wrongLow) < opt.WrongLow*float64(wrong)) || p <= paired {
						continue
					}
					cf, paired = try, p
					desc = fmt.Sprintf("%d of the %d right Filebench windows at confidence 0.5 or more; of all %d, %d at confidence >= 0.9 right of %d, %d of %d wrong ones below 0.5",
						p, right, len(held), confRight, conf, wrongLow, wrong)
				}
			}
		}
	}
	cf.Source = fmt.Sprintf("fitted: of margin ramps starting at %v units wide %v and near ramps starting at %v wide %v, with the softmax above, the pair that gives the most right held-out Filebench windows 0.5 or more while the confidence of all %d held out (the first minutes and layouts included) means what it says (at least %.2f of those at 0.9 or more right, at least %.2f of the wrong ones below 0.5): %s",
		MarginStarts, MarginWidths, NearStarts, NearWidths, len(held), opt.ConfidentRight, opt.WrongLow, desc)
	cf.Margin.Source, cf.Near.Source = "fitted (see confidence)", "fitted (see confidence)"
	m.Confidence = &cf
	return heldFit{m, right}
}

// choice is a softmax, its temperature and a mixed ramp (its below
// bounds).
type choice struct {
	over  string
	t     float64
	mixed []float64
}

// apply sets c's softmax, temperature and mixed ramp on m (their sources
// are set once the choice is made).
func (c choice) apply(m *classifier.Model) {
	t := c.t
	m.Softmax = &classifier.Softmax{Over: c.over}
	m.Temperature = &classifier.Bonus{Value: &t}
	m.Mixed = classifier.Ramp{Below: append([]float64(nil), c.mixed...)}
}

// Softmaxes, Temperatures (per softmax) and MixedRamps (besides the base
// model's) are what Fit chooses the softmax, its temperature and the mixed
// ramp from: over the distances, whose exponent is about the square root
// of the squared distances' at the distances that matter (1-4 units),
// hence temperatures below 1 among them.
var (
	Softmaxes    = []string{classifier.OverDistance}
	Temperatures = map[string][]float64{
		classifier.OverDistance: {0.125, 0.25, 0.5, 1, 2, 4, 8, 16},
	}
	MixedRamps = [][]float64{{0.4, 0.6}, {0.3, 0.45}, {0.2, 0.35}}
)

// pairsOf returns the guest/host pairs of obs (of source src, "" for
// all), sorted.
func pairsOf(obs []Observation, src string) []string {
	set := map[string]bool{}
	for _, o := range obs {
		if src == "" || o.Source == src {
			set[PairOf(o.Pair)] = true
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// fitBoxes is Fit without the far ramp.
func fitBoxes(base *classifier.Model, obs []Observation, opt FitOptions) (*classifier.Model, error) {
	m := *base
	m.Features = append([]classifier.Feature(nil), base.Features...)
	m.Classes = make([]classifier.Class, len(base.Classes))
	copy(m.Classes, base.Classes)
	isGuest := map[string]bool{}
	for _, f := range GuestFeatures {
		isGuest[f] = true
	}
	// values[class][guest][feature], guest "" for all guests.
	type key struct{ class, guest, feature string }
	values := map[key][]float64{}
	runs := map[key]map[string]bool{}
	// lacking[class][feature] counts the class's windows without the
	// feature, of windows[class].
	lacking := map[string]map[string]int{}
	windows := map[string]int{}
	for _, o := range obs {
		c := o.Expected(base)
		if o.Layout || c == classifier.Idle {
			continue
		}
		switch {
		case !o.Settled && opt.ownEarly[o.Truth] && o.Source != "fio":
			c += earlyCentre
		case !o.Settled:
			continue
		case opt.ownFio[o.Truth] && o.Source == "fio":
			c += fioCentre
		}
		windows[c]++
		for _, f := range base.Features {
			v, ok := o.Inputs[f.Name]
			if !ok {
				if lacking[c] == nil {
					lacking[c] = map[string]int{}
				}
				lacking[c][f.Name]++
				continue
			}
			for _, g := range []string{"", o.GuestFS} {
				if g != "" && !isGuest[f.Name] {
					continue
				}
				k := key{c, g, f.Name}
				values[k] = append(values[k], v)
				if runs[k] == nil {
					runs[k] = map[string]bool{}
				}
				runs[k][o.Run] = true
			}
		}
	}
	// Scales: how far a run's windows lie from their class's mean (on
	// the run's guest file system, for GuestFeatures): the spread between
	// runs (pairs and host settings) and within a run together, floored.
	for i, f := range m.Features {
		var ss, n float64
		var centres []float64
		for k, vs := range values {
			if k.feature != f.Name || (isGuest[f.Name] && k.guest == "") || (!isGuest[f.Name] && k.guest != "") {
				continue
			}
			if strings.HasSuffix(k.class, fioCentre) || strings.HasSuffix(k.class, earlyCentre) {
				// A fio model's windows lie closer together than any
				// program's, and early windows are a passing shape: a
				// unit is set by the programs' settled spread.
				continue
			}
			mean := 0.0
			for _, v := range vs {
				mean += v
			}
			mean /= float64(len(vs))
			for _, v := range vs {
				ss += (v - mean) * (v - mean)
			}
			n += float64(len(vs))
			centres = append(centres, mean)
		}
		if n < 2 {
			continue // no windows for this feature: base's scale
		}
		sd := math.Sqrt(ss / n)
		sort.Float64s(centres)
		floor := opt.ScaleFloor * (centres[len(centres)-1] - centres[0])
		m.Features[i].Scale = round3(math.Max(math.Max(sd, floor), 1e-3))
		m.Features[i].Source = fmt.Sprintf("fitted: the standard deviation of the training windows around their class's mean%s, over %.0f windows (floored at %.2f of the spread of the class means)",
			map[bool]string{true: " on their guest file system", false: ""}[isGuest[f.Name]], n, opt.ScaleFloor)
	}
	box := func(vs []float64, scale float64) [2]float64 {
		s := append([]float64(nil), vs...)
		sort.Float64s(s)
		lo, hi := quantile(s, opt.Quantile), quantile(s, 1-opt.Quantile)
		return [2]float64{round2(lo - opt.Margin*scale), round2(hi + opt.Margin*scale)}
	}
	// centre fits the centre (or box) of the windows filed under name,
	// named own; false without windows.
	centre := func(name, own string) (classifier.Class, bool) {
		nc := classifier.Class{Name: own, Box: map[string][2]float64{}}
		trained := false
		for _, f := range m.Features {
			vs := values[key{name, "", f.Name}]
			if len(vs) == 0 {
				continue
			}
			trained = true
			nc.Box[f.Name] = box(vs, f.Scale)
			if n := lacking[name][f.Name]; opt.Missing && n > 0 && classifier.Conditional(f.Name) {
				if nc.Missing == nil {
					nc.Missing = map[string]float64{}
				}
				nc.Missing[f.Name] = round2(-2 * math.Log(float64(n)/float64(windows[name])))
			}
			if !isGuest[f.Name] {
				continue
			}
			for _, g := range classifier.GuestFileSystems {
				k := key{name, g, f.Name}
				if len(runs[k]) < opt.MinGuestRuns {
					continue
				}
				gb, all := box(values[k], f.Scale), nc.Box[f.Name]
				if all[0] == all[1] && math.Abs(gb[0]-all[0]) < opt.GuestShift*f.Scale {
					continue // a centre near every guest's: not worth a join
				}
				if all[0] != all[1] && gb[1]-gb[0] > opt.GuestShare*(all[1]-all[0]) {
					continue // not much narrower than over every guest: not worth a join
				}
				if nc.GuestFS == nil {
					nc.GuestFS = map[string]map[string][2]float64{}
				}
				if nc.GuestFS[g] == nil {
					nc.GuestFS[g] = map[string][2]float64{}
				}
				nc.GuestFS[g][f.Name] = gb
			}
		}
		return nc, trained
	}
	for i, c := range m.Classes {
		nc, ok := centre(c.Name, c.Name)
		if !ok {
			continue
		}
		src := ""
		if fio, ok := centre(c.Name+fioCentre, "fio"); ok {
			src = "filebench"
			fio.Source = describeFit(c.Name, obs, base, "fio") + ": " + describeBox(fio)
			nc.Others = []classifier.Class{fio}
		}
		if early, ok := centre(c.Name+earlyCentre, "early"); ok {
			early.Source = describeEarly(c.Name, obs, base) + ": " + describeBox(early)
			nc.Others = append(nc.Others, early)
		}
		nc.Source = describeFit(c.Name, obs, base, src) + ": " + describeBox(nc)
		m.Classes[i] = nc
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("fitted model: %w", err)
	}
	return &m, nil
}

// fioCentre files a class's fio windows apart from its programs'
// (FioCentres).
const fioCentre = "/fio"

// earlyCentre files a class's early windows apart from its settled ones
// (EarlyCentres).
const earlyCentre = "/early"

// quantile returns the q quantile of sorted s by linear interpolation.
func quantile(s []float64, q float64) float64 {
	if len(s) == 1 || q <= 0 {
		return s[0]
	}
	if q >= 1 {
		return s[len(s)-1]
	}
	p := q * float64(len(s)-1)
	i := int(p)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (p-float64(i))*(s[i+1]-s[i])
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// An Evaluated window is an observation classed by a model: the class the
// rules would hold (with their hysteresis over the run's earlier windows)
// and their confidence.
type Evaluated struct {
	Observation
	Expect     string
	Class      string // held
	Confidence float64
	Distances  map[string]float64
}

// Right reports whether the held class is the expected one.
func (e Evaluated) Right() bool { return e.Class == e.Expect }

// Evaluate classes obs with m, run by run in order, carrying the
// hysteresis from each window to the next of its run.
func Evaluate(m *classifier.Model, obs []Observation) []Evaluated {
	return EvaluateSettling(m, obs, 0)
}

// EvaluateSettling is Evaluate with the settle rules the live rules
// apply (classifier Settling) at a short window of window seconds, each
// window's end its evaluation's time: the confidence a class still
// settling gets is damped by the share of the settle time it has been
// held, as domain_disk:fspair_workload_class:confidence is. 0: none.
func EvaluateSettling(m *classifier.Model, obs []Observation, window float64) []Evaluated {
	out := make([]Evaluated, 0, len(obs))
	prev := map[string]string{}
	runs := map[string][]int{}
	for _, o := range obs {
		r := m.Classify(o.Inputs, o.IOPS, o.GuestFS)
		held := m.Held(r.Scores, prev[o.Run])
		prev[o.Run] = held
		runs[o.Run] = append(runs[o.Run], len(out))
		out = append(out, Evaluated{Observation: o, Expect: o.Expected(m), Class: held, Confidence: r.Confidence, Distances: r.Distances})
	}
	if window <= 0 {
		return out
	}
	for _, idx := range runs {
		evals := make([]classifier.Evaluation, len(idx))
		for k, i := range idx {
			evals[k] = classifier.Evaluation{Time: out[i].End, Class: out[i].Class, Confidence: out[i].Confidence}
		}
		for k, s := range m.Settling(window, evals) {
			out[idx[k]].Confidence = s.Confidence
		}
	}
	return out
}

// PairOf returns the guest/host file-system pair of a pair written
// GUEST/HOST[/FORMAT/...]: what leave-one-pair-out holds out.
func PairOf(pair string) string {
	f := strings.SplitN(pair, "/", 3)
	if len(f) < 2 {
		return pair
	}
	return f[0] + "/" + f[1]
}

// LeaveOnePairOut fits a model on every guest/host pair's windows but one
// pair's (Filebench's and the fio models' alike) and classes that pair's
// Filebench windows with it, for each pair: every window classed by a
// model that never saw its pair.
func LeaveOnePairOut(base *classifier.Model, obs []Observation, opt FitOptions) ([]Evaluated, error) {
	var out []Evaluated
	for _, p := range pairsOf(obs, "filebench") {
		var train, test []Observation
		for _, o := range obs {
			switch {
			case PairOf(o.Pair) != p:
				train = append(train, o)
			case o.Source == "filebench":
				test = append(test, o)
			}
		}
		m, err := Fit(base, train, opt)
		if err != nil {
			return nil, fmt.Errorf("leave %s out: %w", p, err)
		}
		out = append(out, EvaluateSettling(m, test, opt.Window)...)
	}
	return out, nil
}

// FioObservations returns the disjoint sub-windows of the fio model runs
// of res (testdata/features.json), or a run's whole window when it has
// none, as observations, every one settled (the runs were measured after
// their warm-up).
func FioObservations(res *Results) []Observation {
	var out []Observation
	for _, r := range res.Runs {
		run := string(r.Workload) + "@" + r.Pair
		ws := r.Windows
		if len(ws) == 0 {
			ws = []Sample{{At: r.WindowSeconds, Span: r.WindowSeconds, Features: r.Features}}
		}
		for _, w := range ws {
			x, iops := ModelInputs(w.Features)
			out = append(out, Observation{Truth: r.Workload, Run: run, Pair: r.Pair, GuestFS: GuestFS(r.Pair),
				End: w.At, Inputs: x, IOPS: iops, Settled: true, Source: "fio"})
		}
	}
	return out
}

// describeFit says what a class's box was fitted on: its settled training
// windows (of source src, "" for all), their runs by source and their
// guest/host pairs.
func describeFit(class string, obs []Observation, base *classifier.Model, src string) string {
	windows := 0
	runs := map[string]map[string]bool{}
	pairs := map[string]bool{}
	for _, o := range obs {
		if !o.Settled || o.Layout || o.Expected(base) != class || (src != "" && o.Source != src) {
			continue
		}
		windows++
		if runs[o.Source] == nil {
			runs[o.Source] = map[string]bool{}
		}
		runs[o.Source][o.Run] = true
		pairs[PairOf(o.Pair)] = true
	}
	var parts []string
	for _, src := range []string{"filebench", "fio"} {
		if n := len(runs[src]); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, map[string]string{"filebench": "Filebench runs", "fio": "fio model runs"}[src]))
		}
	}
	return fmt.Sprintf("fitted (tests/workload DefaultFit) on %d windows of %s on %d guest/host pairs", windows, strings.Join(parts, " and "), len(pairs))
}

// describeBox spells a box in the features' own units: its ranges, or its
// centre where every range is one value, and the squared distance the
// class counts for a conditional feature (a mean request size, the random
// share of writes) a disk cannot show.
func describeBox(c classifier.Class) string {
	var parts []string
	pow := func(v float64) float64 { return math.Pow(2, v) }
	centre := true
	for _, b := range c.Box {
		centre = centre && b[0] == b[1]
	}
	span := func(format string, lo, hi float64) string {
		if centre {
			return fmt.Sprintf(format, lo)
		}
		return fmt.Sprintf(strings.Replace(format, " ", fmt.Sprintf("-%s ", format[:strings.Index(format, " ")]), 1), lo, hi)
	}
	if b, ok := c.Box[classifier.ReadWriteLog2]; ok {
		parts = append(parts, span("%.3g reads per write", pow(b[0]), pow(b[1])))
	}
	if b, ok := c.Box[classifier.ReadSizeLog2]; ok {
		parts = append(parts, "mean read "+span("%.1f KiB", pow(b[0])/1024, pow(b[1])/1024))
	}
	if b, ok := c.Box[classifier.WriteSizeLog2]; ok {
		parts = append(parts, "mean write "+span("%.1f KiB", pow(b[0])/1024, pow(b[1])/1024))
	}
	if b, ok := c.Box[classifier.SyncWriteShare]; ok {
		parts = append(parts, span("%.2f of writes durable", math.Max(0, b[0]), math.Min(1, b[1])))
	}
	if b, ok := c.Box[classifier.FlushesPerWriteLog2]; ok {
		parts = append(parts, span("%.3g flushes per write", pow(b[0]), pow(b[1])))
	}
	out := strings.Join(parts, ", ")
	if centre {
		out = "centre (the median of its windows) " + out + " (per guest file system where guest_fs gives centres)"
	} else {
		out += " (margins included; per guest file system where guest_fs gives ranges)"
	}
	for _, f := range classifier.FeatureNames {
		if v, ok := c.Missing[f]; ok {
			out += fmt.Sprintf("; %s undefined (no requests of its kind) on some of its windows: it counts %.2f squared units for lacking it, -2 ln of their share", f, v)
		}
	}
	return out
}
