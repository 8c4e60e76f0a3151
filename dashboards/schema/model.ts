// The dashboard model that check.mjs holds each fspair dashboard to, built
// only from the types @grafana/schema publishes (package.json pins it).
//
// The package describes Grafana's model as TypeScript: the dashboard, panel
// and field-config types, and per panel plugin an Options and (for most) a
// FieldConfig interface. check.mjs writes each dashboard as an object literal
// of these types, so the compiler's excess-property check rejects unknown or
// misspelt keys and its assignability check rejects values of the wrong type.
//
// Two adaptations, both to read JSON as Grafana reads it:
//  - Json<T>: the package declares enums (ThresholdsMode, LegendDisplayMode,
//    VariableHide, ...); JSON holds their values, so an enum becomes the union
//    of its values ("absolute" | "percentage", 0 | 1 | 2 | 3).
//  - PluginOptions<T>: a plugin's options and custom field config are merged
//    with the plugin's defaults when Grafana loads a panel, so an option left
//    out is not an error; every key is optional, at every depth, but what is
//    present must be a known key with a value of the declared type.
import type * as schema from '@grafana/schema';
import type * as annolist from '@grafana/schema/dist/esm/raw/composable/annotationslist/panelcfg/x/AnnotationsListPanelCfg_types.gen';
import type * as barchart from '@grafana/schema/dist/esm/raw/composable/barchart/panelcfg/x/BarChartPanelCfg_types.gen';
import type * as bargauge from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen';
import type * as candlestick from '@grafana/schema/dist/esm/raw/composable/candlestick/panelcfg/x/CandlestickPanelCfg_types.gen';
import type * as canvas from '@grafana/schema/dist/esm/raw/composable/canvas/panelcfg/x/CanvasPanelCfg_types.gen';
import type * as dashlist from '@grafana/schema/dist/esm/raw/composable/dashboardlist/panelcfg/x/DashboardListPanelCfg_types.gen';
import type * as debug from '@grafana/schema/dist/esm/raw/composable/debug/panelcfg/x/DebugPanelCfg_types.gen';
import type * as gauge from '@grafana/schema/dist/esm/raw/composable/gauge/panelcfg/x/GaugePanelCfg_types.gen';
import type * as geomap from '@grafana/schema/dist/esm/raw/composable/geomap/panelcfg/x/GeomapPanelCfg_types.gen';
import type * as heatmap from '@grafana/schema/dist/esm/raw/composable/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen';
import type * as histogram from '@grafana/schema/dist/esm/raw/composable/histogram/panelcfg/x/HistogramPanelCfg_types.gen';
import type * as logs from '@grafana/schema/dist/esm/raw/composable/logs/panelcfg/x/LogsPanelCfg_types.gen';
import type * as news from '@grafana/schema/dist/esm/raw/composable/news/panelcfg/x/NewsPanelCfg_types.gen';
import type * as nodegraph from '@grafana/schema/dist/esm/raw/composable/nodegraph/panelcfg/x/NodeGraphPanelCfg_types.gen';
import type * as piechart from '@grafana/schema/dist/esm/raw/composable/piechart/panelcfg/x/PieChartPanelCfg_types.gen';
import type * as stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
import type * as statetimeline from '@grafana/schema/dist/esm/raw/composable/statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen';
import type * as statushistory from '@grafana/schema/dist/esm/raw/composable/statushistory/panelcfg/x/StatusHistoryPanelCfg_types.gen';
import type * as table from '@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen';
import type * as text from '@grafana/schema/dist/esm/raw/composable/text/panelcfg/x/TextPanelCfg_types.gen';
import type * as timeseries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';
import type * as trend from '@grafana/schema/dist/esm/raw/composable/trend/panelcfg/x/TrendPanelCfg_types.gen';
import type * as xychart from '@grafana/schema/dist/esm/raw/composable/xychart/panelcfg/x/XYChartPanelCfg_types.gen';

// Json is T as it appears in JSON: enums as their values, recursively.
type Json<T> =
  0 extends 1 & T ? T // any stays any
  : T extends string ? `${T}`
  : T extends number ? (`${T}` extends `${infer N extends number}` ? N : number)
  : T extends boolean | null | undefined ? T
  : T extends ReadonlyArray<infer E> ? Array<Json<E>>
  : T extends object ? { [K in keyof T]: Json<T[K]> }
  : T;

// PluginOptions is Json<T> with every key optional at every depth.
type PluginOptions<T> =
  0 extends 1 & T ? T
  : T extends string | number | boolean | null | undefined ? Json<T>
  : T extends ReadonlyArray<infer E> ? Array<PluginOptions<E>>
  : T extends object ? { [K in keyof T]?: PluginOptions<T[K]> }
  : T;

// NoCustom is the custom field config of a plugin that publishes none.
type NoCustom = Record<string, never>;

// FieldConfig is a field's config: the standard keys of the dashboard model
// and the plugin's own under custom.
type FieldConfig<Custom> = Json<Omit<schema.FieldConfig, 'custom'>> & { custom?: PluginOptions<Custom> };

// OverrideProperty is one property of a field override: its id names a
// standard key (unit, min, ...) or a plugin key (custom.width), and its
// value has that key's type.
type OverrideProperty<Custom> =
  | { [K in keyof FieldConfig<Custom>]-?: K extends 'custom' ? never : { id: K; value?: FieldConfig<Custom>[K] } }[keyof FieldConfig<Custom>]
  | { [K in keyof Custom & string]-?: { id: `custom.${K}`; value?: PluginOptions<Custom[K]> } }[keyof Custom & string];

type FieldConfigSource<Custom> = {
  defaults: FieldConfig<Custom>;
  overrides: Array<{ matcher: Json<schema.MatcherConfig>; properties: Array<OverrideProperty<Custom>> }>;
};

// PanelModel is a panel of one plugin: the dashboard model's panel with the
// plugin's options and field config in place of the untyped ones.
type PanelModel<Type extends string, Options, Custom> =
  Json<Omit<schema.Panel, 'type' | 'options' | 'fieldConfig'>> & {
    type: Type;
    options?: PluginOptions<Options>;
    fieldConfig?: FieldConfigSource<Custom>;
  };

// Panels maps each panel plugin id (a panel's "type") to its model. The
// ids are the plugins' ids in Grafana; the types are the package's.
export interface Panels {
  annolist: PanelModel<'annolist', annolist.Options, NoCustom>;
  barchart: PanelModel<'barchart', barchart.Options, barchart.FieldConfig>;
  bargauge: PanelModel<'bargauge', bargauge.Options, NoCustom>;
  candlestick: PanelModel<'candlestick', candlestick.Options, candlestick.FieldConfig>;
  canvas: PanelModel<'canvas', canvas.Options, NoCustom>;
  dashlist: PanelModel<'dashlist', dashlist.Options, NoCustom>;
  debug: PanelModel<'debug', debug.Options, NoCustom>;
  gauge: PanelModel<'gauge', gauge.Options, NoCustom>;
  geomap: PanelModel<'geomap', geomap.Options, NoCustom>;
  heatmap: PanelModel<'heatmap', heatmap.Options, heatmap.FieldConfig>;
  histogram: PanelModel<'histogram', histogram.Options, histogram.FieldConfig>;
  logs: PanelModel<'logs', logs.Options, NoCustom>;
  news: PanelModel<'news', news.Options, NoCustom>;
  nodeGraph: PanelModel<'nodeGraph', nodegraph.Options, NoCustom>;
  piechart: PanelModel<'piechart', piechart.Options, piechart.FieldConfig>;
  stat: PanelModel<'stat', stat.Options, NoCustom>;
  'state-timeline': PanelModel<'state-timeline', statetimeline.Options, statetimeline.FieldConfig>;
  'status-history': PanelModel<'status-history', statushistory.Options, statushistory.FieldConfig>;
  table: PanelModel<'table', table.Options, table.FieldConfig>;
  text: PanelModel<'text', text.Options, NoCustom>;
  timeseries: PanelModel<'timeseries', timeseries.Options, timeseries.FieldConfig>;
  trend: PanelModel<'trend', trend.Options, trend.FieldConfig>;
  xychart: PanelModel<'xychart', xychart.Options, xychart.FieldConfig>;
}

// Row is a row panel; check.mjs checks the panels of a collapsed row one by
// one, as it does the dashboard's.
export type Row = Json<Omit<schema.RowPanel, 'panels'>> & { panels: unknown[] };

// PanelOf is the model for a panel of type T; a type no plugin above has
// fails on its "type" with the list of known ones.
export type PanelOf<T extends string> =
  T extends 'row' ? Row
  : T extends keyof Panels ? Panels[T]
  : Json<Omit<schema.Panel, 'type'>> & { type: keyof Panels | 'row' };

// Dashboard is the dashboard model; check.mjs checks its panels and
// variables separately.
export type Dashboard = Json<Omit<schema.Dashboard, 'panels' | 'templating'>> & {
  panels?: unknown[];
  templating?: { list?: unknown[] };
};

// Variable is one of the dashboard's variables (templating.list).
export type Variable = Json<schema.VariableModel>;
