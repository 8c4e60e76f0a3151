package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

// In the guest: the personality file, Filebench's output and its exit
// status (written when it ends) live in the guest's /tmp (a tmpfs), the
// file set on the disk under test.
const (
	guestFile = "/tmp/fspair-personality.f"
	guestLog  = "/tmp/filebench.log"
	guestRC   = "/tmp/filebench.rc"
	diskID    = "wl"
)

// fileSetDir is $dir: a directory on the disk under test.
var fileSetDir = path.Join(workload.MountPoint, "filebench")

// pollEvery is how often the runner asks the guest whether Filebench has
// finished its layout or ended: a grep in a TCG guest, negligible next to
// Filebench's own work.
const pollEvery = 5 * time.Second

// one makes the run s with the lab lock held: a host file system, the
// image on it, a guest with Filebench, the exporter watching the image
// file, and Filebench's layout and run while the disk is scraped. The run
// it returns carries what was measured even when err is not nil.
func (r *runner) one(ctx context.Context, s Spec, text string) (run Run, err error) {
	p, _ := FindPersonality(s.Personality)
	run = Run{Spec: s, Class: p.Class, Files: r.o.files(p)}
	release, err := lab.Lock(ctx, r.o.Lock, r.logf)
	if err != nil {
		return run, err
	}
	defer release()
	start := time.Now()
	run.Started = start.UTC().Truncate(time.Second)
	defer func() { run.WallSeconds = round(time.Since(start).Seconds()) }()

	l, err := lab.New(ctx, "", "", r.progress)
	if err != nil {
		return run, err
	}
	defer func() {
		cerr := l.Close()
		if leaks, lerr := l.Leaks(); lerr == nil && len(leaks) > 0 {
			cerr = errors.Join(cerr, fmt.Errorf("lab leaked %s (run tests/lab/cleanup.sh)", strings.Join(leaks, "; ")))
		}
		err = errors.Join(err, cerr)
	}()
	h, err := l.NewHostFS(ctx, s.Host, r.o.HostFSMiB)
	if err != nil {
		return run, err
	}
	img := h.Path(diskID + "." + s.Format)
	if err := lab.MakeImage(ctx, img, s.Format, s.Guest, r.o.ImageMiB); err != nil {
		return run, err
	}
	disk := lab.DiskConfig{ID: diskID, File: img, Format: s.Format, Cache: s.Cache, AIO: s.AIO}
	vm, err := l.StartVM(ctx, lab.VMConfig{Name: "filebench", MemMiB: r.o.MemMiB, CPUs: r.o.CPUs,
		Disks: []lab.DiskConfig{disk}, FspairQMP: true, Initramfs: []string{r.fb.Initramfs}})
	if err != nil {
		return run, err
	}
	dev, err := vm.GuestDevice(ctx, diskID)
	if err != nil {
		return run, err
	}
	if err := workload.MountWith(ctx, vm, dev, s.Guest, r.o.MountOptions); err != nil {
		return run, err
	}
	// The image's space read every 5 s rather than every minute: the
	// recorded windows keep how fast it grows (image_growth_share).
	ex, err := workload.StartExporter(ctx, r.exporter, "--image.refresh-interval=5s")
	if err != nil {
		return run, err
	}
	defer ex.Close()
	if _, err := ex.WaitDisk(ctx, img, time.Minute); err != nil {
		return run, err
	}

	// The file set starts from an empty directory with nothing pending
	// and nothing cached, as workload.Prepare leaves a fio layout.
	if _, err := vm.RunOK(ctx, fmt.Sprintf("mkdir -p %s && cat >%s <<'FSPAIR_EOF'\n%sFSPAIR_EOF\nsync && echo 3 >/proc/sys/vm/drop_caches",
		fileSetDir, guestFile, text)); err != nil {
		return run, fmt.Errorf("write the personality into the guest: %w", err)
	}
	mem, err := meminfo(ctx, vm)
	if err != nil {
		return run, err
	}
	run.GuestMemBytes, run.GuestAvailableBytes = mem["MemTotal"], mem["MemAvailable"]

	rec := ex.Record(ctx, img, r.o.Interval)
	stopped := false
	defer func() {
		if !stopped {
			rec.Stop()
		}
	}()
	run.Origin = time.Now().UTC()
	rec.SetPhase(ctx, "layout")
	r.logf("%s: Filebench started (layout of %d files, then %s)", s, run.Files, r.o.Runtime)
	// The subshell writes the exit status when Filebench ends; its output
	// goes to files, so the control channel's command returns at once.
	if _, err := vm.RunOK(ctx, fmt.Sprintf("%[5]s && cd /tmp && rm -f %[3]s && ( %[1]s -f %[2]s >%[4]s 2>&1 </dev/null; echo $? >%[3]s ) </dev/null >/dev/null 2>&1 &",
		lab.FilebenchBinary, guestFile, guestRC, guestLog, lab.FilebenchSetup)); err != nil {
		return run, fmt.Errorf("start Filebench: %w", err)
	}
	deadline := time.Now().Add(r.o.LayoutTimeout + r.o.Runtime + 5*time.Minute)
	running := false
	for {
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(pollEvery):
		}
		out, err := vm.RunOK(ctx, fmt.Sprintf("grep -q 'Running\\.\\.\\.' %s && echo running; test -e %s && echo ended; true", guestLog, guestRC))
		if err != nil {
			return run, fmt.Errorf("ask the guest about Filebench: %w", err)
		}
		if !running && strings.Contains(out, "running") {
			running = true
			rec.SetPhase(ctx, "run")
			r.logf("%s: layout done after %s, running", s, time.Since(run.Origin).Round(time.Second))
			if mem, err := meminfo(ctx, vm); err == nil {
				run.RunAvailableBytes = mem["MemAvailable"]
			}
		}
		if strings.Contains(out, "ended") {
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("Filebench still running after %s (layout timeout %s + runtime %s + 5m); its log:\n%s",
				time.Since(run.Origin).Round(time.Second), r.o.LayoutTimeout, r.o.Runtime, guestTail(ctx, vm, 20))
		}
	}
	// Everything the run wrote reaches the image file before the last
	// scrape.
	if _, err := vm.RunOK(ctx, "sync"); err != nil {
		return run, fmt.Errorf("sync after Filebench: %w", err)
	}
	rec.SetPhase(ctx, "after")
	pts, serr := rec.Stop()
	stopped = true
	run.Points = pts
	if serr != nil {
		r.logf("%s: scrape errors (those points are missing): %v", s, serr)
	}

	out, err := vm.RunOK(ctx, fmt.Sprintf("cat %s; echo; cat %s", guestRC, guestLog))
	if err != nil {
		return run, fmt.Errorf("read Filebench's log: %w", err)
	}
	rcText, log, _ := strings.Cut(out, "\n")
	rc, _ := strconv.Atoi(strings.TrimSpace(rcText))
	run.FilebenchLog = log
	if err := run.parseLog(log); err != nil || rc != 0 {
		return run, fmt.Errorf("Filebench exited with status %d (%v); the end of its log:\n%s", rc, err, lab.Tail(log, 20))
	}
	du, err := vm.RunOK(ctx, "du -sk "+fileSetDir)
	if err != nil {
		return run, fmt.Errorf("size the file set: %w", err)
	}
	kib, err := strconv.ParseFloat(strings.Fields(du + " x")[0], 64)
	if err != nil {
		return run, fmt.Errorf("size the file set: du said %q", du)
	}
	run.WorkingSetBytes = kib * 1024
	return run, nil
}

var (
	// Filebench's log lines start with its clock, seconds since it
	// started: "14.512: Running...".
	runningRE = regexp.MustCompile(`(?m)^([0-9.]+): Running\.\.\.`)
	tookRE    = regexp.MustCompile(`(?m)^[0-9.]+: Run took ([0-9]+) seconds`)
	summaryRE = regexp.MustCompile(`(?m)^[0-9.]+: (IO Summary: .*)$`)
	opsRE     = regexp.MustCompile(`([0-9.]+) ops/s`)
)

// parseLog takes the layout time, the run time and the IO Summary from
// Filebench's output; without an IO Summary the run did not complete.
func (r *Run) parseLog(log string) error {
	if m := runningRE.FindStringSubmatch(log); m != nil {
		r.LayoutSeconds, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := tookRE.FindStringSubmatch(log); m != nil {
		r.RunSeconds, _ = strconv.ParseFloat(m[1], 64)
	}
	m := summaryRE.FindStringSubmatch(log)
	if m == nil {
		return errors.New("no IO Summary in its output")
	}
	r.Summary = strings.TrimSpace(m[1])
	if o := opsRE.FindStringSubmatch(r.Summary); o != nil {
		r.OpsPerSecond, _ = strconv.ParseFloat(o[1], 64)
	}
	return nil
}

// meminfo returns the guest's /proc/meminfo in bytes, by field.
func meminfo(ctx context.Context, vm *lab.VM) (map[string]float64, error) {
	out, err := vm.RunOK(ctx, "cat /proc/meminfo")
	if err != nil {
		return nil, fmt.Errorf("read the guest's memory: %w", err)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				if len(f) == 3 && f[2] == "kB" {
					v *= 1024
				}
				m[strings.TrimSuffix(f[0], ":")] = v
			}
		}
	}
	if m["MemTotal"] == 0 {
		return nil, fmt.Errorf("read the guest's memory: no MemTotal in %q", lab.Tail(out, 3))
	}
	return m, nil
}

// guestTail returns the last n lines of Filebench's log, or why not.
func guestTail(ctx context.Context, vm *lab.VM, n int) string {
	out, err := vm.RunOK(ctx, fmt.Sprintf("tail -n %d %s", n, guestLog))
	if err != nil {
		return fmt.Sprintf("(could not read %s: %v)", guestLog, err)
	}
	return out
}
