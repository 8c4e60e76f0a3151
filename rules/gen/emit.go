package main

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Rule is a recording or alerting rule, as Prometheus reads it.
type Rule struct {
	Record, Alert string
	Expr          string
	For           string
	Labels        [][2]string // in output order
	Annotations   [][2]string // in output order
	Comment       string      // written above the rule
}

// Group is a rule group.
type Group struct {
	Name     string
	Comment  string
	Interval string // empty: Prometheus' global evaluation_interval
	Rules    []Rule
}

// File is one rule file.
type File struct {
	Name   string
	Header string
	Groups []Group
}

func scalar(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if strings.Contains(s, "\n") {
		n.Style = yaml.LiteralStyle
	}
	return n
}

func mapping(pairs ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < len(pairs); i += 2 {
		var v *yaml.Node
		switch x := pairs[i+1].(type) {
		case string:
			v = scalar(x)
		case *yaml.Node:
			v = x
		}
		n.Content = append(n.Content, scalar(pairs[i].(string)), v)
	}
	return n
}

func stringMap(kv [][2]string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, p := range kv {
		n.Content = append(n.Content, scalar(p[0]), scalar(p[1]))
	}
	return n
}

func (r Rule) node() *yaml.Node {
	var kv []any
	if r.Record != "" {
		kv = append(kv, "record", r.Record)
	} else {
		kv = append(kv, "alert", r.Alert)
	}
	kv = append(kv, "expr", strings.TrimSpace(r.Expr)+"\n")
	if r.Expr == strings.TrimSpace(r.Expr) && !strings.Contains(r.Expr, "\n") {
		kv[len(kv)-1] = r.Expr
	}
	if r.For != "" {
		kv = append(kv, "for", r.For)
	}
	if len(r.Labels) > 0 {
		kv = append(kv, "labels", stringMap(r.Labels))
	}
	if len(r.Annotations) > 0 {
		kv = append(kv, "annotations", stringMap(r.Annotations))
	}
	n := mapping(kv...)
	n.HeadComment = comment(r.Comment)
	return n
}

// comment turns prose into YAML comment lines wrapped at 90 columns.
func comment(s string) string {
	if s == "" {
		return ""
	}
	var out []string
	for _, para := range strings.Split(strings.TrimSpace(s), "\n") {
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(line)+1+len(w) > 88 {
				out = append(out, "# "+line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		out = append(out, strings.TrimRight("# "+line, " "))
	}
	return strings.Join(out, "\n")
}

// Marshal renders the file; the same input always gives the same bytes.
func (f File) Marshal() ([]byte, error) {
	groups := &yaml.Node{Kind: yaml.SequenceNode}
	for _, g := range f.Groups {
		rules := &yaml.Node{Kind: yaml.SequenceNode}
		for _, r := range g.Rules {
			rules.Content = append(rules.Content, r.node())
		}
		kv := []any{"name", g.Name}
		if g.Interval != "" {
			kv = append(kv, "interval", g.Interval)
		}
		gn := mapping(append(kv, "rules", rules)...)
		gn.HeadComment = comment(g.Comment)
		groups.Content = append(groups.Content, gn)
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{mapping("groups", groups)}}
	doc.HeadComment = comment(f.Header)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("encode %s: %w", f.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", f.Name, err)
	}
	return buf.Bytes(), nil
}

// num writes a number for PromQL: at most 12 significant digits, so that
// spans such as 0.85-0.70 read 0.15 and not 0.15000000000000002.
func num(v float64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	return strconv.FormatFloat(r, 'g', -1, 64)
}

var durationRE = regexp.MustCompile(`^(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$`)

// parseDuration reads a Prometheus duration of whole seconds (1h30m, 5m, 90s).
func parseDuration(s string) (int64, error) {
	m := durationRE.FindStringSubmatch(s)
	if s == "" || m == nil {
		return 0, fmt.Errorf("duration %q: want e.g. 30s, 5m, 1h30m", s)
	}
	var total int64
	for i, unit := range []int64{7 * 86400, 86400, 3600, 60, 1} {
		if m[i+1] != "" {
			n, err := strconv.ParseInt(m[i+1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("duration %q: %w", s, err)
			}
			total += n * unit
		}
	}
	if total <= 0 {
		return 0, fmt.Errorf("duration %q: must be positive", s)
	}
	return total, nil
}

// formatDuration writes seconds the way Prometheus prints durations: 1h30m, 5m, 45s.
func formatDuration(secs int64) string {
	if secs == 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		n    int64
		name string
	}{{3600, "h"}, {60, "m"}, {1, "s"}} {
		if secs >= u.n {
			fmt.Fprintf(&b, "%d%s", secs/u.n, u.name)
			secs %= u.n
		}
	}
	return b.String()
}

// scaleDuration multiplies a `for` duration, rounding to whole seconds.
func scaleDuration(secs int64, scale float64) string {
	return formatDuration(int64(math.Round(float64(secs) * scale)))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
