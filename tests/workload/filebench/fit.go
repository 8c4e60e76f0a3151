package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fspair/fspair/rules/classifier"
	"github.com/fspair/fspair/tests/workload"
)

// SettleSeconds is where the accuracy targets start counting a run's
// windows: after the first 3 minutes from Filebench's start (its layout
// included).
const SettleSeconds = 180

// LayoutBound is the longest layout a run may take for the windows the
// targets count (those ending SettleSeconds or more after Filebench's
// start, each window seconds wide) to hold none of it: past it, those
// windows class the file set being created, not the workload.
func LayoutBound(window time.Duration) float64 {
	return SettleSeconds - window.Seconds()
}

// LongLayoutRuns are the runs of res that did not fail whose layout
// outlasted LayoutBound and that were not made again for it already (a
// run is made again once, whatever its second layout takes), in res's
// order.
func LongLayoutRuns(res *Results, window time.Duration) []Spec {
	var out []Spec
	for _, r := range res.Runs {
		if r.Error == "" && r.LayoutSeconds > LayoutBound(window) && r.Remade == "" {
			out = append(out, r.Spec)
		}
	}
	return out
}

// fitInputs are the observations the classifier is fitted and held out
// on: every Filebench window of res but the held-out variants', and the
// fio models' windows of fio; and the variants' windows apart.
func fitInputs(res *Results, fio *workload.Results, o *Options) (train, variants []workload.Observation) {
	for _, ob := range Observations(res, o.Window, o.Step, SettleSeconds*time.Second) {
		if ob.Source == VariantSource {
			variants = append(variants, ob)
		} else {
			train = append(train, ob)
		}
	}
	if fio != nil {
		train = append(train, workload.FioObservations(fio)...)
	}
	return train, variants
}

// scored converts evaluated windows to the held-out tables' rows.
func scored(ev []workload.Evaluated) []workload.Scored {
	out := make([]workload.Scored, 0, len(ev))
	for _, e := range ev {
		out = append(out, workload.Scored{Workload: e.Truth, Pair: workload.PairOf(e.Pair), Class: e.Class,
			Confidence: e.Confidence, Distances: e.Distances, Expect: e.Expect})
	}
	return out
}

// Targets are issue 37's done-when figures over held-out windows.
type Targets struct {
	Settled, SettledRight     int    // windows after the first 3 minutes, and right
	SettledPaired             int    // of those right, at confidence >= 0.5: a verdict
	PastLayout, PastRight     int    // of the windows after the first 3 minutes, those holding none of the layout, and right
	WorstPast                 string // the worst class on a pair over those
	WorstCell                 string
	WorstCellShare            float64 // the lowest right share of a class on a pair (settled windows)
	Confident, ConfidentRight int     // windows at confidence >= 0.9, and right
	Wrong, WrongLow           int     // wrong windows, and those at confidence < 0.5
	EarlyConfidentWrong       int     // first 3 minutes: wrong at confidence >= 0.9
}

// targets computes Targets over held-out windows.
func targets(ev []workload.Evaluated) Targets {
	var t Targets
	cells, past := map[string][2]int{}, map[string][2]int{}
	for _, e := range ev {
		right := e.Right()
		if e.Confidence >= 0.9 {
			t.Confident++
			if right {
				t.ConfidentRight++
			}
		}
		if !right {
			t.Wrong++
			if e.Confidence < 0.5 {
				t.WrongLow++
			}
		}
		if !e.Settled {
			if !right && e.Confidence >= 0.9 {
				t.EarlyConfidentWrong++
			}
			continue
		}
		t.Settled++
		k := e.Expect + " on " + workload.PairOf(e.Pair)
		if !e.Layout {
			t.PastLayout++
			c := past[k]
			c[1]++
			if right {
				t.PastRight++
				c[0]++
			}
			past[k] = c
		}
		c := cells[k]
		c[1]++
		if right {
			t.SettledRight++
			if e.Confidence >= 0.5 {
				t.SettledPaired++
			}
			c[0]++
		}
		cells[k] = c
	}
	t.WorstCellShare, t.WorstCell = worstCell(cells)
	_, t.WorstPast = worstCell(past)
	return t
}

// worstCell returns the lowest right share of cells (right, windows by
// class and pair) and the cell, spelt.
func worstCell(cells map[string][2]int) (float64, string) {
	worst, name := 1.0, ""
	for _, k := range slices.Sorted(maps.Keys(cells)) {
		c := cells[k]
		if s := float64(c[0]) / float64(c[1]); s < worst {
			worst, name = s, fmt.Sprintf("%s %d/%d", k, c[0], c[1])
		}
	}
	return worst, name
}

// worstText is a worst cell over windows as the tables show it: "-"
// without windows, and a cell of none below 100% said so, not left blank.
func worstText(cell string, windows int) string {
	switch {
	case windows == 0:
		return "-"
	case cell == "":
		return "none: every class right on every pair"
	}
	return cell
}

func share(n, d int) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d = %.0f%%", n, d, 100*float64(n)/float64(d))
}

// renderFit writes the leave-one-pair-out evaluation of the Filebench
// windows: the done-when figures, then the held-out tables of the windows
// after the first 3 minutes and of the first 3 minutes.
func renderFit(w io.Writer, ev []workload.Evaluated) error {
	t := targets(ev)
	fmt.Fprintf(w, "| figure | held out |\n|---|---|\n")
	fmt.Fprintf(w, "| windows right after the first 3 minutes | %s |\n", share(t.SettledRight, t.Settled))
	fmt.Fprintf(w, "| of those right, at confidence >= 0.5 (a verdict) | %s |\n", share(t.SettledPaired, t.SettledRight))
	fmt.Fprintf(w, "| of the windows after the first 3 minutes, those past the layout (Filebench still laying out its files in none of the window): right | %s |\n", share(t.PastRight, t.PastLayout))
	fmt.Fprintf(w, "| the worst class on a pair, past the layout | %s |\n", worstText(t.WorstPast, t.PastLayout))
	fmt.Fprintf(w, "| the worst class on a pair, after the first 3 minutes | %s |\n", worstText(t.WorstCell, t.Settled))
	fmt.Fprintf(w, "| windows at confidence >= 0.9 that are right | %s |\n", share(t.ConfidentRight, t.Confident))
	fmt.Fprintf(w, "| wrong windows at confidence < 0.5 | %s |\n", share(t.WrongLow, t.Wrong))
	fmt.Fprintf(w, "| first 3 minutes: windows wrong at confidence >= 0.9 | %d |\n\n", t.EarlyConfidentWrong)
	var settled, early []workload.Evaluated
	for _, e := range ev {
		if e.Settled {
			settled = append(settled, e)
		} else {
			early = append(early, e)
		}
	}
	for _, part := range []struct {
		title string
		ev    []workload.Evaluated
	}{{"Windows ending after the first 3 minutes of a run", settled}, {"The first 3 minutes of each run (layout included)", early}} {
		text, err := workload.RenderEvaluation(scored(part.ev))
		if err != nil {
			return fmt.Errorf("%s: %w", part.title, err)
		}
		fmt.Fprintf(w, "#### %s\n\n%s\n", part.title, text)
	}
	return nil
}

// modelYAML writes the fitted features and workload boxes as
// rules/classes.yaml spells them.
func modelYAML(m *classifier.Model) string {
	var b strings.Builder
	fb, mb := m.Far.Bounds(), m.Mixed.Bounds()
	fmt.Fprintf(&b, "mixed:\n  below: [%g, %g]\n  source: >-\n    %s\n\n", mb[0], mb[1], m.Mixed.Source)
	fmt.Fprintf(&b, "far:\n  above: [%g, %g]\n  source: >-\n    %s\n\n", fb[0], fb[1], m.Far.Source)
	if sm := m.Softmax; sm != nil {
		fmt.Fprintf(&b, "softmax:\n  over: %s\n  source: >-\n    %s\n\n", sm.Over, sm.Source)
	}
	if t := m.Temperature; t != nil {
		fmt.Fprintf(&b, "temperature:\n  value: %g\n  source: >-\n    %s\n\n", *t.Value, t.Source)
	}
	if c := m.Confidence; c != nil {
		mb, nb := c.Margin.Bounds(), c.Near.Bounds()
		fmt.Fprintf(&b, "confidence:\n  margin:\n    above: [%g, %g]\n    source: %s\n  near:\n    below: [%g, %g]\n    source: %s\n  source: >-\n    %s\n\n",
			mb[0], mb[1], c.Margin.Source, nb[0], nb[1], c.Near.Source, c.Source)
	}
	b.WriteString("features:\n")
	for _, f := range m.Features {
		fmt.Fprintf(&b, "  - name: %s\n    scale: %g\n    source: >-\n      %s\n", f.Name, f.Scale, f.Source)
	}
	b.WriteString("\nworkloads:\n")
	for _, c := range m.Classes {
		fmt.Fprintf(&b, "  - name: %s\n", c.Name)
		centreYAML(&b, m, c, "    ")
		if len(c.Others) > 0 {
			b.WriteString("    others:\n")
			for _, o := range c.Others {
				fmt.Fprintf(&b, "      - name: %s\n", o.Name)
				centreYAML(&b, m, o, "        ")
				fmt.Fprintf(&b, "        source: >-\n          %s\n", o.Source)
			}
		}
		fmt.Fprintf(&b, "    source: >-\n      %s\n", c.Source)
	}
	return b.String()
}

// centreYAML writes one centre's (or box's) ranges, guest file system
// ranges and missing charges, indented by in.
func centreYAML(b *strings.Builder, m *classifier.Model, c classifier.Class, in string) {
	fmt.Fprintf(b, "%sbox:\n", in)
	for _, f := range m.BoxFeatures(c) {
		fmt.Fprintf(b, "%s  %s: [%g, %g]\n", in, f, c.Box[f][0], c.Box[f][1])
	}
	if len(c.GuestFS) > 0 {
		fmt.Fprintf(b, "%sguest_fs:\n", in)
		for _, g := range classifier.GuestFileSystems {
			over := c.GuestFS[g]
			if len(over) == 0 {
				continue
			}
			fmt.Fprintf(b, "%s  %s:\n", in, g)
			for _, f := range m.BoxFeatures(c) {
				if r, ok := over[f]; ok {
					fmt.Fprintf(b, "%s    %s: [%g, %g]\n", in, f, r[0], r[1])
				}
			}
		}
	}
	if len(c.Missing) > 0 {
		fmt.Fprintf(b, "%smissing:\n", in)
		for _, f := range m.BoxFeatures(c) {
			if v, ok := c.Missing[f]; ok {
				fmt.Fprintf(b, "%s  %s: %g\n", in, f, v)
			}
		}
	}
}

// DesignSettled is when the fit's present design (no centre fitted on a
// layout window, a class's fio windows a centre of their own where they
// lie FioApart from its programs', the confidence calibrated apart from
// the softmax, the held-out windows' confidence settled as the rules
// settle it) was committed, after looking at the leave-one-pair-out
// tables and the held-out variants of every run recorded until then: the
// runs recorded after it, series and variants, are the untouched ones, and
// the report shows them on their own.
var DesignSettled = time.Date(2026, 11, 29, 4, 20, 40, 0, time.UTC)

// fit prints the leave-one-pair-out evaluation and the model fitted on
// every window.
func fit(base *classifier.Model, res *Results, o *Options, stdout io.Writer) error {
	var fio *workload.Results
	if o.Fio != "" {
		var err error
		if fio, err = workload.LoadResults(o.Fio); err != nil {
			return err
		}
	}
	obs, variants := fitInputs(res, fio, o)
	opt := workload.DefaultFit
	opt.Window = o.Window.Seconds()
	ev, err := workload.LeaveOnePairOut(base, obs, opt)
	if err != nil {
		return err
	}
	m, err := workload.Fit(base, obs, opt)
	if err != nil {
		return err
	}
	var report strings.Builder
	if err := renderFit(&report, ev); err != nil {
		return err
	}
	// The runs recorded after the fit's design was settled: their
	// leave-one-pair-out windows above, on their own (no choice of the
	// design was made looking at them). A run made again for its long
	// layout is not one: it was made because of what the run it replaced
	// showed.
	after := map[string]bool{}
	for _, r := range res.Runs {
		if r.Started.After(DesignSettled) && r.Remade == "" {
			after[r.Spec.String()] = true
		}
	}
	var late, lateVariants []workload.Evaluated
	for _, e := range ev {
		if after[e.Run] {
			late = append(late, e)
		}
	}
	evVariants := workload.EvaluateSettling(m, variants, opt.Window)
	for _, e := range evVariants {
		if after[e.Run] {
			lateVariants = append(lateVariants, e)
		}
	}
	if len(late) > 0 {
		fmt.Fprintf(&report, "#### The runs recorded after the fit's design was settled (%s), not made again for a long layout, from the tables above\n\n", DesignSettled.Format(time.RFC3339))
		if err := renderFit(&report, late); err != nil {
			return err
		}
	}
	if len(variants) > 0 {
		// No number was fitted on them: the model fitted on every other
		// window classes them.
		fmt.Fprintf(&report, "#### Held-out variants (parameters changed), classed by the model fitted on every run above\n\n")
		if err := renderFit(&report, evVariants); err != nil {
			return err
		}
	}
	if len(lateVariants) > 0 {
		fmt.Fprintf(&report, "#### The held-out variants recorded after the fit's design was settled (%s), from the tables above\n\n", DesignSettled.Format(time.RFC3339))
		if err := renderFit(&report, lateVariants); err != nil {
			return err
		}
	}
	fmt.Fprint(stdout, report.String())
	fmt.Fprintf(stdout, "\n%s\n", ownScores(m, obs))
	if !o.Write {
		fmt.Fprintf(stdout, "\n#### The model fitted on every window\n\n```yaml\n%s```\n", modelYAML(m))
		return nil
	}
	live, err := os.ReadFile(o.Classes)
	if err != nil {
		return err
	}
	text, err := withFitted(string(live), modelYAML(m))
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.Classes, []byte(text), 0o644); err != nil {
		return err
	}
	return replaceBlock(o.RulesReadme, lopoBegin, lopoEnd, report.String())
}

// withFitted returns the thresholds file's text with fitted as its model,
// between its BEGIN FITTED and END FITTED lines: the fitted block holds
// the mixed and far ramps, the features and the workloads, everything the
// fit sets.
func withFitted(live, fitted string) (string, error) {
	i := strings.Index(live, "\n"+fitBegin+"\n")
	j := strings.Index(live, "\n"+fitEnd+"\n")
	if i < 0 || j < i || strings.Count(live, fitBegin) != 1 || strings.Count(live, "\n"+fitEnd+"\n") != 1 {
		return "", fmt.Errorf("the model has no fitted block: one BEGIN FITTED line and one END FITTED line after it")
	}
	return live[:i+1] + fitBegin + "\n" + strings.TrimRight(fitted, "\n") + live[j:], nil
}

// The generated blocks -fit -write replaces: the fitted features and
// boxes in rules/classes.yaml, the leave-one-pair-out tables in
// rules/README.md.
const (
	fitBegin  = "# BEGIN FITTED: go run ./tests/workload/filebench -fit -write (do not edit by hand: change the data or tests/workload DefaultFit and fit again)"
	fitEnd    = "# END FITTED"
	lopoBegin = "<!-- BEGIN GENERATED leave-one-pair-out: go run ./tests/workload/filebench -fit -write -->"
	lopoEnd   = "<!-- END GENERATED leave-one-pair-out -->"
)

// replaceBlock replaces what lies between the lines begin and end of the
// file at path with text.
func replaceBlock(path, begin, end, text string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i := strings.Index(s, begin+"\n")
	j := strings.Index(s, "\n"+end+"\n")
	if i < 0 || j < i {
		return fmt.Errorf("%s: no block between %q and %q lines", path, begin, end)
	}
	out := s[:i+len(begin)+1] + strings.TrimRight(text, "\n") + s[j:]
	return os.WriteFile(path, []byte(out), 0o644)
}

// ownScores describes how the model fitted on every window scores the
// settled training windows for their own class (a fit, not held out): what
// the hand-set thresholds (mixed, the hysteresis) are judged against.
func ownScores(m *classifier.Model, obs []workload.Observation) string {
	var s []float64
	for _, o := range obs {
		if !o.Settled || o.Expected(m) == classifier.Idle {
			continue
		}
		s = append(s, m.Classify(o.Inputs, o.IOPS, o.GuestFS).Scores[o.Expected(m)])
	}
	if len(s) == 0 {
		return "no settled training windows"
	}
	slices.Sort(s)
	at := func(q float64) float64 { return s[int(q*float64(len(s)-1))] }
	return fmt.Sprintf("settled training windows' score for their own class (fitted on them): %d windows, min %.3f, 10th percentile %.3f, median %.3f",
		len(s), s[0], at(0.1), at(0.5))
}
