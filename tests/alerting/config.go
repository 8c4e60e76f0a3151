package alerting

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Timing is how fast the test Alertmanager groups and repeats
// notifications; the shipped example waits tens of seconds, which a test
// cannot afford.
type Timing struct {
	GroupWait, GroupInterval, RepeatInterval time.Duration
}

// deriveAlertmanagerConfig turns the shipped example into a configuration
// for the test: the same routes, grouping, matchers and inhibit rules, but
// the timing from tm and every receiver sending to the test's webhook at
// base/<receiver name> instead of its integrations (mail, chat services,
// webhooks elsewhere); receivers without integrations stay silent. Time
// intervals are dropped, so that a notification's arrival depends only on
// the routing under test.
func deriveAlertmanagerConfig(example []byte, base string, tm Timing) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(example, &cfg); err != nil {
		return nil, fmt.Errorf("parse alertmanager example: %w", err)
	}
	route, ok := cfg["route"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("alertmanager example has no route")
	}
	setTiming(route, tm, true)
	recv, ok := cfg["receivers"].([]any)
	if !ok || len(recv) == 0 {
		return nil, fmt.Errorf("alertmanager example has no receivers")
	}
	for i, r := range recv {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("alertmanager example: receiver %d is not a mapping", i)
		}
		name, _ := m["name"].(string)
		if name == "" {
			return nil, fmt.Errorf("alertmanager example: receiver %d has no name", i)
		}
		integrations := 0
		for k := range m {
			if strings.HasSuffix(k, "_configs") {
				integrations++
			}
		}
		if integrations == 0 {
			continue // a receiver that sends nothing stays silent
		}
		hook := map[string]any{"send_resolved": true}
		if old, ok := m["webhook_configs"].([]any); ok && len(old) > 0 {
			if o, ok := old[0].(map[string]any); ok {
				for k, v := range o {
					hook[k] = v
				}
			}
		}
		delete(hook, "url_file")
		delete(hook, "http_config")
		hook["url"] = base + "/" + url.PathEscape(name)
		for k := range m {
			if strings.HasSuffix(k, "_configs") {
				delete(m, k)
			}
		}
		m["webhook_configs"] = []any{hook}
	}
	delete(cfg, "templates")
	delete(cfg, "time_intervals")
	delete(cfg, "mute_time_intervals")
	return yaml.Marshal(cfg)
}

// setTiming puts tm on the root route and on every child route that sets
// its own timing.
func setTiming(route map[string]any, tm Timing, root bool) {
	for key, d := range map[string]time.Duration{
		"group_wait": tm.GroupWait, "group_interval": tm.GroupInterval, "repeat_interval": tm.RepeatInterval,
	} {
		if _, ok := route[key]; ok || root {
			route[key] = promDuration(d)
		}
	}
	delete(route, "mute_time_intervals")
	delete(route, "active_time_intervals")
	if kids, ok := route["routes"].([]any); ok {
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				setTiming(m, tm, false)
			}
		}
	}
}

// promDuration formats d as a Prometheus duration ("1500ms", "2s").
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// prometheusConfig is the test Prometheus's configuration: one scrape job
// "fspair" (the name the rules and runbooks select on), the rule files of
// rulesDir, and the test Alertmanager.
func prometheusConfig(opts Options, alertmanager string) ([]byte, error) {
	var targets []any
	for _, t := range opts.ScrapeTargets {
		sc := map[string]any{"targets": []string{t.Address}}
		if len(t.Labels) > 0 {
			sc["labels"] = t.Labels
		}
		targets = append(targets, sc)
	}
	cfg := map[string]any{
		"global": map[string]any{
			"scrape_interval":     promDuration(opts.ScrapeInterval),
			"scrape_timeout":      promDuration(opts.ScrapeInterval),
			"evaluation_interval": promDuration(opts.EvaluationInterval),
		},
		"alerting": map[string]any{
			"alertmanagers": []any{map[string]any{
				"static_configs": []any{map[string]any{"targets": []string{alertmanager}}},
			}},
		},
	}
	if opts.RulesDir != "" {
		cfg["rule_files"] = []string{filepath.Join(opts.RulesDir, "*.yml"), filepath.Join(opts.RulesDir, "*.yaml")}
	}
	if len(targets) > 0 {
		job := map[string]any{
			"job_name":       opts.Job,
			"static_configs": targets,
		}
		if opts.NativeHistograms {
			job["scrape_native_histograms"] = true
			job["convert_classic_histograms_to_nhcb"] = true
		}
		cfg["scrape_configs"] = []any{job}
	}
	return yaml.Marshal(cfg)
}
