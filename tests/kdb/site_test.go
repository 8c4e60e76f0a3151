package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/workload"
)

// siteRuns are synthetic runs with every kind of verdict: mail has best,
// none and a standout worst; fileserver cannot be separated (contested);
// web has one pair (no verdicts).
func siteRuns() []Run {
	var runs []Run
	runs = append(runs, synthCell("ext4/xfs", workload.Mail, 100e6, 95e6, 105e6)...)
	runs = append(runs, synthCell("ext4/ext4", workload.Mail, 96e6, 104e6, 90e6)...)
	runs = append(runs, synthCell("xfs/ext4", workload.Mail, 80e6, 78e6, 83e6)...)
	runs = append(runs, synthCell("xfs/xfs", workload.Mail, 40e6, 38e6, 42e6)...)
	runs = append(runs, synthCell("ext4/xfs", workload.Fileserver, 10e6, 9e6)...)
	runs = append(runs, synthCell("xfs/xfs", workload.Fileserver, 9.5e6, 10.5e6)...)
	runs = append(runs, synthCell("ext4/xfs", workload.Web, 7e6)...)
	return runs
}

func TestSiteEntries(t *testing.T) {
	cells := Cells(siteRuns())
	entries := SiteEntries(cells, Rank(cells, DefaultTolerance), testSettings, nil)
	var got []string
	for _, e := range entries {
		s := e.Workload + " " + e.Pair + " " + e.Verdict
		if e.Standout {
			s += "*"
		}
		got = append(got, s)
	}
	want := "mail ext4/xfs best|mail ext4/ext4 best|mail xfs/xfs worst*|fileserver xfs/xfs contested|fileserver ext4/xfs contested"
	if strings.Join(got, "|") != want {
		t.Fatalf("entries\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	e := entries[2]
	// The last of xfs/xfs's three runs ended on 2026-11-21 (03:01 UTC).
	if e.Date != "2026-11-21" {
		t.Errorf("date %q", e.Date)
	}
	for k, v := range map[string]float64{
		"throughput_bytes_per_second": 40e6, "throughput_min_bytes_per_second": 38e6, "throughput_max_bytes_per_second": 42e6,
		"runs": 3, "rank": 4, "pairs_ranked": 4, "write_amplification_ratio": 1.25, "flush_latency_seconds": 0.002,
	} {
		approx(t, "xfs/xfs "+k, e.Measured[k], v)
	}
	if !strings.Contains(e.Note, "3 runs of tests/workload/jobs/mail.fio") || !strings.Contains(e.Note, "rank 4 of 4") {
		t.Errorf("note %q", e.Note)
	}
}

// TestSiteFile writes a site file over an existing one and loads the
// result through rules/gen (`go run ./rules/gen`), then checks the
// generated rules with promtool and counts the site's series in them.
func TestSiteFile(t *testing.T) {
	cells := Cells(siteRuns())
	ranked := Rank(cells, DefaultTolerance)
	entries := SiteEntries(cells, ranked, testSettings, nil)
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
  note: measured between the groups now, so this goes
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
	figures := 0
	for _, e := range got {
		keys = append(keys, e.Workload+" "+e.Pair+" "+e.Verdict)
		figures += len(e.Measured)
	}
	want := "rfa ext4/xfs worst|web ext4/xfs best|mail ext4/xfs best|mail ext4/ext4 best|mail xfs/xfs worst|fileserver xfs/xfs contested|fileserver ext4/xfs contested"
	if strings.Join(keys, "|") != want {
		t.Errorf("site file entries\n got %s\nwant %s", strings.Join(keys, "|"), want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sc, err := CheckSite(ctx, "../..", "../../rules/kdb/pairs.yaml", path)
	if err != nil {
		t.Fatal(err)
	}
	if sc.SiteVerdicts != len(got) || sc.SiteFigures != figures {
		t.Errorf("generated rules carry %d site verdicts and %d figures, want %d and %d", sc.SiteVerdicts, sc.SiteFigures, len(got), figures)
	}

	// The check has teeth: rules/gen refuses a verdict it does not know.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(string(b), "verdict: contested", "verdict: fine", 1)), 0o644)
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
