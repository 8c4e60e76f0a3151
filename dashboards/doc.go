// Package dashboards holds fspair's Grafana dashboards. The *.json files
// are generated from dashboards/gen with the pinned grafana-foundation-sdk
// (scripts/dashboards.sh generate) and committed; the package has no code,
// only tests that lint the committed files (see README.md, "Lint rules").
package dashboards
