package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/fspair/fspair/tests/workload"
)

// Verdicts, spelt as the knowledge base spells them (rules/kdb/pairs.yaml),
// and not_distinguishable, which only a site file has: the lab measured the
// pair but cannot call it best or worst. rules/gen keeps the published
// verdict for such a pair.
const (
	VerdictBest               = "best"
	VerdictWorst              = "worst"
	VerdictContested          = "contested" // published table only: the lab no longer makes it
	VerdictNotDistinguishable = "not_distinguishable"
)

// DefaultTolerance is the relative throughput difference below which two
// pairs are never called apart, however sure the statistics: a reader of
// the published table would not call a 5% difference a ranking, and on a
// site a 5% difference is not worth a migration. -tolerance changes it.
const DefaultTolerance = 0.05

// DefaultConfidence is the level at which the lab calls a pair best or
// worst (-confidence). rules/gen acts on site verdicts only at 0.95 or more
// (MinSiteConfidence there): a lab run at a lower level writes verdicts the
// rules ignore.
const DefaultConfidence = 0.95

// MinResidualDF is the fewest residual degrees of freedom (runs less cells)
// a workload needs before anything is called: the noise is estimated from
// the residuals, and with fewer than six a bootstrap of them understates
// it badly (with two, a quick matrix's, it is two numbers). Below it every
// pair is not distinguishable.
const MinResidualDF = 6

// Replicates is the bootstrap's replicate count: its quantile at 0.95 then
// moves by well under 1% between seeds.
const Replicates = 4000

// Ranked is one cell's place among the pairs measured for its workload and
// the verdict derived from it.
type Ranked struct {
	Pair       string
	Rank       int  // 1 = highest drift-corrected throughput
	Of         int  // pairs ranked for the workload
	Throughput Stat // fio bytes per second over the repeats, as measured
	Corrected  Stat // the same with the drift taken out (drift.go)
	// Estimate is the geometric mean of the corrected throughput over the
	// repeats; Low and High its bootstrap percentile interval at the
	// assessment's level (NaN with one run).
	Estimate, Low, High float64
	Verdict             string // best, worst, not_distinguishable; "" with fewer than two pairs
	Standout            bool
	// Confidence is the bootstrap confidence of a best or worst call: the
	// share of replicates in which the noise is smaller than the call's
	// narrowest margin (see Rank); 0 otherwise.
	Confidence float64
}

// Assessment is what one workload's statistics were.
type Assessment struct {
	Workload   workload.Workload
	Level      float64
	Replicates int
	DF         int     // residual degrees of freedom
	Noise      float64 // pooled standard deviation of a run's log corrected throughput
	Q          float64 // simultaneous critical value, in units of the noise of a difference (see Rank)
	// MDD is the minimum detectable difference (a ratio less one) between
	// two cells with the median run count: smaller differences are never
	// called, whatever the data.
	MDD float64
	// Reason says why nothing could be settled ("" when the test ran).
	Reason string
}

// RankOptions are Rank's parameters.
type RankOptions struct {
	Tolerance  float64
	Level      float64
	Seed       int64
	Replicates int
}

// Rank derives each workload's verdicts from the drift-corrected fio
// throughput (bytes per second) of its cells.
//
// Figures: each run's throughput is corrected for the drift the control
// runs measured (drift.go) and taken in log space, where the drift and the
// differences between pairs are ratios. A cell's figure is the mean of its
// runs' logs (the geometric mean of the corrected throughput).
//
// Noise and interval (a residual bootstrap, seeded): with two to five runs
// per cell, a cell's own runs say almost nothing about its spread (a
// percentile bootstrap of the median of three runs returns their min-max,
// and no rank test on three runs per cell can reach p < 0.05: the exact
// Mann-Whitney test of 3 against 3 bottoms out at p = 0.1). So the noise is
// pooled over the workload's cells: every run's deviation from its cell's
// mean, scaled by sqrt(n/(n-1)) so that the pool has the run noise's
// variance, assuming the noise of a run is alike for every pair of a
// workload (it is the machine's, multiplicative). A bootstrap replicate
// draws each cell's n deviations from the pool; the cell's interval is
// the percentile interval of its replicated means.
//
// Multiple comparisons (a best pair among nine is a claim about its eight
// comparisons, and there are 36 pairs of pairs): every replicate's largest
// standardized difference error over all pairs of cells,
// T* = max |e*_i - e*_j| / sqrt(1/n_i + 1/n_j), gives one critical value
// q, the level's quantile of T* (the bootstrap form of Tukey's studentized
// range), so that all the pairwise statements made at once hold with the
// level's confidence. Pair i is faster than pair j when
// (m_i - m_j) / sqrt(1/n_i + 1/n_j) > q and m_i - m_j > log(1 + tolerance).
//
// Verdicts: the best group is the fastest pair and every pair not slower
// than it; the worst group the slowest pair and every pair not faster than
// it. A group is called (best or worst) only when each of its pairs is
// faster (slower) than each pair outside it: its difference from the
// others is outside the noise. Its confidence is the share of replicates
// with T* below its narrowest margin. Every other pair, and every pair of
// a workload whose groups overlap or are not separated, is
// not_distinguishable. A called group of one pair, with three or more
// pairs measured, is a standout.
//
// Nothing is called (all not_distinguishable) when there are no control
// runs (the drift cannot be told from the pairs), when a pair has fewer
// than two runs, or with fewer than MinResidualDF residual degrees of
// freedom; a workload with one pair measured gets no verdict at all.
func Rank(cells []Cell, d *Drift, o RankOptions) (map[workload.Workload][]Ranked, map[workload.Workload]Assessment) {
	if o.Replicates <= 0 {
		o.Replicates = Replicates
	}
	logs := map[workload.Workload][][]float64{}
	byW := map[workload.Workload][]Ranked{}
	for _, c := range cells {
		s, ok := c.Stats[MThroughputBytes]
		if !ok {
			continue
		}
		var ys, corr []float64
		for _, r := range c.Runs {
			if v, ok := d.Corrected(r); ok {
				ys = append(ys, math.Log(v))
				corr = append(corr, v)
			}
		}
		cs, _ := statOf(corr)
		byW[c.Workload] = append(byW[c.Workload], Ranked{Pair: c.Pair, Throughput: s, Corrected: cs, Estimate: math.Exp(mean(ys))})
		logs[c.Workload] = append(logs[c.Workload], ys)
	}
	as := map[workload.Workload]Assessment{}
	for w, rs := range byW {
		ys := logs[w]
		idx := make([]int, len(rs))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool {
			ra, rb := rs[idx[a]], rs[idx[b]]
			if ra.Estimate != rb.Estimate {
				return ra.Estimate > rb.Estimate
			}
			return pairLess(ra.Pair, rb.Pair)
		})
		sorted := make([]Ranked, len(rs))
		sortedY := make([][]float64, len(rs))
		for i, j := range idx {
			sorted[i], sortedY[i] = rs[j], ys[j]
			sorted[i].Rank, sorted[i].Of = i+1, len(rs)
		}
		rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6b6462+uint64(workloadRank(w))))
		a := assess(sorted, sortedY, d, o, rng)
		a.Workload = w
		byW[w], as[w] = sorted, a
	}
	return byW, as
}

// assess sets the intervals and verdicts of rs (fastest first), whose
// log corrected runs are ys (see Rank).
func assess(rs []Ranked, ys [][]float64, d *Drift, o RankOptions, rng *rand.Rand) Assessment {
	a := Assessment{Level: o.Level, Replicates: o.Replicates}
	k := len(rs)
	m := make([]float64, k)
	n := make([]int, k)
	var pool []float64
	ss := 0.0
	for i, y := range ys {
		m[i], n[i] = mean(y), len(y)
		if n[i] < 2 {
			continue
		}
		a.DF += n[i] - 1
		scale := math.Sqrt(float64(n[i]) / float64(n[i]-1))
		for _, v := range y {
			pool = append(pool, (v-m[i])*scale)
			ss += (v - m[i]) * (v - m[i])
		}
	}
	for i := range rs {
		rs[i].Low, rs[i].High = math.NaN(), math.NaN()
	}
	if a.DF > 0 {
		a.Noise = math.Sqrt(ss / float64(a.DF))
	}
	c := func(i, j int) float64 { return math.Sqrt(1/float64(n[i]) + 1/float64(n[j])) }
	var tstar []float64
	if len(pool) > 0 {
		reps := make([][]float64, k)
		e := make([]float64, k)
		for b := 0; b < o.Replicates; b++ {
			for i := range k {
				s := 0.0
				for range n[i] {
					s += pool[rng.IntN(len(pool))]
				}
				e[i] = s / float64(n[i])
				reps[i] = append(reps[i], m[i]+e[i])
			}
			t := 0.0
			for i := range k {
				for j := i + 1; j < k; j++ {
					t = math.Max(t, math.Abs(e[i]-e[j])/c(i, j))
				}
			}
			tstar = append(tstar, t)
		}
		for i := range k {
			if n[i] >= 2 {
				sort.Float64s(reps[i])
				rs[i].Low = math.Exp(quantile(reps[i], (1-o.Level)/2))
				rs[i].High = math.Exp(quantile(reps[i], (1+o.Level)/2))
			}
		}
		sort.Float64s(tstar)
		a.Q = quantile(tstar, o.Level)
		nm := append([]int(nil), n...)
		sort.Ints(nm)
		a.MDD = math.Exp(math.Max(a.Q*math.Sqrt(2/float64(nm[len(nm)/2])), math.Log1p(o.Tolerance))) - 1
	}
	if k < 2 {
		a.Reason = "fewer than two pairs measured"
		return a
	}
	for i := range rs {
		rs[i].Verdict = VerdictNotDistinguishable
	}
	switch {
	case d == nil:
		a.Reason = "no control runs (a state made before the randomized blocks): the drift was not measured, so a difference between pairs may be a difference in when they ran"
		return a
	case slicesMin(n) < 2:
		a.Reason = "a pair has fewer than two runs"
		return a
	case a.DF < MinResidualDF:
		a.Reason = fmt.Sprintf("%d residual degrees of freedom (runs less cells), fewer than the %d the noise estimate needs: add repeats", a.DF, MinResidualDF)
		return a
	}
	faster := func(i, j int) bool {
		diff := m[i] - m[j]
		return diff > math.Log1p(o.Tolerance) && diff/c(i, j) > a.Q
	}
	best := make([]bool, k)
	worst := make([]bool, k)
	for i := range k {
		best[i] = i == 0 || !faster(0, i)
		worst[i] = i == k-1 || !faster(i, k-1)
		if best[i] && worst[i] {
			a.Reason = "the fastest and the slowest pair are not distinguishable"
			return a
		}
	}
	call := func(in []bool, verdict string, sign float64) {
		margin, members := math.Inf(1), 0
		for i := range k {
			if !in[i] {
				continue
			}
			members++
			for j := range k {
				if in[j] {
					continue
				}
				hi, lo := i, j
				if sign < 0 {
					hi, lo = j, i
				}
				if !faster(hi, lo) {
					return // not separated from the rest
				}
				margin = math.Min(margin, (m[hi]-m[lo])/c(hi, lo))
			}
		}
		conf := float64(sort.SearchFloat64s(tstar, margin)) / float64(len(tstar))
		for i := range k {
			if in[i] {
				rs[i].Verdict, rs[i].Confidence = verdict, conf
				rs[i].Standout = members == 1 && k >= 3
			}
		}
	}
	call(best, VerdictBest, 1)
	call(worst, VerdictWorst, -1)
	return a
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func slicesMin(v []int) int {
	m := math.MaxInt
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

// quantile is the p-quantile of sorted s (the ceil(p*len)-th value).
func quantile(s []float64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(len(s)-1, i))]
}

// HalvesCheck is the test of a method that can be trusted, made
// on every run of four blocks or more: the blocks split in two halves
// (each with its own control runs), each ranked on its own, must give the
// same settled verdicts or call a pair not distinguishable in one of them.
type HalvesCheck struct {
	Split         int // blocks 1..Split against Split+1..
	Blocks        int
	First, Second map[workload.Workload][]Ranked
	// Conflicts are the pairs called best in one half and worst in the
	// other, "workload pair: first/second".
	Conflicts []string
	Settled   [2]int // best or worst verdicts in each half
	Agreeing  int    // pairs settled alike in both halves
}

// Halves splits runs by block and ranks each half (nil with fewer than
// four blocks: a half needs two repeats per cell).
func Halves(runs []Run, o RankOptions) *HalvesCheck {
	blocks := 0
	for _, r := range runs {
		blocks = max(blocks, r.Repeat)
	}
	if blocks < 4 {
		return nil
	}
	h := &HalvesCheck{Split: blocks / 2, Blocks: blocks}
	var a, b []Run
	for _, r := range runs {
		if r.Repeat <= h.Split {
			a = append(a, r)
		} else {
			b = append(b, r)
		}
	}
	h.First, _ = Rank(Cells(a), MeasureDrift(a), o)
	h.Second, _ = Rank(Cells(b), MeasureDrift(b), o)
	settled := func(v string) bool { return v == VerdictBest || v == VerdictWorst }
	for _, w := range workload.Workloads {
		second := map[string]string{}
		for _, r := range h.Second[w] {
			second[r.Pair] = r.Verdict
			if settled(r.Verdict) {
				h.Settled[1]++
			}
		}
		for _, r := range h.First[w] {
			v2 := second[r.Pair]
			if settled(r.Verdict) {
				h.Settled[0]++
			}
			switch {
			case settled(r.Verdict) && settled(v2) && r.Verdict != v2:
				h.Conflicts = append(h.Conflicts, fmt.Sprintf("%s %s: %s/%s", w, r.Pair, r.Verdict, v2))
			case settled(r.Verdict) && r.Verdict == v2:
				h.Agreeing++
			}
		}
	}
	return h
}
