package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/alerting"
)

// The rules read the exporter's histograms by their sum and count. A
// Prometheus that ingests them as native histograms (fspair_exporter
// --histograms=native or both, scraped in protobuf) has no _sum and _count
// series: the rules must read the histogram itself then. These tests hold
// the rules to both.

// TestRulesReadHistogramsInBothModes: every raw _sum or _count of an
// exporter histogram in a rule comes with its native counterpart in the
// same expression.
func TestRulesReadHistogramsInBothModes(t *testing.T) {
	raw := regexp.MustCompile(`\b(fspair_[a-z0-9_]+)_(sum|count)\{`)
	seen := 0
	forEachRule(t, func(f, name, expr string) {
		for _, m := range raw.FindAllStringSubmatch(expr, -1) {
			if !histogramFamilies[m[1]] {
				t.Errorf("%s, %s: reads %s_%s, but %s is not among the histograms counterRate reads in both modes (histogramFamilies)",
					f, name, m[1], m[2], m[1])
				continue
			}
			seen++
			if native := fmt.Sprintf("histogram_%s(rate(%s{", m[2], m[1]); !strings.Contains(expr, native) {
				t.Errorf("%s, %s: reads %s_%s without %s...: empty on a Prometheus with native histograms",
					f, name, m[1], m[2], native)
			}
		}
	})
	if seen == 0 {
		t.Fatal("no rule reads a histogram's _sum or _count: has the generator changed?")
	}
}

// TestRulesReadBucketsInBothModes: a rule that reads a histogram's classic
// buckets (histogramQuantile) reads its native form in the same expression,
// and each exactly once: the raw histograms are the costliest series a rule
// selects (a classic one is a series per bucket), so no rule selects one
// twice.
func TestRulesReadBucketsInBothModes(t *testing.T) {
	bucket := regexp.MustCompile(`\b(fspair_[a-z0-9_]+)_bucket\{`)
	seen := 0
	forEachRule(t, func(f, name, expr string) {
		families := map[string]bool{}
		for _, m := range bucket.FindAllStringSubmatch(expr, -1) {
			families[m[1]] = true
		}
		for _, h := range sortedKeys(families) {
			seen++
			if n := strings.Count(expr, h+"_bucket{"); n != 1 {
				t.Errorf("%s, %s: selects %s_bucket %d times, want once", f, name, h, n)
			}
			if n := strings.Count(expr, "rate("+h+"{"); n != 1 {
				t.Errorf("%s, %s: reads the native %s %d times, want once (beside its classic buckets)", f, name, h, n)
			}
			if !strings.Contains(expr, "op, le) (rate("+h+"_bucket{") {
				t.Errorf("%s, %s: sums %s_bucket without keeping le", f, name, h)
			}
		}
	})
	if seen == 0 {
		t.Fatal("no rule reads a histogram's buckets: has the generator changed?")
	}
}

// forEachRule calls fn with every rule of the generated files, the fleet's
// split included: its file, its name and its expression.
func forEachRule(t *testing.T, fn func(file, name, expr string)) {
	t.Helper()
	for _, f := range append(append([]string{}, ruleFiles...), fleetRuleFiles...) {
		var rf ruleFileYAML
		loadYAML(t, filepath.Join("..", f), &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				fn(f, r.Record+r.Alert, r.Expr)
			}
		}
	}
}

// TestPromtoolTestRulesNative runs every promtool unit test in rules/tests
// that feeds histograms again, with each histogram's _sum and _count input
// series turned into one native histogram series with the same sum and
// count at every step: the expected results must not change. Promtool
// reads native histograms in test input from Prometheus 2.44 on, so this
// runs on the pinned Prometheus 3 alone.
func TestPromtoolTestRulesNative(t *testing.T) {
	var rel *alerting.PromRelease
	for _, r := range alerting.Releases(t) {
		if r.Major >= 3 {
			rel = &r
			break
		}
	}
	if rel == nil {
		t.Fatal("no Prometheus 3 among the releases the tests run on")
	}
	dir := t.TempDir()
	var files []string
	for _, f := range testFiles(t, "../tests/*.yml") {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out, n, err := nativeTestFile(src, filepath.Dir(f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if n == 0 {
			continue
		}
		t.Logf("%s: %d histograms fed as native", filepath.Base(f), n)
		dst := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(dst, out, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, dst)
	}
	if len(files) == 0 {
		t.Fatal("no promtool test feeds a histogram's _sum and _count: nothing tested in native mode")
	}
	promtoolOf(t, *rel, "..", append([]string{"test", "rules"}, files...)...)
}

// nativeTestFile rewrites one promtool test file: rule_files made absolute
// (against dir), and in every test the _sum and _count input series of each
// histogram in histogramFamilies replaced by one native histogram series.
// It returns how many histograms it replaced.
func nativeTestFile(src []byte, dir string) ([]byte, int, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, 0, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, 0, fmt.Errorf("not a mapping")
	}
	top := doc.Content[0]
	if files := mapValue(top, "rule_files"); files != nil {
		for _, f := range files.Content {
			if !filepath.IsAbs(f.Value) {
				abs, err := filepath.Abs(filepath.Join(dir, f.Value))
				if err != nil {
					return nil, 0, err
				}
				f.Value = abs
			}
		}
	}
	total := 0
	if tests := mapValue(top, "tests"); tests != nil {
		for i, test := range tests.Content {
			in := mapValue(test, "input_series")
			if in == nil {
				continue
			}
			n, err := nativeInputs(in)
			if err != nil {
				return nil, 0, fmt.Errorf("test %d: %v", i+1, err)
			}
			total += n
		}
	}
	out, err := yaml.Marshal(&doc)
	return out, total, err
}

// nativeInputs replaces, in one test's input_series, each histogram's pair
// of _sum and _count series by a native histogram series.
func nativeInputs(in *yaml.Node) (int, error) {
	type half struct {
		values []string
		at     int
	}
	pairs := map[string]*[2]*half{} // base{labels} -> sum, count
	var order []string
	var keep []*yaml.Node
	for idx, s := range in.Content {
		series := mapValue(s, "series")
		values := mapValue(s, "values")
		if series == nil || values == nil {
			return 0, fmt.Errorf("input series %d: no series or values", idx+1)
		}
		name, labels, err := splitSeries(series.Value)
		if err != nil {
			return 0, err
		}
		part, base := -1, ""
		for i, suffix := range []string{"_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && histogramFamilies[b] {
				part, base = i, b
			}
		}
		if part < 0 {
			keep = append(keep, s)
			continue
		}
		vals, err := expandSeriesValues(values.Value)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", series.Value, err)
		}
		key := base + labels
		p := pairs[key]
		if p == nil {
			p = &[2]*half{}
			pairs[key] = p
			order = append(order, key)
		}
		if p[part] != nil {
			return 0, fmt.Errorf("%s fed twice", series.Value)
		}
		p[part] = &half{values: vals, at: len(keep)}
		keep = append(keep, nil) // placeholder: the native series goes where the first half was
	}
	sort.Strings(order)
	for _, key := range order {
		p := pairs[key]
		if p[0] == nil || p[1] == nil {
			return 0, fmt.Errorf("%s: a _sum without its _count or the reverse", key)
		}
		sum, count := p[0].values, p[1].values
		if len(sum) != len(count) {
			return 0, fmt.Errorf("%s: %d sum values, %d count values", key, len(sum), len(count))
		}
		steps := make([]string, len(sum))
		for i := range sum {
			switch {
			case sum[i] == count[i] && (sum[i] == "_" || sum[i] == "stale"):
				steps[i] = sum[i]
			case sum[i] == "_" || sum[i] == "stale" || count[i] == "_" || count[i] == "stale":
				return 0, fmt.Errorf("%s: step %d has sum %s and count %s", key, i, sum[i], count[i])
			default:
				// Every observation in the zero bucket: the rules read only
				// the sum and the count, and a histogram's count must
				// equal what its buckets hold.
				steps[i] = fmt.Sprintf("{{schema:0 sum:%s count:%s z_bucket:%s z_bucket_w:0.001}}", sum[i], count[i], count[i])
			}
		}
		name, labels, _ := strings.Cut(key, "{")
		node := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Value: "series"}, {Kind: yaml.ScalarNode, Value: name + "{" + labels, Style: yaml.SingleQuotedStyle},
			{Kind: yaml.ScalarNode, Value: "values"}, {Kind: yaml.ScalarNode, Value: strings.Join(steps, " "), Style: yaml.SingleQuotedStyle},
		}}
		keep[min(p[0].at, p[1].at)] = node
	}
	in.Content = in.Content[:0]
	for _, n := range keep {
		if n != nil {
			in.Content = append(in.Content, n)
		}
	}
	return len(order), nil
}

// splitSeries splits `name{a="1", b="2"}` into the name and the label
// matchers in a canonical order, `{a="1", b="2"}`, so that the two halves
// of a histogram pair whatever order their labels were written in.
func splitSeries(s string) (string, string, error) {
	name, rest, ok := strings.Cut(strings.TrimSpace(s), "{")
	if !ok {
		return name, "{}", nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return "", "", fmt.Errorf("%q: no closing brace", s)
	}
	var pairs []string
	for body = strings.TrimSpace(body); body != ""; {
		k, v, ok := strings.Cut(body, "=")
		if !ok {
			return "", "", fmt.Errorf("%q: a label without a value", s)
		}
		v = strings.TrimSpace(v)
		if !strings.HasPrefix(v, `"`) {
			return "", "", fmt.Errorf("%q: an unquoted label value", s)
		}
		end := 1
		for end < len(v) && v[end] != '"' {
			if v[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(v) {
			return "", "", fmt.Errorf("%q: an unterminated label value", s)
		}
		pairs = append(pairs, strings.TrimSpace(k)+"="+v[:end+1])
		body = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v[end+1:]), ","))
	}
	sort.Strings(pairs)
	return strings.TrimSpace(name), "{" + strings.Join(pairs, ", ") + "}", nil
}

// expandSeriesValues expands promtool's series notation for floats ("a",
// "a+bxn", "a-bxn", "axn", "_", "_xn", "stale") into one value per step.
func expandSeriesValues(s string) ([]string, error) {
	var out []string
	for _, tok := range strings.Fields(s) {
		switch {
		case tok == "_" || tok == "stale":
			out = append(out, tok)
			continue
		case strings.HasPrefix(tok, "_x"):
			n, err := strconv.Atoi(tok[2:])
			if err != nil {
				return nil, fmt.Errorf("%q: %v", tok, err)
			}
			for range n {
				out = append(out, "_")
			}
			continue
		}
		start, times, repeated := strings.Cut(tok, "x")
		if !repeated {
			if _, err := strconv.ParseFloat(tok, 64); err != nil {
				return nil, fmt.Errorf("%q: not a value", tok)
			}
			out = append(out, tok)
			continue
		}
		n, err := strconv.Atoi(times)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", tok, err)
		}
		// The step's sign is the last + or - that does not follow an e.
		a, step := start, "0"
		for i := len(start) - 1; i > 0; i-- {
			if (start[i] == '+' || start[i] == '-') && start[i-1] != 'e' && start[i-1] != 'E' {
				a, step = start[:i], start[i:]
				break
			}
		}
		av, err := strconv.ParseFloat(a, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", tok, err)
		}
		sv, err := strconv.ParseFloat(strings.TrimPrefix(step, "+"), 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", tok, err)
		}
		for i := 0; i <= n; i++ {
			out = append(out, strconv.FormatFloat(av+float64(i)*sv, 'g', -1, 64))
		}
	}
	return out, nil
}

// mapValue is the value of key in a YAML mapping node, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
