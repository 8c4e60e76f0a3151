package alerting

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrNoRepo is returned by RepoRoot outside the fspair module.
var ErrNoRepo = errors.New("not inside the fspair repository")

// RepoRoot finds the repository root (the directory of go.mod) from the
// working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", ErrNoRepo
		}
		dir = up
	}
}

// RuleOptions are the rule generator's knobs (rules/gen): the rule
// windows, a factor on every alert's `for` and the settle time, so that a
// test sees in minutes what production rules see in hours.
type RuleOptions struct {
	Short, Long string  // rule windows (defaults "1m", "5m")
	ForScale    float64 // factor on each alert's for (default 0.01: the 1 h of FspairPoorPairing becomes 36 s)
	// Settle is how long a class must be held before the pairing, the
	// verdict and the alerts act on it (rules/gen -settle). Empty:
	// rules/classes.yaml's, one short window plus 60 s, which a test not
	// about settling waits for in real time on every disk; such a test
	// sets a few seconds. rules/gen's promtool tests cover the default.
	Settle string
	// Workload is how often the classifier is evaluated (rules/gen
	// -workload-interval). Empty: "global", the stack's evaluation
	// interval, as before the committed rules gave it the slow groups'
	// 3m: the tests' waits and the validation's count of one evaluation
	// of the class per evaluation interval rest on it. The cadence is
	// not what these tests are about; rules/gen's tests cover it.
	Workload string
	Extra    []string // more flags for rules/gen, e.g. -site FILE
}

func (o RuleOptions) args(out string) []string {
	if o.Short == "" {
		o.Short = "1m"
	}
	if o.Long == "" {
		o.Long = "5m"
	}
	if o.ForScale == 0 {
		o.ForScale = 0.01
	}
	a := []string{"run", "./rules/gen", "-out", out, "-short", o.Short, "-long", o.Long,
		"-for-scale", fmt.Sprint(o.ForScale)}
	if o.Settle != "" {
		a = append(a, "-settle", o.Settle)
	}
	if o.Workload == "" {
		o.Workload = "global"
	}
	a = append(a, "-workload-interval", o.Workload)
	return append(a, o.Extra...)
}

// GenerateRulesDir writes the repository's rules, generated with opts,
// into dir by running `go run ./rules/gen`.
func GenerateRulesDir(ctx context.Context, dir string, opts RuleOptions) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", opts.args(dir)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("generate rules (go %v): %w\n%s", opts.args(dir), err, out)
	}
	ents, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	if err != nil || len(ents) == 0 {
		return fmt.Errorf("generate rules: no rule files written to %s", dir)
	}
	return nil
}

// GenerateRules generates the rules into a test's temporary directory and
// returns it; it fails the test if the generator fails.
func GenerateRules(t testing.TB, opts RuleOptions) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := GenerateRulesDir(ctx, dir, opts); err != nil {
		t.Fatal(err)
	}
	return dir
}

// AlertRule is an alerting rule as written in a rule file.
type AlertRule struct {
	Group       string
	Name        string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// RuleFile is the part of a Prometheus rule file the tests read.
type RuleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// ReadRuleFile parses a Prometheus rule file.
func ReadRuleFile(path string) (*RuleFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read rule file: %w", err)
	}
	var f RuleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("parse rule file %s: %w", path, err)
	}
	return &f, nil
}

// Alerts lists the file's alerting rules.
func (f *RuleFile) Alerts() []AlertRule {
	var out []AlertRule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, AlertRule{Group: g.Name, Name: r.Alert, Expr: r.Expr, For: r.For,
					Labels: r.Labels, Annotations: r.Annotations})
			}
		}
	}
	return out
}

// Records lists the names the file's recording rules record.
func (f *RuleFile) Records() []string {
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out = append(out, r.Record)
			}
		}
	}
	return out
}

// WithoutGroupIntervals returns the rule file at path with every group
// evaluated at the global evaluation interval: the long-window groups run
// every twentieth of their window in production (3m with 1h), which would
// make a test wait three of their intervals for the fleet rules. The rules
// and their names are unchanged.
func WithoutGroupIntervals(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read rules (go run ./rules/gen -out rules/): %w", err)
	}
	var f struct {
		Groups []map[string]any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	for _, g := range f.Groups {
		delete(g, "interval")
	}
	return yaml.Marshal(f)
}
