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
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// costedRule is one rule's expression and its group, and for a recording
// rule the selector of the series it records.
type costedRule struct{ key, group, expr, output string }

// ruleCost waits out the warm-up and for every group to have evaluated,
// counts the series each recording rule holds as of just before the stop,
// stops the server and starts another on its data that scrapes nothing and
// evaluates nothing, and there runs each rule's expression alone, o.samples
// times over, as of that time. Every rule reads what its inputs last
// recorded, as it would at its own next evaluation (at its group's last
// evaluation, a group that ran just before the group it reads finds
// nothing). With the server otherwise idle, its CPU time over a query is
// that rule's cost, however many cores other work holds; the wall time
// (evalTotalTime) is printed beside it to show how far contention stretched
// it. The expression is counted (count(expr)) so that the server does not
// spend the measured time encoding 10,000 series into JSON; the count is
// printed as the series the rule records, and checked against what the
// rule held live (checkOutputs). The expressions of -queries are costed
// with the rules, each pass, as group "query".
//
// Why a second server rather than reloading the first into an idle
// configuration: the reload stops the scrapes and the rule groups, and
// whatever the stopping server still writes lands in the state being
// costed. A shutdown writes no stale markers (Prometheus skips them when
// it stops), and the second server's head, replayed from the WAL, changes
// no more while it is costed.
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
			c := costedRule{key: ruleKey(g.Name, i, r.Name), group: g.Name, expr: r.Query}
			if r.Type == "recording" {
				c.output = outputSelector(r.Name, r.Labels)
			}
			rules = append(rules, c)
		}
	}
	at, live, err := completeState(s, rules, o.warmup)
	if err != nil {
		return err
	}
	// Whether the server kept up during the warm-up: a group that misses
	// iterations, or takes longer than its inputs' lookback, records gaps
	// that reset what the rules hold over time (the workload class's
	// settling), so the state costed below is not the steady one. A failed
	// scrape marks every scraped series stale at its time.
	health, behind, err := s.groupHealth()
	if err != nil {
		return err
	}
	scrapes, err := scrapeHealth(s, o.warmup, at)
	if err != nil {
		return err
	}
	for i, e := range exprs {
		rules = append(rules, costedRule{key: fmt.Sprintf("query/%02d %s", i, e), group: "query", expr: e})
	}
	fmt.Fprintf(os.Stderr, "stopping %s and starting a server on its data with no scrapes and no rules\n", s.name)
	s.stopWithin(2 * time.Minute)
	idle, err := launch(o.bin, dir, s.name, "global:\n  scrape_interval: 1h\n  evaluation_interval: 1h\n", o.extra, 20*time.Minute)
	if err != nil {
		return fmt.Errorf("start the costing server: %w", err)
	}
	defer idle.stop()
	fmt.Printf("# fspair rules cost %s: %d disks, rules %s, scrape %s, warm-up %s; then each rule alone as of the stop, median of %d runs, on a server restarted on the data with no scrapes and no rules\n",
		time.Now().UTC().Format(time.RFC3339), o.disks, strings.Join(relPaths(ruleFiles), " "), o.scrape, o.warmup, o.samples)
	// Each pass runs every rule once, so that a spell of load elsewhere
	// falls on one run of many rules rather than on every run of one.
	cpu, wall := map[string][]float64{}, map[string][]float64{}
	series := map[string][]int{}
	var base []float64
	for pass := 0; pass < o.samples; pass++ {
		for i := 0; i < 5; i++ {
			c, err := idle.queryCost("count(vector(1))", at)
			if err != nil {
				return err
			}
			base = append(base, c.cpu)
		}
		for _, r := range rules {
			c, err := idle.queryCost("count("+r.expr+")", at)
			if err != nil {
				return fmt.Errorf("rule %s: %w", r.key, err)
			}
			cpu[r.key] = append(cpu[r.key], c.cpu)
			wall[r.key] = append(wall[r.key], c.wall)
			series[r.key] = append(series[r.key], c.series)
		}
		fmt.Fprintf(os.Stderr, "costed every rule %d of %d times\n", pass+1, o.samples)
	}
	for _, l := range health {
		fmt.Println("#", l)
	}
	fmt.Println("#", scrapes)
	if behind {
		fmt.Println("# note: groups missed evaluations in the warm-up: the server did not keep up, its rules' inputs went stale between evaluations, " +
			"and what the rules hold over time (the workload class's settling) restarted; the state costed is not the steady one")
	}
	// The rules that read the class (the pairing, the fleet, the pairs'
	// alerts) read only settled ones: how many there are at the stop says
	// how far from the steady state (every disk settled) the run is.
	settled, err := idle.queryCost(`count(domain_disk:fspair_workload_class:settled_ratio == 1)`, at)
	if err != nil {
		return err
	}
	classed, err := idle.queryCost(`count(domain_disk:fspair_workload_class:info)`, at)
	if err != nil {
		return err
	}
	fmt.Printf("# at the stop %d of %d disks' workload classes had settled\n", settled.series, classed.series)
	fmt.Printf("# a trivial query (count(vector(1))) costs %.2f ms of CPU (median of %d): the HTTP round's share of each rule's figure\n", median(base)*1000, len(base))
	checkLines, failed := checkOutputs(outputChecks(rules, live, series))
	for _, l := range checkLines {
		fmt.Println("#", l)
	}
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
		n := series[r.key]
		fmt.Printf("rule %-90s cpu %8.1f ms (min %8.1f)  wall %8.1f ms  %7d series\n", r.key, c*1000, m*1000, w*1000, n[len(n)-1])
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
	if failed > 0 {
		return fmt.Errorf("%d recorded outputs failed the check (the lines \"check:\" and \"live state:\" above): costed on inputs the costing server had not, or that the live server had lost; the totals understate the rules' cost", failed)
	}
	return nil
}

// outputSelector selects the series a recording rule named name with
// labels writes: rules of one name tell their series apart by their labels.
func outputSelector(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "{__name__=%q", name)
	for _, k := range keys {
		fmt.Fprintf(&b, ",%s=%q", k, labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// completeState picks the time to cost at: the first, from now on and for
// up to wait, at which no recorded output of the live server has lost more
// than half the series it had in the 5 minutes before, and returns it with
// the outputs' live counts then (or, after wait, the last ones, which the
// check then fails). A server that cannot keep up with the scrapes (10,000
// disks on one core: a scrape takes a minute and some exceed the scrape
// timeout) goes through spells in which a failed scrape has marked every
// scraped series stale until the next one lands, the rules that read them
// as instant vectors record nothing and Prometheus marks their outputs
// stale, and the rules that read those outputs follow; a costing as of such
// a time costs the rules on missing inputs.
func completeState(s *server, rules []costedRule, wait time.Duration) (time.Time, map[string]liveCount, error) {
	deadline := time.Now().Add(wait)
	for {
		at := time.Now().Add(-time.Second)
		live, err := liveOutputs(s, rules, at)
		if err != nil {
			return at, nil, err
		}
		var lost []string
		for sel, c := range live {
			if 2*c.at < c.recent {
				lost = append(lost, sel)
			}
		}
		if len(lost) == 0 || time.Now().After(deadline) {
			return at, live, nil
		}
		sort.Strings(lost)
		fmt.Fprintf(os.Stderr, "live state incomplete as of %s: %d recorded outputs lost more than half their series in the 5 minutes before (%s, ...); again in 30s\n",
			at.UTC().Format(time.TimeOnly), len(lost), lost[0])
		time.Sleep(30 * time.Second)
	}
}

// liveCount is a recorded output's series on the live server: as of the
// costing's time, and those with a sample in the 5 minutes before it
// (last_over_time passes over stale markers), which tells a live state
// that lost its series just before the stop.
type liveCount struct{ at, recent int }

// liveOutputs counts, on the server that evaluates the rules, the series
// each recording rule's output holds as of at.
func liveOutputs(s *server, rules []costedRule, at time.Time) (map[string]liveCount, error) {
	live := map[string]liveCount{}
	for _, r := range rules {
		if r.output == "" {
			continue
		}
		if _, ok := live[r.output]; ok {
			continue
		}
		c, err := s.queryCost("count("+r.output+")", at)
		if err != nil {
			return nil, fmt.Errorf("count the series of %s: %w", r.output, err)
		}
		recent, err := s.queryCost("count(last_over_time("+r.output+"[5m]))", at)
		if err != nil {
			return nil, fmt.Errorf("count the series of %s: %w", r.output, err)
		}
		live[r.output] = liveCount{c.series, recent.series}
	}
	return live, nil
}

// scrapeHealth says how many of the warm-up's scrapes failed and the
// slowest one, from the server's own up and scrape_duration_seconds.
func scrapeHealth(s *server, warmup time.Duration, at time.Time) (string, error) {
	w := model.Duration(warmup + time.Minute).String()
	var n [3]float64
	for i, e := range []string{`count_over_time(up{job="fspair"}[` + w + `])`, `sum_over_time(up{job="fspair"}[` + w + `])`,
		`max_over_time(scrape_duration_seconds{job="fspair"}[` + w + `])`} {
		v, err := s.queryValue(e, at)
		if err != nil {
			return "", err
		}
		n[i] = v
	}
	return fmt.Sprintf("warm-up: %.0f scrapes, %.0f failed (each marks every scraped series stale at its time), slowest %.1f s", n[0], n[0]-n[1], n[2]), nil
}

// outputCheck is one recorded output: the series the live server held as
// of the costing's time, and in each costing pass the sum of the series
// its rules' expressions returned.
type outputCheck struct {
	selector     string
	rules        []string
	live, recent int
	costed       []int
}

// outputChecks gathers, for every recorded output, its rules' counts per
// pass (series holds each rule's count, pass by pass).
func outputChecks(rules []costedRule, live map[string]liveCount, series map[string][]int) []outputCheck {
	index := map[string]int{}
	var out []outputCheck
	for _, r := range rules {
		if r.output == "" {
			continue
		}
		i, ok := index[r.output]
		if !ok {
			i = len(out)
			index[r.output] = i
			l := live[r.output]
			out = append(out, outputCheck{selector: r.output, live: l.at, recent: l.recent, costed: make([]int, len(series[r.key]))})
		}
		out[i].rules = append(out[i].rules, r.key)
		for p, n := range series[r.key] {
			out[i].costed[p] += n
		}
	}
	return out
}

// checkOutputs judges whether the costing read the state the live server
// had: an output's expressions must return, in every pass, what the live
// server held (a rule evaluated at its group's last evaluation and costed a
// little later can differ by its inputs' changes meanwhile). Two things
// fail the check: an output that lost more than half its live series in a
// pass (the costing read inputs that were gone), and one whose count
// changed from pass to pass (the costed state changed under the costing).
// A third fails it too: an output whose live series as of the stop are
// fewer than half of those it had in the 5 minutes before: the live state
// itself had lost them (stale markers, see completeState), and the
// costing, which reads that state, costs the rules reading it on less than
// the steady state. It returns the lines to print and how many outputs
// failed.
func checkOutputs(checks []outputCheck) ([]string, int) {
	var lines []string
	same, failed, stale := 0, 0, 0
	for _, c := range checks {
		if 2*c.live < c.recent {
			stale++
			lines = append(lines, fmt.Sprintf("live state: %s: %d series as of the stop, %d in the 5 minutes before: FAILED: the live server had marked them stale", c.selector, c.live, c.recent))
		}
		lo, hi := c.live, c.live
		if len(c.costed) > 0 {
			lo, hi = c.costed[0], c.costed[0]
		}
		for _, n := range c.costed {
			lo, hi = min(lo, n), max(hi, n)
		}
		var what string
		switch {
		case lo != hi:
			what = "FAILED: the count changed between passes"
		case c.live > 0 && 2*lo < c.live:
			what = "FAILED: lost the live series"
		case lo == c.live:
			same++
			continue
		default:
			what = "differs from the live series"
		}
		if strings.HasPrefix(what, "FAILED") {
			failed++
		}
		lines = append(lines, fmt.Sprintf("check: %s: live %d series, costed %v (%s) %s", c.selector, c.live, c.costed, strings.Join(c.rules, ", "), what))
	}
	verdict := "passed"
	if failed+stale > 0 {
		verdict = "FAILED"
	}
	return append([]string{fmt.Sprintf("check %s: %d recorded outputs, %d costed on what the live server held as of the stop in every pass, %d differ, %d failed; %d had lost more than half their series in the live server in the 5 minutes before the stop",
		verdict, len(checks), same, len(checks)-same, failed, stale)}, lines...), failed + stale
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

// cost is what one query took: the server's CPU and the engine's wall
// time, in seconds, and the value of its count (value, as a whole number
// series); 0 for an empty result.
type cost struct {
	cpu, wall, value float64
	series           int
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
		if c.value, err = strconv.ParseFloat(v, 64); err != nil {
			return cost{}, fmt.Errorf("read count: %w", err)
		}
		c.series = int(c.value)
	}
	return c, nil
}

// queryValue is the value of expr as of t on s, a query of one result; 0
// for none.
func (s *server) queryValue(expr string, t time.Time) (float64, error) {
	c, err := s.queryCost(expr, t)
	return c.value, err
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
