package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

func TestOptions(t *testing.T) {
	o, err := parseOptions([]string{"-size", "quick"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Pairs, []string{"ext4/xfs", "xfs/xfs"}) ||
		!reflect.DeepEqual(o.Workloads, []workload.Workload{workload.Mail, workload.Fileserver}) ||
		o.Repeats != 2 || o.Runtime != 20*time.Second || o.Warmup != 8*time.Second || o.Interval != 2*time.Second ||
		o.State != "/var/tmp/fspair-kdb/quick" || o.Out != "kdb-report/quick" || o.Site != "kdb-report/quick/site.yaml" ||
		o.Format != "raw" || o.Cache != "none" || o.Lock != "/var/tmp/fspair-lab.lock" || !o.Check {
		t.Errorf("quick: %+v", o)
	}

	o, err = parseOptions(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Pairs) != 9 || len(o.Workloads) != 4 || o.Repeats != 3 || o.Runtime != 90*time.Second || o.Warmup != 35*time.Second {
		t.Errorf("default (full): %d pairs, %d workloads, %d repeats, %s runtime, %s warm-up", len(o.Pairs), len(o.Workloads), o.Repeats, o.Runtime, o.Warmup)
	}

	o, err = parseOptions([]string{"-size", "quick", "-pairs", "btrfs/xfs, ext4/ext4,btrfs/xfs", "-workloads", "rfa", "-repeats", "5",
		"-runtime", "60s", "-format", "qcow2", "-cache", "writeback", "-site", "rules/kdb/site.yaml"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Pairs, []string{"btrfs/xfs", "ext4/ext4"}) || !reflect.DeepEqual(o.Workloads, []workload.Workload{workload.RFA}) ||
		o.Repeats != 5 || o.Runtime != time.Minute || o.Warmup != 8*time.Second || o.Site != "rules/kdb/site.yaml" {
		t.Errorf("flags over the quick size: %+v", o)
	}
	if s := o.settings(); s != (Settings{Format: "qcow2", Cache: "writeback", RuntimeSeconds: 60, WarmupSeconds: 8, IntervalSeconds: 2, Storage: "loop",
		HostDevice: "loop", Method: MethodBlocks, Control: "btrfs/xfs:rfa"}) {
		t.Errorf("settings %+v", s)
	}

	o, err = parseOptions([]string{"-pairs", "ext4/xfs", "-hostdir", "xfs=/srv/xfs"}, io.Discard)
	if err != nil || o.HostDirs["xfs"] != "/srv/xfs" || o.settings().Storage != "hostdir" || o.settings().HostDevice != "" {
		t.Errorf("-hostdir: %v, %+v", err, o)
	}

	o, err = parseOptions([]string{"-size", "quick", "-control", "xfs/xfs:fileserver", "-seed", "77", "-confidence", "0.99", "-budget", "2h", "-hostdev", "loop-sync"}, io.Discard)
	if err != nil || o.control != (controlCell{"xfs/xfs", workload.Fileserver}) || o.Confidence != 0.99 || o.Budget != 2*time.Hour {
		t.Errorf("-control, -confidence, -budget: %v, %+v", err, o)
	} else if s := o.settings(); s.Seed != 77 || s.Control != "xfs/xfs:fileserver" || s.HostDevice != HostDevSync {
		t.Errorf("-seed, -control, -hostdev settings: %+v", s)
	}
	if o, _ := parseOptions([]string{"-size", "quick"}, io.Discard); o.control != (controlCell{"ext4/xfs", workload.Mail}) || o.Confidence != DefaultConfidence {
		t.Errorf("default control %v, confidence %g", o.control, o.Confidence)
	}

	for _, bad := range [][]string{
		{"-size", "medium"},
		{"-pairs", "ext4-xfs"},
		{"-pairs", "ext4/xfs/raw"},
		{"-pairs", "zfs/xfs"},
		{"-workloads", "db"},
		{"-format", "vmdk"},
		{"-cache", "sometimes"},
		{"-repeats", "-1"},
		{"-runtime", "5s"},
		{"-runtime", "30500ms"},
		{"-warmup", "100s"},
		{"-interval", "40s", "-runtime", "60s", "-warmup", "10s"},
		{"-tolerance", "1.5"},
		{"-confidence", "0.3"},
		{"-confidence", "1"},
		{"-budget", "-1h"},
		{"-hostdev", "dm-delay"},
		{"-control", "ext4/xfs"},
		{"-control", "ext4/zfs:mail"},
		{"-control", "ext4/xfs:db"},
		{"-hostdir", "zfs=/x"},
		{"-hostdir", "ext4=/x"}, // the default pairs need xfs and btrfs too
		{"extra"},
	} {
		if _, err := parseOptions(bad, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: got %v, want a usage error", bad, err)
		}
	}
}

// quickState fills a state directory with every run of -size quick.
func quickState(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	o, err := parseOptions([]string{"-size", "quick"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := o.settings()
	st, err := OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := plan(o, st)
	for _, r := range synthJobs(p, planted(map[string]float64{"ext4/xfs": 1.2, "xfs/xfs": 0.6}), noDrift, 0.01, 1) {
		if err := st.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRerunDone: with every run of the matrix in the state, a rerun boots
// nothing (it needs neither root nor the lab) and writes the site file
// and the report, checked through rules/gen and promtool.
func TestRerunDone(t *testing.T) {
	state := quickState(t)
	out := filepath.Join(t.TempDir(), "report")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-size", "quick", "-state", state, "-out", out, "-lock", ""}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, &stderr)
	}
	if strings.Contains(stderr.String(), "building fspair_exporter") || strings.Contains(stderr.String(), "runs to make") {
		t.Errorf("a finished matrix started runs:\n%s", &stderr)
	}
	listed := strings.Fields(stdout.String())
	for _, want := range []string{"site.yaml", "report.md", "report.html", "cells.json", "heatmap-mail.png", "heatmap-fileserver.png"} {
		p := filepath.Join(out, want)
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", want, err)
		}
		found := false
		for _, l := range listed {
			found = found || l == p
		}
		if !found {
			t.Errorf("%s not listed on stdout: %q", p, listed)
		}
	}
	site := read(t, filepath.Join(out, "site.yaml"))
	// Two repeats of two pairs leave two residual degrees of freedom:
	// nothing is settled however far apart the pairs, and that is no
	// failure.
	for _, want := range []string{"workload: mail\n  pair: ext4/xfs\n  verdict: not_distinguishable", "workload: fileserver\n  pair: xfs/xfs\n  verdict: not_distinguishable", `date: "2026-11-21"`, "conditions: image raw, cache=none, host device loop"} {
		if !strings.Contains(site, want) {
			t.Errorf("site.yaml lacks %q:\n%s", want, site)
		}
	}
	md := read(t, filepath.Join(out, "report.md"))
	for _, want := range []string{"Checked: `go run ./rules/gen` loaded it", "carry 0 site verdicts", "| mail | xfs/xfs | worst | not distinguishable | 2/2 |", "go run ./tests/kdb -size quick -state",
		"## Drift measured by the controls", "Control cell ext4/xfs:mail, 6 runs", "2 residual degrees of freedom"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if strings.Contains(md, "## Not measured") || strings.Contains(md, "Stopped early") {
		t.Error("report lists missing runs for a complete matrix")
	}

	// -report-only renders the same state; asking for more repeats there
	// lists the runs it lacks instead of making them.
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"-report-only", "-size", "quick", "-repeats", "3", "-state", state, "-out", out, "-check=false"}, &stdout, &stderr); code != 0 {
		t.Fatalf("-report-only: exit %d: %s", code, &stderr)
	}
	if md := read(t, filepath.Join(out, "report.md")); !strings.Contains(md, "7 runs asked for are not in the state: control mail on ext4/xfs, block 3 start") ||
		!strings.Contains(md, "## Stopped early: what is settled") || strings.Contains(md, "Checked:") {
		t.Errorf("-report-only -repeats 3 report:\n%s", md)
	}

	// Other settings on the same state are refused before anything runs.
	if code := run([]string{"-size", "quick", "-runtime", "40s", "-state", state, "-out", out, "-lock", ""}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "other settings") {
		t.Errorf("other runtime on the same state: exit %d: %s", code, &stderr)
	}
}

func TestReportOnlyEmpty(t *testing.T) {
	dir := t.TempDir()
	s := testSettings
	if _, err := OpenStore(dir, &s); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run([]string{"-report-only", "-state", dir, "-out", t.TempDir()}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "no runs") {
		t.Errorf("empty state: exit %d: %s", code, &stderr)
	}
}

func TestCommand(t *testing.T) {
	if got := command([]string{"-size", "full", "-hostdir", "ext4=/srv/my disk"}); got != "go run ./tests/kdb -size full -hostdir 'ext4=/srv/my disk'" {
		t.Errorf("command: %s", got)
	}
	if got := command([]string{"-report-only", "-size", "quick"}); got != "go run ./tests/kdb -size quick" {
		t.Errorf("command of -report-only: %s", got)
	}
}

// TestReportOnlyLegacy: a state made pair by pair before the blocks (no
// method, no seed, no control runs) renders with -report-only, settles
// nothing and says why; new runs in it are refused.
func TestReportOnlyLegacy(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, settingsFile), []byte(`{"format":"raw","cache":"none","runtime_seconds":30,"warmup_seconds":10,"interval_seconds":2,"storage":"loop"}`+"\n"), 0o644)
	var lines []byte
	for _, p := range []string{"ext4/xfs", "xfs/xfs"} {
		for _, r := range synthCell(p, workload.Mail, 10e6, 10.1e6, 9.9e6) {
			if p == "xfs/xfs" {
				r.Fio.ReadBWBytes /= 2
				r.Fio.WriteBWBytes /= 2
			}
			b, _ := json.Marshal(r)
			lines = append(append(lines, b...), '\n')
		}
	}
	os.WriteFile(filepath.Join(dir, runsFile), lines, 0o644)
	out := t.TempDir()
	var stderr bytes.Buffer
	if code := run([]string{"-report-only", "-size", "quick", "-state", dir, "-out", out, "-check=false"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, &stderr)
	}
	md := read(t, filepath.Join(out, "report.md"))
	for _, want := range []string{"No control runs: these runs were made before the randomized blocks", "| mail | xfs/xfs | worst | not distinguishable | 2/2 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if site := read(t, filepath.Join(out, "site.yaml")); strings.Contains(site, "verdict: best") || !strings.Contains(site, "no control runs") {
		t.Errorf("legacy site file:\n%s", site)
	}
	stderr.Reset()
	if code := run([]string{"-size", "quick", "-state", dir, "-out", out, "-lock", ""}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "before randomized blocks") {
		t.Errorf("new runs in a legacy state: exit %d: %s", code, &stderr)
	}
}
