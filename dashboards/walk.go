package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// What the tests read of a dashboard: its panels' and variables' queries,
// Grafana's variables in them and the queries that may come back empty on
// synthetic disks. Outside this package the lab fleet (tests/fleet) walks
// the same queries through Thanos Query.

// Query is one PromQL expression of a dashboard: a panel's target, as
// Grafana runs it (Instant, Range), or the selector of a query variable.
type Query struct {
	Where          string // panel "X" target A, or variable "y"
	Expr           string
	Instant, Range bool
}

// Queries reads the dashboard at path and returns every query of its panels
// (rows' and text panels have none) and variables, in layout order.
func Queries(path string) ([]Query, error) {
	d, err := readDashboard(path)
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, q := range variableQueries(d) {
		out = append(out, Query{Where: q.where, Expr: q.expr, Instant: true})
	}
	for _, p := range flatten(d.Panels) {
		if p.Type == panelTypeRow || p.Type == panelTypeText {
			continue
		}
		for _, t := range p.Targets {
			out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr, Instant: t.Instant, Range: t.Range})
		}
	}
	return out, nil
}

// query is one PromQL expression of a dashboard and where it sits.
type query struct {
	where string // panel "X" target A, or variable "y"
	expr  string
}

// variableQueries are the selectors inside the query variables' label_values().
func variableQueries(d *dashboardFile) []query {
	var out []query
	for _, v := range d.Templating.List {
		s, _ := v.Query.(string)
		if m := labelValuesCall.FindStringSubmatch(s); v.Type == "query" && m != nil {
			out = append(out, query{fmt.Sprintf("variable %q", v.Name), m[1]})
		}
	}
	return out
}

// Panel types without queries.
const panelTypeRow, panelTypeText = "row", "text"

// dashboardFile is the part of a dashboard's JSON the rules read.
type dashboardFile struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *datasourceRef `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
		Overrides []struct {
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Options struct {
		YAxis *struct {
			Unit string `json:"unit"`
		} `json:"yAxis"`
	} `json:"options"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row's panels
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
	Instant    bool           `json:"instant"`
	Range      bool           `json:"range"`
}

type variable struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Query      any            `json:"query"`
	Datasource *datasourceRef `json:"datasource"`
	Multi      bool           `json:"multi"`
	IncludeAll bool           `json:"includeAll"`
	AllValue   string         `json:"allValue"`
	Refresh    int            `json:"refresh"`
}

// Grafana's built-in variables the queries may use.
var builtinVariables = map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}

var labelValuesCall = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// flatten lists the panels in layout order, a collapsed row's after it.
func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// isRegexpGroup tells a label_replace replacement ($1) from a variable.
func isRegexpGroup(name string) bool {
	return strings.Trim(name, "0123456789") == ""
}

func readDashboard(path string) (*dashboardFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboardFile
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return &d, nil
}

// grafanaVariable matches a Grafana variable reference: $name, ${name},
// ${name:format} (https://grafana.com/docs/grafana/latest/dashboards/variables/variable-syntax/).
var grafanaVariable = regexp.MustCompile(`\$(\w+)|\$\{(\w+)(?::[^}]*)?\}`)

// Substitute replaces the Grafana variables of expr: the built-in ranges
// by rangeValue, the others from values (default: the regex .+, which
// keeps any matcher valid).
func Substitute(expr, rangeValue string, values map[string]string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		m := grafanaVariable.FindStringSubmatch(v)
		name := m[1] + m[2]
		switch {
		case builtinVariables[name]:
			return rangeValue
		case isRegexpGroup(name):
			return v
		case values[name] != "":
			return values[name]
		}
		return ".+"
	})
}

// EmptyReasons are the queries that may come back empty on the synthetic
// disks (tests/alerting.SyntheticTarget), and why; every other query must
// return data. The dashboards' tests and the lab fleet (tests/fleet) walk
// the same list.
var EmptyReasons = []struct {
	Pattern *regexp.Regexp
	Why     string
}{
	{regexp.MustCompile(`libvirt_domain_block_stats_`), "no libvirt exporter runs in the test"},
	{regexp.MustCompile(`k6_http_`), "no k6 load test writes into the test's Prometheus (tests/k6 checks them live)"},
	{regexp.MustCompile(`fspair_disk_host_cache_`), "tests/alerting's synthetic target does not serve the page-cache counters"},
	{regexp.MustCompile(`^ALERTS\{`), "no alert fires within the test: their `for` is 15 m to 1 h"},
	{regexp.MustCompile(`source="site"|fspair_kdb_site_measurement`), "rules/kdb/site.yaml holds no site verdicts"},
}

// WhyEmpty says why expr may come back empty on the synthetic disks, or "".
func WhyEmpty(expr string) string {
	for _, r := range EmptyReasons {
		if r.Pattern.MatchString(expr) {
			return r.Why
		}
	}
	return ""
}
