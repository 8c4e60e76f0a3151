package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

//go:embed jobs/matrix.fio
var matrixJob string

//go:embed csrc/getppid.c
var getppidSource []byte

// DefaultModes are the probe modes the matrix runs unless told otherwise,
// in `make matrix` and in the CI subset: the exporter's --probe.mode values
// of the fentry/fexit data path. FSPAIR_MATRIX_MODES overrides them for
// the CI subset (e.g. "current" for an exporter without --probe.mode).
var DefaultModes = []string{"fentry", "tracepoint", "syscall"}

// FileSystems are the guest file systems the matrix mounts.
var FileSystems = []string{"ext4", "xfs", "btrfs"}

// Options configure a matrix run.
type Options struct {
	Kernels []string // Debian linux-image-*-cloud-amd64 packages
	Modes   []string // probe modes; modeCurrent passes no flag
	FS      []string
	Engines []Engine
	ProbeFS []string // file systems the probe test binary runs on
	// ProbeRun, when set, is the probe test binary's -test.run: the CI
	// subset runs the request tests and leaves out those that make file
	// systems of their own on loop devices (minutes under TCG).
	ProbeRun string
	// ProbeCPUs is how many of the guest's CPUs stay online while the
	// probe test binary runs (0: all). 1 by default: with two vCPUs, 3
	// of 5 runs of it on 6.1 here left the guest stuck, twice with the
	// soft lockup on the console: one CPU spinning in asm_exc_int3, the
	// other at the syscall entry's static branch (syscall_trace_enter)
	// that the kernel live-patches with int3 (text_poke_bp) whenever a
	// syscall tracepoint program attaches or detaches, which every probe
	// test does. The exporter's own attach, once per mode, never did.
	// The stacks point at cross-vCPU code patching under TCG rather than
	// at fspair; tests/matrix/README.md has the runs.
	ProbeCPUs   int
	ExporterPer string // "cell": one exporter start per cell; "mode": one per kernel and mode, tracking every cell's file
	FileMiB     int    // fio data file
	FSMiB       int    // each guest file system
	CPUs        int
	MemMiB      int
	State       string // directory for report.md and results.json
	Out         string // another copy of the report; "" for none
	Lock        string // lab lock; "" for none
	CacheDir    string // kit cache
	// ProbeTimeout bounds one run of the probe test binary;
	// ExporterTimeout the exporter's start until it lists the disks.
	ProbeTimeout    time.Duration
	ExporterTimeout time.Duration
	Command         string // how it was run, for the report
}

// Results are a matrix run's findings.
type Results struct {
	Started time.Time
	Command string
	Host    string
	Modes   []string
	FS      []string
	Engines []string
	Kernels []*KernelResult
	Timing  []Timing
}

// KernelResult is one kernel's part.
type KernelResult struct {
	Package string
	Release string // uname -r in the guest
	Error   string `json:",omitempty"` // what stopped this kernel's runs
	Modes   []*ModeResult
	Timing  []Timing
}

// ModeResult is one probe mode on one kernel.
type ModeResult struct {
	Mode     string
	Error    string `json:",omitempty"` // the exporter did not run in this mode
	Programs []Program
	Warnings []string // the exporter's start-up lines at warn level
	Cells    []*Cell
	Probe    []ProbeRun
}

// Program is one BPF program of the exporter and whether it attached.
type Program struct {
	Name     string
	Attached bool
	Reason   string `json:",omitempty"` // from the exporter's log
}

// Timing is how long a part of the run took.
type Timing struct {
	Part    string
	Seconds float64
}

// Failed lists what fails the run: cells that DIFF, are silent or could not
// be measured, probe test runs that failed, kernels that did not run.
func (r *Results) Failed() []string {
	var out []string
	for _, k := range r.Kernels {
		if k.Error != "" {
			out = append(out, fmt.Sprintf("%s: %s", k.Package, firstLine(k.Error)))
		}
		for _, m := range k.Modes {
			for _, c := range m.Cells {
				if c.Status.Failed() {
					out = append(out, fmt.Sprintf("%s %s %s %s: %s", k.name(), m.Mode, c.FS, c.Engine, firstLine(c.Text)))
				}
			}
			for _, p := range m.Probe {
				if !p.Passed {
					what := strings.Join(p.Failed, ", ")
					if p.Error != "" {
						what = firstLine(p.Error)
					}
					out = append(out, fmt.Sprintf("%s %s probe tests on %s: %s", k.name(), m.Mode, p.FS, what))
				}
			}
		}
	}
	return out
}

func (k *KernelResult) name() string {
	if k.Release != "" {
		return k.Release
	}
	return strings.TrimPrefix(k.Package, "linux-image-")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// runner runs a matrix.
type runner struct {
	o       Options
	start   time.Time
	logw    io.Writer
	payload *Payload
	data    lab.DiskConfig
	res     *Results
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.logw, "matrix: [%7.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// timed runs fn and appends how long it took to *to.
func timed(to *[]Timing, part string, fn func() error) error {
	t := time.Now()
	err := fn()
	*to = append(*to, Timing{Part: part, Seconds: time.Since(t).Seconds()})
	return err
}

// cells are the matrix's cells for one kernel and mode, in report order.
func (o Options) cells() []cellSpec {
	var cs []cellSpec
	for _, fs := range o.FS {
		for _, e := range o.Engines {
			cs = append(cs, cellSpec{FS: fs, Engine: e})
		}
	}
	return cs
}

func (o Options) validate() error {
	var errs []error
	if len(o.Kernels) == 0 {
		errs = append(errs, errors.New("no kernels: give -kernels or FSPAIR_MATRIX_KERNELS (make sets it from MATRIX_KERNELS)"))
	}
	if len(o.Modes) == 0 {
		errs = append(errs, errors.New("no probe modes"))
	}
	for _, fs := range append(append([]string{}, o.FS...), o.ProbeFS...) {
		if !slices.Contains(FileSystems, fs) {
			errs = append(errs, fmt.Errorf("file system %q: want ext4, xfs or btrfs", fs))
		}
	}
	for _, fs := range o.ProbeFS {
		if !slices.Contains(o.FS, fs) {
			errs = append(errs, fmt.Errorf("probe tests on %s, which the matrix does not mount (-fs)", fs))
		}
	}
	if o.ExporterPer != "cell" && o.ExporterPer != "mode" {
		errs = append(errs, fmt.Errorf("exporter per %q: want cell or mode", o.ExporterPer))
	}
	if o.State == "" {
		errs = append(errs, errors.New("no state directory"))
	}
	return errors.Join(errs...)
}

// RunMatrix runs the matrix, writes the report and results into o.State
// (and the report to o.Out), and returns the results. Progress goes to
// logw. An error means the matrix could not run at all; failures inside it
// are in the results (Results.Failed).
func RunMatrix(ctx context.Context, o Options, logw io.Writer) (*Results, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the matrix boots guests and needs root")
	}
	r := &runner{o: o, start: time.Now(), logw: logw}
	host, _ := os.Hostname()
	r.res = &Results{Started: r.start.UTC(), Command: o.Command, Host: host, Modes: o.Modes, FS: o.FS}
	for _, e := range o.Engines {
		r.res.Engines = append(r.res.Engines, e.Name)
	}
	if err := os.MkdirAll(o.State, 0o755); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	// The state directory holds the last run only.
	if err := os.RemoveAll(filepath.Join(o.State, logsDir)); err != nil {
		return nil, fmt.Errorf("clear old logs: %w", err)
	}
	work, err := os.MkdirTemp("/var/tmp", "fspair-matrix-work.")
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(work)

	err = timed(&r.res.Timing, "static binaries, tools and data disk", func() error { return r.preparePayload(ctx, work) })
	if err != nil {
		return nil, err
	}
	for _, pkg := range o.Kernels {
		k := &KernelResult{Package: pkg}
		r.res.Kernels = append(r.res.Kernels, k)
		kt := time.Now()
		if err := r.runKernel(ctx, k); err != nil {
			k.Error = err.Error()
			r.logf("%s: %v", pkg, err)
		}
		k.Timing = append(k.Timing, Timing{Part: "kernel total (with the wait for the lock)", Seconds: time.Since(kt).Seconds()})
		if ctx.Err() != nil {
			break
		}
	}
	r.res.Timing = append(r.res.Timing, Timing{Part: "total", Seconds: time.Since(r.start).Seconds()})
	if err := r.res.write(o.State, o.Out); err != nil {
		return r.res, err
	}
	return r.res, ctx.Err()
}

// preparePayload builds the data disk every guest mounts.
func (r *runner) preparePayload(ctx context.Context, work string) error {
	p, err := NewPayload(ctx, work, nil, r.logf)
	if err != nil {
		return err
	}
	all := r.o.cells()
	for _, c := range all {
		if err := p.WriteFile(filepath.Join("cells", c.name()+".yml"), []byte(configYAML(tracked([]cellSpec{c})))); err != nil {
			return err
		}
	}
	if err := p.WriteFile("cells/all.yml", []byte(configYAML(tracked(all)))); err != nil {
		return err
	}
	if r.data, err = p.Make(ctx); err != nil {
		return err
	}
	r.payload = p
	r.logf("data disk %s ready", p.Image)
	return nil
}

// runKernel boots one guest on the kernel and runs every mode in it.
func (r *runner) runKernel(ctx context.Context, k *KernelResult) error {
	var unlock func()
	err := timed(&k.Timing, "wait for the lab lock", func() error {
		var err error
		unlock, err = lab.Lock(ctx, r.o.Lock, r.logf)
		return err
	})
	if err != nil {
		return err
	}
	defer unlock()
	var l *lab.Lab
	err = timed(&k.Timing, "kit (kernel package, initramfs)", func() error {
		var err error
		l, err = lab.NewFor(ctx, "", r.o.CacheDir, k.Package, prefixLog{r.logw, "matrix:   "})
		return err
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := l.Close(); err != nil {
			r.logf("tear down lab: %v", err)
		}
	}()
	var g *Guest
	err = timed(&k.Timing, "mkfs, boot and mount", func() error {
		var err error
		g, err = bootGuest(ctx, l, guestConfig{FS: r.o.FS, FSMiB: r.o.FSMiB, CPUs: r.o.CPUs, MemMiB: r.o.MemMiB, Data: r.data})
		return err
	})
	if err != nil {
		return err
	}
	k.Release = g.Release
	r.logf("%s booted (%s)", k.Package, g.Release)
	// The kernel's console goes with the logs (the lab's work dir does
	// not stay): what a guest kernel said about a lockup is there.
	defer func() {
		if b, err := os.ReadFile(g.VM.Console); err == nil {
			r.saveLog(k.name()+"-console.log", string(b))
		}
	}()
	for _, mode := range r.o.Modes {
		m := &ModeResult{Mode: mode}
		k.Modes = append(k.Modes, m)
		if err := r.runMode(ctx, g, k, m); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// runMode runs every cell of one mode, then the probe tests. An error
// means the guest stopped answering: nothing more can run on this kernel.
func (r *runner) runMode(ctx context.Context, g *Guest, k *KernelResult, m *ModeResult) error {
	var sessions [][]cellSpec
	all := r.o.cells()
	if r.o.ExporterPer == "mode" {
		sessions = [][]cellSpec{all}
	} else {
		for _, c := range all {
			sessions = append(sessions, []cellSpec{c})
		}
	}
	var startUp, cellTime time.Duration
	starts := 0
	reasons := map[string]string{}
	for _, cells := range sessions {
		config := cellConfig("all")
		if len(sessions) > 1 {
			config = cellConfig(cells[0].name())
		}
		results, started, log, stuck := r.runSession(ctx, g, k, m, config, cells, &startUp, &cellTime)
		m.Cells = append(m.Cells, results...)
		name := fmt.Sprintf("%s-%s-exporter.log", k.name(), m.Mode)
		if len(sessions) > 1 {
			name = fmt.Sprintf("%s-%s-exporter-%s.log", k.name(), m.Mode, cells[0].name())
		}
		r.saveLog(name, log)
		if started {
			starts++
		}
		warnings, why := startUpWarnings(log)
		if len(m.Warnings) == 0 {
			m.Warnings = warnings
		}
		for p, reason := range why {
			reasons[p] = reason
		}
		if stuck != nil {
			return stuck
		}
		if m.Error != "" || ctx.Err() != nil {
			// The exporter does not run in this mode: the other
			// sessions would fail the same way.
			for _, c := range all[len(m.Cells):] {
				m.Cells = append(m.Cells, &Cell{FS: c.FS, Engine: c.Engine.Name, Status: StatusError, Text: "not run: the exporter did not start", Error: m.Error})
			}
			break
		}
	}
	for i := range m.Programs {
		m.Programs[i].Reason = reasons[m.Programs[i].Name]
	}
	k.Timing = append(k.Timing,
		Timing{Part: fmt.Sprintf("%s: exporter start-up (%d starts)", m.Mode, starts), Seconds: startUp.Seconds()},
		Timing{Part: fmt.Sprintf("%s: %d cells (lay out, fio, readings)", m.Mode, len(m.Cells)), Seconds: cellTime.Seconds()})
	for _, fs := range r.o.ProbeFS {
		if ctx.Err() != nil {
			return nil
		}
		r.logf("%s %s: probe tests on %s", k.name(), m.Mode, fs)
		p := g.runProbeTests(ctx, fs, m.Mode, r.o.ProbeRun, r.o.ProbeCPUs, r.o.ProbeTimeout)
		m.Probe = append(m.Probe, p)
		r.saveLog(fmt.Sprintf("%s-%s-probe-%s.log", k.name(), m.Mode, fs), p.Output)
		k.Timing = append(k.Timing, Timing{Part: fmt.Sprintf("%s: probe tests on %s", m.Mode, fs), Seconds: p.Seconds})
		switch {
		case p.Passed:
			r.logf("%s %s: probe tests on %s passed (%.0fs)", k.name(), m.Mode, fs, p.Seconds)
		case p.Error != "":
			r.logf("%s %s: probe tests on %s: %s", k.name(), m.Mode, fs, firstLine(p.Error))
		default:
			r.logf("%s %s: probe tests on %s failed: %s", k.name(), m.Mode, fs, strings.Join(p.Failed, ", "))
		}
		if p.Error != "" {
			if err := g.responsive(ctx); err != nil {
				return fmt.Errorf("after the probe tests on %s in mode %s: %w", fs, m.Mode, err)
			}
		}
	}
	return nil
}

// cellTimeout bounds one cell (two readings and a fio run of a few
// seconds): a guest that takes longer is stuck.
const cellTimeout = 5 * time.Minute

// runSession lays out the cells' files, starts one exporter tracking them
// all, runs and compares each cell, and stops the exporter. It returns the
// cells, whether the exporter started, its log, and an error when the
// guest stopped answering.
func (r *runner) runSession(ctx context.Context, g *Guest, k *KernelResult, m *ModeResult, config string, cells []cellSpec, startUp, cellTime *time.Duration) ([]*Cell, bool, string, error) {
	var out []*Cell
	fail := func(err error) ([]*Cell, bool, string, error) {
		for _, c := range cells[len(out):] {
			out = append(out, &Cell{FS: c.FS, Engine: c.Engine.Name, Status: StatusError, Text: "error: " + firstLine(err.Error()), Error: err.Error()})
		}
		return out, false, "", g.responsive(ctx)
	}
	var files []string
	t := time.Now()
	for _, c := range cells {
		if err := g.layOut(ctx, cellFile(c.FS, c.Engine), r.o.FileMiB); err != nil {
			return fail(err)
		}
		files = append(files, cellFile(c.FS, c.Engine))
	}
	*cellTime += time.Since(t)
	t = time.Now()
	exp, err := g.startExporter(ctx, config, m.Mode, files, r.o.ExporterTimeout)
	*startUp += time.Since(t)
	if err != nil {
		m.Error = err.Error()
		r.logf("%s %s: %s", k.name(), m.Mode, firstLine(err.Error()))
		cs, _, _, stuck := fail(err)
		return cs, false, err.Error(), stuck
	}
	r.logf("%s %s: exporter up in %.1fs tracking %d file(s)", k.name(), m.Mode, exp.StartUp.Seconds(), len(files))
	var stuck error
	for _, c := range cells {
		t := time.Now()
		cctx, cancel := context.WithTimeout(ctx, cellTimeout)
		cell := r.runCell(cctx, exp, c)
		cancel()
		cell.Seconds = time.Since(t).Seconds()
		*cellTime += time.Since(t)
		out = append(out, cell)
		r.logf("%s %s %s %s: %s (%.1fs)", k.name(), m.Mode, c.FS, c.Engine.Name, cell.Text, cell.Seconds)
		if m.Programs == nil {
			m.Programs = exp.programs
		}
		if ctx.Err() != nil {
			break
		}
		if cell.Status == StatusError {
			if stuck = g.responsive(ctx); stuck != nil {
				break
			}
		}
	}
	if stuck != nil {
		cs, _, _, _ := fail(stuck)
		return cs, true, "", stuck
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	log, err := exp.stop(sctx)
	cancel()
	if err != nil {
		r.logf("%s %s: %v", k.name(), m.Mode, err)
	}
	if len(out) < len(cells) {
		out, _, _, _ = fail(errors.New("interrupted"))
	}
	return out, true, log, nil
}

// runCell reads the counters, runs the counted fio job, reads them again
// and compares.
func (r *runner) runCell(ctx context.Context, exp *guestExporter, c cellSpec) *Cell {
	cell := &Cell{FS: c.FS, Engine: c.Engine.Name}
	fail := func(err error) *Cell {
		cell.Status, cell.Text, cell.Error = StatusError, "error: "+firstLine(err.Error()), err.Error()
		return cell
	}
	before, err := exp.read(ctx)
	if err != nil {
		return fail(err)
	}
	exp.notePrograms(before)
	res, err := exp.g.VM.Fio(ctx, lab.FioJob{File: matrixJob, Env: fioEnv(c)})
	if err != nil {
		return fail(err)
	}
	after, err := exp.read(ctx)
	if err != nil {
		return fail(err)
	}
	file := cellFile(c.FS, c.Engine)
	cell.Ops = compare(fioCounts(res), before, after, file, c.Engine)
	cell.Status, cell.Text = verdict(cell.Ops)
	if lost := lostBetween(before, after); cell.Status.Failed() && lost != "" {
		cell.Text += " (the probes say: " + lost + ")"
	}
	return cell
}

// notePrograms keeps the first reading's fspair_probe_attached.
func (e *guestExporter) notePrograms(r Reading) {
	if e.programs != nil {
		return
	}
	e.programs = []Program{}
	for _, name := range slices.Sorted(maps.Keys(r.Attached)) {
		e.programs = append(e.programs, Program{Name: name, Attached: r.Attached[name]})
	}
}

// logsDir holds, in the state directory, the exporter's log of every
// start and the probe test binary's output of every run.
const logsDir = "logs"

// saveLog writes a log into the state directory's logs; a failure to is
// reported, not fatal.
func (r *runner) saveLog(name, text string) {
	if text == "" {
		return
	}
	dir := filepath.Join(r.o.State, logsDir)
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
	}
	if err != nil {
		r.logf("save %s: %v", name, err)
	}
}

// write saves results.json and report.md in dir, and the report to out.
func (r *Results) write(dir, out string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	report := r.Markdown()
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(report), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return nil
}
