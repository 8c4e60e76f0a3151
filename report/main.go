// Command report renders what the fspair dashboards show, without Grafana:
// from a Prometheus that evaluates the fspair rules and a time range, the
// fleet's guest/host pair matrix per workload class (the knowledge base's
// verdict, the disks seen and their write amplification) and one VM disk's
// key panels (workload class and scores over time, latency by stage, write
// amplification, flush cost), as one self-contained HTML page and, with a
// headless Chromium, a PNG of it for a load-test report.
//
//	go run ./report -prometheus http://127.0.0.1:19090 -since 30m -out report/out
//
// The disk is the busiest one unless -disk names it (its image path, or
// domain/target such as web1/vda).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Options are the command's flags.
type Options struct {
	Prometheus string
	From, To   time.Time
	Step       time.Duration
	Disk       string
	Out        string
	Chromium   string
	Width      int
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o     Options
		since = fs.Duration("since", 30*time.Minute, "time range: this long before -to")
		to    = fs.String("to", "", "end of the range, RFC 3339 (default: now)")
		from  = fs.String("from", "", "start of the range, RFC 3339 (overrides -since)")
	)
	fs.StringVar(&o.Prometheus, "prometheus", "http://127.0.0.1:9090", "Prometheus base URL (with the fspair rules loaded)")
	fs.DurationVar(&o.Step, "step", 0, "resolution of the charts (default: range/120, at least 15s)")
	fs.StringVar(&o.Disk, "disk", "", "VM disk to show: image path or domain/target (default: the busiest disk)")
	fs.StringVar(&o.Out, "out", "fspair-report", "directory to write report.html and report.png to")
	fs.StringVar(&o.Chromium, "chromium", "chromium", "headless Chromium for the PNG; empty: HTML only")
	fs.IntVar(&o.Width, "width", 1200, "page width in pixels")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "report: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var err error
	if o.To, o.From, err = timeRange(*from, *to, *since, time.Now()); err != nil {
		fmt.Fprintf(stderr, "report: %v\n", err)
		return 2
	}
	if o.Step == 0 {
		o.Step = max(o.To.Sub(o.From)/120, 15*time.Second).Truncate(time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	files, err := Write(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "report: %v\n", err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return 0
}

// timeRange resolves the flags into the range's end and start.
func timeRange(from, to string, since time.Duration, now time.Time) (time.Time, time.Time, error) {
	end := now
	if to != "" {
		t, err := time.Parse(time.RFC3339, to)
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("-to %q: want RFC 3339, e.g. 2026-11-21T12:00:00Z", to)
		}
		end = t
	}
	start := end.Add(-since)
	if from != "" {
		t, err := time.Parse(time.RFC3339, from)
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("-from %q: want RFC 3339, e.g. 2026-11-21T11:30:00Z", from)
		}
		start = t
	}
	if !start.Before(end) {
		return time.Time{}, time.Time{}, fmt.Errorf("empty time range %s .. %s", start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	return end, start, nil
}

// Write queries Prometheus, writes report.html (and report.png when a
// Chromium is given) into o.Out and returns the paths written.
func Write(ctx context.Context, o Options) ([]string, error) {
	c, err := newClient(o.Prometheus)
	if err != nil {
		return nil, err
	}
	data, err := collect(ctx, c, o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.Out, err)
	}
	html := filepath.Join(o.Out, "report.html")
	if err := os.WriteFile(html, render(data, o.Width), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", html, err)
	}
	files := []string{html}
	if o.Chromium != "" {
		png := filepath.Join(o.Out, "report.png")
		if err := screenshot(ctx, o.Chromium, html, png, o.Width, data.height(o.Width)); err != nil {
			return files, err
		}
		files = append(files, png)
	}
	return files, nil
}

// screenshot renders the page with a headless Chromium.
func screenshot(ctx context.Context, chromium, html, png string, width, height int) error {
	bin, err := exec.LookPath(chromium)
	if err != nil {
		return fmt.Errorf("find %s for the PNG (install chromium, or pass -chromium '' for HTML only): %w", chromium, err)
	}
	abs, err := filepath.Abs(html)
	if err != nil {
		return err
	}
	// A throwaway profile: a root Chromium refuses the default one, and a
	// shared profile would lock out a second run.
	profile, err := os.MkdirTemp("", "fspair-report-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+profile, fmt.Sprintf("--window-size=%d,%d", width, height),
		"--screenshot="+png, "file://"+abs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chromium screenshot: %w: %s", err, tail(out, 400))
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		return errors.New("chromium wrote no screenshot: " + tail(out, 400))
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
