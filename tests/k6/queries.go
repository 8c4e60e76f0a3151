// Package k6 holds the k6 load tests of fspair (scrape load, PromQL load of
// the dashboards, and a load-test workflow on a web service in a lab VM) and
// the helpers they share: reading the dashboards' queries and expanding
// their template variables against a live Prometheus, as Grafana would.
package k6

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Query is one panel query of a dashboard.
type Query struct {
	Dashboard string `json:"dashboard"` // the dashboard's uid
	Panel     string `json:"panel"`     // the panel's title
	Expr      string `json:"expr"`
}

// Variable is a dashboard template variable.
type Variable struct {
	Name, Type, Query string
	Options           []string // custom variables' values
}

// Dashboard is what the load needs of one dashboard JSON file.
type Dashboard struct {
	UID       string
	Variables []Variable
	Queries   []Query
}

// ReadDashboards reads every dashboards/*.json.
func ReadDashboards(dir string) ([]Dashboard, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no dashboards in %s", dir)
	}
	var out []Dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read dashboard: %w", err)
		}
		var raw struct {
			UID        string `json:"uid"`
			Templating struct {
				List []struct {
					Name    string `json:"name"`
					Type    string `json:"type"`
					Query   any    `json:"query"`
					Options []struct {
						Value any `json:"value"`
					} `json:"options"`
				} `json:"list"`
			} `json:"templating"`
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, fmt.Errorf("parse dashboard %s: %w", f, err)
		}
		d := Dashboard{UID: raw.UID}
		for _, v := range raw.Templating.List {
			q := ""
			switch x := v.Query.(type) {
			case string:
				q = x
			case map[string]any:
				q, _ = x["query"].(string)
			}
			vr := Variable{Name: v.Name, Type: v.Type, Query: q}
			for _, o := range v.Options {
				if s, ok := o.Value.(string); ok {
					vr.Options = append(vr.Options, s)
				}
			}
			if vr.Type == "custom" && len(vr.Options) == 0 {
				vr.Options = strings.Split(q, ",")
			}
			d.Variables = append(d.Variables, vr)
		}
		for _, p := range raw.Panels {
			d.Queries = append(d.Queries, panelQueries(d.UID, p)...)
		}
		out = append(out, d)
	}
	return out, nil
}

// panelQueries collects the targets of a panel and of the panels a row holds.
func panelQueries(uid string, raw json.RawMessage) []Query {
	var p struct {
		Title   string                  `json:"title"`
		Targets []struct{ Expr string } `json:"targets"`
		Panels  []json.RawMessage       `json:"panels"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return nil
	}
	var out []Query
	for _, t := range p.Targets {
		if strings.TrimSpace(t.Expr) != "" {
			out = append(out, Query{Dashboard: uid, Panel: p.Title, Expr: t.Expr})
		}
	}
	for _, c := range p.Panels {
		out = append(out, panelQueries(uid, c)...)
	}
	return out
}

// Grafana's built-in interval variables, as a 15 s scrape interval and a
// 15 minute range give them.
var builtins = map[string]string{
	"__rate_interval": "1m", "__interval": "15s", "__range": "15m", "__range_s": "900",
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)|\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]`)

// expand replaces variable references in s with their values.
func expand(s string, values map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		if v, ok := values[name]; ok {
			return v
		}
		if v, ok := builtins[name]; ok {
			return v
		}
		return m
	})
}

var labelValues = regexp.MustCompile(`^\s*label_values\((?:(.*),\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// Expand resolves each dashboard's variables in order against the
// Prometheus at prom, as Grafana does when the dashboard opens with its
// defaults (the first value of each), and returns its queries with the
// variables substituted. A variable that has no value (the dashboard would
// show nothing for it) is reported in missing and expands to the empty
// string; an error means Prometheus could not be asked.
func Expand(ctx context.Context, prom string, ds []Dashboard) (queries []Query, missing []string, err error) {
	for _, d := range ds {
		values := map[string]string{}
		for _, v := range d.Variables {
			switch v.Type {
			case "datasource", "constant", "interval", "textbox", "adhoc":
				continue
			case "custom":
				if len(v.Options) > 0 {
					values[v.Name] = strings.TrimSpace(v.Options[0])
				}
				continue
			}
			values[v.Name] = ""
			m := labelValues.FindStringSubmatch(expand(v.Query, values))
			if m == nil {
				missing = append(missing, fmt.Sprintf("%s: variable %s: query %q is not label_values(...)", d.UID, v.Name, v.Query))
				continue
			}
			vals, err := seriesLabelValues(ctx, prom, m[1], m[2])
			if err != nil {
				return nil, nil, fmt.Errorf("dashboard %s variable %s: %w", d.UID, v.Name, err)
			}
			if len(vals) == 0 {
				missing = append(missing, fmt.Sprintf("%s: variable %s: %s has no values", d.UID, v.Name, expand(v.Query, values)))
				continue
			}
			values[v.Name] = vals[0]
		}
		for _, q := range d.Queries {
			q.Expr = expand(q.Expr, values)
			queries = append(queries, q)
		}
	}
	return queries, missing, nil
}

// seriesLabelValues lists the values of label on the series matching
// match (all series when empty), sorted.
func seriesLabelValues(ctx context.Context, prom, match, label string) ([]string, error) {
	q := url.Values{}
	if strings.TrimSpace(match) != "" {
		q.Set("match[]", match)
	}
	u := fmt.Sprintf("%s/api/v1/label/%s/values?%s", strings.TrimRight(prom, "/"), label, q.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("label values of %s: %w", label, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Data   []string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("label values of %s: %w", label, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("label values of %s (match %s): %s", label, match, r.Error)
	}
	sort.Strings(r.Data)
	return r.Data, nil
}
