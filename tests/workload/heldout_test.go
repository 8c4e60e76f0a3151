package workload

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/fspair/fspair/rules/classifier"
)

var flagRecordHeldOut = flag.Bool("record-heldout", false, "rewrite the held-out tables of rules/README.md from testdata")

const (
	heldOutDoc   = "../../rules/README.md"
	heldOutBegin = "<!-- BEGIN GENERATED held-out validation: go test ./tests/workload/ -run TestHeldOut -record-heldout -->"
	heldOutEnd   = "<!-- END GENERATED held-out validation -->"
)

// heldOutSection renders the evaluation of the live classifier on the
// training runs (testdata/features.json, the runs its boxes were set on) and
// on the held-out variants (testdata/variants.json, never used to set them)
// and on real programs (testdata/apps.json, the Apps, held out as well),
// per run window and per disjoint sub-window.
func heldOutSection(t *testing.T) string {
	t.Helper()
	m, err := classifier.Load("../../rules/classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	train, err := LoadResults("testdata/features.json")
	if err != nil {
		t.Fatal(err)
	}
	held, err := LoadResults("testdata/variants.json")
	if err != nil {
		t.Fatal(err)
	}
	apps, err := LoadResults("testdata/apps.json")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, part := range []struct {
		title string
		runs  []RunResult
		sub   bool
	}{
		{"Held-out variants, one window per run (the run's steady state)", held.Runs, false},
		{"Held-out variants, disjoint sub-windows of each run", held.Runs, true},
		{"Real programs (apps), one window per run", apps.Runs, false},
		{"Real programs (apps), disjoint sub-windows of each run", apps.Runs, true},
		{"Training runs (the boxes were set on these), one window per run", train.Runs, false},
	} {
		md, err := RenderEvaluation(ScoreRuns(m, part.runs, part.sub))
		if err != nil {
			t.Fatalf("%s: %v", part.title, err)
		}
		b.WriteString("#### " + part.title + "\n\n" + md + "\n")
	}
	every := append(append(append([]RunResult{}, train.Runs...), held.Runs...), apps.Runs...)
	boxes := FamilyBoxes(m, every)
	for _, part := range []struct {
		title string
		sub   bool
	}{
		{"One box per model family (an experiment, not the live classifier), one window per run", false},
		{"One box per model family (an experiment, not the live classifier), disjoint sub-windows of each run", true},
	} {
		md, err := RenderFamilies(ScoreRuns(m, every, part.sub),
			ScoreFamilies(m, boxes, every, part.sub, false), ScoreFamilies(m, boxes, every, part.sub, true))
		if err != nil {
			t.Fatalf("%s: %v", part.title, err)
		}
		b.WriteString("#### " + part.title + "\n\n" + md + "\n")
	}
	return b.String()
}

// TestHeldOut checks that rules/README.md shows the classifier's held-out
// validation as rules/classes.yaml and the measured windows give it now: a
// change of the classifier or of the data must come with its new tables.
func TestHeldOut(t *testing.T) {
	doc, err := os.ReadFile(heldOutDoc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, heldOutBegin), strings.Index(s, heldOutEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q ... %q", heldOutDoc, heldOutBegin, heldOutEnd)
	}
	want := heldOutSection(t)
	got := s[i+len(heldOutBegin)+1 : j]
	if got == want {
		return
	}
	if *flagRecordHeldOut {
		if err := os.WriteFile(heldOutDoc, []byte(s[:i+len(heldOutBegin)+1]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's held-out tables are stale; rerun with -record-heldout. Now:\n%s", heldOutDoc, want)
}
