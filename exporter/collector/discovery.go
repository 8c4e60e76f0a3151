package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fspair/fspair/exporter/inventory"
)

var (
	discoveryUp = prometheus.NewDesc("fspair_discovery_source_up",
		"Whether the last discovery from a source succeeded (1) or failed (0).", []string{"source"}, nil)
	discoveryErrors = prometheus.NewDesc("fspair_discovery_errors_total",
		"Discovery rounds in which a source failed.", []string{"source"}, nil)
	discoveryDisks = prometheus.NewDesc("fspair_discovery_disks",
		"Disks the last discovery found, by source (before deduplication).", []string{"source"}, nil)
	discoveryRefreshes = prometheus.NewDesc("fspair_discovery_refreshes_total",
		"Discovery rounds run.", nil, nil)
	discoveryDuration = prometheus.NewDesc("fspair_discovery_duration_seconds",
		"Time the last discovery round took, including image identification.", nil, nil)
	discoveryLast = prometheus.NewDesc("fspair_discovery_last_refresh_timestamp_seconds",
		"When the last discovery round finished.", nil, nil)
	imageErrors = prometheus.NewDesc("fspair_image_errors_total",
		"Failures to stat, open, identify or track a discovered image file.", nil, nil)
	imageRefreshFailures = prometheus.NewDesc("fspair_image_refresh_failures_total",
		"Discovery rounds in which refreshing a tracked image failed, by reason: qcow2_metadata (its qcow2 metadata layout "+
			"could not be read; its metadata clusters are not told apart from guest data until it can), "+
			"probe_update (the probes did not take the new layout).", []string{"reason"}, nil)
	disksTracked = prometheus.NewDesc("fspair_disks_tracked",
		"VM disks currently followed.", nil, nil)
	disksMax = prometheus.NewDesc("fspair_disks_max",
		"The most VM disks the probes can follow at once (--bpf.max-disks).", nil, nil)
	disksOverLimit = prometheus.NewDesc("fspair_disks_over_limit",
		"Discovered disks not followed because every slot was in use.", nil, nil)
	limitReached = prometheus.NewDesc("fspair_disks_limit_reached_total",
		"Discovery rounds that found more disks than slots.", nil, nil)
	followAll = prometheus.NewDesc("fspair_probe_follow_all_processes",
		"1 when every process's I/O is looked at because a disk has no known VMM process (static config without pid).", nil, nil)
)

// DiscoveryCollector reports on discovery and the tracked set.
type DiscoveryCollector struct {
	inv     *inventory.Inventory
	sources []string
}

// NewDiscoveryCollector returns the discovery collector for the enabled sources.
func NewDiscoveryCollector(inv *inventory.Inventory, sources []string) *DiscoveryCollector {
	return &DiscoveryCollector{inv: inv, sources: sources}
}

// Update implements Collector.
func (c *DiscoveryCollector) Update(ch chan<- prometheus.Metric) error {
	s := c.inv.Stats()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for _, src := range c.sources {
		up := 1.0
		if s.SourceErrors[src] != nil || s.Refreshes == 0 {
			up = 0
		}
		gauge(discoveryUp, up, src)
		ch <- prometheus.MustNewConstMetric(discoveryErrors, prometheus.CounterValue, float64(s.ErrorsTotal[src]), src)
		gauge(discoveryDisks, float64(s.SourceDisks[src]), src)
	}
	ch <- prometheus.MustNewConstMetric(discoveryRefreshes, prometheus.CounterValue, float64(s.Refreshes))
	gauge(discoveryDuration, s.LastDuration.Seconds())
	if !s.LastRefresh.IsZero() {
		gauge(discoveryLast, float64(s.LastRefresh.UnixNano())/1e9)
	}
	ch <- prometheus.MustNewConstMetric(imageErrors, prometheus.CounterValue, float64(s.ImageErrors))
	for reason, n := range s.RefreshFailures {
		ch <- prometheus.MustNewConstMetric(imageRefreshFailures, prometheus.CounterValue, float64(n), reason)
	}
	gauge(disksTracked, float64(s.TrackedDisks))
	gauge(disksMax, float64(s.MaxDisks))
	gauge(disksOverLimit, float64(s.Untrackable))
	ch <- prometheus.MustNewConstMetric(limitReached, prometheus.CounterValue, float64(s.LimitReached))
	fa := 0.0
	if s.FollowAllTasks {
		fa = 1
	}
	gauge(followAll, fa)
	return nil
}
