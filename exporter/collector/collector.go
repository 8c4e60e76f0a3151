// Package collector turns what fspair knows into Prometheus metrics. Each
// subsystem has its own collector in its own file; the Exporter runs them
// all on every scrape and reports on each (success, duration), as
// node_exporter does. Collectors only read state that background loops keep
// current: a scrape never waits on libvirt, on image files or on the kernel
// beyond map reads.
package collector

import (
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "fspair"

// maxLabelBytes bounds a label value taken from the host (mount points and
// device names may be any bytes but NUL and '/' separators, of any length).
const maxLabelBytes = 255

// hostLabel makes a string from the host's mount table a valid, bounded
// label value: invalid UTF-8 (legal in a Linux path, fatal to the metric)
// becomes U+FFFD and the value is cut at maxLabelBytes on a rune boundary.
func hostLabel(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxLabelBytes {
		return s
	}
	cut := maxLabelBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Collector is one subsystem's metrics.
type Collector interface {
	// Update sends the subsystem's metrics; an error marks the scrape of
	// that collector failed (fspair_scrape_collector_success 0).
	Update(ch chan<- prometheus.Metric) error
}

var (
	scrapeDuration = prometheus.NewDesc(
		prometheus.BuildFQName(namespace, "scrape", "collector_duration_seconds"),
		"Time a collector took to gather its metrics in this scrape.",
		[]string{"collector"}, nil)
	scrapeSuccess = prometheus.NewDesc(
		prometheus.BuildFQName(namespace, "scrape", "collector_success"),
		"Whether a collector succeeded in this scrape (1) or failed (0).",
		[]string{"collector"}, nil)
)

// Exporter runs the named collectors concurrently on each scrape.
type Exporter struct {
	collectors map[string]Collector
	logger     *slog.Logger
}

// NewExporter returns a prometheus.Collector over the given collectors.
func NewExporter(collectors map[string]Collector, logger *slog.Logger) *Exporter {
	return &Exporter{collectors: collectors, logger: logger}
}

// Describe sends no descriptors: the exporter is an unchecked collector,
// as its label sets follow the disks discovered.
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	var wg sync.WaitGroup
	for name, c := range e.collectors {
		wg.Add(1)
		go func(name string, c Collector) {
			defer wg.Done()
			start := time.Now()
			err := c.Update(ch)
			ok := 1.0
			if err != nil {
				ok = 0
				e.logger.Error("collector failed", "collector", name, "err", err)
			}
			ch <- prometheus.MustNewConstMetric(scrapeDuration, prometheus.GaugeValue, time.Since(start).Seconds(), name)
			ch <- prometheus.MustNewConstMetric(scrapeSuccess, prometheus.GaugeValue, ok, name)
		}(name, c)
	}
	wg.Wait()
}
