package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// guestConfig is one matrix guest: the kernel is the lab's kit.
type guestConfig struct {
	FS       []string // file systems to make and mount at /mnt/<fs>
	FSMiB    int      // size of each
	CPUs     int
	MemMiB   int
	HostCPUs string      // taskset list QEMU is pinned to; empty: not pinned
	ICount   *lab.ICount // deterministic guest time; nil: the guest's clock is the host's
	Data     lab.DiskConfig
}

// Guest is a booted matrix guest with its file systems and the data disk
// mounted, tracefs mounted and BTF present.
type Guest struct {
	VM      *lab.VM
	Release string // uname -r
}

// fsSerial is the virtio serial of the disk holding file system fs.
func fsSerial(fs string) string { return "fs-" + fs }

// mountPoint is where the guest mounts file system fs.
func mountPoint(fs string) string { return "/mnt/" + fs }

// bootGuest makes the file systems on image files (mkfs on the files, no
// host mount), boots a guest with them and the data disk, and mounts
// everything. It fails loudly when the kernel has no BTF or the static
// binaries do not run.
func bootGuest(ctx context.Context, l *lab.Lab, cfg guestConfig) (*Guest, error) {
	disks := []lab.DiskConfig{cfg.Data}
	for _, fs := range cfg.FS {
		img := filepath.Join(l.Dir, fsSerial(fs)+".raw")
		l.Stage("make %s on %s (%d MiB)", fs, img, cfg.FSMiB)
		if err := lab.MakeImage(ctx, img, "raw", fs, cfg.FSMiB); err != nil {
			return nil, err
		}
		// unsafe: the guest's flushes need not reach the host's disk;
		// what is measured is inside the guest.
		disks = append(disks, lab.DiskConfig{ID: fsSerial(fs), File: img, Format: "raw", Cache: "unsafe"})
	}
	vm, err := l.StartVM(ctx, lab.VMConfig{
		CPUs: cfg.CPUs, MemMiB: cfg.MemMiB, Disks: disks, HostCPUs: cfg.HostCPUs, ICount: cfg.ICount,
	})
	if err != nil {
		return nil, err
	}
	g := &Guest{VM: vm}
	var sh strings.Builder
	sh.WriteString("set -e\n")
	for _, d := range disks {
		dev, err := vm.GuestDevice(ctx, d.ID)
		if err != nil {
			return nil, err
		}
		if d.ID == dataSerial {
			fmt.Fprintf(&sh, "mkdir -p %s\nmount -t ext4 -o ro /dev/%s %s\n", guestRoot, dev, guestRoot)
			continue
		}
		fs := strings.TrimPrefix(d.ID, "fs-")
		fmt.Fprintf(&sh, "mkdir -p %s\nmount -t %s /dev/%s %s\n", mountPoint(fs), fs, dev, mountPoint(fs))
	}
	// The exporter mounts tracefs itself when it is missing; mounting it
	// here makes the runs' starting point the same for every mode.
	sh.WriteString("[ -d /sys/kernel/tracing/events ] || mount -t tracefs tracefs /sys/kernel/tracing\n")
	// The console (a file on the host, saved with the logs) gets the
	// kernel's every message from here on, and a soft lockup's report
	// has every CPU's backtrace: what a stuck guest can still tell.
	sh.WriteString("echo 7 >/proc/sys/kernel/printk\n")
	sh.WriteString("[ -w /proc/sys/kernel/softlockup_all_cpu_backtrace ] && echo 1 >/proc/sys/kernel/softlockup_all_cpu_backtrace\n")
	// libbpf-tools look for tracepoints under debugfs too.
	sh.WriteString("grep -q ' /sys/kernel/debug ' /proc/mounts || mount -t debugfs debugfs /sys/kernel/debug\n")
	if _, err := vm.RunOK(ctx, sh.String()); err != nil {
		return nil, fmt.Errorf("mount the guest's disks: %w", err)
	}
	out, err := vm.RunOK(ctx, "uname -r")
	if err != nil {
		return nil, err
	}
	g.Release = strings.TrimSpace(out)
	if _, rc, err := vm.Run(ctx, "test -r /sys/kernel/btf/vmlinux"); err != nil || rc != 0 {
		return nil, errors.Join(fmt.Errorf("kernel %s has no /sys/kernel/btf/vmlinux: the exporter needs BTF (CONFIG_DEBUG_INFO_BTF)", g.Release), err)
	}
	// The binaries are static (checked on the host); this proves they run
	// on the busybox guest with its kernel.
	for _, cmd := range []string{guestPath(exporterBin) + " --version", guestPath(probeTestBin) + " -test.list ."} {
		if out, err := vm.RunOK(ctx, cmd+" 2>&1"); err != nil {
			return nil, fmt.Errorf("static binary does not run in the guest: %w", err)
		} else if strings.TrimSpace(out) == "" {
			return nil, fmt.Errorf("%s printed nothing in the guest", cmd)
		}
	}
	return g, nil
}

// errGuestStuck is wrapped by responsive's error: the guest no longer runs
// commands, and nothing more can be measured in it.
var errGuestStuck = errors.New("the guest stopped answering")

// responsive checks that the guest still runs a command within 30 seconds;
// if not, the error carries what its kernel said of lockups and hangs.
func (g *Guest) responsive(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil // interrupted, not stuck
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := g.VM.RunOK(cctx, "echo ok"); err == nil || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("%w; its kernel console says:\n%s", errGuestStuck, kernelTrouble(g.VM.ConsoleTail(400), 12))
}

// troubleLine matches kernel messages about a stuck kernel.
var troubleLine = regexp.MustCompile(`soft lockup|hard LOCKUP|blocked for more than|rcu_.*stall|BUG:|Oops|RIP: |Call Trace|general protection`)

// kernelTrouble returns the last n lines of a kernel log that say the
// kernel is stuck or crashed, or a note that none does.
func kernelTrouble(console string, n int) string {
	var hits []string
	for _, line := range strings.Split(console, "\n") {
		if troubleLine.MatchString(line) {
			hits = append(hits, line)
		}
	}
	if len(hits) == 0 {
		return "(no lockup, hang or crash message)"
	}
	if len(hits) > n {
		hits = hits[len(hits)-n:]
	}
	return strings.Join(hits, "\n")
}

// exporterPort is where the exporter listens inside the guest.
const exporterPort = 9477

// metricsURL is the exporter's metrics address inside the guest.
var metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", exporterPort)

// guestExporter is a fspair_exporter running in the guest.
type guestExporter struct {
	g        *Guest
	StartUp  time.Duration // from exec to /metrics listing every disk
	programs []Program     // fspair_probe_attached at the first reading
}

// Files in the guest's /tmp (a tmpfs) for the exporter's pid and log.
const (
	exporterPid = "/tmp/fspair_exporter.pid"
	exporterLog = "/tmp/fspair_exporter.log"
)

// exporterArgs is the exporter's command line for a static configuration
// and a probe mode ("current" passes no mode flag), otherwise with the
// defaults a site runs (the first discovery round runs before /metrics is
// served) and any extra flags after them. kingpin's boolean flags take no
// value: --no-discovery.libvirt, not --discovery.libvirt=false.
//
// A mode written MODE@TAG runs another build of the exporter, the data
// disk's exporterBin-TAG (the overhead bench's -exporter TAG=PATH), so that
// two builds are timed in the same run.
func exporterArgs(config, mode string, extra ...string) []string {
	bin := exporterBin
	if m, tag, ok := strings.Cut(mode, "@"); ok {
		mode, bin = m, exporterBin+"-"+tag
	}
	args := []string{
		guestPath(bin),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", exporterPort),
		"--no-discovery.libvirt", "--no-discovery.proc",
		"--discovery.config.file=" + config,
	}
	if mode != modeCurrent {
		args = append(args, "--probe.mode="+mode)
	}
	return append(args, extra...)
}

// startExporter starts the exporter with the configuration config (a path
// in the guest) and waits until /metrics lists every one of files as a
// disk; extra flags follow the defaults. A start that fails returns the
// exporter's log in the error.
func (g *Guest) startExporter(ctx context.Context, config, mode string, files []string, timeout time.Duration, extra ...string) (*guestExporter, error) {
	var sh strings.Builder
	fmt.Fprintf(&sh, "rm -f %s\n%s </dev/null >%s 2>&1 &\necho $! >%s\n", exporterLog,
		strings.Join(exporterArgs(config, mode, extra...), " "), exporterLog, exporterPid)
	fmt.Fprintf(&sh, "pid=$(cat %s)\nend=$(( $(date +%%s) + %d ))\n", exporterPid, int(timeout.Seconds()))
	sh.WriteString("while :; do\n")
	fmt.Fprintf(&sh, "\tif ! kill -0 $pid 2>/dev/null; then echo 'fspair_exporter exited:'; cat %s; exit 3; fi\n", exporterLog)
	fmt.Fprintf(&sh, "\tm=$(wget -qO- %s 2>/dev/null | grep '^fspair_disk_info{') || m=\n", metricsURL)
	sh.WriteString("\tok=1\n")
	for _, f := range files {
		fmt.Fprintf(&sh, "\tcase \"$m\" in *'source_file=\"%s\"'*) ;; *) ok=0 ;; esac\n", f)
	}
	sh.WriteString("\t[ $ok = 1 ] && exit 0\n")
	fmt.Fprintf(&sh, "\tif [ $(date +%%s) -ge $end ]; then echo 'fspair_exporter did not list the disks in %s:'; cat %s; exit 4; fi\n", timeout, exporterLog)
	sh.WriteString("\tsleep 0.2\ndone\n")
	start := time.Now()
	err := g.oneCPU(ctx, func() error {
		_, err := g.VM.RunOK(ctx, sh.String())
		return err
	})
	if err != nil {
		// Whatever the reason, no exporter is left behind.
		_, _ = g.stopExporter(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start the exporter (%s): %w", mode, err)
	}
	return &guestExporter{g: g, StartUp: time.Since(start)}, nil
}

// counterFamilies are the metric families a reading keeps.
var counterFamilies = []string{"fspair_disk_requests_total", "fspair_disk_bytes_total", "fspair_disk_unfollowed", "fspair_probe_attached",
	"fspair_probe_recursion_misses_total", "fspair_probe_events_dropped_total"}

// read scrapes the exporter in the guest and returns the families the
// matrix compares.
func (e *guestExporter) read(ctx context.Context) (Reading, error) {
	out, err := e.g.VM.RunOK(ctx, fmt.Sprintf("wget -qO- %s | grep -E '^(%s)[{ ]'", metricsURL, strings.Join(counterFamilies, "|")))
	if err != nil {
		return Reading{}, fmt.Errorf("scrape the exporter in the guest: %w", err)
	}
	return parseReading([]byte(out))
}

// stop stops the exporter and returns its log.
func (e *guestExporter) stop(ctx context.Context) (string, error) {
	return e.g.stopExporter(ctx)
}

// stopExporter stops the exporter started last (SIGTERM, SIGKILL after 10
// seconds) and returns its log.
func (g *Guest) stopExporter(ctx context.Context) (string, error) {
	sh := fmt.Sprintf(`pid=$(cat %[1]s 2>/dev/null) || { cat %[2]s 2>/dev/null; exit 0; }
kill $pid 2>/dev/null
i=0
while kill -0 $pid 2>/dev/null; do
	i=$((i+1))
	if [ $i = 100 ]; then echo "fspair_exporter did not stop in 10 s: killed" >>%[2]s; kill -9 $pid; fi
	sleep 0.1
done
rm -f %[1]s
cat %[2]s`, exporterPid, exporterLog)
	var out string
	err := g.oneCPU(ctx, func() (err error) {
		out, err = g.VM.RunOK(ctx, sh)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("stop the exporter in the guest: %w", err)
	}
	return out, nil
}

// layOut writes the fio data file (sizeMiB of zeros) and syncs, before any
// exporter tracks it, so fio finds it complete and lays nothing out.
func (g *Guest) layOut(ctx context.Context, file string, sizeMiB int) error {
	_, err := g.VM.RunOK(ctx, fmt.Sprintf("rm -f %[1]s && dd if=/dev/zero of=%[1]s bs=1M count=%[2]d 2>&1 && sync", file, sizeMiB))
	if err != nil {
		return fmt.Errorf("lay out %s: %w", file, err)
	}
	return nil
}

// ProbeRun is one run of exporter/probe's test binary in a guest.
type ProbeRun struct {
	FS     string
	Passed bool
	Failed []string // failing tests (subtests as Parent/Sub)
	// Messages are the first lines each failing test logged.
	Messages map[string][]string `json:",omitempty"`
	Error    string              `json:",omitempty"` // when the binary could not be run or ended without a verdict
	Tail     string              `json:",omitempty"` // the output's last lines when it failed
	Output   string              `json:"-"`          // all of it, saved beside the results
	Seconds  float64
}

// offlineCPUs takes the guest's CPUs from number keep on offline.
func (g *Guest) offlineCPUs(ctx context.Context, keep int) error {
	_, err := g.VM.RunOK(ctx, fmt.Sprintf(
		"for c in /sys/devices/system/cpu/cpu[0-9]*; do n=${c##*cpu}; [ $n -ge %d ] && [ -w $c/online ] && echo 0 >$c/online; done; grep -c ^processor /proc/cpuinfo", keep))
	return err
}

// oneCPU runs fn with the guest's CPUs but the first offline: the
// exporter's start and stop attach and detach its programs, and the
// kernel live-patches its text for each (text_poke_bp: an int3 first,
// then the new bytes). Under TCG with two vCPUs, the other vCPU ran
// into such an int3 after the patch was done: on 6.12 in the syscall
// mode, whose patched static branch every system call passes, 3 of 3
// exporter starts left an "Oops: int3" at syscall_trace_enter or
// syscall_exit_to_user_mode_prepare on the console and the guest dead;
// with one vCPU online none did (tests/matrix/README.md).
func (g *Guest) oneCPU(ctx context.Context, fn func() error) error {
	if err := g.offlineCPUs(ctx, 1); err != nil {
		return fmt.Errorf("take CPUs offline: %w", err)
	}
	defer g.onlineCPUs(context.WithoutCancel(ctx))
	return fn()
}

// onlineCPUs brings every CPU of the guest back online (after the probe
// tests took some offline); a failure is left to the next command to show.
func (g *Guest) onlineCPUs(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, _, _ = g.VM.Run(cctx, "for c in /sys/devices/system/cpu/cpu[0-9]*/online; do [ -w $c ] && [ \"$(cat $c)\" = 0 ] && echo 1 >$c; done; true")
}

// Markers the probe test run's guest script prints.
const (
	probeExitMarker = "@@probe.test exit "
	probeHungMarker = "@@probe.test hung"
)

// runProbeTests runs the probe test binary with TMPDIR on file system fs
// and FSPAIR_PROBE_MODE=mode (which the probe tests read once the new data
// path lands), with the bundled mkfs and losetup on PATH. It runs in the
// background of the guest, its output in a file: a test stuck in the
// kernel (a thread in uninterruptible sleep outlives -test.timeout's panic)
// is then reported with the test it was in, its threads' kernel stacks and
// the kernel log's tail, instead of losing the output with the command.
//
// cpus > 0 takes the guest's other CPUs offline for the run (cpus 1: only
// CPU 0): see Options.ProbeCPUs.
func (g *Guest) runProbeTests(ctx context.Context, fs, mode, runRE string, cpus int, timeout time.Duration) ProbeRun {
	start := time.Now()
	run := ProbeRun{FS: fs}
	out := "/tmp/probe-" + fs + ".out"
	grace := 30 * time.Second
	if cpus > 0 {
		if err := g.offlineCPUs(ctx, cpus); err != nil {
			run.Error = fmt.Sprintf("take CPUs offline for the probe tests: %v", err)
			return run
		}
		defer g.onlineCPUs(context.WithoutCancel(ctx))
	}
	sh := fmt.Sprintf(`. %[1]s
cd /tmp
rm -f %[2]s
( TMPDIR=%[3]s FSPAIR_PROBE_MODE=%[4]s %[5]s -test.v -test.count=1 -test.timeout=%[6]s %[10]s >%[2]s 2>&1; echo "%[7]s$?" >>%[2]s ) </dev/null >/dev/null 2>&1 &
end=$(( $(date +%%s) + %[8]d ))
while ! grep -q '^%[7]s' %[2]s 2>/dev/null; do
	if [ $(date +%%s) -ge $end ]; then
		echo "%[9]s"
		for p in $(pidof probe.test); do
			for t in /proc/$p/task/*; do
				echo "thread ${t##*/} $(cat $t/comm) in $(cat $t/wchan 2>/dev/null)"
				cat $t/stack 2>/dev/null
			done
		done
		echo "kernel log:"
		dmesg | tail -40
		kill -9 $(pidof probe.test) 2>/dev/null
		echo "%[9]s end"
		break
	fi
	sleep 1
done
cat %[2]s
`, guestPath(envFile), out, mountPoint(fs), mode, guestPath(probeTestBin), timeout, probeExitMarker,
		int((timeout + grace).Seconds()), probeHungMarker, runFlag(runRE))
	rctx, cancel := context.WithTimeout(ctx, timeout+grace+2*time.Minute)
	defer cancel()
	text, err := g.VM.RunOK(rctx, sh)
	run.Seconds = time.Since(start).Seconds()
	if err != nil {
		run.Error = err.Error()
		return run
	}
	probeResult(&run, text, timeout, grace)
	return run
}

// probeResult fills run from the guest script's output: the probe test
// binary's -test.v output and its exit marker, after the diagnostics of a
// run that did not end when there are some.
func probeResult(run *ProbeRun, text string, timeout, grace time.Duration) {
	diag := ""
	if d, rest, ok := strings.Cut(text, probeHungMarker+" end\n"); ok {
		diag, text = strings.TrimPrefix(d, probeHungMarker+"\n"), rest
	}
	body, rc, ok := strings.Cut(text, probeExitMarker)
	run.Output = body
	v := parseTestOutput(body)
	run.Failed, run.Messages = v.Failed, v.Messages
	code, cerr := strconv.Atoi(strings.TrimSpace(rc))
	switch {
	case diag != "":
		run.Error = fmt.Sprintf("probe.test did not end within %s (-test.timeout %s); it was in %s", timeout+grace, timeout, lastRun(body))
		run.Tail = diag + "\n--- output, last lines:\n" + lab.Tail(body, 20)
		run.Output = body + "\n--- the run did not end:\n" + diag
		return
	case !ok || cerr != nil:
		run.Error = "probe.test output has no exit status"
		run.Tail = lab.Tail(text, 30)
		return
	}
	run.Passed = code == 0 && v.Pass && len(v.Failed) == 0
	if !run.Passed {
		if len(v.Failed) == 0 {
			run.Error = fmt.Sprintf("probe.test exited %d without a failing test (panic, timeout or build problem); it was in %s", code, lastRun(body))
		}
		run.Tail = lab.Tail(body, 30)
	}
}

// lastRun names the test a -test.v output started last.
func lastRun(out string) string {
	name := "no test yet"
	for _, line := range strings.Split(out, "\n") {
		if m := runLine.FindStringSubmatch(line); m != nil {
			name = m[1]
		}
	}
	return name
}

// runFlag is the probe test binary's -test.run for re, shell-quoted, or
// nothing for every test.
func runFlag(re string) string {
	if re == "" {
		return ""
	}
	return "-test.run '" + strings.ReplaceAll(re, "'", `'\''`) + "'"
}
