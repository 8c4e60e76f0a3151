"""fspair / Knowledge base: the published verdicts on guest/host pairs beside this site's own.

The published table is written into the dashboard from rules/kdb/pairs.yaml
when the dashboards are generated, whole. Beside it: the verdicts in force
(fspair_kdb_pair_verdict, whose source says which one the rules act on), the
pairs where the published and the site verdicts differ (the series carry the
other one's verdict as published_verdict or site_verdict), this site's
measured verdicts and figures, and the fleet's live efficiency per pair next
to the verdict on that pair.
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
# A site verdict may also say that its measurement could not call the pair (rules/kdb/site.yaml).
SITE_VERDICT_MAPPINGS = {**VERDICT_MAPPINGS, "not_distinguishable": ("not distinguishable", "blue")}

# The knowledge base's verdicts keyed by class instead of workload, for joins
# with the live class of the rules (the same relabelling rules/fspair.rules.yml does).
VERDICT_BY_CLASS = 'label_replace(fspair_kdb_pair_verdict, "class", "$1", "workload", "(.+)")'

# The pairs both sources rated, with each one's verdict as labels published and site (the
# series carry the one not in force as published_verdict or site_verdict).
SIDE_BY_SIDE = (
    f'label_replace(label_replace(fspair_kdb_pair_verdict{{{WORKLOAD}, source="site", published_verdict!=""}},'
    ' "site", "$1", "verdict", "(.+)"), "published", "$1", "published_verdict", "(.+)")\n'
    f'or label_replace(label_replace(fspair_kdb_pair_verdict{{{WORKLOAD}, source!="site", site_verdict!=""}},'
    ' "published", "$1", "verdict", "(.+)"), "site", "$1", "site_verdict", "(.+)")'
)

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
            "entry: best and worst guest/host pairs per workload and the workload's character. The advice in force is in "
            "the Workloads panel: the rules derive it from the verdicts in force.",
            published_markdown(inputs),
            width=12,
            height=30,
        ),
        table_panel(
            "Verdicts in force",
            "The verdicts the rules use now (fspair_kdb_pair_verdict): the published ones, except where this site's own "
            "measurement replaced one (source=site: a measured verdict at rules/gen's confidence floor or above, or one the "
            "site asserts by hand; rules/README.md). Published / Site: the other source's verdict on the pair where both "
            "rated it. "
            "better_pairs: the workload's best pairs, standouts first.",
            "none",
            [Query(f"fspair_kdb_pair_verdict{{{WORKLOAD}}}")],
            [
                Column("workload", "Workload"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("verdict", "Verdict"),
                Column("standout", "Singled out"),
                Column("source", "Source"),
                Column("published_verdict", "Published"),
                Column("site_verdict", "Site"),
                Column("better_pairs", "Better pairs (guest/host)"),
            ],
            width=12,
            height=14,
            value_mappings=SITE_VERDICT_MAPPINGS,
        ),
        table_panel(
            "Published and site verdicts side by side",
            "The pairs both the published studies and this site rated, per workload: the published verdict and the site's, "
            "and which one the rules act on (In force, with its source). The site's replaces the published one when "
            "measured at rules/gen's confidence floor or above (rules/README.md); a not_distinguishable or less confident "
            "site verdict leaves the published one in force. Empty until the site measures a pair the studies rated.",
            "none",
            [Query(SIDE_BY_SIDE)],
            [
                Column("workload", "Workload"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("published", "Published"),
                Column("site", "Site"),
                Column("verdict", "In force"),
                Column("source", "Source"),
            ],
            width=12,
            height=8,
            value_mappings=SITE_VERDICT_MAPPINGS,
        ),
        table_panel(
            "This site's measured verdicts",
            'Verdicts from this site\'s own measurements (rules/kdb/site.yaml, source="site") that replace the published '
            "verdict on the same workload and pair (Published: the one replaced). Empty until the site records one.",
            "none",
            [Query(f'fspair_kdb_pair_verdict{{{WORKLOAD}, source="site"}}')],
            [
                Column("workload", "Workload"),
                Column("guest_fs", "Guest FS"),
                Column("host_fs", "Host FS"),
                Column("verdict", "Verdict"),
                Column("standout", "Singled out"),
                Column("published_verdict", "Published"),
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
            "The workloads the knowledge base covers, their best pairs and the advice (fspair_kdb_workload_info), both "
            "derived from the verdicts in force: the advice names a file system in a layer only where every pair rated "
            "with it there has the same verdict, and the pairs otherwise.",
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
            "The published study's verdict on each file system inside the VM (layer=guest) and on the host (layer=host), per "
            "workload (fspair_kdb_fs_verdict), as the study summarises its table; a site's measurements do not change it.",
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
