package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

// plan lists the runs o asks for that st does not hold, in the order of
// the blocks (schedule.go), and the number of runs asked for.
func plan(o *Options, st *Store) (pending []job, all int) {
	for _, j := range schedule(o.Pairs, o.Workloads, o.Repeats, o.control, st.Settings.Seed) {
		all++
		if !st.Done(j) {
			pending = append(pending, j)
		}
	}
	return pending, all
}

// remaining estimates the time the missing runs take, from the runs held:
// the median time from one run's start to the next one's (fio, preparing,
// cleaning and the guest boots between them), leaving out gaps over three
// runtimes (interruptions); the runtime plus 30 s without such gaps.
func remaining(runs []Run, missing int, set Settings) time.Duration {
	if missing == 0 {
		return 0
	}
	per := time.Duration(set.RuntimeSeconds*float64(time.Second)) + 30*time.Second
	var starts []time.Time
	for _, r := range runs {
		starts = append(starts, r.Start)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	var gaps []float64
	for i := 1; i < len(starts); i++ {
		if g := starts[i].Sub(starts[i-1]).Seconds(); g > 0 && g < 3*set.RuntimeSeconds+60 {
			gaps = append(gaps, g)
		}
	}
	if s, ok := statOf(gaps); ok {
		per = time.Duration(s.Median * float64(time.Second))
	}
	return (time.Duration(missing) * per).Round(time.Minute)
}

// runner makes the pending runs and reports progress.
type runner struct {
	o        *Options
	st       *Store
	progress io.Writer // progress lines
	labLog   io.Writer // the lab's stage lines (-v)
	bin      string    // fspair_exporter

	t0      time.Time
	total   int // runs to make in this invocation
	made    int
	runTime time.Duration // summed over the runs made
	setups  int
	setup   time.Duration // summed guest setups
}

func (r *runner) logf(format string, args ...any) {
	el := time.Since(r.t0).Round(time.Second)
	fmt.Fprintf(r.progress, "kdb: [%8s] %s\n", el, fmt.Sprintf(format, args...))
}

// eta estimates the time left for runsLeft runs and pairsLeft guest setups
// from what this invocation has taken so far; before any run it assumes
// the fio runtime plus 20 s of preparing and cleaning, and 60 s per setup
// (a TCG boot with the exporter).
func (r *runner) eta(runsLeft, pairsLeft int) time.Duration {
	perRun := r.o.Runtime + 20*time.Second
	if r.made > 0 {
		perRun = r.runTime / time.Duration(r.made)
	}
	perSetup := 60 * time.Second
	if r.setups > 0 {
		perSetup = r.setup / time.Duration(r.setups)
	}
	return (time.Duration(runsLeft)*perRun + time.Duration(pairsLeft)*perSetup).Round(time.Second)
}

// matrix makes the pending runs in order, one guest for each stretch of
// consecutive runs on one pair. A stretch that fails is reported and the
// next one tried; the runs made so far stay in the state, so a rerun
// resumes with the rest. With -budget it starts no run that the estimate
// says would end after the budget, and says so in stopped. After each
// block's end control it prints the verdicts settled so far.
func (r *runner) matrix(ctx context.Context, pending []job, all int) (failures []string, stopped string) {
	r.t0 = time.Now()
	r.total = len(pending)
	var stretches [][]job
	for i, j := range pending {
		if i == 0 || j.pair != pending[i-1].pair {
			stretches = append(stretches, nil)
		}
		stretches[len(stretches)-1] = append(stretches[len(stretches)-1], j)
	}
	r.logf("%d of %d runs to make (%d held in %s) in %d guest boots; seed %d, control %s; estimated %s",
		len(pending), all, all-len(pending), r.st.Dir, len(stretches), r.st.Settings.Seed, r.o.control, r.eta(len(pending), len(stretches)))
	for i, js := range stretches {
		if ctx.Err() != nil {
			return failures, "interrupted"
		}
		if r.overBudget(len(stretches) - i) {
			return failures, fmt.Sprintf("the -budget of %s ran out", r.o.Budget)
		}
		if err := r.pair(ctx, js[0].pair, js, len(stretches)-i-1); err != nil {
			if errors.Is(err, errBudget) {
				return failures, fmt.Sprintf("the -budget of %s ran out", r.o.Budget)
			}
			r.logf("pair %s failed: %v", js[0].pair, err)
			failures = append(failures, fmt.Sprintf("%s: %v", js[0].pair, err))
		}
	}
	return failures, ""
}

// errBudget stops a guest's runs when the budget runs out.
var errBudget = errors.New("budget ran out")

// overBudget reports whether the next run would end after -budget.
func (r *runner) overBudget(pairsLeft int) bool {
	return r.o.Budget > 0 && time.Since(r.t0)+r.eta(1, min(1, pairsLeft)) > r.o.Budget
}

// settled prints the verdicts the runs held so far settle: what a stop
// now would keep.
func (r *runner) settled(block int) {
	runs := r.st.Runs()
	ranked, assessed := Rank(Cells(runs), MeasureDrift(runs), r.o.rankOptions(r.st.Settings))
	lo, hi := MeasureDrift(runs).Range()
	var parts []string
	for _, w := range workload.Workloads {
		var calls []string
		for _, x := range ranked[w] {
			if x.Verdict == VerdictBest || x.Verdict == VerdictWorst {
				calls = append(calls, fmt.Sprintf("%s %s%s (%.2f)", x.Pair, x.Verdict, star(x.Standout), x.Confidence))
			}
		}
		switch {
		case len(ranked[w]) == 0:
		case len(calls) == 0:
			parts = append(parts, fmt.Sprintf("%s: none settled (%s)", w, orText(assessed[w].Reason, "not distinguishable")))
		default:
			parts = append(parts, fmt.Sprintf("%s: %s", w, strings.Join(calls, ", ")))
		}
	}
	r.logf("block %d done; drift measured by the controls so far %.2f-%.2f of their mean; settled: %s", block, lo, hi, strings.Join(parts, "; "))
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// pair boots one guest for pair (under the lab lock) and makes its runs.
func (r *runner) pair(ctx context.Context, pair string, jobs []job, pairsAfter int) (err error) {
	g, h, _ := strings.Cut(pair, "/")
	p := workload.Pair{GuestFS: g, HostFS: h, Format: r.o.Format, Cache: r.o.Cache}
	unlock, err := lab.Lock(ctx, r.o.Lock, r.logf)
	if err != nil {
		return err
	}
	defer unlock()

	setupStart := time.Now()
	r.logf("pair %s: %d runs (block %d); setting up host file system, image and guest", p, len(jobs), jobs[0].repeat)
	l, err := lab.New(ctx, "", "", r.labLog)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	guest, storage, err := r.boot(ctx, l, p)
	if err != nil {
		return err
	}
	ex, err := workload.StartExporter(ctx, r.bin)
	if err != nil {
		return err
	}
	defer ex.Close()
	if _, err := ex.WaitDisk(ctx, guest.Disk.File, time.Minute); err != nil {
		return fmt.Errorf("%w; exporter log:\n%s", err, ex.Log())
	}
	env := hostEnv()
	env.GuestKernel, env.HostStorage = l.Kit.KernelVer, storage
	env.GuestMemMiB, env.GuestCPUs, env.ImageMiB = workload.GuestMemMiB, 1, workload.ImageMiB
	rec := record(ctx, ex, guest.Disk.File, r.o.Interval)
	defer rec.stop()
	r.setup += time.Since(setupStart)
	r.setups++
	r.logf("pair %s: guest up in %s", p, time.Since(setupStart).Round(time.Second))

	for i, j := range jobs {
		if i > 0 && r.overBudget(0) {
			return errBudget
		}
		start := time.Now()
		run, err := r.runOne(ctx, guest, rec, j)
		if err != nil {
			return fmt.Errorf("%s: %w", j, err)
		}
		run.Env = env
		if err := r.st.Append(run); err != nil {
			return err
		}
		r.made++
		r.runTime += time.Since(start)
		m := run.Metrics()
		r.logf("run %d/%d %s: %s MB/s, %.0f ops/s, write amplification %s (took %s); ETA %s",
			r.made, r.total, j, mbps(m[MThroughputBytes]), m[MThroughputOps], fmtOpt(m, MWriteAmp),
			time.Since(start).Round(time.Second), r.eta(r.total-r.made, pairsAfter))
		if j.control == ControlEnd {
			r.settled(j.repeat)
		}
	}
	return nil
}

func fmtOpt(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// boot makes the host file system (a lab loop device, or the -hostdir
// directory), the image and the guest, and describes the host storage.
func (r *runner) boot(ctx context.Context, l *lab.Lab, p workload.Pair) (*workload.Guest, string, error) {
	dir, ok := r.o.HostDirs[p.HostFS]
	if !ok && r.o.HostDevice != HostDevLoop {
		return bootHostDev(ctx, l, p, r.o.HostDevice)
	}
	if !ok {
		g, err := workload.BootPair(ctx, l, p, "kdb")
		if err != nil {
			return nil, "", err
		}
		mi, _ := mountOf(os.TempDir())
		return g, fmt.Sprintf("%s on its own loop device (%d MiB) over a sparse file in %s (%s)", p.HostFS, workload.HostFSMiB, os.TempDir(), mi), nil
	}
	mi, err := mountOf(dir)
	if err != nil {
		return nil, "", err
	}
	if mi.fsType != p.HostFS {
		return nil, "", fmt.Errorf("host dir %s for %s is on %s", dir, p.HostFS, mi)
	}
	// The image is made with O_EXCL (lab.MakeImage): a name of this
	// process's own keeps an image a killed run left behind from blocking
	// the rerun. The id is also the disk's serial, at most 20 bytes.
	g, err := bootOn(ctx, l, p, dir, fmt.Sprintf("kdb%d", os.Getpid()), false)
	return g, fmt.Sprintf("%s in %s (%s)", p.HostFS, dir, mi), err
}

// runOne prepares and runs one workload and derives its window.
func (r *runner) runOne(ctx context.Context, g *workload.Guest, rec *recorder, j job) (Run, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Runtime+10*time.Minute)
	defer cancel()
	w := j.workload
	rec.setPhase(ctx, "prepare:"+string(w))
	if err := workload.Prepare(ctx, g.VM, w); err != nil {
		return Run{}, err
	}
	rec.start(ctx, string(w))
	start := time.Now()
	res, err := workload.Run(ctx, g.VM, w, r.o.Runtime)
	if err != nil {
		return Run{}, err
	}
	if _, err := g.VM.RunOK(ctx, "sync"); err != nil {
		return Run{}, fmt.Errorf("sync after fio: %w", err)
	}
	rec.setPhase(ctx, "after:"+string(w))
	end := time.Now()
	ss, scrapeErr := rec.taken()
	if len(ss) < 2 {
		return Run{}, fmt.Errorf("too few scrapes (%d): %v", len(ss), scrapeErr)
	}
	fio := fioFrom(res)
	ph := workload.Phase{Workload: w, Start: start, Runtime: r.o.Runtime, End: end, Fio: fio.FioSummary}
	if fio.WriteBytes > 0 {
		ph.GuestWriteAmplification = (ss[len(ss)-1].Bytes["write"] - ss[0].Bytes["write"]) / float64(fio.WriteBytes)
	}
	_, from, to, span, err := ph.WindowSnapshots(points(ss), r.o.Warmup)
	if err != nil {
		return Run{}, fmt.Errorf("%w (scrape errors: %v)", err, scrapeErr)
	}
	a, _ := at(ss, from.Time)
	b, _ := at(ss, to.Time)
	if err := workload.Clean(ctx, g.VM, w); err != nil {
		return Run{}, err
	}
	return Run{
		Pair: j.pair, Workload: w, Repeat: j.repeat, Control: j.control, Start: start.UTC(), End: end.UTC(), Fio: fio,
		GuestWriteAmplification: ph.GuestWriteAmplification, WindowSeconds: span.Seconds(),
		From: a.Scrape, To: b.Scrape,
	}, nil
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	point, fsType, source string
}

func (m mount) String() string { return fmt.Sprintf("%s on %s at %s", m.fsType, m.source, m.point) }

// mountOf returns the mount that holds path: the longest mount point that
// is a prefix of it (proc(5), /proc/pid/mountinfo).
func mountOf(path string) (mount, error) {
	abs, err := filepath.EvalSymlinks(path)
	if err != nil {
		return mount{}, fmt.Errorf("find mount of %s: %w", path, err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mount{}, fmt.Errorf("find mount of %s: %w", path, err)
	}
	defer f.Close()
	var best mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		mp := unescapeOctal(fields[4])
		if !within(abs, mp) || len(mp) < len(best.point) {
			continue
		}
		best = mount{point: mp, fsType: fields[sep+1], source: unescapeOctal(fields[sep+2])}
	}
	if err := sc.Err(); err != nil {
		return mount{}, fmt.Errorf("find mount of %s: %w", path, err)
	}
	if best.point == "" {
		return mount{}, fmt.Errorf("find mount of %s: none in /proc/self/mountinfo", path)
	}
	return best, nil
}

func within(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}

// unescapeOctal undoes mountinfo's \ooo escapes (space, tab, newline, \).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hostEnv describes the host: kernel, CPU, QEMU. The accelerator is TCG
// because the lab starts every guest with -accel tcg (tests/lab/vm.go).
func hostEnv() Env {
	e := Env{Accel: "tcg", HostCPUs: runtime.NumCPU()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		e.HostKernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.HostCPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("qemu-system-x86_64", "--version").Output(); err == nil {
		e.QEMU, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	return e
}
