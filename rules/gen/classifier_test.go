package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
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

// updateWorkload rewrites the expected samples of modelTests (and the
// confidence) in rules/tests/workload.yml from the classifier package, for
// a model that changed; promtool then checks the rules against them. The
// classes the test expects stay as written.
var updateWorkload = flag.Bool("update-workload", false, "rewrite rules/tests/workload.yml's expected features, distances, scores and confidences from rules/classifier")

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
// expected samples at 10m of the classifier's features, distances, scores
// and confidence with what the classifier package computes for its disks.
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
		start := i + len(head)
		end := strings.Index(text[start:], "\n      - expr: ")
		if end < 0 {
			end = len(text) - start
		}
		text = text[:start] + strings.Join(lines, "\n") + text[start+end:]
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote %s's expected features, distances, scores and confidences", path)
}

// scoreOrderForTest lists the classes that have a score series.
var scoreOrderForTest = append(append([]string{}, classifier.Workloads...), classifier.Idle, classifier.Mixed)

// TestCandidateRulesMatchClassifier checks the rules generated from the
// fitted candidate model (rules/classes-candidate.yaml: ranges per guest
// file system, its softmax and temperature) against the classifier package
// on the disks of rules/tests/workload.yml: promtool evaluates the
// candidate's rules on those input series and must find, at 10m, the
// features, distances, scores and confidence rules/classifier computes.
func TestCandidateRulesMatchClassifier(t *testing.T) {
	const path = "../classes.yaml"
	th, err := LoadThresholds(path)
	if err != nil {
		t.Fatal(err)
	}
	o := committed
	o.Classes = path
	files, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, sub := range []string{"rules", "tests"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, "rules", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The live test's rule files (../fspair.rules.yml ...) and input
	// series, with only the model's cases at 10m, whose expected samples
	// rewriteExpected then computes from the candidate.
	b, err := os.ReadFile("../tests/workload.yml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "  - ../", "  - ../rules/")
	cut := strings.Index(text, "    promql_expr_test:\n")
	if cut < 0 {
		t.Fatal("rules/tests/workload.yml: no promql_expr_test")
	}
	// One disk more: backup1's writes without its reads, as rfa whose
	// reads stay in the guest's cache, so that each class's own charge
	// for a missing mean read size (missing:) is checked too.
	text = text[:cut] + writeOnlyDisk(t, text[:cut], "backup1", "wonly1") + unknownGuestDisk(t, text[:cut], "mail1", "nofs1") + "    promql_expr_test:\n"
	for _, expr := range append(sortedKeys(modelTests), "round(domain_disk:fspair_workload_class:confidence, 0.001)") {
		// A placeholder sample: rewriteExpected replaces each case's
		// samples up to the next case's line.
		text += fmt.Sprintf("      - expr: '%s'\n        eval_time: 10m\n        exp_samples:\n          - value: 0\n", expr)
	}
	test := filepath.Join(dir, "tests", "candidate.yml")
	if err := os.WriteFile(test, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	disks, guestFS := steadyDisks(t, test)
	if _, ok := disks["wonly1"]; !ok {
		t.Fatal("the write-only disk is not among the test's disks")
	}
	if _, ok := disks["nofs1"]; !ok || guestFS["nofs1"] != "" {
		t.Fatalf("the disk of no known guest file system: among the disks %v, guest_fs %q", ok, guestFS["nofs1"])
	}
	rewriteExpected(t, test, &th.Model, disks, guestFS)
	b, err = os.ReadFile(test)
	if err != nil {
		t.Fatal(err)
	}
	// Its distance and its score from rfa.
	if n := len(regexp.MustCompile(`labels: '\{[^']*domain="wonly1"[^']*class="rfa"\}'`).FindAll(b, -1)); n != 2 {
		t.Fatalf("%d expected samples of the write-only disk for rfa, want its distance and score: its missing read size is not checked", n)
	}
	promtool(t, filepath.Join(dir, "tests"), "test", "rules", "candidate.yml")
}

// unknownGuestDisk returns the input series of domain from in as those of
// as, its fspair_disk_info's guest_fs empty (the exporter could not tell
// it): the class's own ranges, not a guest's, must apply.
func unknownGuestDisk(t *testing.T, in, domain, as string) string {
	t.Helper()
	guest := regexp.MustCompile(`guest_fs="[^"]*"`)
	return copyDisk(t, in, domain, as, func(series, values string) (string, string) {
		return guest.ReplaceAllString(series, `guest_fs=""`), values
	})
}

// writeOnlyDisk returns the input series of domain from in (a rule test's
// input_series, two lines a series) as those of domain as, its read series
// flat at 0.
func writeOnlyDisk(t *testing.T, in, domain, as string) string {
	t.Helper()
	flat := regexp.MustCompile(`values: '.*'`)
	return copyDisk(t, in, domain, as, func(series, values string) (string, string) {
		if strings.Contains(series, `op="read"`) {
			values = flat.ReplaceAllString(values, "values: '0+0x45'")
		}
		return series, values
	})
}

// copyDisk returns the input series of domain from in (a rule test's
// input_series, two lines a series) renamed to as, each series and its
// values line passed through edit.
func copyDisk(t *testing.T, in, domain, as string, edit func(series, values string) (string, string)) string {
	t.Helper()
	lines := strings.Split(in, "\n")
	var out []string
	for i := 0; i+1 < len(lines); i++ {
		if !strings.Contains(lines[i], "- series: ") || !strings.Contains(lines[i], `domain="`+domain+`"`) {
			continue
		}
		series, values := edit(strings.ReplaceAll(lines[i], domain, as), lines[i+1])
		out = append(out, series, values)
	}
	if len(out) == 0 {
		t.Fatalf("no input series of %s", domain)
	}
	return strings.Join(out, "\n") + "\n"
}
