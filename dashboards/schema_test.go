package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/alerting"
)

// The schema check (scripts/dashboards.sh schema, dashboards/schema): every
// dashboard against the dashboard model that the pinned @grafana/schema
// publishes. README.md, "Schema check", says what it can and cannot see.

// schemaRun is one run of scripts/dashboards.sh schema.
type schemaRun struct {
	code           int
	stdout, stderr string
}

// runSchema runs the schema check on files (none: the committed
// dashboards). It installs the pinned npm packages on first use, so the npm
// registry must be reachable then; a failure to install fails the test.
func runSchema(t *testing.T, args ...string) schemaRun {
	t.Helper()
	root, err := alerting.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "scripts", "dashboards.sh"), "schema"}, args...)...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := schemaRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("run scripts/dashboards.sh schema: %v", err)
	}
	for _, cannot := range []string{"npm ci of", "npm not found", "node not found"} {
		if strings.Contains(r.stderr, "dashboards: "+cannot) {
			t.Fatalf("the schema check cannot install its pinned npm packages (dashboards/schema/package-lock.json; the npm registry must be reachable the first time):\n%s", r.stderr)
		}
	}
	if r.code != 0 && r.code != 1 {
		t.Fatalf("scripts/dashboards.sh schema could not check (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// problems are the lines of a failed run that report a problem, without
// the summary.
func (r schemaRun) problems() []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if l != "" && !strings.HasPrefix(l, "dashboards schema: ") && !strings.HasPrefix(l, "dashboards: installing") && !strings.HasPrefix(l, "added ") {
			out = append(out, l)
		}
	}
	return out
}

func committedDashboards(t *testing.T) []string {
	t.Helper()
	root, err := alerting.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards/*.json (%v)", err)
	}
	return files
}

func TestSchemaCommitted(t *testing.T) {
	files := committedDashboards(t)
	r := runSchema(t)
	if r.code != 0 {
		t.Fatalf("the committed dashboards fail the schema check:\n%s", r.stderr)
	}
	want := fmt.Sprintf("dashboards schema: ok: %d dashboard(s), ", len(files))
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "checked against @grafana/schema ") {
		t.Fatalf("summary: got %q, want a line with %q and the schema version", r.stdout, want)
	}
	t.Log(strings.TrimSpace(r.stdout))
}

// plantedPanel finds the first panel of a type in a dashboard (rows
// included) for a planted case to break.
func plantedPanel(t *testing.T, d map[string]any, typ string) map[string]any {
	t.Helper()
	var walk func([]any) map[string]any
	walk = func(ps []any) map[string]any {
		for _, x := range ps {
			p, _ := x.(map[string]any)
			if p["type"] == typ {
				return p
			}
			if sub, ok := p["panels"].([]any); ok {
				if q := walk(sub); q != nil {
					return q
				}
			}
		}
		return nil
	}
	ps, _ := d["panels"].([]any)
	p := walk(ps)
	if p == nil {
		t.Fatalf("dashboard %v has no %s panel to plant a case in", d["uid"], typ)
	}
	return p
}

// plantedVariable finds a variable of a dashboard by name for a planted
// case to break.
func plantedVariable(t *testing.T, d map[string]any, name string) map[string]any {
	t.Helper()
	list, _ := object(t, d["templating"], "templating")["list"].([]any)
	for _, x := range list {
		if v, _ := x.(map[string]any); v["name"] == name {
			return v
		}
	}
	t.Fatalf("dashboard %v has no variable %s to plant a case in", d["uid"], name)
	return nil
}

func object(t *testing.T, v any, what string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: not an object in the committed dashboard", what)
	}
	return m
}

// TestSchemaRejects plants one fault in a copy of a committed dashboard per
// case and requires the check to fail on it, naming the file, the panel's
// title and id (or the variable's name), the path of the faulty key and
// what the model expected, and to report nothing else in that copy.
func TestSchemaRejects(t *testing.T) {
	root, err := alerting.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, from, panelType string
		variable              string // instead of a panel of panelType, the variable of this name
		plant                 func(t *testing.T, p map[string]any)
		path                  string   // JSON path in the panel (or variable) of the faulty key
		expect                []string // fragments of the expectation
	}{
		{
			name: "misspelt-legend-option", from: "fspair-disk.json", panelType: "timeseries",
			plant: func(t *testing.T, p map[string]any) {
				legend := object(t, object(t, p["options"], "options")["legend"], "options.legend")
				legend["shwLegend"] = legend["showLegend"]
				delete(legend, "showLegend")
			},
			path:   "options.legend.shwLegend",
			expect: []string{`unknown key "shwLegend"`, "the model's keys here: ", "showLegend", "displayMode"},
		},
		{
			name: "gridpos-h-string", from: "fspair-disk.json", panelType: "stat",
			plant: func(t *testing.T, p map[string]any) {
				g := object(t, p["gridPos"], "gridPos")
				g["h"] = fmt.Sprint(g["h"])
			},
			path:   "gridPos.h",
			expect: []string{"Type 'string' is not assignable to type 'number'"},
		},
		{
			name: "unknown-panel-type", from: "fspair-disk.json", panelType: "heatmap",
			plant:  func(t *testing.T, p map[string]any) { p["type"] = "heatmapp" },
			path:   "type",
			expect: []string{`Type '"heatmapp"' is not assignable to type`, `"heatmap"`, `"timeseries"`, `"table"`},
		},
		{
			name: "misspelt-fieldconfig-default", from: "fspair-hostfs.json", panelType: "timeseries",
			plant: func(t *testing.T, p map[string]any) {
				d := object(t, object(t, p["fieldConfig"], "fieldConfig")["defaults"], "fieldConfig.defaults")
				d["unti"] = d["unit"]
				delete(d, "unit")
			},
			path:   "fieldConfig.defaults.unti",
			expect: []string{`unknown key "unti"`, "unit", "thresholds", "custom"},
		},
		{
			name: "enum-value", from: "fspair-hostfs.json", panelType: "timeseries",
			plant: func(t *testing.T, p map[string]any) {
				object(t, object(t, p["options"], "options")["legend"], "options.legend")["displayMode"] = "lst"
			},
			path:   "options.legend.displayMode",
			expect: []string{`Type '"lst"' is not assignable to type`, `"list"`, `"table"`},
		},
		{
			name: "misspelt-override-property", from: "fspair-fleet.json", panelType: "table",
			plant: func(t *testing.T, p map[string]any) {
				fc := object(t, p["fieldConfig"], "fieldConfig")
				fc["overrides"] = []any{map[string]any{
					"matcher":    map[string]any{"id": "byName", "options": "Value"},
					"properties": []any{map[string]any{"id": "custom.widht", "value": 80}},
				}}
			},
			path:   "fieldConfig.overrides[0].properties[0].id",
			expect: []string{`Type '"custom.widht"' is not assignable to type`, `"custom.width"`, `"unit"`},
		},
		{
			// An interval variable's setting, which grafana-foundation-sdk
			// writes on every variable and dashboards/gen leaves out
			// (common.py, drop_unmodelled): the model has no such key.
			name: "variable-auto-count", from: "fspair-disk.json", variable: "instance",
			plant:  func(t *testing.T, v map[string]any) { v["auto_count"] = 30 },
			path:   "auto_count",
			expect: []string{`unknown key "auto_count"`, "the model's keys here: ", "refresh", "regex"},
		},
	}

	dir := t.TempDir()
	type planted struct {
		file  string
		names string // how the problem names the panel or variable
	}
	files := make([]planted, len(cases))
	args := []string{}
	for i, c := range cases {
		raw, err := os.ReadFile(filepath.Join(root, "dashboards", c.from))
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", c.from, err)
		}
		var p map[string]any
		var names string
		if c.variable != "" {
			p = plantedVariable(t, d, c.variable)
			names = fmt.Sprintf(`: variable %q (type %v; templating.list[`, c.variable, p["type"])
		} else {
			p = plantedPanel(t, d, c.panelType)
			title, _ := p["title"].(string)
			if title == "" {
				t.Fatalf("%s: the %s panel to plant %s in has no title", c.from, c.panelType, c.name)
			}
			names = fmt.Sprintf(`: panel %q (id %v, type `, title, p["id"])
		}
		files[i] = planted{filepath.Join(dir, c.name+".json"), names}
		c.plant(t, p)
		out, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(files[i].file, out, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, files[i].file)
	}
	// An unchanged copy in the same run must pass: the faults are the
	// planted ones, not the copying.
	control := filepath.Join(dir, "control.json")
	raw, err := os.ReadFile(filepath.Join(root, "dashboards", "fspair-disk.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(control, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(args, control)

	r := runSchema(t, args...)
	if r.code != 1 {
		t.Fatalf("the check passed dashboards with planted faults (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	}
	if want := fmt.Sprintf("in %d of %d dashboard(s)", len(cases), len(args)); !strings.Contains(r.stderr, want) {
		t.Errorf("summary: want %q in\n%s", want, r.stderr)
	}
	byFile := map[string][]string{}
	for _, p := range r.problems() {
		file, _, _ := strings.Cut(p, ": ")
		byFile[file] = append(byFile[file], p)
	}
	if got := byFile[control]; len(got) > 0 {
		t.Errorf("the unchanged copy failed:\n%s", strings.Join(got, "\n"))
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := byFile[files[i].file]
			if len(got) != 1 {
				t.Fatalf("want one problem for %s, got %d:\n%s", files[i].file, len(got), strings.Join(got, "\n"))
			}
			line := got[0]
			if !strings.Contains(line, files[i].names) {
				t.Errorf("the problem does not name the panel or variable (%s):\n%s", files[i].names, line)
			}
			if !strings.Contains(line, "): "+c.path+": ") {
				t.Errorf("the problem does not name the path %s:\n%s", c.path, line)
			}
			for _, e := range c.expect {
				if !strings.Contains(line, e) {
					t.Errorf("the problem does not say %s:\n%s", e, line)
				}
			}
			t.Log(line)
		})
	}
}
