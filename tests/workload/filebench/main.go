// Command filebench runs the real Filebench personalities the knowledge
// base's verdicts are about (webserver, varmail, fileserver,
// randomfileaccess) in lab guests on guest/host file-system pairs with the
// host settings users run, while fspair_exporter watches the guest's
// image file, and records the classifier's features and the live
// classifier's class per window (issue 37: the evidence to train and hold
// out the classifier on the programs themselves rather than fio models).
//
// Each run boots one guest (512 MiB, one vCPU) with Filebench appended to
// the kit's initramfs (tests/lab BuildFilebench, built once from the
// source snapshot in shared/vendor/filebench and cached), runs one
// personality as shipped except for what shared/vendor/filebench/README.md
// lists (personality.go), layout included, and scrapes the disk every
// -interval. Windows of -window end every -step from Filebench's start,
// so the first minutes (the layout) are in the record; each is classed
// by rules/classifier on rules/classes.yaml as the recording rules would
// class it, with their hysteresis. The working set is recorded against
// the guest's memory: a file set that stays in the guest's cache is idle
// at the host.
//
// The results file is also the series' state: a run it holds without an
// error is not made again, so an interrupted series continues where it
// stopped; -budget stops starting runs that would end after it. Each run
// takes the lab lock for itself (other lab users get it in between).
//
//	go run ./tests/workload/filebench                        # DefaultSeries, ~4 min a run
//	go run ./tests/workload/filebench -runs varmail@btrfs/ext4/raw/none/native -budget 30m
//	go run ./tests/workload/filebench -report-only           # classify and render again, no guests
//
// It needs root, the lab's packages (tests/lab/packages.txt: QEMU, and
// the compilers and autotools Filebench is built with) and the snapshot
// beside the repository (../shared, or FSPAIR_FILEBENCH_TARBALL).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Options are the command's flags.
type Options struct {
	Specs         []Spec
	Runtime       time.Duration
	Interval      time.Duration
	Window        time.Duration
	Step          time.Duration
	LayoutTimeout time.Duration
	Budget        time.Duration
	MemMiB        int
	CPUs          int
	ImageMiB      int
	HostFSMiB     int
	MemSize       string
	MountOptions  string         // -mount-options: the guest file system's, "" for its defaults
	Files         map[string]int // -files: $nfiles by personality
	Out           string
	Report        string
	Classes       string
	Lock          string
	ReportOnly    bool
	Fit           bool
	Lab           bool
	Write         bool
	Fio           string
	RulesReadme   string
	FitBase       string
	Again         bool
	Check         bool
	// LongLayout (-runs long-layout): make again, once, the stored runs
	// whose layout outlasted the start of the first window the targets
	// count (LongLayout).
	LongLayout bool
}

// files returns p's $nfiles: -files's, or the personality's.
func (o *Options) files(p Personality) int {
	if n, ok := o.Files[p.Name]; ok {
		return n
	}
	return p.Files
}

// setup is what the runs of one results file share.
func (o *Options) setup(fb *lab.FilebenchBuild) Setup {
	return Setup{
		Filebench:   fmt.Sprintf("%s from %s (sha256 %s)", fb.Version, lab.FilebenchTarballName, fb.TarballSHA256),
		GuestMemMiB: o.MemMiB, GuestCPUs: o.CPUs, ImageMiB: o.ImageMiB,
		RuntimeSeconds: o.Runtime.Seconds(), MemSize: o.MemSize, Interval: o.Interval.Seconds(), MountOptions: o.MountOptions,
		Notes: "TCG guest, virtio-blk; Filebench's layout, then its run phase, in one recording from Filebench's start",
	}
}

func parseFlags(args []string, stderr io.Writer) (*Options, error) {
	o := &Options{}
	fs := flag.NewFlagSet("filebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runs := fs.String("runs", DefaultSeries, "runs to make, in order, PERSONALITY[+VAR=VALUE...]@GUEST/HOST/FORMAT/CACHE/AIO, comma-separated; \"default\" (DefaultSeries), \"heldout\" (HeldOutSeries: parameter variants no number is fitted on), \"heldout2\" (HeldOutSeries2: more, recorded after the fit's design was settled) or \"long-layout\" (the runs in -out whose layout outlasted the start of the first window the targets count, made again, once: their counted windows held the layout, not the workload)")
	fs.DurationVar(&o.Runtime, "runtime", 3*time.Minute, "Filebench's run phase per run (its layout comes first; the stored series ran 3m)")
	fs.DurationVar(&o.Interval, "interval", 10*time.Second, "scrape interval")
	fs.DurationVar(&o.Window, "window", time.Minute, "width of the classified windows (the rules' short window)")
	fs.DurationVar(&o.Step, "step", 30*time.Second, "a window ends every step from Filebench's start")
	fs.DurationVar(&o.LayoutTimeout, "layout-timeout", 20*time.Minute, "longest a layout may take")
	fs.DurationVar(&o.Budget, "budget", 0, "start no run that would end after this much time from the start (0: no limit)")
	fs.IntVar(&o.MemMiB, "mem", workload.GuestMemMiB, "guest memory, MiB")
	fs.IntVar(&o.CPUs, "cpus", 1, "guest vCPUs")
	fs.IntVar(&o.ImageMiB, "image", 4096, "image size, MiB (fileserver's file set is about 1.25 GB)")
	fs.IntVar(&o.HostFSMiB, "hostfs", 6144, "host file system size, MiB")
	fs.StringVar(&o.MountOptions, "mount-options", "", "the guest file system's mount options (mount -o), for an experiment beside the series, e.g. noatime; \"\": the file system's defaults (relatime), as the studies ran. A results file holds runs of one setting: give it another -out")
	fs.StringVar(&o.MemSize, "memsize", "1m", "every Filebench thread's memsize (shipped: 10m)")
	files := fs.String("files", "", "$nfiles per personality, NAME=N comma-separated (default: Personalities')")
	fs.StringVar(&o.Out, "out", "tests/workload/testdata/filebench.json", "results file, and the series' state")
	fs.StringVar(&o.Report, "report", "tests/workload/filebench/RESULTS.md", "Markdown report written from the results")
	fs.StringVar(&o.Classes, "classes", "rules/classes.yaml", "the live classifier's model; -fit -write rewrites its fitted block")
	fs.StringVar(&o.Lock, "lock", lab.LockPath, "lab lock taken per run (\"\": none, when run under flock)")
	fs.BoolVar(&o.ReportOnly, "report-only", false, "classify the stored runs again and render the report; no guests")
	fs.BoolVar(&o.Again, "again", false, "make runs the results already hold again")
	fs.BoolVar(&o.Check, "check", false, "after the runs, class each run of -runs as recorded in -out with the live model (as the rules would, settling included) and fail unless >= 90% of its windows after the first 3 minutes are right and none in the first 3 minutes is wrong at confidence >= 0.9 (make test's live Filebench check)")
	fs.BoolVar(&o.Fit, "fit", false, "fit the classifier on the stored runs and the fio models' (-fio), hold out each guest/host pair in turn, and print the evaluation and the fitted model; no guests")
	fs.BoolVar(&o.Lab, "lab", false, "class every recorded window that is not Filebench's (fio models, variants, real programs, the switch, the pair lab's runs, the tests' synthetic disks) with the model the fit starts from (-fit-base) and the live one (-classes), and print the tables and what the lab tests and the demo assert on them; no guests")
	fs.BoolVar(&o.Write, "write", false, "with -fit: write the fitted model into -classes (its block between the BEGIN FITTED and END FITTED lines) and the evaluation into -rules-readme; with -lab: write its tables into -rules-readme")
	fs.StringVar(&o.RulesReadme, "rules-readme", "rules/README.md", "where -fit -write puts the leave-one-pair-out tables")
	fs.StringVar(&o.FitBase, "fit-base", "tests/workload/testdata/classes-fitbase.yaml", "the model the fit starts from: the classifier of boxes set on the fio models, whose features, ramps and settings the fit replaces")
	fs.StringVar(&o.Fio, "fio", "tests/workload/testdata/features.json", "the fio models' runs, fitted on beside Filebench's (\"\": none)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	switch *runs {
	case "default":
		*runs = DefaultSeries
	case "heldout":
		*runs = HeldOutSeries
	case "heldout2":
		*runs = HeldOutSeries2
	case "long-layout":
		o.LongLayout, o.Again = true, true
	}
	if !o.LongLayout {
		if o.Specs, err = ParseSpecs(*runs); err != nil {
			return nil, err
		}
	}
	o.Files = map[string]int{}
	for _, kv := range strings.Split(*files, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		p, ok := FindPersonality(strings.TrimSpace(k))
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if !ok || err != nil || n <= 0 {
			return nil, fmt.Errorf("-files %q: want NAME=N with NAME a personality and N > 0", kv)
		}
		o.Files[p.Name] = n
	}
	if err := workload.CheckMountOptions(o.MountOptions); err != nil {
		return nil, fmt.Errorf("-mount-options: %w", err)
	}
	if o.Interval <= 0 || o.Step < o.Interval || o.Window < o.Step {
		return nil, fmt.Errorf("-interval %s, -step %s, -window %s: want 0 < interval <= step <= window", o.Interval, o.Step, o.Window)
	}
	if o.Runtime < time.Second || o.MemMiB < 256 || o.CPUs < 1 || o.ImageMiB < 1024 || o.HostFSMiB < o.ImageMiB+512 {
		return nil, fmt.Errorf("-runtime %s, -mem %d, -cpus %d, -image %d, -hostfs %d: want runtime >= 1s, mem >= 256, cpus >= 1, image >= 1024 (smaller btrfs volumes use mixed block groups), hostfs >= image + 512",
			o.Runtime, o.MemMiB, o.CPUs, o.ImageMiB, o.HostFSMiB)
	}
	return o, nil
}

// runner makes the runs of a series.
type runner struct {
	o        *Options
	fb       *lab.FilebenchBuild
	exporter string
	progress io.Writer
	t0       time.Time
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "filebench: [%s] %s\n", time.Since(r.t0).Round(time.Second), fmt.Sprintf(format, args...))
}

// estimate is how long the next run will take: the mean wall time of the
// runs made so far, or the runtime plus a layout and boot allowance.
func estimate(res *Results, o *Options) time.Duration {
	n, sum := 0, 0.0
	for _, run := range res.Runs {
		if run.Error == "" && run.WallSeconds > 0 {
			n++
			sum += run.WallSeconds
		}
	}
	if n == 0 {
		return o.Runtime + 4*time.Minute
	}
	return time.Duration(sum / float64(n) * float64(time.Second))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "filebench: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := series(ctx, o, args, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "filebench: %v\n", err)
		return 1
	}
	return 0
}

// series makes the runs of o not yet in the results, saving the results
// and the report after each, and reports what it made.
func series(ctx context.Context, o *Options, args []string, stdout, stderr io.Writer) error {
	r := &runner{o: o, progress: stderr, t0: time.Now()}
	cls, err := LoadClassifier(o.Classes)
	if err != nil {
		return fmt.Errorf("load the live classifier: %w", err)
	}
	res, err := LoadResults(o.Out)
	if err != nil {
		return err
	}
	command := "go run ./tests/workload/filebench " + strings.Join(args, " ")
	if o.LongLayout && !o.Fit && !o.Lab && !o.ReportOnly {
		o.Specs = LongLayoutRuns(res, o.Window)
		if len(o.Specs) == 0 {
			fmt.Fprintf(stdout, "filebench: no run in %s has a layout that outlasted %.0f s\n", o.Out, LayoutBound(o.Window))
			return nil
		}
	}
	if o.Fit {
		base, err := LoadClassifier(o.FitBase)
		if err != nil {
			return fmt.Errorf("load the model the fit starts from: %w", err)
		}
		return fit(base.Model, res, o, stdout)
	}
	if o.Lab {
		return labReport(o, stdout)
	}
	if o.ReportOnly {
		reclassify(cls, res, o)
		if err := res.Save(o.Out); err != nil {
			return err
		}
		if err := writeReport(o.Report, o.Out, res, command, cls.Model.Idle.Bounds()[1]); err != nil || !o.Check {
			return err
		}
		return printChecks(stdout, checkRuns(cls, res, o.Specs, o))
	}
	if os.Geteuid() != 0 {
		return errors.New("booting lab guests needs root (loop devices, mount, QEMU, BPF); run as root, or -report-only")
	}
	tarball, err := lab.FindFilebenchTarball(".")
	if err != nil {
		return err
	}
	texts, err := ReadPersonalities(tarball)
	if err != nil {
		return err
	}
	if r.fb, err = lab.BuildFilebench(ctx, lab.DefaultCacheDir(), tarball, stderr); err != nil {
		return err
	}
	if err := res.Adopt(o.setup(r.fb)); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "fspair-filebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r.logf("building fspair_exporter")
	if r.exporter, err = workload.BuildExporter(ctx, dir); err != nil {
		return err
	}

	var made, failed []string
	stopped := ""
	for i, s := range o.Specs {
		if !o.Again && res.Done(s) {
			r.logf("%s: in %s already, skipped", s, o.Out)
			continue
		}
		if est := estimate(res, o); o.Budget > 0 && time.Since(r.t0)+est > o.Budget {
			stopped = fmt.Sprintf("the -budget of %s ran out (%s spent, a run takes about %s)", o.Budget, time.Since(r.t0).Round(time.Second), est.Round(time.Second))
			break
		}
		if ctx.Err() != nil {
			stopped = "interrupted"
			break
		}
		p, _ := FindPersonality(s.Personality)
		text, err := Patch(p.Name, texts[p.Name], Params{Dir: fileSetDir, Files: o.files(p), MemSize: o.MemSize, Runtime: int(o.Runtime.Seconds()), Vars: s.VarMap()})
		if err != nil {
			return err
		}
		r.logf("run %d of %d: %s", i+1, len(o.Specs), s)
		remade := ""
		if o.LongLayout {
			old := res.Runs[indexOf(res, s)]
			remade = fmt.Sprintf("made again: the run started %s laid out its files in %.0f s, past %.0f s (the windows the targets count held its layout)",
				old.Started.Format(time.RFC3339), old.LayoutSeconds, LayoutBound(o.Window))
		}
		one, err := r.one(ctx, s, text)
		one.Remade = remade
		if ctx.Err() != nil {
			// A run cut short by an interrupt is made again next time.
			stopped = "interrupted"
			break
		}
		if err != nil {
			one.Error = err.Error()
			failed = append(failed, fmt.Sprintf("%s: %v", s, err))
			r.logf("%s failed: %v", s, err)
		} else {
			made = append(made, s.String())
		}
		if err != nil && res.Done(s) {
			// -again: a run that failed does not replace the one stored.
			r.logf("%s: the run stored in %s is kept", s, o.Out)
			continue
		}
		res.Put(one)
		res.Command = command
		reclassify(cls, res, o)
		if err := res.Save(o.Out); err != nil {
			return err
		}
		if err := writeReport(o.Report, o.Out, res, command, cls.Model.Idle.Bounds()[1]); err != nil {
			return err
		}
		if err == nil {
			done := res.Runs[indexOf(res, s)]
			r.logf("%s: %.0f s in all (layout %.0f s), working set %.0f MiB = %.2fx the guest's memory, %s; classes in the run phase: %s",
				s, done.WallSeconds, done.LayoutSeconds, done.WorkingSetBytes/(1<<20), done.WorkingSetRatio(), done.Summary, Tally(done.Windows, "run"))
			if done.LayoutSeconds > LayoutBound(o.Window) {
				r.logf("%s: its layout outlasted %.0f s: the windows the targets count from %d s on hold it (-runs long-layout makes such runs again, once)",
					s, LayoutBound(o.Window), SettleSeconds)
			}
		}
	}
	fmt.Fprintf(stdout, "filebench: %d runs made (%s), %d failed; results in %s, report in %s\n",
		len(made), strings.Join(made, ", "), len(failed), o.Out, o.Report)
	if stopped != "" {
		fmt.Fprintf(stdout, "filebench: stopped: %s; run the same command again to continue\n", stopped)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d runs failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	if o.Check {
		if stopped != "" {
			return fmt.Errorf("-check: the series stopped before every run was made (%s)", stopped)
		}
		return printChecks(stdout, checkRuns(cls, res, o.Specs, o))
	}
	return nil
}

// reclassify derives every run's windows and phase features again from
// its scrapes with the classifier as it is now.
func reclassify(c *Classifier, res *Results, o *Options) {
	for i := range res.Runs {
		res.Runs[i].Windows = c.Windows(res.Runs[i], o.Window, o.Step)
		res.Runs[i].Phases = PhaseFeatures(res.Runs[i].Points)
	}
}

func indexOf(res *Results, s Spec) int {
	for i, run := range res.Runs {
		if run.Spec == s {
			return i
		}
	}
	return -1
}
