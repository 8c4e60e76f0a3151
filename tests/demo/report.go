package main

// The demo renders fspair's report (report/: the fleet's pair matrices and
// one VM disk's panels, as HTML and a PNG through a headless Chromium) from
// its own Prometheus every few minutes, so that a person has a picture of
// the live demo without a Grafana. A render runs in the background, in its
// own process group and with a time limit, so that it never holds up the
// status table and leaves no Chromium behind; it writes into a scratch
// directory and moves the files into place only when all went well, so
// the last good picture stays whole.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// reporter renders the report every `every` into dir.
type reporter struct {
	bin, promURL, disk, dir string
	every, timeout          time.Duration
	since                   time.Time // the VMs' start: the report covers the time since

	running  bool
	lastTry  time.Time
	done     chan renderResult
	cancel   context.CancelFunc
	lastGood renderResult // the last render that wrote its files
	shown    bool         // the files' paths have been printed
}

type renderResult struct {
	files []string // the report's files in dir, on success
	at    time.Time
	err   error
}

// reportFiles are the files report/ writes, in the order they are shown.
var reportFiles = []string{"report.html", "report.png"}

// due reports whether a render should start now: none runs, the last began
// (or, for the first, the VMs started) at least `every` ago, and the rules
// have classed a disk (before that the report has little to show).
func (r *reporter) due(now time.Time, classed bool) bool {
	last := r.lastTry
	if last.IsZero() {
		last = r.since
	}
	return r.bin != "" && !r.running && classed && now.Sub(last) >= r.every
}

// start begins a render in the background; its result comes on r.done.
func (r *reporter) start(now time.Time) {
	r.running, r.lastTry = true, now
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	r.cancel = cancel
	since := max(5*time.Minute, now.Sub(r.since)).Round(time.Minute)
	go func() {
		defer cancel()
		r.done <- r.render(ctx, since)
	}()
}

// render runs report/ once into a scratch directory and moves its files
// into dir.
func (r *reporter) render(ctx context.Context, since time.Duration) renderResult {
	res := renderResult{at: time.Now()}
	scratch := r.dir + ".new"
	if err := os.RemoveAll(scratch); err != nil {
		res.err = err
		return res
	}
	// Chromium's profile and temporary files go under the scratch
	// directory, so that a render cut short leaves nothing elsewhere.
	tmp := filepath.Join(scratch, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		res.err = err
		return res
	}
	defer os.RemoveAll(scratch)
	cmd := exec.CommandContext(ctx, r.bin, "-prometheus", r.promURL, "-since", since.String(), "-disk", r.disk, "-out", scratch)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	// Its own process group, killed whole at the time limit or at exit:
	// report/ starts Chromium, which starts more processes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.err = fmt.Errorf("took longer than %s", r.timeout)
		return res
	}
	if err != nil {
		res.err = fmt.Errorf("%v: %s", err, lastLine(string(out)))
		return res
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		res.err = err
		return res
	}
	for _, f := range reportFiles {
		dst := filepath.Join(r.dir, f)
		if err := os.Rename(filepath.Join(scratch, f), dst); err != nil {
			res.err = fmt.Errorf("move the report into place: %w", err)
			return res
		}
		res.files = append(res.files, dst)
	}
	return res
}

// finish takes a render's result and returns the lines to print: the
// files' paths after the first render that wrote them, a one-line warning
// after one that failed, nothing otherwise.
func (r *reporter) finish(res renderResult) []string {
	r.running = false
	if res.err != nil {
		return []string{cut(fmt.Sprintf("demo: report: warning: not rendered (next try in %s): %v", minutes(r.every), res.err), lineWidth)}
	}
	r.lastGood = res
	if r.shown {
		return nil
	}
	r.shown = true
	lines := []string{cut(fmt.Sprintf("demo: report: the live fleet and %s, re-rendered every %s; open:", r.disk, minutes(r.every)), lineWidth)}
	for _, f := range res.files {
		lines = append(lines, "  "+f)
	}
	return lines
}

// stop ends a render still running and waits for it.
func (r *reporter) stop() {
	if !r.running {
		return
	}
	r.cancel()
	r.finish(<-r.done)
}

// last is the last good report's files and when they were rendered; none
// when no render wrote them.
func (r *reporter) last() ([]string, string) {
	return r.lastGood.files, r.lastGood.at.Format("15:04:05")
}

// minutes writes a whole number of minutes as "3m", other durations as
// Go does.
func minutes(d time.Duration) string {
	if d > 0 && d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// lastLine is the last non-empty line of a command's output, where
// report/ says what went wrong.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
