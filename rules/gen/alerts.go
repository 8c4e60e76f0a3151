package main

import (
	"fmt"
)

const runbookBase = "https://github.com/fspair/fspair/blob/main/runbooks/"

// alert is an alerting rule before the window and for-scale are applied.
type alert struct {
	name, expr, severity, summary, description string
	forSecs                                    int64
	exporter                                   bool // about the exporter, not the VM disks
}

// diskWho names a VM disk in a description.
const diskWho = "{{ $labels.domain }} disk {{ $labels.target_device }} ({{ $labels.source_file }}) on {{ $labels.instance }}"

// topLayerSentence names, in FspairGuestLatencyHigh's description, the
// layer holding most of the guest's mean time for the disk and operation
// (domain_disk:fspair_disk_guest_path_top_layer:info, looked up when the
// alert is evaluated) and what to look at next there (the runbook has the
// detail).
const topLayerSentence = `{{ with printf "` + guestTopLayerName +
	`{instance=%q, domain=%q, uuid=%q, target_device=%q, source_file=%q, op=%q}"` +
	` $labels.instance $labels.domain $labels.uuid $labels.target_device $labels.source_file $labels.op | query }}{{ with first . }}` +
	`The {{ .Labels.layer }} layer holds most of the guest's mean time ({{ .Value | humanizePercentage }}): ` +
	`{{ if eq .Labels.layer "vmm" }}look at QEMU next: its iothreads, the aio mode, vCPU and host CPU contention.` +
	`{{ else if eq .Labels.layer "host_fs" }}look at the host file system next: the image format, fragmentation, the host-FS latency overhead.` +
	`{{ else }}look at the host device next: its queue and saturation.{{ end }}{{ end }}` +
	`{{ else }}No layer split: the image file had too few requests for a mean; see the runbook.{{ end }}`

func alerts(p *Params) []alert {
	t := p.T
	s, l := p.Short.name, p.Long.name
	forPoor, forEff, forGuest := int64(3600), int64(3600), int64(900)
	return []alert{
		{
			name: "FspairPoorPairing", severity: "warning", forSecs: forPoor,
			expr: `
  domain_disk:fspair_workload_class:confidence
* on (${disk}) group_left (class, guest_fs, host_fs, source, better_pairs, published_verdict, site_verdict)
  domain_disk:fspair_pair_verdict:info{verdict="worst"}`,
			summary: "A VM disk runs a workload on a guest/host file-system pair known to be poor for it.",
			description: diskWho + " has run a {{ $labels.class }} workload for " + scaleDuration(forPoor, p.ForScale) +
				" on {{ $labels.guest_fs }} inside the VM over {{ $labels.host_fs }} on the host, a pair the knowledge base" +
				" (source: {{ $labels.source }}) lists among the worst for {{ $labels.class }}" +
				` (classifier confidence {{ $value | printf "%.2f" }}).` +
				// Where the published studies and the site disagree, both,
				// and which one the rules act on.
				"{{ with $labels.published_verdict }} The published studies rate it {{ . }}; the rules act on this site's measured verdict.{{ end }}" +
				`{{ with $labels.site_verdict }} This site's own measurement rates it {{ reReplaceAll "_" " " . }};` +
				" the rules act on the published verdict (a site verdict replaces it at confidence " + num(MinSiteConfidence) + " or more).{{ end }}" +
				" Better pairs for {{ $labels.class }}: {{ $labels.better_pairs }}.",
		},
		{
			name: "FspairWriteAmplificationHigh", severity: "warning", forSecs: forEff,
			expr: fmt.Sprintf(`domain_disk:fspair_write_amplification_vs_best:ratio_rate%s{class=~"%s"} > %s`,
				l, classList(), num(t.Alerts.WriteAmplificationVsBest.V())),
			summary: "A VM disk's write amplification is far above the best pair seen for its workload.",
			description: diskWho + ", a {{ $labels.class }} workload on {{ $labels.guest_fs }}/{{ $labels.host_fs }}," +
				` has had {{ $value | printf "%.1f" }} times the write amplification (host device bytes per guest byte)` +
				" of the best {{ $labels.class }} pair in the fleet, {{ $labels.best_pair }} (its median), over the last " + l +
				" (alert above " + num(t.Alerts.WriteAmplificationVsBest.V()) + ").",
		},
		{
			name: "FspairHostFSLatencyOverheadHigh", severity: "warning", forSecs: forEff,
			expr: fmt.Sprintf(`domain_disk:fspair_hostfs_latency_overhead_vs_best:ratio_rate%s{class=~"%s"} > %s`,
				l, classList(), num(t.Alerts.LatencyOverheadVsBest.V())),
			summary: "A VM disk's host file-system latency overhead is far above the best pair seen for its workload.",
			description: diskWho + ", a {{ $labels.class }} workload on {{ $labels.guest_fs }}/{{ $labels.host_fs }}," +
				" has had a host-FS latency overhead for {{ $labels.op }}s (image-file latency per device latency)" +
				` {{ $value | printf "%.1f" }} times that of the best {{ $labels.class }} pair in the fleet,` +
				" {{ $labels.best_pair }} (its median), over the last " + l +
				" (alert above " + num(t.Alerts.LatencyOverheadVsBest.V()) + ").",
		},
		{
			name: "FspairMailFlushLatencyHigh", severity: "warning", forSecs: 900,
			expr: fmt.Sprintf(`
  domain_disk:fspair_disk_request_duration_seconds:mean%s{op="flush"}
* on (${disk}) group_left (class, guest_fs, host_fs)
  domain_disk:fspair_class_pair:info{class="mail"}
> %s`, s, num(t.Alerts.MailFlushLatencySeconds.V())),
			summary: "Flushes are slow on a VM disk running a mail-like workload.",
			description: diskWho + " runs a mail-like workload on {{ $labels.guest_fs }}/{{ $labels.host_fs }}" +
				" and its flushes have taken {{ $value | humanizeDuration }} on average over the last " + s +
				" (alert above " + num(t.Alerts.MailFlushLatencySeconds.V()) + " s); every durable append of such a workload waits for one.",
		},
		{
			// The guest's own p99, by operation; the layer that holds the
			// time is looked up for the description, not joined in as a
			// label: a change of layer must not restart the `for`.
			// fspair.guest.quantiles records the p99 every -long-interval
			// (3m), below the 5m lookback: each evaluation here reads the
			// latest, so the `for` spans consecutive high recordings, each
			// over the 5m before it, and no gap resets it.
			name: "FspairGuestLatencyHigh", severity: "warning", forSecs: forGuest,
			expr: fmt.Sprintf(`
  max without (layer, quantile) (`+guestQuantileName+`{layer="guest", quantile="0.99", op=~"read|write"}) > %s
or
  max without (layer, quantile) (`+guestQuantileName+`{layer="guest", quantile="0.99", op="flush"}) > %s`, num(t.Alerts.GuestReadWriteP99Seconds.V()), num(t.Alerts.GuestFlushP99Seconds.V())),
			summary: "A VM's guest waits long for some of its disk requests.",
			description: diskWho + ": the guest's {{ $labels.op }}s have had a 99th percentile of {{ $value | humanizeDuration }} over" +
				" the last " + s + " for " + scaleDuration(forGuest, p.ForScale) + " (alert above " + num(t.Alerts.GuestReadWriteP99Seconds.V()) +
				" s for reads and writes, " + num(t.Alerts.GuestFlushP99Seconds.V()) + " s for flushes). " + topLayerSentence,
		},
		{
			name: "FspairHostFSContention", severity: "warning", forSecs: 1800,
			expr:    fmt.Sprintf(`host_device:fspair_disks_active:count%s >= %s`, s, num(t.Alerts.ContentionActiveDisks.V())),
			summary: "Too many busy VM disks share one host device.",
			description: "{{ $value }} VM disks each doing at least " + num(t.Activity.ActiveIOPS.V()) +
				" requests/s share host device {{ $labels.host_device }} ({{ $labels.host_fs }}) on {{ $labels.instance }}" +
				" (alert at " + num(t.Alerts.ContentionActiveDisks.V()) + "); VMs on one host file system slow each other down.",
		},
		{
			name: "FspairExporterDown", exporter: true, severity: "critical", forSecs: 300,
			expr:    `up{${job}} == 0`,
			summary: "The fspair exporter cannot be scraped.",
			description: "The fspair exporter at {{ $labels.instance }} has not been scraped successfully for " +
				scaleDuration(300, p.ForScale) + ": no VM disk on that host is followed and every fspair rule and alert for it is blind.",
		},
		{
			name: "FspairProbeNotAttached", exporter: true, severity: "warning", forSecs: 600,
			expr:    `fspair_probe_attached{${job}} == 0`,
			summary: "A BPF program of the fspair exporter is not attached.",
			description: "BPF program {{ $labels.program }} of the fspair exporter on {{ $labels.instance }} has not been attached for " +
				scaleDuration(600, p.ForScale) + "; the metrics it feeds are missing or frozen. The exporter log says why.",
		},
		{
			name: "FspairDiskUnfollowed", exporter: true, severity: "warning", forSecs: 600,
			expr:    `fspair_disk_unfollowed{${job}, measure="requests"} == 1`,
			summary: "Some requests of a VM disk are not followed by the fspair probes.",
			description: "The fspair probes on {{ $labels.instance }} do not see {{ $labels.op }} requests of {{ $labels.domain }}/{{ $labels.target_device }}" +
				" on path {{ $labels.path }}, which its probe mode does not follow; its {{ $labels.op }} counters read 0" +
				" whatever the VM does, and its class and efficiency may be wrong.",
		},
		{
			// Requests lost to the counters. request_untimed and
			// completion_unseen requests are counted, only untimed:
			// not a loss to alert on (the runbook says where they show).
			name: "FspairEventsDropped", exporter: true, severity: "warning", forSecs: 900,
			expr: fmt.Sprintf(`sum by (instance, reason) (rate(fspair_probe_events_dropped_total{${job}, reason!~"request_untimed|completion_unseen"}[%s])) > %s`,
				s, num(t.Alerts.EventsDroppedPerSecond.V())),
			summary: "The fspair probes are dropping requests.",
			description: "The fspair probes on {{ $labels.instance }} have been dropping {{ $value | humanize }} requests/s" +
				" (reason {{ $labels.reason }}) for " + scaleDuration(900, p.ForScale) +
				"; per-disk rates undercount and workload classes may be wrong.",
		},
		{
			name: "FspairDiscoveryFailing", exporter: true, severity: "warning", forSecs: 900,
			expr:    `fspair_discovery_source_up{${job}} == 0`,
			summary: "A discovery source of the fspair exporter is failing.",
			description: "Discovery source {{ $labels.source }} of the fspair exporter on {{ $labels.instance }} has failed for " +
				scaleDuration(900, p.ForScale) + "; VM disks it would find are not followed.",
		},
	}
}

func alertFile(p *Params) File {
	var pairs, exporter []Rule
	for _, a := range alerts(p) {
		r := Rule{
			Alert: a.name, Expr: x(p.Short, a.expr), For: scaleDuration(a.forSecs, p.ForScale),
			Labels: [][2]string{{"severity", a.severity}},
			Annotations: [][2]string{
				{"summary", a.summary},
				{"description", a.description},
				{"runbook_url", runbookBase + a.name + ".md"},
			},
		}
		if a.exporter {
			exporter = append(exporter, r)
		} else {
			pairs = append(pairs, r)
		}
	}
	return File{
		Name:   "fspair.alerts.yml",
		Header: header(p),
		Groups: []Group{
			{Name: "fspair.alerts.pairs", Rules: pairs,
				Comment: "Alerts on VM disks and host devices: poor pairing, efficiency far from the fleet's best, slow flushes, contention. None fires for an idle disk: each needs a workload class, or activity."},
			{Name: "fspair.alerts.exporter", Rules: exporter,
				Comment: "Alerts on the exporter itself."},
		},
	}
}
