package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// exporterMetrics reads the metric names the exporter's collectors define from
// their source: diskDesc("x") is fspair_disk_x, deviceDesc("x") is
// fspair_host_device_x, and full names appear as string literals.
func exporterMetrics(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../../exporter/collector/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no collector sources under exporter/collector (%v)", err)
	}
	desc := regexp.MustCompile(`(diskDesc|deviceDesc)\("([a-z0-9_]+)"`)
	literal := regexp.MustCompile(`"(fspair_[a-z0-9_]+)"`)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range desc.FindAllStringSubmatch(string(b), -1) {
			prefix := "fspair_disk_"
			if m[1] == "deviceDesc" {
				prefix = "fspair_host_device_"
			}
			names[prefix+m[2]] = true
		}
		for _, m := range literal.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	if !names["fspair_disk_requests_total"] || !names["fspair_host_device_bytes_total"] {
		t.Fatalf("could not read metric names from exporter/collector (found %d); has the way descriptors are declared changed?", len(names))
	}
	return names
}

// TestRulesUseExportedMetrics checks that every exporter metric the rules
// select is one the exporter defines (histograms by their _sum and _count),
// so that a renamed metric breaks this test rather than silently emptying a rule.
func TestRulesUseExportedMetrics(t *testing.T) {
	exported := exporterMetrics(t)
	raw := regexp.MustCompile(`\bfspair_[a-z0-9_]+\b`)
	used := map[string]bool{}
	for _, f := range ruleFiles {
		var rf struct {
			Groups []struct {
				Rules []struct {
					Expr string `yaml:"expr"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		loadYAML(t, filepath.Join("..", f), &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				for _, m := range raw.FindAllStringIndex(r.Expr, -1) {
					// Recorded series (level:metric:op) contain the name after a colon.
					if m[0] > 0 && r.Expr[m[0]-1] == ':' || m[1] < len(r.Expr) && r.Expr[m[1]] == ':' {
						continue
					}
					used[r.Expr[m[0]:m[1]]] = true
				}
			}
		}
	}
	for _, name := range sortedKeys(used) {
		if strings.HasPrefix(name, "fspair_kdb_") {
			continue // the knowledge base's own series
		}
		base := name
		for _, suffix := range []string{"_sum", "_count", "_bucket"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if !exported[name] && !exported[base] {
			t.Errorf("the rules select %s, which exporter/collector does not define", name)
		}
	}
	if len(used) < 15 {
		t.Errorf("found only %d exporter metrics in the rules: %v", len(used), sortedKeys(used))
	}
}
