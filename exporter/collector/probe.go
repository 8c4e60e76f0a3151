package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fspair/fspair/exporter/probe"
)

// dropReasons are the label values of enum drop in bpf/call.h, in order.
var dropReasons = []string{"inflight_full", "bad_slot", "io_uring_fixed_file", "iov_too_long", "request_untimed", "completion_unseen"}

var (
	probeMode = prometheus.NewDesc("fspair_probe_mode_info",
		"The attach mode the BPF programs run in (fentry, tracepoint or syscall) and the one asked for (--probe.mode). Always 1.",
		[]string{"mode", "requested"}, nil)
	probeAttached = prometheus.NewDesc("fspair_probe_attached",
		"Whether a BPF program of the running mode is loaded and attached (1) or not (0), with the kernel hook it attaches to; see the exporter log for why.",
		[]string{"program", "hook"}, nil)
	probeStats = prometheus.NewDesc("fspair_probe_stats_enabled",
		"Whether the per-program run-time statistics are on (--probe.stats; kernel.bpf_stats_enabled while the exporter runs). "+
			"fspair_probe_runs_total and fspair_probe_run_seconds_total are exported only when they are.", nil, nil)
	probeRuns = prometheus.NewDesc("fspair_probe_runs_total",
		"Times a BPF program ran (kernel bpf_stats, only with --probe.stats).", []string{"program"}, nil)
	probeRunSeconds = prometheus.NewDesc("fspair_probe_run_seconds_total",
		"Time a BPF program spent running (kernel bpf_stats, only with --probe.stats).", []string{"program"}, nil)
	probeDropped = prometheus.NewDesc("fspair_probe_events_dropped_total",
		"Requests the BPF programs could not follow, by reason.", []string{"reason"}, nil)
	probeMisses = prometheus.NewDesc("fspair_probe_recursion_misses_total",
		"Times the kernel skipped a BPF program because it was already running on the CPU (it interrupted itself): "+
			"each is an event the program did not see.", []string{"program"}, nil)
)

// ProbeSource is what the probe collector reads.
type ProbeSource interface {
	Programs() []*probe.Program
	Dropped() ([]uint64, error)
	Mode() (running, requested probe.Mode)
	StatsEnabled() bool
}

// ProbeCollector reports the BPF programs' mode, state and cost.
type ProbeCollector struct{ src ProbeSource }

// NewProbeCollector returns the probe collector.
func NewProbeCollector(src ProbeSource) *ProbeCollector { return &ProbeCollector{src: src} }

// Update implements Collector.
func (c *ProbeCollector) Update(ch chan<- prometheus.Metric) error {
	running, requested := c.src.Mode()
	ch <- prometheus.MustNewConstMetric(probeMode, prometheus.GaugeValue, 1, string(running), string(requested))
	stats := c.src.StatsEnabled()
	on := 0.0
	if stats {
		on = 1
	}
	ch <- prometheus.MustNewConstMetric(probeStats, prometheus.GaugeValue, on)
	for _, p := range c.src.Programs() {
		up := 0.0
		if p.Attached {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(probeAttached, prometheus.GaugeValue, up, p.Name, p.Hook)
		if !p.Attached {
			continue
		}
		s, err := p.Stats()
		if err != nil {
			return err
		}
		// The kernel counts recursion misses whether or not bpf_stats are on.
		ch <- prometheus.MustNewConstMetric(probeMisses, prometheus.CounterValue, float64(s.RecursionMisses), p.Name)
		if !stats {
			continue
		}
		ch <- prometheus.MustNewConstMetric(probeRuns, prometheus.CounterValue, float64(s.Runs), p.Name)
		ch <- prometheus.MustNewConstMetric(probeRunSeconds, prometheus.CounterValue, s.Runtime.Seconds(), p.Name)
	}
	dropped, err := c.src.Dropped()
	if err != nil {
		return err
	}
	for i, reason := range dropReasons {
		if i < len(dropped) {
			ch <- prometheus.MustNewConstMetric(probeDropped, prometheus.CounterValue, float64(dropped[i]), reason)
		}
	}
	return nil
}
