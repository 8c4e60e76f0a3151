// Command fspair_exporter follows the I/O each VM issues on its disk image
// files with tracepoint-based BPF programs and exports it per VM disk, with
// the guest and host file systems of each disk, for Prometheus.
//
// main only wires flags, logging, the BPF probes, discovery and HTTP; the
// work is in the packages beside it.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/coreos/go-systemd/v22/activation"
	"github.com/mdlayher/vsock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"golang.org/x/sys/unix"

	"github.com/fspair/fspair/exporter/collector"
	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/privilege"
	"github.com/fspair/fspair/exporter/probe"
)

const name = "fspair_exporter"

func main() { os.Exit(run()) }

func run() int {
	app := kingpin.New(name, "Per-VM-disk I/O and file-system-pair metrics for KVM hosts, from tracepoint BPF probes.")
	var (
		metricsPath  = app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").String()
		maxRequests  = app.Flag("web.max-requests", "Maximum number of scrapes served at once (0 = no limit); more wait for a slot up to their scrape timeout (10 s at most), then get 503.").Default("40").Int()
		gzipLevel    = app.Flag("web.gzip-level", "Compression level of the response when the scraper accepts gzip: 1 (fastest) to 9, or 0 to never compress (at a thousand disks compressing takes longer than writing the metrics; 0 suits a Prometheus on the same host).").Default("1").Int()
		reuse        = app.Flag("web.reuse", "How long a reading of the counters keeps serving the scrapes that arrive after it (0 = never): a burst of scrapers is then served one reading and one compressed body per this interval; counters served are at most this much plus one reading older than the scrape. 1s at most.").Default("100ms").Duration()
		checkOnly    = app.Flag("check", "Discover disks, load and attach the probes, print what was found, and exit 0 if all is well, 1 if not.").Bool()
		interval     = app.Flag("discovery.interval", "How often to look for VMs and disks.").Default("5s").Duration()
		useLibvirt   = app.Flag("discovery.libvirt", "Discover libvirt domains.").Default("true").Bool()
		libvirtSock  = app.Flag("discovery.libvirt.socket", "libvirt's read-only socket.").Default("/var/run/libvirt/libvirt-sock-ro").String()
		libvirtRW    = app.Flag("discovery.libvirt.monitor-socket", "libvirt's read-write socket, for --guest.libvirt-monitor-histograms only.").Default("/var/run/libvirt/libvirt-sock").String()
		libvirtTO    = app.Flag("discovery.libvirt.timeout", "Deadline for each libvirt call.").Default("3s").Duration()
		useProc      = app.Flag("discovery.proc", "Discover plain QEMU processes in /proc.").Default("true").Bool()
		procQMP      = app.Flag("discovery.proc.qmp", "Read the guest side of plain QEMU VMs over the QMP monitor sockets their command lines declare (-qmp unix:..., -chardev socket + -mon mode=control); off, only the sockets named in --discovery.config.file (qmp_monitors) are used. libvirt's own monitor is never used.").Default("false").Bool()
		procRoot     = app.Flag("discovery.proc.root", "The proc file system to scan.").Default("/proc").String()
		configFile   = app.Flag("discovery.config.file", "Static disk list (YAML) for other VMMs and tests.").Default("").String()
		maxDisks     = app.Flag("bpf.max-disks", "The most VM disks followed at once (sizes the BPF maps).").Default("1024").Int()
		denyPrograms = app.Flag("probe.deny", "Do not load this BPF program (repeatable); for degraded operation and tests.").Strings()
		probeMode    = app.Flag("probe.mode", "How the BPF programs attach: fentry (trampolines on the host file systems' functions: the production path, kernels 5.5+ on x86-64), "+
			"tracepoint (file-system, iomap and io_uring tracepoints only: for kernels without trampolines; cannot see buffered I/O on ext4 and Btrfs), "+
			"syscall (system call tracepoints: sees everything, but slows every system call of every process on the host), "+
			"or auto (fentry where the kernel has trampolines, else tracepoint).").Default("auto").Enum("auto", "fentry", "tracepoint", "syscall")
		probeStats = app.Flag("probe.stats", "Turn on the kernel's per-program BPF run-time statistics (kernel.bpf_stats_enabled) while the exporter runs, "+
			"for fspair_probe_run_seconds_total; they add two clock reads to every run of every BPF program on the host, so they are off by default.").Bool()
		histograms = app.Flag("histograms", "What histograms a scraper gets that asks for the protobuf format (Accept: application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited: "+
			"Prometheus 3 with scrape_native_histograms: true, 2.40+ with --enable-feature=native-histograms): native (one series per native histogram, no _bucket series: 78 series for a disk with every histogram observed instead of 521), "+
			"classic (_bucket{le} series), or both (classic buckets and the native histogram in the same metric, as client_golang writes them; a Prometheus keeps the classic ones only with always_scrape_classic_histograms). "+
			"Text scrapes always get classic histograms, as the text format has none other. native is the default: only a scraper set up for native histograms asks for protobuf, "+
			"and the rules read histograms either way; set classic where a Prometheus lists PrometheusProto in scrape_protocols without ingesting native histograms, or where dashboards still read _bucket series.").
			Default("native").String()
		imageRefresh = app.Flag("image.refresh-interval", "How often a tracked image's guest file system and qcow2 layout are read again.").Default("1m").Duration()
		guestStats   = app.Flag("guest.stats", "Read each disk's guest side (QEMU's query-blockstats, through libvirt or a QMP monitor) in the background.").Default("true").Bool()
		guestEvery   = app.Flag("guest.interval", "How often the guest side is read.").Default("5s").Duration()
		guestHist    = app.Flag("guest.histograms", "Set QEMU's guest latency histograms (block-latency-histogram-set, on fspair's log2 bounds) on the disks of plain QEMU VMs read over QMP, and export them as fspair_disk_guest_request_duration_seconds. Off, only histograms already there on fspair's bounds are read. libvirt domains are not touched this way: their histograms come from libvirt 12.1's statistics when the domain's XML asks for them, or with --guest.libvirt-monitor-histograms through libvirt (README, \"Guest side\").").Default("true").Bool()
		guestLvHist  = app.Flag("guest.libvirt-monitor-histograms", "Set and read the guest latency histograms of libvirt domains through libvirt's QEMU monitor pass-through (virDomainQemuMonitorCommand, on --discovery.libvirt.monitor-socket) where libvirt's statistics do not give them. libvirt marks each domain so used as tainted (custom-monitor), hence off by default.").Default("false").Bool()
		guestTO      = app.Flag("guest.timeout", "Deadline for each QMP session and each libvirt statistics call; a VMM that does not answer in time keeps its last values and counts a failure.").Default("2s").Duration()
		memLimit     = app.Flag("memory-limit", "The Go runtime's soft memory limit: the garbage collector runs more often as the heap nears it, trading CPU for memory. "+
			"auto (the default): GOMEMLIMIT if set, else a limit that follows the live heap (1.25x the highest live heap of the last 10 minutes plus 2 MiB, at least 64 MiB), "+
			"at most 90% of the memory limit of the exporter's cgroup (systemd's MemoryMax=) where it has one; off: none; "+
			"or a size (B, KiB, MiB, GiB; at least 32MiB). Without a limit a scrape's garbage lets the heap reach about twice what stays live "+
			"(at 10,000 disks 150-200 MiB resident). A fixed size below the live heap (at 10,000 disks about 70 MB, 83 MB with guest values) cannot hold and costs CPU instead: "+
			"README, Memory; BENCHMARKS.md).").Default("auto").String()
		dropPriv  = app.Flag("privilege.drop", "Once the probes are attached, drop every capability but those reading images and /proc needs (--no-privilege.drop keeps them all, for debugging).").Default("true").Bool()
		webConfig = kingpinflag.AddFlags(app, ":9477")
		logConfig = &promslog.Config{}
	)
	flag.AddFlags(app, logConfig)
	app.Version(version.Print(name))
	app.HelpFlag.Short('h')
	if _, err := app.Parse(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v (see --help)\n", name, err)
		return 2
	}
	logger := promslog.New(logConfig)
	if *maxDisks < 1 || *maxDisks > 65536 {
		fmt.Fprintf(os.Stderr, "%s: --bpf.max-disks must be between 1 and 65536, got %d\n", name, *maxDisks)
		return 2
	}
	if *gzipLevel < 0 || *gzipLevel > 9 {
		fmt.Fprintf(os.Stderr, "%s: --web.gzip-level must be between 0 and 9, got %d\n", name, *gzipLevel)
		return 2
	}
	if *reuse < 0 || *reuse > time.Second {
		fmt.Fprintf(os.Stderr, "%s: --web.reuse must be between 0 and 1s, got %s\n", name, *reuse)
		return 2
	}
	if *guestStats && (*guestEvery < 100*time.Millisecond || *guestTO <= 0) {
		fmt.Fprintf(os.Stderr, "%s: --guest.interval must be at least 100ms and --guest.timeout above 0, got %s and %s\n", name, *guestEvery, *guestTO)
		return 2
	}
	if *guestLvHist && (!*useLibvirt || !*guestStats) {
		fmt.Fprintf(os.Stderr, "%s: --guest.libvirt-monitor-histograms needs --discovery.libvirt and --guest.stats\n", name)
		return 2
	}
	hist, err := collector.ParseHistograms(*histograms)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: --%v\n", name, err)
		return 2
	}
	if *interval < 100*time.Millisecond {
		fmt.Fprintf(os.Stderr, "%s: --discovery.interval must be at least 100ms, got %s\n", name, *interval)
		return 2
	}

	mem, err := resolveMemoryLimit(*memLimit, os.Getenv("GOMEMLIMIT"), "/")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	switch {
	case mem.adaptive:
		newMemoryGovernor(mem.bytes, debug.SetMemoryLimit, time.Now).start()
	case !mem.keep:
		debug.SetMemoryLimit(mem.bytes)
	}

	opts := discovery.Options{
		Libvirt:        *useLibvirt,
		LibvirtSocket:  *libvirtSock,
		LibvirtTimeout: *libvirtTO,
		Proc:           *useProc,
		ProcRoot:       *procRoot,
		ProcQMP:        *procQMP,
		ConfigFile:     *configFile,
		Logger:         logger,
	}
	if *guestLvHist {
		opts.LibvirtMonitorSocket = *libvirtRW
	}
	disc, err := discovery.New(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, oneLine(err))
		return 2
	}
	defer disc.Close()
	// Validate the web config before touching the kernel, so a bad file
	// leaves nothing half-started.
	if *webConfig.WebConfigFile != "" {
		if err := web.Validate(*webConfig.WebConfigFile); err != nil {
			fmt.Fprintf(os.Stderr, "%s: web config %s: %s\n", name, *webConfig.WebConfigFile, oneLine(err))
			return 2
		}
	}

	// Capabilities are checked before touching the kernel too: what is
	// missing is named, rather than found out halfway.
	keep := privilege.Runtime(*useProc)
	if *dropPriv {
		if err := privilege.Check(keep); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v (it starts with %s and keeps %s; see deploy/systemd/fspair_exporter.service)\n",
				name, err, privilege.Startup(keep), keep)
			return 1
		}
	}
	// Bind before loading anything, so that an address in use leaves
	// nothing half-started.
	var listeners []net.Listener
	if !*checkOnly {
		if listeners, err = listen(webConfig); err != nil {
			hint := ""
			switch {
			case errors.Is(err, syscall.EADDRINUSE):
				hint = " (choose another --web.listen-address, or stop what listens there)"
			case errors.Is(err, syscall.EACCES):
				hint = " (a port below 1024 needs CAP_NET_BIND_SERVICE)"
			}
			fmt.Fprintf(os.Stderr, "%s: %v%s\n", name, err, hint)
			return 1
		}
		defer func() {
			for _, l := range listeners {
				l.Close()
			}
		}()
	}

	if err := ensureTracefs(); err != nil {
		logger.Warn("tracefs", "err", err)
	}
	probes, err := probe.Load(probe.Options{MaxDisks: *maxDisks, Deny: *denyPrograms, Mode: probe.Mode(*probeMode),
		Stats: *probeStats, Logger: logger})
	if errors.Is(err, probe.ErrNoTrampolines) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v (fspair_exporter needs root or %s, and a kernel with BTF)\n", name, err, privilege.Attach)
		return 1
	}
	running, _ := probes.Mode()
	defer probes.Close()
	if *dropPriv {
		kept, err := dropPrivileges(probes, keep, logger)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: drop capabilities: %v (--no-privilege.drop keeps them)\n", name, err)
			return 1
		}
		logger.Info("capabilities dropped", "kept", kept)
	}
	inv := inventory.New(probes, disc, inventory.Options{ImageRefresh: *imageRefresh, Logger: logger})
	defer inv.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *checkOnly {
		return check(ctx, inv, probes)
	}

	subsystems := map[string]collector.Collector{
		"probe":     collector.NewProbeCollector(probes),
		"discovery": collector.NewDiscoveryCollector(inv, disc.Sources()),
	}
	// The guest side is read in the background; scrapes read what it
	// last found.
	var guestSrc collector.GuestSource
	var poller *guest.Poller
	var hold func() func()
	if *guestStats {
		// The poll gives way to scrapes (guest.Gate).
		gate := &guest.Gate{}
		hold = gate.Hold
		gopts := guest.Options{Interval: *guestEvery, Timeout: *guestTO, ProcRoot: *procRoot, Logger: logger, SetHistograms: *guestHist, Gate: gate}
		if *useLibvirt {
			gopts.Libvirt = disc.LibvirtBlockStats
			gopts.LibvirtVersion = disc.LibvirtVersion
			if *guestLvHist {
				gopts.LibvirtMonitor = disc.LibvirtMonitorCommand
			}
		}
		poller = guest.New(inv, gopts)
		guestSrc = poller
		subsystems["guest"] = collector.NewGuestPollCollector(poller)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		versioncollector.NewCollector("fspair_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		// The disk and host metrics are not in the registry: the
		// handler writes them straight from the kernel counters.
		collector.NewExporter(subsystems, logger),
	)
	metrics, err := collector.NewHandler(reg, inv, probes, probes, collector.HandlerOpts{
		Logger:              logger,
		MaxRequestsInFlight: *maxRequests,
		Registry:            reg,
		GzipLevel:           *gzipLevel,
		Reuse:               *reuse,
		Guest:               guestSrc,
		Histograms:          hist,
		Hold:                hold,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	// The first round runs before serving so that the first scrape sees the disks.
	if err := inv.Refresh(ctx); err != nil {
		logger.Warn("first discovery", "err", err)
	}
	go inv.Run(ctx, *interval)
	if poller != nil {
		go poller.Run(ctx)
	}

	mux := http.NewServeMux()
	mux.Handle(*metricsPath, metrics)
	if *metricsPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "fspair exporter",
			Description: "Per-VM-disk I/O and guest/host file-system pairs",
			Version:     version.Info(),
			Links:       []web.LandingLinks{{Address: *metricsPath, Text: "Metrics"}},
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: landing page: %v\n", name, err)
			return 1
		}
		mux.Handle("/", landing)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- web.ServeMultiple(listeners, srv, webConfig, logger) }()
	logger.Info("started", "version", version.Info(), "probe_mode", running, "programs_attached", attached(probes), "disks", len(inv.Disks()),
		"memory_limit_bytes", debug.SetMemoryLimit(-1), "memory_limit_from", mem.from)
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "%s: serve: %v\n", name, err)
			return 1
		}
	case <-ctx.Done():
		logger.Info("stopping")
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}
	return 0
}

func attached(p *probe.Probes) int {
	n := 0
	for _, pr := range p.Programs() {
		if pr.Attached {
			n++
		}
	}
	return n
}

// dropPrivileges keeps only keep, plus CAP_BPF where the kernel still
// wants it for map access through descriptors already held: before Linux
// 5.19 every bpf() command needs it when kernel.unprivileged_bpf_disabled is
// set. A map read with only keep effective tells.
func dropPrivileges(probes *probe.Probes, keep privilege.Set, logger *slog.Logger) (privilege.Set, error) {
	err := privilege.WithEffective(keep, func() error {
		_, err := probes.Dropped()
		return err
	})
	switch {
	case errors.Is(err, os.ErrPermission):
		logger.Warn("this kernel refuses BPF map access without CAP_BPF (before Linux 5.19, with kernel.unprivileged_bpf_disabled set): keeping CAP_BPF")
		keep |= privilege.Of(unix.CAP_BPF)
	case err != nil:
		return 0, err
	}
	return keep, privilege.Drop(keep)
}

// listen binds every --web.listen-address (or takes systemd's sockets), the
// way web.ListenAndServe would, but before anything else starts.
func listen(flags *web.FlagConfig) ([]net.Listener, error) {
	if *flags.WebSystemdSocket {
		ls, err := activation.Listeners()
		if err != nil {
			return nil, fmt.Errorf("systemd socket activation: %w", err)
		}
		if len(ls) == 0 {
			return nil, errors.New("systemd socket activation: no sockets passed")
		}
		return ls, nil
	}
	var ls []net.Listener
	for _, addr := range *flags.WebListenAddresses {
		var (
			l   net.Listener
			err error
		)
		if strings.HasPrefix(addr, "vsock://") {
			var port uint64
			u, perr := url.Parse(addr)
			if perr == nil {
				port, perr = strconv.ParseUint(u.Port(), 10, 32)
			}
			if perr != nil {
				err = fmt.Errorf("listen on %s: want vsock://:PORT", addr)
			} else {
				l, err = vsock.Listen(uint32(port), nil)
			}
		} else {
			l, err = net.Listen("tcp", addr)
		}
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, err
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return nil, errors.New("no --web.listen-address")
	}
	return ls, nil
}

// oneLine folds a multi-line error (YAML errors list one problem a line)
// into the single line a failed start prints.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// ensureTracefs mounts tracefs where the kernel documents it when it is
// missing: tracepoint programs are attached by event ids read from it.
func ensureTracefs() error {
	const dir = "/sys/kernel/tracing"
	if _, err := os.Stat(dir + "/events"); err == nil {
		return nil
	}
	if err := syscall.Mount("tracefs", dir, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("mount tracefs on %s: %w", dir, err)
	}
	return nil
}
