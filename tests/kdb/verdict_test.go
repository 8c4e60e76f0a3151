package main

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

var (
	fullCtrl  = controlCell{"ext4/ext4", workload.Web}
	testRankO = RankOptions{Tolerance: DefaultTolerance, Level: DefaultConfidence, Seed: 7, Replicates: 2000}
)

// planted returns a truth function: factor[pair] (default 1) times 10 MB/s.
func planted(factor map[string]float64) func(j job) float64 {
	return func(j job) float64 {
		if f, ok := factor[j.pair]; ok && j.control == "" {
			return 10e6 * f
		}
		return 10e6
	}
}

// slowing is a machine that loses speed over the matrix as the first full
// run's did (docs/kdb/README.md): log-linearly by 30% over span from t0,
// and by a further 20% at once at step after t0.
func slowing(span, step time.Duration) func(t time.Time) float64 {
	return func(t time.Time) float64 {
		f := math.Exp(math.Log(0.7) * t.Sub(t0).Seconds() / span.Seconds())
		if t.Sub(t0) >= step {
			f *= 0.8
		}
		return f
	}
}

// verdictsOf prints "pair=verdict[*]" of one workload in rank order.
func verdictsOf(rs []Ranked) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s=%s%s", r.Pair, r.Verdict, star(r.Standout)))
	}
	return strings.Join(out, " ")
}

// TestScheduleBlocks: every block holds every cell once, in a new order
// per block, the control at the start, middle and end; the order is the
// same from the same seed, another from another seed, and adding blocks
// leaves the earlier ones as they were.
func TestScheduleBlocks(t *testing.T) {
	pairs, works := AllPairs(), workload.Workloads
	s := schedule(pairs, works, 3, fullCtrl, 42)
	if len(s) != 3*(9*4+3) {
		t.Fatalf("%d jobs, want %d", len(s), 3*(9*4+3))
	}
	var orders []string
	for b := 1; b <= 3; b++ {
		var blk []job
		for _, j := range s {
			if j.repeat == b {
				blk = append(blk, j)
			}
		}
		if blk[0].control != ControlStart || blk[len(blk)-1].control != ControlEnd {
			t.Errorf("block %d: starts with %v and ends with %v, want the control", b, blk[0], blk[len(blk)-1])
		}
		cells := map[string]int{}
		var pairOrder []string
		midAt := -1
		for i, j := range blk {
			if j.control != "" {
				if j.pair != fullCtrl.pair || j.workload != fullCtrl.workload {
					t.Errorf("block %d: control run %v is not the control cell", b, j)
				}
				if j.control == ControlMiddle {
					midAt = len(pairOrder)
				}
				continue
			}
			cells[string(j.workload)+" "+j.pair]++
			if len(pairOrder) == 0 || pairOrder[len(pairOrder)-1] != j.pair {
				pairOrder = append(pairOrder, j.pair)
			}
			_ = i
		}
		if len(cells) != 36 {
			t.Errorf("block %d holds %d cells, want 36", b, len(cells))
		}
		for c, n := range cells {
			if n != 1 {
				t.Errorf("block %d runs %s %d times", b, c, n)
			}
		}
		if len(pairOrder) != 9 { // a pair's workloads back to back: one guest per pair
			t.Errorf("block %d visits pairs %v, want each once", b, pairOrder)
		}
		if midAt != 4 {
			t.Errorf("block %d: middle control after %d pairs, want 4 of 9", b, midAt)
		}
		orders = append(orders, strings.Join(pairOrder, ","))
	}
	if orders[0] == orders[1] || orders[1] == orders[2] {
		t.Errorf("blocks share an order: %q", orders)
	}
	if !reflect.DeepEqual(s, schedule(pairs, works, 3, fullCtrl, 42)) {
		t.Error("the same seed gave another schedule")
	}
	if reflect.DeepEqual(s, schedule(pairs, works, 3, fullCtrl, 43)) {
		t.Error("another seed gave the same schedule")
	}
	if more := schedule(pairs, works, 5, fullCtrl, 42); !reflect.DeepEqual(more[:len(s)], s) {
		t.Error("raising the repeats changed the earlier blocks")
	}
	// One pair: the middle control still comes between start and end.
	one := schedule([]string{"xfs/xfs"}, []workload.Workload{workload.Mail}, 1, controlCell{"xfs/xfs", workload.Mail}, 1)
	var pos []string
	for _, j := range one {
		pos = append(pos, j.control)
	}
	if strings.Join(pos, ",") != "start,,middle,end" {
		t.Errorf("one pair: %q", pos)
	}
}

// TestDriftCancelled: a planted drift (speed falling log-linearly by 30%
// over the matrix and a 20% step between blocks 1 and 2, larger than the
// first run's 15-45% over hours) is measured by the controls and taken out
// of every run exactly, and the report's drift is the planted one.
func TestDriftCancelled(t *testing.T) {
	jobs := schedule(AllPairs(), workload.Workloads, 3, fullCtrl, 5)
	span := time.Duration(len(jobs)) * 100 * time.Second
	step := time.Duration(39) * 100 * time.Second // block 2 starts at job 39
	drift := slowing(span, step)
	truth := planted(map[string]float64{"xfs/ext4": 1.2})
	runs := synthJobs(jobs, truth, drift, 0, 0)
	d := MeasureDrift(runs)
	if d == nil || len(d.Points) != 9 || d.Cell != "ext4/ext4:web" {
		t.Fatalf("drift %+v, want 9 control points of ext4/ext4:web", d)
	}
	lo, hi := d.Range()
	wantSpread := drift(d.Points[0].Time) / drift(d.Points[8].Time)
	approx(t, "measured drift spread", hi/lo, wantSpread)
	if hi/lo < 1.5 {
		t.Errorf("the planted drift spread is %.2f, want it large", hi/lo)
	}
	var ratio float64
	for i, r := range runs {
		if r.Control != "" {
			continue
		}
		c, ok := d.Corrected(r)
		if !ok {
			t.Fatalf("run %d has no throughput", i)
		}
		got := c / truth(jobs[i])
		if ratio == 0 {
			ratio = got
		}
		if math.Abs(got/ratio-1) > 1e-9 {
			t.Errorf("run %d (%s): corrected/true %.6f, others %.6f: drift left over", i, jobs[i], got, ratio)
		}
	}

	// With the drift and some noise the planted 20% difference is found
	// in every workload; the eight equal pairs are the worst group, or,
	// when the noise happens to set one of them apart from the slowest
	// (the familywise 5% the level allows, per workload), not
	// distinguishable: never best.
	runs = synthJobs(jobs, truth, drift, 0.02, 3)
	ranked, as := Rank(Cells(runs), MeasureDrift(runs), testRankO)
	worstCalled := 0
	for _, w := range workload.Workloads {
		rs := ranked[w]
		if rs[0].Pair != "xfs/ext4" || rs[0].Verdict != VerdictBest || !rs[0].Standout {
			t.Errorf("%s: %s; want xfs/ext4 best*", w, verdictsOf(rs))
		}
		if rs[1].Verdict == VerdictWorst {
			worstCalled++
		}
		for _, r := range rs[1:] {
			if r.Verdict != rs[1].Verdict || r.Verdict == VerdictBest {
				t.Errorf("%s: %s, want the eight equal pairs worst or not distinguishable together", w, verdictsOf(rs))
				break
			}
		}
		if as[w].Reason != "" {
			t.Errorf("%s: %s", w, as[w].Reason)
		}
	}
	if worstCalled < 3 {
		t.Errorf("the eight equal pairs were called worst in %d of 4 workloads", worstCalled)
	}
}

// TestPlantedDifference: on a drifting machine with 3% run noise (the
// first run's repeats differed by a median 7.5%, i.e. about 5% per run),
// a pair planted 35% ahead and one 30% behind are called best and worst,
// standouts, with confidence at the level or more; the pairs between are
// not distinguishable; a workload where all pairs are equal calls none.
func TestPlantedDifference(t *testing.T) {
	works := []workload.Workload{workload.Web, workload.Mail}
	jobs := schedule(AllPairs(), works, 3, fullCtrl, 11)
	span := time.Duration(len(jobs)) * 100 * time.Second
	truth := func(j job) float64 {
		if j.workload == workload.Mail || j.control != "" {
			return 10e6
		}
		return planted(map[string]float64{"ext4/xfs": 1.35, "xfs/btrfs": 0.7})(j)
	}
	runs := synthJobs(jobs, truth, slowing(span, span/2), 0.03, 9)
	ranked, as := Rank(Cells(runs), MeasureDrift(runs), testRankO)
	web := ranked[workload.Web]
	if web[0].Pair != "ext4/xfs" || web[0].Verdict != VerdictBest || !web[0].Standout ||
		web[8].Pair != "xfs/btrfs" || web[8].Verdict != VerdictWorst || !web[8].Standout {
		t.Errorf("web: %s", verdictsOf(web))
	}
	for _, r := range web[1:8] {
		if r.Verdict != VerdictNotDistinguishable {
			t.Errorf("web: %s=%s, want not_distinguishable", r.Pair, r.Verdict)
		}
	}
	for _, r := range []Ranked{web[0], web[8]} {
		if r.Confidence < DefaultConfidence || r.Confidence > 1 {
			t.Errorf("web %s: confidence %g", r.Pair, r.Confidence)
		}
		if !(r.Low < r.Estimate && r.Estimate < r.High) {
			t.Errorf("web %s: interval %g-%g around %g", r.Pair, r.Low, r.High, r.Estimate)
		}
	}
	a := as[workload.Web]
	if a.DF != 18 || a.Noise < 0.015 || a.Noise > 0.06 || a.MDD < 0.05 || a.MDD > 0.2 {
		t.Errorf("web assessment %+v: want 18 residual df, noise near 3%%, a minimum detectable difference of 5-20%%", a)
	}
	t.Logf("web: noise %.1f%%, critical value %.2f, minimum detectable difference %.1f%%", a.Noise*100, a.Q, a.MDD*100)
	for _, r := range ranked[workload.Mail] {
		if r.Verdict != VerdictNotDistinguishable || r.Confidence != 0 {
			t.Errorf("mail (all equal): %s=%s (%g)", r.Pair, r.Verdict, r.Confidence)
		}
	}
	if as[workload.Mail].Reason == "" {
		t.Error("mail: no reason given for calling nothing")
	}
}

// TestEqualPairsNotDistinguishable: nine equal pairs on a drifting machine
// with noise, over many seeds, are called not distinguishable nearly
// always: a false best or worst at most in the few percent the level
// allows.
func TestEqualPairsNotDistinguishable(t *testing.T) {
	jobs := schedule(AllPairs(), []workload.Workload{workload.Mail}, 3, controlCell{"ext4/ext4", workload.Mail}, 3)
	span := time.Duration(len(jobs)) * 100 * time.Second
	o := testRankO
	o.Replicates = 1000
	called := 0
	const trials = 40
	for s := range uint64(trials) {
		runs := synthJobs(jobs, planted(nil), slowing(span, span/3), 0.05, 100+s)
		ranked, _ := Rank(Cells(runs), MeasureDrift(runs), o)
		for _, r := range ranked[workload.Mail] {
			if r.Verdict != VerdictNotDistinguishable {
				called++
				break
			}
		}
	}
	if called > 3 {
		t.Errorf("equal pairs got a verdict in %d of %d matrices", called, trials)
	}
}

// TestHalvesAgree: the two halves of a six-block run (each with its own
// controls) give the same settled verdicts, or call a pair not
// distinguishable in one of them; the whole run finds the planted tiers.
func TestHalvesAgree(t *testing.T) {
	jobs := schedule(AllPairs(), []workload.Workload{workload.Fileserver}, 6, controlCell{"btrfs/btrfs", workload.Fileserver}, 99)
	span := time.Duration(len(jobs)) * 100 * time.Second
	tiers := map[string]float64{"ext4/ext4": 1.3, "xfs/ext4": 1.3, "btrfs/xfs": 0.75, "btrfs/ext4": 0.75, "xfs/btrfs": 0.75}
	agreeing := 0
	for seed := range uint64(5) {
		runs := synthJobs(jobs, planted(tiers), slowing(span, span/4), 0.04, 7+seed)
		var first, second []Run
		for _, r := range runs {
			if r.Repeat <= 3 {
				first = append(first, r)
			} else {
				second = append(second, r)
			}
		}
		verdict := func(runs []Run) map[string]string {
			ranked, _ := Rank(Cells(runs), MeasureDrift(runs), testRankO)
			m := map[string]string{}
			for _, r := range ranked[workload.Fileserver] {
				m[r.Pair] = r.Verdict
			}
			return m
		}
		all, a, b := verdict(runs), verdict(first), verdict(second)
		// The report's check (Halves) splits the same way and sees no
		// conflict.
		if h := Halves(runs, testRankO); h == nil || h.Split != 3 || len(h.Conflicts) != 0 {
			t.Errorf("seed %d: halves check: conflicts %v", seed, h.Conflicts)
		} else {
			agreeing += h.Agreeing
		}
		for _, p := range AllPairs() {
			if a[p] != b[p] && a[p] != VerdictNotDistinguishable && b[p] != VerdictNotDistinguishable {
				t.Errorf("seed %d: %s is %s in the first half and %s in the second", seed, p, a[p], b[p])
			}
			want := VerdictNotDistinguishable
			switch tiers[p] {
			case 1.3:
				want = VerdictBest
			case 0.75:
				want = VerdictWorst
			}
			if all[p] != want {
				t.Errorf("seed %d: whole run calls %s %s, want %s", seed, p, all[p], want)
			}
		}
	}
	// The step inside block 2 leaves the first half too noisy to settle
	// much (it says so rather than guess); the halves still settle some
	// verdicts alike.
	if agreeing == 0 {
		t.Error("the halves never settled a verdict alike")
	}
}

// TestHalvesConflict: the halves check reports a pair called best in one
// half and worst in the other (here planted: the pairs swap places
// between the halves), and needs four blocks.
func TestHalvesConflict(t *testing.T) {
	jobs := schedule([]string{"ext4/xfs", "xfs/xfs", "btrfs/btrfs", "ext4/ext4"}, []workload.Workload{workload.Mail}, 6, controlCell{"ext4/ext4", workload.Mail}, 2)
	truth := func(j job) float64 {
		if j.control != "" || j.pair == "btrfs/btrfs" || j.pair == "ext4/ext4" {
			return 10e6
		}
		if (j.pair == "ext4/xfs") == (j.repeat <= 3) {
			return 15e6
		}
		return 5e6
	}
	runs := synthJobs(jobs, truth, noDrift, 0.02, 1)
	h := Halves(runs, testRankO)
	if h == nil || len(h.Conflicts) != 2 || h.Conflicts[0] != "mail ext4/xfs: best/worst" {
		t.Errorf("halves %+v", h)
	}
	ranked, _ := Rank(Cells(runs), MeasureDrift(runs), testRankO)
	md := (&Report{Ranked: ranked, Halves: h}).halvesSection().markdown()
	if !strings.Contains(md, "**They disagree** on 2 pairs (best in one half, worst in the other): mail ext4/xfs: best/worst, mail xfs/xfs: worst/best") ||
		!strings.Contains(md, "| mail | ext4/xfs | not distinguishable | best (standout) | worst (standout) |") {
		t.Errorf("halves section:\n%s", md)
	}
	if Halves(synthJobs(jobs[:len(jobs)/2], truth, noDrift, 0.02, 1), testRankO) != nil {
		t.Error("three blocks were split in halves")
	}
}

// TestBootstrapSeeded: the intervals and confidences depend only on the
// data and the seed.
func TestBootstrapSeeded(t *testing.T) {
	jobs := schedule(AllPairs(), []workload.Workload{workload.Web}, 3, fullCtrl, 1)
	runs := synthJobs(jobs, planted(map[string]float64{"ext4/xfs": 1.3}), noDrift, 0.03, 1)
	a, _ := Rank(Cells(runs), MeasureDrift(runs), testRankO)
	b, _ := Rank(Cells(runs), MeasureDrift(runs), testRankO)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave other intervals")
	}
	o := testRankO
	o.Seed++
	c, _ := Rank(Cells(runs), MeasureDrift(runs), o)
	if reflect.DeepEqual(a, c) {
		t.Error("another seed gave the very same intervals")
	}
	if a[workload.Web][0].Verdict != c[workload.Web][0].Verdict {
		t.Errorf("the verdict depends on the seed: %s against %s", a[workload.Web][0].Verdict, c[workload.Web][0].Verdict)
	}
}

// TestTooFewRuns: the quick matrix (two pairs, two repeats: two residual
// degrees of freedom) calls nothing, however far apart the pairs, and
// says why; so does a state without control runs, and a pair with one
// run; a workload with one pair gets no verdict.
func TestTooFewRuns(t *testing.T) {
	o, err := parseOptions([]string{"-size", "quick"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobs := schedule(o.Pairs, o.Workloads, o.Repeats, o.control, 1)
	runs := synthJobs(jobs, planted(map[string]float64{"ext4/xfs": 2}), noDrift, 0.01, 1)
	ranked, as := Rank(Cells(runs), MeasureDrift(runs), testRankO)
	for _, w := range o.Workloads {
		if v := verdictsOf(ranked[w]); v != "ext4/xfs=not_distinguishable xfs/xfs=not_distinguishable" {
			t.Errorf("quick %s: %s", w, v)
		}
		if !strings.Contains(as[w].Reason, "2 residual degrees of freedom") {
			t.Errorf("quick %s: reason %q", w, as[w].Reason)
		}
	}

	// Runs made before the blocks: no controls, nothing settled.
	var legacy []Run
	for _, r := range synthJobs(schedule(AllPairs(), []workload.Workload{workload.Web}, 3, fullCtrl, 1), planted(map[string]float64{"ext4/xfs": 2}), noDrift, 0.01, 1) {
		if r.Control == "" {
			legacy = append(legacy, r)
		}
	}
	ranked, as = Rank(Cells(legacy), MeasureDrift(legacy), testRankO)
	if ranked[workload.Web][0].Verdict != VerdictNotDistinguishable || !strings.Contains(as[workload.Web].Reason, "no control runs") {
		t.Errorf("legacy: %s (%s)", verdictsOf(ranked[workload.Web]), as[workload.Web].Reason)
	}
	if MeasureDrift(legacy) != nil {
		t.Error("drift measured without control runs")
	}

	// A pair with one run (a matrix stopped in its second block).
	cut := slices.DeleteFunc(slices.Clone(runs), func(r Run) bool { return r.Pair == "xfs/xfs" && r.Repeat == 2 })
	ranked, as = Rank(Cells(cut), MeasureDrift(cut), testRankO)
	if ranked[workload.Mail][0].Verdict != VerdictNotDistinguishable || !strings.Contains(as[workload.Mail].Reason, "fewer than two runs") {
		t.Errorf("one run: %s (%s)", verdictsOf(ranked[workload.Mail]), as[workload.Mail].Reason)
	}

	one := slices.DeleteFunc(slices.Clone(runs), func(r Run) bool { return r.Pair == "xfs/xfs" })
	ranked, _ = Rank(Cells(one), MeasureDrift(one), testRankO)
	if r := ranked[workload.Mail]; len(r) != 1 || r[0].Verdict != "" || r[0].Of != 1 {
		t.Errorf("one pair: %+v", r)
	}
}

// TestRankSkipsCellsWithoutThroughput: a cell without fio throughput is
// not ranked.
func TestRankSkipsCellsWithoutThroughput(t *testing.T) {
	runs := synthJobs(schedule([]string{"ext4/xfs", "xfs/xfs"}, []workload.Workload{workload.Mail}, 2, controlCell{"ext4/xfs", workload.Mail}, 1), planted(nil), noDrift, 0, 0)
	for i := range runs {
		if runs[i].Pair == "xfs/xfs" {
			runs[i].Fio = Fio{}
		}
	}
	ranked, _ := Rank(Cells(runs), MeasureDrift(runs), testRankO)
	if rs := ranked[workload.Mail]; len(rs) != 1 || rs[0].Pair != "ext4/xfs" || rs[0].Of != 1 {
		t.Errorf("ranked %+v", rs)
	}
}
