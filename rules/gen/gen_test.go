package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/alerting"
)

// The committed inputs and outputs, relative to this package.
var committed = Options{
	Out: "..", Short: "5m", Long: "1h", ForScale: 1,
	Classes: "../classes.yaml", KB: "../kdb/pairs.yaml", Site: "../kdb/site.yaml",
}

var ruleFiles = []string{"fspair.rules.yml", "fspair-kdb.rules.yml", "fspair.alerts.yml"}

// TestCommittedFilesUpToDate is the drift check: regenerating with the
// default flags gives the committed files byte for byte.
func TestCommittedFilesUpToDate(t *testing.T) {
	upToDate(t, Generate, ruleFiles)
}

// upToDate generates with the committed options and compares every file
// of names with its committed copy under rules/; two generations must be
// the same bytes.
func upToDate(t *testing.T, generate func(Options) (map[string][]byte, error), names []string) {
	t.Helper()
	files, err := generate(committed)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(names) {
		t.Fatalf("generated %d files, want %v", len(files), names)
	}
	for _, name := range names {
		want, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Fatalf("read committed file: %v (run: go run ./rules/gen -out rules/)", err)
		}
		if !bytes.Equal(files[name], want) {
			t.Errorf("rules/%s is stale: run `go run ./rules/gen -out rules/` and commit the result", name)
		}
	}
	again, err := generate(committed)
	if err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if !bytes.Equal(files[name], again[name]) {
			t.Errorf("%s: two generations differ; output must be deterministic", name)
		}
	}
}

// promtool runs promtool with args in dir, once with each release's
// promtool: the rules must hold on all of them.
func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	for _, r := range alerting.Releases(t) {
		promtoolOf(t, r, dir, args...)
	}
}

func promtoolOf(t *testing.T, r alerting.PromRelease, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(r.Promtool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s (Prometheus %s, %s): %v\n%s", strings.Join(args, " "), r.Name, r.Promtool, err, out)
	}
	t.Logf("promtool %s (Prometheus %s):\n%s", strings.Join(args, " "), r.Name, out)
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool(t, "..", append([]string{"check", "rules"}, ruleFiles...)...)
}

func testFiles(t *testing.T, glob string) []string {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files match %s (%v)", glob, err)
	}
	return files
}

// TestPromtoolTestRules runs the unit tests in rules/tests on the committed files.
func TestPromtoolTestRules(t *testing.T) {
	var rel []string
	for _, f := range testFiles(t, "../tests/*.yml") {
		rel = append(rel, strings.TrimPrefix(f, "../"))
	}
	promtool(t, "..", append([]string{"test", "rules"}, rel...)...)
	// What changed between the major versions, asserted for each
	// (rules/tests/prometheus<major>/).
	for _, r := range alerting.Releases(t) {
		var own []string
		for _, f := range testFiles(t, fmt.Sprintf("../tests/prometheus%d/*.yml", r.Major)) {
			own = append(own, strings.TrimPrefix(f, "../"))
		}
		promtoolOf(t, r, "..", append([]string{"test", "rules"}, own...)...)
	}
}

// promtoolTest is the part of a promtool unit test file the coverage check reads.
type promtoolTest struct {
	RuleFiles      []string `yaml:"rule_files"`
	GroupEvalOrder []string `yaml:"group_eval_order"`
	Tests          []struct {
		Exprs []struct {
			Expr       string `yaml:"expr"`
			ExpSamples []struct {
				Labels string `yaml:"labels"`
			} `yaml:"exp_samples"`
		} `yaml:"promql_expr_test"`
		Alerts []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

type ruleFileYAML struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
}

// TestEveryRuleTested holds the unit tests to the acceptance criteria: every
// recorded series is the subject of a promql_expr_test with samples, every
// alert has a test where it fires (with its annotations checked in full) and
// one where it must not, and every test file evaluates all groups in
// dependency order (promtool otherwise orders groups at random).
func TestEveryRuleTested(t *testing.T) {
	records := map[string]bool{}
	alertAnn := map[string]int{}
	var groups []string
	for _, f := range ruleFiles {
		var rf ruleFileYAML
		loadYAML(t, filepath.Join("..", f), &rf)
		for _, g := range rf.Groups {
			groups = append(groups, g.Name)
			for _, r := range g.Rules {
				if r.Record != "" {
					records[r.Record] = false
				} else {
					alertAnn[r.Alert] = len(r.Annotations)
				}
			}
		}
	}
	wantOrder := []string{"fspair.disk", "fspair.disk.long", "fspair.efficiency", "fspair.efficiency.long", "fspair.guest", "fspair.guest.quantiles", "fspair.workload",
		"fspair.fleet", "fspair.kdb", "fspair.pairing", "fspair.alerts.pairs", "fspair.alerts.exporter"}
	gs, ws := append([]string{}, groups...), append([]string{}, wantOrder...)
	sort.Strings(gs)
	sort.Strings(ws)
	if strings.Join(gs, " ") != strings.Join(ws, " ") {
		t.Fatalf("rule groups are %v; update wantOrder and every test file's group_eval_order", groups)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	name := regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// The fixture tests (TestFixture) count too: they run the same
	// generated expressions on frozen thresholds, so that what they check
	// (the settle rules' timing, the softmax's arithmetic) does not move
	// with each fit of classes.yaml.
	for _, f := range append(testFiles(t, "../tests/*.yml"), testFiles(t, "testdata/promtool/*.yml")...) {
		var pt promtoolTest
		loadYAML(t, f, &pt)
		if strings.Join(pt.GroupEvalOrder, " ") != strings.Join(wantOrder, " ") {
			t.Errorf("%s: group_eval_order must be %v", f, wantOrder)
		}
		for _, tg := range pt.Tests {
			for _, e := range tg.Exprs {
				if len(e.ExpSamples) == 0 {
					continue
				}
				for _, tok := range name.FindAllString(e.Expr, -1) {
					if _, ok := records[tok]; ok {
						records[tok] = true
					}
				}
			}
			for _, a := range tg.Alerts {
				if len(a.ExpAlerts) == 0 {
					silent[a.Alertname] = true
					continue
				}
				fires[a.Alertname] = true
				for _, ea := range a.ExpAlerts {
					if len(ea.ExpAnnotations) != alertAnn[a.Alertname] {
						t.Errorf("%s: %s: exp_annotations must check all %d annotations", f, a.Alertname, alertAnn[a.Alertname])
					}
				}
			}
		}
	}
	for _, r := range sortedKeys(records) {
		if !records[r] {
			t.Errorf("recording rule %s has no promql_expr_test with expected samples in rules/tests or rules/gen/testdata/promtool", r)
		}
	}
	for _, a := range sortedKeys(alertAnn) {
		if !fires[a] {
			t.Errorf("alert %s has no test where it fires", a)
		}
		if !silent[a] {
			t.Errorf("alert %s has no test where it must not fire", a)
		}
	}
}

// TestShortWindows generates the CI variant and checks that it is valid,
// named after its windows, and that `for` is scaled.
func TestShortWindows(t *testing.T) {
	o := committed
	o.Short, o.Long, o.ForScale = "1m", "5m", 0.1
	files, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	promtool(t, dir, append([]string{"check", "rules"}, ruleFiles...)...)
	rules, alerts := string(files["fspair.rules.yml"]), string(files["fspair.alerts.yml"])
	for _, want := range []string{
		"record: domain_disk:fspair_disk_requests:rate1m",
		"avg_over_time(domain_disk:fspair_disk_requests:rate1m[5m])",
		"record: domain_disk:fspair_write_amplification:ratio_rate5m",
		"record: class_pair:fspair_write_amplification:median_ratio_rate5m",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("CI rules lack %q", want)
		}
	}
	if strings.Contains(rules, "5m]") && !strings.Contains(rules, "rate1m[5m]") || strings.Contains(rules, "[1h]") {
		t.Errorf("CI rules still use a default window")
	}
	for _, want := range []string{"for: 6m", "for: 30s", "for: 1m30s", "for: 3m", "has run a {{ $labels.class }} workload for 6m"} {
		if !strings.Contains(alerts, want) {
			t.Errorf("CI alerts lack %q", want)
		}
	}
}

// againstCommitted generates the per-host and the fleet rule files with
// the committed options and with o, and calls check on each file's two
// versions: for the flags that must change one thing only.
func againstCommitted(t *testing.T, o Options, check func(name string, def, got []byte)) {
	t.Helper()
	for _, gen := range []func(Options) (map[string][]byte, error){Generate, GenerateFleet} {
		def, err := gen(committed)
		if err != nil {
			t.Fatal(err)
		}
		got, err := gen(o)
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range def {
			check(name, b, got[name])
		}
	}
}

// TestLongInterval: -long-interval changes how often the long-window
// groups, fspair.guest.quantiles and fspair.fleet (and only they) are evaluated, in the per-host rules and the
// fleet's, and nothing else.
func TestLongInterval(t *testing.T) {
	o := committed
	o.LongInterval = "30s"
	againstCommitted(t, o, func(name string, def, got []byte) {
		want := strings.NewReplacer("interval: 3m", "interval: 30s", "evaluated every 3m", "evaluated every 30s").Replace(string(def))
		if string(got) != want {
			t.Errorf("%s with -long-interval 30s: want the committed file with every 3m interval at 30s", name)
		}
	})
	files, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(files["fspair.rules.yml"]), "interval: 30s"); n != 5 {
		t.Errorf("fspair.rules.yml: %d groups every 30s, want 5 (disk.long, efficiency.long, guest.quantiles, workload, fleet)", n)
	}
}

// TestWorkloadInterval: the classifier follows -long-interval unless
// -workload-interval sets its own or "global" leaves it to Prometheus'
// evaluation_interval (no interval line); at the lookback it is refused.
func TestWorkloadInterval(t *testing.T) {
	group := func(o Options) string {
		t.Helper()
		files, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		s := string(files["fspair.rules.yml"])
		i := strings.Index(s, "- name: fspair.workload\n")
		if i < 0 {
			t.Fatal("no group fspair.workload")
		}
		return strings.SplitN(s[i:], "\n", 3)[1]
	}
	for flag, want := range map[string]string{"": "interval: 3m", "45s": "interval: 45s", "global": "rules:"} {
		o := committed
		o.WorkloadInterval = flag
		if got := strings.TrimSpace(group(o)); got != want {
			t.Errorf("-workload-interval %q: fspair.workload's line after its name is %q, want %q", flag, got, want)
		}
	}
	o := committed
	o.LongInterval = "30s"
	if got := strings.TrimSpace(group(o)); got != "interval: 30s" {
		t.Errorf("-long-interval 30s: fspair.workload's line after its name is %q, want interval: 30s", got)
	}
	for _, bad := range []string{"5m", "0s", "soon"} {
		o := committed
		o.WorkloadInterval = bad
		if _, err := Generate(o); err == nil {
			t.Errorf("-workload-interval %q: want an error", bad)
		}
	}
}

// TestLongIntervalDefault: a twentieth of the long window, never 3m or
// more, so that a long window past 1h cannot put the slow groups (the
// classifier's self-reading rules among them) at the 5m lookback.
func TestLongIntervalDefault(t *testing.T) {
	for secs, want := range map[int64]string{300: "15s", 1200: "1m", 3600: "3m", 7200: "3m", 86400: "3m", 10: "1s"} {
		if got := longInterval(window{formatDuration(secs), secs}); got != want {
			t.Errorf("longInterval(%s) = %s, want %s", formatDuration(secs), got, want)
		}
	}
}

func TestDurations(t *testing.T) {
	for in, want := range map[string]int64{"5m": 300, "1h": 3600, "1h30m": 5400, "90s": 90, "1d": 86400, "2w": 1209600} {
		got, err := parseDuration(in)
		if err != nil || got != want {
			t.Errorf("parseDuration(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "5", "0m", "1.5h", "5 m", "m"} {
		if _, err := parseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q): want an error", bad)
		}
	}
	for secs, want := range map[int64]string{0: "0s", 45: "45s", 90: "1m30s", 300: "5m", 3600: "1h", 5430: "1h30m30s", 86400: "24h"} {
		if got := formatDuration(secs); got != want {
			t.Errorf("formatDuration(%d) = %q, want %q", secs, got, want)
		}
	}
	if got := scaleDuration(3600, 0.1); got != "6m" {
		t.Errorf("scaleDuration(1h, 0.1) = %q, want 6m", got)
	}
	if got := num(0.85 - 0.70); got != "0.15" {
		t.Errorf("num(0.85-0.70) = %q, want 0.15", got)
	}
}

func TestBadOptions(t *testing.T) {
	for name, mod := range map[string]func(*Options){
		"long not longer":               func(o *Options) { o.Long = "5m" },
		"bad short":                     func(o *Options) { o.Short = "5 minutes" },
		"negative scale":                func(o *Options) { o.ForScale = -1 },
		"long interval at the lookback": func(o *Options) { o.LongInterval = "5m" },
		"bad long interval":             func(o *Options) { o.LongInterval = "30" },
		"missing classes":               func(o *Options) { o.Classes = "testdata/nonexistent.yaml" },
	} {
		o := committed
		mod(&o)
		if _, err := Generate(o); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

func writeTemp(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestThresholdsValidation(t *testing.T) {
	base, err := os.ReadFile("../classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadThresholds("../classes.yaml"); err != nil {
		t.Fatalf("committed classes.yaml: %v", err)
	}
	cases := []struct {
		name, old, new string
		is             error
	}{
		{"threshold without source", "hysteresis_bonus:\n  value: 0.15\n  source: >-", "hysteresis_bonus:\n  value: 0.15\n  sourcex: >-", nil},
		{"empty source", "  active_iops:\n    value: 10\n    source: >-\n      provisional: a disk doing at least 10 requests/s competes for the host\n      device; below that its share of a device's time is negligible.",
			"  active_iops:\n    value: 10\n    source: \"\"", ErrNoSource},
		{"unknown feature", "  - name: sync_write_share\n    scale", "  - name: sync_writes\n    scale", nil},
		// The fitted block's numbers change with every fit: these edits
		// find their lines by pattern (re: a regexp and its replacement).
		{"feature without source", `(?m)^(    scale: [-0-9.e]+\n    )source:`, "${1}sourcex:", nil},
		{"zero scale", `(?m)^    scale: [-0-9.e]+$`, "    scale: 0", nil},
		{"inverted ramp", "below: [0.5, 2]", "below: [2, 0.5]", nil},
		{"far must rise", `far:\n  above:`, "far:\n  below:", nil},
		{"box on an unlisted feature", `(?m)^      sync_write_share: \[`, "      random_read_share: [", nil},
		// The fitted centres are points ([v, v]), which swapping leaves
		// as they are: the upper end goes below the feature's clamp
		// (-10), under any lower end.
		{"inverted box", `read_write_log2: \[([-0-9.e]+), ([-0-9.e]+)\]`, "read_write_log2: [${1}, -11]", nil},
		{"inverted guest range", `(?m)^(        sync_write_share: \[[-0-9.e]+, )[-0-9.e]+\]`, "${1}-1]", nil},
		{"conditions are gone (scores are distances)", "  - name: web\n    box:", "  - name: web\n    conditions: []\n    box:", nil},
		{"workload order", "- name: web", "- name: www", nil},
		{"misspelt field", "contention_active_disks:", "contention_active_disk:", nil},
		{"guest flush limit without a value", "  guest_flush_p99_seconds:\n    value: 0.25", "  guest_flush_p99_seconds:\n    value: null", nil},
		{"settle without seconds", "settle:\n  windows: 1\n  seconds: 60", "settle:\n  windows: 1", nil},
		{"settle negative", "settle:\n  windows: 1\n  seconds: 60", "settle:\n  windows: -1\n  seconds: 60", nil},
		{"min_confidence above 1", "  min_confidence:\n    value: 0.5", "  min_confidence:\n    value: 1.5", nil},
		{"min_confidence negative", "  min_confidence:\n    value: 0.5", "  min_confidence:\n    value: -0.5", nil},
		{"min_confidence missing", "  min_confidence:\n    value: 0.5", "  min_confidencex:\n    value: 0.5", nil},
	}
	// settle without its source: the block up to the next key, cut to its
	// numbers (quoted: its source's parentheses would make it a pattern).
	block := regexp.MustCompile(`(?s)\nsettle:\n.*?\n\n`).FindString(string(base))
	if block == "" {
		t.Fatal("classes.yaml has no settle block")
	}
	cases = append(cases, struct {
		name, old, new string
		is             error
	}{"settle without source", regexp.QuoteMeta(block), "\nsettle:\n  windows: 1\n  seconds: 60\n\n", ErrNoSource})
	for _, c := range cases {
		body := strings.Replace(string(base), c.old, c.new, 1)
		if re, err := regexp.Compile(c.old); err == nil && strings.ContainsAny(c.old, `\^$(`) {
			done := false
			body = re.ReplaceAllStringFunc(string(base), func(m string) string {
				if done {
					return m
				}
				done = true
				return re.ReplaceAllString(m, c.new)
			})
		}
		if body == string(base) {
			t.Fatalf("%s: the edit does not apply to classes.yaml", c.name)
		}
		_, err := LoadThresholds(writeTemp(t, body))
		if err == nil {
			t.Errorf("%s: want an error", c.name)
		} else if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.is)
		}
	}
}

func TestKBMerge(t *testing.T) {
	kb, err := LoadKB("../kdb/pairs.yaml", "testdata/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mail := kb.workload("mail")
	var got []string
	for _, v := range mail.Pairs {
		got = append(got, v.Pair+"="+v.Verdict+"/"+v.Source)
	}
	// testdata/site.yaml rates mail xfs/ext4 worst (published: best) and adds
	// a new best pair, ext4/zfs.
	want := "btrfs/ext4=best/djordjevic2022 ext4/xfs=best/djordjevic2022 ext4/ext4=best/djordjevic2022 " +
		"xfs/ext4=worst/site xfs/btrfs=worst/djordjevic2022 ext4/btrfs=worst/djordjevic2022 " +
		"btrfs/btrfs=worst/djordjevic2022 xfs/xfs=worst/djordjevic2022 btrfs/xfs=contested/djordjevic2022 " +
		"ext4/zfs=best/site"
	if strings.Join(got, " ") != want {
		t.Errorf("merged mail pairs:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if b := strings.Join(mail.betterPairs("xfs/btrfs"), ", "); b != "btrfs/ext4, ext4/xfs, ext4/ext4, ext4/zfs" {
		t.Errorf("better pairs after merge: %s", b)
	}
	if b := strings.Join(kb.workload("web").betterPairs("btrfs/xfs"), ", "); b != "xfs/xfs, ext4/ext4, ext4/btrfs, btrfs/ext4, ext4/xfs, xfs/ext4" {
		t.Errorf("web better pairs: %s", b)
	}

	for name, site := range map[string]string{
		"unknown workload": "- {workload: db, pair: ext4/xfs, verdict: best, date: \"2026-01-02\"}",
		"bad pair":         "- {workload: web, pair: ext4-xfs, verdict: best, date: \"2026-01-02\"}",
		"bad verdict":      "- {workload: web, pair: ext4/xfs, verdict: good, date: \"2026-01-02\"}",
		"no date":          "- {workload: web, pair: ext4/xfs, verdict: best}",
		"bad figure":       "- {workload: web, pair: ext4/xfs, verdict: best, date: \"2026-01-02\", measured: {Throughput: 1}}",
		"twice":            "- {workload: web, pair: ext4/xfs, verdict: best, date: \"2026-01-02\"}\n- {workload: web, pair: ext4/xfs, verdict: worst, date: \"2026-01-02\"}",
		"unknown field":    "- {workload: web, pair: ext4/xfs, verdict: best, date: \"2026-01-02\", score: 3}",
	} {
		if _, err := LoadKB("../kdb/pairs.yaml", writeTemp(t, site)); err == nil {
			t.Errorf("site file with %s: want an error", name)
		}
	}
}

// TestFixture runs the promtool tests in testdata/promtool against rules
// generated from fixed thresholds (testdata/classes.yaml) and a site file
// (testdata/site.yaml): distance and softmax arithmetic, the far ramp,
// hysteresis, the speed of a class change, and site verdicts overriding
// published ones. The production tests in rules/tests put their disks at the
// live model's fitted centres (TestClassifierMatchesRules's -update-workload
// rewrites their expected classifier values after a fit); these pin down
// the arithmetic on thresholds that do not move.
func TestFixture(t *testing.T) {
	o := committed
	o.Classes, o.Site = "testdata/classes.yaml", "testdata/site.yaml"
	files, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for _, f := range testFiles(t, "testdata/promtool/*.yml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(f))
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	promtool(t, dir, append([]string{"test", "rules"}, names...)...)
}

func TestMainWritesFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	args := []string{"-out", dir, "-classes", committed.Classes, "-kdb", committed.KB, "-site", committed.Site, "-short", "2m", "-long", "30m"}
	var stderr bytes.Buffer
	if code := run(args, &stderr); code != 0 {
		t.Fatalf("run(%v) = %d: %s", args, code, &stderr)
	}
	for _, f := range append(slices.Clone(ruleFiles), fleetRuleFiles...) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("short=2m long=30m")) {
			t.Errorf("%s: header does not record the windows", f)
		}
	}
	stderr.Reset()
	if code := run([]string{"-out", dir, "-short", "bogus", "-classes", committed.Classes}, &stderr); code == 0 {
		t.Error("run with a bad window: want a non-zero exit")
	}
	if !strings.Contains(stderr.String(), `parse -short: duration "bogus"`) {
		t.Errorf("error output %q does not name the bad flag", &stderr)
	}
}

// TestLongWindowRead checks that everything the long-window groups record is
// read: by another rule or alert, or by a dashboard. The long window is the
// costly half of the rule set at scale, so it records nothing for no reader.
func TestLongWindowRead(t *testing.T) {
	var readers []string
	for _, f := range ruleFiles {
		var rf ruleFileYAML
		loadYAML(t, filepath.Join("..", f), &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				readers = append(readers, r.Expr)
			}
		}
	}
	boards, err := filepath.Glob("../../dashboards/*.json")
	if err != nil || len(boards) == 0 {
		t.Fatalf("no dashboards found (%v)", err)
	}
	for _, b := range boards {
		body, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, string(body))
	}
	var rf ruleFileYAML
	loadYAML(t, "../fspair.rules.yml", &rf)
	long := 0
	for _, g := range rf.Groups {
		if !strings.HasSuffix(g.Name, ".long") {
			continue
		}
		for _, r := range g.Rules {
			long++
			read := regexp.MustCompile(regexp.QuoteMeta(r.Record) + `\b`)
			n := 0
			for _, e := range readers {
				n += len(read.FindAllStringIndex(e, -1))
			}
			if n == 0 {
				t.Errorf("%s (group %s) is recorded but read by no rule, alert or dashboard", r.Record, g.Name)
			}
		}
	}
	if long == 0 {
		t.Fatal("no long-window groups found")
	}
	committedRules, err := os.ReadFile("../fspair.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	for name := range longRecords {
		if !strings.Contains(string(committedRules), "record: "+name+"1h\n") {
			t.Errorf("longRecords names %s, which no long-window rule records", name)
		}
	}
}

// TestFittedModelValidation checks what only the fitted model of
// rules/classes.yaml (tests/workload/filebench -fit -write) has beside the
// thresholds TestThresholdsValidation checks: ranges per guest file system,
// further centres (others), a softmax and its temperature, a class's own
// charge for a missing request size and the calibrated confidence, each
// refused when malformed.
func TestFittedModelValidation(t *testing.T) {
	base, err := os.ReadFile("../classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadThresholds("../classes.yaml"); err != nil {
		t.Fatalf("committed classes.yaml: %v", err)
	}
	for _, c := range []struct{ name, re, new string }{
		{"guest range on a feature the box lacks", `(?m)^    guest_fs:\n      (ext4|xfs|btrfs):\n`, "    guest_fs:\n      ${1}:\n        random_read_share: [0, 1]\n"},
		{"unknown guest file system", `(?m)^    guest_fs:\n      (ext4|xfs|btrfs):`, "    guest_fs:\n      zfs:"},
		{"temperature without source", `(?m)^(temperature:\n  value: [-0-9.e]+\n  )source:`, "${1}sourcex:"},
		{"temperature of 0", `(?m)^temperature:\n  value: [-0-9.e]+\n`, "temperature:\n  value: 0\n"},
		{"softmax over an unknown", `(?m)^softmax:\n  over: [a-z_]+\n`, "softmax:\n  over: cube\n"},
		{"softmax without source", `(?m)^(softmax:\n  over: [a-z_]+\n  )source:`, "${1}sourcex:"},
		{"missing on a feature other than a request size", `(?m)^(    box:\n(?:      .*\n)+)`, "${1}    missing:\n      sync_write_share: 1\n"},
		{"negative missing", `(?m)^(    box:\n(?:      .*\n)+)`, "${1}    missing:\n      write_size_log2: -1\n"},
		{"a centre among others without a name", `(?m)^(    others:\n      - )name: [a-z]+\n`, "${1}box:\n"},
		{"a centre among others without a source", `(?m)^(    others:\n      - name: [a-z]+\n(?:        .*\n)*)        source: >-\n          .*\n`, "${1}"},
		{"confidence without source", `(?m)^(confidence:\n(?:  .*\n)*  )source:`, "${1}sourcex:"},
		{"confidence margin below, not above", `(?m)^(confidence:\n  margin:\n    )above:`, "${1}below:"},
	} {
		re := regexp.MustCompile(c.re)
		loc := re.FindStringIndex(string(base))
		if loc == nil {
			t.Fatalf("%s: the edit does not apply to classes.yaml", c.name)
		}
		body := string(base[:loc[0]]) + re.ReplaceAllString(string(base[loc[0]:loc[1]]), c.new) + string(base[loc[1]:])
		if _, err := LoadThresholds(writeTemp(t, body)); err == nil {
			t.Errorf("%s: want an error", c.name)
		}
	}
}
