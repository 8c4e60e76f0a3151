package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// The overhead bench: what a tracer costs the I/O it watches and every
// other system call, inside a one-vCPU guest on one of the matrix's
// kernels, QEMU pinned to one host core so the guest's CPU is one core's
// worth and nothing else of the guest runs beside it. Variants: no tracer,
// fspair_exporter following the file in each probe mode, and libbpf-tools'
// biolatency + biopattern + bitesize together (what a site runs without
// fspair). Every round runs every variant, in an order rotated by one each
// round, so drift (page cache, TCG code cache, the host's other load) falls
// on all of them alike; medians over the rounds.

// benchWorkload is one fio run of the bench.
type benchWorkload struct {
	Name   string
	What   string // for the report
	File   string // the file fio runs on
	Cached bool   // the run reads or writes the file's pages in the page cache
	Args   []string
}

// The bench's files, 256 MiB each: benchFile is the image the exporter
// tracks; benchOtherFile is an untracked file on the same file system (its
// hooks fire for it, the filters must send it away); benchNoImageFile is on
// an XFS that holds no image (a file-system type whose hooks need not run
// at all).
const (
	benchFile        = "/mnt/ext4/bench.dat"
	benchOtherFile   = "/mnt/ext4/other.dat"
	benchNoImageFile = "/mnt/xfs/other.dat"
	benchFileMiB     = 256
	benchConfig      = "cells/bench.yml"
)

// benchFS are the guest's file systems: the tracked image's and one with no image.
var benchFS = []string{"ext4", "xfs"}

// benchWorkloads are 4 KiB psync random I/O: on benchFile, writes into the
// page cache, reads from the page cache, reads with O_DIRECT from the
// device; then the I/O fspair does not follow, writes into the page cache
// and O_DIRECT reads on the untracked file beside the image and on the
// file system with no image.
func benchWorkloads(runtime time.Duration) []benchWorkload {
	common := func(file, rw string, direct int) []string {
		return []string{"--name=bench", "--filename=" + file, "--size=" + fmt.Sprint(benchFileMiB) + "m",
			"--rw=" + rw, "--bs=4k", "--ioengine=psync", fmt.Sprintf("--direct=%d", direct), "--invalidate=0",
			"--norandommap", "--randrepeat=0", "--time_based", fmt.Sprintf("--runtime=%ds", int(runtime.Seconds()))}
	}
	var ws []benchWorkload
	for _, f := range []struct{ prefix, what, file string }{
		{"", "", benchFile},
		{"other-", "untracked file beside the image: ", benchOtherFile},
		{"noimage-", "file on an FS with no image: ", benchNoImageFile},
	} {
		ws = append(ws,
			benchWorkload{f.prefix + "randwrite-cached", f.what + "4 KiB random writes into the page cache", f.file, true, common(f.file, "randwrite", 0)})
		if f.prefix == "" {
			ws = append(ws, benchWorkload{"randread-cached", "4 KiB random reads from the page cache", f.file, true, common(f.file, "randread", 0)})
		}
		ws = append(ws,
			benchWorkload{f.prefix + "randread-direct", f.what + "4 KiB random reads, O_DIRECT", f.file, false, common(f.file, "randread", 1)})
	}
	return ws
}

// selectWorkloads returns the workloads named (all for none), in the bench's order.
func selectWorkloads(all []benchWorkload, names []string) ([]benchWorkload, error) {
	if len(names) == 0 {
		return all, nil
	}
	var out []benchWorkload
	known := map[string]bool{}
	for _, w := range all {
		known[w.Name] = true
		if slices.Contains(names, w.Name) {
			out = append(out, w)
		}
	}
	for _, n := range names {
		if !known[n] {
			return nil, fmt.Errorf("unknown workload %q", n)
		}
	}
	return out, nil
}

// settleScript brings the guest to the same state before every timed run:
// dirty pages written back and every cache dropped, so that no variant
// gains from writeback a slower start let drain; then the file of a
// page-cache workload read back whole.
func settleScript(w benchWorkload) string {
	sh := "sync && echo 3 >/proc/sys/vm/drop_caches"
	if w.Cached {
		sh += " && cat " + w.File + " >/dev/null"
	}
	return sh
}

// variantLibbpf is the libbpf-tools variant's name; "none" runs no tracer;
// the others are probe modes of the exporter.
const (
	variantNone    = "none"
	variantLibbpf  = "libbpf-tools"
	variantPair    = "empty-pair" // empty fentry+fexit on ext4's read_iter and write_iter (bench/floor/bpf/pair.bpf.c)
	getppidMetric  = "getppid"
	libbpfWaitTime = 3 * time.Minute
)

// BenchOptions configure the overhead bench.
type BenchOptions struct {
	Kernel       string
	Variants     []string // none, probe modes, libbpf-tools
	Rounds       int
	Runtime      time.Duration
	GetppidCalls int
	HostCPU      string
	MemMiB       int
	Out          string
	Lock         string
	CacheDir     string
	Command      string
	Profile      bool              // after the rounds, each fspair mode's BPF time per request by program (profile.go)
	Workloads    []string          // by name; empty: all
	Settle       bool              // sync and drop caches before every timed run (settleScript)
	Warmup       bool              // run every workload once with no tracer before round 1, not counted
	Exporters    map[string]string // TAG -> a static exporter on the host, run by variants MODE@TAG
	// ICount, when set, boots the guest with deterministic time
	// (lab.ICount): fio's IOPS and getppid's ns per call then count guest
	// instructions, not the host's wall clock.
	ICount *lab.ICount
}

// BenchResult holds every sample: Samples[variant][metric] in round order
// (metrics: the workloads' names, in IOPS, and getppid in ns per call).
type BenchResult struct {
	Options BenchOptions
	Release string
	Started time.Time     // when the measurement started (the lab lock held)
	Took    time.Duration // from the build of the data disk to the end
	Waited  time.Duration // of that, waiting for the lab lock
	Samples map[string]map[string][]float64
	Order   [][]string // the variants' order in each round
	// Profile[variant][workload]: the BPF time per request by program, with -profile.
	Profile map[string]map[string]profileRun
}

// guestFlags registers the flags of a bench's one guest: -kernel (the
// first of $FSPAIR_MATRIX_KERNELS by default), -mem-mib, -lock, -cache.
func guestFlags(fs *flag.FlagSet, kernel *string, memMiB *int, lock, cache *string) {
	first := ""
	if k := kernelsFromEnv(); len(k) > 0 {
		first = k[0]
	}
	fs.StringVar(kernel, "kernel", first, "Debian kernel package (default: the first of $FSPAIR_MATRIX_KERNELS)")
	fs.IntVar(memMiB, "mem-mib", 2048, "guest memory")
	fs.StringVar(lock, "lock", lab.LockPath, "lab lock (empty: none; do not run under flock on the same file)")
	fs.StringVar(cache, "cache", lab.DefaultCacheDir(), "kit cache")
}

func parseBenchOptions(args []string, stderr io.Writer) (BenchOptions, error) {
	fs := flag.NewFlagSet("matrix bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o BenchOptions
	var variants string
	guestFlags(fs, &o.Kernel, &o.MemMiB, &o.Lock, &o.CacheDir)
	fs.StringVar(&variants, "variants", variantNone+","+strings.Join(DefaultModes, ",")+","+variantLibbpf,
		`tracers to compare: "none", probe modes of fspair_exporter ("current" passes no mode flag), "libbpf-tools"`)
	fs.IntVar(&o.Rounds, "rounds", 5, "rounds; each runs every variant, in an order rotated by one each round")
	fs.DurationVar(&o.Runtime, "runtime", 10*time.Second, "fio runtime of each workload")
	fs.IntVar(&o.GetppidCalls, "getppid-calls", 1000000, "getppid(2) calls timed in each variant and round")
	fs.StringVar(&o.HostCPU, "host-cpu", "1", "host CPU QEMU is pinned to (taskset -c)")
	fs.StringVar(&o.Out, "out", "bench/results-kernel.txt", "results file")
	fs.BoolVar(&o.Profile, "profile", true, "after the rounds, run each fspair mode once more with --probe.stats and report its BPF time per request by program")
	var workloads string
	fs.StringVar(&workloads, "workloads", "", "workloads to run, comma-separated (default all: "+strings.Join(workloadNames(benchWorkloads(time.Second)), ",")+")")
	fs.BoolVar(&o.Settle, "settle", true, "start every timed run from the same state: sync, drop the page cache, read a page-cache workload's file back")
	fs.BoolVar(&o.Warmup, "warmup", false, "before round 1, run every workload once with no tracer and count nothing of it")
	o.Exporters = map[string]string{}
	fs.Func("exporter", "TAG=PATH: another static build of fspair_exporter, run by the variants MODE@TAG (repeatable)", func(v string) error {
		tag, path, ok := strings.Cut(v, "=")
		if !ok || tag == "" || path == "" || strings.ContainsAny(tag, "@/ ") {
			return fmt.Errorf("want TAG=PATH, got %q", v)
		}
		o.Exporters[tag] = path
		return nil
	})
	icountShift := fs.Int("icount", -1, "QEMU -icount shift: the guest's clock advances 2^SHIFT ns per instruction executed, not with the host's (-1: off, the guest's clock is the host's)")
	icountSleep := fs.Bool("icount-sleep", false, "with -icount: the guest's clock runs at real time while its CPU idles (sleep=on); off, it jumps to the next timer")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *icountShift >= 0 {
		o.ICount = &lab.ICount{Shift: *icountShift, Sleep: *icountSleep}
	}
	o.Variants = list(variants)
	o.Workloads = list(workloads)
	o.Command = "go run ./tests/matrix bench " + strings.Join(quoteArgs(args), " ")
	var errs []error
	if _, err := selectWorkloads(benchWorkloads(time.Second), o.Workloads); err != nil {
		errs = append(errs, err)
	}
	for _, v := range o.Variants {
		if _, tag, ok := strings.Cut(v, "@"); ok && o.Exporters[tag] == "" {
			errs = append(errs, fmt.Errorf("variant %s: no -exporter %s=PATH", v, tag))
		}
	}
	if o.Kernel == "" {
		errs = append(errs, errors.New("no kernel: give -kernel or FSPAIR_MATRIX_KERNELS (make sets it from MATRIX_KERNELS)"))
	}
	if !slices.Contains(o.Variants, variantNone) {
		errs = append(errs, errors.New(`the variants must include "none": ratios are to it`))
	}
	if o.Rounds < 1 || o.Runtime < time.Second || o.GetppidCalls < 1 {
		errs = append(errs, errors.New("rounds, runtime (>= 1s) and getppid calls must be positive"))
	}
	if *icountShift < -1 || *icountShift > lab.MaxICountShift {
		errs = append(errs, fmt.Errorf("icount shift %d: want 0 to %d (QEMU's largest), or -1 for off", *icountShift, lab.MaxICountShift))
	}
	if *icountSleep && o.ICount == nil {
		errs = append(errs, errors.New("-icount-sleep needs -icount"))
	}
	if n, err := strconv.Atoi(o.HostCPU); err != nil || n < 0 || n >= runtime.NumCPU() {
		errs = append(errs, fmt.Errorf("host CPU %q: want one CPU number below %d", o.HostCPU, runtime.NumCPU()))
	}
	return o, errors.Join(errs...)
}

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseBenchOptions(args, stderr)
	if code, done := flagExit(err, stderr, "matrix bench"); done {
		return code
	}
	res, err := RunBench(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "matrix bench: %v\n", err)
		return 1
	}
	text := res.Text()
	fmt.Fprint(stdout, text)
	if err := os.WriteFile(o.Out, []byte(text), 0o644); err != nil {
		fmt.Fprintf(stderr, "matrix bench: write results: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "matrix bench: results in %s\n", o.Out)
	return 0
}

// RunBench runs the overhead bench.
func RunBench(ctx context.Context, o BenchOptions, logw io.Writer) (*BenchResult, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the bench boots a guest and needs root")
	}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "bench: [%7.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	work, err := os.MkdirTemp("/var/tmp", "fspair-matrix-bench.")
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(work)
	workloads, err := selectWorkloads(benchWorkloads(o.Runtime), o.Workloads)
	if err != nil {
		return nil, err
	}
	p, err := NewPayload(ctx, work, benchTools, logf)
	if err != nil {
		return nil, err
	}
	if err := p.buildGetppid(ctx); err != nil {
		return nil, err
	}
	if slices.Contains(o.Variants, variantPair) {
		if err := p.buildFloor(ctx); err != nil {
			return nil, err
		}
	}
	for tag, path := range o.Exporters {
		if err := checkStatic(path); err != nil {
			return nil, fmt.Errorf("-exporter %s: %w", tag, err)
		}
		if err := copyFile(path, p.Path(exporterBin+"-"+tag)); err != nil {
			return nil, fmt.Errorf("-exporter %s: %w", tag, err)
		}
		if err := os.Chmod(p.Path(exporterBin+"-"+tag), 0o755); err != nil {
			return nil, err
		}
	}
	cfg := configYAML([]trackedFile{{Domain: "bench", File: benchFile, Cache: "writeback", AIO: "threads"}})
	if err := p.WriteFile(benchConfig, []byte(cfg)); err != nil {
		return nil, err
	}
	data, err := p.Make(ctx)
	if err != nil {
		return nil, err
	}

	waitStart := time.Now()
	unlock, err := lab.Lock(ctx, o.Lock, logf)
	if err != nil {
		return nil, err
	}
	defer unlock()
	waited := time.Since(waitStart)
	l, err := lab.NewFor(ctx, "", o.CacheDir, o.Kernel, prefixLog{logw, "bench:   "})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := l.Close(); err != nil {
			logf("tear down lab: %v", err)
		}
	}()
	g, err := bootGuest(ctx, l, guestConfig{FS: benchFS, FSMiB: 1024, CPUs: 1, MemMiB: o.MemMiB, HostCPUs: o.HostCPU, ICount: o.ICount, Data: data})
	if err != nil {
		return nil, err
	}
	logf("guest up on %s, 1 vCPU, QEMU pinned to host CPU %s%s", g.Release, o.HostCPU, icountNote(o.ICount))
	for _, f := range []string{benchFile, benchOtherFile, benchNoImageFile} {
		if err := g.layOut(ctx, f, benchFileMiB); err != nil {
			return nil, err
		}
	}
	// The cached-read workload reads a file the page cache holds whole.
	if _, err := g.VM.RunOK(ctx, "cat "+benchFile+" >/dev/null && grep -E '^(Cached|MemFree)' /proc/meminfo"); err != nil {
		return nil, fmt.Errorf("read %s into the page cache: %w", benchFile, err)
	}

	if o.Warmup {
		// The guest's first run of a workload need not be like the
		// ones after it (seen under -icount: the first page-cache write
		// run of a session 9% faster than every later one, in two
		// runs); whatever it is, no variant should carry it.
		_, line, err := benchRun(ctx, g, o, workloads)
		if err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		logf("warm-up, not counted: %s", line)
	}
	res := &BenchResult{Options: o, Release: g.Release, Started: time.Now().UTC(), Waited: waited, Samples: map[string]map[string][]float64{}}
	for round := 0; round < o.Rounds; round++ {
		order := rotate(o.Variants, round)
		res.Order = append(res.Order, order)
		for _, v := range order {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			stop, err := startVariant(ctx, g, v)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, v, err)
			}
			vals, line, err := benchRun(ctx, g, o, workloads)
			if err != nil {
				_ = stop()
				return nil, fmt.Errorf("round %d, %s: %w", round+1, v, err)
			}
			for _, w := range workloads {
				res.add(v, w.Name, vals[w.Name])
			}
			res.add(v, getppidMetric, vals[getppidMetric])
			if err := stop(); err != nil {
				return nil, fmt.Errorf("round %d, stop %s: %w", round+1, v, err)
			}
			logf("round %d/%d %-14s %s", round+1, o.Rounds, v, line)
		}
	}
	if o.Profile {
		if res.Profile, err = profileVariants(ctx, g, o, logf); err != nil {
			return nil, err
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// benchRun runs every workload once (settled first with o.Settle) and
// getppid, and returns their values by metric and a progress line.
func benchRun(ctx context.Context, g *Guest, o BenchOptions, workloads []benchWorkload) (map[string]float64, string, error) {
	vals := map[string]float64{}
	var line []string
	for _, w := range workloads {
		if o.Settle {
			if _, err := g.VM.RunOK(ctx, settleScript(w)); err != nil {
				return nil, "", fmt.Errorf("settle before %s: %w", w.Name, err)
			}
		}
		r, err := g.VM.Fio(ctx, lab.FioJob{Args: w.Args})
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", w.Name, err)
		}
		vals[w.Name] = r.Jobs[0].Read.IOPS + r.Jobs[0].Write.IOPS
		line = append(line, fmt.Sprintf("%s %.0f IOPS", w.Name, vals[w.Name]))
	}
	ns, err := g.getppid(ctx, o.GetppidCalls)
	if err != nil {
		return nil, "", err
	}
	vals[getppidMetric] = ns
	line = append(line, fmt.Sprintf("getppid %.1f ns", ns))
	return vals, strings.Join(line, ", "), nil
}

func (r *BenchResult) add(variant, metric string, v float64) {
	if r.Samples[variant] == nil {
		r.Samples[variant] = map[string][]float64{}
	}
	r.Samples[variant][metric] = append(r.Samples[variant][metric], v)
}

// rotate returns s rotated left by n.
func rotate(s []string, n int) []string {
	n %= len(s)
	return append(append([]string{}, s[n:]...), s[:n]...)
}

// startVariant starts a variant's tracer in the guest and returns what
// stops it. "none" starts nothing.
func startVariant(ctx context.Context, g *Guest, v string) (func() error, error) {
	switch v {
	case variantNone:
		return func() error { return nil }, nil
	case variantLibbpf:
		return startLibbpfTools(ctx, g)
	case variantPair:
		return startPair(ctx, g)
	default:
		exp, err := g.startExporter(ctx, guestPath(benchConfig), v, []string{benchFile}, 3*time.Minute)
		if err != nil {
			return nil, err
		}
		return func() error {
			_, err := exp.stop(context.WithoutCancel(ctx))
			return err
		}, nil
	}
}

// startPair holds the empty fentry+fexit pair attached in the guest
// (floor -hold) until the returned function stops it.
func startPair(ctx context.Context, g *Guest) (func() error, error) {
	stop := func() error {
		_, err := g.VM.RunOK(context.WithoutCancel(ctx), `pid=$(cat /tmp/pair.pid 2>/dev/null) || exit 0
kill $pid; i=0
while kill -0 $pid 2>/dev/null; do i=$((i+1)); [ $i = 100 ] && kill -9 $pid; sleep 0.1; done
rm -f /tmp/pair.pid`)
		return err
	}
	sh := fmt.Sprintf(`%s -hold %s </dev/null >/tmp/pair.log 2>&1 &
echo $! >/tmp/pair.pid
i=0
until grep -q '^attached:' /tmp/pair.log; do
	kill -0 $(cat /tmp/pair.pid) 2>/dev/null || { echo 'floor exited:'; cat /tmp/pair.log; exit 3; }
	i=$((i+1)); [ $i = 600 ] && { echo 'floor did not attach in 60 s:'; cat /tmp/pair.log; exit 4; }
	sleep 0.1
done`, guestPath(floorBin), guestPath(pairObject))
	if _, err := g.VM.RunOK(ctx, sh); err != nil {
		return nil, errors.Join(fmt.Errorf("attach the empty pair: %w", err), stop())
	}
	return stop, nil
}

// startLibbpfTools starts biolatency, biopattern and bitesize in the guest
// and waits until each has attached its programs and sleeps in its main
// loop (clock_nanosleep, system call 230 on x86-64, or nanosleep, 35, in
// /proc/PID/syscall, with a BPF link or program among its descriptors).
// Their "Tracing ..." line is no sign: stdout into a file is block
// buffered, so it shows only at exit.
func startLibbpfTools(ctx context.Context, g *Guest) (func() error, error) {
	stop := func() error {
		_, err := g.VM.RunOK(context.WithoutCancel(ctx), libbpfStopScript("/tmp"))
		return err
	}
	if _, err := g.VM.RunOK(ctx, libbpfStartScript(guestPath(envFile), "/tmp")); err != nil {
		return nil, errors.Join(fmt.Errorf("start libbpf-tools: %w", err), stop())
	}
	return stop, nil
}

// libbpfStartScript starts the tools and waits for them (startLibbpfTools),
// after sourcing env (when not empty), with their pid and output files in
// dir.
func libbpfStartScript(env, dir string) string {
	var sh strings.Builder
	if env != "" {
		fmt.Fprintf(&sh, ". %s\n", env)
	}
	fmt.Fprintf(&sh, "cd %s\n", dir)
	for _, t := range benchTools {
		// interval 3600, count 1: they print nothing until stopped.
		fmt.Fprintf(&sh, "%[1]s 3600 1 </dev/null >%[1]s.out 2>&1 &\necho $! >%[1]s.pid\n", t)
	}
	sh.WriteString(`ready() { # pid
	read -r nr _ </proc/$1/syscall 2>/dev/null || return 1
	[ "$nr" = 230 ] || [ "$nr" = 35 ] || return 1
	ls -l /proc/$1/fd 2>/dev/null | grep -qE 'bpf[-_](link|prog)'
}
`)
	fmt.Fprintf(&sh, "end=$(( $(date +%%s) + %d ))\nwhile :; do\n\tok=1\n", int(libbpfWaitTime.Seconds()))
	for _, t := range benchTools {
		fmt.Fprintf(&sh, "\tkill -0 $(cat %[1]s.pid) 2>/dev/null || { echo '%[1]s exited:'; cat %[1]s.out; exit 3; }\n", t)
		fmt.Fprintf(&sh, "\tready $(cat %s.pid) || ok=0\n", t)
	}
	fmt.Fprintf(&sh, "\t[ $ok = 1 ] && exit 0\n\t[ $(date +%%s) -ge $end ] && { echo 'libbpf-tools did not attach in %s'; for f in *.pid; do echo \"$f: $(cat /proc/$(cat $f)/syscall)\"; done; exit 4; }\n\tsleep 0.2\ndone\n", libbpfWaitTime)
	return sh.String()
}

// libbpfStopScript stops the tools started with their files in dir
// (SIGINT, SIGKILL after 10 seconds).
func libbpfStopScript(dir string) string {
	var sh strings.Builder
	fmt.Fprintf(&sh, "cd %s\n", dir)
	for _, t := range benchTools {
		fmt.Fprintf(&sh, "kill -INT $(cat %[1]s.pid) 2>/dev/null\n", t)
	}
	for _, t := range benchTools {
		fmt.Fprintf(&sh, "i=0; while kill -0 $(cat %[1]s.pid) 2>/dev/null; do i=$((i+1)); [ $i = 100 ] && kill -9 $(cat %[1]s.pid); sleep 0.1; done\nrm -f %[1]s.pid\n", t)
	}
	return sh.String()
}

// getppid runs the static getppid loop and returns its ns per call.
func (g *Guest) getppid(ctx context.Context, calls int) (float64, error) {
	out, err := g.VM.RunOK(ctx, fmt.Sprintf("%s %d", guestPath(getppidBin), calls))
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		return 0, fmt.Errorf("getppid printed %q: %w", out, err)
	}
	return ns, nil
}

// median of the values (the mean of the middle two for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64{}, v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Text is the results file: how it was run, the Markdown table of medians
// and ratios to no tracer, and every sample.
func (r *BenchResult) Text() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	o := r.Options
	w("# fspair kernel overhead bench %s\n", r.Started.Format(time.RFC3339))
	w("# guest: %s (%s), 1 vCPU (TCG), %d MiB, QEMU pinned to host CPU %s; host: %d cores, kernel %s\n",
		r.Release, o.Kernel, o.MemMiB, o.HostCPU, runtime.NumCPU(), hostKernel())
	if o.ICount != nil {
		w("# guest time: QEMU -icount %s with single-threaded TCG: the guest's clock advances %d ns per instruction executed, not with the host's; IOPS and ns per call count instructions (TCG models no caches)%s\n",
			o.ICount.Arg(), 1<<o.ICount.Shift, icountIdle(*o.ICount))
	}
	settle := "each run started as it came"
	if o.Settle {
		settle = "each run started after sync, dropping the caches and reading a page-cache workload's file back"
	}
	if o.Warmup {
		settle += "; a warm-up run of every workload with no tracer before round 1, not counted"
	}
	w("# fio psync 4 KiB on %d MiB files (%s tracked; %s untracked on the same ext4; %s on an XFS with no image), %s per run, %s; getppid: %d calls per run; %d rounds, variant order rotated each round; medians\n",
		benchFileMiB, benchFile, benchOtherFile, benchNoImageFile, o.Runtime, settle, o.GetppidCalls, o.Rounds)
	for _, tag := range slices.Sorted(maps.Keys(o.Exporters)) {
		w("# variants @%s: the exporter built at %s\n", tag, o.Exporters[tag])
	}
	w("# command: %s (took %s, of which %s waiting for the lab lock)\n\n", o.Command, r.Took.Round(time.Second), r.Waited.Round(time.Second))
	metrics := []string{}
	heads := []string{}
	workloads, _ := selectWorkloads(benchWorkloads(o.Runtime), o.Workloads)
	for _, wl := range workloads {
		metrics = append(metrics, wl.Name)
		heads = append(heads, wl.What+" IOPS")
	}
	metrics = append(metrics, getppidMetric)
	heads = append(heads, "getppid ns/call")
	w("| variant |")
	for _, h := range heads {
		w(" %s | ratio |", h)
	}
	w("\n|---|%s\n", strings.Repeat("---:|---:|", len(heads)))
	for _, v := range o.Variants {
		w("| %s |", v)
		for _, m := range metrics {
			med, base := median(r.Samples[v][m]), median(r.Samples[variantNone][m])
			ratio := "-"
			if base > 0 {
				ratio = fmt.Sprintf("%.3f", med/base)
			}
			if m == getppidMetric {
				w(" %.1f | %s |", med, ratio)
			} else {
				w(" %.0f | %s |", med, ratio)
			}
		}
		w("\n")
	}
	w("\nratio: the variant's median over no tracer's, from this run (IOPS: below 1 is a cost; getppid: above 1 is a cost).\n")
	// The spread: each round's sample over no tracer's in the same round
	// (rotated, so neighbours in time), the median and range of those.
	w("\n| variant | workload | ratio to none in the same round: median | min | max |\n|---|---|---:|---:|---:|\n")
	for _, v := range o.Variants {
		if v == variantNone {
			continue
		}
		for _, m := range metrics {
			r := pairedRatios(r.Samples[v][m], r.Samples[variantNone][m])
			if len(r) == 0 {
				continue
			}
			w("| %s | %s | %.3f | %.3f | %.3f |\n", v, m, median(r), slices.Min(r), slices.Max(r))
		}
	}
	// Each variant's own samples across the rounds: how far one run is
	// from the next with nothing changed but time, the resolution every
	// ratio above has.
	w("\n| variant | workload | samples over their median: min | max |\n|---|---|---:|---:|\n")
	for _, v := range o.Variants {
		for _, m := range metrics {
			x := r.Samples[v][m]
			if med := median(x); med > 0 {
				w("| %s | %s | %.3f | %.3f |\n", v, m, slices.Min(x)/med, slices.Max(x)/med)
			}
		}
	}
	b.WriteString(r.profileText())
	w("\n")
	for i, order := range r.Order {
		w("# round %d order: %s\n", i+1, strings.Join(order, " "))
	}
	for _, v := range o.Variants {
		for _, m := range metrics {
			var vals []string
			for _, x := range r.Samples[v][m] {
				vals = append(vals, strconv.FormatFloat(x, 'f', 1, 64))
			}
			w("# samples %s %s: %s\n", v, m, strings.Join(vals, " "))
		}
	}
	return b.String()
}

// icountIdle says what the guest's clock does while its CPU waits.
func icountIdle(ic lab.ICount) string {
	if ic.Sleep {
		return "; while the CPU idles the clock runs at real time"
	}
	return "; while the CPU idles (waiting on the device) the clock jumps to the next timer deadline"
}

// icountNote is the progress line's mention of -icount.
func icountNote(ic *lab.ICount) string {
	if ic == nil {
		return ""
	}
	return ", -icount " + ic.Arg()
}

func hostKernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// workloadNames lists the workloads' names.
func workloadNames(ws []benchWorkload) []string {
	var n []string
	for _, w := range ws {
		n = append(n, w.Name)
	}
	return n
}

// pairedRatios divides each round's sample by the base's of the same round.
func pairedRatios(v, base []float64) []float64 {
	var out []float64
	for i := range min(len(v), len(base)) {
		if base[i] > 0 {
			out = append(out, v[i]/base[i])
		}
	}
	return out
}
