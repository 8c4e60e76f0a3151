package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExpositionCoversRules checks that the synthetic exporter serves every
// exporter metric the generated rules select, so that the bench exercises
// every rule, and that each line is a well-formed sample.
func TestExpositionCoversRules(t *testing.T) {
	body := string(exposition(7, 600))
	sample := regexp.MustCompile(`^([a-zA-Z_][a-zA-Z0-9_]*)\{[^}]*\} -?[0-9.e+]+$`)
	served := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		m := sample.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("malformed exposition line %q", l)
		}
		served[m[1]]++
	}
	if served["fspair_disk_info"] != 7 {
		t.Errorf("fspair_disk_info: %d series for 7 disks", served["fspair_disk_info"])
	}
	files, err := filepath.Glob("../*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated rule files in rules/ (%v)", err)
	}
	raw := regexp.MustCompile(`[:a-zA-Z0-9_]*fspair_[a-z0-9_]+[:a-zA-Z0-9_]*`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range raw.FindAllString(string(b), -1) {
			if strings.Contains(name, ":") || strings.HasPrefix(name, "fspair_kdb_") {
				continue
			}
			n++
			// A histogram the rules read natively (histogram_sum(x)) is
			// served as its classic _sum and _count.
			if served[name] == 0 && served[name+"_sum"] > 0 && served[name+"_count"] > 0 {
				continue
			}
			if served[name] == 0 {
				t.Errorf("%s: the rules read %s, which the bench does not serve", filepath.Base(f), name)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no exporter metrics in the rule files")
	}
}

func TestMedian(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v, want 2", m)
	}
}

// TestGroupsApartByFile checks that groups of the same name in two rule
// files (the fleet's split) are reported apart, and a unique name as is.
func TestGroupsApartByFile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"status":"success","data":{"groups":[
 {"name":"fspair.guest","file":"/x/fleet/fspair-host.rules.yml","interval":60,"evaluationTime":0.5,"rules":[{"name":"a","health":"ok","evaluationTime":0.4}]},
 {"name":"fspair.guest","file":"/x/fleet/fspair-fleet.rules.yml","interval":60,"evaluationTime":0.2,"rules":[{"name":"b","health":"ok","evaluationTime":0.1}]},
 {"name":"fspair.fleet","file":"/x/fleet/fspair-fleet.rules.yml","interval":180,"evaluationTime":0.3,"rules":[]}]}}`)
	}))
	defer srv.Close()
	g, err := (&server{url: srv.URL}).groups()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"fspair.guest@fspair-host": 0.5, "fspair.guest@fspair-fleet": 0.2, "fspair.fleet": 0.3}
	if len(g.group) != len(want) {
		t.Errorf("groups %v, want %v", g.group, want)
	}
	for k, v := range want {
		if g.group[k] != v {
			t.Errorf("group %s: %v, want %v (all: %v)", k, g.group[k], v, g.group)
		}
	}
	if g.rule["fspair.guest@fspair-fleet/00 b"] != 0.1 || g.interval["fspair.fleet"] != 180 {
		t.Errorf("rules %v, intervals %v", g.rule, g.interval)
	}
}

// TestProcessCPUNanos checks the CPU time read from the threads' schedstat
// against the kernel's other account of it, getrusage, over 30 ms of work.
func TestProcessCPUNanos(t *testing.T) {
	rusage := func() time.Duration {
		var r syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
			t.Fatal(err)
		}
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	c0, err := processCPUNanos(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r0 := rusage()
	// Spin until 30 ms of CPU, not of wall time: a busy machine gives
	// this process a fraction of a core.
	for rusage()-r0 < 30*time.Millisecond {
	}
	r := rusage() - r0
	c1, err := processCPUNanos(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(c1 - c0); d < r/2 || d > 2*r+5*time.Millisecond {
		t.Errorf("schedstat read %s of CPU where getrusage read %s", d, r)
	}
}

// TestQueryCost checks what -cost sends for a rule (the expression at its
// group's last evaluation) and what it reads back: the count as the
// rule's series and the engine's evaluation time.
func TestQueryCost(t *testing.T) {
	var got url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got = r.Form
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1795885200.5,"10000"]}],
 "stats":{"timings":{"evalTotalTime":0.25}}}}`)
	}))
	defer srv.Close()
	self, _ := os.FindProcess(os.Getpid())
	s := &server{url: srv.URL, cmd: &exec.Cmd{Process: self}}
	at := time.Date(2026, 11, 28, 17, 0, 0, 500e6, time.UTC)
	c, err := s.queryCost(`count(domain_disk:x{op="read"})`, at)
	if err != nil {
		t.Fatal(err)
	}
	if got.Get("query") != `count(domain_disk:x{op="read"})` || got.Get("time") != "1795885200.500" {
		t.Errorf("sent query %q at %q", got.Get("query"), got.Get("time"))
	}
	if c.series != 10000 || c.wall != 0.25 || c.cpu < 0 {
		t.Errorf("cost %+v, want 10000 series and 0.25 s wall", c)
	}
}

// TestGroupHealth checks the warm-up report read from the server's own
// metrics: per group (named without its file) its evaluations, missed ones
// and last duration, the head's and heap's size, and that a missed
// evaluation marks the run as behind.
func TestGroupHealth(t *testing.T) {
	body := `# HELP prometheus_rule_group_iterations_total x
prometheus_rule_group_iterations_total{rule_group="/r/fspair.rules.yml;fspair.disk"} 9
prometheus_rule_group_iterations_missed_total{rule_group="/r/fspair.rules.yml;fspair.disk"} 5
prometheus_rule_group_last_duration_seconds{rule_group="/r/fspair.rules.yml;fspair.disk"} 235.4
prometheus_rule_group_iterations_total{rule_group="/r/fspair.rules.yml;fspair.kdb"} 10
prometheus_rule_group_iterations_missed_total{rule_group="/r/fspair.rules.yml;fspair.kdb"} 0
prometheus_rule_group_last_duration_seconds{rule_group="/r/fspair.rules.yml;fspair.kdb"} 0.4
prometheus_tsdb_head_series 123
prometheus_tsdb_head_series_created_total 130
prometheus_tsdb_head_chunks 456
go_memstats_heap_inuse_bytes 7.89e+06
`
	for _, c := range []struct {
		missed string
		behind bool
	}{{"5", true}, {"0", false}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, strings.Replace(body, "fspair.disk\"} 5", "fspair.disk\"} "+c.missed, 1))
		}))
		lines, behind, err := (&server{url: srv.URL}).groupHealth()
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"warm-up: group fspair.disk                 9 evaluations,    " + c.missed + " missed, last took   235.4 s",
			"warm-up: group fspair.kdb                 10 evaluations,    0 missed, last took     0.4 s",
			"server: head series 123 (created 130), head chunks 456, heap in use 7.89e+06 bytes",
		}
		if strings.Join(lines, "\n") != strings.Join(want, "\n") || behind != c.behind {
			t.Errorf("missed %s: got behind %v and\n%s\nwant behind %v and\n%s", c.missed, behind, strings.Join(lines, "\n"), c.behind, strings.Join(want, "\n"))
		}
	}
}

// TestOutputSelector checks that rules of one name are told apart by
// their labels, in a fixed order.
func TestOutputSelector(t *testing.T) {
	got := outputSelector("domain_disk:x:quantile5m", map[string]string{"quantile": "0.99", "layer": "guest"})
	if want := `{__name__="domain_disk:x:quantile5m",layer="guest",quantile="0.99"}`; got != want {
		t.Errorf("selector %s, want %s", got, want)
	}
	if got := outputSelector("a:b", nil); got != `{__name__="a:b"}` {
		t.Errorf("selector without labels %s", got)
	}
}

// TestCheckOutputs checks the costing's check against the live server:
// rules that record one output add up, an output the costing found
// matches, one that lost its series or whose count moved between passes
// fails, as does one the live server itself had marked stale, and one a
// little off or found only in the costing is reported without failing.
func TestCheckOutputs(t *testing.T) {
	rules := []costedRule{
		{key: "g/00 a", output: "a"},
		{key: "g/01 b", output: "b"},
		{key: "g/02 b", output: "b"},
		{key: "g/03 lost", output: "lost"},
		{key: "g/04 moved", output: "moved"},
		{key: "g/05 off", output: "off"},
		{key: "g/06 new", output: "new"},
		{key: "g/07 alert"},
	}
	live := map[string]liveCount{"a": {10000, 10000}, "b": {300, 300}, "lost": {10000, 10000}, "moved": {500, 500}, "off": {100, 100}, "new": {0, 7}}
	series := map[string][]int{
		"g/00 a": {10000, 10000}, "g/01 b": {100, 100}, "g/02 b": {200, 200},
		"g/03 lost": {0, 0}, "g/04 moved": {500, 0}, "g/05 off": {90, 90}, "g/06 new": {7, 7}, "g/07 alert": {3, 3},
	}
	checks := outputChecks(rules, live, series)
	if len(checks) != 6 || checks[1].selector != "b" || checks[1].costed[0] != 300 || len(checks[1].rules) != 2 {
		t.Fatalf("checks %+v: want 6 outputs, b's two rules adding up to 300", checks)
	}
	lines, failed := checkOutputs(checks)
	if failed != 3 {
		t.Errorf("%d failed, want 3 (lost, moved, new's live state):\n%s", failed, strings.Join(lines, "\n"))
	}
	want := []string{
		"check FAILED: 6 recorded outputs, 2 costed on what the live server held as of the stop in every pass, 4 differ, 2 failed; 1 had lost more than half their series in the live server in the 5 minutes before the stop",
		"check: lost: live 10000 series, costed [0 0] (g/03 lost) FAILED: lost the live series",
		"check: moved: live 500 series, costed [500 0] (g/04 moved) FAILED: the count changed between passes",
		"check: off: live 100 series, costed [90 90] (g/05 off) differs from the live series",
		"live state: new: 0 series as of the stop, 7 in the 5 minutes before: FAILED: the live server had marked them stale",
		"check: new: live 0 series, costed [7 7] (g/06 new) differs from the live series",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	lines, failed = checkOutputs(checks[:2])
	if failed != 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "check passed: 2 recorded outputs, 2 costed") {
		t.Errorf("matching outputs: %d failed, lines %q", failed, lines)
	}
}

// TestScrapeHealth checks the warm-up's scrape account: failed scrapes are
// the scrapes less those that succeeded, read as of the costing's time.
func TestScrapeHealth(t *testing.T) {
	var times []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		times = append(times, r.Form.Get("time"))
		v := map[string]string{"count_over_time": "44", "sum_over_time": "41", "max_over_time": "12.25"}[strings.SplitN(r.Form.Get("query"), "(", 2)[0]]
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1795885200.5,%q]}]}}`, v)
	}))
	defer srv.Close()
	self, _ := os.FindProcess(os.Getpid())
	got, err := scrapeHealth(&server{url: srv.URL, cmd: &exec.Cmd{Process: self}}, 10*time.Minute, time.Unix(1795885200, 0))
	if err != nil {
		t.Fatal(err)
	}
	if want := "warm-up: 44 scrapes, 3 failed (each marks every scraped series stale at its time), slowest 12.2 s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if len(times) != 3 || times[0] != "1795885200.000" {
		t.Errorf("queried at %q, want 3 queries at 1795885200.000", times)
	}
}
