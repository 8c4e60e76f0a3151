package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// Series is one series of a range result: its labels and samples in time
// order.
type Series struct {
	Labels map[string]string
	Points []Point
}

// Point is one sample.
type Point struct {
	T time.Time
	V float64
}

// Prom reads a Prometheus server's HTTP API (v1). The alerting harness's
// Stack.Query reads instant vectors only; the validation needs the samples
// a rule wrote at each evaluation, which come back as matrices.
type Prom struct {
	URL string // base URL, e.g. http://127.0.0.1:9090
}

// Samples returns every sample that the series matching selector hold
// from from to to: the rule's own evaluations, not a resampling, from an
// instant query of a range selector.
func (p Prom) Samples(ctx context.Context, selector string, from, to time.Time) ([]Series, error) {
	secs := int64(math.Ceil(to.Sub(from).Seconds())) + 1
	v := url.Values{}
	v.Set("query", fmt.Sprintf("%s[%ds]", selector, secs))
	v.Set("time", promTime(to))
	ss, err := p.matrix(ctx, "/api/v1/query", v)
	if err != nil {
		return nil, err
	}
	for i := range ss {
		pts := ss[i].Points[:0]
		for _, pt := range ss[i].Points {
			if !pt.T.Before(from) {
				pts = append(pts, pt)
			}
		}
		ss[i].Points = pts
	}
	return ss, nil
}

// QueryRange evaluates expr at start, start+step, ... up to end.
func (p Prom) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	v := url.Values{}
	v.Set("query", expr)
	v.Set("start", promTime(start))
	v.Set("end", promTime(end))
	v.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	return p.matrix(ctx, "/api/v1/query_range", v)
}

func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

func (p Prom) matrix(ctx context.Context, path string, v url.Values) ([]Series, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path+"?"+v.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", v.Get("query"), err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", v.Get("query"), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("query %q: read response: %w", v.Get("query"), err)
	}
	var r struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: decode response (HTTP %d): %w: %.300s", v.Get("query"), resp.StatusCode, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", v.Get("query"), r.ErrorType, r.Error)
	}
	if r.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("query %q: result type %s, want matrix", v.Get("query"), r.Data.ResultType)
	}
	out := make([]Series, 0, len(r.Data.Result))
	for _, res := range r.Data.Result {
		s := Series{Labels: res.Metric}
		for _, pv := range res.Values {
			ts, ok := pv[0].(float64)
			str, ok2 := pv[1].(string)
			if !ok || !ok2 {
				return nil, fmt.Errorf("query %q: malformed sample %v", v.Get("query"), pv)
			}
			f, err := strconv.ParseFloat(str, 64)
			if err != nil {
				return nil, fmt.Errorf("query %q: parse sample value %q: %w", v.Get("query"), str, err)
			}
			s.Points = append(s.Points, Point{T: time.UnixMilli(int64(math.Round(ts * 1000))), V: f})
		}
		out = append(out, s)
	}
	return out, nil
}

// ClassTimeline merges the series of domain_disk:fspair_workload_class:info
// of one disk (one series per class the disk has had) into one evaluation
// per timestamp, in time order. At each evaluation the rule writes exactly
// one class; two at one timestamp would be a rule bug and both are kept,
// so that Analyze counts the evaluation as wrong.
func ClassTimeline(ss []Series) []Eval {
	var out []Eval
	for _, s := range ss {
		for _, pt := range s.Points {
			out = append(out, Eval{At: pt.T, Class: s.Labels["class"]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	merged := out[:0]
	for _, e := range out {
		if n := len(merged); n > 0 && merged[n-1].At.Equal(e.At) {
			if merged[n-1].Class != e.Class {
				merged[n-1].Class += "+" + e.Class
			}
			continue
		}
		merged = append(merged, e)
	}
	return merged
}
