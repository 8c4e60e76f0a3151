// Package alerting runs fspair's alerting path for real on loopback: a
// Prometheus (the pinned one of deploy/versions.env, built by
// scripts/promstack.sh; PinnedBinary) that scrapes fspair targets and
// evaluates the repository's rules, an Alertmanager (pinned likewise)
// whose configuration is derived from
// the shipped example deploy/alertmanager/alertmanager.yml, and a webhook
// receiver in the test process that records every notification.
//
// A test starts the stack, points it at targets (a SyntheticTarget, or a
// real fspair_exporter watching lab VMs) and waits for notifications:
//
//	rules := alerting.GenerateRules(t, alerting.RuleOptions{}) // windows 1m/5m, every `for` x0.01
//	s := alerting.Start(t, alerting.Options{
//		RulesDir:      rules,
//		ScrapeTargets: []alerting.Target{{Address: exporterAddr, Labels: map[string]string{"host": "kvm1"}}},
//	})
//	a, err := s.WaitAlert(ctx, "FspairPoorPairing", map[string]string{"domain": "mail1"})
//	// a.Receiver, a.Labels, a.Annotations["runbook_url"]; s.Alerts() has
//	// every notification; s.Query(ctx, promql) reads the rules' series.
//
// Timing with those rules: a class settles within seconds of a steady
// workload (1 m window), FspairPoorPairing then needs 36 s pending and the
// Alertmanager 1 s of group_wait. With a synthetic target the whole path
// takes under a minute (TestAlertPath).
//
// Both daemons need nothing but loopback and a temporary directory; Start
// fails the test, never skips it, when a binary is missing.
package alerting
