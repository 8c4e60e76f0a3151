package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

// The conditions -check holds each run it made to: issue 37's, run by run.
const (
	checkRightShare   = 0.9 // windows after the first 3 minutes classed right
	checkConfidentBar = 0.9 // no wrong window in the first 3 minutes at this confidence or more
)

// RunCheck is how one run fared against -check's conditions.
type RunCheck struct {
	Run                 string
	Settled, Right      int // windows after the first 3 minutes, and those classed right
	Early, EarlyWrongHi int // windows in the first 3 minutes, and those wrong at >= checkConfidentBar
	Problems            []string
	Windows             []workload.Evaluated
}

// checkRuns classes the windows of the runs of specs in res with the live
// model as the recording rules would (hysteresis from window to window,
// the confidence damped while a class settles) and holds each run to the
// issue's conditions: at least one window after the first 3 minutes, of
// those >= 90% right, and none in the first 3 minutes wrong at confidence
// >= 0.9. A spec with no run in res, or a run that failed, is a problem.
func checkRuns(cls *Classifier, res *Results, specs []Spec, o *Options) []RunCheck {
	var out []RunCheck
	for _, s := range specs {
		rc := RunCheck{Run: s.String()}
		i := indexOf(res, s)
		switch {
		case i < 0:
			rc.Problems = append(rc.Problems, "no run recorded")
		case res.Runs[i].Error != "":
			rc.Problems = append(rc.Problems, "the run failed: "+res.Runs[i].Error)
		default:
			one := &Results{Runs: []Run{res.Runs[i]}}
			obs := Observations(one, o.Window, o.Step, SettleSeconds*time.Second)
			rc.Windows = workload.EvaluateSettling(cls.Model, obs, o.Window.Seconds())
			rc.judge()
		}
		out = append(out, rc)
	}
	return out
}

// judge counts rc's windows and states what misses the conditions.
func (rc *RunCheck) judge() {
	for _, e := range rc.Windows {
		if e.Settled {
			rc.Settled++
			if e.Right() {
				rc.Right++
			}
			continue
		}
		rc.Early++
		if !e.Right() && e.Confidence >= checkConfidentBar {
			rc.EarlyWrongHi++
		}
	}
	if rc.Settled == 0 {
		rc.Problems = append(rc.Problems, fmt.Sprintf("no window ends %d s or more after Filebench started: a longer -runtime is needed", SettleSeconds))
	} else if float64(rc.Right) < checkRightShare*float64(rc.Settled) {
		rc.Problems = append(rc.Problems, fmt.Sprintf("after the first 3 minutes %d of %d windows right, under %.0f%%", rc.Right, rc.Settled, 100*checkRightShare))
	}
	if rc.EarlyWrongHi > 0 {
		rc.Problems = append(rc.Problems, fmt.Sprintf("%d windows in the first 3 minutes wrong at confidence >= %.1f", rc.EarlyWrongHi, checkConfidentBar))
	}
}

// printChecks writes every run's windows and verdict; it returns an error
// naming the runs that missed.
func printChecks(w io.Writer, checks []RunCheck) error {
	var failed []string
	for _, rc := range checks {
		status := "ok"
		if len(rc.Problems) > 0 {
			status = "FAIL: " + strings.Join(rc.Problems, "; ")
			failed = append(failed, rc.Run+": "+strings.Join(rc.Problems, "; "))
		}
		fmt.Fprintf(w, "filebench check: %s: after the first 3 minutes %d/%d right; first 3 minutes %d windows, %d wrong at confidence >= %.1f; %s\n",
			rc.Run, rc.Right, rc.Settled, rc.Early, rc.EarlyWrongHi, checkConfidentBar, status)
		for _, e := range rc.Windows {
			mark := "right"
			if !e.Right() {
				mark = "WRONG"
			}
			layout := ""
			if e.Layout {
				layout = ", layout"
			}
			fmt.Fprintf(w, "  window ending %4.0f s%s: %s (expected %s), confidence %.2f, %s\n", e.End, layout, e.Class, e.Expect, e.Confidence, mark)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("-check: %d of %d runs missed:\n  %s", len(failed), len(checks), strings.Join(failed, "\n  "))
	}
	return nil
}
