// PromQL load: the fspair dashboards' queries against Prometheus at the rate
// a team of 20 causes (issue 6). Each virtual user is one person with one
// dashboard open and auto-refresh on: every REFRESH it runs all the
// dashboard's panel queries at once over the last RANGE, as Grafana does.
//
//   k6 run -e PROM_URL=http://127.0.0.1:19090 -e QUERIES=queries.json tests/k6/promql.js
//
// QUERIES is the JSON list the dashboards expand to
// ([{"dashboard", "panel", "expr"}], variables already substituted; see
// tests/k6/README.md). USERS, REFRESH, RANGE, STEP and DURATION change the
// load; the thresholds are the targets.
import http from 'k6/http';
import { check, sleep } from 'k6';

const prom = (__ENV.PROM_URL || 'http://127.0.0.1:19090').replace(/\/$/, '');
const queries = JSON.parse(open(__ENV.QUERIES || 'queries.json'));
const refresh = Number(__ENV.REFRESH || 30); // seconds
const rangeSeconds = Number(__ENV.RANGE || 3600);
const step = Number(__ENV.STEP || 15);

// Dashboards and their queries, in a stable order.
const dashboards = {};
for (const q of queries) {
  (dashboards[q.dashboard] = dashboards[q.dashboard] || []).push(q);
}
const names = Object.keys(dashboards).sort();

export const options = {
  vus: Number(__ENV.USERS || 20),
  duration: __ENV.DURATION || '3m',
  thresholds: {
    http_req_failed: ['rate==0'],
    'http_req_duration{kind:query_range}': ['p(95)<1000'],
    checks: ['rate==1'],
  },
  summaryTrendStats: ['avg', 'med', 'p(95)', 'p(99)', 'max'],
};

export default function () {
  // People open different dashboards: user n watches dashboard n mod count.
  const name = names[(__VU - 1) % names.length];
  const end = Math.floor(Date.now() / 1000);
  const reqs = dashboards[name].map((q) => ({
    method: 'GET',
    url: `${prom}/api/v1/query_range?query=${encodeURIComponent(q.expr)}` +
      `&start=${end - rangeSeconds}&end=${end}&step=${step}`,
    params: { tags: { kind: 'query_range', dashboard: name } },
  }));
  const responses = http.batch(reqs);
  responses.forEach((res, i) => {
    check(res, {
      'query ok': (r) => r.status === 200 && r.json('status') === 'success',
    }) || console.error(`${name} / ${dashboards[name][i].panel}: ${res.status} ${String(res.body).slice(0, 200)}`);
  });
  sleep(refresh);
}
