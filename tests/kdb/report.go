package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

// Report is everything the report shows.
type Report struct {
	Generated time.Time
	Command   string // how the runs were made (the invocation)
	StateDir  string
	Settings  Settings
	Env       []Env // distinct conditions of the runs
	Cells     []Cell
	Ranked    map[workload.Workload][]Ranked
	Assessed  map[workload.Workload]Assessment
	Drift     *Drift       // nil: no control runs
	Halves    *HalvesCheck // nil: fewer than four blocks
	Pub       *Published
	Cmp       []Comparison
	Tolerance float64
	SitePath  string
	Site      []SiteEntry
	Check     *SiteCheck // nil when the site file was not checked
	Missing   []string   // runs asked for that the state does not hold
	Failures  []string   // errors of this invocation
	// Stopped says why the runs stopped before the matrix was complete
	// (interrupted, -budget); Remaining estimates the missing runs' time.
	Stopped   string
	Remaining time.Duration
}

// Report files.
const (
	reportMarkdown = "report.md"
	reportHTML     = "report.html"
	reportCells    = "cells.json"
)

// heatmapFile is the heatmap image of w.
func heatmapFile(w workload.Workload) string { return "heatmap-" + string(w) + ".png" }

// WriteReport writes report.md, report.html, cells.json and one heatmap
// per measured workload into dir, and returns their paths.
func WriteReport(dir string, r *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write report: %w", err)
	}
	var files []string
	sub := fmt.Sprintf("%s, cache=%s, fio %g s per run; drift-corrected geometric mean of the repeats; %s",
		r.Settings.Format, r.Settings.Cache, r.Settings.RuntimeSeconds, accelPhrase(r.Env))
	for _, w := range workload.Workloads {
		if len(r.Ranked[w]) == 0 {
			continue
		}
		p := filepath.Join(dir, heatmapFile(w))
		if err := writePNG(p, Heatmap(w, r.Ranked[w], r.Pub, strings.ToUpper(sub))); err != nil {
			return nil, err
		}
		files = append(files, p)
	}
	d := r.doc()
	for name, body := range map[string]string{
		reportMarkdown: d.markdown(),
		reportHTML:     d.htmlPage("fspair pair lab: site knowledge base"),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return nil, fmt.Errorf("write report: %w", err)
		}
		files = append(files, p)
	}
	b, err := json.MarshalIndent(r.cellsJSON(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("write report: %w", err)
	}
	p := filepath.Join(dir, reportCells)
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("write report: %w", err)
	}
	files = append(files, p)
	slices.Sort(files)
	return files, nil
}

// cellJSON is one cell in cells.json: the summary, without the scrapes.
type cellJSON struct {
	Workload workload.Workload `json:"workload"`
	Pair     string            `json:"pair"`
	Runs     int               `json:"runs"`
	Rank     int               `json:"rank,omitempty"`
	Of       int               `json:"of,omitempty"`
	Verdict  string            `json:"verdict,omitempty"`
	Standout bool              `json:"standout,omitempty"`
	// Confidence of a best or worst verdict; the corrected throughput and
	// its interval (verdict.go).
	Confidence float64 `json:"confidence,omitempty"`
	Corrected  *struct {
		Estimate float64 `json:"estimate"`
		Low      float64 `json:"low,omitempty"`
		High     float64 `json:"high,omitempty"`
	} `json:"throughput_corrected_bytes_per_second,omitempty"`
	Conditions string          `json:"conditions,omitempty"`
	Published  string          `json:"published,omitempty"`
	Status     string          `json:"status,omitempty"`
	Stats      map[string]Stat `json:"stats"`
}

func (r *Report) cellsJSON() []cellJSON {
	var out []cellJSON
	for _, c := range r.Cells {
		cj := cellJSON{Workload: c.Workload, Pair: c.Pair, Runs: len(c.Runs), Stats: c.Stats}
		if cmp, ok := r.comparison(c.Workload, c.Pair); ok {
			cj.Rank, cj.Of, cj.Verdict, cj.Standout = cmp.Site.Rank, cmp.Site.Of, cmp.Site.Verdict, cmp.Site.Standout
			cj.Published, cj.Status, cj.Confidence = cmp.Pub.Verdict, cmp.Status, cmp.Site.Confidence
			cj.Conditions = conditions(r.Settings, r.Env)
			if x := cmp.Site; !math.IsNaN(x.Estimate) {
				cj.Corrected = &struct {
					Estimate float64 `json:"estimate"`
					Low      float64 `json:"low,omitempty"`
					High     float64 `json:"high,omitempty"`
				}{Estimate: x.Estimate}
				if !math.IsNaN(x.Low) {
					cj.Corrected.Low, cj.Corrected.High = x.Low, x.High
				}
			}
		}
		out = append(out, cj)
	}
	return out
}

func (r *Report) comparison(w workload.Workload, pair string) (Comparison, bool) {
	for _, c := range r.Cmp {
		if c.Workload == w && c.Site.Pair == pair {
			return c, true
		}
	}
	return Comparison{}, false
}

func (r *Report) cell(w workload.Workload, pair string) *Cell {
	for i := range r.Cells {
		if r.Cells[i].Workload == w && r.Cells[i].Pair == pair {
			return &r.Cells[i]
		}
	}
	return nil
}

// accelPhrase names the guests' accelerator.
func accelPhrase(env []Env) string {
	var acc []string
	for _, e := range env {
		if e.Accel != "" && !slices.Contains(acc, e.Accel) {
			acc = append(acc, e.Accel)
		}
	}
	if len(acc) == 0 {
		return "TCG guest"
	}
	return strings.ToUpper(strings.Join(acc, "+")) + " guest"
}

// accelText describes the guests' accelerator for the conditions.
func accelText(env []Env) string {
	a := strings.TrimSuffix(accelPhrase(env), " guest")
	if a == "TCG" {
		return "TCG (QEMU's software emulation, no KVM)"
	}
	return a
}

// distinct returns the distinct values f takes over env, in order.
func distinct(env []Env, f func(Env) string) string {
	var out []string
	for _, e := range env {
		if v := f(e); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return "unknown"
	}
	return strings.Join(out, "; ")
}

// statText prints a figure's median and its min-max over the repeats.
func statText(c *Cell, name string) string {
	if c == nil {
		return "-"
	}
	s, ok := c.Stats[name]
	if !ok {
		return "-"
	}
	d := metric(name)
	if s.N == 1 || s.Min == s.Max {
		return d.format(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", d.format(s.Median), d.format(s.Min), d.format(s.Max))
}

func verdictText(v string, standout bool) string {
	switch v {
	case "":
		return "none"
	case VerdictNotDistinguishable:
		return "not distinguishable"
	}
	if standout {
		return v + " (standout)"
	}
	return v
}

func (r *Report) doc() doc {
	d := doc{heading{1, "Pair lab: this site's knowledge base"}}
	var first, last time.Time
	for _, c := range r.Cells {
		for _, run := range c.Runs {
			if first.IsZero() || run.Start.Before(first) {
				first = run.Start
			}
			if run.End.After(last) {
				last = run.End
			}
		}
	}
	nRuns := 0
	for _, c := range r.Cells {
		nRuns += len(c.Runs)
	}
	d = append(d, para(fmt.Sprintf("The four workloads of the knowledge base (`tests/workload/jobs`: web, mail, fileserver, rfa) run in lab guests on guest/host file-system pairs while `fspair_exporter` measures the image file and the host device under it. Each pair is ranked per workload by fio's throughput, the site's best and worst pairs derived from the ranking are written as a site knowledge-base file for `rules/gen`, and they are set beside the published table (`%s`). Generated %s from %d runs in %d cells (state `%s`).",
		relPath(r.Pub.Path), r.Generated.UTC().Format("2006-01-02 15:04 UTC"), nRuns, len(r.Cells), r.StateDir)))

	d = append(d, heading{2, "Measurement conditions"})
	e := Env{}
	if len(r.Env) > 0 {
		e = r.Env[0]
	}
	aio := "native"
	if r.Settings.Cache != "none" && r.Settings.Cache != "directsync" {
		aio = "threads"
	}
	d = append(d, items{
		fmt.Sprintf("Guests: %s, %d vCPU, %d MiB; one %d MiB virtio-blk disk, image format %s, cache=%s, aio=%s; one guest at a time.",
			accelText(r.Env), e.GuestCPUs, e.GuestMemMiB, e.ImageMiB, r.Settings.Format, r.Settings.Cache, aio),
		"Host file systems: " + distinct(r.Env, func(e Env) string { return e.HostStorage }) + ".",
		fmt.Sprintf("Host: kernel %s; %s.", distinct(r.Env, func(e Env) string { return e.HostKernel }),
			distinct(r.Env, func(e Env) string { return fmt.Sprintf("%d x %s", e.HostCPUs, e.HostCPU) })),
		fmt.Sprintf("QEMU: %s. Guest kernel: %s. fio in the guest: %s.", distinct(r.Env, func(e Env) string { return e.QEMU }),
			distinct(r.Env, func(e Env) string { return e.GuestKernel }), r.fioVersions()),
		fmt.Sprintf("Runs: %s to %s; fio %g s per run; the exporter scraped every %g s and the window figures (write amplification, latencies, flush cost) cover the scrapes from %g s after fio started to the end of its run; the throughput is fio's over its whole run.",
			first.UTC().Format("2006-01-02 15:04"), last.UTC().Format("2006-01-02 15:04 UTC"), r.Settings.RuntimeSeconds, r.Settings.IntervalSeconds, r.Settings.WarmupSeconds),
		"Workloads: fio models of Filebench's webserver, varmail, fileserver and randomfileaccess, scaled down for a small guest; each job file lists where it departs from Filebench (`tests/workload/FEATURES.md`). Each run lays its files out afresh, writes everything back and drops the guest's caches first.",
	})
	if caveat := r.caveat(); caveat != "" {
		d = append(d, para(caveat))
	}

	d = append(d, heading{2, "How the verdicts are made"})
	d = append(d, para(fmt.Sprintf("**Run order.** The runs were made in randomized blocks: each block holds every cell (pair x workload) once, the pairs in a new random order drawn from the recorded seed (%d) and the block's number, each pair's workloads back to back in one guest; the control cell (%s) runs at the start, the middle and the end of every block (`tests/kdb/schedule.go`).", r.Settings.Seed, orText(r.Settings.Control, "none"))))
	d = append(d, para("**Drift correction.** The controls sample the machine's speed, taken as one factor common to every run (fio in a TCG guest follows the lab machine's CPU). The factor at a time is the controls' throughput interpolated linearly in log space between the control runs around it, over the controls' geometric mean; each run's throughput is divided by the factor at its middle before any comparison (`tests/kdb/drift.go`). Latencies and write amplification are shown as measured."))
	d = append(d, para(fmt.Sprintf("**Confidence.** A cell's figure is the geometric mean of its corrected runs, with a %.0f%% percentile interval from a bootstrap (%d replicates, seeded) that draws each cell's runs' deviations from a pool of every run's deviation from its cell's mean in the workload (two or three runs per cell say too little about their own spread; a rank test on three runs per cell cannot reach p < 0.05). All pairwise comparisons of a workload share one critical value, the %.0f%% quantile of the largest standardized difference error over all pairs of cells (a bootstrap studentized range), so that a best pair among nine is a statement about all its comparisons at once. One pair is faster than another when its corrected difference exceeds that critical value and %.0f%% (`-tolerance`). The best group is the fastest pair and every pair not slower than it, the worst group the slowest pair and every pair not faster than it; a group is called only when each of its pairs is faster (slower) than each pair outside it, and its confidence is the bootstrap share of replicates whose largest error is below the group's narrowest margin. Every other pair is **not distinguishable**, and so is every pair of a workload with no control runs, a pair with fewer than two runs, or fewer than %d residual degrees of freedom. **standout**: a called group of one pair, with three or more pairs measured. A workload with fewer than two pairs measured gets no verdicts (`tests/kdb/verdict.go`).",
		r.level()*100, Replicates, r.level()*100, r.Tolerance*100, MinResidualDF)))
	d = append(d, r.driftSection()...)
	d = append(d, r.halvesSection()...)
	if r.Stopped != "" || len(r.Missing) > 0 {
		d = append(d, r.stoppedSection()...)
	}
	d = append(d, r.summary()...)
	for _, w := range workload.Workloads {
		if len(r.Ranked[w]) == 0 {
			continue
		}
		d = append(d, r.workloadSection(w)...)
	}
	d = append(d, r.comparisonSection()...)
	d = append(d, r.siteSection()...)
	if len(r.Missing) > 0 || len(r.Failures) > 0 {
		d = append(d, heading{2, "Not measured"})
		var it items
		for _, f := range r.Failures {
			it = append(it, "failed: "+f)
		}
		if len(r.Missing) > 0 {
			it = append(it, fmt.Sprintf("%d %s asked for %s not in the state: %s. Rerun the same command to make them.",
				len(r.Missing), plural(len(r.Missing), "run", "runs"), plural(len(r.Missing), "is", "are"), strings.Join(r.Missing, ", ")))
		}
		d = append(d, it)
	}
	d = append(d, heading{2, "Reproduce"}, para("From the repository root, as root (the runs take the lab lock `/var/tmp/fspair-lab.lock` guest by guest; an interrupted run resumes where it stopped, in the same order):"), code(r.Command))
	return d
}

func (r *Report) fioVersions() string {
	var vs []string
	for _, c := range r.Cells {
		for _, run := range c.Runs {
			if v := run.Fio.Version; v != "" && !slices.Contains(vs, v) {
				vs = append(vs, v)
			}
		}
	}
	if len(vs) == 0 {
		return "unknown"
	}
	return strings.Join(vs, ", ")
}

// tcg reports whether any run's guest ran under TCG (an unknown
// accelerator counts: the lab has no other).
func (r *Report) tcg() bool {
	for _, e := range r.Env {
		if e.Accel == "" || e.Accel == "tcg" {
			return true
		}
	}
	return len(r.Env) == 0
}

// caveat says how far this lab's conditions are from the published
// study's (djordjevic2022 in shared/kdb/published-findings.yaml: KVM,
// CentOS 7, Filebench, one VM, write-back cache, hard disks).
func (r *Report) caveat() string {
	var parts []string
	if r.tcg() {
		parts = append(parts, "the guests run under TCG, so a guest's throughput is bounded by the emulated CPU running the guest file system's code and QEMU's emulation more than by the storage")
	}
	switch {
	case r.Settings.Storage == "loop" && (r.Settings.HostDevice == "" || r.Settings.HostDevice == HostDevLoop):
		// The lab attaches loop devices without --direct-io
		// (tests/lab/hostfs.go), so the loop driver reads and writes its
		// backing file through the page cache.
		parts = append(parts, "the host file systems sit on loop devices over a file on the lab machine's disk, through that machine's page cache, which absorbs much of what a hard disk makes slow (seeks, rotational latency, the cost of a cache flush)")
	case r.Settings.Storage == "loop":
		parts = append(parts, fmt.Sprintf("the host file systems sit on loop devices whose writes and flushes reach the lab machine's own disk (-hostdev %s), which has flush costs but is not a hard disk: it has no seeks or rotational latency of its own", r.Settings.HostDevice))
	}
	if len(parts) == 0 {
		return ""
	}
	return "**Read the comparison with that in mind.** The published study measured Filebench on hard disks under KVM guests with write-back caching. Here " +
		strings.Join(parts, ", and ") + ". Differences that come from CPU work (checksums, copy-on-write bookkeeping, journal handling) can show here; differences that come from seek patterns and flush cost on rotating media mostly cannot. Agreement or disagreement with the published table is evidence about this lab, not a test of the study."
}

func (r *Report) summary() doc {
	t := table{
		head:  []string{"workload", "pairs ranked", "site best", "site worst", "not distinguishable", "minimum detectable difference", "agree", "differ", "opposite", "not distinguishable from published", "mean site rank of published best", "mean site rank of published worst"},
		right: []bool{false, true, false, false, false, true, true, true, true, true, true, true},
	}
	for _, w := range workload.Workloads {
		rs := r.Ranked[w]
		if len(rs) == 0 {
			continue
		}
		var best, worst, cont []string
		for _, x := range rs {
			switch x.Verdict {
			case VerdictBest:
				best = append(best, fmt.Sprintf("%s%s (%.2f)", x.Pair, star(x.Standout), x.Confidence))
			case VerdictWorst:
				worst = append(worst, fmt.Sprintf("%s%s (%.2f)", x.Pair, star(x.Standout), x.Confidence))
			case VerdictNotDistinguishable:
				cont = append(cont, x.Pair)
			}
		}
		count := map[string]int{}
		for _, c := range r.Cmp {
			if c.Workload == w {
				count[c.Status]++
			}
		}
		mr := func(v string) string {
			m, n := meanRank(r.Cmp, w, v)
			if n == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f of %d (%d %s)", m, len(rs), n, plural(n, "pair", "pairs"))
		}
		a := r.Assessed[w]
		mdd := "-"
		if a.Reason == "" && a.MDD > 0 {
			mdd = fmt.Sprintf("%.1f%%", a.MDD*100)
		}
		if a.Reason != "" && len(rs) >= 2 {
			cont = []string{"all: " + a.Reason}
		}
		t.rows = append(t.rows, []string{string(w), fmt.Sprint(len(rs)), listOr(best), listOr(worst), listOr(cont), mdd,
			fmt.Sprint(count[StatusAgree]), fmt.Sprint(count[StatusDiffer]), fmt.Sprint(count[StatusOpposite]), fmt.Sprint(count[StatusUndecided]), mr(VerdictBest), mr(VerdictWorst)})
	}
	return doc{heading{2, "Summary"}, para(fmt.Sprintf("Confidence in brackets, standouts marked *. Conditions of every verdict: %s. The minimum detectable difference is the smallest difference between two cells with the median run count that could be called at all. The last two columns say whether the site's order leans the published way: with the published best pairs ranked near 1 and the worst near the number of pairs, it does.", conditions(r.Settings, r.Env))), t}
}

// level is the confidence level the verdicts were called at.
func (r *Report) level() float64 {
	for _, a := range r.Assessed {
		if a.Level > 0 {
			return a.Level
		}
	}
	return DefaultConfidence
}

// intervalText prints a cell's corrected throughput and its interval.
func intervalText(x Ranked) string {
	d := metric(MThroughputBytes)
	if math.IsNaN(x.Estimate) {
		return "-"
	}
	if math.IsNaN(x.Low) {
		return d.format(x.Estimate)
	}
	return fmt.Sprintf("%s (%s–%s)", d.format(x.Estimate), d.format(x.Low), d.format(x.High))
}

// driftSection shows what the control runs measured.
func (r *Report) driftSection() doc {
	d := doc{heading{2, "Drift measured by the controls"}}
	if r.Drift == nil {
		return append(d, para("No control runs: these runs were made before the randomized blocks (pair by pair), so the drift was not measured, nothing is corrected and no verdict is settled. Make the matrix again in a new state directory."))
	}
	lo, hi := r.Drift.Range()
	d = append(d, para(fmt.Sprintf("Control cell %s, %d runs; reference (their geometric mean) %s MB/s. The machine's speed relative to the reference ranged %.3f–%.3f (a spread of %.1f%%); every run's throughput was divided by the factor interpolated at its middle.",
		r.Drift.Cell, len(r.Drift.Points), metric(MThroughputBytes).format(r.Drift.Ref), lo, hi, (hi/lo-1)*100)))
	t := table{head: []string{"block", "position", "time (UTC)", "throughput MB/s", "factor"}, right: []bool{true, false, false, true, true}}
	for _, p := range r.Drift.Points {
		t.rows = append(t.rows, []string{fmt.Sprint(p.Block), p.Position, p.Time.UTC().Format("2006-01-02 15:04:05"),
			metric(MThroughputBytes).format(p.Throughput), fmt.Sprintf("%.3f", p.Factor)})
	}
	return append(d, t)
}

// halvesSection shows whether the two halves of the blocks agree.
func (r *Report) halvesSection() doc {
	h := r.Halves
	if h == nil {
		return nil
	}
	d := doc{heading{2, "The two halves"}}
	verdict := "They agree: no pair is called best in one half and worst in the other."
	if len(h.Conflicts) > 0 {
		verdict = fmt.Sprintf("**They disagree** on %d %s (best in one half, worst in the other): %s. The method's confidence does not hold on this machine; do not load these verdicts into the rules.",
			len(h.Conflicts), plural(len(h.Conflicts), "pair", "pairs"), strings.Join(h.Conflicts, ", "))
	}
	d = append(d, para(fmt.Sprintf("Blocks 1–%d and %d–%d, each with its own control runs, ranked on their own: %d and %d verdicts settled, %d alike in both halves. %s",
		h.Split, h.Split+1, h.Blocks, h.Settled[0], h.Settled[1], h.Agreeing, verdict)))
	t := table{head: []string{"workload", "pair", "whole run", "blocks 1–" + fmt.Sprint(h.Split), fmt.Sprintf("blocks %d–%d", h.Split+1, h.Blocks)}}
	for _, w := range workload.Workloads {
		first, second := map[string]Ranked{}, map[string]Ranked{}
		for _, x := range h.First[w] {
			first[x.Pair] = x
		}
		for _, x := range h.Second[w] {
			second[x.Pair] = x
		}
		for _, x := range r.Ranked[w] {
			f, s := first[x.Pair], second[x.Pair]
			t.rows = append(t.rows, []string{string(w), x.Pair, verdictText(x.Verdict, x.Standout), verdictText(f.Verdict, f.Standout), verdictText(s.Verdict, s.Standout)})
		}
	}
	return append(d, t)
}

// stoppedSection says what a stop before the end keeps.
func (r *Report) stoppedSection() doc {
	d := doc{heading{2, "Stopped early: what is settled"}}
	why := "The matrix is not complete"
	if r.Stopped != "" {
		why = "The runs stopped (" + r.Stopped + ")"
	}
	d = append(d, para(fmt.Sprintf("%s: %d %s missing, estimated %s more from the pace of the runs held. Rerun the same command to resume. The verdicts below are those the runs held already settle (best or worst with their confidence); the rest are not distinguishable yet, and more runs can settle them, or change a settled verdict only with the small probability its confidence leaves.",
		why, len(r.Missing), plural(len(r.Missing), "run is", "runs are"), r.Remaining)))
	var it items
	for _, w := range workload.Workloads {
		var calls []string
		for _, x := range r.Ranked[w] {
			if x.Verdict == VerdictBest || x.Verdict == VerdictWorst {
				calls = append(calls, fmt.Sprintf("%s %s%s (%.3f)", x.Pair, x.Verdict, star(x.Standout), x.Confidence))
			}
		}
		if len(r.Ranked[w]) == 0 {
			continue
		}
		if len(calls) == 0 {
			calls = []string{"none settled"}
			if a := r.Assessed[w]; a.Reason != "" {
				calls[0] += " (" + a.Reason + ")"
			}
		}
		it = append(it, string(w)+": "+strings.Join(calls, ", "))
	}
	return append(d, it)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func star(b bool) string {
	if b {
		return "*"
	}
	return ""
}

func listOr(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

func (r *Report) workloadSection(w workload.Workload) doc {
	rs := r.Ranked[w]
	d := doc{heading{2, "Workload " + string(w)}, figure{string(w) + ": fio throughput by guest/host pair", heatmapFile(w)}}
	a := r.Assessed[w]
	note := fmt.Sprintf("Ranked by the drift-corrected throughput (geometric mean of the repeats, with its %.0f%% bootstrap interval); the measured throughput and the other figures are the median (min–max) over the repeats. Throughput is fio's, from inside the guest. Conditions: %s.", a.Level*100, conditions(r.Settings, r.Env))
	if a.Reason != "" {
		note += " Nothing is settled for this workload: " + a.Reason + "."
	} else {
		note += fmt.Sprintf(" Run noise (pooled standard deviation of the log corrected throughput) %.1f%% on %d residual degrees of freedom; the smallest difference that can be called between two cells is %.1f%%.", a.Noise*100, a.DF, a.MDD*100)
	}
	d = append(d, para(note))
	t := table{
		head:  []string{"rank", "pair", "runs", "corrected MB/s (interval)", "measured MB/s", "ops/s", "syncs/s", "site verdict", "confidence", "published verdict", "comparison"},
		right: []bool{true, false, true, true, true, true, true, false, true, false, false},
	}
	for _, x := range rs {
		c := r.cell(w, x.Pair)
		cmp, _ := r.comparison(w, x.Pair)
		conf := "-"
		if x.Confidence > 0 {
			conf = fmt.Sprintf("%.3f", x.Confidence)
		}
		t.rows = append(t.rows, []string{fmt.Sprint(x.Rank), x.Pair, fmt.Sprint(len(c.Runs)), intervalText(x),
			statText(c, MThroughputBytes), statText(c, MThroughputOps), statText(c, MSyncs),
			verdictText(x.Verdict, x.Standout), conf, verdictText(cmp.Pub.Verdict, cmp.Pub.Standout), cmp.Status})
	}
	d = append(d, t)

	d = append(d, para("Write amplification and flush cost over the window: host device write bytes per image-file write byte (host file system and image format), image-file write bytes per byte fio wrote (guest file system), the mean flush the VMM waits for, and the host device bytes each flush causes."))
	t = table{head: []string{"pair", "write amplification (device/image)", "guest write amplification (image/fio)", "image requests/s", "flushes/s", "flush latency ms", "device KiB per flush"},
		right: []bool{false, true, true, true, true, true, true}}
	for _, x := range rs {
		c := r.cell(w, x.Pair)
		t.rows = append(t.rows, []string{x.Pair, statText(c, MWriteAmp), statText(c, MGuestWriteAmp), statText(c, MImageIOPS),
			statText(c, MFlushRate), statText(c, MFlushLatency), statText(c, MFlushBytes)})
	}
	d = append(d, t)

	d = append(d, para("Mean latency per request by stage (`fspair_disk_stage_seconds`), ms: `file` is the image-file request the VMM waits for, `host_queue` the host I/O scheduler, `device` the host device's service."))
	t = table{head: []string{"pair", "read: file", "read: host queue", "read: device", "write: file", "write: host queue", "write: device"},
		right: []bool{false, true, true, true, true, true, true}}
	for _, x := range rs {
		c := r.cell(w, x.Pair)
		t.rows = append(t.rows, []string{x.Pair, statText(c, MFileRead), statText(c, MQueueRead), statText(c, MDeviceRead),
			statText(c, MFileWrite), statText(c, MQueueWrite), statText(c, MDeviceWrite)})
	}
	return append(d, t)
}

func (r *Report) comparisonSection() doc {
	d := doc{heading{2, "Comparison with the published table"}}
	src := map[string]bool{}
	var cites []string
	for _, w := range workload.Workloads {
		if s := r.Pub.Source[w]; s != "" && !src[s] {
			src[s] = true
			cites = append(cites, fmt.Sprintf("%s: %s", s, strings.Join(strings.Fields(r.Pub.Sources[s]), " ")))
		}
	}
	d = append(d, para(fmt.Sprintf("Published verdicts from `%s` (a pair it does not list is between its groups). The published table has no figure per pair; the figures are the site's. **agree**: same verdict; **opposite**: best against worst; **differ**: any other difference (one side calls the pair best or worst and the other does not, or contested); **not distinguishable**: the site's runs cannot call the pair, so they neither confirm nor contradict the published verdict.", relPath(r.Pub.Path))))
	if len(cites) > 0 {
		d = append(d, items(cites))
	}
	t := table{head: []string{"workload", "pair", "published", "site", "site rank", "throughput MB/s", "write amplification", "comparison"},
		right: []bool{false, false, false, false, true, true, true, false}}
	var stays []string
	for _, c := range r.Cmp {
		cell := r.cell(c.Workload, c.Site.Pair)
		t.rows = append(t.rows, []string{string(c.Workload), c.Site.Pair, verdictText(c.Pub.Verdict, c.Pub.Standout),
			verdictText(c.Site.Verdict, c.Site.Standout), fmt.Sprintf("%d/%d", c.Site.Rank, c.Site.Of),
			statText(cell, MThroughputBytes), statText(cell, MWriteAmp), c.Status})
		if c.Site.Verdict == VerdictNotDistinguishable && c.Pub.Verdict != "" && c.Site.Of >= 2 {
			stays = append(stays, fmt.Sprintf("%s %s: published %s", c.Workload, c.Site.Pair, verdictText(c.Pub.Verdict, c.Pub.Standout)))
		}
	}
	d = append(d, t)
	if len(stays) > 0 {
		d = append(d, para("Not distinguishable here, so the published verdict stays in effect in the rules (rules/gen ignores not_distinguishable entries):"), items(stays))
	}
	return d
}

func (r *Report) siteSection() doc {
	d := doc{heading{2, "Site knowledge-base file"}}
	if r.SitePath == "" {
		return append(d, para("No site file was written."))
	}
	d = append(d, para(fmt.Sprintf("`%s` holds %d entries from these runs (one per measured pair: best or worst with its confidence, or not_distinguishable; each with its conditions), in the schema of `rules/kdb/site.yaml`. rules/gen replaces the published verdict for a workload and pair with a best or worst entry whose confidence is at least 0.95, with `source=\"site\"`, its date, and its figures as `fspair_kdb_site_measurement`; it ignores not_distinguishable entries and verdicts below 0.95, so the published verdict stays in effect for them.", relPath(r.SitePath), len(r.Site))))
	if r.Check != nil {
		d = append(d, para(fmt.Sprintf("Checked: `go run ./rules/gen` loaded it and `promtool check rules` accepted the rules generated from it, which carry %d site verdicts and %d site figures.", r.Check.SiteVerdicts, r.Check.SiteFigures)))
	}
	d = append(d, para("To make the rules use these verdicts, copy the entries into `rules/kdb/site.yaml` (or run with `-site rules/kdb/site.yaml`), regenerate with `make rules`, and add the new series to `rules/tests/kdb.yml` (the rules' tests list every knowledge-base series)."))
	return d
}

// relPath shows p relative to the working directory when it lies below it.
func relPath(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	rel, err := filepath.Rel(wd, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return rel
}
