package classifier

import (
	"math"
	"testing"
)

// TestSettleTime: classes.yaml's settle is one short window plus a minute,
// so 120 s at the lab's 1m window and 360 s at the default 5m.
func TestSettleTime(t *testing.T) {
	m := model(t)
	for window, want := range map[float64]float64{60: 120, 300: 360} {
		if got := m.Settle.Time(window); got != want {
			t.Errorf("settle time with a %v s window: %v, want %v", window, got, want)
		}
	}
}

// TestSettling follows one disk evaluated every 15 s with a 1m window
// (settle 120 s): a class that flips during a layout never settles, and
// its confidence stays damped; a class that holds is settled 120 s after
// it was first chosen, with its confidence whole from then on.
func TestSettling(t *testing.T) {
	m := model(t)
	var evals []Evaluation
	add := func(from, to float64, class string) {
		for s := from; s < to; s += 15 {
			evals = append(evals, Evaluation{Time: 1000 + s, Class: class, Confidence: 0.95})
		}
	}
	add(0, 45, "mixed") // the layout: writes only
	add(45, 105, "rfa") // reads start: rfa for a minute
	add(105, 300, "web")
	got := m.Settling(60, evals)
	for i, e := range evals {
		s, rel := got[i], e.Time-1000
		var since float64
		switch {
		case rel < 45:
			since = 1000
		case rel < 105:
			since = 1045
		default:
			since = 1105
		}
		ratio := math.Min((e.Time-since)/120, 1)
		if s.Since != since || s.Held != e.Time-since || math.Abs(s.Ratio-ratio) > 1e-12 ||
			math.Abs(s.Confidence-0.95*ratio) > 1e-12 || s.Settled != (e.Time-since >= 120) {
			t.Errorf("%s at %v s: %+v, want since %v, ratio %v", e.Class, rel, s, since-1000, ratio)
		}
		if e.Class != "web" && (s.Settled || s.Confidence >= 0.9) {
			t.Errorf("%s at %v s, during the layout: settled %v at confidence %v", e.Class, rel, s.Settled, s.Confidence)
		}
	}
	if last := got[len(got)-1]; !last.Settled || last.Confidence != 0.95 {
		t.Errorf("web held for %v s: %+v, want settled at confidence 0.95", last.Held, last)
	}
}

// TestSettlingRestarts: a class chosen again after another starts a new
// hold, as the rule's series of the first went stale; so does a gap of
// the lookback between evaluations, after which the rule no longer sees
// its last sample.
func TestSettlingRestarts(t *testing.T) {
	m := model(t)
	got := m.Settling(60, []Evaluation{
		{0, "mail", 1}, {60, "mail", 1}, {120, "mail", 1}, // settled at 120
		{135, "fileserver", 1}, {150, "mail", 1}, // back, but from the start
		{150 + Lookback - 1, "mail", 1},   // a gap just under the lookback: still held
		{150 + 2*Lookback - 1, "mail", 1}, // a gap of the lookback: a new hold
	})
	for i, want := range []struct {
		since   float64
		settled bool
	}{{0, false}, {0, false}, {0, true}, {135, false}, {150, false}, {150, true}, {150 + 2*Lookback - 1, false}} {
		if got[i].Since != want.since || got[i].Settled != want.settled {
			t.Errorf("evaluation %d: %+v, want since %v, settled %v", i, got[i], want.since, want.settled)
		}
	}
}

// TestSettlingGate: classes.yaml's min_confidence is 0.5. A settled
// workload class is paired only at that confidence or more, so a disk
// between two boxes that holds its class at 0.3 (the demo's web VM laying
// out its files held rfa at 0.00-0.39) gets no verdict however long it
// holds it; the same disk at 0.5 does, as soon as it settles. One that
// wavers around the threshold is paired and unpaired with it. idle and
// mixed, which no verdict rates (mixed's confidence is 0 by definition),
// are paired once settled.
func TestSettlingGate(t *testing.T) {
	m := model(t)
	if got := m.Settle.MinConfidence.V(); got != 0.5 {
		t.Fatalf("classes.yaml settle.min_confidence %v, want 0.5 (the figures below are worked out for it)", got)
	}
	run := func(class string, conf ...float64) []Settling {
		var evals []Evaluation
		for i, c := range conf {
			evals = append(evals, Evaluation{Time: float64(60 * i), Class: class, Confidence: c})
		}
		return m.Settling(60, evals)
	}
	// Settled at the third evaluation (120 s).
	for _, c := range []struct {
		class string
		conf  float64
		want  []bool
	}{
		{"rfa", 0.3, []bool{false, false, false, false, false}},
		{"rfa", 0.49, []bool{false, false, false, false, false}},
		{"rfa", 0.5, []bool{false, false, true, true, true}},
		{"web", 1, []bool{false, false, true, true, true}},
		{"mixed", 0, []bool{false, false, true, true, true}},
		{"idle", 0.2, []bool{false, false, true, true, true}},
	} {
		got := run(c.class, c.conf, c.conf, c.conf, c.conf, c.conf)
		for i, s := range got {
			if s.Paired != c.want[i] {
				t.Errorf("%s at %v, evaluation %d (held %v s, settled %v): paired %v, want %v", c.class, c.conf, i, s.Held, s.Settled, s.Paired, c.want[i])
			}
		}
	}
	// Settled, then wavering: the pairing follows the confidence, so an
	// alert on the pairing starts its `for` again each time it returns.
	got := run("rfa", 0.6, 0.6, 0.6, 0.45, 0.55, 0.4, 0.6)
	for i, want := range []bool{false, false, true, false, true, false, true} {
		if got[i].Paired != want {
			t.Errorf("wavering rfa, evaluation %d at %v: paired %v, want %v", i, got[i].Confidence, got[i].Paired, want)
		}
	}
}
