package validate

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Eval is the class one evaluation of the rule
// domain_disk:fspair_workload_class:info chose for a disk.
type Eval struct {
	At    time.Time
	Class string
}

// Window is one workload run in a guest as the analysis sees it.
type Window struct {
	Want     string        // the class the workload should get
	Start    time.Time     // fio started in the guest (the workload switch)
	Runtime  time.Duration // fio's runtime: the window ends at Start+Runtime
	Warmup   time.Duration // evaluations before Start+Warmup do not count in the share
	Interval time.Duration // evaluation interval, to count evaluations that are missing
}

// End is when the workload stops.
func (w Window) End() time.Time { return w.Start.Add(w.Runtime) }

// Outcome is what the class did during one Window.
type Outcome struct {
	// Evaluations after the warm-up: the evaluations seen, or the number
	// the interval promises if fewer were seen (a missing evaluation
	// counts as wrong).
	Evaluations int
	Seen        int            // evaluations after the warm-up with a class
	Right       int            // of those, how many chose Want
	ShareRight  float64        // Right / Evaluations
	Classes     map[string]int // classes chosen after the warm-up, with counts
	// FirstRight is the time from Start to the first evaluation that chose
	// Want; nil if none did.
	FirstRight *time.Duration
	// Settle is the time from Start to the first evaluation from which
	// every evaluation up to the end chose Want; nil if the class was
	// wrong at the end.
	Settle *time.Duration
	// Flaps counts the changes of class between consecutive evaluations
	// after FirstRight: 0 when the class, once right, stayed right.
	Flaps int
}

// Analyze measures evals (in time order; those outside the window are
// ignored) against w.
func Analyze(evals []Eval, w Window) Outcome {
	o := Outcome{Classes: map[string]int{}}
	end := w.End()
	counted := w.Start.Add(w.Warmup)
	var in []Eval
	for _, e := range evals {
		if e.At.Before(w.Start) || e.At.After(end) {
			continue
		}
		in = append(in, e)
		if !e.At.Before(counted) {
			o.Seen++
			o.Classes[e.Class]++
			if e.Class == w.Want {
				o.Right++
			}
		}
	}
	o.Evaluations = o.Seen
	if w.Interval > 0 && end.After(counted) {
		// Evaluations every Interval fall at least floor(span/Interval)
		// times into a span, wherever the grid starts.
		if want := int(end.Sub(counted) / w.Interval); want > o.Evaluations {
			o.Evaluations = want
		}
	}
	if o.Evaluations > 0 {
		o.ShareRight = float64(o.Right) / float64(o.Evaluations)
	}
	first := -1
	for i, e := range in {
		if e.Class == w.Want {
			first = i
			d := e.At.Sub(w.Start)
			o.FirstRight = &d
			break
		}
	}
	if first < 0 {
		return o
	}
	for i := first + 1; i < len(in); i++ {
		if in[i].Class != in[i-1].Class {
			o.Flaps++
		}
	}
	settled := len(in)
	for i := len(in) - 1; i >= 0 && in[i].Class == w.Want; i-- {
		settled = i
	}
	if settled < len(in) {
		d := in[settled].At.Sub(w.Start)
		o.Settle = &d
	}
	return o
}

// Criteria are the acceptance thresholds of issue 4.
type Criteria struct {
	MinShareRight float64       // share of evaluations after the warm-up with the right class
	MaxSettle     time.Duration // from the workload switch to the class staying right
	MaxFlaps      int           // changes of class after it first became right
}

// Acceptance is what issue 4 asks of the live class: right on at least 90%
// of the evaluations after the warm-up, switched within 5 minutes, no
// flapping.
var Acceptance = Criteria{MinShareRight: 0.9, MaxSettle: 5 * time.Minute, MaxFlaps: 0}

// Check lists how o falls short of c; nil when it meets them.
func (c Criteria) Check(o Outcome) []string {
	var p []string
	if o.Evaluations == 0 {
		p = append(p, "no evaluations after the warm-up")
	} else if o.ShareRight < c.MinShareRight {
		p = append(p, fmt.Sprintf("right on %d of %d evaluations (%.2f, want >= %.2f); classes %s",
			o.Right, o.Evaluations, o.ShareRight, c.MinShareRight, FormatCounts(o.Classes)))
	}
	switch {
	case o.Settle == nil:
		p = append(p, "class never settled on the workload")
	case *o.Settle > c.MaxSettle:
		p = append(p, fmt.Sprintf("settled after %s (want <= %s)", o.Settle.Round(time.Second), c.MaxSettle))
	}
	if o.Flaps > c.MaxFlaps {
		p = append(p, fmt.Sprintf("%d class changes after the class first became right (want <= %d)", o.Flaps, c.MaxFlaps))
	}
	return p
}

// FormatCounts prints class counts as "mail:10 mixed:1", most frequent
// first.
func FormatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
