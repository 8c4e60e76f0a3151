// Package k6 holds the k6 load tests of fspair (scrape load, PromQL load of
// the dashboards, and a load-test workflow on a web service in a lab VM),
// the query walk of the dashboards against a live Prometheus, and the
// helpers they share: reading the dashboards' queries and opening them on
// a live Prometheus as Grafana would (template variables resolved, repeated
// rows copied per value, built-in interval variables substituted).
//
// The query walk (build tag querywalk) runs every panel and variable query
// of dashboards/*.json through Prometheus's HTTP API, instant and range,
// and fails unless each parses and returns data; see walk_test.go and
// README.md:
//
//	go test -tags querywalk -count=1 -v ./tests/k6/ -run TestQueryWalk -prometheus http://127.0.0.1:19090
package k6

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Query is one query of a dashboard: a panel's target, or the selector of
// a query variable.
type Query struct {
	Dashboard string `json:"dashboard"` // the dashboard's uid
	Panel     string `json:"panel"`     // the panel's title, variables expanded; "variable NAME" for a variable
	RefID     string `json:"refId,omitempty"`
	Expr      string `json:"expr"`
	// Template is Expr as the dashboard writes it, variables unexpanded.
	Template string `json:"-"`
	// Instant is set when the panel shows the query's value at the end of
	// the range rather than over it.
	Instant bool `json:"instant,omitempty"`
	// Repeat is NAME=VALUE for a copy of a repeated row or panel.
	Repeat string `json:"repeat,omitempty"`
	// Variable names the variable whose selector this is ("" for a panel).
	Variable string `json:"-"`
}

// Variable is a dashboard template variable, with what Grafana needs to
// give it a value.
type Variable struct {
	Name, Type, Query string
	Options           []string // custom variables' values
	Multi, IncludeAll bool
	AllValue          string   // the value All stands for; "" for the list of every value
	Current           []string // the saved selection; "$__all" for All; empty when none is saved
	Sort              int      // Grafana's variable sort: 0 as returned, 1/2 alphabetical, 3/4 numerical, 5/6 case-insensitive
	Regex             string   // filters the values, keeping the first capture group
}

// Target is one query of a panel as the dashboard writes it.
type Target struct {
	RefID, Expr string
	Instant     bool
	Hide        bool // Grafana does not run hidden targets
}

// Panel is a panel with targets, in dashboard order.
type Panel struct {
	Title string
	// Repeat is the variable the panel is copied over: its own repeat, or
	// that of the row it sits in.
	Repeat  string
	Targets []Target
}

// Dashboard is what the load and the walk need of one dashboard JSON file.
type Dashboard struct {
	UID       string
	Variables []Variable
	Panels    []Panel
}

// allValue is Grafana's value for the All option of a variable.
const allValue = "$__all"

// rawPanel is a panel or row of the dashboard JSON.
type rawPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Repeat  string `json:"repeat"`
	Targets []struct {
		RefID   string `json:"refId"`
		Expr    string `json:"expr"`
		Instant bool   `json:"instant"`
		Range   *bool  `json:"range"`
		Hide    bool   `json:"hide"`
	} `json:"targets"`
	Panels []rawPanel `json:"panels"`
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
		d, err := parseDashboard(b)
		if err != nil {
			return nil, fmt.Errorf("parse dashboard %s: %w", f, err)
		}
		out = append(out, d)
	}
	return out, nil
}

func parseDashboard(b []byte) (Dashboard, error) {
	var raw struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Query      any    `json:"query"`
				Multi      bool   `json:"multi"`
				IncludeAll bool   `json:"includeAll"`
				AllValue   string `json:"allValue"`
				Sort       int    `json:"sort"`
				Regex      string `json:"regex"`
				Current    struct {
					Value any `json:"value"`
				} `json:"current"`
				Options []struct {
					Value any `json:"value"`
				} `json:"options"`
			} `json:"list"`
		} `json:"templating"`
		Panels []rawPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Dashboard{}, err
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
		vr := Variable{Name: v.Name, Type: v.Type, Query: q, Multi: v.Multi, IncludeAll: v.IncludeAll,
			AllValue: v.AllValue, Sort: v.Sort, Regex: v.Regex, Current: stringList(v.Current.Value)}
		for _, o := range v.Options {
			if s, ok := o.Value.(string); ok && s != allValue {
				vr.Options = append(vr.Options, s)
			}
		}
		if vr.Type == "custom" && len(vr.Options) == 0 {
			for _, o := range strings.Split(q, ",") {
				if o = strings.TrimSpace(o); o != "" {
					vr.Options = append(vr.Options, o)
				}
			}
		}
		d.Variables = append(d.Variables, vr)
	}
	// A row that is not collapsed holds no panels: the ones below it, up to
	// the next row, are its own; a collapsed row nests them. Either way a
	// row's repeat copies them.
	rowRepeat := ""
	var add func(p rawPanel, repeat string)
	add = func(p rawPanel, repeat string) {
		if p.Type == "row" {
			rowRepeat = p.Repeat
			for _, c := range p.Panels {
				add(c, p.Repeat)
			}
			return
		}
		if p.Repeat != "" {
			repeat = p.Repeat
		}
		pn := Panel{Title: p.Title, Repeat: repeat}
		for _, t := range p.Targets {
			if strings.TrimSpace(t.Expr) == "" {
				continue
			}
			// Grafana runs a target as a range query unless it asks for the
			// instant value only.
			instant := t.Instant && (t.Range == nil || !*t.Range)
			pn.Targets = append(pn.Targets, Target{RefID: t.RefID, Expr: t.Expr, Instant: instant, Hide: t.Hide})
		}
		if len(pn.Targets) > 0 {
			d.Panels = append(d.Panels, pn)
		}
		for _, c := range p.Panels {
			add(c, repeat)
		}
	}
	for _, p := range raw.Panels {
		if p.Type == "row" {
			add(p, "")
			continue
		}
		add(p, rowRepeat)
	}
	return d, nil
}

// stringList reads a saved selection: a string or a list of strings.
func stringList(v any) []string {
	switch x := v.(type) {
	case string:
		if x != "" {
			return []string{x}
		}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// Window is the time range a dashboard is opened on, and the data source's
// scrape interval (deploy/grafana's data source sets timeInterval 15s), from
// which Grafana derives its built-in interval variables.
type Window struct {
	End    time.Time
	Range  time.Duration
	Scrape time.Duration
}

// maxDataPoints is about the width of a panel in pixels, what Grafana
// divides the range by for $__interval.
const maxDataPoints = 1000

// Step is $__interval: the range over the panel's points, not below the
// scrape interval. Grafana rounds the quotient to a round interval; up to
// a range of 1,000 scrape intervals (about 4 hours at 15 s) both give the
// scrape interval.
func (w Window) Step() time.Duration {
	s := (w.Range / maxDataPoints).Truncate(time.Second)
	if s < w.Scrape {
		s = w.Scrape
	}
	return s
}

// RateInterval is $__rate_interval: the larger of $__interval plus one
// scrape interval and four scrape intervals, so that a rate always spans at
// least two samples (Grafana's Prometheus data source documentation).
func (w Window) RateInterval() time.Duration {
	r := w.Step() + w.Scrape
	if m := 4 * w.Scrape; r < m {
		r = m
	}
	return r
}

// Start is the start of the window.
func (w Window) Start() time.Time { return w.End.Add(-w.Range) }

// builtins are Grafana's built-in variables for the window.
func (w Window) builtins() map[string]string {
	s := int64(w.Range / time.Second)
	return map[string]string{
		"__interval":      promDuration(w.Step()),
		"__interval_ms":   strconv.FormatInt(w.Step().Milliseconds(), 10),
		"__rate_interval": promDuration(w.RateInterval()),
		"__range":         strconv.FormatInt(s, 10) + "s",
		"__range_s":       strconv.FormatInt(s, 10),
		"__range_ms":      strconv.FormatInt(w.Range.Milliseconds(), 10),
	}
}

// promDuration writes d as a PromQL duration in whole seconds or minutes.
func promDuration(d time.Duration) string {
	s := int64(d / time.Second)
	if s > 0 && s%60 == 0 {
		return strconv.FormatInt(s/60, 10) + "m"
	}
	return strconv.FormatInt(s, 10) + "s"
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)|\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]`)

// expand replaces variable references in s with their values; references
// to variables with no value stay as they are.
func expand(s string, values map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		if v, ok := values[sub[1]+sub[2]+sub[3]]; ok {
			return v
		}
		return m
	})
}

// Grafana's Prometheus data source escapes a single-value variable for a
// string literal and a multi-value one (each value) for a regular
// expression inside a string literal, and joins several values as (a|b)
// (public/app/plugins/datasource/prometheus: interpolateQueryExpr).
var regexSpecial = regexp.MustCompile(`[$^*{}\[\]'+?.()|]`)

func regularEscape(v string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\\'`).Replace(v)
}

func regexEscape(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\\\`)
	return regexSpecial.ReplaceAllString(v, `\\$0`)
}

// format is what replaces $NAME in a query for the selected values.
func format(v Variable, values []string) string {
	if !v.Multi && !v.IncludeAll {
		if len(values) == 0 {
			return ""
		}
		return regularEscape(values[0])
	}
	esc := make([]string, len(values))
	for i, s := range values {
		esc[i] = regexEscape(s)
	}
	if len(esc) == 1 {
		return esc[0]
	}
	return "(" + strings.Join(esc, "|") + ")"
}

// Selection is a variable's value on a dashboard as opened.
type Selection struct {
	Name    string
	Options []string // the values the variable offers
	Values  []string // the selected ones (every option for All)
	All     bool
	Text    string // what replaces $NAME in queries
}

// Opened is a dashboard as Grafana shows it when opened on a window: its
// variables' selections, the selector of each query variable, and each
// panel query with the variables substituted, repeated rows and panels
// copied per selected value.
type Opened struct {
	UID        string
	Selections []Selection
	// Variables are the query variables' selectors (what their values are
	// read from), in variable order.
	Variables []Query
	Panels    []Query
	// Hidden counts targets Grafana does not run (hide: true).
	Hidden int
	// Missing says which variables have no value: Grafana shows their
	// panels empty (or, with All standing for .+, unfiltered).
	Missing []string
}

var (
	labelValuesQuery = regexp.MustCompile(`^\s*label_values\((?:(.*),\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)
	queryResultQuery = regexp.MustCompile(`^\s*query_result\((.+)\)\s*$`)
	metricsQuery     = regexp.MustCompile(`^\s*metrics\((.*)\)\s*$`)
)

// Open resolves d's variables in order against the Prometheus at prom, as
// Grafana does when the dashboard opens on the window w with its saved
// selections: a variable without one takes All when it offers All and its
// first value otherwise. set overrides selections by variable name (a
// value, several joined by commas, or "All"). An error means Prometheus
// could not be asked or a variable's query is not one Grafana's Prometheus
// data source knows.
func Open(ctx context.Context, prom string, d Dashboard, w Window, set map[string]string) (*Opened, error) {
	o := &Opened{UID: d.UID}
	values := w.builtins()
	byName := map[string]Selection{}
	vars := map[string]Variable{}
	for _, v := range d.Variables {
		vars[v.Name] = v
		var options []string
		switch v.Type {
		case "datasource", "adhoc":
			// The data source is the one asked; ad hoc filters start empty.
			continue
		case "constant", "textbox":
			values[v.Name] = v.Query
			continue
		case "custom", "interval":
			options = v.Options
		case "query":
			q := expand(v.Query, values)
			sel, opts, err := variableOptions(ctx, prom, q, w)
			if err != nil {
				return nil, fmt.Errorf("dashboard %s variable %s: %w", d.UID, v.Name, err)
			}
			if sel != "" {
				o.Variables = append(o.Variables, Query{Dashboard: d.UID, Panel: "variable " + v.Name,
					Expr: sel, Template: v.Query, Instant: true, Variable: v.Name})
			}
			options, err = filterOptions(opts, v.Regex)
			if err != nil {
				return nil, fmt.Errorf("dashboard %s variable %s: regex %q: %w", d.UID, v.Name, v.Regex, err)
			}
			sortOptions(options, v.Sort)
		default:
			return nil, fmt.Errorf("dashboard %s variable %s: type %q unknown to the walk", d.UID, v.Name, v.Type)
		}
		s := selectValues(v, options, set)
		if s.All && v.AllValue != "" {
			s.Text = v.AllValue
		} else {
			s.Text = format(v, s.Values)
		}
		if len(options) == 0 {
			o.Missing = append(o.Missing, fmt.Sprintf("%s: variable %s: %s has no values", d.UID, v.Name, expand(v.Query, values)))
		}
		values[v.Name] = s.Text
		byName[v.Name] = s
		o.Selections = append(o.Selections, s)
	}
	for _, p := range d.Panels {
		copies := []map[string]string{values}
		repeatOf := []string{""}
		if p.Repeat != "" {
			s, ok := byName[p.Repeat]
			if !ok {
				return nil, fmt.Errorf("dashboard %s panel %q repeats over unknown variable %s", d.UID, p.Title, p.Repeat)
			}
			copies, repeatOf = nil, nil
			for _, val := range s.Values {
				c := make(map[string]string, len(values))
				for k, x := range values {
					c[k] = x
				}
				c[p.Repeat] = format(vars[p.Repeat], []string{val})
				copies = append(copies, c)
				repeatOf = append(repeatOf, p.Repeat+"="+val)
			}
			if len(copies) == 0 {
				o.Missing = append(o.Missing, fmt.Sprintf("%s: panel %q: repeated over %s, which has no value: not shown", d.UID, p.Title, p.Repeat))
			}
		}
		for i, vals := range copies {
			// Titles show the values as they are, not escaped.
			titleVals := w.builtins()
			for k, s := range byName {
				titleVals[k] = strings.Join(s.Values, " + ")
				if s.All {
					titleVals[k] = "All"
				}
			}
			if repeatOf[i] != "" {
				_, val, _ := strings.Cut(repeatOf[i], "=")
				titleVals[p.Repeat] = val
			}
			title := expand(p.Title, titleVals)
			for _, t := range p.Targets {
				if t.Hide {
					o.Hidden++
					continue
				}
				o.Panels = append(o.Panels, Query{Dashboard: d.UID, Panel: title, RefID: t.RefID,
					Expr: expand(t.Expr, vals), Template: t.Expr, Instant: t.Instant, Repeat: repeatOf[i]})
			}
		}
	}
	return o, nil
}

// selectValues picks the values of v among options: set's, else the saved
// selection if still offered, else All or the first value.
func selectValues(v Variable, options []string, set map[string]string) Selection {
	s := Selection{Name: v.Name, Options: options}
	all := func() Selection {
		s.All, s.Values = true, options
		return s
	}
	if x, ok := set[v.Name]; ok {
		// Chosen by hand: taken as given, as Grafana takes a value from
		// the URL or typed into a variable that allows custom values.
		if x == "All" {
			return all()
		}
		s.Values = strings.Split(x, ",")
		return s
	}
	if want := v.Current; len(want) > 0 {
		if want[0] == allValue && v.IncludeAll {
			return all()
		}
		var keep []string
		for _, w := range want {
			for _, o := range options {
				if w == o {
					keep = append(keep, w)
					break
				}
			}
		}
		if len(keep) > 0 && (v.Multi || len(keep) == 1) {
			s.Values = keep
			return s
		}
	}
	if v.IncludeAll {
		return all()
	}
	if len(options) > 0 {
		s.Values = options[:1]
	}
	return s
}

// variableOptions runs a query variable's query (already expanded) as
// Grafana's Prometheus data source does and returns the PromQL selector or
// expression it reads ("" for none) and the values it offers.
func variableOptions(ctx context.Context, prom, q string, w Window) (string, []string, error) {
	if m := labelValuesQuery.FindStringSubmatch(q); m != nil {
		vals, err := LabelValues(ctx, prom, m[1], m[2], w)
		return strings.TrimSpace(m[1]), vals, err
	}
	if m := metricsQuery.FindStringSubmatch(q); m != nil {
		names, err := LabelValues(ctx, prom, "", "__name__", w)
		if err != nil {
			return "", nil, err
		}
		re, err := regexp.Compile(strings.TrimSpace(m[1]))
		if err != nil {
			return "", nil, fmt.Errorf("metrics(%s): %w", m[1], err)
		}
		var out []string
		for _, n := range names {
			if re.MatchString(n) {
				out = append(out, n)
			}
		}
		return "", out, nil
	}
	if m := queryResultQuery.FindStringSubmatch(q); m != nil {
		// Each series as text, name{labels} value timestamp; the
		// variable's regex picks the value out of it.
		r, err := instantQuery(ctx, prom, m[1], w.End)
		if err != nil {
			return "", nil, err
		}
		var out []string
		for _, s := range r.Data.Result {
			out = append(out, s.text())
		}
		return m[1], out, nil
	}
	return "", nil, fmt.Errorf("query %q: not label_values(...), query_result(...) or metrics(...)", q)
}

// filterOptions applies a variable's regex: values that do not match go,
// and the first capture group, if any, replaces the value.
func filterOptions(opts []string, regex string) ([]string, error) {
	regex = strings.TrimSpace(regex)
	if regex == "" {
		return append([]string(nil), opts...), nil
	}
	// Grafana writes the regex as /re/flags.
	if strings.HasPrefix(regex, "/") {
		if i := strings.LastIndex(regex, "/"); i > 0 {
			if flags := regex[i+1:]; strings.Contains(flags, "i") {
				regex = "(?i)" + regex[1:i]
			} else {
				regex = regex[1:i]
			}
		}
	}
	re, err := regexp.Compile(regex)
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	for _, o := range opts {
		m := re.FindStringSubmatch(o)
		if m == nil {
			continue
		}
		v := o
		if len(m) > 1 {
			v = m[1]
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

var firstNumber = regexp.MustCompile(`[-+]?[0-9]*\.?[0-9]+`)

// sortOptions sorts values as Grafana's variable sort setting asks.
func sortOptions(v []string, how int) {
	num := func(s string) float64 {
		f, err := strconv.ParseFloat(firstNumber.FindString(s), 64)
		if err != nil {
			return 0
		}
		return f
	}
	switch how {
	case 1:
		sort.Strings(v)
	case 2:
		sort.Sort(sort.Reverse(sort.StringSlice(v)))
	case 3:
		sort.SliceStable(v, func(i, j int) bool { return num(v[i]) < num(v[j]) })
	case 4:
		sort.SliceStable(v, func(i, j int) bool { return num(v[i]) > num(v[j]) })
	case 5:
		sort.SliceStable(v, func(i, j int) bool { return strings.ToLower(v[i]) < strings.ToLower(v[j]) })
	case 6:
		sort.SliceStable(v, func(i, j int) bool { return strings.ToLower(v[i]) > strings.ToLower(v[j]) })
	}
}

// Expand opens each dashboard on the last 15 minutes, as Grafana does with
// its saved selections, against the Prometheus at prom, and returns the
// panels' queries with the variables substituted. A variable that has no
// value (the dashboard would show nothing for it) is reported in missing;
// an error means Prometheus could not be asked.
func Expand(ctx context.Context, prom string, ds []Dashboard) (queries []Query, missing []string, err error) {
	w := Window{End: time.Now(), Range: 15 * time.Minute, Scrape: 15 * time.Second}
	for _, d := range ds {
		o, err := Open(ctx, prom, d, w, nil)
		if err != nil {
			return nil, nil, err
		}
		queries = append(queries, o.Panels...)
		missing = append(missing, o.Missing...)
	}
	return queries, missing, nil
}

// APIError is an answer of Prometheus's HTTP API other than success: a
// query that does not parse comes back as HTTP 400, errorType bad_data.
type APIError struct {
	HTTPStatus int
	Type, Msg  string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.HTTPStatus, e.Type, e.Msg)
}

type apiSeries struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

// number is an instant sample's value.
func (s apiSeries) number() (float64, error) {
	if len(s.Value) != 2 {
		return 0, fmt.Errorf("sample %v: want [time, value]", s.Value)
	}
	return sampleNumber(s.Value[1])
}

// sampleNumber is a sample's value as the HTTP API writes it (a string).
func sampleNumber(v any) (float64, error) {
	str, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v: not a string", v)
	}
	return strconv.ParseFloat(str, 64)
}

// text writes a series as Grafana's query_result variables see it.
func (s apiSeries) text() string {
	name := s.Metric["__name__"]
	var labels []string
	for k, v := range s.Metric {
		if k != "__name__" {
			labels = append(labels, fmt.Sprintf("%s=%q", k, v))
		}
	}
	sort.Strings(labels)
	out := name + "{" + strings.Join(labels, ", ") + "}"
	if len(s.Value) == 2 {
		out += fmt.Sprintf(" %v %v", s.Value[1], s.Value[0])
	}
	return out
}

type apiResult struct {
	ResultType string          `json:"resultType"`
	Raw        json.RawMessage `json:"result"`
	Result     []apiSeries     `json:"-"`
}

type apiAnswer struct {
	Status    string    `json:"status"`
	ErrorType string    `json:"errorType"`
	Error     string    `json:"error"`
	Data      apiResult `json:"data"`
}

// get asks Prometheus's HTTP API and decodes the answer into out, whose
// Status, ErrorType and Error fields say whether it succeeded.
func get(ctx context.Context, prom, path string, params url.Values, out any) error {
	u := strings.TrimRight(prom, "/") + path + "?" + params.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ask prometheus: %w", err)
	}
	defer resp.Body.Close()
	var head struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
	}
	dec := json.NewDecoder(resp.Body)
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return &APIError{HTTPStatus: resp.StatusCode, Type: "undecodable", Msg: err.Error()}
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return &APIError{HTTPStatus: resp.StatusCode, Type: "undecodable", Msg: err.Error()}
	}
	if resp.StatusCode != http.StatusOK || head.Status != "success" {
		return &APIError{HTTPStatus: resp.StatusCode, Type: head.ErrorType, Msg: head.Error}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &APIError{HTTPStatus: resp.StatusCode, Type: "undecodable", Msg: err.Error()}
	}
	return nil
}

// decode fills Result for vector and matrix answers; a scalar or string
// counts as one series.
func (a *apiAnswer) decode() (int, error) {
	switch a.Data.ResultType {
	case "vector", "matrix":
		if err := json.Unmarshal(a.Data.Raw, &a.Data.Result); err != nil {
			return 0, fmt.Errorf("decode %s: %w", a.Data.ResultType, err)
		}
		return len(a.Data.Result), nil
	case "scalar", "string":
		return 1, nil
	}
	return 0, fmt.Errorf("unknown result type %q", a.Data.ResultType)
}

func instantQuery(ctx context.Context, prom, expr string, at time.Time) (*apiAnswer, error) {
	var a apiAnswer
	p := url.Values{"query": {expr}, "time": {unixTime(at)}}
	if err := get(ctx, prom, "/api/v1/query", p, &a); err != nil {
		return nil, err
	}
	if _, err := a.decode(); err != nil {
		return nil, err
	}
	return &a, nil
}

// Instant runs expr at time at (/api/v1/query) and returns how many series
// it gives.
func Instant(ctx context.Context, prom, expr string, at time.Time) (int, error) {
	a, err := instantQuery(ctx, prom, expr, at)
	if err != nil {
		return 0, err
	}
	if a.Data.ResultType == "scalar" || a.Data.ResultType == "string" {
		return 1, nil
	}
	return len(a.Data.Result), nil
}

// Range runs expr over the window w at its step (/api/v1/query_range) and
// returns how many series it gives.
func Range(ctx context.Context, prom, expr string, w Window) (int, error) {
	var a apiAnswer
	p := url.Values{"query": {expr}, "start": {unixTime(w.Start())}, "end": {unixTime(w.End)},
		"step": {strconv.FormatFloat(w.Step().Seconds(), 'f', -1, 64)}}
	if err := get(ctx, prom, "/api/v1/query_range", p, &a); err != nil {
		return 0, err
	}
	return a.decode()
}

func unixTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)
}

// LabelValues lists the values of label on the series matching match (all
// series when empty) within the window, as Grafana asks for a variable
// refreshed on time range change, sorted.
func LabelValues(ctx context.Context, prom, match, label string, w Window) ([]string, error) {
	p := url.Values{}
	if strings.TrimSpace(match) != "" {
		p.Set("match[]", match)
	}
	if !w.End.IsZero() {
		p.Set("start", unixTime(w.Start()))
		p.Set("end", unixTime(w.End))
	}
	var r struct {
		Data []string `json:"data"`
	}
	if err := get(ctx, prom, "/api/v1/label/"+url.PathEscape(label)+"/values", p, &r); err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			return nil, fmt.Errorf("label values of %s (match %s): %w", label, match, err)
		}
		return nil, fmt.Errorf("label values of %s: %w", label, err)
	}
	sort.Strings(r.Data)
	return r.Data, nil
}

// RuleGroup is a rule group as Prometheus reports it (/api/v1/rules).
type RuleGroup struct {
	Name           string    `json:"name"`
	File           string    `json:"file"`
	Interval       float64   `json:"interval"` // seconds
	LastEvaluation time.Time `json:"lastEvaluation"`
}

// RuleGroups lists Prometheus's rule groups and when each last evaluated
// (the zero time: not yet).
func RuleGroups(ctx context.Context, prom string) ([]RuleGroup, error) {
	var r struct {
		Data struct {
			Groups []RuleGroup `json:"groups"`
		} `json:"data"`
	}
	if err := get(ctx, prom, "/api/v1/rules", nil, &r); err != nil {
		return nil, fmt.Errorf("rule groups: %w", err)
	}
	return r.Data.Groups, nil
}
