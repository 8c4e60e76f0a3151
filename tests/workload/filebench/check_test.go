package main

import (
	"strings"
	"testing"

	"github.com/fspair/fspair/tests/workload"
)

func checked(ws ...workload.Evaluated) RunCheck {
	rc := RunCheck{Run: "varmail@xfs/xfs/raw/writeback/threads", Windows: ws}
	rc.judge()
	return rc
}

func ev(end float64, settled bool, class string, conf float64) workload.Evaluated {
	return workload.Evaluated{Observation: workload.Observation{End: end, Settled: settled}, Expect: "mail", Class: class, Confidence: conf}
}

// TestRunCheckJudge: -check's conditions, each at its edge.
func TestRunCheckJudge(t *testing.T) {
	early := []workload.Evaluated{ev(30, false, "mixed", 0), ev(60, false, "fileserver", 0.89), ev(90, false, "mail", 0.95)}
	var nine []workload.Evaluated
	for i := 0; i < 9; i++ {
		nine = append(nine, ev(180+30*float64(i), true, "mail", 0.7))
	}
	cases := []struct {
		name     string
		ws       []workload.Evaluated
		problems []string
	}{
		{"every window right, an early wrong one under 0.9", append(append([]workload.Evaluated{}, early...), nine...), nil},
		{"9 of 10 right is 90%", append(append([]workload.Evaluated{}, nine...), ev(480, true, "mixed", 0.2)), nil},
		{"8 of 9 right", append(append([]workload.Evaluated{}, nine[:8]...), ev(480, true, "fileserver", 0.2)), []string{"8 of 9 windows right"}},
		{"an early wrong window at 0.9", []workload.Evaluated{ev(60, false, "rfa", 0.9), ev(180, true, "mail", 1)}, []string{"1 windows in the first 3 minutes wrong at confidence >= 0.9"}},
		{"no window after 3 minutes", early, []string{"no window ends 180 s or more"}},
	}
	for _, c := range cases {
		rc := checked(c.ws...)
		got := strings.Join(rc.Problems, "; ")
		if len(c.problems) == 0 && got != "" {
			t.Errorf("%s: problems %q, want none", c.name, got)
		}
		for _, p := range c.problems {
			if !strings.Contains(got, p) {
				t.Errorf("%s: problems %q, want %q", c.name, got, p)
			}
		}
		if len(c.problems) > 0 && printChecks(&strings.Builder{}, []RunCheck{rc}) == nil {
			t.Errorf("%s: printChecks passed a run with problems", c.name)
		}
	}
}

// TestCheckRunsMissing: a run -runs names that the results do not hold,
// or that failed, fails the check.
func TestCheckRunsMissing(t *testing.T) {
	specs, err := ParseSpecs("varmail@xfs/xfs/raw/writeback/threads,webserver@ext4/xfs/raw/writeback/threads")
	if err != nil {
		t.Fatal(err)
	}
	res := &Results{Runs: []Run{{Spec: specs[1], Error: "guest did not boot"}}}
	o := &Options{Window: 60e9, Step: 30e9}
	checks := checkRuns(liveClassifier(t), res, specs, o)
	if len(checks) != 2 || !strings.Contains(strings.Join(checks[0].Problems, ""), "no run recorded") ||
		!strings.Contains(strings.Join(checks[1].Problems, ""), "guest did not boot") {
		t.Fatalf("checks %+v", checks)
	}
	if err := printChecks(&strings.Builder{}, checks); err == nil || !strings.Contains(err.Error(), "2 of 2 runs missed") {
		t.Errorf("printChecks: %v", err)
	}
}
