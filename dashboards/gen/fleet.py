"""fspair / Fleet: every VM disk of the selected hosts, by workload class and pair.

Answers: which guest/host file-system pairs run which workloads, how
efficiently (write amplification, host-FS latency overhead, from the
fspair.fleet rules), which disks sit on a pair the knowledge base lists as
worst for their workload, which disks are furthest from the best pair seen,
which host devices are contended, and which fspair alerts fire.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from common import (
    CLASS_STATE_LEGEND,
    FLEET_DISK_LABELS,
    HOST_LABEL,
    INSTANCE,
    RUNBOOK_BASE,
    UID_FLEET,
    UID_HOSTFS,
    VERDICT_COLORS,
    Column,
    Links,
    PanelBuilder,
    Query,
    bar_panel,
    class_with_state,
    custom_variable,
    dashboard_link,
    disk_link_from_table,
    matrix_panel,
    new_dashboard,
    raw,
    row,
    rule,
    selector,
    standard_variables,
    stat_panel,
    state_panel,
    table_panel,
    timeseries_panel,
)
from inputs import Inputs

CLASS = 'class=~"$class"'
NOT_IDLE = 'class!="idle"'
WORST = 'verdict="worst"'

# The fspair alerts (rules/fspair.alerts.yml) as Prometheus records them.
FIRING = selector("ALERTS", 'alertname=~"Fspair.+"', 'alertstate="firing"', INSTANCE)

# The knowledge base's verdict as a number, so that a matrix cell can show it
# (value mappings turn it back into the word): best 1, contested 0, worst -1.
# Every host's Prometheus records the same knowledge base: one copy, whatever
# the hosts.
VERDICT_VALUE = (
    f'1 * max without ({HOST_LABEL}) (fspair_kdb_pair_verdict{{workload=~"$class", verdict="best"}})'
    f' or 0 * max without ({HOST_LABEL}) (fspair_kdb_pair_verdict{{workload=~"$class", verdict="contested"}})'
    f' or -1 * max without ({HOST_LABEL}) (fspair_kdb_pair_verdict{{workload=~"$class", verdict="worst"}})'
)

# Which host a row is on: the fleet's host label, then the exporter's instance.
HOST_COLUMNS = [Column(HOST_LABEL, "KVM host"), Column("instance", "Exporter")]
VERDICT_MAPPINGS = {
    "1": ("best", VERDICT_COLORS["best"]),
    "0": ("contested", VERDICT_COLORS["contested"]),
    "-1": ("worst", VERDICT_COLORS["worst"]),
}


def _with_class(expr: str) -> str:
    """expr per disk, with the disk's live class and pair as labels."""
    return f"{expr}\n* on ({FLEET_DISK_LABELS}) group_left (class, guest_fs, host_fs)\n  {rule('domain_disk:fspair_class_pair:info', CLASS)}"


def _overview() -> list[PanelBuilder]:
    return [
        stat_panel(
            "VM disks followed",
            "VM disks the selected exporters follow now (fspair_disks_tracked), idle or not.",
            "short",
            [Query(f"sum({raw('fspair_disks_tracked')})")],
        ),
        stat_panel(
            "Active VM disks",
            "VM disks whose live workload class is not idle (domain_disk:fspair_workload_class:info).",
            "short",
            [Query(f"count({rule('domain_disk:fspair_workload_class:info', NOT_IDLE)}) or vector(0)")],
        ),
        stat_panel(
            "VM disks on a worst pair",
            "VM disks whose live class, once settled (held for the settle time) at a confidence the rules act at "
            "(rules/classes.yaml settle.min_confidence), is one the knowledge base lists their "
            'guest/host pair as worst for (domain_disk:fspair_pair_verdict:info{verdict="worst"}). FspairPoorPairing fires for '
            "those that stay so for its `for`.",
            "short",
            [Query(f"count({rule('domain_disk:fspair_pair_verdict:info', WORST)}) or vector(0)")],
            limit=1,
        ),
        stat_panel(
            "Firing fspair alerts",
            "fspair alerts firing now on the selected hosts (ALERTS). The table at the bottom lists them with their runbooks.",
            "short",
            [Query(f"count({FIRING}) or vector(0)")],
            limit=1,
        ),
        timeseries_panel(
            "VM disks by workload class",
            "How many VM disks the classifier puts in each class over time (domain_disk:fspair_workload_class:info). "
            "mixed: active, but no workload class fits; idle: below the activity threshold. '(settling)': disks that have "
            "held their class for less than the settle time (domain_disk:fspair_workload_class:settled_ratio below 1), "
            "which no verdict, fleet figure or alert counts yet.",
            "short",
            [Query(f"count by (class, state) ({class_with_state(labels=FLEET_DISK_LABELS)})", CLASS_STATE_LEGEND)],
            width=24,
            stacked=True,
        ),
    ]


def _matrices() -> list[PanelBuilder]:
    """One row per selected workload class: the guest x host matrices."""
    return [
        matrix_panel(
            "VM disks per pair: $class",
            "Active VM disks of class $class per guest file system (rows) and host file system (columns), "
            "fleet-wide (class_pair:fspair_disks:count).",
            "short",
            Query(f"class_pair:fspair_disks:count{{{CLASS}}}"),
        ),
        matrix_panel(
            "Median write amplification per pair: $class",
            "Median write amplification over 1h of the class-$class disks of each pair: host device bytes written for the image "
            "plus its share of the device's journal and metadata writes, per byte the guest wrote "
            "(class_pair:fspair_write_amplification:median_ratio_rate1h). Lower is better.",
            "none",
            Query(f"class_pair:fspair_write_amplification:median_ratio_rate1h{{{CLASS}}}"),
        ),
        matrix_panel(
            "Median host-FS write latency overhead per pair: $class",
            "Median over the class-$class disks of each pair of the mean image-file write latency per mean host-device write "
            'latency over 1h (class_pair:fspair_hostfs_latency_overhead:median_ratio_rate1h{op="write"}): what the host file '
            "system adds on top of the device. 1 means nothing; lower is better.",
            "none",
            Query(f'class_pair:fspair_hostfs_latency_overhead:median_ratio_rate1h{{{CLASS}, op="write"}}'),
        ),
        matrix_panel(
            "Knowledge-base verdict per pair: $class",
            'The published verdict on each pair for workload $class (fspair_kdb_pair_verdict; source="site" where this site\'s '
            "own measurements replaced it, rules/kdb/site.yaml). Empty cells: the knowledge base says nothing on that pair; "
            "mixed and idle have no verdicts.",
            "none",
            Query(VERDICT_VALUE),
            value_mappings=VERDICT_MAPPINGS,
        ),
    ]


def _guest_path() -> list[PanelBuilder]:
    # The guest path's fleet series (group fspair.guest): medians by
    # guest/host pair, aio and cache mode, fleet-wide.
    def one_op(name: str, op: str) -> str:
        # One operation's column: the op label dropped, so that the table's
        # queries share their labels and merge into one row per pair and mode.
        return f'sum without (op) ({name}{{op="{op}"}})'

    columns = [
        Column("guest_fs", "Guest FS"),
        Column("host_fs", "Host FS"),
        Column("aio", "AIO"),
        Column("cache", "Cache"),
        Column("Value #A", "Disks", "short"),
        Column("Value #B", "Merge ratio (writes)", "none"),
        Column("Value #C", "Flushes elided", "percentunit"),
        Column("Value #D", "VMM share, writes", "s"),
        Column("Value #E", "VMM share, flushes", "s"),
    ]
    return [
        table_panel(
            "The guest path by pair, aio and cache mode",
            "Per guest/host pair, QEMU aio and cache mode, over the disks whose guest side fspair reads "
            "(pair_mode:fspair_disk_guest_disks:count): the median merge ratio of writes (guest requests per image-file "
            "request, pair_mode:fspair_disk_guest_merge:median_ratio_rate5m), the median share of guest flushes QEMU elided "
            "(pair_mode:fspair_disk_guest_flushes_elided:median_ratio_rate5m) and the median VMM share of the guest's write and "
            "flush latency (what QEMU adds on top of the image file, pair_mode:fspair_disk_guest_vmm_latency_seconds:median_mean5m).",
            "none",
            [
                Query("pair_mode:fspair_disk_guest_disks:count"),
                Query(one_op("pair_mode:fspair_disk_guest_merge:median_ratio_rate5m", "write")),
                Query("pair_mode:fspair_disk_guest_flushes_elided:median_ratio_rate5m"),
                Query(one_op("pair_mode:fspair_disk_guest_vmm_latency_seconds:median_mean5m", "write")),
                Query(one_op("pair_mode:fspair_disk_guest_vmm_latency_seconds:median_mean5m", "flush")),
            ],
            columns,
            height=8,
        ),
        timeseries_panel(
            "VMM share of the guest's latency by pair and mode",
            "Median over each pair and mode's disks of what QEMU adds to a guest request on top of the image file, by operation "
            "(pair_mode:fspair_disk_guest_vmm_latency_seconds:median_mean5m).",
            "s",
            [
                Query(
                    "pair_mode:fspair_disk_guest_vmm_latency_seconds:median_mean5m",
                    "{{guest_fs}}/{{host_fs}} aio={{aio}} cache={{cache}} {{op}}",
                )
            ],
        ),
        timeseries_panel(
            "Merge ratio by pair and mode",
            "Median guest requests per image-file request over each pair and mode's disks, reads and writes "
            "(pair_mode:fspair_disk_guest_merge:median_ratio_rate5m).",
            "none",
            [
                Query(
                    "pair_mode:fspair_disk_guest_merge:median_ratio_rate5m",
                    "{{guest_fs}}/{{host_fs}} aio={{aio}} cache={{cache}} {{op}}s",
                )
            ],
        ),
    ]


# The guest's latency across the fleet (group fspair.guest, rules/README.md):
# the disks with the highest guest p99, and the layer holding most of each
# one's time.
GUEST_QUANTILE_NAME = "domain_disk:fspair_disk_guest_path_latency_seconds:quantile5m"
TOP_GUEST_P99 = "fleet:fspair_disk_guest_path_latency_seconds:top20_p99_5m"
TOP_LAYER = "domain_disk:fspair_disk_guest_path_top_layer:info"
TOP_LAYER_COUNT = "layer_op:fspair_disks_guest_path_top_layer:count5m"


def _guest_latency(inputs: Inputs) -> list[PanelBuilder]:
    t = inputs.thresholds
    # The top 20 of each host's (tests/fleet: one Prometheus a host) are the
    # fleet's top 20 here.
    top = f"topk(20, {rule(TOP_GUEST_P99)})"
    # The share of the layer to blame, for the same disks and operations:
    # named top_layer and without layer and quantile, so that both queries
    # keep the same labels and the table merges them into one row.
    share = (
        f"max without (layer) (\n"
        f'    label_replace({rule(TOP_LAYER)}, "top_layer", "$1", "layer", "(.+)")\n'
        f"  and on ({FLEET_DISK_LABELS}, op)\n"
        f"    {top}\n)"
    )
    return [
        table_panel(
            "Disks by guest p99, and the layer to blame",
            "The disk/operation pairs with the highest 99th percentile of what the guest's requests took over 5m "
            f'({TOP_GUEST_P99}: the top 20 of {GUEST_QUANTILE_NAME}{{layer="guest", quantile="0.99"}}), with the layer '
            f"that holds most of the guest's mean time for that operation and its share ({TOP_LAYER}): vmm (QEMU's "
            "queueing, the virtio ring, the host scheduler), host_fs (the host file system above the device) or device "
            "(the host I/O scheduler and the device; with the host page cache a write completes before its writeback, so "
            "its share is then bounded, not measured). The layer is from means: a tail can sit elsewhere, the VM disk "
            "dashboard's first row has the percentiles by layer. Only disks with a guest histogram "
            "(fspair_disk_guest_info{histogram=\"ok\"}) and at least efficiency.min_stage_requests_per_second guest "
            "requests a second are ranked. FspairGuestLatencyHigh fires on a p99 that stays above "
            f"{t.guest_read_write_p99_seconds:g} s for reads and writes, {t.guest_flush_p99_seconds:g} s for flushes "
            "(rules/classes.yaml alerts). Click a row for the disk's dashboard.",
            "s",
            [Query(f"max without (layer, quantile) ({top})"), Query(share)],
            [
                *HOST_COLUMNS,
                Column("domain", "VM"),
                Column("target_device", "Disk"),
                Column("op", "Operation"),
                Column("Value #A", "Guest p99", "s"),
                Column("top_layer", "Layer to blame"),
                Column("Value #B", "Its share of the guest's time", "percentunit"),
            ],
            width=16,
            links=Links(
                {
                    "VM disk dashboard": disk_link_from_table(),
                    "Runbook: FspairGuestLatencyHigh": RUNBOOK_BASE + "FspairGuestLatencyHigh.md",
                }
            ),
            sort_by="Guest p99",
        ),
        bar_panel(
            "Disks by the layer holding the guest's time",
            "How many disks each layer holds most of the guest's mean time for, per operation "
            f"({TOP_LAYER_COUNT}, summed over the hosts): vmm, host_fs or device.",
            "short",
            [Query(f"sum by (layer, op) ({TOP_LAYER_COUNT})", "{{layer}} ({{op}}s)")],
            width=8,
        ),
    ]


def _worst_pairs() -> list[PanelBuilder]:
    expr = (
        f"{rule('domain_disk:fspair_workload_class:confidence')}\n"
        f"* on ({FLEET_DISK_LABELS}) group_left (class, guest_fs, host_fs, source, better_pairs)\n"
        f"  {rule('domain_disk:fspair_pair_verdict:info', WORST, CLASS)}"
    )
    return [
        table_panel(
            "VM disks on the knowledge base's worst pairs",
            "VM disks whose live class is one the knowledge base lists their guest/host file-system pair as worst for, with the "
            "classifier's confidence (domain_disk:fspair_workload_class:confidence) and the pairs it lists as better for that class "
            "(domain_disk:fspair_pair_verdict:info). Only disks whose class has settled (held for the settle time), at "
            "a confidence of at least rules/classes.yaml settle.min_confidence, have a verdict. Click a row for the disk's dashboard; runbook: FspairPoorPairing.",
            "percentunit",
            [Query(expr)],
            [
                *HOST_COLUMNS,
                Column("domain", "VM"),
                Column("target_device", "Disk"),
                Column("class", "Class"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("Value", "Confidence", "percentunit"),
                Column("better_pairs", "Better pairs (guest/host)"),
                Column("source", "Source"),
            ],
            links=Links(
                {
                    "VM disk dashboard": disk_link_from_table(),
                    "Runbook: FspairPoorPairing": RUNBOOK_BASE + "FspairPoorPairing.md",
                }
            ),
            sort_by="Confidence",
        )
    ]


def _efficiency(inputs: Inputs) -> list[PanelBuilder]:
    t = inputs.thresholds
    disk_columns = [
        *HOST_COLUMNS,
        Column("domain", "VM"),
        Column("target_device", "Disk"),
        Column("class", "Class"),
        Column("guest_fs", "Guest FS"),
        Column("host_fs", "Host FS"),
    ]
    links = Links({"VM disk dashboard": disk_link_from_table()})
    return [
        table_panel(
            "Top write amplification (1h)",
            "The ten disks whose host device wrote the most per guest byte over the last hour (image data plus the disk's share "
            "of journal and metadata writes; domain_disk:fspair_write_amplification:ratio_rate1h). Only disks writing enough "
            "for the ratio to mean something have one.",
            "none",
            [Query(f"topk(10,\n  {_with_class(rule('domain_disk:fspair_write_amplification:ratio_rate1h'))}\n)")],
            disk_columns + [Column("Value", "Write amplification", "none")],
            width=12,
            links=links,
            sort_by="Write amplification",
        ),
        table_panel(
            "Top write amplification against the best pair (1h)",
            "The ten disks furthest above the best pair seen in the fleet for their class: the disk's write amplification per "
            "that pair's median (domain_disk:fspair_write_amplification_vs_best:ratio_rate1h). Red from the "
            f"FspairWriteAmplificationHigh limit ({t.write_amplification_vs_best:g}) up.",
            "none",
            [Query(f"topk(10, {rule('domain_disk:fspair_write_amplification_vs_best:ratio_rate1h', CLASS)})")],
            disk_columns + [Column("best_pair", "Best pair"), Column("Value", "Times the best pair", "none")],
            width=12,
            links=Links(
                {
                    "VM disk dashboard": disk_link_from_table(),
                    "Runbook: FspairWriteAmplificationHigh": RUNBOOK_BASE + "FspairWriteAmplificationHigh.md",
                }
            ),
            limit=t.write_amplification_vs_best,
            sort_by="Times the best pair",
        ),
        table_panel(
            "Top host-FS latency overhead (1h)",
            "The ten disk/operation pairs with the highest mean image-file latency per mean host-device latency over the last "
            "hour (domain_disk:fspair_hostfs_latency_overhead:ratio_rate1h): the time the host file system adds.",
            "none",
            [Query(f"topk(10,\n  {_with_class(rule('domain_disk:fspair_hostfs_latency_overhead:ratio_rate1h'))}\n)")],
            disk_columns + [Column("op", "Operation"), Column("Value", "File / device latency", "none")],
            width=12,
            links=links,
            sort_by="File / device latency",
        ),
        table_panel(
            "Top host-FS latency overhead against the best pair (1h)",
            "The ten disk/operation pairs furthest above the best pair seen for their class "
            "(domain_disk:fspair_hostfs_latency_overhead_vs_best:ratio_rate1h). Red from the FspairHostFSLatencyOverheadHigh "
            f"limit ({t.latency_overhead_vs_best:g}) up.",
            "none",
            [Query(f"topk(10, {rule('domain_disk:fspair_hostfs_latency_overhead_vs_best:ratio_rate1h', CLASS)})")],
            disk_columns
            + [
                Column("op", "Operation"),
                Column("best_pair", "Best pair"),
                Column("Value", "Times the best pair", "none"),
            ],
            width=12,
            links=Links(
                {
                    "VM disk dashboard": disk_link_from_table(),
                    "Runbook: FspairHostFSLatencyOverheadHigh": RUNBOOK_BASE + "FspairHostFSLatencyOverheadHigh.md",
                }
            ),
            limit=t.latency_overhead_vs_best,
            sort_by="Times the best pair",
        ),
        timeseries_panel(
            "Median write amplification by class and pair",
            "Fleet-wide median write amplification (1h) of the disks of each class and guest/host pair "
            "(class_pair:fspair_write_amplification:median_ratio_rate1h).",
            "none",
            [
                Query(
                    f"class_pair:fspair_write_amplification:median_ratio_rate1h{{{CLASS}}}",
                    "{{class}} {{guest_fs}}/{{host_fs}}",
                )
            ],
        ),
        timeseries_panel(
            "Median host-FS latency overhead by class and pair",
            "Fleet-wide median host-FS latency overhead (1h, file per device latency) of each class, pair and operation "
            "(class_pair:fspair_hostfs_latency_overhead:median_ratio_rate1h).",
            "none",
            [
                Query(
                    f"class_pair:fspair_hostfs_latency_overhead:median_ratio_rate1h{{{CLASS}}}",
                    "{{class}} {{guest_fs}}/{{host_fs}} {{op}}",
                )
            ],
        ),
        bar_panel(
            "Best pair seen per class (write amplification)",
            "For each class, the guest/host pair with the lowest median write amplification among pairs with enough disks "
            "(class:fspair_write_amplification:best_pair_median_ratio_rate1h): the yardstick of FspairWriteAmplificationHigh.",
            "none",
            [
                Query(
                    f"class:fspair_write_amplification:best_pair_median_ratio_rate1h{{{CLASS}}}",
                    "{{class}}: {{best_pair}}",
                )
            ],
        ),
        bar_panel(
            "Best pair seen per class (host-FS latency overhead)",
            "For each class and operation, the pair with the lowest median host-FS latency overhead "
            "(class:fspair_hostfs_latency_overhead:best_pair_median_ratio_rate1h): the yardstick of FspairHostFSLatencyOverheadHigh.",
            "none",
            [
                Query(
                    f"class:fspair_hostfs_latency_overhead:best_pair_median_ratio_rate1h{{{CLASS}}}",
                    "{{class}} {{op}}: {{best_pair}}",
                )
            ],
        ),
    ]


def _contention(inputs: Inputs) -> list[PanelBuilder]:
    limit = inputs.thresholds.contention_active_disks
    active = rule("host_device:fspair_disks_active:count5m")
    return [
        timeseries_panel(
            "Active VM disks per host device",
            f"VM disks doing at least {inputs.thresholds.active_iops:g} requests/s on each host block device "
            f"(host_device:fspair_disks_active:count5m). FspairHostFSContention fires at {limit:g} (dashed line).",
            "short",
            [Query(active, "{{host}} {{instance}} {{host_device}} ({{host_fs}})")],
            limit=limit,
        ),
        table_panel(
            "Host devices",
            "Each host block device holding VM disk images: the VM disks on it (fspair_host_device_vm_disks), how many are "
            "active, and the device's write amplification over 1h (data and metadata it wrote per guest byte of its disks). "
            "Click a row for the host file systems dashboard.",
            "short",
            [
                Query(f"max by ({HOST_LABEL}, instance, host_device, host_fs) ({raw('fspair_host_device_vm_disks')})"),
                Query(f"max by ({HOST_LABEL}, instance, host_device, host_fs) ({active})"),
                Query(
                    f"max by ({HOST_LABEL}, instance, host_device, host_fs) ({rule('host_device:fspair_write_amplification:ratio_rate1h')})"
                ),
            ],
            [
                *HOST_COLUMNS,
                Column("host_device", "Device"),
                Column("host_fs", "Host FS"),
                Column("Value #A", "VM disks", "short"),
                Column("Value #B", "Active", "short"),
                Column("Value #C", "Write amplification (1h)", "none"),
            ],
            width=12,
            links=Links(
                {
                    "Host file systems dashboard": dashboard_link(
                        UID_HOSTFS,
                        "var-instance=${__data.fields.instance}",
                        "var-host_device=${__data.fields.host_device}",
                    )
                }
            ),
            sort_by="Active",
        ),
    ]


def _alerts() -> list[PanelBuilder]:
    return [
        table_panel(
            "Firing fspair alerts and their runbooks",
            "fspair alerts firing now on the selected hosts, from Prometheus's ALERTS series. Click a row for the alert's "
            "runbook (Meaning, Impact, Diagnosis, Mitigation).",
            "none",
            [Query(FIRING)],
            [
                Column("alertname", "Alert"),
                Column("severity", "Severity"),
                *HOST_COLUMNS,
                Column("domain", "VM"),
                Column("target_device", "Disk"),
                Column("host_device", "Host device"),
                Column("class", "Class"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
            ],
            width=12,
            links=Links({"Runbook": RUNBOOK_BASE + "${__data.fields.alertname}.md"}),
        ),
        state_panel(
            "fspair alerts over time",
            'When each fspair alert fired on the selected hosts (ALERTS, alertstate="firing"), one line per alert and subject.',
            [Query(FIRING, "{{alertname}} {{host}} {{instance}} {{domain}} {{target_device}} {{host_device}}")],
            height=8,
        ),
    ]


def build(inputs: Inputs) -> dash.Dashboard:
    d = new_dashboard(
        UID_FLEET,
        "fspair / Fleet",
        "Every VM disk of the selected hosts by live workload class and guest/host file-system pair: efficiency per pair, "
        "disks on the knowledge base's worst pairs, the worst write amplification and host-FS overhead, contention per host "
        "device, firing alerts. Built on the recording rules of rules/fspair.rules.yml.",
    )
    for v in standard_variables():
        d = d.with_variable(v)
    d = d.with_variable(
        custom_variable(
            "class",
            "workload class",
            inputs.classes,
            "Live workload classes (rules/classes.yaml; mixed when none fits). The pair matrices repeat per selected class.",
        )
    )
    d = d.with_row(row("Overview"))
    for p in _overview():
        d = d.with_panel(p)
    d = d.with_row(row("Guest FS × host FS: $class").repeat("class"))
    for p in _matrices():
        d = d.with_panel(p)
    d = d.with_row(row("VM disks on the knowledge base's worst pairs"))
    for p in _worst_pairs():
        d = d.with_panel(p)
    d = d.with_row(row("Write amplification and host-FS overhead"))
    for p in _efficiency(inputs):
        d = d.with_panel(p)
    d = d.with_row(row("The guest's latency: the slowest disks and the layer to blame"))
    for p in _guest_latency(inputs):
        d = d.with_panel(p)
    d = d.with_row(row("The guest path by pair, aio and cache mode"))
    for p in _guest_path():
        d = d.with_panel(p)
    d = d.with_row(row("Contention per host device"))
    for p in _contention(inputs):
        d = d.with_panel(p)
    d = d.with_row(row("Alerts"))
    for p in _alerts():
        d = d.with_panel(p)
    return d
