// Package fleet runs fspair's lab fleet on loopback: simulated KVM hosts,
// each a synthetic fspair_exporter (tests/alerting's SyntheticTarget), its
// own Prometheus with the per-host rules (rules/fleet/fspair-host.rules.yml,
// deploy/fleet/prometheus.yml with the host's name as the external label
// host) and a Thanos sidecar; Thanos Query over the sidecars and Thanos
// Ruler, which evaluates the fleet rules (rules/fleet/fspair-fleet.rules.yml)
// through Query and sends their alerts to the Alertmanager.
//
// Thanos sidecars rather than Prometheus remote write into Thanos Receive:
// each host's Prometheus stays whole on its own (its rules, alerts and
// recent data answer without the fleet's central part), Query reads the
// hosts' latest samples straight from their TSDB heads, and nothing in the
// lab buffers or resends writes. Receive earns its place where hosts cannot
// be reached from the centre (behind NAT, short-lived): not the case of a
// KVM fleet's management network.
//
// TestFleetThroughThanos (part of make test's lab tests, about 80 s) walks the fleet dashboard through Thanos Query and waits for a
// fleet alert from the Ruler; `make fleet` (scripts/stack.sh
// fleet) runs the same lab until stopped (./lab).
package fleet
