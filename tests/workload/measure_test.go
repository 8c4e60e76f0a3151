//go:build measure

package workload

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// The full measurement matrix, built only with -tags measure. Run it one
// guest at a time under the lab lock, one pair per invocation so that
// other lab users get the lock in between (ReproduceCommand gives the
// whole sequence):
//
//	flock /var/tmp/fspair-lab.lock go test -tags measure -count=1 -timeout 30m \
//	    ./tests/workload/ -run 'TestMeasure$' -pairs ext4/xfs/raw
//
// Each run merges its pairs into testdata/features.json; TestRender then
// rewrites the generated part of FEATURES.md from that file.
var (
	flagPairs    = flag.String("pairs", strings.Join(MatrixPairs, ","), "pairs to measure, guest/host/format[/cache], comma-separated")
	flagRuntime  = flag.Duration("runtime", 90*time.Second, "fio runtime per workload phase")
	flagWarmup   = flag.Duration("warmup", 35*time.Second, "time skipped at the start of each phase (the guest writes dirty pages back once they are 30 s old)")
	flagInterval = flag.Duration("interval", 5*time.Second, "scrape interval")
	flagOut      = flag.String("out", "testdata/features.json", "results file (merged)")
	flagSwitch   = flag.String("switch", "ext4/xfs/raw", "pair for TestSwitch")
	flagWork     = flag.String("workloads", "web,mail,fileserver,rfa", "workloads for TestMeasure, comma-separated (variants and apps too: -workloads variants runs every jobs/CLASS-NAME.fio, -workloads apps every App)")
	flagWebRate  = flag.Int("web-rate", 50, "requests per second k6 sends to a web app")
	flagSub      = flag.Duration("subwindow", 0, "also record disjoint windows of this width inside each run's window (0: none)")
)

// TestMeasure runs the four workloads on each pair of -pairs, one guest per
// pair, and merges the window features into -out.
func TestMeasure(t *testing.T) {
	bin := buildExporter(t)
	res, err := LoadResults(*flagOut)
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range strings.Split(*flagPairs, ",") {
		p, err := ParsePair(ps)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(p.String(), func(t *testing.T) {
			runs, memMiB := measurePair(t, bin, p)
			for _, r := range runs {
				res.Put(r)
			}
			stampResults(res, true, memMiB)
			if err := res.Save(*flagOut); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// stampResults records the command and the setup of TestMeasure, with
// the memory the guest booted with; the switch recording leaves the setup
// of the runs alone.
func stampResults(res *Results, runs bool, memMiB int) {
	res.Updated = time.Now().UTC().Truncate(time.Second)
	if !runs && res.Setup.RuntimeSeconds > 0 {
		return
	}
	res.Setup = Setup{
		RuntimeSeconds: flagRuntime.Seconds(), WarmupSeconds: flagWarmup.Seconds(),
		IntervalSeconds: flagInterval.Seconds(), GuestMemMiB: memMiB, GuestCPUs: 1, ImageMiB: imageMiB,
		Notes: "TCG guest, virtio-blk, cache=none aio=native unless the pair names a cache mode; window features from counter deltas between the first scrape after the warm-up and the last within the runtime",
	}
}

// measurePair boots one guest for p and runs every workload in turn. It
// returns the runs and the guest's memory.
func measurePair(t *testing.T, bin string, p Pair) ([]RunResult, int) {
	ctx := context.Background()
	names := strings.Split(*flagWork, ",")
	switch *flagWork {
	case "variants":
		names = nil
		for _, v := range Variants() {
			names = append(names, string(v))
		}
	case "apps":
		names = nil
		for _, w := range AppWorkloads() {
			names = append(names, string(w))
		}
	}
	l := lab.ForTest(t)
	// Apps need the tools disk, and a web app the port forward k6 sends
	// its requests through.
	var extra lab.VMConfig
	webPort := 0
	for _, name := range names {
		a, ok := FindApp(Workload(name))
		if !ok {
			continue
		}
		if len(extra.Disks) == 0 {
			d, err := AppsDisk(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			extra.Disks = append(extra.Disks, d)
			extra.MemMiB = AppGuestMemMiB
		}
		if a.WebFiles > 0 && webPort == 0 {
			var err error
			if webPort, err = freePort(); err != nil {
				t.Fatal(err)
			}
			extra.HostFwd = append(extra.HostFwd, lab.Forward{HostPort: webPort, GuestPort: 80})
		}
	}
	g := bootPair(ctx, t, l, p, extra)
	if len(extra.Disks) > 0 {
		if err := MountApps(ctx, g.vm); err != nil {
			t.Fatal(err)
		}
	}
	ex, err := StartExporter(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	if _, err := ex.WaitDisk(ctx, g.disk.File, time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := ex.Record(ctx, g.disk.File, *flagInterval)
	var out []RunResult
	for _, name := range names {
		w, err := ParseWorkload(name)
		if err != nil {
			t.Fatal(err)
		}
		a, isApp := FindApp(w)
		var ph *Phase
		if isApp {
			var load func(context.Context, time.Duration) error
			if a.WebFiles > 0 {
				load = k6Web(t, webPort, a.WebFiles)
			}
			ph, err = RunAppPhase(ctx, g.vm, rec, a, *flagRuntime, load)
		} else {
			ph, err = RunPhase(ctx, g.vm, rec, w, *flagRuntime)
		}
		if err != nil {
			t.Fatal(err)
		}
		f, from, to, span, err := ph.WindowSnapshots(rec.Points(), *flagWarmup)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s on %s: window %.0fs, fio %+v\n%s", w, p, span.Seconds(), ph.Fio, Describe(f))
		r := RunResult{Workload: w, Pair: p.String(), WindowSeconds: span.Seconds(),
			Features: f, Fio: ph.Fio, Measured: time.Now().UTC().Truncate(time.Second), From: &from, To: &to}
		if *flagSub > 0 {
			r.Windows = ph.Disjoint(rec.Points(), *flagWarmup, *flagSub)
		}
		out = append(out, r)
		if isApp {
			err = CleanApp(ctx, g.vm, a)
		} else {
			err = Clean(ctx, g.vm, w)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rec.Stop(); err != nil {
		t.Logf("scrape errors (those points are missing): %v", err)
	}
	return out, g.memMiB
}

// TestSwitch runs web and then mail in one running guest, scraping every
// interval, and records sliding-window features across the switch.
func TestSwitch(t *testing.T) {
	p, err := ParsePair(*flagSwitch)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildExporter(t)
	res, err := LoadResults(*flagOut)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := lab.ForTest(t)
	g := bootPair(ctx, t, l, p)
	ex, err := StartExporter(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	if _, err := ex.WaitDisk(ctx, g.disk.File, time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := ex.Record(ctx, g.disk.File, *flagInterval)
	if _, err := RunPhase(ctx, g.vm, rec, Web, *flagRuntime); err != nil {
		t.Fatal(err)
	}
	pts := rec.Points()
	switchAt := pts[len(pts)-1].Time.Sub(pts[0].Time).Seconds()
	// No cleaning in between: the web files stay, as on a real server
	// whose work changes.
	if _, err := RunPhase(ctx, g.vm, rec, Mail, *flagRuntime); err != nil {
		t.Fatal(err)
	}
	pts, err = rec.Stop()
	if err != nil {
		t.Logf("scrape errors: %v", err)
	}
	sw := Switch{Pair: p.String(), From: Web, To: Mail, SwitchAt: switchAt,
		Measured: time.Now().UTC().Truncate(time.Second), Points: pts}
	samples := Windows(pts, SwitchWindow)
	for _, s := range samples {
		t.Logf("t=%5.0fs phase=%-16s class=%-10s read_share=%s flushes/write=%s sync=%s",
			s.At, s.Phase, Classify(s.Features), fv(s.Features, FeatReadShare), fv(s.Features, FeatFlushesPerWrite), fv(s.Features, FeatSyncWriteShare))
	}
	t.Logf("class right %.0fs after the switch", FirstRight(samples, switchAt, Class(Mail)))
	res.PutSwitch(sw)
	stampResults(res, false, g.memMiB)
	if err := res.Save(*flagOut); err != nil {
		t.Fatal(err)
	}
}

// TestRender derives the features in -out again from the stored scrapes
// (after a change to Compute), rewrites it in the current schema, and
// rewrites the generated part of FEATURES.md from it.
func TestRender(t *testing.T) {
	res, err := LoadResults(*flagOut)
	if err != nil {
		t.Fatal(err)
	}
	res.Recompute()
	if err := res.Save(*flagOut); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("FEATURES.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Splice(string(doc), res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("FEATURES.md", []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGuestSeparation prints, from the results of -out, each feature the
// guest side also gives next to its image-file namesake: its range per
// workload over the pairs measured, and how far apart the workloads' ranges
// lie (the smallest gap between neighbouring ranges, as a ratio for sizes
// and ratios, as a difference for shares). rules/README.md (The
// classifier's inputs) quotes it.
func TestGuestSeparation(t *testing.T) {
	res, err := LoadResults(*flagOut)
	if err != nil {
		t.Fatal(err)
	}
	pairs := [][2]string{
		{FeatReadShare, FeatGuestReadShare},
		{FeatMeanReadSize, FeatGuestMeanReadSize},
		{FeatMeanWriteSize, FeatGuestMeanWriteSize},
		{FeatFlushesPerWrite, FeatGuestFlushesPerWrite},
		{FeatReadWriteRatio, FeatGuestReadWriteRatio},
	}
	var b strings.Builder
	b.WriteString("| feature | side |")
	for _, w := range Workloads {
		fmt.Fprintf(&b, " %s |", w)
	}
	b.WriteString(" closest neighbours |\n|---|---|")
	for range Workloads {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	seen := 0
	for _, p := range pairs {
		for side, n := range p {
			type span struct {
				w      Workload
				lo, hi float64
			}
			var spans []span
			fmt.Fprintf(&b, "| %s | %s |", p[0], []string{"image file", "guest"}[side])
			for _, w := range Workloads {
				lo, hi, ok := res.Span(w, n)
				if !ok {
					b.WriteString(" - |")
					continue
				}
				seen++
				spans = append(spans, span{w, lo, hi})
				fmt.Fprintf(&b, " %s .. %s |", format(p[0], lo), format(p[0], hi))
			}
			sort.Slice(spans, func(i, j int) bool { return spans[i].lo+spans[i].hi < spans[j].lo+spans[j].hi })
			ratio := !strings.Contains(p[0], "share")
			best, what := math.Inf(1), "-"
			for i := 1; i < len(spans); i++ {
				a, c := spans[i-1], spans[i]
				gap := c.lo - a.hi
				s := fmt.Sprintf("%+.2f", gap)
				if ratio && a.hi > 0 {
					gap = c.lo / a.hi
					s = fmt.Sprintf("x%.2f", gap)
				}
				if gap < best {
					best, what = gap, fmt.Sprintf("%s %s %s", a.w, s, c.w)
				}
			}
			fmt.Fprintf(&b, " %s |\n", what)
		}
	}
	if seen == 0 {
		t.Fatalf("%s has no guest-side features: measure with TestMeasure first", *flagOut)
	}
	t.Logf("\n%s", b.String())
}

// k6Web returns the host's side of a web app: k6 (scripts/k6.sh builds
// it) sending -web-rate requests per second for the runtime to random
// files of the guest's site through the forward on port. k6's verdict on
// its thresholds (exit status 99) is logged, not fatal: the measurement is
// of the disk, and a slow TCG guest may miss a latency objective.
func k6Web(t *testing.T, port, files int) func(context.Context, time.Duration) error {
	t.Helper()
	out, err := exec.Command("bash", "../../scripts/k6.sh", "path").Output()
	if err != nil {
		t.Fatalf("build k6 (scripts/k6.sh path): %v", err)
	}
	k6 := strings.TrimSpace(string(out))
	return func(ctx context.Context, runtime time.Duration) error {
		cmd := exec.CommandContext(ctx, k6, "run", "--quiet",
			"-e", fmt.Sprintf("BASE_URL=http://127.0.0.1:%d", port), "-e", fmt.Sprintf("FILES=%d", files),
			"-e", fmt.Sprintf("RATE=%d", *flagWebRate), "-e", fmt.Sprintf("DURATION=%ds", int(runtime.Seconds())),
			"../k6/web.js")
		b, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 99 {
			t.Logf("k6: the web app missed a threshold of tests/k6/web.js:\n%s", tail(string(b), 1500))
			return nil
		}
		if err != nil {
			return fmt.Errorf("k6 run web.js: %w\n%s", err, tail(string(b), 1500))
		}
		t.Logf("k6:\n%s", tail(string(b), 1500))
		return nil
	}
}
