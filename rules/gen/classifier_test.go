package main

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fspair/fspair/rules/classifier"
)

// modelTests are the promtool tests of rules/tests/workload.yml that the
// classifier package is checked against, at 10m: the recording rules'
// scores, distances and features, rounded, and the label that tells the
// series of one disk apart.
var modelTests = map[string]string{
	"round(domain_disk:fspair_workload_score:ratio, 0.001)":     "class",
	"round(domain_disk:fspair_workload_distance:scaled, 0.001)": "class",
	"round(domain_disk:fspair_workload_feature:value, 0.001)":   "feature",
}

var (
	seriesRE = regexp.MustCompile(`^([a-z_]+)\{(.*)\}$`)
	labelRE  = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	valuesRE = regexp.MustCompile(`^\S+?\+(\d+(?:\.\d+)?)x\d+`)
)

// steadyDisks reads the input series of rules/tests/workload.yml and returns,
// per domain, the per-interval increment of the counters the classifier
// reads, from the first segment of each series (what a 5m window sees at
// 10m): requests by op, bytes read and durable writes.
func steadyDisks(t *testing.T) map[string]map[string]float64 {
	t.Helper()
	var f struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
				Values string `yaml:"values"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	loadYAML(t, "../tests/workload.yml", &f)
	disks := map[string]map[string]float64{}
	for _, s := range f.Tests[0].InputSeries {
		m := seriesRE.FindStringSubmatch(s.Series)
		if m == nil {
			t.Fatalf("series %q: cannot parse", s.Series)
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		v := valuesRE.FindStringSubmatch(s.Values)
		if v == nil {
			continue
		}
		inc, _ := strconv.ParseFloat(v[1], 64)
		d := disks[labels["domain"]]
		if d == nil {
			d = map[string]float64{}
			disks[labels["domain"]] = d
		}
		switch m[1] {
		case "fspair_disk_requests_total":
			d[labels["op"]] = inc
		case "fspair_disk_bytes_total":
			d["bytes_"+labels["op"]] = inc
		case "fspair_disk_sync_writes_total":
			d["sync"] += inc
		}
	}
	return disks
}

// TestClassifierMatchesRules checks that rules/classifier computes the scores
// the generated rules do: promtool checks the rules' scores of every disk of
// rules/tests/workload.yml against the test's expected samples, and this test
// checks the classifier package's scores of the same disks against the same
// samples. The lab's offline evaluation (tests/workload) uses the package, so
// what it reports is what the rules would have said.
func TestClassifierMatchesRules(t *testing.T) {
	th, err := LoadThresholds("../classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			Cases []struct {
				Expr    string `yaml:"expr"`
				Time    string `yaml:"eval_time"`
				Samples []struct {
					Labels string  `yaml:"labels"`
					Value  float64 `yaml:"value"`
				} `yaml:"exp_samples"`
			} `yaml:"promql_expr_test"`
		} `yaml:"tests"`
	}
	loadYAML(t, "../tests/workload.yml", &f)
	disks := steadyDisks(t)
	got := map[string]map[string]float64{} // expr -> domain/label value -> value
	for e := range modelTests {
		got[e] = map[string]float64{}
	}
	var lines []string
	put := func(expr, domain, key string, v float64) {
		v = math.Round(v*1000) / 1000
		got[expr][domain+"/"+key] = v
		lines = append(lines, fmt.Sprintf("%s %s %s %g", strings.Fields(strings.TrimPrefix(expr, "round("))[0], domain, key, v))
	}
	for _, name := range sortedKeys(disks) {
		d := disks[name]
		x := classifier.Inputs(d["read"], d["write"], d["bytes_read"], d["sync"])
		r := th.Model.Classify(x, (d["read"]+d["write"])/60)
		for c, s := range r.Scores {
			put("round(domain_disk:fspair_workload_score:ratio, 0.001)", name, c, s)
		}
		for f, v := range x {
			put("round(domain_disk:fspair_workload_feature:value, 0.001)", name, f, v)
		}
		for c, v := range r.Distances {
			if !math.IsNaN(v) {
				put("round(domain_disk:fspair_workload_distance:scaled, 0.001)", name, c, v)
			}
		}
	}
	for _, c := range f.Tests[0].Cases {
		key, ok := modelTests[c.Expr]
		if !ok || c.Time != "10m" {
			continue
		}
		for _, s := range c.Samples {
			var domain, k string
			for _, l := range labelRE.FindAllStringSubmatch(s.Labels, -1) {
				switch l[1] {
				case "domain":
					domain = l[2]
				case key:
					k = l[2]
				}
			}
			g, ok := got[c.Expr][domain+"/"+k]
			if !ok {
				t.Errorf("%s: %s has no such series", c.Expr, s.Labels)
				continue
			}
			if math.Abs(g-s.Value) > 1e-9 {
				t.Errorf("%s, disk %s %s %s: classifier package %g, the promtool test expects %g", c.Expr, domain, key, k, g, s.Value)
			}
			delete(got[c.Expr], domain+"/"+k)
		}
	}
	for e, left := range got {
		if len(left) > 0 {
			t.Errorf("%s at 10m: the promtool test lacks %d series: %v", e, len(left), sortedKeys(left))
		}
	}
	if t.Failed() || os.Getenv("FSPAIR_PRINT_SCORES") != "" {
		sort.Strings(lines)
		t.Logf("classifier package scores:\n%s", strings.Join(lines, "\n"))
	}
}
