package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// evalsEvery builds one evaluation every 10 s from t0+10s, with the
// classes given.
func evalsEvery(t0 time.Time, classes ...string) []Eval {
	out := make([]Eval, len(classes))
	for i, c := range classes {
		out[i] = Eval{At: t0.Add(time.Duration(i+1) * 10 * time.Second), Class: c}
	}
	return out
}

func TestAnalyze(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	win := Window{Want: "mail", Start: t0, Runtime: 100 * time.Second, Warmup: 50 * time.Second, Interval: 10 * time.Second}
	sec := func(s int) *time.Duration { d := time.Duration(s) * time.Second; return &d }
	for _, tc := range []struct {
		name       string
		evals      []Eval
		evaluation int
		right      int
		firstRight *time.Duration
		settle     *time.Duration
		flaps      int
		problems   int
	}{
		{
			name:       "clean switch",
			evals:      evalsEvery(t0, "web", "web", "mixed", "mail", "mail", "mail", "mail", "mail", "mail", "mail"),
			evaluation: 6, right: 6, firstRight: sec(40), settle: sec(40),
		},
		{
			name:       "flap after first right",
			evals:      evalsEvery(t0, "web", "mail", "mixed", "mail", "mail", "mail", "mail", "mail", "mail", "mail"),
			evaluation: 6, right: 6, firstRight: sec(20), settle: sec(40), flaps: 2, problems: 1,
		},
		{
			name:       "one wrong of six after the warm-up",
			evals:      evalsEvery(t0, "mail", "mail", "mail", "mail", "mail", "mail", "rfa", "mail", "mail", "mail"),
			evaluation: 6, right: 5, firstRight: sec(10), settle: sec(80), flaps: 2, problems: 2,
		},
		{
			name:       "wrong at the end: never settled",
			evals:      evalsEvery(t0, "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mixed"),
			evaluation: 6, right: 5, firstRight: sec(10), flaps: 1, problems: 3,
		},
		{
			name:       "never right",
			evals:      evalsEvery(t0, "web", "web", "web", "web", "web", "web", "web", "web", "web", "web"),
			evaluation: 6, right: 0, problems: 2,
		},
		{
			// Two evaluations after the warm-up are missing: they count
			// as wrong.
			name:       "missing evaluations",
			evals:      append(evalsEvery(t0, "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mail")[:5], evalsEvery(t0, "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mail")[7:]...),
			evaluation: 5, right: 4, firstRight: sec(10), settle: sec(10), problems: 1,
		},
		{
			name:       "evaluations outside the window are ignored",
			evals:      append([]Eval{{At: t0.Add(-5 * time.Second), Class: "mail"}}, evalsEvery(t0, "web", "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mail", "mail", "web")...),
			evaluation: 6, right: 6, firstRight: sec(20), settle: sec(20),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Analyze(tc.evals, win)
			if o.Evaluations != tc.evaluation || o.Right != tc.right || o.Flaps != tc.flaps {
				t.Errorf("evaluations %d right %d flaps %d, want %d %d %d", o.Evaluations, o.Right, o.Flaps, tc.evaluation, tc.right, tc.flaps)
			}
			if !durEq(o.FirstRight, tc.firstRight) || !durEq(o.Settle, tc.settle) {
				t.Errorf("first right %v settle %v, want %v %v", fmtDur(o.FirstRight), fmtDur(o.Settle), fmtDur(tc.firstRight), fmtDur(tc.settle))
			}
			if want := float64(tc.right) / float64(tc.evaluation); o.ShareRight != want {
				t.Errorf("share right %v, want %v", o.ShareRight, want)
			}
			if p := Acceptance.Check(o); len(p) != tc.problems {
				t.Errorf("problems %q, want %d", p, tc.problems)
			}
		})
	}
}

func TestCheckSettleLimit(t *testing.T) {
	late := 6 * time.Minute
	o := Outcome{Evaluations: 10, Right: 10, ShareRight: 1, Settle: &late, FirstRight: &late}
	p := Acceptance.Check(o)
	if len(p) != 1 || !strings.Contains(p[0], "settled after 6m0s") {
		t.Errorf("problems %q, want one about settling after 6m0s", p)
	}
	if p := Acceptance.Check(Outcome{}); len(p) != 2 {
		t.Errorf("empty outcome: problems %q, want no evaluations and never settled", p)
	}
}

func durEq(a, b *time.Duration) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func fmtDur(d *time.Duration) string {
	if d == nil {
		return "nil"
	}
	return d.String()
}

func TestClassTimeline(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ss := []Series{
		{Labels: map[string]string{"class": "mail"}, Points: []Point{{at(30), 1}, {at(40), 1}}},
		{Labels: map[string]string{"class": "web"}, Points: []Point{{at(10), 1}, {at(20), 1}, {at(40), 1}}},
	}
	got := ClassTimeline(ss)
	want := []Eval{{at(10), "web"}, {at(20), "web"}, {at(30), "mail"}, {at(40), "mail+web"}}
	if len(got) != len(want) {
		t.Fatalf("timeline %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].At.Equal(want[i].At) || got[i].Class != want[i].Class {
			t.Errorf("evaluation %d: %v, want %v", i, got[i], want[i])
		}
	}
	if s := timeline(got, t0); s != "web x2 (10-20s), mail x1 (30-30s), mail+web x1 (40-40s)" {
		t.Errorf("timeline text %q", s)
	}
}

func TestSpliceRender(t *testing.T) {
	settle, first := 60.0, 40.0
	r := &Results{
		Kind: KindCI, Updated: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), Command: "go test x", Seconds: 900,
		Settings: Settings{Short: "1m", Long: "5m", ForScale: 0.01, PoorPairingFor: "36s", ScrapeSeconds: 5, EvaluationSeconds: 10,
			RuntimeSeconds: 200, WarmupSeconds: 90, Concurrent: 2, Guest: "g"},
		Pairs: []PairResult{{Pair: "xfs/xfs/raw", Domain: "d", Measured: time.Date(2026, 11, 21, 9, 45, 0, 0, time.UTC), Problems: []string{"odd | thing"},
			Alerts: []AlertEvent{{Kind: "pending", Class: "mail", During: "mail", At: 40, Seconds: 20}, {Kind: "delivered", Class: "mail", During: "mail", At: 60}},
			Workloads: []WorkloadResult{{
				Workload: "mail", Verdict: "worst", Evaluations: 11, Right: 11, ShareRight: 1, Classes: map[string]int{"mail": 11},
				FirstRightSeconds: &first, SettleSeconds: &settle,
				Alert: AlertResult{Expected: true, PendingSeconds: &first, FiringSeconds: &settle, DeliveredSeconds: &settle, Notifications: 1},
			}}}},
	}
	doc := "intro\n" + beginMarker(KindCI) + "\nold\n" + endMarker(KindCI) + "\n" + beginMarker(KindFull) + "\n" + endMarker(KindFull) + "\n"
	out, err := Splice(doc, KindCI, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| xfs/xfs/raw | 11-21 09:45 | mail | worst | 11 | 11 | 1.00 | 40 s | 60 s | 0 | mail:11 | 40 s / 60 s / 60 s | ok |",
		"**FAILED**", // Passed is false
		"- xfs/xfs/raw: odd \\| thing",
		"- xfs/xfs/raw: pending mail at mail+40s for 20s; delivered mail at mail+60s\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendering lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "old") {
		t.Errorf("old section kept:\n%s", out)
	}
	again, err := Splice(out, KindCI, r)
	if err != nil || again != out {
		t.Errorf("splicing twice changed the document (err %v)", err)
	}
	if full := mustSplice(t, out, KindFull, nil); !strings.Contains(full, "No full run recorded yet.") {
		t.Errorf("empty full section:\n%s", full)
	}
	if _, err := Splice("no markers", KindCI, r); err == nil {
		t.Error("splice without markers: no error")
	}
}

func TestMerge(t *testing.T) {
	set := Settings{Short: "5m", Long: "1h", ForScale: 0.1}
	ok := func(pair string) PairResult {
		return PairResult{Pair: pair, Workloads: []WorkloadResult{{Workload: "web"}}}
	}
	bad := func(pair string) PairResult {
		return PairResult{Pair: pair, Workloads: []WorkloadResult{{Workload: "web", Problems: []string{"x"}}}}
	}
	old := &Results{Kind: KindFull, Settings: set, Pairs: []PairResult{ok("a"), bad("b"), ok("c")}}
	r := &Results{Kind: KindFull, Settings: set, Passed: true, Pairs: []PairResult{ok("b"), ok("d")}}
	m := Merge(old, r)
	var got []string
	for _, p := range m.Pairs {
		got = append(got, p.Pair)
	}
	if strings.Join(got, ",") != "a,c,b,d" || !m.Passed {
		t.Errorf("merged pairs %v passed %v, want a,c,b,d passed", got, m.Passed)
	}
	old.Pairs = append(old.Pairs, bad("e"))
	if m := Merge(old, r); m.Passed {
		t.Error("merge kept a failed pair but passed")
	}
	other := &Results{Kind: KindFull, Settings: Settings{Short: "1m"}, Passed: true, Pairs: []PairResult{ok("d")}}
	if m := Merge(old, other); len(m.Pairs) != 1 {
		t.Errorf("merge across settings kept %d pairs, want only the new one", len(m.Pairs))
	}
	if m := Merge(nil, r); m != r {
		t.Error("merge into nothing is not the run itself")
	}
}

func mustSplice(t *testing.T, doc, kind string, r *Results) string {
	t.Helper()
	out, err := Splice(doc, kind, r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestResultsFile checks that RESULTS.md shows what the results files
// hold (a run that records writes both; a hand edit of either shows here).
// With -record it rewrites RESULTS.md from them instead.
func TestResultsFile(t *testing.T) {
	b, err := os.ReadFile("RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	want := doc
	for _, kind := range []string{KindCI, KindFull, KindHeldOut} {
		r, err := LoadResults(ResultsFile(kind))
		if err != nil {
			t.Fatal(err)
		}
		want, err = Splice(want, kind, r)
		if err != nil {
			t.Fatal(err)
		}
	}
	if *flagRecord {
		if err := os.WriteFile("RESULTS.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != doc {
		t.Errorf("RESULTS.md is not what %s, %s and %s render; go test ./tests/validate/ -run TestResultsFile -record rewrites it",
			ResultsFile(KindCI), ResultsFile(KindFull), ResultsFile(KindHeldOut))
	}
}

// TestVerdictRules: the verdicts the knowledge base's rules record, counted
// in a generated rules dir; a dir without them is an error, not 0.
func TestVerdictRules(t *testing.T) {
	dir := t.TempDir()
	if _, err := verdictRules(dir); err == nil {
		t.Error("no fspair-kdb.rules.yml: want an error")
	}
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "fspair-kdb.rules.yml"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("groups:\n  - name: fspair.kdb\n    rules:\n      - record: fspair_kdb_workload_info\n        expr: vector(1)\n")
	if _, err := verdictRules(dir); err == nil {
		t.Error("no verdict rules: want an error")
	}
	write("groups:\n  - name: fspair.kdb\n    rules:\n      - record: fspair_kdb_pair_verdict\n        expr: vector(1)\n" +
		"      - record: fspair_kdb_fs_verdict\n        expr: vector(1)\n      - record: fspair_kdb_pair_verdict\n        expr: vector(1)\n")
	if n, err := verdictRules(dir); err != nil || n != 2 {
		t.Errorf("two verdict rules: got %d, %v", n, err)
	}
}
