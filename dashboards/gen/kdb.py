"""fspair / Knowledge base: the published verdicts on guest/host pairs beside this site's own.

The published table is written into the dashboard from rules/kdb/pairs.yaml
when the dashboards are generated: once this site measures a pair
(rules/kdb/site.yaml) its verdict replaces the published one in the
fspair_kdb_* series, so the series alone could not show both. Beside it: the
verdicts in force, this site's measured verdicts and figures, and the fleet's
live efficiency per pair next to the verdict on that pair.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from common import (
    INSTANCE,
    UID_KDB,
    VERDICT_COLORS,
    Column,
    PanelBuilder,
    Query,
    custom_variable,
    matrix_panel,
    new_dashboard,
    row,
    standard_variables,
    table_panel,
    text_panel,
)
from inputs import Inputs, Workload

WORKLOAD = 'workload=~"$workload"'
CLASS = 'class=~"$workload"'
VERDICT_MAPPINGS = {v: (v, c) for v, c in VERDICT_COLORS.items()}

# The knowledge base's verdicts keyed by class instead of workload, for joins
# with the live class of the rules (the same relabelling rules/fspair.rules.yml does).
VERDICT_BY_CLASS = 'label_replace(fspair_kdb_pair_verdict, "class", "$1", "workload", "(.+)")'

# A verdict as a number for the matrix cells (value mappings turn it back): best 1, contested 0, worst -1.
VERDICT_VALUE = (
    f'1 * fspair_kdb_pair_verdict{{{WORKLOAD}, verdict="best"}}'
    f' or 0 * fspair_kdb_pair_verdict{{{WORKLOAD}, verdict="contested"}}'
    f' or -1 * fspair_kdb_pair_verdict{{{WORKLOAD}, verdict="worst"}}'
)
VERDICT_VALUE_MAPPINGS = {
    "1": ("best", VERDICT_COLORS["best"]),
    "0": ("contested", VERDICT_COLORS["contested"]),
    "-1": ("worst", VERDICT_COLORS["worst"]),
}


def _cell(w: Workload, guest: str, host: str) -> str:
    for p in w.pairs:
        if (p.guest_fs, p.host_fs) == (guest, host):
            return f"**{p.verdict}**" if p.standout else p.verdict
    return "·"


def _workload_markdown(w: Workload) -> str:
    guests = sorted({p.guest_fs for p in w.pairs})
    hosts = sorted({p.host_fs for p in w.pairs})
    lines = [
        f"#### {w.name} ({w.source})",
        "",
        w.character,
        "",
        f"*Advice:* {w.advice}",
        "",
        "| guest \\ host | " + " | ".join(hosts) + " |",
        "|---|" + "---|" * len(hosts),
    ]
    lines += [f"| {g} | " + " | ".join(_cell(w, g, h) for h in hosts) + " |" for g in guests]
    return "\n".join(lines)


def published_markdown(inputs: Inputs) -> str:
    """The published table, one guest x host matrix per workload, with its sources."""
    parts = [
        "Verdicts per guest file system (rows) and host file system (columns) as published; **bold**: the source singles "
        "the pair out; ·: not covered. From rules/kdb/pairs.yaml when the dashboards were generated.",
    ]
    parts += [_workload_markdown(w) for w in inputs.workloads]
    parts.append("#### Sources\n\n" + "\n".join(f"- **{k}**: {v}" for k, v in sorted(inputs.sources.items())))
    return "\n\n".join(parts)


def _beside_verdict(expr: str) -> str:
    """A per-(class, pair) fleet figure with the knowledge base's verdict on that pair."""
    return f"max by (class, guest_fs, host_fs, verdict, source) (\n  {expr}\n  * on (class, guest_fs, host_fs) group_left (verdict, source)\n    {VERDICT_BY_CLASS}\n)"


def _published_and_site(inputs: Inputs) -> list[PanelBuilder]:
    return [
        text_panel(
            "Published table",
            "The knowledge base as published (rules/kdb/pairs.yaml at generation time), before any site verdict replaces an "
            "entry: best and worst guest/host pairs per workload, the workload's character and the advice.",
            published_markdown(inputs),
            width=12,
            height=30,
        ),
        table_panel(
            "Verdicts in force",
            "The verdicts the rules use now (fspair_kdb_pair_verdict): the published ones, except where this site's own "
            "measurement replaced one (source=site). better_pairs: the workload's best pairs, standouts first.",
            "none",
            [Query(f"fspair_kdb_pair_verdict{{{WORKLOAD}}}")],
            [
                Column("workload", "Workload"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("verdict", "Verdict"),
                Column("standout", "Singled out"),
                Column("source", "Source"),
                Column("better_pairs", "Better pairs (guest/host)"),
            ],
            width=12,
            height=14,
            value_mappings=VERDICT_MAPPINGS,
        ),
        table_panel(
            "This site's measured verdicts",
            'Verdicts from this site\'s own measurements (rules/kdb/site.yaml, source="site"), which replace the published '
            "verdict on the same workload and pair. Empty until the site records one.",
            "none",
            [Query(f'fspair_kdb_pair_verdict{{{WORKLOAD}, source="site"}}')],
            [
                Column("workload", "Workload"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("verdict", "Verdict"),
                Column("standout", "Singled out"),
            ],
            width=6,
            height=8,
            value_mappings=VERDICT_MAPPINGS,
        ),
        table_panel(
            "This site's measured figures",
            "The figures behind the site's verdicts (fspair_kdb_site_measurement): the figure's name carries its unit "
            "(throughput_bytes_per_second, write_amplification_ratio, ...), date is when it was measured.",
            "short",
            [Query(f"fspair_kdb_site_measurement{{{WORKLOAD}}}")],
            [
                Column("workload", "Workload"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("figure", "Figure"),
                Column("Value", "Value", "short"),
                Column("date", "Date"),
            ],
            width=6,
            height=8,
        ),
    ]


def _against_fleet() -> list[PanelBuilder]:
    median_wa = "class_pair:fspair_write_amplification:median_ratio_rate1h{" + CLASS + "}"
    disks = "class_pair:fspair_disks:count{" + CLASS + "}"
    median_lat = "class_pair:fspair_hostfs_latency_overhead:median_ratio_rate1h{" + CLASS + ', op="write"}'
    return [
        table_panel(
            "Published verdicts beside the fleet's measurements",
            "For each workload class and pair the fleet runs and the knowledge base covers: the verdict in force, the active "
            "VM disks, and their median write amplification and host-FS write latency overhead over 1h (class_pair:* rules). "
            "A best pair measuring worse than a worst pair of the same class is worth a site measurement.",
            "none",
            [Query(_beside_verdict(disks)), Query(_beside_verdict(median_wa)), Query(_beside_verdict(median_lat))],
            [
                Column("class", "Class"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("verdict", "Verdict"),
                Column("source", "Source"),
                Column("Value #A", "VM disks", "short"),
                Column("Value #B", "Median write amplification", "none"),
                Column("Value #C", "Median write latency overhead", "none"),
            ],
            width=12,
            value_mappings=VERDICT_MAPPINGS,
            sort_by="Median write amplification",
        ),
        table_panel(
            "This site's disks by verdict",
            "VM disks on the selected hosts per live class, pair and the knowledge base's verdict on that pair "
            "(domain_disk:fspair_pair_verdict:info).",
            "short",
            [
                Query(
                    f"count by (class, guest_fs, host_fs, verdict, source) (domain_disk:fspair_pair_verdict:info{{{INSTANCE}, {CLASS}}})"
                )
            ],
            [
                Column("class", "Class"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("verdict", "Verdict"),
                Column("source", "Source"),
                Column("Value", "VM disks", "short"),
            ],
            width=12,
            value_mappings=VERDICT_MAPPINGS,
            sort_by="VM disks",
        ),
    ]


def _matrices() -> list[PanelBuilder]:
    return [
        matrix_panel(
            "Verdict in force: $workload",
            "The verdict on each pair for workload $workload (fspair_kdb_pair_verdict), guest file system in rows, host in "
            "columns. Empty cells: not covered.",
            "none",
            Query(VERDICT_VALUE),
            width=8,
            value_mappings=VERDICT_VALUE_MAPPINGS,
        ),
        matrix_panel(
            "Fleet median write amplification: $workload",
            "What the fleet measures for the same pairs: median write amplification over 1h of the active $workload disks "
            "(class_pair:fspair_write_amplification:median_ratio_rate1h).",
            "none",
            Query("class_pair:fspair_write_amplification:median_ratio_rate1h{" + CLASS + "}"),
            width=8,
        ),
        matrix_panel(
            "Fleet VM disks: $workload",
            "Active VM disks of class $workload per pair (class_pair:fspair_disks:count): how much evidence each fleet cell has.",
            "short",
            Query("class_pair:fspair_disks:count{" + CLASS + "}"),
            width=8,
        ),
    ]


def _reference() -> list[PanelBuilder]:
    return [
        table_panel(
            "Workloads",
            "The workloads the knowledge base covers, their best pairs and the advice (fspair_kdb_workload_info).",
            "none",
            [Query(f"fspair_kdb_workload_info{{{WORKLOAD}}}")],
            [
                Column("workload", "Workload"),
                Column("best_pairs", "Best pairs (guest/host)"),
                Column("advice", "Advice"),
                Column("source", "Source"),
            ],
            width=16,
        ),
        table_panel(
            "File systems per layer",
            "The verdict on each file system inside the VM (layer=guest) and on the host (layer=host), per workload (fspair_kdb_fs_verdict).",
            "none",
            [Query(f"fspair_kdb_fs_verdict{{{WORKLOAD}}}")],
            [
                Column("workload", "Workload"),
                Column("layer", "Layer"),
                Column("fs", "File system"),
                Column("verdict", "Verdict"),
                Column("source", "Source"),
            ],
            width=8,
            value_mappings=VERDICT_MAPPINGS,
        ),
    ]


def build(inputs: Inputs) -> dash.Dashboard:
    d = new_dashboard(
        UID_KDB,
        "fspair / Knowledge base",
        "The published verdicts on guest/host file-system pairs per workload beside this site's own: its measured verdicts "
        "(rules/kdb/site.yaml) and the fleet's live efficiency per pair.",
    )
    for v in standard_variables():
        d = d.with_variable(v)
    d = d.with_variable(
        custom_variable(
            "workload",
            "workload",
            [w.name for w in inputs.workloads],
            "Workloads of the knowledge base (the Filebench personalities of the published study); the live classes carry the same names.",
        )
    )
    sections = [
        ("Published and site verdicts", _published_and_site(inputs)),
        ("Against the fleet", _against_fleet()),
    ]
    for title, panels in sections:
        d = d.with_row(row(title))
        for p in panels:
            d = d.with_panel(p)
    d = d.with_row(row("Pairs for $workload").repeat("workload"))
    for p in _matrices():
        d = d.with_panel(p)
    d = d.with_row(row("Reference"))
    for p in _reference():
        d = d.with_panel(p)
    return d
