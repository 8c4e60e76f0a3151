package main

import (
	"math"
	"sort"

	"github.com/fspair/fspair/tests/workload"
)

// Verdicts, spelt as the knowledge base spells them (rules/kdb/pairs.yaml).
// A pair between the best and the worst group has no verdict ("").
const (
	VerdictBest      = "best"
	VerdictWorst     = "worst"
	VerdictContested = "contested"
)

// DefaultTolerance is the relative throughput difference below which two
// pairs count as equal even when their repeats do not overlap. It is a
// choice, not a measurement: a reader of the published table would not call
// a 5% difference a ranking; -tolerance changes it.
const DefaultTolerance = 0.05

// Ranked is one cell's place among the pairs measured for its workload and
// the verdict derived from it.
type Ranked struct {
	Pair       string
	Rank       int  // 1 = highest median throughput
	Of         int  // pairs ranked for the workload
	Throughput Stat // fio bytes per second over the repeats
	Verdict    string
	Standout   bool
}

// Rank orders the measured pairs of each workload by median fio throughput
// (bytes per second) and derives the site's verdicts.
//
// The published study (rules/kdb/pairs.yaml, from Table 2 and Section 7 of
// djordjevic2022) names per workload a group of best pairs and a group of
// worst ones, and singles out a few of them ("standout": clearly ahead or
// clearly behind), without a figure per pair. What can be said from our own
// repeats is which pairs the measurement cannot tell apart from the
// fastest and from the slowest, so:
//
//   - a pair is near another when their medians differ by at most tol of
//     the other's median, or when their repeats overlap (min-max);
//   - best: the fastest pair and every pair near it;
//   - worst: the slowest pair and every pair near it;
//   - a pair in both groups (the measurement cannot separate the fastest
//     from the slowest) is contested: the site's runs do not support a
//     ranking for it;
//   - a pair in neither group has no verdict (between the groups);
//   - standout: the fastest (slowest) pair when it is the only member of
//     its group and at least three pairs were ranked, i.e. clearly ahead of
//     (behind) every other pair measured.
//
// A workload with fewer than two pairs measured has no verdicts.
func Rank(cells []Cell, tol float64) map[workload.Workload][]Ranked {
	byW := map[workload.Workload][]Ranked{}
	for _, c := range cells {
		s, ok := c.Stats[MThroughputBytes]
		if !ok {
			continue
		}
		byW[c.Workload] = append(byW[c.Workload], Ranked{Pair: c.Pair, Throughput: s})
	}
	for w, rs := range byW {
		sort.SliceStable(rs, func(i, j int) bool {
			if rs[i].Throughput.Median != rs[j].Throughput.Median {
				return rs[i].Throughput.Median > rs[j].Throughput.Median
			}
			return pairLess(rs[i].Pair, rs[j].Pair)
		})
		for i := range rs {
			rs[i].Rank, rs[i].Of = i+1, len(rs)
		}
		if len(rs) >= 2 {
			decide(rs, tol)
		}
		byW[w] = rs
	}
	return byW
}

// decide sets the verdicts of rs, sorted fastest first (see Rank).
func decide(rs []Ranked, tol float64) {
	top, bottom := rs[0].Throughput, rs[len(rs)-1].Throughput
	var nBest, nWorst int
	best := make([]bool, len(rs))
	worst := make([]bool, len(rs))
	for i, r := range rs {
		best[i] = i == 0 || near(r.Throughput, top, tol)
		worst[i] = i == len(rs)-1 || near(r.Throughput, bottom, tol)
		if best[i] {
			nBest++
		}
		if worst[i] {
			nWorst++
		}
	}
	for i := range rs {
		switch {
		case best[i] && worst[i]:
			rs[i].Verdict = VerdictContested
		case best[i]:
			rs[i].Verdict = VerdictBest
		case worst[i]:
			rs[i].Verdict = VerdictWorst
		}
	}
	if len(rs) >= 3 {
		rs[0].Standout = nBest == 1 && rs[0].Verdict == VerdictBest
		rs[len(rs)-1].Standout = nWorst == 1 && rs[len(rs)-1].Verdict == VerdictWorst
	}
}

// near reports whether the measurement cannot tell a from ref: medians
// within tol of ref's, or repeats overlapping.
func near(a, ref Stat, tol float64) bool {
	if math.Abs(a.Median-ref.Median) <= tol*math.Abs(ref.Median) {
		return true
	}
	return a.Min <= ref.Max && ref.Min <= a.Max
}
