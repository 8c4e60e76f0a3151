"""fspair / Host file systems: each host block device holding VM disk images.

Per device: the VM disks on it and which are busy, how much it writes per
guest byte (write amplification), the journal and metadata load of its file
system, and its own latency. Contention between VMs sharing a host file
system shows here first.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from common import (
    DISK_LABELS,
    UID_HOSTFS,
    Column,
    Links,
    PanelBuilder,
    Query,
    VariableBuilder,
    disk_link_from_series,
    disk_link_from_table,
    heatmap_panel,
    hist_buckets,
    hist_rate,
    new_dashboard,
    query_variable,
    rate,
    raw,
    row,
    rule,
    standard_variables,
    table_panel,
    timeseries_panel,
)
from inputs import Inputs

DEVICE = 'host_device=~"$host_device"'
LEGEND = "{{instance}} {{host_device}}"
METADATA = 'kind="metadata"'
READ = 'op="read"'


def device_rule(name: str, *matchers: str) -> str:
    return rule(name, DEVICE, *matchers)


def device_rate(metric: str, *matchers: str) -> str:
    return rate(metric, DEVICE, *matchers)


def on_device(expr: str, labels: str = "host_device, host_fs") -> str:
    """A per-disk expr with the disk's host device, kept to the selected devices."""
    return f"{expr}\n* on ({DISK_LABELS}) group_left ({labels})\n  {raw('fspair_disk_info', DEVICE)}"


def _variables() -> list[VariableBuilder]:
    return [
        *standard_variables(),
        query_variable(
            "host_device",
            "host device",
            'label_values(fspair_host_device_vm_disks{job=~"$job", instance=~"$instance"}, host_device)',
            "Host block devices that hold VM disk images.",
        ),
    ]


def _disks(inputs: Inputs) -> list[PanelBuilder]:
    t = inputs.thresholds
    iops = on_device(rule("domain_disk:fspair_disk_rw_requests:rate5m"), "host_device, host_fs, guest_fs, format")
    return [
        table_panel(
            "Host devices",
            "Each selected host block device: its file system and mount point, the VM disks on it (fspair_host_device_vm_disks), "
            f"those doing at least {t.active_iops:g} requests/s (host_device:fspair_disks_active:count5m; "
            f"FspairHostFSContention at {t.contention_active_disks:g}), and its write amplification over 1h.",
            "short",
            [
                Query(f"max by (instance, host_device, host_fs) ({raw('fspair_host_device_vm_disks', DEVICE)})"),
                Query(
                    f"max by (instance, host_device, host_fs) ({device_rule('host_device:fspair_disks_active:count5m')})"
                ),
                Query(
                    f"max by (instance, host_device, host_fs) ({device_rule('host_device:fspair_write_amplification:ratio_rate1h')})"
                ),
            ],
            [
                Column("instance", "Host"),
                Column("host_device", "Device"),
                Column("host_fs", "Host FS"),
                Column("Value #A", "VM disks", "short"),
                Column("Value #B", "Active", "short"),
                Column("Value #C", "Write amplification (1h)", "none"),
            ],
            width=12,
            sort_by="Active",
        ),
        table_panel(
            "VM disks on the selected devices",
            "The VM disks whose image lives on the selected host devices, with their requests per second over 5m "
            "(domain_disk:fspair_disk_rw_requests:rate5m) and guest file system. Click a row for the disk's dashboard.",
            "iops",
            [Query(iops)],
            [
                Column("instance", "Host"),
                Column("host_device", "Device"),
                Column("host_fs", "Host FS"),
                Column("domain", "VM"),
                Column("target_device", "Disk"),
                Column("guest_fs", "Guest FS"),
                Column("format", "Format"),
                Column("Value", "Requests/s", "iops"),
            ],
            width=12,
            links=Links({"VM disk dashboard": disk_link_from_table()}),
            sort_by="Requests/s",
        ),
        timeseries_panel(
            "Active VM disks",
            f"VM disks doing at least {t.active_iops:g} requests/s on each device (host_device:fspair_disks_active:count5m). "
            f"FspairHostFSContention fires at {t.contention_active_disks:g} (dashed line).",
            "short",
            [Query(device_rule("host_device:fspair_disks_active:count5m"), LEGEND)],
            limit=t.contention_active_disks,
        ),
        timeseries_panel(
            "Device writes per VM disk",
            "Bytes per second each VM disk's image data made the device write over 5m (domain_disk:fspair_disk_device_bytes:rate5m), "
            "stacked per device. Click a series for the disk's dashboard.",
            "Bps",
            [
                Query(
                    on_device(rule("domain_disk:fspair_disk_device_bytes:rate5m", 'op="write"')),
                    "{{host_device}} {{domain}} {{target_device}}",
                )
            ],
            stacked=True,
            links=Links({"VM disk dashboard": disk_link_from_series()}),
        ),
    ]


def _amplification() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "Write amplification per device",
            "Data and metadata bytes each device wrote per byte the guests of its VM disks wrote, over 5m and 1h "
            "(host_device:fspair_write_amplification:ratio_rate5m, :ratio_rate1h). Writes of files that are not tracked images "
            '(kind="other") are left out.',
            "none",
            [
                Query(device_rule("host_device:fspair_write_amplification:ratio_rate5m"), LEGEND + " (5m)"),
                Query(device_rule("host_device:fspair_write_amplification:ratio_rate1h"), LEGEND + " (1h)"),
            ],
        ),
        timeseries_panel(
            "Device writes by kind",
            "Bytes per second each device wrote over 5m by kind: data (tracked images), metadata (journal and file-system "
            "metadata), other (host_device:fspair_host_device_bytes:rate5m).",
            "Bps",
            [Query(device_rule("host_device:fspair_host_device_bytes:rate5m"), LEGEND + " {{kind}}")],
            stacked=True,
        ),
        timeseries_panel(
            "Metadata share of device writes",
            "Journal and metadata bytes per byte each device wrote over 5m (host_device:fspair_host_device_bytes:rate5m, "
            'kind="metadata" per all kinds): the host file system\'s own cost of keeping the images.',
            "percentunit",
            [
                Query(
                    f"{device_rule('host_device:fspair_host_device_bytes:rate5m', METADATA)}\n/ ignoring (kind)\n"
                    f"(sum without (kind) ({device_rule('host_device:fspair_host_device_bytes:rate5m')}) > 0)",
                    LEGEND,
                )
            ],
            max_val=1,
        ),
        timeseries_panel(
            "Device reads by kind",
            'Bytes per second each device read, by kind (fspair_host_device_bytes_total{op="read"}): data reads the host '
            "page cache did not absorb, and metadata reads of the host file system.",
            "Bps",
            [
                Query(
                    f"sum by (instance, host_device, kind) ({device_rate('fspair_host_device_bytes_total', READ)})",
                    LEGEND + " {{kind}}",
                )
            ],
            stacked=True,
        ),
    ]


def _journal() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "Journal commits",
            "Journal commits per second of each host file system (fspair_host_device_commits_total): jbd2 commits (ext4), log "
            "writes (XFS), transaction commits (Btrfs).",
            "ops",
            [
                Query(
                    f"sum by (instance, host_device, host_fs) ({device_rate('fspair_host_device_commits_total')})",
                    LEGEND + " ({{host_fs}})",
                )
            ],
            width=8,
        ),
        timeseries_panel(
            "Cache flushes and discards",
            "Flush requests (cache flushes without data) and discard requests each device completed per second "
            "(fspair_host_device_flushes_total, fspair_host_device_discards_total).",
            "ops",
            [
                Query(
                    f"sum by (instance, host_device) ({device_rate('fspair_host_device_flushes_total')})",
                    LEGEND + " flushes",
                ),
                Query(
                    f"sum by (instance, host_device) ({device_rate('fspair_host_device_discards_total')})",
                    LEGEND + " discards",
                ),
            ],
            width=8,
        ),
        timeseries_panel(
            "Requests by kind",
            "Requests per second each device completed, by kind and operation (fspair_host_device_requests_total).",
            "iops",
            [
                Query(
                    f"sum by (instance, host_device, kind, op) ({device_rate('fspair_host_device_requests_total')})",
                    LEGEND + " {{kind}} {{op}}",
                )
            ],
            width=8,
        ),
    ]


def _latency() -> list[PanelBuilder]:
    def mean(metric: str) -> str:
        return (
            f"sum by (instance, host_device, op) ({hist_rate(device_rate, metric, 'sum')})\n/\n"
            f"(sum by (instance, host_device, op) ({hist_rate(device_rate, metric, 'count')}) > 0)"
        )

    return [
        timeseries_panel(
            "Mean device service and queue time",
            "Mean time requests spent in each device (issue to completion; fspair_host_device_service_seconds) and waiting in "
            "the host I/O scheduler before it (fspair_host_device_queue_seconds), by operation.",
            "s",
            [
                Query(mean("fspair_host_device_service_seconds"), LEGEND + " service {{op}}"),
                Query(mean("fspair_host_device_queue_seconds"), LEGEND + " queue {{op}}"),
            ],
            width=8,
        ),
        heatmap_panel(
            "Device service time",
            "Distribution of device service time of all reads and writes on the selected devices (fspair_host_device_service_seconds).",
            "s",
            Query(hist_buckets(device_rate, "fspair_host_device_service_seconds")),
        ),
        heatmap_panel(
            "Host I/O scheduler queue time",
            "Distribution of the time requests waited in the host I/O scheduler on the selected devices (fspair_host_device_queue_seconds).",
            "s",
            Query(hist_buckets(device_rate, "fspair_host_device_queue_seconds")),
        ),
    ]


def build(inputs: Inputs) -> dash.Dashboard:
    d = new_dashboard(
        UID_HOSTFS,
        "fspair / Host file systems",
        "Each host block device holding VM disk images: the VM disks on it, contention, write amplification, journal and "
        "metadata load, and device latency.",
    )
    for v in _variables():
        d = d.with_variable(v)
    sections = [
        ("VM disks per host device", _disks(inputs)),
        ("Write amplification and metadata", _amplification()),
        ("Journal, flushes and requests", _journal()),
        ("Device latency", _latency()),
    ]
    for title, panels in sections:
        d = d.with_row(row(title))
        for p in panels:
            d = d.with_panel(p)
    return d
