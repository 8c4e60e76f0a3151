"""Shared builders for fspair's dashboards.

One place for the data source, the template variables, the label selectors,
the units and the panel defaults, so that every dashboard reads the same way
and dashboards/lint_test.go has one pattern to hold them to:

- every panel and query uses the data source variable $datasource;
- recording rules (rules/fspair.rules.yml) are selected on instance only, as
  the rules keep instance and drop job; raw exporter series are selected on
  job and instance through the variables;
- every rate() over a raw counter uses $__rate_interval: the windows the rules
  use (5m, 1h) are in the rules' names, and a dashboard that wants another
  window asks Grafana for one that fits the scrape interval.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import bargauge, heatmap, prometheus, stat, statetimeline, table, text, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import text as tm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

# Any panel builder, as a dashboard row takes them, and any variable builder.
PanelBuilder = cogbuilder.Builder[dm.Panel]
VariableBuilder = cogbuilder.Builder[dm.VariableModel]

# The data source every panel and query uses: the dashboard's datasource variable.
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Where the runbooks live: the alerts' runbook_url points at the same files.
RUNBOOK_BASE = "https://github.com/fspair/fspair/blob/main/runbooks/"

# The labels that name one VM disk in every per-disk series and rule: the
# libvirt exporter's disk labels plus the host (rules/gen/rules.go).
DISK_LABELS = "instance, domain, uuid, target_device, source_file"

# In a fleet (deploy/fleet) every host's Prometheus carries an external label
# host="<its name>", and the fleet dashboard answers through Thanos Query, where
# instance and image paths repeat across hosts (every host scrapes its exporter
# at localhost:9476): joins across series keep the host too. On one Prometheus
# the label is absent on both sides and the joins match as before.
HOST_LABEL = "host"
FLEET_DISK_LABELS = f"{HOST_LABEL}, {DISK_LABELS}"

# Fixed dashboard UIDs: links between the dashboards and bookmarks rely on them.
UID_FLEET = "fspair-fleet"
UID_DISK = "fspair-disk"
UID_HOSTFS = "fspair-hostfs"
UID_KDB = "fspair-kdb"

# Matchers on the template variables.
JOB = 'job=~"$job"'
INSTANCE = 'instance=~"$instance"'

# Colours of the knowledge base's verdicts, the same on every panel.
VERDICT_COLORS = {"best": "green", "contested": "orange", "worst": "red"}


def selector(metric: str, *matchers: str) -> str:
    """metric{m1, m2, ...}."""
    return f"{metric}{{{', '.join(matchers)}}}" if matchers else metric


def rule(name: str, *matchers: str) -> str:
    """A recording rule on the selected instances."""
    return selector(name, INSTANCE, *matchers)


def raw(metric: str, *matchers: str) -> str:
    """A raw exporter series on the selected job and instances."""
    return selector(metric, JOB, INSTANCE, *matchers)


def rate(metric: str, *matchers: str, fn: str = "rate") -> str:
    """fn(metric{job, instance, ...}[$__rate_interval]) over a raw counter."""
    return f"{fn}({raw(metric, *matchers)}[$__rate_interval])"


def hist_rate(rate_fn, metric: str, part: str, *matchers: str) -> str:
    """The rate of a histogram's sum or count (part), in both exposition modes:
    the classic series, or histogram_sum/histogram_count of the histogram where
    Prometheus stored it as a native one (fspair_exporter --histograms).
    Both sides carry the same labels, so "or" never doubles a series."""
    return f"({rate_fn(metric + '_' + part, *matchers)} or histogram_{part}({rate_fn(metric, *matchers)}))"


def hist_buckets(rate_fn, metric: str, *matchers: str) -> str:
    """A histogram's bucket rates summed for a heatmap, in both exposition
    modes: the native histogram where Prometheus stored one, else the classic
    buckets by le ("or on ()" takes the right side only when the left is
    empty, so a Prometheus keeping both never mixes them in one panel)."""
    return f"sum({rate_fn(metric, *matchers)}) or on () sum by (le) ({rate_fn(metric + '_bucket', *matchers)})"


def class_with_state(*matchers: str, labels: str = DISK_LABELS) -> str:
    """The disks' live class (domain_disk:fspair_workload_class:info), with the
    label state="(settling)" while the class has not held for the settle time
    (domain_disk:fspair_workload_class:settled_ratio below 1; rules/README.md):
    the legend "{{class}} {{state}}" reads "web (settling)", then "web". Every
    disk with a class has a series, settled or not, so the query is never
    empty for want of a settling disk. labels keep the disks apart."""
    info = rule("domain_disk:fspair_workload_class:info", *matchers)
    settled = rule("domain_disk:fspair_workload_class:settled_ratio", *matchers)
    return (
        f"label_replace(\n    {info}\n  and on ({labels}, class)\n    {settled} < 1,\n"
        f'  "state", "(settling)", "", ""\n)\nor on ({labels}, class)\n  {info}'
    )


# The legend of class_with_state.
CLASS_STATE_LEGEND = "{{class}} {{state}}"


def dashboard_link(uid: str, *params: str) -> str:
    """A link to another fspair dashboard keeping the data source and time range."""
    query = "&".join(("${datasource:queryparam}", "${__url_time_range}", *params))
    return f"/d/{uid}?{query}"


def disk_link_from_table() -> str:
    """The VM disk dashboard for the disk of a table row."""
    return dashboard_link(
        UID_DISK,
        "var-instance=${__data.fields.instance}",
        "var-domain=${__data.fields.domain}",
        "var-disk=${__data.fields.target_device}",
    )


def disk_link_from_series() -> str:
    """The VM disk dashboard for the disk of a time series."""
    return dashboard_link(
        UID_DISK,
        "var-instance=${__field.labels.instance}",
        "var-domain=${__field.labels.domain}",
        "var-disk=${__field.labels.target_device}",
    )


# --- template variables -------------------------------------------------------


def datasource_variable() -> dash.DatasourceVariable:
    return (
        dash.DatasourceVariable("datasource")
        .label("Data Source")
        .type("prometheus")
        .description("The Prometheus that scrapes the fspair exporters and evaluates rules/*.yml.")
    )


def query_variable(
    name: str,
    label: str,
    query: str,
    description: str,
    *,
    multi: bool = True,
) -> dash.QueryVariable:
    """A label_values() variable on $datasource, refreshed with the time range.

    A multi-value variable offers All as ".+", so that a regex matcher on it
    also matches series whose label the selection never listed.
    """
    v = (
        dash.QueryVariable(name)
        .label(label)
        .description(description)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
    )
    if multi:
        v = v.multi(True).include_all(True).all_value(".+")
    return v


def job_variable() -> dash.QueryVariable:
    return query_variable(
        "job",
        "job",
        "label_values(fspair_disks_tracked, job)",
        'Scrape jobs of fspair exporters. The recording rules read job="fspair" only; '
        "this selects the raw exporter series.",
    )


def instance_variable() -> dash.QueryVariable:
    return query_variable(
        "instance",
        "instance",
        'label_values(fspair_disks_tracked{job=~"$job"}, instance)',
        "fspair exporters (one per KVM host), by scrape address.",
    )


def standard_variables() -> list[VariableBuilder]:
    """The variables every fspair dashboard starts with."""
    return [datasource_variable(), job_variable(), instance_variable()]


def custom_variable(name: str, label: str, values: Sequence[str], description: str) -> dash.CustomVariable:
    """A multi-value variable over a fixed list (the workload classes)."""
    return (
        dash.CustomVariable(name)
        .label(label)
        .description(description)
        .values(",".join(values))
        .multi(True)
        .include_all(True)
        .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"]))
    )


# --- queries and panels ---------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str = ""


def _targets(
    queries: Sequence[Query], *, instant: bool = False, fmt: PromQueryFormat | None = None
) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    out: list[cogbuilder.Builder[cogvariants.Dataquery]] = []
    for i, q in enumerate(queries):
        t = prometheus.Dataquery().expr(q.expr).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        t = t.instant() if instant else t.range()
        if q.legend:
            t = t.legend_format(q.legend)
        if fmt is not None:
            t = t.format(fmt)
        out.append(t)
    return out


def _thresholds(limit: float | None, color: str = "red") -> dash.ThresholdsConfig:
    steps = [dm.Threshold(value=None, color="green")]
    if limit is not None:
        steps.append(dm.Threshold(value=limit, color=color))
    return dash.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps)


def _value_map(mappings: dict[str, tuple[str, str]]) -> list[dm.ValueMapping]:
    """A value mapping: value -> (text, colour)."""
    return [
        dm.ValueMap(
            options={
                k: dm.ValueMappingResult(text=t, color=c, index=i) for i, (k, (t, c)) in enumerate(mappings.items())
            }
        )
    ]


def _link(title: str, url: str) -> dash.DashboardLink:
    return dash.DashboardLink(title).url(url)


@dataclass
class Links:
    """Data links of a panel: title -> URL."""

    items: dict[str, str] = field(default_factory=dict)

    def build(self) -> list[cogbuilder.Builder[dm.DashboardLink]]:
        return [_link(t, u) for t, u in self.items.items()]


def timeseries_panel(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 12,
    height: int = 8,
    stacked: bool = False,
    limit: float | None = None,
    min_val: float | None = 0,
    max_val: float | None = None,
    links: Links | None = None,
) -> timeseries.Panel:
    """A time series panel; limit draws an alert threshold as a dashed line."""
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .targets(_targets(queries))
        .fill_opacity(25 if stacked else 8)
        .line_width(1)
        .legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .calcs(["mean", "max", "lastNotNull"])
        )
        .tooltip(common_builders.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if min_val is not None:
        p = p.min(min_val)
    if max_val is not None:
        p = p.max(max_val)
    if stacked:
        p = p.stacking(common_builders.StackingConfig().mode(cm.StackingMode.NORMAL))
    if limit is not None:
        p = p.thresholds(_thresholds(limit)).thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    if links is not None:
        p = p.data_links(links.build())
    return p


def stat_panel(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 6,
    height: int = 4,
    limit: float | None = None,
    show_name: bool = False,
) -> stat.Panel:
    """The latest value of each series; show_name prints the legend instead (a class name)."""
    p = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .targets(_targets(queries, instant=True))
        .graph_mode(cm.BigValueGraphMode.NONE)
        .color_mode(cm.BigValueColorMode.VALUE)
        .text_mode(cm.BigValueTextMode.NAME if show_name else cm.BigValueTextMode.AUTO)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(_thresholds(limit))
    )
    return p


@dataclass(frozen=True)
class Column:
    """A table column from a label or a query's value ("Value #A")."""

    field: str
    title: str
    unit: str | None = None


def table_panel(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    columns: Sequence[Column],
    *,
    width: int = 24,
    height: int = 8,
    links: Links | None = None,
    limit: float | None = None,
    sort_by: str | None = None,
    value_mappings: dict[str, tuple[str, str]] | None = None,
) -> table.Panel:
    """A table of the latest values: one row per series, the listed columns only.

    Several queries are merged on their common labels (Grafana's merge
    transformation), so they must keep the same labels; their values become
    the columns "Value #A", "Value #B", ... . value_mappings maps label values
    (verdicts) to (text, colour).
    """
    keep = [c.field for c in columns]
    transformations = []
    if len(queries) > 1:
        transformations.append(dm.DataTransformerConfig(id_val="merge", options={}))
    transformations.append(
        dm.DataTransformerConfig(
            id_val="organize",
            options={
                "excludeByName": {},
                "includeByName": {f: True for f in keep},
                "indexByName": {f: i for i, f in enumerate(keep)},
                "renameByName": {c.field: c.title for c in columns},
            },
        )
    )
    p = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .targets(_targets(queries, instant=True, fmt=PromQueryFormat.TABLE))
        .transformations(transformations)
        .thresholds(_thresholds(limit))
        .filterable(True)
    )
    for c in columns:
        if c.unit is None:
            continue
        # A value column: its unit, and with a limit a background from the
        # thresholds (the label columns stay plain).
        props = [dm.DynamicConfigValue(id_val="unit", value=c.unit)]
        if limit is not None:
            props.append(
                dm.DynamicConfigValue(
                    id_val="custom.cellOptions",
                    value=cm.TableColoredBackgroundCellOptions(mode=cm.TableCellBackgroundDisplayMode.BASIC),
                )
            )
        p = p.override_by_name(c.title, props)
    if value_mappings:
        # Mapped cells (verdicts) show in their colour, the others in the
        # text colour (the default field colour would paint them all green).
        p = (
            p.mappings(_value_map(value_mappings))
            .cell_options(cm.TableColorTextCellOptions())
            .color_scheme(dash.FieldColor().mode(dm.FieldColorModeId.FIXED).fixed_color("text"))
        )
    if sort_by is not None:
        p = p.sort_by([common_builders.TableSortByFieldState().display_name(sort_by).desc(True)])
    if links is not None:
        p = p.data_links(links.build())
    return p


def matrix_panel(
    title: str,
    description: str,
    unit: str,
    query: Query,
    *,
    width: int = 6,
    height: int = 6,
    value_mappings: dict[str, tuple[str, str]] | None = None,
) -> table.Panel:
    """A guest FS x host FS matrix of one value per pair (rows guest, columns host).

    Grafana's groupingToMatrix transformation turns the instant table of
    (guest_fs, host_fs, Value) into the matrix; the cells are coloured on a
    green-to-red scale of the panel's own range, as the ratios have no
    universal good value.
    """
    p = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .targets(_targets([query], instant=True, fmt=PromQueryFormat.TABLE))
        .transformations(
            [
                dm.DataTransformerConfig(
                    id_val="groupingToMatrix",
                    options={
                        "columnField": "host_fs",
                        "rowField": "guest_fs",
                        "valueField": "Value",
                        "emptyValue": "empty",
                    },
                )
            ]
        )
        .cell_options(cm.TableColoredBackgroundCellOptions(mode=cm.TableCellBackgroundDisplayMode.GRADIENT))
        .color_scheme(dash.FieldColor().mode(dm.FieldColorModeId.CONTINUOUS_GR_YL_RD))
    )
    if value_mappings:
        p = p.mappings(_value_map(value_mappings)).color_scheme(
            dash.FieldColor().mode(dm.FieldColorModeId.FIXED).fixed_color("text")
        )
    return p


def heatmap_panel(
    title: str,
    description: str,
    y_unit: str,
    query: Query,
    *,
    width: int = 8,
    height: int = 8,
) -> heatmap.Panel:
    """A heatmap of an exporter histogram: query sums bucket rates by le.

    The cells are requests per second in a bucket (the panel's unit); the y
    axis carries the histogram's own unit (bytes, seconds).
    """
    return (
        heatmap.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit("reqps")
        .span(width)
        .height(height)
        .targets(_targets([Query(query.expr, query.legend or "{{le}}")], fmt=PromQueryFormat.HEATMAP))
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit(y_unit).axis_placement(cm.AxisPlacement.LEFT))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(hm.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .scale(hm.HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(64)
        )
        .cell_values(heatmap.CellValues().unit("reqps"))
        .show_value(cm.VisibilityMode.NEVER)
        .mode(cm.TooltipDisplayMode.SINGLE)
        .show_y_histogram()
    )


def state_panel(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    width: int = 12,
    height: int = 6,
) -> statetimeline.Panel:
    """When each series (a class, an alert) was present: 1 present, nothing absent."""
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit("none")
        .span(width)
        .height(height)
        .targets(_targets(queries))
        .show_value(cm.VisibilityMode.NEVER)
        .merge_values(True)
        .mappings(_value_map({"1": ("present", "blue")}))
        .legend(common_builders.VizLegendOptions().show_legend(False))
    )


def bar_panel(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 12,
    height: int = 8,
    limit: float | None = None,
) -> bargauge.Panel:
    """Latest values as horizontal bars (a top-N)."""
    return (
        bargauge.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .targets(_targets(queries, instant=True))
        .orientation(cm.VizOrientation.HORIZONTAL)
        .display_mode(cm.BarGaugeDisplayMode.BASIC)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(_thresholds(limit))
        .min(0)
    )


def text_panel(title: str, description: str, markdown: str, *, width: int = 24, height: int = 6) -> text.Panel:
    return (
        text.Panel()
        .title(title)
        .description(description)
        .content(markdown)
        .mode(tm.TextMode.MARKDOWN)
        .span(width)
        .height(height)
    )


def row(title: str) -> dash.Row:
    return dash.Row(title)


# --- dashboards -------------------------------------------------------------------


def new_dashboard(uid: str, title: str, description: str) -> dash.Dashboard:
    """A dashboard with the fspair defaults: tag, time, links to the others and the runbooks."""
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["fspair"])
        .readonly()
        .timezone("browser")
        .time("now-6h", "now")
        .refresh("1m")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .link(
            dash.DashboardLink("fspair dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["fspair"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .link(
            dash.DashboardLink("Runbooks")
            .type(dm.DashboardLinkType.LINK)
            .url(RUNBOOK_BASE + "README.md")
            .icon("doc")
            .target_blank(True)
        )
    )


def render(d: dash.Dashboard) -> str:
    """The dashboard's JSON, with panel ids 1, 2, ... in layout order, less drop_unmodelled's keys.

    Grafana needs unique panel ids for links to a panel (viewPanel=) and for
    repeats; numbering them here keeps them stable between generations.
    """
    model = d.build()
    next_id = 1
    for p in model.panels or []:
        p.id_val = next_id
        next_id += 1
        for inner in getattr(p, "panels", None) or []:
            inner.id_val = next_id
            next_id += 1
    out = json.loads(JSONEncoder().encode(model))
    drop_unmodelled(out)
    return json.dumps(out, sort_keys=True, indent=2) + "\n"


class UnmodelledError(ValueError):
    """A dashboard sets something only the SDK's older model can express."""


def drop_unmodelled(d: dict) -> None:
    """Removes, in place, keys the SDK writes that Grafana 13's dashboard model lacks.

    grafana-foundation-sdk (requirements.txt: 1769699379!11.6.0) writes them
    on every dashboard; the model of @grafana/schema 13.2.3, which
    `scripts/dashboards.sh schema` checks against (README.md, "Schema
    check"), has no such keys, so they are left out here:

    - auto, auto_count, auto_min: settings of interval variables only. The
      SDK writes them on every variable; VariableModel has never listed
      them, and Grafana ignores them on other types. Kept on interval
      variables, where they mean something.
    - a table panel's options.footer: Grafana 12.2 moved the table footer
      into the field config (custom.footer). The SDK writes the old option
      with show false, which is Grafana's default (no footer), so leaving
      it out changes nothing. A footer that is shown would have to be
      written in the new form, which this SDK cannot build: that fails
      instead of writing the removed option.
    """
    for v in (d.get("templating") or {}).get("list") or []:
        if v.get("type") != "interval":
            for k in ("auto", "auto_count", "auto_min"):
                v.pop(k, None)

    def panels(ps: list) -> None:
        for p in ps:
            panels(p.get("panels") or [])
            if p.get("type") != "table":
                continue
            opts = p.get("options") or {}
            footer = opts.get("footer")
            if footer is None:
                continue
            if footer.get("show"):
                raise UnmodelledError(
                    f'table panel "{p.get("title")}" (id {p.get("id")}): options.footer is shown, '
                    "and Grafana 13's model has no options.footer (Grafana 12.2 moved it to the field config, "
                    "fieldConfig.defaults.custom.footer); hide the footer, or write it in that form "
                    "(dashboards/gen/common.py, drop_unmodelled)"
                )
            del opts["footer"]

    panels(d.get("panels") or [])
