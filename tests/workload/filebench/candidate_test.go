package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/rules/classifier"
	"github.com/fspair/fspair/tests/workload"
)

// TestObservationsLayout: a window holds the layout when it starts before
// Filebench's layout ended (LayoutSeconds, from Filebench's start), a
// held-out variant's windows as the others; a run without a layout has
// none, and a failed run gives no windows.
func TestObservationsLayout(t *testing.T) {
	origin := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	spec := Spec{Personality: "varmail", Guest: "ext4", Host: "xfs", Format: "raw", Cache: "none", AIO: "native"}
	run := func(vars, host string, layout float64, failed string) Run {
		r := recording(origin, time.Minute, 5*time.Minute)
		r.Spec, r.LayoutSeconds, r.Error = spec, layout, failed
		r.Spec.Vars, r.Spec.Host = vars, host
		return r
	}
	res := &Results{Runs: []Run{run("", "xfs", 65, ""), run("nthreads=4", "xfs", 65, ""), run("", "btrfs", 0, ""), run("", "ext4", 65, "guest did not boot")}}
	obs := Observations(res, time.Minute, 30*time.Second, SettleSeconds*time.Second)
	byRun := map[string][]workload.Observation{}
	for _, o := range obs {
		byRun[o.Run+" "+o.Source] = append(byRun[o.Run+" "+o.Source], o)
	}
	if len(byRun) != 3 {
		t.Fatalf("windows of %d runs, want the 3 without an error", len(byRun))
	}
	plain, variant := byRun[spec.String()+" filebench"], byRun["varmail+nthreads=4@ext4/xfs/raw/none/native "+VariantSource]
	noLayout := byRun["varmail@ext4/btrfs/raw/none/native filebench"]
	if len(plain) != 10 || len(variant) != 10 || len(noLayout) != 10 {
		t.Fatalf("%d, %d and %d windows of the plain run, the variant and the run without a layout, want 10 each", len(plain), len(variant), len(noLayout))
	}
	// The windows end every 30 s and span up to a minute: those ending at
	// 30, 60 and 90 s start at 0 or 30 s, the one ending at 120 s at 60 s,
	// before the layout ended at 65 s; the one ending at 150 s after it.
	for _, set := range [][]workload.Observation{plain, variant} {
		for _, o := range set {
			if want := o.End <= 120; o.Layout != want {
				t.Errorf("%s %s, window ending at %.0f s: layout %v, want %v", o.Run, o.Source, o.End, o.Layout, want)
			}
			if want := o.End >= SettleSeconds; o.Settled != want {
				t.Errorf("%s, window ending at %.0f s: settled %v, want %v", o.Run, o.End, o.Settled, want)
			}
		}
	}
	for _, o := range noLayout {
		if o.Layout {
			t.Errorf("a run without a layout: the window ending at %.0f s holds one", o.End)
		}
	}
}

// window is a held-out window of class expect on pair, classed class at
// confidence conf.
func window(expect, class, pair string, settled, layout bool, conf float64) workload.Evaluated {
	return workload.Evaluated{
		Observation: workload.Observation{Truth: workload.Workload(expect), Pair: pair, Settled: settled, Layout: layout},
		Expect:      expect, Class: class, Confidence: conf,
	}
}

// targetSet is a held-out set whose figures are worked out by hand in
// TestTargets.
func targetSet() []workload.Evaluated {
	const a, b = "ext4/xfs/raw/none/native", "xfs/ext4/qcow2/writeback/threads"
	return []workload.Evaluated{
		// The first 3 minutes: one wrong and sure of it.
		window("mail", "rfa", a, false, true, 0.95),
		window("mail", "mail", a, false, true, 0.3),
		// mail on ext4/xfs after 3 minutes: two windows still holding the
		// layout, wrong; three past it, right at 0.6, 0.5 and 0.49.
		window("mail", "fileserver", a, true, true, 0.2),
		window("mail", "fileserver", a, true, true, 0.2),
		window("mail", "mail", a, true, false, 0.6),
		window("mail", "mail", a, true, false, 0.5),
		window("mail", "mail", a, true, false, 0.49),
		// fileserver on xfs/ext4: two right and sure, one mixed.
		window("fileserver", "fileserver", b, true, false, 0.95),
		window("fileserver", "fileserver", b, true, false, 0.95),
		window("fileserver", "mixed", b, true, false, 0),
	}
}

// TestTargets: the settled windows right at confidence 0.5 or more (0.5
// itself counts), the windows past the layout and the worst class on a
// pair over those, beside the worst over every settled window (where the
// layout's wrong windows make mail the worst).
func TestTargets(t *testing.T) {
	want := Targets{
		Settled: 8, SettledRight: 5, SettledPaired: 4,
		PastLayout: 6, PastRight: 5, WorstPast: "fileserver on xfs/ext4 2/3",
		WorstCell: "mail on ext4/xfs 3/5", WorstCellShare: 0.6,
		Confident: 3, ConfidentRight: 2, Wrong: 4, WrongLow: 3, EarlyConfidentWrong: 1,
	}
	if got := targets(targetSet()); got != want {
		t.Errorf("targets:\n got %+v\nwant %+v", got, want)
	}
	// Every settled window in the layout: none past it, no worst there.
	layout := []workload.Evaluated{window("mail", "mail", "ext4/xfs/raw", true, true, 0.9)}
	if got := targets(layout); got.PastLayout != 0 || got.PastRight != 0 || got.WorstPast != "" || got.Settled != 1 || got.SettledPaired != 1 {
		t.Errorf("only layout windows: %+v", got)
	}
}

// TestRenderFit: the report has the new rows with targetSet's figures.
func TestRenderFit(t *testing.T) {
	var b strings.Builder
	if err := renderFit(&b, targetSet()); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| windows right after the first 3 minutes | 5/8 = 62% |",
		"| of those right, at confidence >= 0.5 (a verdict) | 4/5 = 80% |",
		"those past the layout (Filebench still laying out its files in none of the window): right | 5/6 = 83% |",
		"| the worst class on a pair, past the layout | fileserver on xfs/ext4 2/3 |",
		"| the worst class on a pair, after the first 3 minutes | mail on ext4/xfs 3/5 |",
		"| first 3 minutes: windows wrong at confidence >= 0.9 | 1 |",
	} {
		if !strings.Contains(b.String(), row+"\n") {
			t.Errorf("the report lacks the row %q:\n%s", row, b.String())
		}
	}
	// Every window right, all in the layout: the worst cell after the
	// first 3 minutes says so; none past the layout: "-".
	var all strings.Builder
	right := []workload.Evaluated{window("mail", "mail", "ext4/xfs/raw", false, true, 0.2), window("mail", "mail", "ext4/xfs/raw", true, true, 0.9)}
	if err := renderFit(&all, right); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| the worst class on a pair, past the layout | - |",
		"| the worst class on a pair, after the first 3 minutes | none: every class right on every pair |",
	} {
		if !strings.Contains(all.String(), row+"\n") {
			t.Errorf("the report of one right layout window lacks the row %q:\n%s", row, all.String())
		}
	}
}

// roundTripModel is the live model with what only a fitted model
// has: a softmax, a temperature, a confidence, centres with guest file
// system centres, missing charges and other centres of their own, and
// sources with what YAML would read otherwise unquoted (": ", " #").
func roundTripModel(t *testing.T) *classifier.Model {
	t.Helper()
	m := liveClassifier(t).Model
	tv := 0.25
	m.Softmax = &classifier.Softmax{Over: classifier.OverDistance, Source: "fitted: the distances # not their squares"}
	m.Temperature = &classifier.Bonus{Value: &tv, Source: "fitted with the softmax (see there)"}
	m.Mixed = classifier.Ramp{Below: []float64{0.3, 0.45}, Source: "fitted with the softmax (see there)"}
	m.Far = classifier.Ramp{Above: []float64{3.07, 4.07}, Source: "fitted: 0.99 quantile"}
	m.Confidence = &classifier.Confidence{
		Margin: classifier.Ramp{Above: []float64{0, 0.5}, Source: "fitted (see confidence)"},
		Near:   classifier.Ramp{Below: []float64{1e3, 1e3 + 1}, Source: "fitted with the margin"},
		Source: "fitted: none of them met both: no workload class is ever confident",
	}
	m.Features = nil
	for i, f := range classifier.FeatureNames {
		m.Features = append(m.Features, classifier.Feature{Name: f, Scale: 0.125 + float64(i)*0.377, Source: "fitted: the standard deviation"})
	}
	centre := func(name string, rw, rs, sync, flush, ws float64) classifier.Class {
		return classifier.Class{Name: name, Source: "fitted on 3 windows: centre 0.5 reads per write", Box: map[string][2]float64{
			classifier.ReadWriteLog2: {rw, rw}, classifier.ReadSizeLog2: {rs, rs}, classifier.SyncWriteShare: {sync, sync},
			classifier.FlushesPerWriteLog2: {flush, flush}, classifier.WriteSizeLog2: {ws, ws}}}
	}
	web := centre("web", 9.21, 13.39, 0.07, -3.2, 18.9)
	web.Others = []classifier.Class{centre("fio", 9.5, 13.4, 0.45, -1.13, 17.69)}
	web.Others[0].GuestFS = map[string]map[string][2]float64{
		"ext4": {classifier.SyncWriteShare: {0.7, 0.7}},
		"xfs":  {classifier.SyncWriteShare: {0.23, 0.23}, classifier.WriteSizeLog2: {18.27, 18.27}},
	}
	web.Others[0].Missing = map[string]float64{classifier.WriteSizeLog2: 0.37}
	mail := centre("mail", -0.85, 13.9, 0.18, -2.23, 13.96)
	mail.GuestFS = map[string]map[string][2]float64{"btrfs": {classifier.SyncWriteShare: {0.06, 0.06}}}
	mail.Others = []classifier.Class{centre("fio", -0.08, 13.44, 0.99, -0.54, 13.69)}
	rfa := centre("rfa", 3.1, 13.1, 0.05, -5, 15)
	rfa.Missing = map[string]float64{classifier.ReadSizeLog2: 3.58}
	m.Classes = []classifier.Class{web, mail, centre("fileserver", -0.89, 16.64, 0.01, -9.97, 16), rfa}
	if err := m.Validate(); err != nil {
		t.Fatalf("the round-trip model: %v", err)
	}
	return m
}

// TestModelYAMLRoundTrip: what modelYAML writes names only fields the
// model has (decoded strictly, as rules/gen decodes rules/classes.yaml),
// and, set into the live file as -fit -write does, loads as the same
// model: others, confidence and all.
func TestModelYAMLRoundTrip(t *testing.T) {
	m := roundTripModel(t)
	fitted := modelYAML(m)
	dec := yaml.NewDecoder(strings.NewReader(fitted))
	dec.KnownFields(true)
	var strict classifier.Model
	if err := dec.Decode(&strict); err != nil {
		t.Fatalf("the fitted block, decoded strictly: %v\n%s", err, fitted)
	}
	got := writeAndLoad(t, fitted)
	if !reflect.DeepEqual(got, m) {
		for i := range m.Classes {
			if !reflect.DeepEqual(got.Classes[i], m.Classes[i]) {
				t.Errorf("class %s:\n got %+v\nwant %+v", m.Classes[i].Name, got.Classes[i], m.Classes[i])
			}
		}
		t.Errorf("the model loaded differs from the one written:\n got %+v\nwant %+v", *got, *m)
	}
	// The same disk, the same class and confidence.
	x := map[string]float64{classifier.ReadWriteLog2: -0.1, classifier.ReadSizeLog2: 13.4, classifier.SyncWriteShare: 0.9,
		classifier.FlushesPerWriteLog2: -0.5, classifier.WriteSizeLog2: 13.7}
	if a, b := m.Classify(x, 200, "xfs"), got.Classify(x, 200, "xfs"); a.Class != b.Class || a.Confidence != b.Confidence {
		t.Errorf("a disk near mail's fio centre: %s at %v written, %s at %v loaded", a.Class, a.Confidence, b.Class, b.Confidence)
	}
}

// writeAndLoad sets fitted into rules/classes.yaml as -fit -write does and
// loads the file that gives.
func writeAndLoad(t *testing.T, fitted string) *classifier.Model {
	t.Helper()
	live, err := os.ReadFile(livePath)
	if err != nil {
		t.Fatal(err)
	}
	text, err := withFitted(string(live), fitted)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "classes.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadClassifier(p)
	if err != nil {
		t.Fatalf("the model written does not load: %v", err)
	}
	return c.Model
}

// storedFit is the model DefaultFit gives on the stored Filebench runs and
// fio models from the fit's base: what -fit -write writes.
func storedFit(t *testing.T) *classifier.Model {
	t.Helper()
	res, err := LoadResults("../testdata/filebench.json")
	if err != nil {
		t.Fatal(err)
	}
	fio, err := workload.LoadResults("../testdata/features.json")
	if err != nil {
		t.Fatal(err)
	}
	train, _ := fitInputs(res, fio, &Options{Window: time.Minute, Step: 30 * time.Second})
	m, err := workload.Fit(classifierAt(t, fitBasePath).Model, train, workload.DefaultFit)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFittedModelRoundTrip: the model the fit gives on the stored runs
// (with other centres and a confidence), written as -fit -write writes
// it, loads as that same model, every number and source of it.
// TestFittedModelCurrent checks that the committed candidate is that
// text; a field modelYAML dropped would pass it, and be lost.
func TestFittedModelRoundTrip(t *testing.T) {
	m := storedFit(t)
	others := 0
	for _, c := range m.Classes {
		others += len(c.Others)
	}
	if m.Confidence == nil || others == 0 {
		t.Errorf("the fit has a confidence %v and %d other centres: the round trip shows less than it should", m.Confidence != nil, others)
	}
	if got := writeAndLoad(t, modelYAML(m)); !reflect.DeepEqual(got, m) {
		t.Errorf("the fitted model written and loaded again differs:\n got %+v\nwant %+v", *got, *m)
	}
}
