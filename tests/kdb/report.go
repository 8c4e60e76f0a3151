package main

import (
	"encoding/json"
	"fmt"
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
	Pub       *Published
	Cmp       []Comparison
	Tolerance float64
	SitePath  string
	Site      []SiteEntry
	Check     *SiteCheck // nil when the site file was not checked
	Missing   []string   // runs asked for that the state does not hold
	Failures  []string   // errors of this invocation
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
	sub := fmt.Sprintf("%s, cache=%s, fio %g s per run; median of the repeats; %s",
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
	Workload  workload.Workload `json:"workload"`
	Pair      string            `json:"pair"`
	Runs      int               `json:"runs"`
	Rank      int               `json:"rank,omitempty"`
	Of        int               `json:"of,omitempty"`
	Verdict   string            `json:"verdict,omitempty"`
	Standout  bool              `json:"standout,omitempty"`
	Published string            `json:"published,omitempty"`
	Status    string            `json:"status,omitempty"`
	Stats     map[string]Stat   `json:"stats"`
}

func (r *Report) cellsJSON() []cellJSON {
	var out []cellJSON
	for _, c := range r.Cells {
		cj := cellJSON{Workload: c.Workload, Pair: c.Pair, Runs: len(c.Runs), Stats: c.Stats}
		if cmp, ok := r.comparison(c.Workload, c.Pair); ok {
			cj.Rank, cj.Of, cj.Verdict, cj.Standout = cmp.Site.Rank, cmp.Site.Of, cmp.Site.Verdict, cmp.Site.Standout
			cj.Published, cj.Status = cmp.Pub.Verdict, cmp.Status
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
	if v == "" {
		return "none"
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
	d = append(d, para(fmt.Sprintf("Per workload the pairs measured are ranked by the median, over the repeats, of fio's throughput (read plus write `bw_bytes`, summed over the job's processes). The published table names a group of best and a group of worst pairs per workload and singles out a few (standouts), without a figure per pair; the site's groups are what the measurement cannot tell apart from the fastest and from the slowest pair. Two pairs are near when their medians differ by at most %.0f%% or their repeats (min–max) overlap. **best**: the fastest pair and every pair near it. **worst**: the slowest pair and every pair near it. **contested**: a pair in both groups (the runs cannot separate the fastest from the slowest). **none**: between the groups; such a pair gets no site entry, so the published verdict on it stays in effect. **standout**: the fastest (slowest) pair when it is alone in its group and at least three pairs were ranked. A workload with fewer than two pairs measured gets no verdicts.", r.Tolerance*100)))

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
	d = append(d, heading{2, "Reproduce"}, para("From the repository root, as root (the runs take the lab lock `/var/tmp/fspair-lab.lock` pair by pair; an interrupted run resumes where it stopped):"), code(r.Command))
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
	if r.Settings.Storage == "loop" {
		// The lab attaches loop devices without --direct-io
		// (tests/lab/hostfs.go), so the loop driver reads and writes its
		// backing file through the page cache.
		parts = append(parts, "the host file systems sit on loop devices over a file on the lab machine's disk, through that machine's page cache, which absorbs much of what a hard disk makes slow (seeks, rotational latency, the cost of a cache flush)")
	}
	if len(parts) == 0 {
		return ""
	}
	return "**Read the comparison with that in mind.** The published study measured Filebench on hard disks under KVM guests with write-back caching. Here " +
		strings.Join(parts, ", and ") + ". Differences that come from CPU work (checksums, copy-on-write bookkeeping, journal handling) can show here; differences that come from seek patterns and flush cost on rotating media mostly cannot. Agreement or disagreement with the published table is evidence about this lab, not a test of the study."
}

func (r *Report) summary() doc {
	t := table{
		head:  []string{"workload", "pairs ranked", "site best", "site worst", "site contested", "agree", "differ", "opposite", "mean site rank of published best", "mean site rank of published worst"},
		right: []bool{false, true, false, false, false, true, true, true, true, true},
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
				best = append(best, x.Pair+star(x.Standout))
			case VerdictWorst:
				worst = append(worst, x.Pair+star(x.Standout))
			case VerdictContested:
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
		t.rows = append(t.rows, []string{string(w), fmt.Sprint(len(rs)), listOr(best), listOr(worst), listOr(cont),
			fmt.Sprint(count[StatusAgree]), fmt.Sprint(count[StatusDiffer]), fmt.Sprint(count[StatusOpposite]), mr(VerdictBest), mr(VerdictWorst)})
	}
	return doc{heading{2, "Summary"}, para("Standouts are marked *. The last two columns say whether the site's order leans the published way where the groups differ: with the published best pairs ranked near 1 and the worst near the number of pairs, it does."), t}
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
	d = append(d, para("Median (min–max) over the repeats. Throughput is fio's, from inside the guest."))
	t := table{
		head:  []string{"rank", "pair", "runs", "throughput MB/s", "ops/s", "syncs/s", "site verdict", "published verdict", "comparison"},
		right: []bool{true, false, true, true, true, true, false, false, false},
	}
	for _, x := range rs {
		c := r.cell(w, x.Pair)
		cmp, _ := r.comparison(w, x.Pair)
		t.rows = append(t.rows, []string{fmt.Sprint(x.Rank), x.Pair, fmt.Sprint(len(c.Runs)),
			statText(c, MThroughputBytes), statText(c, MThroughputOps), statText(c, MSyncs),
			verdictText(x.Verdict, x.Standout), verdictText(cmp.Pub.Verdict, cmp.Pub.Standout), cmp.Status})
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
	d = append(d, para(fmt.Sprintf("Published verdicts from `%s` (a pair it does not list is between its groups, as none is here). The published table has no figure per pair; the figures are the site's. **agree**: same verdict; **opposite**: best against worst; **differ**: any other difference (one side has a verdict the other lacks, or contested).", relPath(r.Pub.Path))))
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
		if c.Site.Verdict == "" && c.Pub.Verdict != "" && c.Site.Of >= 2 {
			stays = append(stays, fmt.Sprintf("%s %s: published %s", c.Workload, c.Site.Pair, verdictText(c.Pub.Verdict, c.Pub.Standout)))
		}
	}
	d = append(d, t)
	if len(stays) > 0 {
		d = append(d, para("Measured between the groups, so the site file has no entry for them and the published verdict stays in effect in the rules (the site file's schema has no \"neither\" verdict):"), items(stays))
	}
	return d
}

func (r *Report) siteSection() doc {
	d := doc{heading{2, "Site knowledge-base file"}}
	if r.SitePath == "" {
		return append(d, para("No site file was written."))
	}
	d = append(d, para(fmt.Sprintf("`%s` holds %d entries from these runs (best, worst and contested pairs), in the schema of `rules/kdb/site.yaml`; an entry for a workload and pair replaces the published verdict in the generated rules, with `source=\"site\"`, its date, and its figures as `fspair_kdb_site_measurement`.", relPath(r.SitePath), len(r.Site))))
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
