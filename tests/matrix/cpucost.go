package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// The counter layouts' bench in a guest with two vCPUs: exporter/probe's
// BenchmarkCPUCost (fio 4 KiB random writes, one job on CPU 0, then two
// jobs on CPUs 0 and 1 on one tracked image and on two) run by the probe
// test binary inside a guest on one of the matrix's kernels, where the
// fentry mode loads (this host's kernel refuses it). Under TCG with
// thread=multi the two vCPUs are two host threads on two host cores, so
// the atomic adds and the cache lines the counters' writers pass between
// them are the host's own; the guest's clock is the host's, so the host's
// other load counts too (each run's record has the host's load average).
//
// Variants, one probe test binary run each per round, in an order rotated
// by one each round: atomic (the shipped build: atomic adds on counters
// every CPU shares), percpu (the same with -cpucost.percpu: the disk's
// counters in a per-CPU array) and plain (an experiment whose adds are
// plain, bench/cpucost/plain.sh, never shipped; given with -plain).
//
// The guest's second vCPU is offline while the programs attach and detach
// (Guest.oneCPU says why) and online for the fio runs only: the benchmark's
// -cpucost.hook brings it online once the programs are attached and takes
// it offline before they detach, and prints the online CPUs each time.
// While the benchmark runs, the guest samples every fio process's allowed
// CPUs and the CPU it last ran on, the record's proof that the two jobs
// ran on different CPUs.

// Variants of the counter layouts' bench.
const (
	cpuCostAtomic = "atomic"
	cpuCostPerCPU = "percpu"
	cpuCostPlain  = "plain"
)

// plainTestBin is the plain-add build's probe test binary on the data disk.
const plainTestBin = "bin/probe-plain.test"

// CPUCostOptions configure the counter layouts' bench.
type CPUCostOptions struct {
	Kernel     string
	Variants   []string
	Rounds     int
	FirstRound int      // the first round's number: rotation continues across runs
	Benches    []string // the probe test binary's -test.bench, one run each
	DirectIOs  int      // O_DIRECT writes per fio job
	CachedIOs  int      // page-cache writes per fio job
	Plain      string   // the plain-add build's static probe test binary on the host
	MemMiB     int
	Out        string // results, appended to
	Lock       string
	CacheDir   string
	Timeout    time.Duration // bound on one run of the probe test binary
	Command    string
}

func parseCPUCostOptions(args []string, stderr io.Writer) (CPUCostOptions, error) {
	fs := flag.NewFlagSet("matrix cpucost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o CPUCostOptions
	var variants, benches string
	guestFlags(fs, &o.Kernel, &o.MemMiB, &o.Lock, &o.CacheDir)
	fs.StringVar(&variants, "variants", cpuCostAtomic+","+cpuCostPerCPU, `counter layouts: "atomic" (shipped), "percpu" (-cpucost.percpu), "plain" (the plain-add experiment, needs -plain)`)
	fs.IntVar(&o.Rounds, "rounds", 3, "rounds; each runs every variant, in an order rotated by one each round")
	fs.IntVar(&o.FirstRound, "first-round", 1, "number of the first round (the rotation goes on from an earlier run's rounds)")
	fs.StringVar(&benches, "bench", "CPUCost/fentry", "the probe test binary's -test.bench, comma-separated: one run of the binary each, per variant and round (CPUCost/tracepoint/cached: the tracepoint mode's page-cache cases, which it follows on XFS on 6.1)")
	fs.IntVar(&o.DirectIOs, "direct-ios", 10000, "O_DIRECT writes per fio job (-cpucost.direct-ios)")
	fs.IntVar(&o.CachedIOs, "cached-ios", 100000, "page-cache writes per fio job (-cpucost.cached-ios)")
	fs.StringVar(&o.Plain, "plain", "", "static probe test binary built by bench/cpucost/plain.sh (CGO_ENABLED=0), run by the variant plain")
	fs.StringVar(&o.Out, "out", "bench/results-cpucost-41-guest.txt", "results file, appended to")
	fs.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "bound on one run of the probe test binary")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Variants, o.Benches = list(variants), list(benches)
	o.Command = "go run ./tests/matrix cpucost " + strings.Join(quoteArgs(args), " ")
	var errs []error
	for _, v := range o.Variants {
		if !slices.Contains([]string{cpuCostAtomic, cpuCostPerCPU, cpuCostPlain}, v) {
			errs = append(errs, fmt.Errorf("variant %q: want atomic, percpu or plain", v))
		}
	}
	if slices.Contains(o.Variants, cpuCostPlain) != (o.Plain != "") {
		errs = append(errs, errors.New("the variant plain and -plain go together (build it: CGO_ENABLED=0 bash bench/cpucost/plain.sh PATH)"))
	}
	if len(o.Variants) == 0 || len(o.Benches) == 0 {
		errs = append(errs, errors.New("no variants or no -bench"))
	}
	if o.Kernel == "" {
		errs = append(errs, errors.New("no kernel: give -kernel or FSPAIR_MATRIX_KERNELS (make sets it from MATRIX_KERNELS)"))
	}
	if o.Rounds < 1 || o.FirstRound < 1 || o.DirectIOs < 1 || o.CachedIOs < 1 {
		errs = append(errs, errors.New("rounds, first round and the I/O counts must be positive"))
	}
	return o, errors.Join(errs...)
}

func cpuCostCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseCPUCostOptions(args, stderr)
	if code, done := flagExit(err, stderr, "matrix cpucost"); done {
		return code
	}
	if err := RunCPUCost(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "matrix cpucost: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "matrix cpucost: results appended to %s (summary: python3 bench/cpucost/summary.py %s)\n", o.Out, o.Out)
	return 0
}

// RunCPUCost boots the guest and runs the rounds, appending each run's
// record to o.Out (and stdout) as it ends: a run that fails leaves the
// earlier ones in the file.
func RunCPUCost(ctx context.Context, o CPUCostOptions, stdout, logw io.Writer) error {
	if os.Geteuid() != 0 {
		return errors.New("the bench boots a guest and needs root")
	}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "cpucost: [%7.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	work, err := os.MkdirTemp("/var/tmp", "fspair-matrix-cpucost.")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(work)
	p, err := NewPayload(ctx, work, nil, logf)
	if err != nil {
		return err
	}
	if o.Plain != "" {
		if err := checkStatic(o.Plain); err != nil {
			return fmt.Errorf("-plain: %w (build it with CGO_ENABLED=0)", err)
		}
		if err := copyFile(o.Plain, p.Path(plainTestBin)); err != nil {
			return fmt.Errorf("-plain: %w", err)
		}
		if err := os.Chmod(p.Path(plainTestBin), 0o755); err != nil {
			return err
		}
	}
	data, err := p.Make(ctx)
	if err != nil {
		return err
	}
	out, err := os.OpenFile(o.Out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open results: %w", err)
	}
	defer out.Close()
	record := io.MultiWriter(out, stdout)

	unlock, err := lab.Lock(ctx, o.Lock, logf)
	if err != nil {
		return err
	}
	defer unlock()
	l, err := lab.NewFor(ctx, "", o.CacheDir, o.Kernel, prefixLog{logw, "cpucost:   "})
	if err != nil {
		return err
	}
	defer func() {
		if err := l.Close(); err != nil {
			logf("tear down lab: %v", err)
		}
	}()
	// XFS mounted at boot as well: its module loads now, with nothing
	// attached, not in the middle of a run.
	g, err := bootGuest(ctx, l, guestConfig{FS: []string{"ext4", "xfs"}, FSMiB: 2048, CPUs: 2, MemMiB: o.MemMiB, Data: data})
	if err != nil {
		return err
	}
	online, err := g.VM.RunOK(ctx, "cat /sys/devices/system/cpu/online")
	if err != nil {
		return err
	}
	logf("guest up on %s, CPUs online: %s", g.Release, strings.TrimSpace(online))
	fmt.Fprintf(record, "# tests/matrix cpucost %s: guest %s (%s), 2 vCPUs (TCG, thread=multi, CPUs online at boot: %s), %d MiB; host: %s; fio jobs of %d O_DIRECT / %d page-cache 4 KiB writes; variants %s; rounds %d-%d, the order rotated by one each round\n# command: %s\n",
		time.Now().UTC().Format(time.RFC3339), g.Release, o.Kernel, strings.TrimSpace(online), o.MemMiB, hostKernel(),
		o.DirectIOs, o.CachedIOs, strings.Join(o.Variants, ","), o.FirstRound, o.FirstRound+o.Rounds-1, o.Command)
	var failed []string
	for round := o.FirstRound; round < o.FirstRound+o.Rounds; round++ {
		for _, v := range rotate(o.Variants, round-1) {
			for _, bench := range o.Benches {
				if err := ctx.Err(); err != nil {
					return err
				}
				load := hostLoad()
				fmt.Fprintf(record, "### %s round %d %s bench %s host-load %s\n", v, round, time.Now().UTC().Format(time.RFC3339), bench, load)
				text, err := g.cpuCostRun(ctx, o, v, bench)
				if err != nil {
					fmt.Fprintf(record, "# run failed: %v\n", err)
					if errors.Is(err, errGuestStuck) {
						return err
					}
					failed = append(failed, fmt.Sprintf("%s round %d %s", v, round, bench))
					continue
				}
				run := parseCPUCostRun(text)
				fmt.Fprint(record, run.Record())
				if problems := run.Problems(); len(problems) > 0 {
					failed = append(failed, fmt.Sprintf("%s round %d %s: %s", v, round, bench, strings.Join(problems, "; ")))
				}
				logf("round %d %s %s: %d results, %s", round, v, bench, len(run.Results), run.Pinning())
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d run(s) failed or missed a check: %s", len(failed), strings.Join(failed, " | "))
	}
	return nil
}

// hostLoad is the host's load averages (1, 5, 15 minutes).
func hostLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Markers of the guest script's output.
const (
	cpuCostExitMarker = "@@cpucost exit "
	cpuCostFioMarker  = "fio-sample "
)

// cpuCostHook is the guest's -cpucost.hook script: CPUs but the first
// online for the fio runs ("attached"), offline again before the programs
// detach ("detach"); each time the online CPUs and the CPUs' lines of
// /proc/stat (the ticks each spent, for how busy each was meanwhile).
const cpuCostHook = `case $1 in
attached) for c in /sys/devices/system/cpu/cpu[1-9]*/online; do echo 1 >$c; done ;;
esac
echo "cpucost hook $1: online $(cat /sys/devices/system/cpu/online)"
grep '^cpu[0-9]' /proc/stat | sed "s/^/stat $1 /"
case $1 in
detach) for c in /sys/devices/system/cpu/cpu[1-9]*/online; do echo 0 >$c; done ;;
esac
`

// cpuCostScript is the guest script of one run: the probe test binary of
// variant runs the benchmarks bench matches, with its file systems on
// ext4, while a loop samples the fio processes every 0.3 s.
func cpuCostScript(o CPUCostOptions, variant, bench string) string {
	bin, flags := probeTestBin, ""
	switch variant {
	case cpuCostPlain:
		bin = plainTestBin
	case cpuCostPerCPU:
		flags = " -cpucost.percpu"
	}
	return fmt.Sprintf(`. %[1]s
cd /tmp
cat >/tmp/cpucost-hook.sh <<'EOS'
%[2]sEOS
rm -f /tmp/cpucost.done /tmp/cpucost.fio
( while [ ! -e /tmp/cpucost.done ]; do
	for p in $(pidof fio); do
		a=$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/$p/status 2>/dev/null)
		c=$(cut -d' ' -f39 /proc/$p/stat 2>/dev/null)
		[ -n "$a" ] && [ -n "$c" ] && echo "%[3]s$p $a $c"
	done
	sleep 0.3
done ) >/tmp/cpucost.fio 2>&1 &
TMPDIR=%[4]s %[5]s -test.run '^$' -test.bench '%[6]s' -test.benchtime 1x -test.count 1 -test.timeout %[7]s -cpucost.direct-ios %[8]d -cpucost.cached-ios %[9]d -cpucost.hook 'sh /tmp/cpucost-hook.sh "$1"'%[10]s 2>&1
echo "%[11]s$?"
touch /tmp/cpucost.done
wait
cat /tmp/cpucost.fio
`, guestPath(envFile), cpuCostHook, cpuCostFioMarker, mountPoint("ext4"), guestPath(bin), bench, o.Timeout,
		o.DirectIOs, o.CachedIOs, flags, cpuCostExitMarker)
}

// cpuCostRun runs one variant's benchmarks in the guest, CPUs but the
// first offline until the hook brings them online, and returns the
// script's output.
func (g *Guest) cpuCostRun(ctx context.Context, o CPUCostOptions, variant, bench string) (string, error) {
	if err := g.offlineCPUs(ctx, 1); err != nil {
		return "", fmt.Errorf("take CPUs offline: %w", err)
	}
	defer g.onlineCPUs(context.WithoutCancel(ctx))
	rctx, cancel := context.WithTimeout(ctx, o.Timeout+2*time.Minute)
	defer cancel()
	out, err := g.VM.RunOK(rctx, cpuCostScript(o, variant, bench))
	if err != nil {
		return out, errors.Join(err, g.responsive(ctx))
	}
	return out, nil
}

// cpuCostRunResult is what one run of the probe test binary printed.
type cpuCostRunResult struct {
	Results []string               // benchmark result lines
	Hooks   []string               // the hook's "cpucost hook ..." lines
	Stat    map[string][]uint64    // "stage cpuN" -> /proc/stat's ticks
	Fio     map[fioKey]*fioProcess // the fio processes sampled
	Fails   []string               // --- FAIL lines and the lines a failing test logged
	Exit    int                    // the binary's exit status; -1 when missing
}

// fioKey is one fio process under one CPU mask: a job starts with its
// parent's mask and pins itself after, so a job sampled early is seen
// under both.
type fioKey struct {
	PID     int
	Allowed string // Cpus_allowed_list
}

// fioProcess is what the samples saw of one fio process under one mask.
type fioProcess struct {
	Allowed string
	Ran     map[int]int // CPU last run on -> samples
}

var (
	benchResultLine = regexp.MustCompile(`^Benchmark\S+\s+\d+\s+\d+ ns/op`)
	benchFailLine   = regexp.MustCompile(`^(--- FAIL|\s+\S+\.go:\d+:|panic:|FAIL)`)
)

// parseCPUCostRun reads the guest script's output.
func parseCPUCostRun(text string) cpuCostRunResult {
	r := cpuCostRunResult{Stat: map[string][]uint64{}, Fio: map[fioKey]*fioProcess{}, Exit: -1}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case benchResultLine.MatchString(line):
			r.Results = append(r.Results, line)
		case strings.HasPrefix(line, "cpucost hook "):
			r.Hooks = append(r.Hooks, line)
		case strings.HasPrefix(line, "stat "):
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			var ticks []uint64
			for _, s := range f[3:] {
				n, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					break
				}
				ticks = append(ticks, n)
			}
			r.Stat[f[1]+" "+f[2]] = ticks
		case strings.HasPrefix(line, cpuCostFioMarker):
			f := strings.Fields(strings.TrimPrefix(line, cpuCostFioMarker))
			if len(f) != 3 {
				continue
			}
			pid, err1 := strconv.Atoi(f[0])
			cpu, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				continue
			}
			k := fioKey{pid, f[1]}
			p := r.Fio[k]
			if p == nil {
				p = &fioProcess{Allowed: f[1], Ran: map[int]int{}}
				r.Fio[k] = p
			}
			p.Ran[cpu]++
		case strings.HasPrefix(line, cpuCostExitMarker):
			if n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, cpuCostExitMarker))); err == nil {
				r.Exit = n
			}
		case benchFailLine.MatchString(line):
			r.Fails = append(r.Fails, line)
		}
	}
	return r
}

// busy is each CPU's ticks other than idle and iowait between the hook's
// attached and detach readings, by CPU name.
func (r cpuCostRunResult) busy() map[string]uint64 {
	out := map[string]uint64{}
	for key, after := range r.Stat {
		stage, cpu, _ := strings.Cut(key, " ")
		if stage != "detach" {
			continue
		}
		before, ok := r.Stat["attached "+cpu]
		if !ok || len(before) < 5 || len(after) < 5 {
			continue
		}
		var sum uint64
		for i := range min(len(before), len(after)) {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			sum += after[i] - before[i]
		}
		out[cpu] = sum
	}
	return out
}

// Pinning says which CPUs the fio processes were allowed and ran on:
// for each allowed list, the processes seen under it, the CPUs they were
// seen on and the samples.
func (r cpuCostRunResult) Pinning() string {
	type seen struct {
		procs, samples int
		cpus           map[int]bool
	}
	by := map[string]*seen{}
	for _, p := range r.Fio {
		s := by[p.Allowed]
		if s == nil {
			s = &seen{cpus: map[int]bool{}}
			by[p.Allowed] = s
		}
		s.procs++
		for c, n := range p.Ran {
			s.cpus[c] = true
			s.samples += n
		}
	}
	if len(by) == 0 {
		return "no fio process sampled"
	}
	var parts []string
	for _, allowed := range slices.Sorted(maps.Keys(by)) {
		var cpus []string
		for _, c := range slices.Sorted(maps.Keys(by[allowed].cpus)) {
			cpus = append(cpus, strconv.Itoa(c))
		}
		parts = append(parts, fmt.Sprintf("%d allowed %s ran on %s (%d samples)", by[allowed].procs, allowed, strings.Join(cpus, ","), by[allowed].samples))
	}
	return "fio processes: " + strings.Join(parts, "; ")
}

// Problems are the run's failures and missed checks: a non-zero exit or a
// failing benchmark, no result, the second CPU not online for the fio
// runs, or no fio process pinned to CPU 1 and seen running there, or a
// pinned one seen on another CPU.
func (r cpuCostRunResult) Problems() []string {
	var p []string
	if r.Exit != 0 {
		p = append(p, fmt.Sprintf("probe test binary exited %d", r.Exit))
	}
	if len(r.Fails) > 0 {
		p = append(p, "failed: "+strings.Join(r.Fails, " / "))
	}
	if len(r.Results) == 0 {
		p = append(p, "no benchmark result")
	}
	attached := false
	for _, h := range r.Hooks {
		if strings.HasPrefix(h, "cpucost hook attached: online ") {
			attached = true
			if !strings.HasSuffix(h, "online 0-1") {
				p = append(p, "not two CPUs online for the fio runs: "+h)
			}
		}
	}
	if !attached {
		p = append(p, "the hook never ran: the fio runs' CPUs unknown")
	}
	onCPU1 := false
	for k, f := range r.Fio {
		cpu, err := strconv.Atoi(f.Allowed)
		if err != nil {
			continue // the fio parent, or a job not yet pinned: allowed every CPU
		}
		for c := range f.Ran {
			if c != cpu {
				p = append(p, fmt.Sprintf("fio process %d pinned to CPU %d seen on CPU %d", k.PID, cpu, c))
			}
		}
		if cpu == 1 && f.Ran[1] > 0 {
			onCPU1 = true
		}
	}
	if !onCPU1 {
		p = append(p, "no fio job seen running on CPU 1")
	}
	return p
}

// Record is the run's part of the results file: the result lines, the
// hook's lines, the fio processes' CPUs, each CPU's busy ticks while the
// fio runs ran, and the problems.
func (r cpuCostRunResult) Record() string {
	var b strings.Builder
	for _, l := range r.Results {
		b.WriteString(l + "\n")
	}
	for _, h := range r.Hooks {
		b.WriteString("# " + h + "\n")
	}
	b.WriteString("# " + r.Pinning() + "\n")
	if busy := r.busy(); len(busy) > 0 {
		var parts []string
		for _, cpu := range slices.Sorted(maps.Keys(busy)) {
			parts = append(parts, fmt.Sprintf("%s %d", cpu, busy[cpu]))
		}
		b.WriteString("# busy ticks (USER_HZ, not idle or iowait) from attached to detach: " + strings.Join(parts, ", ") + "\n")
	}
	for _, pr := range r.Problems() {
		b.WriteString("# PROBLEM: " + pr + "\n")
	}
	return b.String()
}
