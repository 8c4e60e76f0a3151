// Scrape load on fspair_exporter: many scrapers at once on /metrics while
// guests do I/O (issue 6: 200 virtual users for 60 s, 0 errors, p99 < 200 ms).
//
//   k6 run -e FSPAIR_URL=http://127.0.0.1:9477/metrics tests/k6/scrape.js
//
// VUS, DURATION and BODY_EVERY (below) override the load; the thresholds are the targets and make
// k6 exit non-zero when missed.
import http from 'k6/http';
import { check } from 'k6';

const url = __ENV.FSPAIR_URL || 'http://127.0.0.1:9477/metrics';

export const options = {
  vus: Number(__ENV.VUS || 200),
  duration: __ENV.DURATION || '60s',
  // Prometheus asks for gzip; so do we, to load the exporter as a real scrape does.
  thresholds: {
    http_req_failed: ['rate==0'],
    http_req_duration: ['p(99)<200'],
    checks: ['rate==1'],
  },
  summaryTrendStats: ['avg', 'min', 'med', 'p(95)', 'p(99)', 'max'],
};

// Every BODY_EVERY-th scrape of each virtual user reads the body and checks
// it; the others read and discard it, so that k6 does not spend the CPU the
// exporter shares with it inflating and searching every response (on a
// 2-core host, reading every body cost k6 about 0.5 ms of CPU per scrape,
// four times the exporter's own cost).
const bodyEvery = Number(__ENV.BODY_EVERY || 10);

export default function () {
  const full = __ITER % bodyEvery === 0;
  const res = http.get(url, {
    headers: { 'Accept-Encoding': 'gzip', Accept: 'text/plain;version=0.0.4' },
    tags: { name: 'metrics' },
    responseType: full ? 'text' : 'none',
  });
  check(res, { 'status 200': (r) => r.status === 200 });
  if (full) {
    check(res, {
      // A scrape that lost the per-disk families is an error even if it is fast.
      'has disk series': (r) => r.body !== null && r.body.indexOf('fspair_disk_requests_total{') >= 0,
    });
  }
}
