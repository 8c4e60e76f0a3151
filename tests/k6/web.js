// Load test of a web service inside a lab VM: k6 fetches small static files
// the guest serves from its file system (and logs each request there), so
// the VM disk runs a web-like workload while fspair watches its pair.
// With k6's Prometheus remote-write output, k6's own metrics land in the
// same Prometheus as fspair's, where the disk drilldown dashboard overlays
// them (request rate, p95 latency) with the disk's class and latency.
//
//   K6_PROMETHEUS_RW_SERVER_URL=http://127.0.0.1:19090/api/v1/write \
//   K6_PROMETHEUS_RW_TREND_STATS=p(95),p(99),avg \
//   k6 run -o experimental-prometheus-rw -e BASE_URL=http://127.0.0.1:8080 -e FILES=500 tests/k6/web.js
//
// FILES is how many files /f/0.html ... the guest serves; RATE requests per
// second for DURATION. The thresholds are the service's objectives in this
// lab (a TCG guest serves a few hundred small files per second).
import http from 'k6/http';
import { check } from 'k6';

const base = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const files = Number(__ENV.FILES || 500);

export const options = {
  scenarios: {
    web: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE || 40),
      timeUnit: '1s',
      duration: __ENV.DURATION || '2m',
      preAllocatedVUs: 20,
      maxVUs: 100,
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    http_req_duration: ['p(95)<1000'],
  },
  summaryTrendStats: ['avg', 'med', 'p(95)', 'p(99)', 'max'],
};

export default function () {
  // Files are picked at random, like the web server personality's reads.
  const n = Math.floor(Math.random() * files);
  const res = http.get(`${base}/f/${n}.html`, { tags: { name: 'file' } });
  check(res, { 'status 200': (r) => r.status === 200 });
}
