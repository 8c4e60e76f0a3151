// Command kdb is the pair lab: it re-derives the knowledge base's best and
// worst guest/host file-system pairs on this site's own machine. For each
// pair (ext4, XFS, Btrfs as guest and as host: nine) it boots a lab guest,
// runs the four workloads of the knowledge base in it (tests/workload:
// web, mail, fileserver, rfa) several times while fspair_exporter
// measures, and writes
//
//   - a site knowledge-base file in the schema rules/gen reads
//     (rules/kdb/site.yaml), so that the rules, alerts and dashboards use
//     the site's verdicts where it has them;
//   - a report (Markdown and HTML) with a 3x3 heatmap per workload, the
//     throughput, write amplification, latency by stage and flush cost of
//     every cell, and the comparison with the published table
//     (rules/kdb/pairs.yaml).
//
// The runs are made in randomized blocks with a control cell at the start,
// middle and end of each (schedule.go), the drift the controls measure is
// taken out (drift.go), and a pair is called best or worst only when its
// difference from the others is outside the noise (verdict.go).
//
// Every finished run is appended to a state directory, so an interrupted
// matrix resumes where it stopped; a stop (interrupt, -budget) still
// writes the report and the site file, saying what is settled.
//
//	go run ./tests/kdb -size quick     # CI: 2 pairs x 2 workloads x 2 repeats (+6 controls), about 8 minutes
//	go run ./tests/kdb -size full      # 9 pairs x 4 workloads x 3 repeats (+9 controls), about 3 h 10 min
//	go run ./tests/kdb -report-only -state DIR -out DIR   # render again, no guests
//
// It needs root and the lab's packages (tests/lab/README.md) to boot
// guests. README.md has the rest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Options are the command's flags, with the size's defaults filled in.
type Options struct {
	Size      string
	Pairs     []string // guest/host
	Format    string
	Cache     string
	Workloads []workload.Workload
	Repeats   int
	Runtime   time.Duration
	Warmup    time.Duration
	Interval  time.Duration
	Tolerance float64
	// Confidence is the level at which a pair is called best or worst
	// (verdict.go); rules/gen acts only on verdicts at its
	// MinSiteConfidence (0.95) or more.
	Confidence float64
	Control    string      // -control as given
	control    controlCell // the control cell
	Seed       int64       // -seed; 0: the state's, or a new one
	Budget     time.Duration
	HostDevice string // -hostdev (hostdev.go)
	State      string
	Out        string
	Site       string
	KDB        string
	HostDirs   map[string]string // host fs -> directory (-hostdir)
	Lock       string
	ReportOnly bool
	Check      bool
	Verbose    bool
}

// size is a preset matrix.
type size struct {
	pairs     []string
	workloads []workload.Workload
	repeats   int
	runtime   time.Duration
	warmup    time.Duration
	interval  time.Duration
}

// Sizes are the presets of -size.
//
// quick fits a job of about 7 minutes (14 runs: two blocks of the 4
// cells and the 3 control runs, and 4-5 guest boots a block; before the
// blocks it was 8 runs of 30 s and 8 minutes; the runs are 20 s since;
// make test runs its first block, -repeats 1): the two pairs the CI validation
// uses (tests/validate), which the published table rates apart for both
// workloads (ext4/xfs best, xfs/xfs worst for mail and fileserver), mail
// and fileserver only, two repeats of 20 s. Those two workloads put their
// writes on the image within seconds (mail fsyncs every append;
// fileserver starts write-back itself with sync_file_range, see
// tests/workload/jobs), so an 8 s warm-up suffices; web's and rfa's
// asynchronous writes need the guest's 30 s write-back age
// (tests/workload/FEATURES.md), hence full's 35 s. Scrapes every 2 s keep
// the 12 s window covered (6 scrapes).
//
// full is the whole matrix with the runtime and warm-up of
// tests/workload's measurements (90 s, 35 s) and three repeats: 108 runs,
// and 9 control runs.
var Sizes = map[string]size{
	"quick": {
		pairs:     []string{"ext4/xfs", "xfs/xfs"},
		workloads: []workload.Workload{workload.Mail, workload.Fileserver},
		repeats:   2, runtime: 20 * time.Second, warmup: 8 * time.Second, interval: 2 * time.Second,
	},
	"full": {
		pairs: AllPairs(), workloads: workload.Workloads,
		repeats: 3, runtime: 90 * time.Second, warmup: 35 * time.Second, interval: 5 * time.Second,
	},
}

// ErrUsage is wrapped by the errors for bad flags.
var ErrUsage = errors.New("bad usage")

// parseOptions parses the flags and fills in the size's defaults where a
// flag was not given.
func parseOptions(args []string, stderr io.Writer) (*Options, error) {
	fs := flag.NewFlagSet("kdb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &Options{}
	var pairs, works, hostdirs string
	fs.StringVar(&o.Size, "size", "full", "matrix size: quick (CI: 2 pairs x 2 workloads x 2 repeats and 6 control runs, 20 s runs) or full (9 pairs x 4 workloads x 3 repeats, 90 s runs)")
	fs.StringVar(&pairs, "pairs", "", "guest/host pairs, comma-separated, over ext4, xfs, btrfs (default: by -size; full: all nine)")
	fs.StringVar(&o.Format, "format", "raw", "image format: raw or qcow2")
	fs.StringVar(&o.Cache, "cache", "none", "QEMU cache mode: none (aio=native), writeback, writethrough, directsync, unsafe")
	fs.StringVar(&works, "workloads", "", "workloads, comma-separated: web, mail, fileserver, rfa (default: by -size)")
	fs.IntVar(&o.Repeats, "repeats", 0, "runs per cell (default: by -size; full: 3)")
	fs.DurationVar(&o.Runtime, "runtime", 0, "fio runtime per run (default: by -size; full: 90s)")
	fs.DurationVar(&o.Warmup, "warmup", 0, "start of a run left out of the window figures (default: by -size; full: 35s, the guest's 30 s write-back age)")
	fs.DurationVar(&o.Interval, "interval", 0, "exporter scrape interval (default: by -size)")
	fs.Float64Var(&o.Tolerance, "tolerance", DefaultTolerance, "relative throughput difference below which two pairs are never called apart, however sure the statistics")
	fs.Float64Var(&o.Confidence, "confidence", DefaultConfidence, "confidence level at which a pair is called best or worst; below it the verdict is not_distinguishable")
	fs.StringVar(&o.Control, "control", "", "control cell run at the start, middle and end of every block to measure the drift, pair:workload (default: the first pair and the first workload)")
	fs.Int64Var(&o.Seed, "seed", 0, "seed of the blocks' order and of the bootstrap (default: the state's, or a new one, recorded in <state>/settings.json)")
	fs.DurationVar(&o.Budget, "budget", 0, "stop starting runs after this long and report what is settled (0: no limit); a rerun resumes")
	fs.StringVar(&o.HostDevice, "hostdev", HostDevLoop, "what the lab's host file systems sit on: loop (a loop device over a file, writes cached between flushes), loop-direct (loop device with direct I/O: every write reaches the lab's disk), loop-sync (loop device over a file on an ext4 mounted -o sync on a direct-I/O loop device)")
	fs.StringVar(&o.State, "state", "", "state directory, resumable (default: /var/tmp/fspair-kdb/<size>)")
	fs.StringVar(&o.Out, "out", "", "report directory (default: kdb-report/<size>)")
	fs.StringVar(&o.Site, "site", "", "site knowledge-base file to write (default: <out>/site.yaml); entries for other cells in an existing file are kept")
	fs.StringVar(&o.KDB, "kdb", "", "published knowledge base (default: rules/kdb/pairs.yaml in the repository)")
	fs.StringVar(&hostdirs, "hostdir", "", "real host: put the images in these directories instead of lab loop devices, e.g. ext4=/srv/ext4,xfs=/srv/xfs,btrfs=/srv/btrfs")
	fs.StringVar(&o.Lock, "lock", lab.LockPath, "lab lock, taken for each pair's guest (empty: none)")
	fs.BoolVar(&o.ReportOnly, "report-only", false, "boot nothing: write the site file and the report from the state")
	fs.BoolVar(&o.Check, "check", true, "check the site file with rules/gen and promtool")
	fs.BoolVar(&o.Verbose, "v", false, "print the lab's stage lines")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	sz, ok := Sizes[o.Size]
	if !ok {
		return nil, fmt.Errorf("%w: -size %q: want quick or full", ErrUsage, o.Size)
	}
	o.Pairs = sz.pairs
	if pairs != "" {
		o.Pairs = nil
		for _, p := range strings.Split(pairs, ",") {
			p = strings.TrimSpace(p)
			wp, err := workload.ParsePair(p + "/raw")
			if err != nil || strings.Count(p, "/") != 1 {
				return nil, fmt.Errorf("%w: -pairs: %q: want guest/host over ext4, xfs, btrfs", ErrUsage, p)
			}
			p = wp.GuestFS + "/" + wp.HostFS
			if !slices.Contains(o.Pairs, p) {
				o.Pairs = append(o.Pairs, p)
			}
		}
	}
	o.Workloads = sz.workloads
	if works != "" {
		o.Workloads = nil
		for _, s := range strings.Split(works, ",") {
			w, err := workload.ParseWorkload(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("%w: -workloads: %v", ErrUsage, err)
			}
			if !slices.Contains(o.Workloads, w) {
				o.Workloads = append(o.Workloads, w)
			}
		}
	}
	if _, err := workload.ParsePair("ext4/ext4/" + o.Format + "/" + o.Cache); err != nil {
		return nil, fmt.Errorf("%w: -format: %v", ErrUsage, err)
	}
	switch o.Cache {
	case "none", "writeback", "writethrough", "directsync", "unsafe":
	default:
		return nil, fmt.Errorf("%w: -cache %q: want none, writeback, writethrough, directsync or unsafe", ErrUsage, o.Cache)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Runtime, sz.runtime)
	def(&o.Warmup, sz.warmup)
	def(&o.Interval, sz.interval)
	if o.Repeats == 0 {
		o.Repeats = sz.repeats
	}
	switch {
	case o.Repeats < 1:
		return nil, fmt.Errorf("%w: -repeats %d: want at least 1", ErrUsage, o.Repeats)
	case o.Runtime < 10*time.Second || o.Runtime%time.Second != 0:
		return nil, fmt.Errorf("%w: -runtime %s: want whole seconds, at least 10s", ErrUsage, o.Runtime)
	case o.Warmup >= o.Runtime:
		return nil, fmt.Errorf("%w: -warmup %s must be shorter than -runtime %s", ErrUsage, o.Warmup, o.Runtime)
	case o.Interval <= 0 || o.Interval > (o.Runtime-o.Warmup)/2:
		return nil, fmt.Errorf("%w: -interval %s: want at most half the window (%s)", ErrUsage, o.Interval, o.Runtime-o.Warmup)
	case !(o.Tolerance >= 0 && o.Tolerance < 1):
		return nil, fmt.Errorf("%w: -tolerance %g: want 0 <= t < 1", ErrUsage, o.Tolerance)
	case !(o.Confidence >= 0.5 && o.Confidence < 1):
		return nil, fmt.Errorf("%w: -confidence %g: want 0.5 <= c < 1", ErrUsage, o.Confidence)
	case o.Budget < 0:
		return nil, fmt.Errorf("%w: -budget %s: want 0 (none) or more", ErrUsage, o.Budget)
	case !slices.Contains(HostDevices, o.HostDevice):
		return nil, fmt.Errorf("%w: -hostdev %q: want one of %s", ErrUsage, o.HostDevice, strings.Join(HostDevices, ", "))
	}
	ctrl, err := parseControl(o.Control, o.Pairs, o.Workloads)
	if err != nil {
		return nil, err
	}
	o.control = ctrl
	if hostdirs != "" {
		o.HostDirs = map[string]string{}
		for _, kv := range strings.Split(hostdirs, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || !slices.Contains(FileSystems, k) || v == "" {
				return nil, fmt.Errorf("%w: -hostdir %q: want fs=DIR with fs ext4, xfs or btrfs", ErrUsage, kv)
			}
			o.HostDirs[k] = v
		}
		for _, p := range o.Pairs {
			_, h, _ := strings.Cut(p, "/")
			if _, ok := o.HostDirs[h]; !ok {
				return nil, fmt.Errorf("%w: -hostdir has no directory for host fs %s (pair %s)", ErrUsage, h, p)
			}
		}
	}
	if o.State == "" {
		o.State = filepath.Join("/var/tmp/fspair-kdb", o.Size)
	}
	if o.Out == "" {
		o.Out = filepath.Join("kdb-report", o.Size)
	}
	if o.Site == "" {
		o.Site = filepath.Join(o.Out, "site.yaml")
	}
	return o, nil
}

// settings are the conditions o's runs share.
func (o *Options) settings() Settings {
	s := Settings{Format: o.Format, Cache: o.Cache, RuntimeSeconds: o.Runtime.Seconds(),
		WarmupSeconds: o.Warmup.Seconds(), IntervalSeconds: o.Interval.Seconds(), Storage: "loop",
		HostDevice: o.HostDevice, Method: MethodBlocks, Seed: o.Seed, Control: o.control.String()}
	if len(o.HostDirs) > 0 {
		s.Storage, s.HostDevice = "hostdir", ""
	}
	return s
}

// rankOptions are the statistics' parameters for runs made with set: the
// seed is the state's, so a rerendering gives the same intervals.
func (o *Options) rankOptions(set Settings) RankOptions {
	return RankOptions{Tolerance: o.Tolerance, Level: o.Confidence, Seed: set.Seed, Replicates: Replicates}
}

// command spells the invocation for the report's "Reproduce" section,
// leaving out -report-only, which only renders what the runs made.
func command(args []string) string {
	var q []string
	for _, a := range args {
		if a == "-report-only" || a == "--report-only" || strings.HasPrefix(a, "-report-only=") || strings.HasPrefix(a, "--report-only=") {
			continue
		}
		if strings.ContainsAny(a, " \t'\"$*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q = append(q, a)
	}
	return strings.TrimSpace("go run ./tests/kdb " + strings.Join(q, " "))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "kdb:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	files, failures, err := Main(ctx, o, command(args), stderr)
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "kdb:", err)
		return 1
	}
	if len(failures) > 0 {
		fmt.Fprintf(stderr, "kdb: %d pairs failed (the runs made are kept; rerun the same command to resume):\n", len(failures))
		for _, f := range failures {
			fmt.Fprintln(stderr, "  "+f)
		}
		return 1
	}
	return 0
}

// Main makes the runs o asks for that the state lacks (unless
// o.ReportOnly), then writes the site file and the report from every run
// the state holds, and returns the files written and the pairs that
// failed.
func Main(ctx context.Context, o *Options, cmd string, progress io.Writer) (files, failures []string, err error) {
	root, err := findRoot(".")
	if err != nil {
		return nil, nil, err
	}
	if o.KDB == "" {
		o.KDB = filepath.Join(root, "rules", "kdb", "pairs.yaml")
	}
	pub, err := LoadPublished(o.KDB)
	if err != nil {
		return nil, nil, err
	}
	var st *Store
	if o.ReportOnly {
		st, err = OpenStore(o.State, nil)
	} else {
		s := o.settings()
		st, err = OpenStore(o.State, &s)
		if err == nil && o.Seed == 0 {
			fmt.Fprintf(progress, "kdb: seed %d (recorded in %s)\n", st.Settings.Seed, filepath.Join(st.Dir, settingsFile))
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if st.Dropped != "" {
		fmt.Fprintf(progress, "kdb: dropped the unfinished last run of %s: %s\n", st.Dir, st.Dropped)
	}
	if o.ReportOnly && st.Settings.Control != "" {
		// The runs missing are those of the state's control cell, not
		// the flags' default.
		if c, err := parseControl(st.Settings.Control, o.Pairs, o.Workloads); err == nil {
			o.control = c
		}
	}
	pending, all := plan(o, st)
	var stopped string
	if !o.ReportOnly && len(pending) > 0 {
		if os.Geteuid() != 0 {
			return nil, nil, errors.New("booting lab guests needs root (loop devices, mount, BPF); run as root, or -report-only")
		}
		tmp, err := os.MkdirTemp("", "fspair-kdb-")
		if err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(tmp)
		fmt.Fprintln(progress, "kdb: building fspair_exporter")
		bin, err := workload.BuildExporter(ctx, tmp)
		if err != nil {
			return nil, nil, err
		}
		r := &runner{o: o, st: st, progress: progress, labLog: io.Discard, bin: bin}
		if o.Verbose {
			r.labLog = progress
		}
		failures, stopped = r.matrix(ctx, pending, all)
		pending, _ = plan(o, st)
	}
	var missing []string
	for _, j := range pending {
		missing = append(missing, j.String())
	}
	interrupted := ctx.Err() != nil
	if interrupted {
		stopped = "interrupted"
	}
	if len(st.Runs()) == 0 && interrupted {
		return nil, failures, fmt.Errorf("interrupted before the first run finished; rerun the same command to start again")
	}
	// A stop is not a loss: the report and the site file are written from
	// the runs held, saying what is settled and what is missing, even
	// after an interrupt (the check then runs on its own context).
	files, err = Write(context.WithoutCancel(ctx), o, st, pub, root, cmd, missing, failures, stopped)
	if err == nil && interrupted {
		err = fmt.Errorf("interrupted; the report covers the %d runs in %s and says what is settled, rerun the same command to resume", len(st.Runs()), st.Dir)
	}
	if err == nil && stopped != "" && !interrupted {
		fmt.Fprintf(progress, "kdb: stopped: %s; %d runs missing (about %s more); the report says what is settled; rerun the same command to resume\n",
			stopped, len(missing), remaining(st.Runs(), len(missing), st.Settings))
	}
	return files, failures, err
}

// Write derives the verdicts from every run in st and writes the site
// file, checks it (o.Check) and writes the report.
func Write(ctx context.Context, o *Options, st *Store, pub *Published, root, cmd string, missing, failures []string, stopped string) ([]string, error) {
	runs := st.Runs()
	if len(runs) == 0 {
		return nil, fmt.Errorf("no runs in %s to report on", st.Dir)
	}
	cells := Cells(runs)
	drift := MeasureDrift(runs)
	ranked, assessed := Rank(cells, drift, o.rankOptions(st.Settings))
	var envs []Env
	for _, r := range runs {
		if !slices.Contains(envs, r.Env) {
			envs = append(envs, r.Env)
		}
	}
	entries := SiteEntries(cells, ranked, assessed, st.Settings, envs)
	measured := map[string]bool{}
	for w, rs := range ranked {
		for _, r := range rs {
			if r.Of >= 2 {
				measured[string(w)+" "+r.Pair] = true
			}
		}
	}
	if err := WriteSite(o.Site, entries, measured); err != nil {
		return nil, err
	}
	rep := &Report{
		Generated: time.Now(), Command: cmd, StateDir: st.Dir, Settings: st.Settings, Env: envs,
		Cells: cells, Ranked: ranked, Assessed: assessed, Drift: drift, Pub: pub, Cmp: Compare(ranked, pub), Tolerance: o.Tolerance,
		SitePath: o.Site, Site: entries, Missing: missing, Failures: failures, Stopped: stopped,
		Remaining: remaining(runs, len(missing), st.Settings), Halves: Halves(runs, o.rankOptions(st.Settings)),
	}
	if o.Check {
		sc, err := CheckSite(ctx, root, o.KDB, o.Site)
		if err != nil {
			return nil, err
		}
		rep.Check = &sc
	}
	files, err := WriteReport(o.Out, rep)
	if err != nil {
		return nil, err
	}
	return append([]string{o.Site}, files...), nil
}
