package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoData is returned when a query the report cannot do without returns
// nothing: the Prometheus has not seen fspair's series (yet).
var ErrNoData = errors.New("no data")

// client asks one Prometheus server over its HTTP API.
type client struct {
	base string
	http *http.Client
}

func newClient(base string) (*client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("prometheus URL %q: want e.g. http://127.0.0.1:9090", base)
	}
	return &client{base: strings.TrimRight(base, "/"), http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// sample is one instant-vector element.
type sample struct {
	labels map[string]string
	value  float64
}

// series is one range-vector element: points at the query's steps.
type series struct {
	labels map[string]string
	t      []time.Time
	v      []float64
}

type apiResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

func (c *client) get(ctx context.Context, path string, q url.Values) (*apiResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query prometheus: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read prometheus answer: %w", err)
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("prometheus answered %s, not the query API: %.200s", resp.Status, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s: %s (query %s)", r.ErrorType, r.Error, q.Get("query"))
	}
	return &r, nil
}

// instant runs an instant query at t.
func (c *client) instant(ctx context.Context, query string, t time.Time) ([]sample, error) {
	r, err := c.get(ctx, "/api/v1/query", url.Values{"query": {query}, "time": {promTime(t)}})
	if err != nil {
		return nil, err
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", query, r.Data.ResultType)
	}
	var out []sample
	for _, raw := range r.Data.Result {
		var e struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("query %s: %w", query, err)
		}
		v, err := parseValue(e.Value[1])
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", query, err)
		}
		out = append(out, sample{labels: e.Metric, value: v})
	}
	return out, nil
}

// rangeQuery runs a range query; points the series lacks are NaN, so every
// series has one value per step.
func (c *client) rangeQuery(ctx context.Context, query string, from, to time.Time, step time.Duration) ([]series, error) {
	r, err := c.get(ctx, "/api/v1/query_range", url.Values{
		"query": {query}, "start": {promTime(from)}, "end": {promTime(to)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	})
	if err != nil {
		return nil, err
	}
	if r.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("query %s: result type %s, want matrix", query, r.Data.ResultType)
	}
	steps := int(to.Sub(from)/step) + 1
	var out []series
	for _, raw := range r.Data.Result {
		var e struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("query %s: %w", query, err)
		}
		s := series{labels: e.Metric, t: make([]time.Time, steps), v: make([]float64, steps)}
		for i := range s.t {
			s.t[i] = from.Add(time.Duration(i) * step)
			s.v[i] = math.NaN()
		}
		for _, p := range e.Values {
			ts, ok := p[0].(float64)
			if !ok {
				return nil, fmt.Errorf("query %s: bad timestamp %v", query, p[0])
			}
			i := int(math.Round((ts - float64(from.UnixMilli())/1000) / step.Seconds()))
			if i < 0 || i >= steps {
				continue
			}
			if s.v[i], err = parseValue(p[1]); err != nil {
				return nil, fmt.Errorf("query %s: %w", query, err)
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return labelKey(out[i].labels) < labelKey(out[j].labels) })
	return out, nil
}

func parseValue(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q: %w", s, err)
	}
	return f, nil
}

func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// labelKey is a stable string of a label set, for sorting.
func labelKey(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, l[k])
	}
	return b.String()
}

// quote escapes a label value for a PromQL selector.
func quote(s string) string { return strconv.Quote(s) }
