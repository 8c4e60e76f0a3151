package dashboards

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/fspair/fspair/tests/alerting"
)

// The lint rules, named after the dashboard-linter rules they stand in for
// (that linter and Grafana's Go modules cannot be installed here), plus
// the rules fspair adds. README.md explains each.
const (
	ruleUID                = "uid"                     // a fixed UID fspair-<name>, equal to the file name
	ruleUnique             = "unique"                  // UIDs and dashboard titles unique in dashboards/, panel titles in a dashboard
	ruleTemplateDatasource = "template-datasource"     // one datasource variable, named datasource, of type prometheus
	ruleTemplateJob        = "template-job"            // a job variable, multi, All = .+
	ruleTemplateInstance   = "template-instance"       // an instance variable, multi, All = .+
	ruleTemplateQuery      = "template-query"          // query variables: on $datasource, refreshed on time range change, label_values(selector, label)
	rulePanelDatasource    = "panel-datasource"        // every panel and target on $datasource
	rulePanelTitleDesc     = "panel-title-description" // every panel has a title and a description
	rulePanelUnits         = "panel-units"             // every panel but text and row has a known unit (heatmaps: the y axis too)
	rulePanelTargets       = "panel-targets"           // every panel but text and row has targets with a refId and an expression
	ruleTargetRateInterval = "target-rate-interval"    // ranges are $__rate_interval ($__interval, $__range outside rate/irate/increase)
	ruleTargetCounter      = "target-counter"          // raw counters (_total, _bucket, _count, _sum) only inside rate/irate/increase
	ruleTargetJobInstance  = "target-job-instance"     // raw exporter series select job and instance through the variables
	ruleTargetMetric       = "target-metric"           // every series is a recording rule or a metric an exporter declares
	ruleTargetVariables    = "target-variables"        // every variable a query uses is defined
	ruleTargetPromQL       = "target-promql"           // every query parses (a real Prometheus) and the lint can read it
)

// problem is one broken rule.
type problem struct {
	rule, where, msg string
}

func (p problem) String() string { return fmt.Sprintf("%s: %s: %s", p.where, p.rule, p.msg) }

// Grafana's unit ids the dashboards may use (the ids of
// packages/grafana-data/src/valueFormats/categories.ts that fit fspair's
// metrics); a unit outside this list is a typo or needs adding here.
var knownUnits = map[string]bool{
	"none": true, "short": true, "string": true, "percent": true, "percentunit": true,
	"bytes": true, "decbytes": true, "Bps": true, "binBps": true,
	"s": true, "ms": true, "µs": true, "ns": true,
	"ops": true, "reqps": true, "rps": true, "wps": true, "iops": true,
}

// The libvirt exporter's disk counters (prometheus-libvirt-exporter 0.2.0,
// Debian 12, both stacks: libvirt_domain_block_stats_<x>{domain, uuid,
// source_file, target_device}), the only foreign series the dashboards
// read. That version exports reads and writes only: no flush counts and
// no times (seen in the demo's Prometheus, 2026-11-21).
var libvirtMetrics = map[string]bool{
	"libvirt_domain_block_stats_read_bytes_total": true, "libvirt_domain_block_stats_read_requests_total": true,
	"libvirt_domain_block_stats_write_bytes_total": true, "libvirt_domain_block_stats_write_requests_total": true,
}

// k6's series, written into the same Prometheus by its remote-write output
// during a load test (tests/k6): they carry k6's tags, no job or instance.
var k6Metrics = map[string]bool{"k6_http_reqs_total": true, "k6_http_req_duration_p95": true}

// Series Prometheus itself writes for alerting rules: no job, and the
// alert's own labels.
var alertSeries = map[string]bool{"ALERTS": true, "ALERTS_FOR_STATE": true}

var (
	uidPattern    = regexp.MustCompile(`^fspair-[a-z0-9]+(-[a-z0-9]+)*$`)
	counterSuffix = regexp.MustCompile(`_(total|bucket|count|sum)$`)
)

// linter holds what the rules check names against.
type linter struct {
	recorded map[string]bool // series the rule files record (recording rules, the knowledge base)
	exported map[string]bool // metric families fspair_exporter declares
}

func isDatasourceVar(ref *datasourceRef) bool {
	return ref != nil && (ref.UID == "${datasource}" || ref.UID == "$datasource") && (ref.Type == "" || ref.Type == "prometheus")
}

// lint checks one dashboard against every rule but target-promql (which
// needs a Prometheus: see checkPromQL) and the rules across files
// (lintSet). It returns the problems and the queries to parse.
func (l *linter) lint(d *dashboardFile) ([]problem, []query) {
	var probs []problem
	add := func(rule, where, format string, args ...any) {
		probs = append(probs, problem{rule, where, fmt.Sprintf(format, args...)})
	}
	if !uidPattern.MatchString(d.UID) {
		add(ruleUID, "dashboard", "uid %q is not fspair-<name>", d.UID)
	}
	vars := l.lintVariables(d, add)
	varQueries := variableQueries(d)
	queries := append([]query(nil), varQueries...)
	titles := map[string]bool{}
	for _, p := range flatten(d.Panels) {
		where := fmt.Sprintf("panel %q", p.Title)
		if p.Title == "" {
			add(rulePanelTitleDesc, where, "no title")
		}
		if p.Type == panelTypeRow {
			continue
		}
		if titles[p.Title] {
			add(ruleUnique, where, "two panels have this title")
		}
		titles[p.Title] = true
		if strings.TrimSpace(p.Description) == "" {
			add(rulePanelTitleDesc, where, "no description")
		}
		if p.Type == panelTypeText {
			continue
		}
		l.lintPanel(p, where, add)
		for _, t := range p.Targets {
			q := query{fmt.Sprintf("%s target %s", where, t.RefID), t.Expr}
			queries = append(queries, q)
			l.lintQuery(q, vars, add)
		}
	}
	for _, q := range varQueries {
		l.lintQuery(q, vars, func(rule, where, format string, args ...any) {
			// A variable lists the label values of series, counters or not,
			// of any job or instance (the job variable has none to select
			// on yet); the other rules hold.
			if rule != ruleTargetJobInstance && rule != ruleTargetCounter {
				add(rule, where, format, args...)
			}
		})
	}
	return probs, queries
}

type addFunc func(rule, where, format string, args ...any)

func (l *linter) lintVariables(d *dashboardFile, add addFunc) map[string]bool {
	vars := map[string]bool{}
	var datasources int
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		where := fmt.Sprintf("variable %q", v.Name)
		switch v.Type {
		case "datasource":
			datasources++
			if v.Name != "datasource" || v.Query != "prometheus" {
				add(ruleTemplateDatasource, where, "the datasource variable must be named datasource and select prometheus data sources (query %v)", v.Query)
			}
		case "query":
			if !isDatasourceVar(v.Datasource) {
				add(ruleTemplateQuery, where, "does not query $datasource")
			}
			if v.Refresh != 2 {
				add(ruleTemplateQuery, where, "refresh is %d, want 2 (on time range change)", v.Refresh)
			}
			if s, ok := v.Query.(string); !ok || !labelValuesCall.MatchString(s) {
				add(ruleTemplateQuery, where, "query %v is not label_values(selector, label)", v.Query)
			}
		}
	}
	if datasources != 1 {
		add(ruleTemplateDatasource, "dashboard", "%d datasource variables, want 1", datasources)
	}
	for _, want := range []struct{ name, rule string }{{"job", ruleTemplateJob}, {"instance", ruleTemplateInstance}} {
		v := findVariable(d, want.name)
		switch {
		case v == nil:
			add(want.rule, "dashboard", "no %s variable", want.name)
		case v.Type != "query" || !v.Multi || !v.IncludeAll || v.AllValue != ".+":
			add(want.rule, fmt.Sprintf("variable %q", want.name), "want a multi-value query variable with All = .+ (type %s, multi %v, includeAll %v, allValue %q)",
				v.Type, v.Multi, v.IncludeAll, v.AllValue)
		}
	}
	return vars
}

func findVariable(d *dashboardFile, name string) *variable {
	for i := range d.Templating.List {
		if d.Templating.List[i].Name == name {
			return &d.Templating.List[i]
		}
	}
	return nil
}

func (l *linter) lintPanel(p panel, where string, add addFunc) {
	if !isDatasourceVar(p.Datasource) {
		add(rulePanelDatasource, where, "datasource %+v is not ${datasource}", p.Datasource)
	}
	switch u := p.FieldConfig.Defaults.Unit; {
	case u == "":
		add(rulePanelUnits, where, "no unit (fieldConfig.defaults.unit)")
	case !knownUnits[u]:
		add(rulePanelUnits, where, "unit %q is not a Grafana unit id fspair uses", u)
	}
	for _, o := range p.FieldConfig.Overrides {
		for _, prop := range o.Properties {
			if u, _ := prop.Value.(string); prop.ID == "unit" && !knownUnits[u] {
				add(rulePanelUnits, where, "override unit %v is not a Grafana unit id fspair uses", prop.Value)
			}
		}
	}
	if p.Type == "heatmap" && (p.Options.YAxis == nil || !knownUnits[p.Options.YAxis.Unit]) {
		add(rulePanelUnits, where, "heatmap without a known y-axis unit (options.yAxis.unit)")
	}
	if len(p.Targets) == 0 {
		add(rulePanelTargets, where, "no targets")
	}
	refs := map[string]bool{}
	for _, t := range p.Targets {
		if t.RefID == "" || refs[t.RefID] {
			add(rulePanelTargets, where, "target refId %q empty or repeated", t.RefID)
		}
		refs[t.RefID] = true
		if strings.TrimSpace(t.Expr) == "" {
			add(rulePanelTargets, where, "target %s has no expression", t.RefID)
		}
		if t.Datasource != nil && !isDatasourceVar(t.Datasource) {
			add(rulePanelDatasource, where, "target %s datasource %+v is not ${datasource}", t.RefID, t.Datasource)
		}
	}
}

// rateFunctions take a counter's range and must use $__rate_interval.
var rateFunctions = map[string]bool{"rate": true, "irate": true, "increase": true}

func (l *linter) lintQuery(q query, vars map[string]bool, add addFunc) {
	for _, m := range grafanaVariable.FindAllStringSubmatch(q.expr, -1) {
		name := m[1] + m[2]
		if !vars[name] && !builtinVariables[name] && !isRegexpGroup(name) {
			add(ruleTargetVariables, q.where, "uses $%s, which the dashboard does not define", name)
		}
	}
	shape, err := analyze(q.expr)
	if err != nil {
		add(ruleTargetPromQL, q.where, "cannot read %q: %v", q.expr, err)
		return
	}
	for _, s := range shape.selectors {
		l.lintSelector(s, q.where, add)
	}
}

// histogramFamily is the family name of a histogram's series (x_bucket, x_sum, x_count: x).
func histogramFamily(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base
		}
	}
	return name
}

func (l *linter) lintSelector(s selector, where string, add addFunc) {
	// A name with a colon is a recording rule by the naming convention
	// (level:metric:operations), recorded or not (target-metric says).
	raw := !strings.Contains(s.name, ":") && !l.recorded[s.name] && !alertSeries[s.name] && !k6Metrics[s.name]
	switch {
	case strings.Contains(s.name, ":") && !l.recorded[s.name]:
		add(ruleTargetMetric, where, "%s is not a recording rule of rules/*.yml", s.name)
	case strings.HasPrefix(s.name, "fspair_") && raw && !l.exported[s.name] && !l.exported[histogramFamily(s.name)]:
		add(ruleTargetMetric, where, "%s is neither recorded by rules/*.yml nor declared by exporter/collector", s.name)
	case !strings.HasPrefix(s.name, "fspair_") && !strings.Contains(s.name, ":") && !libvirtMetrics[s.name] && !alertSeries[s.name] && !k6Metrics[s.name]:
		add(ruleTargetMetric, where, "%s is not a series fspair dashboards know (fspair, libvirt exporter, k6, ALERTS)", s.name)
	}
	if s.rangeText != "" {
		switch {
		case rateFunctions[s.fn] && s.rangeText != "$__rate_interval":
			add(ruleTargetRateInterval, where, "%s(%s[%s]): use [$__rate_interval]", s.fn, s.name, s.rangeText)
		case !builtinVariables[strings.TrimPrefix(s.rangeText, "$")]:
			add(ruleTargetRateInterval, where, "%s[%s]: a fixed range; the windows live in the recording rules", s.name, s.rangeText)
		}
	}
	if raw && counterSuffix.MatchString(s.name) && (!rateFunctions[s.fn] || s.rangeText == "") {
		add(ruleTargetCounter, where, "counter %s outside rate/irate/increase", s.name)
	}
	if raw {
		for _, label := range []string{"job", "instance"} {
			if m, ok := s.matchers[label]; !ok || !strings.Contains(m.value, "$") {
				add(ruleTargetJobInstance, where, "%s does not select %s through a variable", s.name, label)
			}
		}
	} else if alertSeries[s.name] {
		if m, ok := s.matchers["instance"]; !ok || !strings.Contains(m.value, "$") {
			add(ruleTargetJobInstance, where, "%s does not select instance through a variable", s.name)
		}
	}
}

// lintSet checks the rules across the dashboards of one directory: file
// named after the UID, UIDs and titles unique.
func lintSet(files map[string]*dashboardFile) []problem {
	var probs []problem
	uids, titles := map[string]string{}, map[string]string{}
	for _, name := range sortedKeys(files) {
		d := files[name]
		if want := strings.TrimSuffix(filepath.Base(name), ".json"); d.UID != want {
			probs = append(probs, problem{ruleUID, name, fmt.Sprintf("uid %q, but the file is named %s.json: the UID is fixed, name the file after it", d.UID, want)})
		}
		if other, dup := uids[d.UID]; dup {
			probs = append(probs, problem{ruleUnique, name, fmt.Sprintf("uid %q is also %s's", d.UID, other)})
		}
		if other, dup := titles[d.Title]; dup {
			probs = append(probs, problem{ruleUnique, name, fmt.Sprintf("title %q is also %s's", d.Title, other)})
		}
		uids[d.UID], titles[d.Title] = name, name
	}
	return probs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readDashboards reads every *.json of dir.
func readDashboards(t *testing.T, dir string) map[string]*dashboardFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dashboardFile{}
	for _, p := range paths {
		d, err := readDashboard(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = d
	}
	return out
}

// newLinter reads the recorded series from the repository's rule files and
// the exporter's metric families from its collectors.
func newLinter(t *testing.T) *linter {
	t.Helper()
	root, err := alerting.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	l := &linter{recorded: map[string]bool{}, exported: exporterMetrics(t, root)}
	for _, f := range []string{"fspair.rules.yml", "fspair-kdb.rules.yml", "fspair.alerts.yml"} {
		rf, err := alerting.ReadRuleFile(filepath.Join(root, "rules", f))
		if err != nil {
			t.Fatalf("read the rules the dashboards are built on (go run ./rules/gen -out rules/): %v", err)
		}
		for _, r := range rf.Records() {
			l.recorded[r] = true
		}
	}
	// Recorded only when rules/kdb/site.yaml has entries (rules/README.md).
	l.recorded["fspair_kdb_site_measurement"] = true
	if len(l.recorded) < 30 {
		t.Fatalf("only %d recorded series in rules/*.yml", len(l.recorded))
	}
	return l
}

// descName finds the metric families the exporter's collectors declare:
// diskDesc("x") is fspair_disk_x, deviceDesc("x") fspair_host_device_x,
// NewDesc("fspair_x") and BuildFQName(namespace, "a", "b") as written.
var descName = regexp.MustCompile(`(diskDesc|deviceDesc)\("([a-z0-9_]+)"|NewDesc\(\s*"(fspair_[a-z0-9_]+)"|BuildFQName\(namespace, "([a-z_]+)", "([a-z0-9_]+)"\)`)

func exporterMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	srcs, err := filepath.Glob(filepath.Join(root, "exporter", "collector", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range srcs {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range descName.FindAllStringSubmatch(string(b), -1) {
			switch {
			case m[1] == "diskDesc":
				out["fspair_disk_"+m[2]] = true
			case m[1] == "deviceDesc":
				out["fspair_host_device_"+m[2]] = true
			case m[3] != "":
				out[m[3]] = true
			default:
				out["fspair_"+m[4]+"_"+m[5]] = true
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d metric declarations in exporter/collector: the pattern is stale", len(out))
	}
	return out
}

// TestDashboards lints every committed dashboard: the static rules, the
// rules across files, and every query parsed by a real Prometheus.
func TestDashboards(t *testing.T) {
	l := newLinter(t)
	files := readDashboards(t, ".")
	if len(files) < 4 {
		t.Fatalf("%d dashboards in dashboards/, want at least 4: run scripts/dashboards.sh generate", len(files))
	}
	s := promStack(t)
	probs := lintSet(files)
	nq := 0
	for _, name := range sortedKeys(files) {
		ps, qs := l.lint(files[name])
		ps = append(ps, checkPromQL(t, s, qs)...)
		nq += len(qs)
		for _, p := range ps {
			probs = append(probs, problem{p.rule, name + ": " + p.where, p.msg})
		}
	}
	for _, p := range probs {
		t.Error(p)
	}
	t.Logf("%d dashboards, %d queries linted", len(files), nq)
}

// TestLinterRejects feeds the linter one bad dashboard per rule
// (testdata/<rule>--<case>.json): each must break its rule and no other, so
// that every rule is shown to bite. testdata/good.json must pass them all.
func TestLinterRejects(t *testing.T) {
	l := newLinter(t)
	s := promStack(t)
	lintFile := func(t *testing.T, path string) []problem {
		d, err := readDashboard(path)
		if err != nil {
			t.Fatal(err)
		}
		ps, qs := l.lint(d)
		return append(ps, checkPromQL(t, s, qs)...)
	}
	t.Run("good", func(t *testing.T) {
		for _, p := range lintFile(t, filepath.Join("testdata", "good.json")) {
			t.Errorf("good.json: %s", p)
		}
	})
	paths, err := filepath.Glob(filepath.Join("testdata", "*--*.json"))
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, path := range paths {
		base := strings.TrimSuffix(filepath.Base(path), ".json")
		rule := strings.SplitN(base, "--", 2)[0]
		covered[rule] = true
		t.Run(base, func(t *testing.T) {
			got := lintFile(t, path)
			if len(got) == 0 {
				t.Fatalf("%s passed the lint; it must break %s", path, rule)
			}
			for _, p := range got {
				if p.rule != rule {
					t.Errorf("%s breaks %s, want only %s (fix the fixture): %s", path, p.rule, rule, p)
				}
			}
			t.Logf("rejected as expected: %v", got)
		})
	}
	t.Run("set", func(t *testing.T) {
		files := map[string]*dashboardFile{}
		for _, name := range []string{"fspair-a.json", "fspair-b.json"} {
			d, err := readDashboard(filepath.Join("testdata", "set", name))
			if err != nil {
				t.Fatal(err)
			}
			files[name] = d
		}
		got := lintSet(files)
		want := map[string]bool{ruleUID: false, ruleUnique: false}
		for _, p := range got {
			want[p.rule] = true
		}
		for rule, seen := range want {
			if !seen {
				t.Errorf("testdata/set: no %s problem among %v", rule, got)
			}
		}
	})
	covered[ruleUID], covered[ruleUnique] = true, true
	for _, rule := range []string{
		ruleTemplateDatasource, ruleTemplateJob, ruleTemplateInstance, ruleTemplateQuery, rulePanelDatasource,
		rulePanelTitleDesc, rulePanelUnits, rulePanelTargets, ruleTargetRateInterval, ruleTargetCounter,
		ruleTargetJobInstance, ruleTargetMetric, ruleTargetVariables, ruleTargetPromQL,
	} {
		if !covered[rule] {
			t.Errorf("no fixture testdata/%s--<case>.json shows that rule %s rejects a bad dashboard", rule, rule)
		}
	}
}
