// Package validate is the lab validation of fspair's live workload
// classification (issue 4): real guests run the four workloads of the
// knowledge base, fspair_exporter watches their image files, a real
// Prometheus evaluates the repository's rules (generated at test time from
// rules/classes.yaml and rules/kdb by rules/gen, never a committed copy),
// and a real Alertmanager delivers alerts to a webhook in the test.
//
// Guests run two at a time (a TCG guest keeps one of the machine's two
// cores busy). Each lays out the files of every workload first
// (workload.Prepare), idles for one rule window, then runs the workloads
// back to back (workload.Run), so that each run after the first is a
// switch of workload inside the running guest. The file layout is not
// repeated between runs: it is a burst of synchronous writes that would
// stay in the rule window after the switch. Clean is not needed: the
// guest and its image go when the batch ends.
//
// What is checked, per guest/host pair and workload:
//
//   - the class the recording rule domain_disk:fspair_workload_class:info
//     writes for the guest's disk names the workload on at least 90% of
//     the rule evaluations after the warm-up (the short rule window plus
//     the guest's 30 s write-back delay);
//   - after each switch of workload inside the running guest the class
//     settles on the new workload within 5 minutes and, once right, does
//     not change again (no flapping);
//   - FspairPoorPairing reaches the webhook, through the Alertmanager and
//     with its runbook_url, for a workload running on a pair the knowledge
//     base (fspair_kdb_pair_verdict) calls worst for it, and is never
//     raised, not even pending, for a class the pair is not worst for.
//
// The class is read as the rule wrote it, one sample per evaluation
// (Prom.Samples), not resampled; Analyze turns the samples of one run into
// an Outcome and Criteria.Check holds it against the acceptance criteria.
// A failed run logs every evaluation with the class scores and the
// features the scores use, which is what the classifier's thresholds in
// rules/classes.yaml are tuned from.
//
// Two tests boot guests (root, QEMU, loop devices; they fail, never skip,
// without them). Run either under the lab lock:
//
//	# CI subset, ~12 min: ext4/xfs and xfs/xfs side by side, 1m/5m windows,
//	# every `for` x0.01, 150 s per workload, rules every 5 s
//	flock /var/tmp/fspair-lab.lock go test -count=1 -v -timeout 40m ./tests/validate/ -run 'TestValidate$'
//
//	# full matrix, ~4 h (estimated): six pairs two at a time, production windows
//	# (5m/1h), FspairPoorPairing's 1h `for` x0.1, 18 min per workload (6m of it the settle time)
//	flock /var/tmp/fspair-lab.lock go test -tags validate -count=1 -v -timeout 5h ./tests/validate/ -run 'TestValidateFull$'
//
// The full run records its results in testdata/results-full.json and the
// generated part of RESULTS.md; the CI subset does so for
// testdata/results-ci.json with -record. A full run merges its pairs into
// the earlier full results with the same settings, so the matrix can run
// one batch per invocation (-pairs a,b), releasing the lab lock in
// between. -tables logs the per-evaluation table of every run, not only
// of failed ones.
package validate
