package main

import (
	"flag"
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
// scores, distances, nearest distance and features, rounded, and the label
// that tells the series of one disk apart (none: one series a disk).
var modelTests = map[string]string{
	"round(domain_disk:fspair_workload_score:ratio, 0.001)":         "class",
	"round(domain_disk:fspair_workload_distance:scaled, 0.001)":     "class",
	"round(domain_disk:fspair_workload_distance:min_scaled, 0.001)": "",
	"round(domain_disk:fspair_workload_feature:value, 0.001)":       "feature",
}

// nearest is the distance of a disk from its nearest class, what the
// min_scaled rule records; ok is false where the disk has no distances.
func nearest(dist map[string]float64) (d float64, ok bool) {
	d = math.Inf(1)
	for _, v := range dist {
		if !math.IsNaN(v) {
			d, ok = math.Min(d, v), true
		}
	}
	return d, ok
}

// updateWorkload rewrites the expected samples of modelTests (and the
// confidence) in rules/tests/workload.yml from the classifier package, for
// a model that changed; promtool then checks the rules against them. The
// classes the test expects stay as written.
var updateWorkload = flag.Bool("update-workload", false, "rewrite rules/tests/workload.yml's expected features, distances, nearest distances, scores and confidences from rules/classifier")

var (
	seriesRE = regexp.MustCompile(`^([a-z_]+)\{(.*)\}$`)
	labelRE  = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	valuesRE = regexp.MustCompile(`^\S+?\+(\d+(?:\.\d+)?)x\d+`)
)

// steadyDisks reads the input series of the rule test at path (that of
// rules/tests/workload.yml or one built from it) and returns,
// per domain, the per-interval increment of the counters the classifier
// reads, from the first segment of each series (what a 5m window sees at
// 10m): requests by op, bytes by op and durable writes; and per domain its
// guest file system (fspair_disk_info's guest_fs).
func steadyDisks(t *testing.T, path string) (map[string]map[string]float64, map[string]string) {
	t.Helper()
	var f struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
				Values string `yaml:"values"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	loadYAML(t, path, &f)
	disks := map[string]map[string]float64{}
	guestFS := map[string]string{}
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
		case "fspair_disk_info":
			guestFS[labels["domain"]] = labels["guest_fs"]
		case "fspair_disk_requests_total":
			d[labels["op"]] = inc
		case "fspair_disk_bytes_total":
			d["bytes_"+labels["op"]] = inc
		case "fspair_disk_sync_writes_total":
			d["sync"] += inc
		case "fspair_disk_random_requests_total":
			d["random_"+labels["op"]] = inc
		case "fspair_disk_sequential_requests_total":
			d["sequential_"+labels["op"]] = inc
		}
	}
	return disks, guestFS
}

// diskCounts are the classifier's counts of a disk of steadyDisks: the
// random writes are the writes at the random share of the writes the
// sequential rule classified, as the rules compute it.
func diskCounts(d map[string]float64) classifier.Counts {
	n := classifier.Counts{Reads: d["read"], Writes: d["write"], ReadBytes: d["bytes_read"],
		WriteBytes: d["bytes_write"], SyncWrites: d["sync"], Flushes: d["flush"]}
	if c := d["random_write"] + d["sequential_write"]; c > 0 {
		n.RandomWrites = n.Writes * d["random_write"] / c
	}
	return n
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
	disks, guestFS := steadyDisks(t, "../tests/workload.yml")
	// The fixture holds a disk that writes without reading, so that each
	// class's charge for a missing read size is checked, and one of a
	// guest file system the exporter could not tell, so that the classes'
	// own values are.
	writeOnly, noGuest := false, false
	for name, d := range disks {
		writeOnly = writeOnly || d["read"] == 0 && d["write"] > 0
		noGuest = noGuest || guestFS[name] == "" && d["read"]+d["write"] > 0
	}
	if !writeOnly || !noGuest {
		t.Errorf("rules/tests/workload.yml: a disk that only writes %v, a busy disk of no known guest file system %v; want both", writeOnly, noGuest)
	}
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
		x := classifier.Inputs(diskCounts(d))
		r := th.Model.Classify(x, (d["read"]+d["write"])/60, guestFS[name])
		for c, s := range r.Scores {
			put("round(domain_disk:fspair_workload_score:ratio, 0.001)", name, c, s)
		}
		for f, v := range x {
			if th.Model.Scale(f) > 0 { // the rules record the features the model uses
				put("round(domain_disk:fspair_workload_feature:value, 0.001)", name, f, v)
			}
		}
		for c, v := range r.Distances {
			if !math.IsNaN(v) {
				put("round(domain_disk:fspair_workload_distance:scaled, 0.001)", name, c, v)
			}
		}
		if v, ok := nearest(r.Distances); ok {
			put("round(domain_disk:fspair_workload_distance:min_scaled, 0.001)", name, "", v)
		}
	}
	if *updateWorkload {
		rewriteExpected(t, "../tests/workload.yml", &th.Model, disks, guestFS)
		return
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

// rewriteExpected replaces, in the promtool test file at path, the
// expected samples at 10m of the classifier's features, distances, nearest
// distance, scores and confidence with what the classifier package
// computes for its disks.
func rewriteExpected(t *testing.T, path string, m *classifier.Model, disks map[string]map[string]float64, guestFS map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var labels map[string]string // domain -> the disk's labels, from its fspair_disk_info series
	labels = map[string]string{}
	for _, m := range regexp.MustCompile(`series: 'fspair_disk_info\{job="fspair", (instance="[^"]*", domain="([^"]*)", uuid="[^"]*", target_device="[^"]*", source_file="[^"]*")`).FindAllStringSubmatch(string(b), -1) {
		labels[m[2]] = m[1]
	}
	samples := map[string][]string{}
	add := func(expr, domain, key, value string, v float64) {
		l := labels[domain]
		if key != "" {
			l += fmt.Sprintf(", %s=%q", key, value)
		}
		samples[expr] = append(samples[expr], fmt.Sprintf("          - labels: '{%s}'\n            value: %s", l, strconv.FormatFloat(math.Round(v*1000)/1000, 'g', -1, 64)))
	}
	const conf = "round(domain_disk:fspair_workload_class:confidence, 0.001)"
	for _, name := range sortedKeys(disks) {
		d := disks[name]
		x := classifier.Inputs(diskCounts(d))
		r := m.Classify(x, (d["read"]+d["write"])/60, guestFS[name])
		for _, f := range m.Features {
			if v, ok := x[f.Name]; ok {
				add("round(domain_disk:fspair_workload_feature:value, 0.001)", name, "feature", f.Name, v)
			}
		}
		for _, c := range classifier.Workloads {
			if v := r.Distances[c]; !math.IsNaN(v) {
				add("round(domain_disk:fspair_workload_distance:scaled, 0.001)", name, "class", c, v)
			}
		}
		if v, ok := nearest(r.Distances); ok {
			add("round(domain_disk:fspair_workload_distance:min_scaled, 0.001)", name, "", "", v)
		}
		for _, c := range scoreOrderForTest {
			add("round(domain_disk:fspair_workload_score:ratio, 0.001)", name, "class", c, r.Scores[c])
		}
		add(conf, name, "", "", r.Confidence)
	}
	text := string(b)
	for expr, lines := range samples {
		head := fmt.Sprintf("      - expr: '%s'\n        eval_time: 10m\n        exp_samples:\n", expr)
		i := strings.Index(text, head)
		if i < 0 {
			t.Fatalf("%s: no case %q at 10m", path, expr)
		}
		// The case's samples run to the first line indented less than
		// a sample's: the next case, or a comment before it, stays.
		start := i + len(head)
		end := start
		for end < len(text) && strings.HasPrefix(text[end:], "          ") {
			if nl := strings.IndexByte(text[end:], '\n'); nl >= 0 {
				end += nl + 1
			} else {
				end = len(text)
			}
		}
		text = text[:start] + strings.Join(lines, "\n") + "\n" + text[end:]
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote %s's expected features, distances, scores and confidences", path)
}

// scoreOrderForTest lists the classes that have a score series.
var scoreOrderForTest = append(append([]string{}, classifier.Workloads...), classifier.Idle, classifier.Mixed)
