"""fspair / VM disk: one VM disk, from the guest's requests to the host device.

Rows follow the data path: what the disk is and what the knowledge base says
about its pair; the path from the guest's requests through QEMU and the image
file to the host device, latency by layer; the workload the classifier sees; request sizes and seek
distances; latency by stage; flushes and what they cost the host; the host
file system's journal, metadata and copy-on-write work; the host page cache;
the image file's layout; the libvirt exporter's view of the same disk; and
a k6 load test's request rate and latency beside the disk's class and latency.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from common import (
    CLASS_STATE_LEGEND,
    INSTANCE,
    RUNBOOK_BASE,
    UID_DISK,
    UID_HOSTFS,
    VERDICT_COLORS,
    Column,
    Links,
    PanelBuilder,
    Query,
    VariableBuilder,
    bar_panel,
    class_with_state,
    dashboard_link,
    heatmap_panel,
    hist_buckets,
    hist_rate,
    new_dashboard,
    query_variable,
    rate,
    raw,
    row,
    rule,
    selector,
    standard_variables,
    stat_panel,
    state_panel,
    table_panel,
    text_panel,
    timeseries_panel,
)
from inputs import Inputs

# The disk: a VM and one of its disks, as the libvirt exporter names them.
DISK = ('domain="$domain"', 'target_device="$disk"')

# The libvirt exporter's series of the same disk (prometheus-libvirt-exporter:
# libvirt_domain_block_stats_*{domain, uuid, source_file, target_device}).
LIBVIRT = ('job=~"$libvirt_job"', 'instance=~"$libvirt_instance"', *DISK)

# The alerts about one disk and its host device, in the order an operator meets them.
DISK_ALERTS = (
    ("FspairPoorPairing", "the live class is one the knowledge base lists the pair as worst for"),
    ("FspairWriteAmplificationHigh", "write amplification far above the best pair seen for the class"),
    ("FspairHostFSLatencyOverheadHigh", "image-file latency far above device latency, against the best pair"),
    ("FspairMailFlushLatencyHigh", "slow flushes on a mail-like disk"),
    ("FspairHostFSContention", "too many active VM disks on the host device"),
    ("FspairGuestLatencyHigh", "the guest's p99 of an operation above its limit, naming the layer that holds its time"),
)

VERDICT_MAPPINGS = {v: (v, c) for v, c in VERDICT_COLORS.items()}

# The fspair alerts firing about this disk, as Prometheus records them.
FIRING = selector("ALERTS", 'alertname=~"Fspair.+"', 'alertstate="firing"', INSTANCE, *DISK)


def disk_rule(name: str, *matchers: str) -> str:
    return rule(name, *DISK, *matchers)


def disk_raw(metric: str, *matchers: str) -> str:
    return raw(metric, *DISK, *matchers)


def disk_rate(metric: str, *matchers: str) -> str:
    return rate(metric, *DISK, *matchers)


def buckets(metric: str, *matchers: str) -> str:
    """Bucket rates of one of the disk's histograms, for a heatmap."""
    return hist_buckets(disk_rate, metric, *matchers)


def host_device_of_disk(expr: str) -> str:
    """expr (per host device) restricted to the host device holding the disk's image."""
    return f"{expr}\n* on (instance, host_device) group_left ()\n  group by (instance, host_device) ({disk_raw('fspair_disk_info')})"


def libvirt_rate(counter: str) -> str:
    return f"rate({selector('libvirt_domain_block_stats_' + counter, *LIBVIRT)}[$__rate_interval])"


def _variables() -> list[VariableBuilder]:
    return [
        *standard_variables(),
        query_variable(
            "domain",
            "VM",
            'label_values(fspair_disk_info{job=~"$job", instance=~"$instance"}, domain)',
            "The VM (libvirt domain name, or the QEMU process's name for VMs found in /proc).",
            multi=False,
        ),
        query_variable(
            "disk",
            "disk",
            'label_values(fspair_disk_info{job=~"$job", instance=~"$instance", domain="$domain"}, target_device)',
            "The VM's disk by its target device (vda, sdb, ...).",
            multi=False,
        ),
        query_variable(
            "libvirt_job",
            "libvirt job",
            "label_values(libvirt_domain_block_stats_read_requests_total, job)",
            "Scrape jobs of the libvirt exporter (prometheus-libvirt-exporter), for its view of the same disk.",
        ),
        query_variable(
            "libvirt_instance",
            "libvirt instance",
            'label_values(libvirt_domain_block_stats_read_requests_total{job=~"$libvirt_job", domain="$domain"}, instance)',
            "The libvirt exporter that reports this VM.",
        ),
    ]


# What the guest's requests took and which layer below holds that time
# (groups fspair.guest.quantiles and fspair.guest, rules/README.md): percentiles per layer from the
# histograms, and each layer's share of the guest's mean.
GUEST_QUANTILE = "domain_disk:fspair_disk_guest_path_latency_seconds:quantile5m"
GUEST_SHARE = "domain_disk:fspair_disk_guest_path_latency:ratio5m"
GUEST_OPS = ("read", "write", "flush")

# What a panel of the guest's series says of a disk without a guest histogram.
NO_GUEST_HISTOGRAM = (
    "A disk without a guest histogram has no guest series here; 'Guest latency histogram' (fspair_disk_guest_info's "
    "histogram label) says why, e.g. libvirt_too_old: libvirt before 12.1 keeps none."
)


def _what_the_vm_feels(inputs: Inputs) -> list[PanelBuilder]:
    """The first row: the guest's latency, its percentiles beside the image file's and the device's, and which
    layer holds the guest's time, one column per operation."""
    floor = inputs.thresholds.min_stage_requests_per_second
    limits = {
        "read": inputs.thresholds.guest_read_write_p99_seconds,
        "write": inputs.thresholds.guest_read_write_p99_seconds,
        "flush": inputs.thresholds.guest_flush_p99_seconds,
    }
    status = stat_panel(
        "Guest latency histogram",
        "Whether the guest's latency histograms (fspair_disk_guest_request_duration_seconds) are there for this disk: "
        "fspair_disk_guest_info's histogram label, ok or why not: not_set (none yet: over QMP fspair has just set them; "
        "from libvirt, the domain's XML asks for none), refused (QEMU refused block-latency-histogram-set: before 4.0, or a "
        "drive without a guest device), other_bounds (set by someone else on other bounds: left alone), libvirt_too_old "
        "(libvirt before 12.1 has none), none (no guest side). Without it the heatmaps beside are empty and the percentiles "
        "below have the image file's and the device's only; the layer shares, from the guest's total time, stay.",
        "none",
        [Query(disk_raw("fspair_disk_guest_info"), "{{histogram}}")],
        width=6,
        height=8,
        show_name=True,
    )
    heatmaps = [
        heatmap_panel(
            f"{op.capitalize()} latency: guest",
            f"Distribution of what the guest's {op}s took as the guest sees it, from the virtio device receiving them to "
            f'completing them (QEMU\'s latency histogram, fspair_disk_guest_request_duration_seconds{{op="{op}"}}), on the '
            "image file's buckets (powers of 2 from 1 us; the classic series keep a bound every 4x). " + NO_GUEST_HISTOGRAM,
            "s",
            Query(buckets("fspair_disk_guest_request_duration_seconds", f'op="{op}"')),
            width=6,
        )
        for op in GUEST_OPS
    ]
    layers = {
        "read": "guest, image file and host device",
        "write": "guest, image file and host device",
        "flush": "guest and image file (no device layer: the host stages time reads and writes, and a flush's device "
        "work is the writeback and cache flushes it causes, 'Flushes and their cost')",
    }
    quantiles = [
        timeseries_panel(
            f"{op.capitalize()} latency by layer: p99 and p50",
            f"99th and 50th percentile of the {op}s' latency over 5m at each layer, {layers[op]} "
            f"({GUEST_QUANTILE}{{layer, quantile}}; histogram_quantile of the layer's histogram), only where the layer had "
            f"at least {floor:g} request/s (rules/classes.yaml efficiency.min_stage_requests_per_second). The layers count "
            "different requests (QEMU merges guest requests and skips flushes with nothing to flush; the device serves the "
            "image's host block requests, writeback included), so their percentiles do not add up: compare them side by "
            "side. A percentile lies inside one bucket, interpolated: guest and image file on powers of 2 (native) or every "
            "4x (classic), the device every 8x in its classic buckets, so a classic device p99 is known to within a factor "
            "of 8. The rules record these percentiles every 3m (group fspair.guest.quantiles), so the lines step every 3m. "
            f"FspairGuestLatencyHigh fires when the guest's p99 stays above {limits[op]:g} s (dashed line; "
            "rules/classes.yaml alerts). " + NO_GUEST_HISTOGRAM,
            "s",
            [
                Query(disk_rule(GUEST_QUANTILE, f'op="{op}"', 'quantile="0.99"'), "p99 {{layer}}"),
                Query(disk_rule(GUEST_QUANTILE, f'op="{op}"', 'quantile="0.5"'), "p50 {{layer}}"),
            ],
            width=8,
            limit=limits[op],
        )
        for op in GUEST_OPS
    ]
    below = {
        "read": "device (the host I/O scheduler and the device: at most the image file's time; 0 where the image had too "
        "few host block reads for a mean, as when the host page cache serves them)",
        "write": "device (the host I/O scheduler and the device, at most the image file's time). With the host page cache "
        "(cache=writeback, unsafe) a write completes before its writeback, so the device's time is then not inside the "
        "guest's wait and its share here is bounded by the image file's, not measured",
        "flush": "no device layer: a flush's device time (the writeback and cache flushes it causes, 'Flushes and their "
        "cost') is inside host_fs",
    }
    shares = [
        timeseries_panel(
            f"Where the guest's {op} time goes",
            f"Share of the guest's mean {op} time each layer holds over 5m ({GUEST_SHARE}{{layer}}), stacked to 1: vmm "
            "(guest minus image file: QEMU's queueing, the virtio ring, the host scheduler's delay of its threads), "
            f"host_fs (the image file's time above the device's: the host file system, its journal and locks), {below[op]}. "
            "A negative difference (noise between the sources) counts 0. Means, not tails: a p99 can sit in a layer whose "
            "mean share is small (the percentiles above). From the guest's total time, so a disk without a guest histogram "
            "has it too; a disk without a guest side (fspair_disk_guest_info) or without image-file requests has none.",
            "percentunit",
            [Query(disk_rule(GUEST_SHARE, f'op="{op}"'), "{{layer}}")],
            width=8,
            stacked=True,
            max_val=1,
        )
        for op in GUEST_OPS
    ]
    return [status, *heatmaps, *quantiles, *shares]


def _identity() -> list[PanelBuilder]:
    return [
        table_panel(
            "Disk",
            "The disk's image as the exporter identified it (fspair_disk_info): format, the guest file system read from the "
            "image bytes, the host file system, device and mount point holding the image, QEMU's cache and aio modes, and how "
            "the disk was discovered.",
            "none",
            [Query(disk_raw("fspair_disk_info"))],
            [
                Column("instance", "Host"),
                Column("source_file", "Image"),
                Column("format", "Format"),
                Column("guest_fs", "Guest FS"),
                Column("guest_fs_source", "Guest FS from"),
                Column("host_fs", "Host FS"),
                Column("host_device", "Host device"),
                Column("host_mountpoint", "Mount point"),
                Column("cache", "Cache"),
                Column("aio", "AIO"),
                Column("discovery", "Found by"),
            ],
            height=4,
            links=Links(
                {
                    "Host file systems dashboard": dashboard_link(
                        UID_HOSTFS,
                        "var-instance=${__data.fields.instance}",
                        "var-host_device=${__data.fields.host_device}",
                    )
                }
            ),
        ),
        stat_panel(
            "Probe mode",
            "How the exporter's BPF programs follow this host's requests (fspair_probe_mode_info): fentry (trampolines on "
            "the host file systems' functions, the production path), tracepoint (file-system, iomap and io_uring tracepoints: "
            "no buffered I/O on ext4 and Btrfs) or syscall (every path, at a cost to every system call on the host).",
            "none",
            [Query(raw("fspair_probe_mode_info"), "{{mode}}")],
            width=4,
            show_name=True,
        ),
        stat_panel(
            "Request paths not followed",
            "Request paths of this disk whose requests the probe mode does not see (fspair_disk_unfollowed, "
            "measure=requests): their counters read 0 whatever the VM does, and the class may be wrong. 0: every request "
            "is counted. The exporter's --check lists them; runbook FspairDiskUnfollowed.",
            "short",
            [Query("count(" + disk_raw("fspair_disk_unfollowed", 'measure="requests"') + ") or vector(0)")],
            width=4,
            limit=1,
        ),
        stat_panel(
            "Live workload class",
            "The class the classifier gives the disk now (domain_disk:fspair_workload_class:info): web, mail, fileserver, rfa, "
            "mixed (two classes as near, or far from every class) or idle. idle means little reaches the image file: see "
            "'Guest requests per second' beside it for what the VM asked of its disk. '(settling)': the disk has held this "
            "class for less than the settle time (domain_disk:fspair_workload_class:settled_ratio below 1; one rule window "
            "plus a minute), as while it lays out its files or changes workload; no verdict or alert acts on it until then.",
            "none",
            [Query(class_with_state(*DISK), CLASS_STATE_LEGEND)],
            width=4,
            show_name=True,
        ),
        stat_panel(
            "Classifier confidence",
            "How much nearer the disk lies to its class than to the runner-up, times how near it lies to it, calibrated on "
            "held-out lab runs, times the share of the settle time the class has been held "
            "(domain_disk:fspair_workload_class:confidence): near 0, two classes fit almost equally well, the disk is far "
            "from every class, or the class was chosen moments ago and is still settling; 0 when mixed scores highest "
            "(no class fits). Below rules/classes.yaml settle.min_confidence (0.5) no verdict or alert acts on the class. rules/README.md "
            "(Held-out validation) has how often a settled class was right on lab runs per band of this value.",
            "percentunit",
            [Query(disk_rule("domain_disk:fspair_workload_class:confidence"))],
            width=4,
        ),
        stat_panel(
            "Guest requests per second",
            "Reads and writes the guest sent to its virtual disk over 5m (domain_disk:fspair_disk_guest_requests:rate5m, "
            "from QEMU's block statistics), against 'Requests per second' on the image file: the difference is what QEMU "
            "merged. Reads the guest's own page cache serves never leave the VM: a busy VM whose disk is idle here and on the "
            "image file has its I/O absorbed by its cache. Empty for a disk without a guest side (fspair_disk_guest_info).",
            "iops",
            [Query("sum without (op) (" + disk_rule("domain_disk:fspair_disk_guest_requests:rate5m", 'op=~"read|write"') + ")")],
            width=4,
        ),
        stat_panel(
            "Requests per second",
            "Reads and writes completed per second on the image file over 5m (domain_disk:fspair_disk_rw_requests:rate5m).",
            "iops",
            [Query(disk_rule("domain_disk:fspair_disk_rw_requests:rate5m"))],
            width=4,
        ),
        stat_panel(
            "Bytes per second",
            "Bytes read and written per second on the image file over 5m (domain_disk:fspair_disk_rw_bytes:rate5m).",
            "Bps",
            [Query(disk_rule("domain_disk:fspair_disk_rw_bytes:rate5m"))],
            width=4,
        ),
        stat_panel(
            "Write amplification (1h)",
            "Host device bytes written for the image plus its share of journal and metadata writes, per guest byte, over 1h "
            "(domain_disk:fspair_write_amplification:ratio_rate1h).",
            "none",
            [Query(disk_rule("domain_disk:fspair_write_amplification:ratio_rate1h"))],
            width=4,
        ),
        stat_panel(
            "Firing alerts on this disk",
            "fspair alerts firing now about this disk (ALERTS); the table below links their runbooks.",
            "short",
            [Query(f"count({FIRING}) or vector(0)")],
            width=4,
            limit=1,
        ),
    ]


def _knowledge_base() -> list[PanelBuilder]:
    this_pair = f"fspair_kdb_pair_verdict\n* on (guest_fs, host_fs) group_left ()\n  group by (guest_fs, host_fs) ({disk_raw('fspair_disk_info')})"
    runbooks = "\n".join(f"- [{name}]({RUNBOOK_BASE}{name}.md): {what}" for name, what in DISK_ALERTS)
    return [
        table_panel(
            "Knowledge-base verdict for this disk",
            "The knowledge base's verdict on the disk's guest/host pair for its live class, and the pairs it lists as better "
            "for that class (domain_disk:fspair_pair_verdict:info). Empty when the class is idle or mixed, still settling "
            "(see 'Live workload class'), settled at a confidence below the one the rules act at (rules/classes.yaml "
            "settle.min_confidence), or the knowledge base does not list the pair. source=site: this site's own "
            "measurement (rules/kdb/site.yaml).",
            "none",
            [Query(disk_rule("domain_disk:fspair_pair_verdict:info"))],
            [
                Column("class", "Class"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("verdict", "Verdict"),
                Column("standout", "Singled out"),
                Column("better_pairs", "Better pairs (guest/host)"),
                Column("source", "Source"),
            ],
            width=12,
            height=5,
            value_mappings=VERDICT_MAPPINGS,
        ),
        table_panel(
            "The knowledge base on this pair, every workload",
            "What the knowledge base says about this disk's guest/host pair for each workload it covers "
            "(fspair_kdb_pair_verdict), whatever the disk runs now: the verdicts to expect if the workload changes.",
            "none",
            [Query(this_pair)],
            [
                Column("workload", "Workload"),
                Column("verdict", "Verdict"),
                Column("standout", "Singled out"),
                Column("better_pairs", "Better pairs (guest/host)"),
                Column("source", "Source"),
            ],
            width=12,
            height=5,
            value_mappings=VERDICT_MAPPINGS,
        ),
        text_panel(
            "Runbooks",
            "The runbooks of the alerts about a VM disk (runbooks/): each has Meaning, Impact, Diagnosis and Mitigation.",
            runbooks,
            width=8,
            height=6,
        ),
        table_panel(
            "Alerts on this disk",
            "fspair alerts firing now about this disk (ALERTS). Click a row for the alert's runbook.",
            "none",
            [Query(FIRING)],
            [
                Column("alertname", "Alert"),
                Column("severity", "Severity"),
                Column("class", "Class"),
                Column("op", "Operation"),
                Column("best_pair", "Best pair"),
            ],
            width=16,
            height=6,
            links=Links({"Runbook": RUNBOOK_BASE + "${__data.fields.alertname}.md"}),
        ),
    ]


# The layers of the guest path, top to bottom, as the rules name them
# (domain_disk:fspair_disk_guest_path_latency_seconds:mean5m{layer}).
GUEST_LAYERS = (
    ("guest", "1 guest-visible"),
    ("vmm", "2 VMM (QEMU)"),
    ("image_file", "3 image file"),
    ("host_queue", "4 host I/O scheduler"),
    ("device", "5 host device"),
)
GUEST_PATH = "domain_disk:fspair_disk_guest_path_latency_seconds:mean5m"


def _guest_path() -> list[PanelBuilder]:
    """The disk's path from the guest to the device: one row, top to bottom."""
    age = f"time() - {disk_raw('fspair_disk_guest_last_read_timestamp_seconds')}"
    return [
        bar_panel(
            "The path, top to bottom: latency by layer",
            "Mean latency of the disk's requests at each layer over 5m, from the guest down to the host device "
            "(domain_disk:fspair_disk_guest_path_latency_seconds:mean5m{layer}). guest-visible: what the guest's requests took "
            "(QEMU's accounting of the virtio device). VMM: guest-visible minus image file, what QEMU itself adds (esxtop's "
            "GAVG minus DAVG). image file: what a guest request waited for on the image file (a merged request carries several "
            "guest requests; a flush QEMU skipped waits for none). host I/O scheduler and host device: the image's host block "
            "requests (reads and writes; with direct I/O inside the image-file time, with the host page cache written back "
            "later). guest-visible = VMM + image file for every operation. Layers 1 and 2 need the guest side "
            "(fspair_disk_guest_info).",
            "s",
            [Query(disk_rule(GUEST_PATH, f'layer="{layer}"'), f"{title} · {{{{op}}}}") for layer, title in GUEST_LAYERS],
            width=10,
            height=12,
        ),
        table_panel(
            "Guest side: source",
            "Where fspair reads the disk's guest side (fspair_disk_guest_info): source=qmp (QEMU's query-blockstats on a QMP "
            "monitor), libvirt (libvirt's domain block statistics), none; status ok, stale (the last read failed, the values "
            "are the last good ones), unreachable, no_device, no_monitor (plain QEMU whose QMP socket nobody named), "
            "not_allowed (--discovery.proc.qmp off), libvirt_monitor (libvirt's QEMU while libvirt does not report it); "
            "histogram: whether the guest latency histograms (fspair_disk_guest_request_duration_seconds) are there: ok, "
            "not_set, refused (QEMU said no), other_bounds (set by someone else on other bounds), libvirt_too_old "
            "(libvirt before 12.1), none.",
            "none",
            [Query(disk_raw("fspair_disk_guest_info"))],
            [Column("source", "Source"), Column("status", "Status"), Column("histogram", "Histogram")],
            width=7,
            height=4,
        ),
        stat_panel(
            "Guest side: age of the values",
            "Seconds since fspair last read the guest side from its source (fspair_disk_guest_last_read_timestamp_seconds; "
            "read every --guest.interval). Growing: the source does not answer and the values are the last good ones.",
            "s",
            [Query(age)],
            width=7,
            height=4,
        ),
        timeseries_panel(
            "Latency by layer over time",
            "The layers of the path over time, by operation (domain_disk:fspair_disk_guest_path_latency_seconds:mean5m).",
            "s",
            [Query(disk_rule(GUEST_PATH), "{{layer}} {{op}}")],
            width=14,
            height=8,
        ),
        timeseries_panel(
            "Requests per second: guest and image file",
            "What the guest asked of its virtio disk (domain_disk:fspair_disk_guest_requests:rate5m) against what QEMU issued "
            "on the image file (domain_disk:fspair_disk_requests:rate5m), by operation: fewer on the image file where QEMU "
            "merged adjacent requests or skipped flushes with nothing to flush.",
            "iops",
            [
                Query(disk_rule("domain_disk:fspair_disk_guest_requests:rate5m"), "guest {{op}}s"),
                Query(disk_rule("domain_disk:fspair_disk_requests:rate5m"), "image-file {{op}}s"),
            ],
            width=6,
        ),
        timeseries_panel(
            "Merge ratio",
            "Guest requests per image-file request over 5m (domain_disk:fspair_disk_guest_merge:ratio_rate5m): 1, QEMU merged "
            "none; 2, two guest requests per request on the image file.",
            "none",
            [Query(disk_rule("domain_disk:fspair_disk_guest_merge:ratio_rate5m"), "{{op}}s")],
            width=6,
        ),
        timeseries_panel(
            "Flushes: asked, done, elided",
            "Flushes the guest asked per second (domain_disk:fspair_disk_guest_requests:rate5m{op=\"flush\"}), flushes on the "
            "image file (domain_disk:fspair_disk_requests:rate5m{op=\"flush\"}), and those QEMU answered without one because "
            "nothing was written since the last (domain_disk:fspair_disk_guest_flushes_elided:rate5m).",
            "ops",
            [
                Query(disk_rule("domain_disk:fspair_disk_guest_requests:rate5m", 'op="flush"'), "guest flushes"),
                Query(disk_rule("domain_disk:fspair_disk_requests:rate5m", 'op="flush"'), "image-file flushes"),
                Query(disk_rule("domain_disk:fspair_disk_guest_flushes_elided:rate5m"), "elided"),
            ],
            width=6,
        ),
        timeseries_panel(
            "Mean request size before and after merging",
            "Mean guest request size (domain_disk:fspair_disk_guest_request_size_bytes:mean5m) and mean image-file request "
            "size after QEMU merged (domain_disk:fspair_disk_request_size_bytes:mean5m).",
            "bytes",
            [
                Query(disk_rule("domain_disk:fspair_disk_guest_request_size_bytes:mean5m"), "guest {{op}}s"),
                Query(disk_rule("domain_disk:fspair_disk_request_size_bytes:mean5m"), "image-file {{op}}s"),
            ],
            width=6,
        ),
    ]


def _workload() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "Workload class scores",
            "Each class's score in [0, 1] (domain_disk:fspair_workload_score:ratio): the workload classes share a softmax of "
            "their distances (below), damped when the disk is far from every class or idle; mixed rises as the best falls. "
            "The highest wins, the current class keeping a small bonus.",
            "percentunit",
            [Query(disk_rule("domain_disk:fspair_workload_score:ratio"), "{{class}}")],
            max_val=1,
        ),
        timeseries_panel(
            "Distance from each class",
            "How far the disk's features over 5m lie from each class's nearest centre in rules/classes.yaml (fitted on lab "
            "runs, per guest file system), in units of the spread of the lab's windows around their class "
            "(domain_disk:fspair_workload_distance:scaled): the confidence falls as the nearest class lies farther than the "
            "start of the near ramp (rules/classes.yaml confidence: near) and is 0 from its end; past the far ramp "
            "(rules/classes.yaml far) the disk counts as far from every class. The features are on "
            "domain_disk:fspair_workload_feature:value.",
            "none",
            [Query(disk_rule("domain_disk:fspair_workload_distance:scaled"), "{{class}}")],
        ),
        state_panel(
            "Workload class over time",
            "When the disk had each class (domain_disk:fspair_workload_class:info), '(settling)' until the class had held "
            "for the settle time (domain_disk:fspair_workload_class:settled_ratio).",
            [Query(class_with_state(*DISK), CLASS_STATE_LEGEND)],
            height=8,
        ),
        timeseries_panel(
            "Requests per second by operation",
            "Reads, writes and flushes completed per second on the image file over 5m (domain_disk:fspair_disk_requests:rate5m).",
            "iops",
            [Query(disk_rule("domain_disk:fspair_disk_requests:rate5m"), "{{op}}")],
            width=8,
        ),
        timeseries_panel(
            "Bytes per second by operation",
            "Bytes read and written per second on the image file over 5m (domain_disk:fspair_disk_bytes:rate5m).",
            "Bps",
            [Query(disk_rule("domain_disk:fspair_disk_bytes:rate5m"), "{{op}}")],
            width=8,
        ),
        timeseries_panel(
            "Operation mix",
            "Random and sequential reads and writes as shares of all classified requests over 5m; the four add up to 1 "
            "(domain_disk:fspair_disk_pattern_requests:ratio_rate5m). Random: not continuing one of the last 16 requests.",
            "percentunit",
            [Query(disk_rule("domain_disk:fspair_disk_pattern_requests:ratio_rate5m"), "{{pattern}} {{op}}s")],
            width=8,
            stacked=True,
            max_val=1,
        ),
        timeseries_panel(
            "Read share and durable writes",
            "Reads among reads and writes, by requests and by bytes (domain_disk:fspair_disk_requests:ratio_rate5m, "
            "domain_disk:fspair_disk_bytes:ratio_rate5m), and writes that had to be durable (O_DSYNC or covered by a flush of "
            "a few writes) per write (domain_disk:fspair_disk_sync_writes:ratio_rate5m).",
            "percentunit",
            [
                Query(disk_rule("domain_disk:fspair_disk_requests:ratio_rate5m", 'op="read"'), "read share (requests)"),
                Query(disk_rule("domain_disk:fspair_disk_bytes:ratio_rate5m", 'op="read"'), "read share (bytes)"),
                Query(disk_rule("domain_disk:fspair_disk_sync_writes:ratio_rate5m"), "durable writes per write"),
            ],
            width=8,
            max_val=1,
        ),
        timeseries_panel(
            "Mean request size",
            "Mean read and write request size on the image file over 5m and 1h "
            "(domain_disk:fspair_disk_request_size_bytes:mean5m, :mean1h).",
            "bytes",
            [
                Query(disk_rule("domain_disk:fspair_disk_request_size_bytes:mean5m"), "{{op}} (5m)"),
                Query(disk_rule("domain_disk:fspair_disk_request_size_bytes:mean1h"), "{{op}} (1h)"),
            ],
            width=8,
        ),
        timeseries_panel(
            "Requests in flight at issue",
            "Mean number of the disk's requests outstanding on the image file when one is issued, itself included "
            "(fspair_disk_outstanding_requests, a sample of one request in 8): the queue depth QEMU keeps.",
            "short",
            [
                Query(
                    f"sum({hist_rate(disk_rate, 'fspair_disk_outstanding_requests', 'sum')})\n/\n"
                    f"(sum({hist_rate(disk_rate, 'fspair_disk_outstanding_requests', 'count')}) > 0)",
                    "mean in flight",
                )
            ],
            width=8,
        ),
        timeseries_panel(
            "Submission interface",
            "Requests submitted per second by interface: plain syscalls, Linux AIO or io_uring (fspair_disk_submissions_total), "
            "and io_uring requests punted to a worker thread (fspair_disk_io_uring_punted_total).",
            "ops",
            [
                Query(f"sum by (interface) ({disk_rate('fspair_disk_submissions_total')})", "{{interface}}"),
                Query(f"sum({disk_rate('fspair_disk_io_uring_punted_total')})", "io_uring punted"),
            ],
            width=12,
        ),
        timeseries_panel(
            "Request errors",
            "Requests on the image file that failed, per second and operation (fspair_disk_request_errors_total). "
            "An operation's series starts with its first failure: no data means no request has failed since fspair "
            "started following the disk.",
            "ops",
            [Query(f"sum by (op) ({disk_rate('fspair_disk_request_errors_total')})", "{{op}}")],
            width=12,
        ),
    ]


def _sizes_and_seeks() -> list[PanelBuilder]:
    return [
        heatmap_panel(
            "Read request size",
            'Distribution of read request sizes on the image file (fspair_disk_request_size_bytes{op="read"}).',
            "bytes",
            Query(buckets("fspair_disk_request_size_bytes", 'op="read"')),
            width=12,
        ),
        heatmap_panel(
            "Write request size",
            'Distribution of write request sizes on the image file (fspair_disk_request_size_bytes{op="write"}).',
            "bytes",
            Query(buckets("fspair_disk_request_size_bytes", 'op="write"')),
            width=12,
        ),
        heatmap_panel(
            "Seek distance from the previous request",
            "Signed distance in bytes from the end of the previous request to the start of this one "
            '(fspair_disk_seek_distance_bytes{reference="previous"}); 0 is a sequential stream. '
            "A sample of one request in 8: the counts are about an eighth of the requests.",
            "bytes",
            Query(buckets("fspair_disk_seek_distance_bytes", 'reference="previous"')),
            width=12,
        ),
        heatmap_panel(
            "Seek distance from the nearest of the last 16 requests",
            'Signed distance from the nearest end of the last 16 requests (fspair_disk_seek_distance_bytes{reference="nearest16"}): '
            "the reference of the random/sequential split, which sees interleaved sequential streams as sequential. "
            "A sample of one request in 8: the counts are about an eighth of the requests (the split itself counts every one).",
            "bytes",
            Query(buckets("fspair_disk_seek_distance_bytes", 'reference="nearest16"')),
            width=12,
        ),
    ]


def _latency(inputs: Inputs) -> list[PanelBuilder]:
    stage_names = {"file": "image file", "host_queue": "host I/O scheduler", "device": "host device"}
    def stage_buckets(stage: str, op: str) -> str:
        # stage="file" has the slots of the request duration, whose classic
        # histogram keeps the buckets (the stage's classic one has none).
        if stage == "file":
            return buckets("fspair_disk_request_duration_seconds", f'op="{op}"')
        return buckets("fspair_disk_stage_seconds", f'stage="{stage}"', f'op="{op}"')

    heatmaps = [
        heatmap_panel(
            f"{op.capitalize()} latency: {stage_names[stage]}",
            f"Distribution of the time the disk's {op}s spent in stage {stage}. file: the image-file request as QEMU waits "
            f'for it (fspair_disk_request_duration_seconds{{op="{op}"}}); host_queue: the image\'s data requests in the host '
            f'I/O scheduler; device: their service on the host device (fspair_disk_stage_seconds{{stage="host_queue"|"device", op="{op}"}}).',
            "s",
            Query(stage_buckets(stage, op)),
        )
        for op in ("read", "write")
        for stage in ("file", "host_queue", "device")
    ]
    queue = 'stage="host_queue"'
    host_queue = (
        f"sum by (stage, op) ({hist_rate(disk_rate, 'fspair_disk_stage_seconds', 'sum', queue)})\n/\n"
        f"(sum by (stage, op) ({hist_rate(disk_rate, 'fspair_disk_stage_seconds', 'count', queue)}) > 0)"
    )
    return [
        timeseries_panel(
            "Mean latency by stage",
            "Mean latency of reads and writes per stage over 5m: the image file (what QEMU waits for), the host I/O scheduler "
            "and the host device (domain_disk:fspair_disk_stage_seconds:mean5m; the scheduler stage from "
            'fspair_disk_stage_seconds{stage="host_queue"}). The file stage minus the other two is the host file system\'s share.',
            "s",
            [
                Query(disk_rule("domain_disk:fspair_disk_stage_seconds:mean5m"), "{{stage}} {{op}}"),
                Query(host_queue, "{{stage}} {{op}}"),
            ],
            width=8,
        ),
        timeseries_panel(
            "Host-FS latency overhead",
            "Mean image-file latency per mean host-device latency, by operation, over 5m and 1h "
            "(domain_disk:fspair_hostfs_latency_overhead:ratio_rate5m, :ratio_rate1h): 1 means the host file system adds nothing.",
            "none",
            [
                Query(disk_rule("domain_disk:fspair_hostfs_latency_overhead:ratio_rate5m"), "{{op}} (5m)"),
                Query(disk_rule("domain_disk:fspair_hostfs_latency_overhead:ratio_rate1h"), "{{op}} (1h)"),
            ],
            width=8,
        ),
        timeseries_panel(
            "Host-FS latency overhead against the best pair",
            "The disk's host-FS latency overhead (1h) per the median of the best pair seen in the fleet for its class "
            "(domain_disk:fspair_hostfs_latency_overhead_vs_best:ratio_rate1h). FspairHostFSLatencyOverheadHigh fires above "
            f"{inputs.thresholds.latency_overhead_vs_best:g} (dashed line).",
            "none",
            [
                Query(
                    disk_rule("domain_disk:fspair_hostfs_latency_overhead_vs_best:ratio_rate1h"),
                    "{{op}} against {{best_pair}}",
                )
            ],
            width=8,
            limit=inputs.thresholds.latency_overhead_vs_best,
        ),
        *heatmaps,
    ]


def _flushes(inputs: Inputs) -> list[PanelBuilder]:
    limit = inputs.thresholds.mail_flush_latency_seconds
    return [
        timeseries_panel(
            "Flushes and durable writes",
            "Flushes (fdatasync on the image) and writes that had to be durable, per second over 5m "
            '(domain_disk:fspair_disk_requests:rate5m{op="flush"}, domain_disk:fspair_disk_sync_writes:rate5m).',
            "ops",
            [
                Query(disk_rule("domain_disk:fspair_disk_requests:rate5m", 'op="flush"'), "flushes"),
                Query(disk_rule("domain_disk:fspair_disk_sync_writes:rate5m"), "durable writes"),
            ],
            width=8,
        ),
        timeseries_panel(
            "Mean flush latency",
            "Mean time a flush on the image file took over 5m and 1h (domain_disk:fspair_disk_request_duration_seconds:mean5m, "
            f":mean1h). FspairMailFlushLatencyHigh fires above {limit:g} s (dashed line) when the disk runs a mail workload.",
            "s",
            [
                Query(disk_rule("domain_disk:fspair_disk_request_duration_seconds:mean5m"), "5m"),
                Query(disk_rule("domain_disk:fspair_disk_request_duration_seconds:mean1h"), "1h"),
            ],
            width=8,
            limit=limit,
        ),
        heatmap_panel(
            "Flush latency",
            'Distribution of flush latency on the image file (fspair_disk_request_duration_seconds{op="flush"}).',
            "s",
            Query(buckets("fspair_disk_request_duration_seconds", 'op="flush"')),
        ),
        timeseries_panel(
            "Flushes per write",
            "Flush requests per write request over 5m (domain_disk:fspair_disk_flushes_per_write:ratio_rate5m).",
            "none",
            [Query(disk_rule("domain_disk:fspair_disk_flushes_per_write:ratio_rate5m"), "flushes per write")],
            width=8,
        ),
        timeseries_panel(
            "Device writes per flush",
            "Host device bytes written and device cache flushes caused per flush of the disk, over 5m: the writeback the flush "
            "forces plus the journal's commit (domain_disk:fspair_disk_flush_device_write_bytes:mean5m; cache flushes in the "
            "next panel).",
            "bytes",
            [Query(disk_rule("domain_disk:fspair_disk_flush_device_write_bytes:mean5m"), "device bytes per flush")],
            width=8,
        ),
        timeseries_panel(
            "Device cache flushes per flush",
            "Host device cache flushes (flush requests or preflush writes) each of the disk's flushes caused, over 5m "
            "(domain_disk:fspair_disk_flush_device_cache_flushes:mean5m).",
            "none",
            [Query(disk_rule("domain_disk:fspair_disk_flush_device_cache_flushes:mean5m"), "cache flushes per flush")],
            width=8,
        ),
        timeseries_panel(
            "Device writes caused by flushes, by source and kind",
            "Host device bytes per second the disk's flushes caused (fspair_disk_flush_device_write_bytes_total): source=call "
            "queued by the flushing thread (data, metadata), source=journal written by the journal threads while the flush waited.",
            "Bps",
            [
                Query(
                    f"sum by (source, kind) ({disk_rate('fspair_disk_flush_device_write_bytes_total')})",
                    "{{source}} {{kind}}",
                )
            ],
            width=24,
            stacked=True,
        ),
    ]


def _host_side(inputs: Inputs) -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "Write amplification",
            "Host device bytes written for the image plus its share of the device's journal and metadata writes, per byte the "
            "guest wrote, over 5m and 1h (domain_disk:fspair_write_amplification:ratio_rate5m, :ratio_rate1h).",
            "none",
            [
                Query(disk_rule("domain_disk:fspair_write_amplification:ratio_rate5m"), "5m"),
                Query(disk_rule("domain_disk:fspair_write_amplification:ratio_rate1h"), "1h"),
            ],
            width=8,
        ),
        timeseries_panel(
            "Write amplification against the best pair",
            "The disk's write amplification (1h) per the median of the best pair seen in the fleet for its class "
            "(domain_disk:fspair_write_amplification_vs_best:ratio_rate1h). FspairWriteAmplificationHigh fires above "
            f"{inputs.thresholds.write_amplification_vs_best:g} (dashed line).",
            "none",
            [Query(disk_rule("domain_disk:fspair_write_amplification_vs_best:ratio_rate1h"), "against {{best_pair}}")],
            width=8,
            limit=inputs.thresholds.write_amplification_vs_best,
        ),
        timeseries_panel(
            "Guest writes and what the host device wrote",
            "Bytes per second over 5m: written by the guest on the image file (domain_disk:fspair_disk_bytes:rate5m), written "
            "by the host device for the image's data (domain_disk:fspair_disk_device_bytes:rate5m), and the disk's share of "
            "the device's journal and metadata writes (domain_disk:fspair_disk_host_metadata_write_bytes:rate5m).",
            "Bps",
            [
                Query(disk_rule("domain_disk:fspair_disk_bytes:rate5m", 'op="write"'), "guest writes"),
                Query(
                    disk_rule("domain_disk:fspair_disk_device_bytes:rate5m", 'op="write"'), "device writes, image data"
                ),
                Query(
                    disk_rule("domain_disk:fspair_disk_host_metadata_write_bytes:rate5m"),
                    "device writes, journal and metadata share",
                ),
            ],
            width=8,
        ),
        timeseries_panel(
            "Host device writes by kind",
            "Bytes per second the disk's host device wrote over 5m, by kind: data (tracked images), metadata (journal and "
            "file-system metadata), other (host_device:fspair_host_device_bytes:rate5m).",
            "Bps",
            [
                Query(
                    host_device_of_disk(rule("host_device:fspair_host_device_bytes:rate5m")), "{{host_device}} {{kind}}"
                )
            ],
            width=8,
            stacked=True,
        ),
        timeseries_panel(
            "Journal commits on the host device",
            "Journal commits per second of the host file system holding the image (fspair_host_device_commits_total): jbd2 "
            "commits (ext4), log writes (XFS), transaction commits (Btrfs).",
            "ops",
            [Query(host_device_of_disk(rate("fspair_host_device_commits_total")), "{{host_device}} ({{host_fs}})")],
            width=8,
        ),
        timeseries_panel(
            "Btrfs copy-on-write",
            "Bytes per second of Btrfs ordered extents written for the image (fspair_disk_btrfs_extent_bytes_total): cow "
            "allocates new space, nocow writes in place (a NOCOW file or preallocated space). Empty on other host file systems.",
            "Bps",
            [Query(f"sum by (mode) ({disk_rate('fspair_disk_btrfs_extent_bytes_total')})", "{{mode}}")],
            width=8,
            stacked=True,
        ),
        timeseries_panel(
            "qcow2 metadata I/O",
            "Bytes per second QEMU read and wrote of the qcow2 image's own metadata (L1/L2 tables, refcounts; "
            "fspair_disk_format_metadata_bytes_total). Empty for raw images.",
            "Bps",
            [Query(f"sum by (op) ({disk_rate('fspair_disk_format_metadata_bytes_total')})", "{{op}}")],
            width=12,
        ),
        timeseries_panel(
            "Guest reads and host device reads",
            "Bytes per second over 5m read by the guest on the image file and read by the host device for the image "
            "(domain_disk:fspair_disk_bytes:rate5m, domain_disk:fspair_disk_device_bytes:rate5m): the gap is what the host "
            "page cache served.",
            "Bps",
            [
                Query(disk_rule("domain_disk:fspair_disk_bytes:rate5m", 'op="read"'), "guest reads"),
                Query(disk_rule("domain_disk:fspair_disk_device_bytes:rate5m", 'op="read"'), "device reads"),
            ],
            width=12,
        ),
    ]


def _page_cache() -> list[PanelBuilder]:
    reads = "fspair_disk_host_cache_reads_total"
    hit, hit_or_miss = 'result="hit"', 'result=~"hit|miss"'
    return [
        timeseries_panel(
            "Reads by host page-cache result",
            "Bytes per second the disk read from its image, by result in the host page cache "
            "(fspair_disk_host_cache_read_bytes_total): hit, miss, or direct (O_DIRECT, cache=none, bypasses the cache).",
            "Bps",
            [Query(f"sum by (result) ({disk_rate('fspair_disk_host_cache_read_bytes_total')})", "{{result}}")],
            width=8,
            stacked=True,
        ),
        timeseries_panel(
            "Host page-cache hit ratio",
            "Share of the disk's buffered reads the host page cache served (fspair_disk_host_cache_reads_total, hit per hit "
            "plus miss). Direct reads are left out.",
            "percentunit",
            [
                Query(
                    f"sum({disk_rate(reads, hit)})\n/\n(sum({disk_rate(reads, hit_or_miss)}) > 0)",
                    "hit ratio",
                )
            ],
            width=8,
            max_val=1,
        ),
        timeseries_panel(
            "Writes by host page-cache result",
            "Bytes per second the disk wrote, by what the host page cache did with them "
            "(fspair_disk_host_cache_write_bytes_total): absorbed (rewrote a page already dirty), dirtied (a new dirty page), "
            "direct (bypassed the cache).",
            "Bps",
            [Query(f"sum by (result) ({disk_rate('fspair_disk_host_cache_write_bytes_total')})", "{{result}}")],
            width=8,
            stacked=True,
        ),
    ]


def _layout() -> list[PanelBuilder]:
    return [
        stat_panel(
            "Virtual size",
            "The disk's size as the guest sees it (fspair_disk_virtual_size_bytes).",
            "bytes",
            [Query(disk_raw("fspair_disk_virtual_size_bytes"))],
            width=4,
        ),
        stat_panel(
            "Image file size",
            "The image file's apparent size (fspair_disk_image_apparent_bytes).",
            "bytes",
            [Query(disk_raw("fspair_disk_image_apparent_bytes"))],
            width=4,
        ),
        stat_panel(
            "Space allocated",
            "Space the image file takes on the host file system (fspair_disk_image_allocated_bytes, st_blocks).",
            "bytes",
            [Query(disk_raw("fspair_disk_image_allocated_bytes"))],
            width=4,
        ),
        stat_panel(
            "Allocated share of the virtual size",
            "Space allocated per byte of virtual size: below 1, a sparse or thin image that allocates as the guest writes.",
            "percentunit",
            [
                Query(
                    f"{disk_raw('fspair_disk_image_allocated_bytes')}\n/ ignoring ()\n({disk_raw('fspair_disk_virtual_size_bytes')} > 0)"
                )
            ],
            width=4,
        ),
        timeseries_panel(
            "Extents of the image file",
            "Extents of the image file on the host file system (fspair_disk_image_extents, FIEMAP, refreshed on the exporter's "
            "image refresh interval): a growing count is fragmentation, typical of copy-on-write host file systems.",
            "short",
            [Query(disk_raw("fspair_disk_image_extents"), "extents")],
            width=4,
            height=4,
        ),
        timeseries_panel(
            "Mean extent size",
            "Space allocated per extent of the image file (fspair_disk_image_allocated_bytes / fspair_disk_image_extents).",
            "bytes",
            [
                Query(
                    f"{disk_raw('fspair_disk_image_allocated_bytes')}\n/ ignoring ()\n({disk_raw('fspair_disk_image_extents')} > 0)",
                    "bytes per extent",
                )
            ],
            width=4,
            height=4,
        ),
    ]


def _libvirt() -> list[PanelBuilder]:
    # The libvirt exporter of both stacks (Debian 12's prometheus-libvirt-exporter 0.2.0, deploy/libvirt-exporter)
    # exports read and write requests and bytes per disk, no flush counts and no times: the row compares what it
    # can.
    fspair = "(fspair, image file)"
    return [
        timeseries_panel(
            "Requests per second: guest (libvirt) and image file (fspair)",
            "The same disk seen by the libvirt exporter (libvirt_domain_block_stats_*_requests_total: reads and writes the "
            "guest issued to the virtual disk) and by fspair (domain_disk:fspair_disk_requests:rate5m: requests QEMU issued "
            "on the image file, flushes included). The gap is what the VMM's own layers (qcow2 metadata, splitting, "
            "merging) add or remove.",
            "iops",
            [
                Query(libvirt_rate("read_requests_total"), "reads (libvirt, guest)"),
                Query(libvirt_rate("write_requests_total"), "writes (libvirt, guest)"),
                Query(disk_rule("domain_disk:fspair_disk_requests:rate5m"), "{{op}}s " + fspair),
            ],
            width=8,
        ),
        timeseries_panel(
            "Bytes per second: guest (libvirt) and image file (fspair)",
            "Bytes read and written per second as the libvirt exporter reports them for the virtual disk "
            "(libvirt_domain_block_stats_*_bytes_total) and as fspair sees them on the image file (domain_disk:fspair_disk_bytes:rate5m).",
            "Bps",
            [
                Query(libvirt_rate("read_bytes_total"), "reads (libvirt, guest)"),
                Query(libvirt_rate("write_bytes_total"), "writes (libvirt, guest)"),
                Query(disk_rule("domain_disk:fspair_disk_bytes:rate5m"), "{{op}}s " + fspair),
            ],
            width=8,
        ),
        timeseries_panel(
            "Mean request size: guest (libvirt) and image file (fspair)",
            "Bytes per request the guest issued to the virtual disk (libvirt exporter: *_bytes_total per *_requests_total) "
            "next to the mean request QEMU issued on the image file (domain_disk:fspair_disk_request_size_bytes:mean5m): "
            "smaller on the image file when the VMM splits requests (qcow2 clusters), larger when it merges them.",
            "bytes",
            [
                Query(
                    f"{libvirt_rate('read_bytes_total')}\n/\n({libvirt_rate('read_requests_total')} > 0)",
                    "reads (libvirt, guest)",
                ),
                Query(
                    f"{libvirt_rate('write_bytes_total')}\n/\n({libvirt_rate('write_requests_total')} > 0)",
                    "writes (libvirt, guest)",
                ),
                Query(disk_rule("domain_disk:fspair_disk_request_size_bytes:mean5m"), "{{op}}s " + fspair),
            ],
            width=8,
        ),
    ]


def _load_test() -> list[PanelBuilder]:
    # k6 writes its metrics into the same Prometheus (experimental-prometheus-rw
    # output, tests/k6): they carry no job or instance, only k6's own tags.
    return [
        timeseries_panel(
            "Load test: k6 requests per second",
            "Requests per second the k6 load test sent, and those that failed (k6_http_reqs_total written by k6's "
            "Prometheus remote-write output; empty when no k6 run writes here). Read it against the disk's panels beside it.",
            "reqps",
            [
                Query("sum(rate(k6_http_reqs_total[$__rate_interval]))", "requests"),
                # 0 while k6 runs without failures (k6 writes no series for failed requests until one fails).
                Query(
                    'sum(rate(k6_http_reqs_total{expected_response="false"}[$__rate_interval]))'
                    " or (0 * sum(rate(k6_http_reqs_total[$__rate_interval])))",
                    "failed",
                ),
            ],
            width=6,
        ),
        timeseries_panel(
            "Load test: k6 p95 latency",
            "95th percentile of k6's request duration (k6_http_req_duration_p95, with K6_PROMETHEUS_RW_TREND_STATS "
            "including p(95)): what the application's users saw while the disk below did its work.",
            "s",
            [Query("max(k6_http_req_duration_p95)", "p95")],
            width=6,
        ),
        state_panel(
            "Disk class during the load",
            "The disk's live workload class on the same time axis (domain_disk:fspair_workload_class:info), '(settling)' "
            "until it had held for the settle time (domain_disk:fspair_workload_class:settled_ratio).",
            [Query(class_with_state(*DISK), CLASS_STATE_LEGEND)],
            width=4,
            height=8,
        ),
        timeseries_panel(
            "Disk latency by stage during the load",
            "Mean latency of the disk's reads and writes on the image file and on the host device over 5m "
            "(domain_disk:fspair_disk_stage_seconds:mean5m).",
            "s",
            [Query(disk_rule("domain_disk:fspair_disk_stage_seconds:mean5m"), "{{stage}} {{op}}")],
            width=4,
        ),
        timeseries_panel(
            "Pair efficiency during the load",
            "Write amplification (host device bytes per guest byte, domain_disk:fspair_write_amplification:ratio_rate5m; "
            "none while the guest writes under 64 KiB/s, efficiency.min_guest_write_bytes_per_second) "
            "and host-FS latency overhead (image-file per device latency, domain_disk:fspair_hostfs_latency_overhead:ratio_rate5m).",
            "none",
            [
                Query(disk_rule("domain_disk:fspair_write_amplification:ratio_rate5m"), "write amplification"),
                Query(disk_rule("domain_disk:fspair_hostfs_latency_overhead:ratio_rate5m"), "latency overhead {{op}}"),
            ],
            width=4,
        ),
    ]


def build(inputs: Inputs) -> dash.Dashboard:
    d = new_dashboard(
        UID_DISK,
        "fspair / VM disk",
        "One VM disk from the guest's requests to the host device: its image and pair, the knowledge base's verdict, the "
        "path from the guest through QEMU and the image file to the device, the workload the classifier sees, request sizes and seeks, latency by stage, flushes and their cost, the host file "
        "system's journal, metadata and copy-on-write work, the host page cache, the image layout, and the libvirt "
        "exporter's view of the same disk.",
    )
    for v in _variables():
        d = d.with_variable(v)
    sections = [
        ("What the VM feels and where it goes", _what_the_vm_feels(inputs)),
        ("Disk and verdict", _identity() + _knowledge_base()),
        ("The guest path: from the guest to the device", _guest_path()),
        ("Workload", _workload()),
        ("Request size and seek distance", _sizes_and_seeks()),
        ("Latency by stage", _latency(inputs)),
        ("Flushes and their cost", _flushes(inputs)),
        ("Host side: journal, metadata, copy-on-write", _host_side(inputs)),
        ("Host page cache", _page_cache()),
        ("Image layout", _layout()),
        ("Libvirt exporter's view of the same disk", _libvirt()),
        ("Load test (k6) against the disk", _load_test()),
    ]
    for title, panels in sections:
        d = d.with_row(row(title))
        for p in panels:
            d = d.with_panel(p)
    return d
