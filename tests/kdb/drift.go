package main

import (
	"math"
	"sort"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

// The drift model and its correction (issue 20, part 1).
//
// Model: the machine's speed drifts over time by a factor s(t) common to
// every run, so that a run's throughput is its cell's true throughput
// times s(t) times noise. That is what the first full matrix showed
// (docs/kdb/README.md): fio in a TCG guest is bound by the emulated CPU, so
// it follows the shared lab machine's speed, whatever the pair and the
// workload. The control cell, run at the start, middle and end of every
// block (schedule.go), samples s(t) three times a block.
//
// Correction: the drift factor at time t is the control runs' throughput
// interpolated linearly in log space between the control runs around t
// (constant before the first and after the last), divided by the geometric
// mean of all control runs; a run's corrected throughput is its throughput
// divided by the factor at the middle of the run. A drift linear in log
// space between two control runs is cancelled exactly; a step between
// blocks (the end control of one block and the start control of the next
// sit on either side of it) too; a step inside a block is cancelled for
// the runs outside the control interval holding it and halved on average
// for those inside, and the random order spreads that error over the
// pairs instead of putting it on one. The price is the control runs' own
// noise, which every corrected run inherits (interpolated between two
// control runs, about 0.7 to 1 times the run noise): the intervals
// (verdict.go) are computed on the corrected figures, so they include it.
//
// Only the throughput, which the verdicts rank by, is corrected. Figures
// measured per request (latencies, write amplification) are reported as
// measured.

// DriftPoint is one control run.
type DriftPoint struct {
	Time       time.Time `json:"time"` // middle of the run
	Block      int       `json:"block"`
	Position   string    `json:"position"` // start, middle, end
	Throughput float64   `json:"throughput_bytes_per_second"`
	// Factor is Throughput over the geometric mean of all control runs:
	// the machine's speed then, relative to its mean over the matrix.
	Factor float64 `json:"factor"`
}

// Drift is what the control runs measured.
type Drift struct {
	Control controlCell  `json:"-"`
	Cell    string       `json:"control"` // pair:workload
	Points  []DriftPoint `json:"points"`  // by time
	Ref     float64      `json:"reference_bytes_per_second"`
}

// midpoint is the middle of a run, the time its drift factor is read at.
func midpoint(r Run) time.Time { return r.Start.Add(r.End.Sub(r.Start) / 2) }

// MeasureDrift collects the control runs of runs; nil when there are none
// (a state made before the blocks), in which case nothing is corrected and
// no verdict is settled.
func MeasureDrift(runs []Run) *Drift {
	var d *Drift
	logSum := 0.0
	for _, r := range runs {
		if r.Control == "" {
			continue
		}
		bw, ok := r.Metrics()[MThroughputBytes]
		if !ok || bw <= 0 {
			continue
		}
		if d == nil {
			d = &Drift{Control: controlCell{r.Pair, r.Workload}}
			d.Cell = d.Control.String()
		}
		d.Points = append(d.Points, DriftPoint{Time: midpoint(r), Block: r.Repeat, Position: r.Control, Throughput: bw})
		logSum += math.Log(bw)
	}
	if d == nil {
		return nil
	}
	sort.SliceStable(d.Points, func(i, j int) bool { return d.Points[i].Time.Before(d.Points[j].Time) })
	d.Ref = math.Exp(logSum / float64(len(d.Points)))
	for i := range d.Points {
		d.Points[i].Factor = d.Points[i].Throughput / d.Ref
	}
	return d
}

// Factor is the drift factor at t (see the model above); 1 for a nil d.
func (d *Drift) Factor(t time.Time) float64 {
	if d == nil || len(d.Points) == 0 {
		return 1
	}
	ps := d.Points
	if !t.After(ps[0].Time) {
		return ps[0].Factor
	}
	if !t.Before(ps[len(ps)-1].Time) {
		return ps[len(ps)-1].Factor
	}
	i := sort.Search(len(ps), func(i int) bool { return ps[i].Time.After(t) })
	a, b := ps[i-1], ps[i]
	span := b.Time.Sub(a.Time).Seconds()
	if span <= 0 {
		return b.Factor
	}
	f := t.Sub(a.Time).Seconds() / span
	return math.Exp((1-f)*math.Log(a.Factor) + f*math.Log(b.Factor))
}

// Corrected is r's throughput with the drift taken out (false when the
// run has no throughput).
func (d *Drift) Corrected(r Run) (float64, bool) {
	bw, ok := r.Metrics()[MThroughputBytes]
	if !ok || bw <= 0 {
		return 0, false
	}
	return bw / d.Factor(midpoint(r)), true
}

// Range is the smallest and the largest factor the controls measured.
func (d *Drift) Range() (lo, hi float64) {
	if d == nil || len(d.Points) == 0 {
		return 1, 1
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, p := range d.Points {
		lo, hi = math.Min(lo, p.Factor), math.Max(hi, p.Factor)
	}
	return lo, hi
}

// isControl reports whether w on pair is the drift's control cell.
func (d *Drift) isControl(w workload.Workload, pair string) bool {
	return d != nil && d.Control.workload == w && d.Control.pair == pair
}
