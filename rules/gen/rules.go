package main

import (
	"fmt"
	"os"
	"strings"
)

// Selectors and label sets, written once. Every raw series the rules read
// comes from the exporter's scrape job; every per-disk result keeps the disk's
// identity (the libvirt exporter's labels, plus instance, the KVM host, since
// domain names and image paths repeat across hosts).
const (
	jobSelector = `job="fspair"`
	diskLabels  = "instance, domain, uuid, target_device, source_file"
	// A host block device is known by its host; host_fs rides along.
	deviceLabels = "instance, host_device"
)

// window is a rate window such as 5m.
type window struct {
	name string // as written in rule names: 5m, 1h
	secs int64
}

// Params are everything a generation depends on.
type Params struct {
	Short, Long   window
	LongEvery     string // how often the long-window groups are evaluated
	WorkloadEvery string // how often fspair.workload is evaluated; empty: the global evaluation interval
	Settle        int64  // seconds a class must be held to be settled (-settle; classes.yaml settle)
	ForScale      float64
	T             *Thresholds
	KB            *KB
}

// x expands ${w} (the window), ${disk}, ${dev} and ${job} in a PromQL
// template. Other $ words ($1 of label_replace, $labels and $value of alert
// templates) pass through.
func x(w window, s string) string {
	return os.Expand(s, func(k string) string {
		switch k {
		case "w":
			return w.name
		case "disk":
			return diskLabels
		case "dev":
			return deviceLabels
		case "job":
			return jobSelector
		}
		return "$" + k
	})
}

func rec(w window, name, expr, comment string, labels ...[2]string) Rule {
	return Rule{Record: x(w, name), Expr: x(w, expr), Comment: comment, Labels: labels}
}

// baseRates are the per-disk and per-device rates every other rule builds on:
// counters of the exporter summed to one series per disk (per device) and
// operation. Over the short window they are rate(); over the long window the
// mean of the short-window rates (avg_over_time), which equals the long-window
// rate up to the edges of the window but reads one recorded sample per
// evaluation instead of every raw sample: at 2,000 disks this is what keeps the
// long-window group cheap.
type baseRate struct {
	name, metric, selector, by, comment string
	labels                              [][2]string
}

var baseRates = []baseRate{
	{name: "domain_disk:fspair_disk_requests", metric: "fspair_disk_requests_total", selector: `op=~"read|write|flush"`, by: "${disk}, op",
		comment: "Requests completed per second on the image file, by operation."},
	{name: "domain_disk:fspair_disk_bytes", metric: "fspair_disk_bytes_total", selector: `op=~"read|write"`, by: "${disk}, op",
		comment: "Bytes read and written per second on the image file."},
	{name: "domain_disk:fspair_disk_pattern_requests", metric: "fspair_disk_random_requests_total", by: "${disk}, op",
		labels:  [][2]string{{"pattern", "random"}},
		comment: "Random reads and writes per second (pattern=random): not continuing one of the last 16 requests."},
	{name: "domain_disk:fspair_disk_pattern_requests", metric: "fspair_disk_sequential_requests_total", by: "${disk}, op",
		labels:  [][2]string{{"pattern", "sequential"}},
		comment: "Sequential reads and writes per second (pattern=sequential)."},
	{name: "domain_disk:fspair_disk_sync_writes", metric: "fspair_disk_sync_writes_total", by: "${disk}",
		comment: "Writes per second that had to be durable: O_DSYNC, or covered by a flush of at most 4 writes."},
	{name: "domain_disk:fspair_disk_stage_seconds_sum", metric: "fspair_disk_stage_seconds_sum", selector: `stage=~"file|device"`, by: "${disk}, stage, op",
		comment: "Latency seconds per second by stage: file (the image-file request) and device (host device service)."},
	{name: "domain_disk:fspair_disk_stage_seconds_count", metric: "fspair_disk_stage_seconds_count", selector: `stage=~"file|device"`, by: "${disk}, stage, op",
		comment: "Requests per second by stage, the denominators of the mean stage latencies."},
	{name: "domain_disk:fspair_disk_request_duration_seconds_sum", metric: "fspair_disk_request_duration_seconds_sum", selector: `op="flush"`, by: "${disk}, op",
		comment: "Flush latency seconds per second on the image file."},
	{name: "domain_disk:fspair_disk_request_duration_seconds_count", metric: "fspair_disk_request_duration_seconds_count", selector: `op="flush"`, by: "${disk}, op",
		comment: "Flushes timed per second on the image file."},
	{name: "domain_disk:fspair_disk_device_bytes", metric: "fspair_disk_device_bytes_total", by: "${disk}, op",
		comment: "Bytes per second the host block device moved for this disk's image data."},
	{name: "domain_disk:fspair_disk_flush_device_write_bytes", metric: "fspair_disk_flush_device_write_bytes_total", by: "${disk}",
		comment: "Host device write bytes per second caused by the disk's flushes, data and journal together " +
			"(all sources and kinds). An exporter without the counter records nothing here and nothing else breaks."},
	{name: "domain_disk:fspair_disk_flush_device_cache_flushes", metric: "fspair_disk_flush_device_cache_flushes_total", by: "${disk}",
		comment: "Host device cache flushes per second caused by the disk's flushes."},
	{name: "host_device:fspair_host_device_bytes", metric: "fspair_host_device_bytes_total", selector: `op="write"`, by: "instance, host_device, host_fs, kind, op",
		comment: "Bytes per second the host block device wrote, by kind: data (tracked images), metadata (journal and " +
			"file-system metadata), other."},
}

func baseRules(short, w window, long bool) []Rule {
	var out []Rule
	for _, b := range baseRates {
		name := b.name + ":rate${w}"
		var expr string
		if !long {
			sel := "${job}"
			if b.selector != "" {
				sel += ", " + b.selector
			}
			expr = fmt.Sprintf("sum by (%s) (%s)", b.by, counterRate(b.metric, sel))
		} else {
			// The static labels select this rule's share of a shared name.
			sel := ""
			for _, l := range b.labels {
				sel = fmt.Sprintf(`{%s="%s"}`, l[0], l[1])
			}
			expr = fmt.Sprintf("avg_over_time(%s:rate%s%s[${w}])", b.name, short.name, sel)
		}
		c := b.comment
		if long {
			c = "Long window: the mean of the short-window rate. " + c
		}
		out = append(out, rec(w, name, expr, c, b.labels...))
	}
	return out
}

// counterRate is the per-second rate of an exporter counter over ${w}. A
// histogram's _sum or _count is read in both exposition modes: as the
// classic series (text scrapes, --histograms=classic, or a Prometheus that
// keeps classic histograms) or, when the Prometheus ingested the histogram
// as a native one, with histogram_sum or histogram_count. The two sides
// carry the same labels, so "or" never doubles a disk, and the side with
// no series costs one index lookup.
func counterRate(metric, sel string) string {
	for _, part := range []string{"sum", "count"} {
		if base, ok := strings.CutSuffix(metric, "_"+part); ok && histogramFamilies[base] {
			return fmt.Sprintf("rate(%s{%s}[${w}]) or histogram_%s(rate(%s{%s}[${w}]))", metric, sel, part, base, sel)
		}
	}
	return fmt.Sprintf("rate(%s{%s}[${w}])", metric, sel)
}

// histogramQuantile is the q-quantile of an exporter histogram per disk and
// operation over ${w}, read in both exposition modes as counterRate reads
// sums and counts: the classic buckets (by their le, which histogram_quantile
// reads as a number: Prometheus 2's le="4096" and 3's le="4096.0" are the
// same bound, and no rule selects a bucket by its le text), or the native
// histogram. Both sides carry the same labels once histogram_quantile has
// dropped le, so "or" never doubles a disk; where a Prometheus keeps both
// (always_scrape_classic_histograms) the classic side is read. A classic
// histogram converted to one of custom buckets (convert_classic_histograms_to_nhcb)
// is a native one here.
func histogramQuantile(q, metric, sel string) string {
	return fmt.Sprintf(`    histogram_quantile(%s, sum by (${disk}, op, le) (rate(%s_bucket{%s}[${w}])))
  or
    histogram_quantile(%s, sum by (${disk}, op) (rate(%s{%s}[${w}])))`, q, metric, sel, q, metric, sel)
}

// histogramFamilies are the exporter's histograms the rules read by their
// sum and count (rules/gen's tests check each against exporter/collector).
var histogramFamilies = map[string]bool{
	"fspair_disk_stage_seconds":                  true,
	"fspair_disk_request_duration_seconds":       true,
	"fspair_disk_guest_request_duration_seconds": true,
}

// featureRules derive the per-disk workload features from the base rates of
// one window. Every ratio divides by a filtered denominator (> 0), so an idle
// disk has no ratio series instead of NaN.
func featureRules(w window) []Rule {
	return []Rule{
		rec(w, "domain_disk:fspair_disk_rw_requests:rate${w}",
			`sum without (op) (domain_disk:fspair_disk_requests:rate${w}{op=~"read|write"})`,
			"Activity: read and write requests per second (IOPS)."),
		rec(w, "domain_disk:fspair_disk_rw_bytes:rate${w}",
			`sum without (op) (domain_disk:fspair_disk_bytes:rate${w})`,
			"Activity: bytes read and written per second."),
		rec(w, "domain_disk:fspair_disk_requests:ratio_rate${w}", `
  domain_disk:fspair_disk_requests:rate${w}{op=~"read|write"}
/ ignoring (op) group_left ()
  (domain_disk:fspair_disk_rw_requests:rate${w} > 0)`,
			"Share of reads and of writes among read and write requests."),
		rec(w, "domain_disk:fspair_disk_bytes:ratio_rate${w}", `
  domain_disk:fspair_disk_bytes:rate${w}
/ ignoring (op) group_left ()
  (domain_disk:fspair_disk_rw_bytes:rate${w} > 0)`,
			"Share of read and of written bytes among all bytes moved."),
		rec(w, "domain_disk:fspair_disk_read_write_requests:ratio_rate${w}", `
  domain_disk:fspair_disk_requests:rate${w}{op="read"}
/ ignoring (op)
  (domain_disk:fspair_disk_requests:rate${w}{op="write"} > 0)`,
			"Reads per write, by requests (only when the disk writes)."),
		rec(w, "domain_disk:fspair_disk_read_write_bytes:ratio_rate${w}", `
  domain_disk:fspair_disk_bytes:rate${w}{op="read"}
/ ignoring (op)
  (domain_disk:fspair_disk_bytes:rate${w}{op="write"} > 0)`,
			"Bytes read per byte written (only when the disk writes)."),
		rec(w, "domain_disk:fspair_disk_pattern_requests:ratio_rate${w}", `
  domain_disk:fspair_disk_pattern_requests:rate${w}
/ ignoring (op, pattern) group_left ()
  (sum without (op, pattern) (domain_disk:fspair_disk_pattern_requests:rate${w}) > 0)`,
			"Operation mix: random reads, sequential reads, random writes and sequential writes as shares "+
				"of all classified requests; the four add up to 1. (The exporter has no byte counters by "+
				"pattern, so the byte mix is by operation only: domain_disk:fspair_disk_bytes:ratio_rate.)"),
		rec(w, "domain_disk:fspair_disk_random_requests:ratio_rate${w}", `
  domain_disk:fspair_disk_pattern_requests:rate${w}{pattern="random"}
/ ignoring (pattern)
  (sum without (pattern) (domain_disk:fspair_disk_pattern_requests:rate${w}) > 0)`,
			"Random share of each operation: random reads per classified read, random writes per classified write."),
		rec(w, "domain_disk:fspair_disk_sync_writes:ratio_rate${w}", `
clamp_max(
    domain_disk:fspair_disk_sync_writes:rate${w}
  / ignoring (op)
    (domain_disk:fspair_disk_requests:rate${w}{op="write"} > 0),
  1
)`,
			"Synchronous write share: durable writes per write. Sync writes count at submission and writes "+
				"at completion, so the ratio can overshoot 1 by a request in flight; it is capped."),
		rec(w, "domain_disk:fspair_disk_flushes_per_write:ratio_rate${w}", `
  domain_disk:fspair_disk_requests:rate${w}{op="flush"}
/ ignoring (op)
  (domain_disk:fspair_disk_requests:rate${w}{op="write"} > 0)`,
			"Flush requests per write request."),
		rec(w, "domain_disk:fspair_disk_request_size_bytes:mean${w}", `
  domain_disk:fspair_disk_bytes:rate${w}
/
  (domain_disk:fspair_disk_requests:rate${w}{op=~"read|write"} > 0)`,
			"Mean read and write request size in bytes."),
	}
}

// efficiencyRules measure how well the disk's guest/host pair does: write
// amplification, host-FS latency overhead and flush cost, per disk, and write
// amplification per host device.
func efficiencyRules(w window, t *Thresholds) []Rule {
	minWrite := num(t.Efficiency.MinGuestWriteBytes.V())
	minReq := num(t.Efficiency.MinStageRequestsRate.V())
	return []Rule{
		rec(w, "domain_disk:fspair_disk_host_metadata_write_bytes:rate${w}", `
sum by (${disk}) (
    domain_disk:fspair_disk_device_bytes:rate${w}{op="write"}
  * on (${disk}) group_left (host_device)
    fspair_disk_info{${job}}
  / on (${dev}) group_left ()
    (host_device:fspair_host_device_bytes:rate${w}{kind="data", op="write"} > 0)
  * on (${dev}) group_left ()
    host_device:fspair_host_device_bytes:rate${w}{kind="metadata", op="write"}
)`,
			"The disk's share of its host device's metadata writes (journal, file-system metadata), "+
				"apportioned by the disk's share of the device's data writes."),
		rec(w, "domain_disk:fspair_write_amplification:ratio_rate${w}", `
(
    sum without (op) (domain_disk:fspair_disk_device_bytes:rate${w}{op="write"})
  + domain_disk:fspair_disk_host_metadata_write_bytes:rate${w}
  or
    sum without (op) (domain_disk:fspair_disk_device_bytes:rate${w}{op="write"})
)
/ ignoring (op)
  (domain_disk:fspair_disk_bytes:rate${w}{op="write"} >= `+minWrite+`)`,
			"Write amplification of the pair: host device write bytes for the image plus its share of the "+
				"device's metadata writes, per byte the guest wrote. Only for disks writing at least "+
				"efficiency.min_guest_write_bytes_per_second."),
		rec(w, "domain_disk:fspair_disk_stage_seconds:mean${w}", `
  domain_disk:fspair_disk_stage_seconds_sum:rate${w}
/
  (domain_disk:fspair_disk_stage_seconds_count:rate${w} >= `+minReq+`)`,
			"Mean latency by stage (file: the image-file request; device: host device service) and operation, "+
				"over at least efficiency.min_stage_requests_per_second requests."),
		rec(w, "domain_disk:fspair_hostfs_latency_overhead:ratio_rate${w}", `
  domain_disk:fspair_disk_stage_seconds:mean${w}{stage="file"}
/ ignoring (stage)
  (domain_disk:fspair_disk_stage_seconds:mean${w}{stage="device"} > 0)`,
			"Host-FS latency overhead: mean file-stage latency per mean device-stage latency, by operation."),
		rec(w, "domain_disk:fspair_hostfs_latency_overhead_seconds:mean${w}", `
  domain_disk:fspair_disk_stage_seconds:mean${w}{stage="file"}
- ignoring (stage)
  domain_disk:fspair_disk_stage_seconds:mean${w}{stage="device"}`,
			"Host-FS latency overhead in seconds: mean file-stage minus mean device-stage latency."),
		rec(w, "domain_disk:fspair_disk_request_duration_seconds:mean${w}", `
  domain_disk:fspair_disk_request_duration_seconds_sum:rate${w}{op="flush"}
/
  (domain_disk:fspair_disk_request_duration_seconds_count:rate${w}{op="flush"} > 0)`,
			"Flush cost: mean flush latency on the image file."),
		rec(w, "domain_disk:fspair_disk_flush_device_write_bytes:mean${w}", `
  domain_disk:fspair_disk_flush_device_write_bytes:rate${w}
/ ignoring (op)
  (domain_disk:fspair_disk_requests:rate${w}{op="flush"} > 0)`,
			"Flush cost: host device write bytes per flush on the image file."),
		rec(w, "domain_disk:fspair_disk_flush_device_cache_flushes:mean${w}", `
  domain_disk:fspair_disk_flush_device_cache_flushes:rate${w}
/ ignoring (op)
  (domain_disk:fspair_disk_requests:rate${w}{op="flush"} > 0)`,
			"Flush cost: host device cache flushes per flush on the image file."),
		rec(w, "host_device:fspair_write_amplification:ratio_rate${w}", `
  sum by (${dev}, host_fs) (host_device:fspair_host_device_bytes:rate${w}{kind=~"data|metadata", op="write"})
/ on (${dev}) group_left ()
  (
    sum by (${dev}) (
        domain_disk:fspair_disk_bytes:rate${w}{op="write"}
      * on (${disk}) group_left (host_device)
        fspair_disk_info{${job}}
    ) >= `+minWrite+`
  )`,
			"Write amplification per host device: data and metadata bytes the device wrote per byte the "+
				"guests of its disks wrote. kind=\"other\" (writes of files that are not tracked images) is left out."),
	}
}

func activeDisksRule(w window, t *Thresholds) Rule {
	return rec(w, "host_device:fspair_disks_active:count${w}", `
count by (${dev}, host_fs) (
    (domain_disk:fspair_disk_rw_requests:rate${w} >= `+num(t.Activity.ActiveIOPS.V())+`)
  * on (${disk}) group_left (host_device, host_fs)
    fspair_disk_info{${job}}
)
or on (${dev})
  0 * max by (${dev}, host_fs) (fspair_host_device_vm_disks{${job}})`,
		"Contention: VM disks on the host device doing at least activity.active_iops requests per second (0 when none).")
}

// longRecords are the series the long window records (names without the
// window): those that the fleet view, the alerts and the dashboards read,
// and the base rates they are computed from (rules/gen's tests check that
// every one has a reader). The other rates and features (operation mix,
// sync share, shares and ratios, flush cost) drive the live class and the
// short-window panels only; over the long window they cost most of the rule
// set's time at scale (rules/README.md, Cost) and were read by nothing, so
// they are not recorded. Ad-hoc queries over an hour derive them from the
// long-window rates.
var longRecords = map[string]bool{
	"domain_disk:fspair_disk_requests:rate":                       true,
	"domain_disk:fspair_disk_bytes:rate":                          true,
	"domain_disk:fspair_disk_stage_seconds_sum:rate":              true,
	"domain_disk:fspair_disk_stage_seconds_count:rate":            true,
	"domain_disk:fspair_disk_request_duration_seconds_sum:rate":   true,
	"domain_disk:fspair_disk_request_duration_seconds_count:rate": true,
	"domain_disk:fspair_disk_device_bytes:rate":                   true,
	"host_device:fspair_host_device_bytes:rate":                   true,
	"domain_disk:fspair_disk_request_size_bytes:mean":             true,
	"domain_disk:fspair_disk_host_metadata_write_bytes:rate":      true,
	"domain_disk:fspair_write_amplification:ratio_rate":           true,
	"domain_disk:fspair_disk_stage_seconds:mean":                  true,
	"domain_disk:fspair_hostfs_latency_overhead:ratio_rate":       true,
	"domain_disk:fspair_disk_request_duration_seconds:mean":       true,
	"host_device:fspair_write_amplification:ratio_rate":           true,
}

// longKept keeps the rules of window w whose series are longRecords.
func longKept(w window, rules []Rule) []Rule {
	var out []Rule
	for _, r := range rules {
		if longRecords[strings.TrimSuffix(r.Record, w.name)] {
			out = append(out, r)
		}
	}
	return out
}

// longInterval is how often the long-window groups (and the other slow
// groups: the guest quantiles, the workload classifier, the fleet view) are
// evaluated unless -long-interval says otherwise: a twentieth of the long
// window (3m for 1h), at most 3m. Their series move slowly, and at 10,000
// disks they are most of the rule set's cost (rules/README.md, Cost). It
// stays below Prometheus' 5m lookback, with room for a slow evaluation, so
// that readers of these series (the fleet rules, the alerts, dashboards)
// never see a gap and the classifier's rules that read their own last
// sample (the hysteresis, the settle time) find it.
func longInterval(l window) string {
	return formatDuration(min(max(l.secs/20, 1), 180))
}

func recordingFile(p *Params) File {
	s, l := p.Short, p.Long
	disk := append(baseRules(s, s, false), featureRules(s)...)
	diskLong := longKept(l, append(baseRules(s, l, true), featureRules(l)...))
	eff := append(efficiencyRules(s, p.T), activeDisksRule(s, p.T))
	li := p.LongEvery
	return File{
		Name:   "fspair.rules.yml",
		Header: header(p),
		Groups: []Group{
			{Name: "fspair.disk", Rules: disk,
				Comment: fmt.Sprintf("Per-disk rates and workload features over the short window (%s).", s.name)},
			{Name: "fspair.disk.long", Rules: diskLong, Interval: li,
				Comment: fmt.Sprintf("Per-disk rates and workload features over the long window (%s), evaluated every %s.", l.name, li)},
			{Name: "fspair.efficiency", Rules: eff,
				Comment: "Pair efficiency per disk and per host device over the short window: write amplification, host-FS latency overhead, flush cost, contention."},
			{Name: "fspair.efficiency.long", Rules: longKept(l, efficiencyRules(l, p.T)), Interval: li,
				Comment: fmt.Sprintf("Pair efficiency over the long window (%s), evaluated every %s: what the fleet view and the efficiency alerts compare.", l.name, li)},
			{Name: "fspair.guest", Rules: guestRules(s, p.T),
				Comment: fmt.Sprintf("The guest path over the short window (%s): guest requests against image-file requests (merge ratio, flushes elided, sizes before and after merging), latency by layer from the guest to the device, and the fleet by pair, aio and cache mode.", s.name)},
			{Name: "fspair.guest.quantiles", Rules: guestQuantileRules(s, p.T), Interval: li,
				Comment: fmt.Sprintf("Latency quantiles by layer, evaluated every %s, over the short window (%s). They read a "+
					"histogram per disk and operation (a series per bucket in the classic form), twice a layer (median and p99), "+
					"so they are evaluated apart from fspair.guest, whose means, shares and top layer a slow quantile evaluation "+
					"would otherwise hold up, and less often: a quantile over %s moves little between two evaluations, and readers "+
					"(FspairGuestLatencyHigh, fspair.fleet's slowest disks, the VM disk dashboard) see no gap, the interval staying "+
					"below Prometheus' 5m lookback.", li, s.name, s.name)},
			{Name: "fspair.workload", Rules: workloadRules(p), Interval: p.WorkloadEvery, Comment: workloadComment(p)},
			{Name: "fspair.fleet", Rules: append(fleetRules(p), guestFleetRules(s)...), Interval: li,
				Comment: fmt.Sprintf("Fleet view, evaluated every %s: efficiency by (class, guest_fs, host_fs), the best pair seen per class, and each disk against it; "+
					"the guest path's slowest disks and the layers holding their time over the short window (%s). Those read a series per disk and operation "+
					"(30,000 at 10,000 disks), so they are evaluated here rather than with fspair.guest: the window they summarise moves little between two "+
					"evaluations, and readers see no gap (the interval stays below Prometheus' 5m lookback).", li, s.name)},
			{Name: "fspair.pairing", Rules: pairingRules(),
				Comment: "Each disk's live class joined with the knowledge base's verdict on its pair."},
		},
	}
}

// workloadComment is fspair.workload's comment: what it records and, when
// it has an interval of its own, why.
func workloadComment(p *Params) string {
	const what = "a score per class, the chosen class (with hysteresis), how long it has held (settling) and a confidence."
	if p.WorkloadEvery == "" {
		return "Live workload class per disk: " + what
	}
	return fmt.Sprintf("Live workload class per disk, evaluated every %s: %s Each of the model's centres joins every disk's "+
		"features, the costliest group per evaluation at scale; its features are rates over the short window (%s), which "+
		"move little between two evaluations, and readers (fspair.pairing, the alerts, dashboards) see no gap, the interval "+
		"staying below Prometheus' 5m lookback.", p.WorkloadEvery, what, p.Short.name)
}

func header(p *Params) string {
	return fmt.Sprintf(`Generated by rules/gen (go run ./rules/gen -out rules/): do not edit. Sources: rules/classes.yaml (thresholds), rules/kdb/pairs.yaml and rules/kdb/site.yaml (knowledge base), rules/gen (expressions).
Windows: short=%s long=%s; for-scale=%s.`, p.Short.name, p.Long.name, num(p.ForScale))
}

// classList is a regex alternation of the four workload classes.
func classList() string { return strings.Join(workloadNames, "|") }
