package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestExpositionCoversRules checks that the synthetic exporter serves every
// exporter metric the generated rules select, so that the bench exercises
// every rule, and that each line is a well-formed sample.
func TestExpositionCoversRules(t *testing.T) {
	body := string(exposition(7, 600, false))
	sample := regexp.MustCompile(`^([a-zA-Z_][a-zA-Z0-9_]*)\{[^}]*\} -?[0-9.e+]+$`)
	served := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		m := sample.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("malformed exposition line %q", l)
		}
		served[m[1]]++
	}
	if served["fspair_disk_info"] != 7 {
		t.Errorf("fspair_disk_info: %d series for 7 disks", served["fspair_disk_info"])
	}
	files, err := filepath.Glob("../*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated rule files in rules/ (%v)", err)
	}
	raw := regexp.MustCompile(`[:a-zA-Z0-9_]*fspair_[a-z0-9_]+[:a-zA-Z0-9_]*`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range raw.FindAllString(string(b), -1) {
			if strings.Contains(name, ":") || strings.HasPrefix(name, "fspair_kdb_") {
				continue
			}
			n++
			// A histogram the rules read natively (histogram_sum(x)) is
			// served as its classic _sum and _count.
			if served[name] == 0 && served[name+"_sum"] > 0 && served[name+"_count"] > 0 {
				continue
			}
			if served[name] == 0 {
				t.Errorf("%s: the rules read %s, which the bench does not serve", filepath.Base(f), name)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no exporter metrics in the rule files")
	}
}

func TestMedian(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v, want 2", m)
	}
}
