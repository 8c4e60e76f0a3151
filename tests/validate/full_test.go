//go:build validate

package validate

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/alerting"
)

// The full matrix, built only with -tags validate:
//
//	flock /var/tmp/fspair-lab.lock go test -tags validate -count=1 -v -timeout 5h \
//	    ./tests/validate/ -run 'TestValidateFull$'
//
// Six pairs, two guests at a time (three batches of about 80 minutes:
// file layout, a 5 minute idle lead-in, the four workloads for 18 minutes
// each) with the production rule windows: about 4 h (estimated). -pairs,
// -workloads and -runtime narrow it; results merge into the earlier ones
// with the same settings, so one batch per invocation
// (-pairs ext4/xfs/raw,xfs/xfs/raw) lets other lab users have the lock in
// between.
var (
	flagPairs     = flag.String("pairs", "ext4/xfs/raw,xfs/xfs/raw,btrfs/btrfs/raw,ext4/btrfs/raw,xfs/ext4/qcow2,ext4/ext4/raw", "pairs (guest/host/format[/cache]), run two at a time in this order")
	flagWorkloads = flag.String("workloads", "web,mail,fileserver,rfa", "workloads each guest runs in turn")
	flagRuntime   = flag.Duration("runtime", 18*time.Minute, "fio runtime per workload: the 5m window plus the write-back delay, then the class's settle time (6m with the 5m window) and FspairPoorPairing's scaled `for`")
	flagShort     = flag.String("short", "5m", "short rule window (rules/gen -short)")
	flagLong      = flag.String("long", "1h", "long rule window (rules/gen -long)")
	flagForScale  = flag.Float64("for-scale", 0.1, "factor on every alert's `for` (rules/gen -for-scale): 0.1 makes FspairPoorPairing's 1h 6m")
	flagSettle    = flag.String("settle", "", "settle time (rules/gen -settle; empty: rules/classes.yaml's, one short window plus 60 s)")
	flagScrape    = flag.Duration("scrape", 5*time.Second, "scrape interval")
	flagEval      = flag.Duration("eval", 10*time.Second, "rule evaluation interval")
)

// TestValidateFull is the lab validation of issue 4 over the full matrix
// with the production rule windows (-short 5m -long 1h) and
// FspairPoorPairing's `for` scaled to fit in a run. It checks what
// TestValidate checks, on every pair, and always records its results in
// testdata/results-full.json and RESULTS.md.
func TestValidateFull(t *testing.T) {
	pairs, err := parsePairs(*flagPairs)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := parseWorkloads(*flagWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	runValidation(t, config{
		kind:      KindFull,
		pairs:     pairs,
		workloads: ws,
		rules:     alerting.RuleOptions{Short: *flagShort, Long: *flagLong, ForScale: *flagForScale, Settle: *flagSettle},
		scrape:    *flagScrape,
		eval:      *flagEval,
		runtime:   *flagRuntime,
		record:    true,
		tables:    *flagTables,
		command: fmt.Sprintf("flock /var/tmp/fspair-lab.lock go test -tags validate -count=1 -v -timeout 5h ./tests/validate/ -run 'TestValidateFull$' -pairs %s -workloads %s -runtime %s -short %s -long %s -for-scale %g -settle '%s'",
			*flagPairs, *flagWorkloads, *flagRuntime, *flagShort, *flagLong, *flagForScale, *flagSettle),
	})
}
