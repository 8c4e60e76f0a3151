//go:build validate

package validate

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fspair/fspair/tests/workload"
)

// The held-out set live, built only with -tags validate:
//
//	flock /var/tmp/fspair-lab.lock go test -tags validate -count=1 -v -timeout 2h \
//	    ./tests/validate/ -run 'TestValidateHeldOut$'
//
// The variants of tests/workload/jobs (CLASS-NAME.fio), none of which set
// rules/classes.yaml, run as TestValidate runs the training jobs: two
// guests at once on two of the pairs the variants were measured on, the
// CI's short rule windows (shortWindows: rules every 10 s), 200 s each. Four took 15 minutes (2026-11-27), all eight about 30;
// -heldout names fewer.
var (
	flagHeldOut      = flag.String("heldout", "", "held-out variants to run (default: every one of workload.Variants)")
	flagHeldOutPairs = flag.String("heldout-pairs", "ext4/xfs/raw/writeback,xfs/ext4/qcow2", "pairs for TestValidateHeldOut, two at a time")
)

// TestValidateHeldOut checks the live class on the held-out variants and
// records the results in testdata/results-heldout.json and RESULTS.md.
func TestValidateHeldOut(t *testing.T) {
	pairs, err := parsePairs(*flagHeldOutPairs)
	if err != nil {
		t.Fatal(err)
	}
	names := *flagHeldOut
	if names == "" {
		var all []string
		for _, v := range workload.Variants() {
			all = append(all, string(v))
		}
		names = strings.Join(all, ",")
	}
	ws, err := parseWorkloads(names)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if !slices.Contains(workload.Variants(), w) {
			t.Fatalf("%s is not a held-out variant (workload.Variants)", w)
		}
	}
	runValidation(t, shortWindows(config{
		kind:      KindHeldOut,
		pairs:     pairs,
		workloads: ws,
		record:    true,
		tables:    *flagTables,
		command: fmt.Sprintf("flock /var/tmp/fspair-lab.lock go test -tags validate -count=1 -v -timeout 2h ./tests/validate/ -run 'TestValidateHeldOut$' -heldout %s -heldout-pairs %s",
			names, *flagHeldOutPairs),
	}))
}
