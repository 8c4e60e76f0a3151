package k6

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testDashboard has a query variable per kind of selection, a custom
// multi-value one a row repeats over, and a panel below a row that is not
// collapsed (so the row's panels follow it in the top-level list).
const testDashboard = `{
  "uid": "t",
  "templating": {"list": [
    {"name": "datasource", "type": "datasource", "query": "prometheus"},
    {"name": "job", "type": "query", "query": {"query": "label_values(up, job)", "refId": "V"}, "multi": true, "includeAll": true, "allValue": ".+"},
    {"name": "domain", "type": "query", "query": "label_values(info{job=~\"$job\"}, domain)", "sort": 1},
    {"name": "host", "type": "query", "query": "label_values(info{domain=\"$domain\"}, host)", "multi": true},
    {"name": "class", "type": "custom", "query": "web,mail", "multi": true, "includeAll": true,
     "current": {"text": ["All"], "value": ["$__all"]}}
  ]},
  "panels": [
    {"type": "stat", "title": "Overview", "targets": [
      {"refId": "A", "expr": "sum(rate(x_total{job=~\"$job\", domain=\"$domain\"}[$__rate_interval]))", "instant": true, "range": false},
      {"refId": "B", "expr": "hidden", "hide": true}
    ]},
    {"type": "row", "title": "Per class: $class", "repeat": "class", "panels": []},
    {"type": "table", "title": "Pairs: $class", "targets": [{"refId": "A", "expr": "pairs{class=~\"$class\", host=~\"$host\"}"}]},
    {"type": "row", "title": "Collapsed", "collapsed": true, "panels": [
      {"type": "timeseries", "title": "Range $__range", "targets": [{"refId": "A", "expr": "y[$__range] offset $__interval"}]}
    ]}
  ]
}`

// fakeProm answers the label values the variables ask for, and records the
// match[] selectors.
func fakeProm(t *testing.T, asked *[]string) *httptest.Server {
	t.Helper()
	values := map[string][]string{
		"job":    {"fspair"},
		"domain": {"vm-b", "vm-a"},
		"host":   {"h.1", "h2"},
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/api/v1/label/"), "/values")
		*asked = append(*asked, name+" "+r.URL.Query().Get("match[]"))
		if r.URL.Query().Get("start") == "" || r.URL.Query().Get("end") == "" {
			t.Errorf("label values of %s asked without the time range", name)
		}
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": values[name]})
	}))
}

// TestOpen checks the variables, repeats and built-ins Grafana would give
// testDashboard opened on 5 minutes at a 15 s scrape interval.
func TestOpen(t *testing.T) {
	d, err := parseDashboard([]byte(testDashboard))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	srv := fakeProm(t, &asked)
	defer srv.Close()
	w := Window{End: time.Unix(1_800_000_000, 0), Range: 5 * time.Minute, Scrape: 15 * time.Second}
	o, err := Open(context.Background(), srv.URL, d, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Each variable's query sees the values of those before it: All of a
	// variable with an All value is that value; a single-value variable
	// takes the first value in its sort order.
	wantAsked := []string{`job up`, `domain info{job=~".+"}`, `host info{domain="vm-a"}`}
	if strings.Join(asked, "\n") != strings.Join(wantAsked, "\n") {
		t.Errorf("label values asked:\n%s\nwant:\n%s", strings.Join(asked, "\n"), strings.Join(wantAsked, "\n"))
	}
	var vars []string
	for _, q := range o.Variables {
		vars = append(vars, q.Panel+": "+q.Expr)
	}
	wantVars := []string{`variable job: up`, `variable domain: info{job=~".+"}`, `variable host: info{domain="vm-a"}`}
	if strings.Join(vars, "\n") != strings.Join(wantVars, "\n") {
		t.Errorf("variable queries:\n%s\nwant:\n%s", strings.Join(vars, "\n"), strings.Join(wantVars, "\n"))
	}
	// A multi-value variable without All takes its first value, escaped
	// for a regular expression; the repeated row's panels come once per
	// class, the row's title and the panel's with the value; $__range is
	// the window, $__interval the scrape interval, $__rate_interval four of
	// them; the hidden target is not run.
	var got []string
	for _, q := range o.Panels {
		got = append(got, strings.Join([]string{q.Panel, q.RefID, q.Repeat, q.Expr}, " | "))
	}
	want := []string{
		`Overview | A |  | sum(rate(x_total{job=~".+", domain="vm-a"}[1m]))`,
		`Pairs: web | A | class=web | pairs{class=~"web", host=~"h\\.1"}`,
		`Pairs: mail | A | class=mail | pairs{class=~"mail", host=~"h\\.1"}`,
		`Range 300s | A |  | y[300s] offset 15s`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("panel queries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !o.Panels[0].Instant || o.Panels[1].Instant {
		t.Errorf("instant flags: %v %v, want true false", o.Panels[0].Instant, o.Panels[1].Instant)
	}
	if o.Hidden != 1 {
		t.Errorf("%d hidden targets, want 1", o.Hidden)
	}

	// Chosen selections: All of a variable without an All value is the
	// list of its values; several values of a multi-value variable join
	// as (a|b).
	o, err = Open(context.Background(), srv.URL, d, w, map[string]string{"class": "mail", "host": "h.1,h2", "domain": "vm-b"})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, q := range o.Panels {
		got = append(got, q.Expr)
	}
	want = []string{
		`sum(rate(x_total{job=~".+", domain="vm-b"}[1m]))`,
		`pairs{class=~"mail", host=~"(h\\.1|h2)"}`,
		`y[300s] offset 15s`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("panel queries with -var:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	d.Panels[1].Repeat = ""
	o, err = Open(context.Background(), srv.URL, d, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := o.Panels[1].Expr; e != `pairs{class=~"(web|mail)", host=~"h\\.1"}` {
		t.Errorf("class at All without an All value: %s, want (web|mail)", e)
	}
}

// TestWindow checks Grafana's interval variables at a 15 s scrape interval.
func TestWindow(t *testing.T) {
	for _, c := range []struct {
		rng            time.Duration
		step, rateIntv string
	}{
		{5 * time.Minute, "15s", "1m"},
		{6 * time.Hour, "21s", "1m"},
		{24 * time.Hour, "86s", "101s"},
	} {
		w := Window{Range: c.rng, Scrape: 15 * time.Second}
		b := w.builtins()
		if b["__interval"] != c.step || b["__rate_interval"] != c.rateIntv {
			t.Errorf("range %s: $__interval %s, $__rate_interval %s; want %s, %s", c.rng, b["__interval"], b["__rate_interval"], c.step, c.rateIntv)
		}
	}
}
