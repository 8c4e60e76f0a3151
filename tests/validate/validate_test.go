package validate

import (
	"flag"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/alerting"
	"github.com/fspair/fspair/tests/workload"
)

var (
	flagRecord = flag.Bool("record", false, "save the results in testdata/results-<kind>.json and RESULTS.md (TestValidateFull always does)")
	flagTables = flag.Bool("tables", false, "log the per-evaluation table (class, scores, features) of every run, not only of failed ones")
)

// ciCommand repeats TestValidate.
const ciCommand = "flock /var/tmp/fspair-lab.lock go test -count=1 -v -timeout 40m ./tests/validate/ -run 'TestValidate$'"

// TestValidate is the CI subset of the lab validation of the live workload
// class (issue 4): two guests at once, ext4 on xfs (the knowledge base's
// best pair for all four workloads) and xfs on xfs (worst for mail and
// fileserver, best for web and rfa), watched by one fspair_exporter, with
// the repository's rules generated with 1 minute windows and every `for`
// scaled by 0.01 (FspairPoorPairing's hour becomes 36 s), scraped and
// evaluated every 5 s by a real Prometheus with a real Alertmanager. Each
// guest lays out the files of all four workloads, idles for one rule
// window, then runs web, mail, fileserver and rfa back to back for 150 s
// each: every run after the first is a switch of workload inside the
// running guest.
//
// For each pair and workload the class must be right on at least 90% of
// the evaluations after the warm-up (the 1 minute window plus the guest's
// 30 s write-back delay; then 60 s, one whole window of the workload
// alone: 12 evaluations), settle within 5 minutes of the switch and not
// change again; FspairPoorPairing must reach the webhook for xfs/xfs
// running mail and fileserver, with its runbook, and never be raised, not
// even pending, for ext4/xfs. Over the same minute, each run's window
// features, from the exporter scraped every 2 s, must lie in the ranges
// tests/workload's classifier is built on, and Classify must name the
// workload (workload.Mismatches; tests/workload's TestPersonalities makes
// that check with each workload alone on ext4/xfs, and ran in make test
// until this test took it over). About 13 minutes.
//
// Until 2026-11-28 the runs were 200 s with an evaluation every 10 s (11
// evaluations counted, 16 minutes): every class had settled within 46 s
// and FspairPoorPairing been delivered within 91 s of its switch
// (RESULTS.md), so the last 50 s of each run added nothing the checks
// read; evaluating every 5 s keeps the count of evaluations judged, and
// so the one wrong evaluation the 90% allows.
func TestValidate(t *testing.T) {
	c := shortWindows(config{
		kind:      KindCI,
		pairs:     []workload.Pair{mustPair(t, "ext4/xfs/raw"), mustPair(t, "xfs/xfs/raw")},
		workloads: workload.Workloads,
		record:    *flagRecord,
		tables:    *flagTables,
		command:   ciCommand,
	})
	c.eval, c.runtime = 5*time.Second, 150*time.Second
	c.features = true
	runValidation(t, c)
}

// shortWindows sets c's rules, scrape and evaluation intervals and run
// time to the short-window runs': 1m/5m windows, alerts' `for` scaled by
// 0.01, a class settled once held 10 s, scrape 5 s, rules every 10 s, 200 s
// a workload (TestValidateHeldOut; TestValidate then evaluates every 5 s
// for 150 s). The committed settle time (one window plus 60 s, 120 s here)
// would put FspairPoorPairing past the end of a 150 s run (it was
// delivered within 91 s of a switch without it); these runs check the
// class and the alert's path, rules/gen's promtool tests the settling.
func shortWindows(c config) config {
	c.rules = alerting.RuleOptions{Short: "1m", Long: "5m", ForScale: 0.01, Settle: "10s"}
	c.scrape, c.eval, c.runtime = 5*time.Second, 10*time.Second, 200*time.Second
	return c
}

func mustPair(t *testing.T, s string) workload.Pair {
	t.Helper()
	p, err := workload.ParsePair(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
