package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/alerting"
)

// SiteCheck is what CheckSite found in the rules generated with a site file.
type SiteCheck struct {
	SiteVerdicts int // fspair_kdb_pair_verdict series with source="site"
	SiteFigures  int // fspair_kdb_site_measurement series
}

// CheckSite generates the rules from the repository at root with site as
// the site file (`go run ./rules/gen`, the loader the rules are built
// with, which refuses a file it cannot merge), checks them with `promtool
// check rules`, and counts the site's series in the knowledge-base rules.
func CheckSite(ctx context.Context, root, kdb, site string) (SiteCheck, error) {
	var sc SiteCheck
	promtool, err := alerting.PinnedBinary("promtool")
	if err != nil {
		return sc, fmt.Errorf("check site file (or -check=false): %w", err)
	}
	dir, err := os.MkdirTemp("", "fspair-kdb-rules-")
	if err != nil {
		return sc, fmt.Errorf("check site file: %w", err)
	}
	defer os.RemoveAll(dir)
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		return a
	}
	gen := exec.CommandContext(ctx, "go", "run", "./rules/gen", "-out", dir,
		"-classes", filepath.Join(abs(root), "rules", "classes.yaml"), "-kdb", abs(kdb), "-site", abs(site))
	gen.Dir = abs(root)
	if out, err := gen.CombinedOutput(); err != nil {
		return sc, fmt.Errorf("check site file %s: rules/gen refused it: %w\n%s", site, err, out)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	if err != nil || len(files) == 0 {
		return sc, fmt.Errorf("check site file %s: rules/gen wrote no rule files", site)
	}
	if out, err := exec.CommandContext(ctx, promtool, append([]string{"check", "rules"}, files...)...).CombinedOutput(); err != nil {
		return sc, fmt.Errorf("check site file %s: promtool check rules: %w\n%s", site, err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "fspair-kdb.rules.yml"))
	if err != nil {
		return sc, fmt.Errorf("check site file %s: %w", site, err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Record string            `yaml:"record"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		return sc, fmt.Errorf("check site file %s: read generated rules: %w", site, err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			switch {
			case r.Record == "fspair_kdb_pair_verdict" && r.Labels["source"] == "site":
				sc.SiteVerdicts++
			case r.Record == "fspair_kdb_site_measurement":
				sc.SiteFigures++
			}
		}
	}
	return sc, nil
}

// ErrNoRepo is returned by findRoot outside the fspair repository.
var ErrNoRepo = errors.New("not inside the fspair repository (no go.mod with rules/gen above)")

// findRoot returns the repository root at or above dir: the directory
// with go.mod and rules/gen.
func findRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "rules", "gen")); err == nil {
				return d, nil
			}
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("find repository root from %s: %w", dir, ErrNoRepo)
		}
		d = parent
	}
}
