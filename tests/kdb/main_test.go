package main

import (
	"bytes"
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
		o.Repeats != 2 || o.Runtime != 30*time.Second || o.Warmup != 10*time.Second || o.Interval != 2*time.Second ||
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
		o.Repeats != 5 || o.Runtime != time.Minute || o.Warmup != 10*time.Second || o.Site != "rules/kdb/site.yaml" {
		t.Errorf("flags over the quick size: %+v", o)
	}
	if s := o.settings(); s != (Settings{Format: "qcow2", Cache: "writeback", RuntimeSeconds: 60, WarmupSeconds: 10, IntervalSeconds: 2, Storage: "loop"}) {
		t.Errorf("settings %+v", s)
	}

	o, err = parseOptions([]string{"-pairs", "ext4/xfs", "-hostdir", "xfs=/srv/xfs"}, io.Discard)
	if err != nil || o.HostDirs["xfs"] != "/srv/xfs" || o.settings().Storage != "hostdir" {
		t.Errorf("-hostdir: %v, %+v", err, o)
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
	bw := map[string]float64{"ext4/xfs": 12e6, "xfs/xfs": 6e6}
	for _, j := range func() []job { p, _ := plan(o, st); return p }() {
		b := bw[j.pair] * (1 + 0.01*float64(j.repeat))
		if err := st.Append(synthRun(j.pair, j.workload, j.repeat, synth{bw: b, wamp: 1, writeLat: 0.001})); err != nil {
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
	for _, want := range []string{"workload: mail\n  pair: ext4/xfs\n  verdict: best", "workload: fileserver\n  pair: xfs/xfs\n  verdict: worst", `date: "2026-11-21"`} {
		if !strings.Contains(site, want) {
			t.Errorf("site.yaml lacks %q:\n%s", want, site)
		}
	}
	md := read(t, filepath.Join(out, "report.md"))
	for _, want := range []string{"Checked: `go run ./rules/gen` loaded it", "carry 4 site verdicts", "| mail | xfs/xfs | worst | worst | 2/2 |", "go run ./tests/kdb -size quick -state"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if strings.Contains(md, "## Not measured") {
		t.Error("report lists missing runs for a complete matrix")
	}

	// -report-only renders the same state; asking for more repeats there
	// lists the runs it lacks instead of making them.
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"-report-only", "-size", "quick", "-repeats", "3", "-state", state, "-out", out, "-check=false"}, &stdout, &stderr); code != 0 {
		t.Fatalf("-report-only: exit %d: %s", code, &stderr)
	}
	if md := read(t, filepath.Join(out, "report.md")); !strings.Contains(md, "4 runs asked for are not in the state: mail on ext4/xfs #3") || strings.Contains(md, "Checked:") {
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
