package main

import (
	"encoding/json"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

// testReport builds a report from synthetic runs: siteRuns plus a mail
// pair the published table calls a standout best that runs with the
// slowest here (an opposite verdict).
func testReport(t *testing.T) *Report {
	t.Helper()
	runs := siteRunsOf(map[string]float64{"ext4/xfs": 100e6, "ext4/ext4": 100e6, "xfs/ext4": 80e6, "xfs/xfs": 40e6, "btrfs/ext4": 40e6})
	cells, ranked, as := siteRank(runs)
	pub := mustPublished(t)
	return &Report{
		Generated: time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC), Command: "go run ./tests/kdb -size full",
		StateDir: "/var/tmp/fspair-kdb/full", Settings: testSettings, Env: []Env{runs[0].Env},
		Cells: cells, Ranked: ranked, Assessed: as, Drift: MeasureDrift(runs), Pub: pub, Cmp: Compare(ranked, pub), Tolerance: DefaultTolerance,
		SitePath: "kdb-report/full/site.yaml", Site: SiteEntries(cells, ranked, as, testSettings, nil),
		Check:   &SiteCheck{SiteVerdicts: 4, SiteFigures: 60},
		Missing: []string{"rfa on ext4/xfs #1"}, Stopped: "interrupted", Remaining: 3 * time.Minute,
	}
}

func TestCompare(t *testing.T) {
	r := testReport(t)
	got := map[string]string{}
	for _, c := range r.Cmp {
		got[string(c.Workload)+" "+c.Site.Pair] = c.Pub.Verdict + ">" + c.Site.Verdict + ":" + c.Status
	}
	for k, want := range map[string]string{
		"mail ext4/xfs":       "best>best:agree",
		"mail ext4/ext4":      "best>best:agree",
		"mail xfs/ext4":       "best>not_distinguishable:not distinguishable", // between the groups
		"mail xfs/xfs":        "worst>worst:agree",
		"mail btrfs/ext4":     "best>worst:opposite",
		"fileserver xfs/xfs":  "worst>not_distinguishable:not distinguishable", // too few runs
		"fileserver ext4/xfs": "best>not_distinguishable:not distinguishable",
		"web ext4/xfs":        "best>:unranked",
	} {
		if got[k] != want {
			t.Errorf("%s: got %s, want %s", k, got[k], want)
		}
	}
	if m, n := meanRank(r.Cmp, workload.Mail, VerdictBest); n != 4 || m != (1+2+3+5)/4.0 {
		t.Errorf("mean site rank of mail's published best pairs: %g over %d", m, n)
	}
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	files, err := WriteReport(dir, testReport(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if want := "cells.json heatmap-fileserver.png heatmap-mail.png heatmap-web.png report.html report.md"; strings.Join(names, " ") != want {
		t.Errorf("files %v, want %s (no heatmap for rfa, which has no runs)", names, want)
	}
	for _, n := range names {
		if st, err := os.Stat(filepath.Join(dir, n)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", n, err)
		}
	}

	// The heatmap: size, and shades that follow the throughput.
	f, err := os.Open(filepath.Join(dir, "heatmap-mail.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatalf("heatmap-mail.png: %v", err)
	}
	w, h := HeatmapSize()
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("heatmap is %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	// A cell's top-left corner carries no text.
	corner := func(guest, host int) color.RGBA {
		r, g, b, a := img.At(heatLeft+host*heatCellW+4, heatTop+guest*heatCellH+4).RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
	}
	fastest, slowest := corner(0, 1), corner(1, 1) // ext4/xfs, xfs/xfs
	if fastest != heatHigh || slowest != heatLow {
		t.Errorf("mail ext4/xfs (fastest) shaded %v, xfs/xfs (slowest) %v; want %v and %v", fastest, slowest, heatHigh, heatLow)
	}
	if c := corner(1, 0); !(c.B < heatLow.B || c.R < heatLow.R) || c == heatHigh { // xfs/ext4, between
		t.Errorf("mail xfs/ext4 (between) shaded %v", c)
	}
	if c := corner(2, 2); c != heatNone {
		t.Errorf("mail btrfs/btrfs (not measured) shaded %v, want %v", c, heatNone)
	}

	md := read(t, filepath.Join(dir, "report.md"))
	for _, want := range []string{
		"## Measurement conditions",
		"Guests: TCG (QEMU's software emulation, no KVM), 1 vCPU, 512 MiB; one 1024 MiB virtio-blk disk, image format raw, cache=none, aio=native",
		"Host: kernel 6.18.0; 2 x AMD EPYC.",
		"Read the comparison with that in mind.",
		"## How the verdicts are made",
		"the control cell (ext4/xfs:mail) runs at the start, the middle and the end of every block",
		"exceeds that critical value and 5% (`-tolerance`)",
		"## Drift measured by the controls",
		"Control cell ext4/xfs:mail, 9 runs; reference (their geometric mean) 9.96 MB/s. The machine's speed relative to the reference ranged 0.957–1.023",
		"| 2 | middle | 2026-11-21 10:27:27 | 9.52 | 0.957 |",
		"## Stopped early: what is settled",
		"The runs stopped (interrupted): 1 run is missing, estimated 3m0s more",
		"- mail: ext4/xfs best (1.000), ext4/ext4 best (1.000), xfs/xfs worst (1.000), btrfs/ext4 worst (1.000)",
		"- fileserver: none settled (4 residual degrees of freedom",
		"| mail | 5 | ext4/xfs (1.00), ext4/ext4 (1.00) | xfs/xfs (1.00), btrfs/ext4 (1.00) | xfs/ext4 | 7.6% | 3 | 0 | 1 | 1 | 2.8 of 5 (4 pairs) | 4.0 of 5 (1 pair) |",
		"Conditions of every verdict: image raw, cache=none, host device loop, tcg guest, fio 90 s runs.",
		"![mail: fio throughput by guest/host pair](heatmap-mail.png)",
		"Run noise (pooled standard deviation of the log corrected throughput) 3.3% on 10 residual degrees of freedom; the smallest difference that can be called between two cells is 7.6%.",
		"| 1 | ext4/xfs | 3 | 100.42 (97.32–104.51) | 102.16 (99.59–102.36) | 134 | 10.0 | best | 1.000 | best (standout) | agree |",
		"| 3 | xfs/ext4 | 3 | 80.41 (77.84–83.88) | 80.55 (77.61–81.27) | 134 | 10.0 | not distinguishable | - | best | not distinguishable |",
		"## Comparison with the published table",
		"| workload | pair | published | site | site rank | throughput MB/s | write amplification | comparison |",
		"| mail | btrfs/ext4 | best (standout) | worst | 5/5 | 40.00 (38.65–40.55) | 1.25 | opposite |",
		"| mail | xfs/xfs | worst | worst | 4/5 | 39.05 (38.92–42.02) | 1.25 | agree |",
		"| fileserver | ext4/xfs | best | not distinguishable | 1/2 |",
		"| web | ext4/xfs | best | none | 1/1 | 9.89 (9.82–9.93) | 1.25 | unranked |",
		"- mail xfs/ext4: published best",
		"carry 4 site verdicts and 60 site figures",
		"1 run asked for is not in the state: rfa on ext4/xfs #1",
		"go run ./tests/kdb -size full",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	// Latency by stage and flush cost, per cell.
	for _, want := range []string{"| ext4/xfs | 0.200 | 0.020 | 0.100 | 0.400 | 0.050 | 0.300 |", "| ext4/xfs | 1.25 | 1.50 | 140 | 10.0 | 2.00 | 8.0 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks the row %q", want)
		}
	}

	page := read(t, filepath.Join(dir, "report.html"))
	for _, want := range []string{"<!DOCTYPE html>", `<img src="heatmap-mail.png"`, "<th>comparison</th>", "<td>opposite</td>", "<b>not distinguishable</b>", "<code>tests/workload/jobs</code>"} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(page, "**") {
		t.Error("report.html has unrendered ** markup")
	}

	var cells []cellJSON
	if err := json.Unmarshal([]byte(read(t, filepath.Join(dir, "cells.json"))), &cells); err != nil {
		t.Fatal(err)
	}
	if len(cells) != 8 || cells[0].Workload != workload.Web || cells[0].Status != StatusUnranked {
		t.Errorf("cells.json: %d cells, first %+v", len(cells), cells[0])
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFont(t *testing.T) {
	for r, g := range glyphs {
		for i, row := range g {
			if len(row) != glyphW || strings.Trim(row, ".#") != "" {
				t.Errorf("glyph %q row %d: %q", r, i, row)
			}
		}
	}
	if glyph('x') != glyphs['X'] || glyph('~') != glyphs['?'] || glyph('–') != glyphs['-'] {
		t.Error("glyph fallbacks")
	}
	if w := textWidth("AB", 2); w != 22 {
		t.Errorf("textWidth(AB, 2) = %d, want 22", w)
	}
	if s := fitText("SITE CONTESTED*", textWidth("SITE CONTES", 2), 2); textWidth(s, 2) > textWidth("SITE CONTES", 2) || !strings.HasSuffix(s, ".") {
		t.Errorf("fitText gave %q", s)
	}
}
