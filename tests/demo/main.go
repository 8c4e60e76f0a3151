// Command demo runs fspair end to end on one machine: the native stack
// (scripts/stack.sh: Prometheus with fspair's rules, Alertmanager, the node
// exporter, the libvirt exporter when libvirtd answers, and
// fspair_exporter) and two lab VMs on two different guest/host file-system
// pairs with different workloads; then prints where to look and, every
// --summary.interval, what fspair concludes per disk, read back from the
// recording rules in Prometheus (conclusions.go: workload class and
// confidence, pair, the knowledge base's verdict, write amplification, the
// alerts with their runbooks), the disks' request rates and the alerts.
// Every --report.interval it renders the report (report/: the fleet's pair
// matrices and the mail VM's disk, HTML and PNG) into the stack directory
// (report.go). Ctrl-C (or --duration) tears everything down and prints a
// summary of the run: each disk's class, verdict and alerts, and the
// runbooks, dashboards and report to open next. The stack's logs and the
// last report stay in its directory.
//
// The VMs are of both kinds fspair_exporter discovers: demo-web is a plain
// QEMU process, found in /proc; demo-mail is a transient libvirt domain,
// found through libvirt, whose disk the libvirt exporter reports too (the
// VM disk dashboard's libvirt row). The demo starts virtlogd and libvirtd
// before the stack when none answers, and stops them at exit; where libvirt
// is missing or does not start, demo-mail is plain QEMU as well and the
// demo says that the libvirt row stays empty. The guest side of each disk
// (the VM disk dashboard's guest path) comes from libvirt for demo-mail and
// over a QMP monitor the plain QEMU VMs declare for the exporter
// (--discovery.proc.qmp) for demo-web.
//
// Prometheus loads fspair's rules regenerated with the site knowledge base
// the project's pair lab measured (docs/kdb/site.yaml, tests/kdb;
// --kdb.site), so that the site verdicts the demo, the dashboards and the
// report show are measured ones, and with every alert's `for` cut to a
// twentieth (--alerts.for-scale), so that the mail VM's poor pairing fires
// within minutes instead of after an hour; --kdb.site= --alerts.for-scale=1
// loads rules/ as committed. The mail VM runs btrfs on ext4, a pair that
// measurement rates worst for mail (at confidence 1.00, where the published
// study rates it best), with the job it was measured with; the web VM a
// pair the published study rates best for web, which the pair lab did not
// measure.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

type vmSpec struct {
	name, hostFS, guestFS, format, cache, aio, workload string
	imageMiB                                            int
	// fio runs inside the guest on the mounted file system, in the
	// background; or, when job is set, that job of the workload lab
	// (tests/workload/jobs), the one the pair lab measures pairs with.
	fio string
	job workload.Workload
	// libvirt: a transient libvirt domain when libvirt is usable, so that
	// the libvirt exporter reports the disk beside fspair; otherwise, and
	// when false, a plain QEMU process, which fspair finds in /proc.
	libvirt bool
}

var vms = []vmSpec{
	{
		name: "demo-web", hostFS: "ext4", guestFS: "xfs", format: "raw", cache: "none", aio: "native", imageMiB: 512,
		// The pair lab's web job (tests/workload/jobs/web.fio): whole-file
		// reads of small files, 40 to an append of 1-16 KiB to a log that
		// is never synced, Filebench's webserver scaled to a TCG guest; the
		// classifier is fitted on it beside the Filebench personality
		// (rules/classes.yaml). rules/README.md's lab tables show its
		// recorded windows on xfs/ext4 classed web at confidence 1.00, but
		// at the demo's ~100 reads a second (two guests and the stack on
		// the host) its log reaches the disk in a few write-backs, each
		// covered by a journal flush, so they count as durable and the
		// disk lies several units from every centre: the demo runs of
		// 2026-11-29 showed it "web (unsure)" at 0.00, no verdict, and
		// demo-smoke takes that or web with its verdict. The demo's own
		// earlier fio line (random 16 KiB reads against a durable log in
		// 64 KiB pieces) was web at 0.00 as well.
		workload: "the pair lab's web job (tests/workload/jobs/web.fio): whole-file reads of small files " +
			"and appends to a log (web-like)",
		job: "web",
	},
	{
		// A pair the site knowledge base (docs/kdb/site.yaml) rates worst
		// for mail, under the conditions it was measured in (raw image,
		// cache=none, a 1 GiB image: btrfs below that switches to mixed
		// block groups, tests/workload.MakeDisk), running the job it was
		// measured with: the alert fires for what the pair lab measured,
		// not for a verdict written under the site's name. The published
		// study rates btrfs/ext4 a standout best for mail, so the demo
		// shows both verdicts and which one the rules act on. The other
		// two pairs it rates worst for mail are btrfs guests as well.
		name: "demo-mail", hostFS: "ext4", guestFS: "btrfs", format: "raw", cache: "none", aio: "native",
		imageMiB: workload.ImageMiB,
		workload: "the pair lab's mail job (tests/workload/jobs/mail.fio): appends each made durable by fsync, " +
			"whole-file reads, creates and deletes (mail-like)",
		libvirt: true,
		job:     "mail",
	},
}

func main() { os.Exit(run()) }

func run() int {
	var (
		exporterBin = flag.String("exporter", "bin/fspair_exporter", "fspair_exporter binary")
		stackScript = flag.String("stack", "scripts/stack.sh", "the native stack's script")
		stackDir    = flag.String("stack.dir", "/var/tmp/fspair-demo", "the stack's data, logs and pid files (emptied at start, logs kept at exit)")
		cacheDir    = flag.String("lab.cache", lab.DefaultCacheDir(), "lab kit cache")
		duration    = flag.Duration("duration", 0, "stop after this long (0 = until Ctrl-C)")
		every       = flag.Duration("summary.interval", 30*time.Second, "how often to print the summary")
		site        = flag.String("kdb.site", "docs/kdb/site.yaml", "the site's own verdicts the rules are generated with (rules/kdb/site.yaml's format; the default is the pair lab's measurement); empty: rules/ as committed")
		rulesGen    = flag.String("rules.gen", "bin/fspair-rules-gen", "the rules generator (go build ./rules/gen), run from the repository's root")
		forScale    = flag.Float64("alerts.for-scale", 0.05, "multiply every alert's `for` by this in the demo's rules (1: as committed)")
		longEvery   = flag.String("rules.long-interval", "", "evaluate the long-window rule groups, the guest latency quantiles and the workload classifier this often (rules/gen -long-interval; empty: as committed, 3m); make demo-smoke's 30s has those series sooner")
		settle      = flag.String("rules.settle", "", "a class is settled, and the verdict and alerts act on it, once held this long (rules/gen -settle; empty: as committed, one rule window plus a minute, 6m); shorter than the rule window, a class formed while the window still holds the workload before it can act")
		reportBin   = flag.String("report", "bin/fspair-report", "the report renderer (go build ./report); empty: render no report")
		reportEvery = flag.Duration("report.interval", 3*time.Minute, "how often to render the report into the stack directory's report/")
		reportLimit = flag.Duration("report.timeout", 2*time.Minute, "the most one rendering of the report may take")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	st := &stack{script: *stackScript, dir: *stackDir, exporter: *exporterBin}
	if *forScale < 0 {
		fmt.Fprintf(os.Stderr, "demo: --alerts.for-scale %v: must be at least 0\n", *forScale)
		return 2
	}
	st.site, st.forScale, st.rulesGen, st.longEvery, st.settle = *site, *forScale, *rulesGen, *longEvery, *settle
	rep := &reporter{bin: *reportBin, disk: vms[1].name + "/vda", dir: filepath.Join(*stackDir, "report"),
		every: *reportEvery, timeout: *reportLimit, done: make(chan renderResult, 1)}
	var final []string
	err := demo(ctx, st, *cacheDir, *every, rep, &final)
	// The summary of the run comes last, after the teardown's lines.
	for _, l := range final {
		fmt.Println(l)
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

// demo sets up the stack and the VMs, prints the summary every `every`
// and has rep render the report, until ctx ends; then it sets final to the
// run's summary, read from Prometheus before the teardown, for the caller
// to print after it.
func demo(ctx context.Context, st *stack, cacheDir string, every time.Duration, rep *reporter, final *[]string) (err error) {
	setup := context.Background() // setup steps finish even if Ctrl-C comes mid-way; teardown follows
	if err := st.reset(); err != nil {
		return err
	}
	l, err := lab.New(setup, "", cacheDir, prefixed("lab: "))
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("demo: tearing down (VMs, mounts, loop devices)")
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	// libvirtd runs before the stack starts, so that the stack starts the
	// libvirt exporter and points fspair_exporter at libvirt.
	useLibvirt := startLibvirt(l)

	// The stack starts before the VMs and stops before the lab's teardown:
	// the exporter holds the images open, which would keep their host file
	// systems from unmounting.
	if err := st.start(); err != nil {
		return err
	}
	defer func() {
		if serr := st.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	logCtx, stopLog := context.WithCancel(context.Background())
	defer stopLog()
	// The exporter's warnings and errors, as a demo run in the foreground
	// would show them; the rest stays in its log file.
	go follow(logCtx, filepath.Join(st.dir, "log", "fspair-exporter.log"), "exporter: ",
		func(line string) bool {
			return strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")
		})

	for _, v := range vms {
		h, err := l.NewHostFS(setup, v.hostFS, 2048)
		if err != nil {
			return err
		}
		img := h.Path(v.name + "." + v.format)
		if err := lab.MakeImage(setup, img, v.format, v.guestFS, v.imageMiB); err != nil {
			return err
		}
		kind, err := startVM(setup, l, v, img, v.libvirt && useLibvirt)
		if err != nil {
			return err
		}
		printLines(wrap("demo: ", fmt.Sprintf("%s (%s): guest %s on host %s (%s, cache=%s, aio=%s): %s",
			v.name, kind, v.guestFS, v.hostFS, v.format, v.cache, v.aio, v.workload), lineWidth))
	}

	promURL := st.url("PROMETHEUS_URL")
	libvirt := st.url("LIBVIRT_EXPORTER_URL") + "/metrics"
	if st.url("LIBVIRT_EXPORTER_URL") == "" {
		libvirt = "not running: libvirtd does not answer (the dashboards' libvirt row stays empty)"
	}
	fmt.Printf("\ndemo: running. Look at:\n"+
		"  prometheus    %s/graph  (try: {__name__=~\"domain_disk:.+\"}, the rules' per-disk series)\n"+
		"  alerts        %s/alerts, Alertmanager %s\n"+
		"  exporter      %s/metrics\n"+
		"  node          %s/metrics\n"+
		"  libvirt       %s\n"+
		"  grafana       dashboards/*.json, for a Grafana reading this Prometheus (compose.yaml runs one)\n"+
		"  report        %s\n"+
		"  logs          %s\n"+
		"  Ctrl-C to stop and clean up.\n\n",
		promURL, promURL, st.url("ALERTMANAGER_URL"), st.url("FSPAIR_EXPORTER_URL"), st.url("NODE_EXPORTER_URL"),
		libvirt, reportPlan(rep), filepath.Join(st.dir, "log"))
	rep.promURL, rep.since = promURL, time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	// Until the rules have classed every VM's disk, the demo looks every
	// few seconds and prints the summary as soon as they have, so that a
	// newcomer sees the first conclusions when they exist rather than up
	// to one summary interval later; then every `every`.
	early := time.NewTicker(firstLook)
	defer early.Stop()
	show := func(now time.Time) {
		disks, err := summary(ctx, promURL)
		if err != nil {
			fmt.Printf("demo: summary: %v\n", err)
			return
		}
		if allClassed(disks, len(vms)) {
			early.Stop()
		}
		if rep.due(now, anyClassed(disks)) {
			rep.start(now)
		}
	}
	for {
		select {
		case <-ctx.Done():
			rep.stop()
			*final = closing(promURL, rep, filepath.Join(st.dir, "log"))
			return ctx.Err()
		case res := <-rep.done:
			printLines(rep.finish(res))
		case now := <-early.C:
			disks, _, err := conclusions(ctx, promURL, ".")
			if err == nil && allClassed(disks, len(vms)) {
				show(now)
				t.Reset(every)
			}
		case now := <-t.C:
			show(now)
		}
	}
}

// firstLook is how often the demo asks whether the rules have classed every
// disk yet, before its first full summary.
const firstLook = 5 * time.Second

// allClassed says whether the rules have classed all n of the demo's disks.
func allClassed(disks []diskState, n int) bool {
	classed := 0
	for _, d := range disks {
		if d.class != "" {
			classed++
		}
	}
	return classed >= n
}

// reportPlan says where and when the demo renders the report.
func reportPlan(rep *reporter) string {
	if rep.bin == "" {
		return "not rendered (--report=); make report renders one from this Prometheus"
	}
	return fmt.Sprintf("%s/report.{html,png}, rendered every %s once the rules class a disk", rep.dir, minutes(rep.every))
}

// closing reads the run's summary from Prometheus, which still runs.
func closing(promURL string, rep *reporter, logs string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	disks, alerts, err := conclusions(ctx, promURL, ".")
	if err != nil {
		return []string{fmt.Sprintf("demo: the run's summary: %v", err)}
	}
	report, at := rep.last()
	return finalSummary(time.Now(), disks, alerts, report, at, logs, lineWidth)
}

func anyClassed(disks []diskState) bool {
	for _, d := range disks {
		if d.class != "" {
			return true
		}
	}
	return false
}

func printLines(lines []string) {
	for _, l := range lines {
		fmt.Println(l)
	}
}

// startLibvirt makes sure libvirtd runs (lab.StartLibvirt: virtlogd and
// libvirtd as the demo's children when none answers) and reports whether
// the demo can create domains. The lab's teardown stops what it started,
// after it has destroyed the domains. Without libvirt the demo goes on with
// plain QEMU only, and says what that leaves empty.
func startLibvirt(l *lab.Lab) bool {
	lv, err := lab.StartLibvirt(l.Progress)
	if err != nil {
		printLines(wrap("demo: ", fmt.Sprintf("libvirt is not usable, so every VM is plain QEMU and the dashboards' libvirt row stays empty: %v", err), lineWidth))
		return false
	}
	l.Defer(lv.Close)
	return true
}

// startVM boots v's guest on img, as a transient libvirt domain when
// asLibvirt, mounts the image's file system and starts the workload in the
// background; it returns what kind of VM it started. The lab's teardown
// stops the guest either way.
func startVM(ctx context.Context, l *lab.Lab, v vmSpec, img string, asLibvirt bool) (string, error) {
	if !asLibvirt {
		vm, err := l.StartVM(ctx, lab.VMConfig{Name: v.name, Disks: []lab.DiskConfig{
			{ID: "vda", File: img, Format: v.format, Cache: v.cache, AIO: v.aio, Discard: "unmap"},
		}, FspairQMP: true})
		if err != nil {
			return "", err
		}
		dev, err := vm.GuestDevice(ctx, "vda")
		if err != nil {
			return "", err
		}
		script, err := workloadScript(v, "/dev/"+dev)
		if err != nil {
			return "", err
		}
		if _, err := vm.RunOK(ctx, script); err != nil {
			return "", fmt.Errorf("start workload in %s: %w", v.name, err)
		}
		return "plain QEMU", nil
	}
	dom, err := l.CreateDomain(ctx, v.name, []lab.DomainDisk{
		{Target: "vda", File: img, Format: v.format, Cache: v.cache, IO: v.aio, Discard: "unmap"},
	}, nil)
	if err != nil {
		return "", err
	}
	g, err := dom.Guest(ctx)
	if err != nil {
		return "", err
	}
	defer g.Close()
	// The domain's disks carry the serial fspair-<target>.
	dev := `"$(for d in /sys/block/vd*; do [ "$(cat "$d/serial")" = fspair-vda ] && echo "/dev/${d##*/}"; done)"`
	script, err := workloadScript(v, dev)
	if err != nil {
		return "", err
	}
	if _, err := g.RunOK(ctx, script); err != nil {
		return "", fmt.Errorf("start workload in %s: %w", v.name, err)
	}
	return "libvirt domain " + dom.UUID, nil
}

// workloadScript mounts the guest's disk dev (a shell word) on /mnt and
// starts v's fio there in the background: its command line, or its job
// written into the guest and run with the job's DIR and RUNTIME (a day).
func workloadScript(v vmSpec, dev string) (string, error) {
	mount := fmt.Sprintf("mount -t %s %s /mnt", v.guestFS, dev)
	if v.job == "" {
		return fmt.Sprintf("%s && (%s >/dev/null 2>&1 &)", mount, v.fio), nil
	}
	job, err := workload.Job(v.job)
	if err != nil {
		return "", fmt.Errorf("workload of %s: %w", v.name, err)
	}
	return fmt.Sprintf("%s && printf %%s %s | base64 -d >/tmp/demo.fio && (DIR=/mnt RUNTIME=86400 fio /tmp/demo.fio >/dev/null 2>&1 &)",
		mount, base64.StdEncoding.EncodeToString([]byte(job))), nil
}

// stack is the native stack the demo runs with scripts/stack.sh.
type stack struct {
	script, dir, exporter string
	// site, when set, is a site knowledge base to generate the rules with
	// (by rulesGen, into DIR/rules) instead of loading rules/; forScale,
	// when not 1, multiplies every alert's `for` in them; longEvery, when
	// set, is how often their long-window groups are evaluated; settle,
	// when set, how long a class must be held to be settled.
	site, rulesGen    string
	forScale          float64
	longEvery, settle string
	env               map[string]string // DIR/stack.env, once started
}

// reset empties the stack's directory of an earlier run, unless a stack
// still runs there (as the script's status, which checks its pid files
// against the processes, tells).
func (s *stack) reset() error {
	out, _ := exec.Command("bash", s.script, "status", "--dir", s.dir).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, " up ") || strings.Contains(line, " not ready ") {
			return fmt.Errorf("a stack runs in %s (another demo?); stop it with: %s stop --dir %s", s.dir, s.script, s.dir)
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("empty stack directory: %w", err)
	}
	return nil
}

func (s *stack) start() error {
	exporter, err := filepath.Abs(s.exporter)
	if err != nil {
		return err
	}
	cmd := exec.Command("bash", s.script, "start", "--dir", s.dir)
	// The plain QEMU VMs declare a QMP monitor for the exporter
	// (lab.VMConfig.FspairQMP): the exporter may read their guest side
	// over it. The demo's probe mode: see lab.ProbeMode (this host has no
	// trampolines).
	args := strings.TrimSpace(os.Getenv("FSPAIR_EXPORTER_ARGS") + " --discovery.proc.qmp")
	cmd.Env = append(os.Environ(), "FSPAIR_EXPORTER_BIN="+exporter, "FSPAIR_EXPORTER_ARGS="+args,
		"FSPAIR_STACK_PROBE_MODE="+lab.ProbeMode())
	if s.site != "" || s.forScale != 1 || s.longEvery != "" || s.settle != "" {
		rules, err := s.generateRules()
		if err != nil {
			return err
		}
		cmd.Env = append(cmd.Env, "FSPAIR_STACK_RULES="+rules)
	}
	// The script prints its own "stack: " lines, errors included.
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start the stack (%s start --dir %s): %w", s.script, s.dir, err)
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "stack.env"))
	if err != nil {
		return fmt.Errorf("read the stack's addresses: %w", err)
	}
	s.env = map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			s.env[k] = v
		}
	}
	if s.url("PROMETHEUS_URL") == "" {
		return fmt.Errorf("%s/stack.env names no PROMETHEUS_URL", s.dir)
	}
	return nil
}

// generateRules writes fspair's rules into DIR/rules and returns that
// directory: with the site's verdicts merged into the published ones
// (rules/gen -site; a site verdict replaces the published one for its
// workload and pair, with source="site", and its figures become
// fspair_kdb_site_measurement), the alerts' `for` scaled (-for-scale) and,
// when longEvery is set, the long-window groups evaluated that often
// (-long-interval) and, when settle is set, that settle time (-settle).
// Nothing else differs from rules/.
func (s *stack) generateRules() (string, error) {
	dir, err := filepath.Abs(filepath.Join(s.dir, "rules"))
	if err != nil {
		return "", err
	}
	args := []string{"-out", dir, "-for-scale", strconv.FormatFloat(s.forScale, 'g', -1, 64)}
	if s.site != "" {
		args = append(args, "-site", s.site)
	}
	if s.longEvery != "" {
		args = append(args, "-long-interval", s.longEvery)
	}
	if s.settle != "" {
		args = append(args, "-settle", s.settle)
	}
	out, err := exec.Command(s.rulesGen, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("generate the rules (%s %s): %w: %s", s.rulesGen, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	var what []string
	if s.site != "" {
		what = append(what, fmt.Sprintf("the site verdicts of %s", s.site))
	}
	if s.forScale != 1 {
		what = append(what, fmt.Sprintf("every alert's for x%g (the demo's; production keeps rules/ as committed)", s.forScale))
	}
	if s.longEvery != "" {
		what = append(what, fmt.Sprintf("the long-window groups evaluated every %s", s.longEvery))
	}
	if s.settle != "" {
		what = append(what, fmt.Sprintf("a class settled once held %s", s.settle))
	}
	printLines(wrap("demo: ", fmt.Sprintf("rules of rules/ with %s in %s", strings.Join(what, " and "), dir), lineWidth))
	return dir, nil
}

// url is a URL from the stack's stack.env, "" for a component not running.
func (s *stack) url(key string) string { return s.env[key] }

func (s *stack) stop() error {
	cmd := exec.Command("bash", s.script, "stop", "--dir", s.dir)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("stop the stack (%s stop --dir %s): %w", s.script, s.dir, err)
	}
	return nil
}

// follow prints the lines of the log file path that keep accepts, with a
// prefix, as they are written, until ctx ends.
func follow(ctx context.Context, path, prefix string, keep func(string) bool) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Printf("demo: follow %s: %v\n", path, err)
		return
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var partial string
	for {
		line, err := r.ReadString('\n')
		partial += line
		if err == nil {
			if keep(partial) {
				fmt.Print(prefix + partial)
			}
			partial = ""
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// rateColumns are the rates table's queries, by column (the last minute,
// from the exporter's counters, as a reader of the exporter would ask).
var rateColumns = []struct{ head, query, format string }{
	{"READ/s", `sum by (domain, target_device) (rate(fspair_disk_requests_total{op="read"}[1m]))`, "%.1f"},
	{"WRITE/s", `sum by (domain, target_device) (rate(fspair_disk_requests_total{op="write"}[1m]))`, "%.1f"},
	{"FLUSH/s", `sum by (domain, target_device) (rate(fspair_disk_requests_total{op="flush"}[1m]))`, "%.1f"},
	{"KiB/req", `sum by (domain, target_device) (rate(fspair_disk_bytes_total{op=~"read|write"}[1m])) / 1024 / sum by (domain, target_device) (rate(fspair_disk_requests_total{op=~"read|write"}[1m]))`, "%.1f"},
	{"RANDOM%", `100 * sum by (domain, target_device) (rate(fspair_disk_random_requests_total[1m])) / (sum by (domain, target_device) (rate(fspair_disk_random_requests_total[1m])) + sum by (domain, target_device) (rate(fspair_disk_sequential_requests_total[1m])))`, "%.0f"},
	{"SYNC_WR%", `100 * sum by (domain, target_device) (rate(fspair_disk_sync_writes_total[1m])) / sum by (domain, target_device) (rate(fspair_disk_requests_total{op="write"}[1m]))`, "%.0f"},
	{"P99_WRITE_ms", `1000 * histogram_quantile(0.99, sum by (domain, target_device, le) (rate(fspair_disk_request_duration_seconds_bucket{op="write"}[1m])))`, "%.2f"},
}

// summary prints, from Prometheus, fspair's conclusions per disk, the
// disks' request rates and the alerts pending or firing, and returns the
// disks.
func summary(ctx context.Context, promURL string) ([]diskState, error) {
	disks, alerts, err := conclusions(ctx, promURL, ".")
	if err != nil {
		return nil, err
	}
	rates := map[string]map[string]string{}
	var heads []string
	for _, c := range rateColumns {
		heads = append(heads, c.head)
		res, err := query(ctx, promURL, c.query)
		if err != nil {
			return nil, err
		}
		for _, s := range res {
			k := diskKey(s.Metric)
			if rates[k] == nil {
				rates[k] = map[string]string{}
			}
			rates[k][c.head] = number(s.value(), c.format)
		}
	}
	fmt.Printf("demo: %s what fspair concludes per VM disk (Prometheus' rules: class over 5m, knowledge base verdict)\n",
		time.Now().Format("15:04:05"))
	printLines(conclusionsTable(disks, lineWidth))
	fmt.Println("  the guest's p99 over 5m by operation, and the layer holding most of its time (vmm, host_fs, device):")
	printLines(guestLatencyTable(disks, lineWidth))
	fmt.Println("  request rates over the last minute:")
	printLines(ratesTable(disks, heads, rates, lineWidth))
	printLines(alertLines(alerts, lineWidth))
	return disks, nil
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

func query(ctx context.Context, promURL, q string) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, promURL+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query prometheus: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []sample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode prometheus answer: %w", err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", out.Error)
	}
	return out.Data.Result, nil
}

// prefixed writes each line with a prefix to stdout.
func prefixed(prefix string) io.Writer { return &prefixWriter{prefix: prefix} }

type prefixWriter struct {
	prefix string
	buf    []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		fmt.Printf("%s%s\n", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
