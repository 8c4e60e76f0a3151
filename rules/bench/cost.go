package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// costedRule is one rule's expression and its group.
type costedRule struct{ key, group, expr string }

// ruleCost waits out the warm-up and for every group to have evaluated,
// stops the server's scraping and rule evaluation, and then runs each
// rule's expression alone, o.samples times over, as of just before the stop.
// There every rule reads what its inputs last recorded, as it would at its
// own next evaluation (at its group's last evaluation, a group that ran
// just before the group it reads finds nothing). With the server otherwise idle, its CPU time over a query is
// that rule's cost, however many cores other work holds; the wall time
// (evalTotalTime) is printed beside it to show how far contention stretched
// it. The expression is counted (count(expr)) so that the server does not
// spend the measured time encoding 10,000 series into JSON; the count is
// printed as the series the rule records. The expressions of -queries are
// costed with the rules, each pass, as group "query".
func ruleCost(s *server, dir string, o options, ruleFiles, exprs []string) error {
	warmUp(o.warmup)
	groups, err := evaluatedGroups(s, o.warmup)
	if err != nil {
		return err
	}
	var rules []costedRule
	interval := map[string]float64{}
	for _, g := range groups {
		interval[g.Name] = g.Interval
		for i, r := range g.Rules {
			rules = append(rules, costedRule{ruleKey(g.Name, i, r.Name), g.Name, r.Query})
		}
	}
	// Before the stale markers the stop writes.
	at := time.Now().Add(-time.Second)
	// Whether the server kept up during the warm-up: a group that misses
	// iterations, or takes longer than its inputs' lookback, records gaps
	// that reset what the rules hold over time (the workload class's
	// settling), so the state costed below is not the steady one.
	health, behind, err := s.groupHealth()
	if err != nil {
		return err
	}
	for i, e := range exprs {
		rules = append(rules, costedRule{fmt.Sprintf("query/%02d %s", i, e), "query", e})
	}
	if err := s.idle(dir); err != nil {
		return err
	}
	fmt.Printf("# fspair rules cost %s: %d disks, rules %s, scrape %s, warm-up %s; then each rule alone as of the stop, median of %d runs\n",
		time.Now().UTC().Format(time.RFC3339), o.disks, strings.Join(relPaths(ruleFiles), " "), o.scrape, o.warmup, o.samples)
	// Each pass runs every rule once, so that a spell of load elsewhere
	// falls on one run of many rules rather than on every run of one.
	cpu, wall := map[string][]float64{}, map[string][]float64{}
	series := map[string]int{}
	var base []float64
	for pass := 0; pass < o.samples; pass++ {
		for i := 0; i < 5; i++ {
			c, err := s.queryCost("count(vector(1))", at)
			if err != nil {
				return err
			}
			base = append(base, c.cpu)
		}
		for _, r := range rules {
			c, err := s.queryCost("count("+r.expr+")", at)
			if err != nil {
				return fmt.Errorf("rule %s: %w", r.key, err)
			}
			cpu[r.key] = append(cpu[r.key], c.cpu)
			wall[r.key] = append(wall[r.key], c.wall)
			series[r.key] = c.series
		}
		fmt.Fprintf(os.Stderr, "costed every rule %d of %d times\n", pass+1, o.samples)
	}
	for _, l := range health {
		fmt.Println("#", l)
	}
	if behind {
		fmt.Println("# note: groups missed evaluations in the warm-up: the server did not keep up, its rules' inputs went stale between evaluations, " +
			"and what the rules hold over time (the workload class's settling) restarted; the state costed is not the steady one")
	}
	// The rules that read the class (the pairing, the fleet, the pairs'
	// alerts) read only settled ones: how many there are at the stop says
	// how far from the steady state (every disk settled) the run is.
	settled, err := s.queryCost(`count(domain_disk:fspair_workload_class:settled_ratio == 1)`, at)
	if err != nil {
		return err
	}
	classed, err := s.queryCost(`count(domain_disk:fspair_workload_class:info)`, at)
	if err != nil {
		return err
	}
	fmt.Printf("# at the stop %d of %d disks' workload classes had settled\n", settled.series, classed.series)
	fmt.Printf("# a trivial query (count(vector(1))) costs %.2f ms of CPU (median of %d): the HTTP round's share of each rule's figure\n", median(base)*1000, len(base))
	// The minimum beside the median: a Go garbage collection that a rule's
	// allocations trigger runs on while the next rules are costed, so
	// the extra time lands on whichever rule comes next; the least of the
	// runs is the rule's own work with the least of that in it.
	groupCPU, groupMin, groupWall := map[string]float64{}, map[string]float64{}, map[string]float64{}
	var order []string
	for _, r := range rules {
		if _, ok := groupCPU[r.group]; !ok {
			order = append(order, r.group)
		}
		c, m, w := median(cpu[r.key]), minOf(cpu[r.key]), median(wall[r.key])
		groupCPU[r.group] += c
		groupMin[r.group] += m
		groupWall[r.group] += w
		fmt.Printf("rule %-90s cpu %8.1f ms (min %8.1f)  wall %8.1f ms  %7d series\n", r.key, c*1000, m*1000, w*1000, series[r.key])
	}
	var totalCPU, totalMin, totalWall, perMinute float64
	for _, g := range order {
		if g == "query" {
			continue
		}
		iv := interval[g]
		if iv <= 0 {
			iv = o.eval.Seconds()
		}
		totalCPU += groupCPU[g]
		totalMin += groupMin[g]
		totalWall += groupWall[g]
		perMinute += groupCPU[g] * 60 / iv
		fmt.Printf("group %-24s every %4.0fs  cpu %9.1f ms (minima %9.1f)  wall %9.1f ms\n", g, iv, groupCPU[g]*1000, groupMin[g]*1000, groupWall[g]*1000)
	}
	fmt.Printf("total: cpu %.3f s (minima %.3f), wall %.3f s for one evaluation of every rule; cpu %.3f s per minute with each group at its interval\n",
		totalCPU, totalMin, totalWall, perMinute)
	if o.warmup < time.Hour {
		fmt.Println("note: warm-up shorter than 1h: the long-window rules read less history than in steady state")
	}
	return nil
}

// evaluatedGroups waits, up to the warm-up again, until every group has
// evaluated at least once, and returns the groups.
func evaluatedGroups(s *server, wait time.Duration) ([]listedGroup, error) {
	deadline := time.Now().Add(wait)
	for {
		groups, err := s.listGroups()
		if err != nil {
			return nil, err
		}
		var pending []string
		for _, g := range groups {
			if g.LastEvaluation.IsZero() || g.LastEvaluation.Year() < 2000 {
				pending = append(pending, g.Name)
			}
		}
		if len(pending) == 0 {
			return groups, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("groups %s never evaluated in twice the warm-up: the machine is too busy for these disks", strings.Join(pending, ", "))
		}
		fmt.Fprintf(os.Stderr, "waiting for groups to evaluate: %s\n", strings.Join(pending, ", "))
		time.Sleep(15 * time.Second)
	}
}

// idle reloads the server with a configuration that scrapes nothing and
// loads no rules, and waits until its rule groups are gone. What was
// recorded stays queryable at the times it was recorded.
func (s *server) idle(dir string) error {
	cfg := "global:\n  scrape_interval: 1h\n  evaluation_interval: 1h\n"
	if err := os.WriteFile(filepath.Join(dir, s.name, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("write idle config: %w", err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload %s: %w", s.name, err)
	}
	for i := 0; i < 120; i++ {
		if g, err := s.listGroups(); err == nil && len(g) == 0 {
			// Removed groups and targets write their stale markers now.
			time.Sleep(5 * time.Second)
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("%s still evaluates rules 60s after the reload; see its prometheus.log", s.name)
}

// cost is what one query took: the server's CPU and the engine's wall
// time, in seconds, and the value of its count.
type cost struct {
	cpu, wall float64
	series    int
}

// queryCost runs expr as of t on s, an instant query whose result is a count.
func (s *server) queryCost(expr string, t time.Time) (cost, error) {
	c0, err := s.cpuNanos()
	if err != nil {
		return cost{}, err
	}
	resp, err := http.PostForm(s.url+"/api/v1/query", url.Values{
		"query": {expr}, "stats": {"all"}, "time": {strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)},
	})
	if err != nil {
		return cost{}, fmt.Errorf("query: %w", err)
	}
	var r queryAnswer
	err = json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	c1, cerr := s.cpuNanos()
	if err != nil {
		return cost{}, fmt.Errorf("decode query answer: %w", err)
	}
	if cerr != nil {
		return cost{}, cerr
	}
	if r.Status != "success" {
		return cost{}, fmt.Errorf("query %s: %s", expr, r.Error)
	}
	c := cost{cpu: float64(c1-c0) / 1e9, wall: r.Data.Stats.Timings.EvalTotalTime}
	if len(r.Data.Result) == 1 {
		var sample struct {
			Value [2]json.RawMessage `json:"value"`
		}
		var v string
		if err := json.Unmarshal(r.Data.Result[0], &sample); err != nil {
			return cost{}, fmt.Errorf("read count: %w", err)
		}
		if err := json.Unmarshal(sample.Value[1], &v); err != nil {
			return cost{}, fmt.Errorf("read count: %w", err)
		}
		c.series, _ = strconv.Atoi(v)
	}
	return c, nil
}

// cpuNanos is the CPU time the server's threads have run, in nanoseconds
// (/proc/<pid>/task/*/schedstat, first field): finer than the stat file's
// 10 ms ticks, which are as long as a cheap rule.
func (s *server) cpuNanos() (int64, error) {
	return processCPUNanos(s.cmd.Process.Pid)
}

func processCPUNanos(pid int) (int64, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("read cpu of process %d: no /proc/%d/task/*/schedstat (%v)", pid, pid, err)
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			// A thread that ended between the glob and the read.
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", t, err)
		}
		sum += n
	}
	return sum, nil
}

// groupHealth reads, from the server's own metrics, each rule group's
// evaluations, missed evaluations and last duration, one line a group,
// and whether any group missed an evaluation.
func (s *server) groupHealth() ([]string, bool, error) {
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		return nil, false, fmt.Errorf("read %s's metrics: %w", s.name, err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, false, fmt.Errorf("read %s's metrics: %w", s.name, err)
	}
	value := func(m *dto.Metric) float64 {
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
		return m.GetUntyped().GetValue()
	}
	type health struct{ iterations, missed, last float64 }
	groups := map[string]*health{}
	for name, set := range map[string]func(*health, float64){
		"prometheus_rule_group_iterations_total":        func(h *health, v float64) { h.iterations = v },
		"prometheus_rule_group_iterations_missed_total": func(h *health, v float64) { h.missed = v },
		"prometheus_rule_group_last_duration_seconds":   func(h *health, v float64) { h.last = v },
	} {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "rule_group" {
					continue
				}
				// The group label is file;name: the name alone, as the report names groups.
				g := l.GetValue()[strings.LastIndexByte(l.GetValue(), ';')+1:]
				if groups[g] == nil {
					groups[g] = &health{}
				}
				set(groups[g], value(m))
			}
		}
	}
	order := make([]string, 0, len(groups))
	for g := range groups {
		order = append(order, g)
	}
	sort.Strings(order)
	out := make([]string, 0, len(order)+1)
	behind := false
	for _, g := range order {
		h := groups[g]
		behind = behind || h.missed > 0
		out = append(out, fmt.Sprintf("warm-up: group %-24s %4.0f evaluations, %4.0f missed, last took %7.1f s", g, h.iterations, h.missed, h.last))
	}
	// The head's size and the heap: what every query walks and what each
	// garbage collection marks, to tell two servers' states apart.
	server := map[string]string{}
	for _, name := range []string{"prometheus_tsdb_head_series", "prometheus_tsdb_head_series_created_total", "prometheus_tsdb_head_chunks", "go_memstats_heap_inuse_bytes"} {
		if ms := fams[name].GetMetric(); len(ms) == 1 {
			server[name] = strconv.FormatFloat(value(ms[0]), 'g', -1, 64)
		}
	}
	if len(server) > 0 {
		out = append(out, fmt.Sprintf("server: head series %s (created %s), head chunks %s, heap in use %s bytes",
			server["prometheus_tsdb_head_series"], server["prometheus_tsdb_head_series_created_total"],
			server["prometheus_tsdb_head_chunks"], server["go_memstats_heap_inuse_bytes"]))
	}
	return out, behind, nil
}
