// Schema check of Grafana dashboard JSON against the dashboard model that
// @grafana/schema publishes (the pinned version in package.json), without a
// Grafana server.
//
//   node check.mjs NODE_MODULES FILE...
//
// NODE_MODULES is an `npm ci` of package.json/package-lock.json (scripts/
// dashboards.sh schema keeps it outside the repository). Each dashboard is
// written as TypeScript: the dashboard as a literal of model.ts's Dashboard,
// each variable as one of its Variable, and each panel (rows and the panels
// of collapsed rows too) as a literal of the model for its plugin,
// PanelOf<type>. The TypeScript compiler then rejects unknown or misspelt
// keys (excess-property check), values of the wrong type, enum values the
// model does not list, and panel types without a model. Every diagnostic is
// mapped back to the dashboard file, the panel (title, id, type) or variable
// (name, type), and the JSON path of the offending key.
//
// Exit status: 0 all dashboards pass (one summary line on stdout), 1 some
// failed (one line per problem, then a summary, on stderr), 2 the check could
// not run.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

function fatal(msg) {
  process.stderr.write(`dashboards schema: ${msg}\n`);
  process.exit(2);
}

const [modulesDir, ...files] = process.argv.slice(2);
const option = [modulesDir, ...files].find((a) => a?.startsWith('--'));
if (!modulesDir || files.length === 0 || option) {
  fatal(`${option ? `unknown option ${option}; ` : ''}usage: node check.mjs NODE_MODULES FILE...`);
}
const modules = path.resolve(modulesDir);
const require = createRequire(path.join(modules, 'noop.js'));
let ts, schemaVersion, latestSchemaVersion;
try {
  ts = require('typescript');
  schemaVersion = require('@grafana/schema/package.json').version;
  latestSchemaVersion = require('@grafana/schema').defaultDashboard.schemaVersion;
} catch (err) {
  fatal(`cannot load typescript and @grafana/schema from ${modules} (${err.message}): run scripts/dashboards.sh schema, which installs them`);
}

// The generated sources live (in memory only) beside node_modules, so that
// '@grafana/schema' resolves as from any package there.
const root = path.join(path.dirname(modules), 'fspair-check');
const modelPath = path.join(root, 'model.ts');
const modelText = fs.readFileSync(path.join(here, 'model.ts'), 'utf8');
// The panel types model.ts knows, to spell out "keyof Panels" in messages.
const panelTypes = [...modelText.matchAll(/^\s+'?([\w-]+)'?: PanelModel</gm)].map((m) => m[1]).concat('row');

// Source is the TypeScript text of one dashboard and, for every key and
// value written, its span and JSON path, to map a diagnostic back.
class Source {
  constructor() {
    this.parts = [];
    this.pos = 0;
    this.spans = []; // {start, end, path, unit}
    this.units = []; // {start, end, unit}: one declared const, of the dashboard or a panel
  }
  write(s) {
    this.parts.push(s);
    this.pos += s.length;
  }
  // value writes v as a TypeScript literal (JSON is one) and records spans.
  value(v, p, unit) {
    const start = this.pos;
    if (Array.isArray(v)) {
      this.write('[');
      v.forEach((e, i) => {
        if (i > 0) this.write(', ');
        this.value(e, `${p}[${i}]`, unit);
      });
      this.write(']');
    } else if (v !== null && typeof v === 'object') {
      this.write('{');
      Object.entries(v).forEach(([k, e], i) => {
        if (i > 0) this.write(', ');
        const kstart = this.pos;
        const kp = /^[A-Za-z_$][\w$]*$/.test(k) ? (p ? `${p}.${k}` : k) : `${p}[${JSON.stringify(k)}]`;
        this.write(`${JSON.stringify(k)}: `);
        this.value(e, kp, unit);
        this.spans.push({ start: kstart, end: this.pos, path: kp, unit });
      });
      this.write('}');
    } else {
      this.write(JSON.stringify(v));
    }
    this.spans.push({ start, end: this.pos, path: p, unit });
  }
  text() {
    return this.parts.join('');
  }
}

function describeVariable(v, where) {
  const isObject = v !== null && typeof v === 'object';
  const name = isObject && typeof v.name === 'string' ? JSON.stringify(v.name) : '(no name)';
  const type = isObject && typeof v.type === 'string' ? `type ${v.type}; ` : '';
  return `variable ${name} (${type}${where})`;
}

function describePanel(p, where) {
  const title = typeof p.title === 'string' ? JSON.stringify(p.title) : '(no title)';
  const id = p.id === undefined ? 'no id' : `id ${JSON.stringify(p.id)}`;
  const type = typeof p.type === 'string' ? `, type ${p.type}` : '';
  return `panel ${title} (${id}${type}; ${where})`;
}

// emitDashboard writes the dashboard, each variable, and each panel (rows
// and the panels of collapsed rows too) as typed consts. A panel's options
// and fieldConfig are consts of their own: the compiler stops at the first
// wrong value in a literal and may then not report unknown keys beside it,
// so smaller literals report more problems per run.
function emitDashboard(d) {
  const src = new Source();
  src.write("import type { Dashboard, PanelOf, Variable } from './model';\n");
  let n = 0;
  const declare = (type, value, p, unit) => {
    const start = src.pos;
    src.write(`export const v${n++}: ${type} = `);
    src.value(value, p, unit);
    src.write(';\n');
    src.units.push({ start, end: src.pos, unit });
  };
  const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

  const panels = []; // [panel, where]
  const walk = (list, where) => {
    list.forEach((p, i) => {
      panels.push([p, `${where}[${i}]`]);
      if (isObject(p) && p.type === 'row' && Array.isArray(p.panels)) walk(p.panels, `${where}[${i}].panels`);
    });
  };
  const top = { ...d };
  if (Array.isArray(d.panels)) {
    walk(d.panels, 'panels');
    top.panels = [];
  }
  const variables = isObject(d.templating) && Array.isArray(d.templating.list) ? d.templating.list : [];
  if (variables.length > 0) top.templating = { ...d.templating, list: [] };
  declare('Dashboard', top, '', { what: 'dashboard', kind: 'dashboard', where: '' });
  variables.forEach((v, i) => {
    const where = `templating.list[${i}]`;
    declare('Variable', v, '', { what: describeVariable(v, where), kind: 'variable', where });
  });

  panels.forEach(([p, where]) => {
    if (!isObject(p)) {
      declare('PanelOf<"(missing)">', p, '', { what: `panel ${where}`, kind: 'panel', where });
      return;
    }
    const unit = { what: describePanel(p, where), kind: 'panel', where };
    const type = JSON.stringify(typeof p.type === 'string' ? p.type : '(missing)');
    const rest = { ...p };
    if (p.type === 'row') {
      if (Array.isArray(p.panels)) rest.panels = [];
      declare(`PanelOf<${type}>`, rest, '', unit);
      return;
    }
    for (const k of ['options', 'fieldConfig']) {
      if (!(k in p)) continue;
      delete rest[k];
      declare(`NonNullable<PanelOf<${type}>['${k}']>`, p[k], k, unit);
    }
    declare(`Omit<PanelOf<${type}>, 'options' | 'fieldConfig'>`, rest, '', unit);
  });
  return { src, panels: panels.length };
}

// locate maps a position in a generated source to its unit and JSON path.
function locate(src, pos) {
  let best = null;
  for (const s of src.spans) {
    if (s.start <= pos && pos < s.end && (!best || s.end - s.start < best.end - best.start)) best = s;
  }
  if (best) return { unit: best.unit, path: best.path };
  const u = src.units.find((u) => u.start <= pos && pos < u.end);
  return { unit: u ? u.unit : { what: 'dashboard', kind: 'dashboard' }, path: '' };
}

const options = {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  target: ts.ScriptTarget.ES2022,
  lib: ['lib.es2022.d.ts'],
  module: ts.ModuleKind.ESNext,
  moduleResolution: ts.ModuleResolutionKind.Bundler,
  types: [],
  noErrorTruncation: true,
};

const virtual = new Map([[modelPath, modelText]]);

const checked = []; // {file, name, src, panels, schemaVersion}
const problems = [];
files.forEach((file, i) => {
  const abs = path.resolve(file);
  const rel = path.relative(process.cwd(), abs);
  const name = rel.startsWith('..') ? abs : rel;
  let d;
  try {
    d = JSON.parse(fs.readFileSync(abs, 'utf8'));
  } catch (err) {
    problems.push(`${name}: ${err.code === 'ENOENT' ? 'no such file' : `not JSON: ${err.message}`}`);
    return;
  }
  if (d === null || typeof d !== 'object' || Array.isArray(d)) {
    problems.push(`${name}: not a dashboard (a JSON object)`);
    return;
  }
  const { src, panels } = emitDashboard(d);
  const tsPath = path.join(root, `dashboard${i}.ts`);
  virtual.set(tsPath, src.text());
  checked.push({ file: tsPath, name, src, panels, schemaVersion: d.schemaVersion });
});

const host = ts.createCompilerHost(options);
const getSourceFile = host.getSourceFile.bind(host);
host.getSourceFile = (f, lang, ...rest) =>
  virtual.has(f) ? ts.createSourceFile(f, virtual.get(f), lang) : getSourceFile(f, lang, ...rest);
const fileExists = host.fileExists.bind(host);
host.fileExists = (f) => virtual.has(f) || fileExists(f);
const readFile = host.readFile.bind(host);
host.readFile = (f) => (virtual.has(f) ? virtual.get(f) : readFile(f));
const directoryExists = host.directoryExists?.bind(host);
host.directoryExists = (d) => path.resolve(d) === root || (directoryExists ? directoryExists(d) : fs.existsSync(d));

const program = ts.createProgram([modelPath, ...checked.map((c) => c.file)], options, host);
const message = (d) => ts.flattenDiagnosticMessageText(d.messageText, ' ').replace(/\s+/g, ' ');

// keysAt lists the keys the model allows for the object literal around a
// position: the properties of its contextual type (of every member, for a
// union).
const checker = program.getTypeChecker();
function keysAt(sf, pos) {
  let node = sf;
  for (;;) {
    const next = node.getChildren(sf).find((n) => n.getStart(sf) <= pos && pos < n.getEnd());
    if (!next) break;
    node = next;
  }
  while (node && !ts.isObjectLiteralExpression(node)) node = node.parent;
  const type = node && checker.getContextualType(node);
  if (!type) return [];
  const names = new Set();
  for (const t of type.isUnion() ? type.types : [type]) {
    for (const p of checker.getPropertiesOfType(checker.getApparentType(t))) names.add(p.getName());
  }
  return [...names].sort();
}

// explain turns a compiler message into what was wrong and what the model
// expected, with long printed types cut short.
function explain(d, sf) {
  const text = message(d);
  const excess = /^Object literal may only specify known properties, (?:and|but) '"?(.+?)"?' does not exist in type '(.*)'\.( Did you mean to write '(.+?)'\?)?$/s.exec(text);
  if (excess) {
    const [, key, type, , hint] = excess;
    const known = keysAt(sf, d.start ?? 0);
    return `unknown key "${key}"${hint ? ` (did you mean "${hint}"?)` : ''}; the model's keys here: ${known.join(', ') || type}`;
  }
  return text
    .replace(/'keyof Panels \| "row"'/g, `'${panelTypes.map((t) => JSON.stringify(t)).join(' | ')}'`)
    .replace(/'([^']{1000})[^']+'/g, "'$1…'");
}

// model.ts must compile against the pinned package: a failure there is the
// check's own, not a dashboard's.
const own = [...program.getOptionsDiagnostics(), ...program.getGlobalDiagnostics(),
  ...program.getSyntacticDiagnostics(program.getSourceFile(modelPath)),
  ...program.getSemanticDiagnostics(program.getSourceFile(modelPath))];
if (own.length > 0) {
  fatal(`model.ts does not compile against @grafana/schema ${schemaVersion}:\n${own.map((d) => `  ${message(d)}`).join('\n')}`);
}

let failed = 0;
for (const c of checked) {
  const sf = program.getSourceFile(c.file);
  const diags = [...program.getSyntacticDiagnostics(sf), ...program.getSemanticDiagnostics(sf)];
  if (diags.length > 0) failed++;
  const seen = new Set();
  for (const d of diags) {
    const { unit, path: p } = locate(c.src, d.start ?? 0);
    if ((d.start ?? 0) < c.src.units[0].start) {
      fatal(`${c.name}: the generated check source does not compile: ${message(d)}`);
    }
    const line = `${c.name}: ${unit.what}: ${p || `(the whole ${unit.kind})`}: ${explain(d, sf)}`;
    if (!seen.has(line)) problems.push(line);
    seen.add(line);
  }
}

const panels = checked.reduce((n, c) => n + c.panels, 0);
const against = `@grafana/schema ${schemaVersion} (Grafana ${schemaVersion}, dashboard schemaVersion ${latestSchemaVersion})`;
if (problems.length > 0) {
  process.stderr.write(problems.join('\n') + '\n');
  process.stderr.write(`dashboards schema: FAILED: ${problems.length} problem(s) in ${failed + (files.length - checked.length)} of ${files.length} dashboard(s), checked against ${against}\n`);
  process.exit(1);
}
const versions = [...new Set(checked.map((c) => c.schemaVersion))].join(', ');
process.stdout.write(`dashboards schema: ok: ${checked.length} dashboard(s), ${panels} panels checked against ${against}; the dashboards' schemaVersion: ${versions}\n`);
