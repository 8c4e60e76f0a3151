package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeReport writes a stand-in for report/ that behaves as mode says:
// "ok" writes both files as report/ does, "fail" says what went wrong as
// report/ does and exits 1, "hang" starts a child (as report/ starts
// Chromium) and waits for it. Each run records its TMPDIR, arguments and
// the child's pid in dir.
func fakeReport(t *testing.T, dir, mode string) string {
	t.Helper()
	script := `#!/bin/sh
echo "$TMPDIR" > ` + dir + `/tmpdir
echo "$@" > ` + dir + `/args
while [ $# -gt 0 ]; do [ "$1" = -out ] && out=$2; shift; done
case ` + mode + ` in
ok) mkdir -p "$out" && echo '<html>' > "$out/report.html" && echo png > "$out/report.png" && echo "$out/report.html" && echo "$out/report.png" ;;
fail) echo "report: no data: no VM disk matches -disk demo-mail/vda in fspair_disk_info (pick one of: none)" >&2; exit 1 ;;
hang) sleep 60 & echo $! > ` + dir + `/child; wait ;;
esac
`
	p := filepath.Join(dir, "fake-report-"+mode)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newTestReporter(t *testing.T, bin string) (*reporter, string) {
	dir := t.TempDir()
	return &reporter{bin: bin, promURL: "http://127.0.0.1:1", disk: "demo-mail/vda", dir: filepath.Join(dir, "state", "report"),
		every: 3 * time.Minute, timeout: 10 * time.Second, since: time.Now().Add(-12 * time.Minute),
		done: make(chan renderResult, 1)}, dir
}

func TestReporterRendersAndKeepsTheLastGood(t *testing.T) {
	work := t.TempDir()
	r, _ := newTestReporter(t, fakeReport(t, work, "ok"))
	now := time.Now()
	if r.due(now, false) {
		t.Error("due before the rules class any disk")
	}
	if !r.due(now, true) {
		t.Fatal("not due at the first classed disk, 12 minutes after the VMs started")
	}
	if early := r.since.Add(2 * time.Minute); r.due(early, true) {
		t.Error("due 2 minutes after the VMs started, before its first interval")
	}
	r.start(now)
	if r.due(now.Add(time.Hour), true) {
		t.Error("due while a render runs")
	}
	lines := r.finish(<-r.done)
	want := []string{
		"demo: report: the live fleet and demo-mail/vda, re-rendered every 3m; open:",
		"  " + filepath.Join(r.dir, "report.html"),
		"  " + filepath.Join(r.dir, "report.png"),
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("first render printed:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range reportFiles {
		if st, err := os.Stat(filepath.Join(r.dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	args, _ := os.ReadFile(filepath.Join(work, "args"))
	if got := strings.TrimSpace(string(args)); got != "-prometheus http://127.0.0.1:1 -since 12m0s -disk demo-mail/vda -out "+r.dir+".new" {
		t.Errorf("report/ ran with %q", got)
	}
	tmp, _ := os.ReadFile(filepath.Join(work, "tmpdir"))
	if !strings.HasPrefix(string(tmp), r.dir+".new/") {
		t.Errorf("TMPDIR %q, want it under the scratch directory", tmp)
	}
	if _, err := os.Stat(r.dir + ".new"); !os.IsNotExist(err) {
		t.Errorf("scratch directory left behind: %v", err)
	}
	if r.due(now.Add(time.Minute), true) || !r.due(now.Add(3*time.Minute), true) {
		t.Error("not due again after its interval, or due before")
	}

	// A second good render prints nothing; a failed one a warning, and
	// the last good files stay.
	r.start(now.Add(3 * time.Minute))
	if lines := r.finish(<-r.done); len(lines) != 0 {
		t.Errorf("second render printed %q", lines)
	}
	good, at := r.last()
	r.bin = fakeReport(t, work, "fail")
	r.start(now.Add(6 * time.Minute))
	lines = r.finish(<-r.done)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "demo: report: warning: not rendered (next try in 3m): exit status 1: report: no data") ||
		runes(lines[0]) > lineWidth {
		t.Errorf("failed render printed %q, want one warning line of at most %d columns", lines, lineWidth)
	}
	if files, at2 := r.last(); strings.Join(files, " ") != strings.Join(good, " ") || at2 != at {
		t.Errorf("last report after a failure: %v at %s, want %v at %s", files, at2, good, at)
	}
	for _, f := range reportFiles {
		if _, err := os.Stat(filepath.Join(r.dir, f)); err != nil {
			t.Errorf("the last good %s is gone after a failed render: %v", f, err)
		}
	}
}

func TestReporterTimeoutKillsTheGroup(t *testing.T) {
	work := t.TempDir()
	r, _ := newTestReporter(t, fakeReport(t, work, "hang"))
	r.timeout = time.Second
	start := time.Now()
	r.start(start)
	lines := r.finish(<-r.done)
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("a hung render held on for %s, over its 1s limit", took)
	}
	if len(lines) != 1 || lines[0] != "demo: report: warning: not rendered (next try in 3m): took longer than 1s" {
		t.Errorf("hung render printed %q", lines)
	}
	assertGone(t, work)
	if files, _ := r.last(); len(files) != 0 {
		t.Errorf("a report without a good render: %v", files)
	}
}

func TestReporterStopEndsARender(t *testing.T) {
	work := t.TempDir()
	r, _ := newTestReporter(t, fakeReport(t, work, "hang"))
	r.timeout = time.Minute
	r.start(time.Now())
	// Wait until the child runs, then stop as the demo does at exit.
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(filepath.Join(work, "child")); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	r.stop()
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("stop took %s", took)
	}
	if r.running {
		t.Error("still running after stop")
	}
	assertGone(t, work)
}

// assertGone checks that the child the fake report started (Chromium's
// stand-in) was killed with it.
func assertGone(t *testing.T, work string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(work, "child"))
	if err != nil {
		t.Fatalf("the fake report started no child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Gone, or dead and not reaped yet (a zombie, whose reaping is up to
	// whichever process adopted it).
	for i := 0; i < 40; i++ {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("the report's child %d outlived it", pid)
}
