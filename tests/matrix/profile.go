package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

// The bench's profile: where the BPF time of each probe mode goes, per
// request. After the timed rounds, each fspair variant runs every workload
// once more with --probe.stats (the kernel's per-program run-time
// statistics, which add two clock reads to every program run, so never in
// the timed rounds), and the exporter's fspair_probe_runs_total and
// fspair_probe_run_seconds_total before and after each fio run give every
// program's runs and run time over fio's requests. The figures are the
// guest's TCG time: compare programs and modes with each other, not with a
// host's.

// programCost is one program's runs and run time over one fio run.
type programCost struct {
	Runs    float64
	Seconds float64
}

// profileRun is one workload under one variant with the statistics on.
type profileRun struct {
	Requests uint64                 // fio's requests in the run
	Programs map[string]programCost // by program, the ones that ran
}

// NsPerRequest is the BPF time of every program over the run's requests.
func (p profileRun) NsPerRequest() float64 {
	if p.Requests == 0 {
		return 0
	}
	var s float64
	for _, c := range p.Programs {
		s += c.Seconds
	}
	return s * 1e9 / float64(p.Requests)
}

// probeStats scrapes the per-program statistics of the exporter in the guest.
func (e *guestExporter) probeStats(ctx context.Context) (map[string]programCost, error) {
	out, err := e.g.VM.RunOK(ctx, fmt.Sprintf("wget -qO- %s | grep -E '^(fspair_probe_runs_total|fspair_probe_run_seconds_total|fspair_probe_stats_enabled)[{ ]'", metricsURL))
	if err != nil {
		return nil, fmt.Errorf("scrape the exporter's program statistics in the guest: %w", err)
	}
	return parseProbeStats([]byte(out))
}

// parseProbeStats reads fspair_probe_runs_total and
// fspair_probe_run_seconds_total by program; an exporter that says its
// statistics are off is an error, not a profile of zeros.
func parseProbeStats(text []byte) (map[string]programCost, error) {
	fams, err := workload.ParseMetrics(text)
	if err != nil {
		return nil, err
	}
	on := false
	workload.EachSeries(fams, "fspair_probe_stats_enabled", func(_ map[string]string, m *dto.Metric) { on = value(m) == 1 })
	if !on {
		return nil, fmt.Errorf("the exporter's program statistics are off (fspair_probe_stats_enabled is not 1)")
	}
	costs := map[string]programCost{}
	workload.EachSeries(fams, "fspair_probe_runs_total", func(l map[string]string, m *dto.Metric) {
		c := costs[l["program"]]
		c.Runs += value(m)
		costs[l["program"]] = c
	})
	workload.EachSeries(fams, "fspair_probe_run_seconds_total", func(l map[string]string, m *dto.Metric) {
		c := costs[l["program"]]
		c.Seconds += value(m)
		costs[l["program"]] = c
	})
	return costs, nil
}

// costDelta is after minus before, for the programs that ran in between.
func costDelta(before, after map[string]programCost) map[string]programCost {
	d := map[string]programCost{}
	for p, a := range after {
		b := before[p]
		if c := (programCost{a.Runs - b.Runs, a.Seconds - b.Seconds}); c.Runs > 0 {
			d[p] = c
		}
	}
	return d
}

// profileVariants runs the profile for every fspair variant of the bench.
func profileVariants(ctx context.Context, g *Guest, o BenchOptions, logf func(string, ...any)) (map[string]map[string]profileRun, error) {
	prof := map[string]map[string]profileRun{}
	workloads, err := selectWorkloads(benchWorkloads(o.Runtime), o.Workloads)
	if err != nil {
		return nil, err
	}
	for _, v := range o.Variants {
		if v == variantNone || v == variantLibbpf || v == variantPair {
			continue
		}
		exp, err := g.startExporter(ctx, guestPath(benchConfig), v, []string{benchFile}, 3*time.Minute, "--probe.stats")
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", v, err)
		}
		runs, err := profileWorkloads(ctx, g, exp, workloads)
		if _, serr := exp.stop(context.WithoutCancel(ctx)); err == nil && serr != nil {
			err = fmt.Errorf("stop: %w", serr)
		}
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", v, err)
		}
		prof[v] = runs
		for _, w := range workloads {
			logf("profile %-14s %-17s %.0f ns of BPF per request", v, w.Name, runs[w.Name].NsPerRequest())
		}
	}
	return prof, nil
}

// profileWorkloads runs each workload once with the exporter's statistics on.
func profileWorkloads(ctx context.Context, g *Guest, exp *guestExporter, workloads []benchWorkload) (map[string]profileRun, error) {
	runs := map[string]profileRun{}
	for _, w := range workloads {
		before, err := exp.probeStats(ctx)
		if err != nil {
			return nil, err
		}
		r, err := g.VM.Fio(ctx, lab.FioJob{Args: w.Args})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w.Name, err)
		}
		after, err := exp.probeStats(ctx)
		if err != nil {
			return nil, err
		}
		runs[w.Name] = profileRun{
			Requests: r.Jobs[0].Read.TotalIOs + r.Jobs[0].Write.TotalIOs,
			Programs: costDelta(before, after),
		}
	}
	return runs, nil
}

// profileText is the profile's part of the results file: per mode and
// workload the BPF time per request, then each program's share.
func (r *BenchResult) profileText() string {
	if len(r.Profile) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("\n## BPF time per request, by program (--probe.stats, one run per mode after the rounds)\n\n")
	w("| mode | workload | requests | BPF ns per request | programs: runs per request x ns per run |\n|---|---|---:|---:|---|\n")
	for _, v := range r.Options.Variants {
		runs, ok := r.Profile[v]
		if !ok {
			continue
		}
		workloads, _ := selectWorkloads(benchWorkloads(r.Options.Runtime), r.Options.Workloads)
		for _, wl := range workloads {
			p := runs[wl.Name]
			w("| %s | %s | %d | %.0f | %s |\n", v, wl.Name, p.Requests, p.NsPerRequest(), p.programsText())
		}
	}
	return b.String()
}

// programsText lists the programs that ran, the costliest per request first.
func (p profileRun) programsText() string {
	type row struct {
		name       string
		perRequest float64
		c          programCost
	}
	var rows []row
	for name, c := range p.Programs {
		per := 0.0
		if p.Requests > 0 {
			per = c.Seconds * 1e9 / float64(p.Requests)
		}
		rows = append(rows, row{name, per, c})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].perRequest != rows[j].perRequest {
			return rows[i].perRequest > rows[j].perRequest
		}
		return rows[i].name < rows[j].name
	})
	var parts []string
	for _, x := range rows {
		runsPer := 0.0
		if p.Requests > 0 {
			runsPer = x.c.Runs / float64(p.Requests)
		}
		parts = append(parts, fmt.Sprintf("%s %.2f x %.0f", x.name, runsPer, x.c.Seconds*1e9/x.c.Runs))
	}
	if len(parts) == 0 {
		return "(none ran)"
	}
	return strings.Join(parts, ", ")
}
