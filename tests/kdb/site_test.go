package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/workload"
)

// siteRuns are synthetic runs in blocks with every kind of verdict:
// mail has a best group of two, a pair between and a standout worst;
// fileserver has two pairs and three repeats (four residual degrees of
// freedom: nothing settled); web has one pair (no verdicts).
func siteRuns() []Run {
	return siteRunsOf(map[string]float64{"ext4/xfs": 100e6, "ext4/ext4": 100e6, "xfs/ext4": 80e6, "xfs/xfs": 40e6})
}

// siteRunsOf is siteRuns with mail's pairs and throughputs.
func siteRunsOf(mail map[string]float64) []Run {
	var pairs []string
	for _, p := range AllPairs() {
		if _, ok := mail[p]; ok {
			pairs = append(pairs, p)
		}
	}
	works := []workload.Workload{workload.Mail, workload.Fileserver, workload.Web}
	var jobs []job
	for _, j := range schedule(pairs, works, 3, controlCell{"ext4/xfs", workload.Mail}, 20) {
		switch {
		case j.workload == workload.Fileserver && j.pair != "ext4/xfs" && j.pair != "xfs/xfs",
			j.workload == workload.Web && j.pair != "ext4/xfs":
			continue
		}
		jobs = append(jobs, j)
	}
	truth := func(j job) float64 {
		if j.workload == workload.Mail && j.control == "" {
			return mail[j.pair]
		}
		return 10e6
	}
	return synthJobs(jobs, truth, noDrift, 0.02, 4)
}

// siteRank ranks runs with the test settings.
func siteRank(runs []Run) ([]Cell, map[workload.Workload][]Ranked, map[workload.Workload]Assessment) {
	cells := Cells(runs)
	ranked, as := Rank(cells, MeasureDrift(runs), RankOptions{Tolerance: DefaultTolerance, Level: DefaultConfidence, Seed: testSettings.Seed, Replicates: 2000})
	return cells, ranked, as
}

func TestSiteEntries(t *testing.T) {
	cells, ranked, as := siteRank(siteRuns())
	entries := SiteEntries(cells, ranked, as, testSettings, nil)
	got := map[string]string{}
	var order []string
	for _, e := range entries {
		s := e.Verdict
		if e.Standout {
			s += "*"
		}
		got[e.Workload+" "+e.Pair] = s
		order = append(order, e.Workload)
		if (e.Verdict == VerdictBest || e.Verdict == VerdictWorst) != (e.Confidence != nil) {
			t.Errorf("%s %s %s: confidence %v", e.Workload, e.Pair, e.Verdict, e.Confidence)
		}
		if e.Confidence != nil && *e.Confidence < DefaultConfidence {
			t.Errorf("%s %s: confidence %v below the level", e.Workload, e.Pair, *e.Confidence)
		}
		if e.Conditions != "image raw, cache=none, host device loop, tcg guest, fio 90 s runs" {
			t.Errorf("conditions %q", e.Conditions)
		}
	}
	want := map[string]string{
		"mail ext4/xfs": "best", "mail ext4/ext4": "best", "mail xfs/ext4": "not_distinguishable", "mail xfs/xfs": "worst*",
		"fileserver ext4/xfs": "not_distinguishable", "fileserver xfs/xfs": "not_distinguishable",
	}
	if !reflect.DeepEqual(got, want) || strings.Join(order, " ") != "mail mail mail mail fileserver fileserver" {
		t.Fatalf("entries\n got %v (%v)\nwant %v", got, order, want)
	}
	var e SiteEntry
	for _, x := range entries {
		if x.Workload == "mail" && x.Pair == "xfs/xfs" {
			e = x
		}
	}
	if e.Date != "2026-11-21" {
		t.Errorf("date %q", e.Date)
	}
	for k, v := range map[string]float64{
		"runs": 3, "rank": 4, "pairs_ranked": 4, "write_amplification_ratio": 1.25, "flush_latency_seconds": 0.002,
	} {
		approx(t, "xfs/xfs "+k, e.Measured[k], v)
	}
	if c := e.Measured["throughput_corrected_bytes_per_second"]; c < 36e6 || c > 44e6 {
		t.Errorf("xfs/xfs corrected throughput %g, want about 40e6", c)
	}
	if lo, hi := e.Measured["throughput_corrected_low_bytes_per_second"], e.Measured["throughput_corrected_high_bytes_per_second"]; !(lo < hi) {
		t.Errorf("xfs/xfs interval %g-%g", lo, hi)
	}
	if _, ok := e.Measured["minimum_detectable_difference_ratio"]; !ok {
		t.Error("no minimum detectable difference")
	}
	if !strings.Contains(e.Note, "3 runs of tests/workload/jobs/mail.fio in randomized blocks (seed 20)") || !strings.Contains(e.Note, "rank 4 of 4") {
		t.Errorf("note %q", e.Note)
	}
	for _, x := range entries {
		if x.Workload == "fileserver" && !strings.Contains(x.Note, "residual degrees of freedom") {
			t.Errorf("fileserver note does not say why: %q", x.Note)
		}
	}
}

// TestSiteFile writes a site file over an existing one and loads the
// result through rules/gen (`go run ./rules/gen`), then checks the
// generated rules with promtool and counts the site's series in them.
func TestSiteFile(t *testing.T) {
	cells, ranked, as := siteRank(siteRuns())
	entries := SiteEntries(cells, ranked, as, testSettings, nil)
	measured := map[string]bool{}
	for w, rs := range ranked {
		for _, r := range rs {
			if r.Of >= 2 {
				measured[string(w)+" "+r.Pair] = true
			}
		}
	}
	path := filepath.Join(t.TempDir(), "site.yaml")
	old := `# Our site file.
# Second header line.
- workload: mail
  pair: xfs/ext4
  verdict: best
  date: "2025-01-01"
  note: measured now, so this goes
- workload: rfa
  pair: ext4/xfs
  verdict: worst
  date: "2025-01-02"
  note: not measured now, so this stays
- workload: web
  pair: ext4/xfs
  verdict: best
  date: "2025-01-03"
  note: measured alone now (no ranking), so this stays
`
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSite(path, entries, measured); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# Our site file.\n# Second header line.\n") {
		t.Errorf("header not kept:\n%s", b)
	}
	var got []SiteEntry
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var keys []string
	figures, verdicts := 0, 0
	for _, e := range got {
		keys = append(keys, e.Workload+" "+e.Pair+" "+e.Verdict)
		// rules/gen acts on best and worst entries (all at the level
		// here) and on the old hand-written ones, not on
		// not_distinguishable entries.
		if e.Verdict != VerdictNotDistinguishable {
			verdicts++
			figures += len(e.Measured)
		}
	}
	slices.Sort(keys[2:]) // the two groups of mail's best come in rank order
	want := "rfa ext4/xfs worst|web ext4/xfs best|fileserver ext4/xfs not_distinguishable|fileserver xfs/xfs not_distinguishable|mail ext4/ext4 best|mail ext4/xfs best|mail xfs/ext4 not_distinguishable|mail xfs/xfs worst"
	if strings.Join(keys, "|") != want {
		t.Errorf("site file entries\n got %s\nwant %s", strings.Join(keys, "|"), want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sc, err := CheckSite(ctx, "../..", "../../rules/kdb/pairs.yaml", path)
	if err != nil {
		t.Fatal(err)
	}
	if sc.SiteVerdicts != verdicts || sc.SiteFigures != figures {
		t.Errorf("generated rules carry %d site verdicts and %d figures, want %d and %d", sc.SiteVerdicts, sc.SiteFigures, verdicts, figures)
	}

	// The check has teeth: rules/gen refuses a verdict it does not know.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(string(b), "verdict: not_distinguishable", "verdict: fine", 1)), 0o644)
	if _, err := CheckSite(ctx, "../..", "../../rules/kdb/pairs.yaml", bad); err == nil || !strings.Contains(err.Error(), "rules/gen refused") {
		t.Errorf("a bad site file passed the check: %v", err)
	}
}

func TestSiteFileEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "site.yaml")
	if err := WriteSite(path, nil, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "# ") || !strings.HasSuffix(string(b), "\n[]\n") {
		t.Errorf("empty site file:\n%s", b)
	}
	var got []SiteEntry
	if err := yaml.Unmarshal(b, &got); err != nil || len(got) != 0 {
		t.Errorf("empty site file reads as %v, %v", got, err)
	}
}
