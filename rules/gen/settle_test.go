package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestSettleRules checks the settle rules as generated: the settle time
// follows the short window (one window plus classes.yaml's 60 s: 360 s at
// 5m, 120 s at the CI's 1m), the since rule reads its own last sample and
// the class rule's sample of the same evaluation (so it comes after the
// class rule, and before the rules that read it: Prometheus evaluates a
// group's rules in order), the confidence is damped by the settled ratio,
// and the pairing (so the verdict, the fleet view and the alerts) reads
// only settled classes, and of the workload classes only those at
// classes.yaml's settle.min_confidence or more. promtool checks the behaviour
// (testdata/promtool/settle.yml, on the fixture thresholds).
func TestSettleRules(t *testing.T) {
	for short, secs := range map[string]string{"5m": "360", "1m": "120"} {
		o := committed
		o.Short, o.Long = short, "1h"
		p, err := params(o)
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		byName := map[string]Rule{}
		for _, g := range recordingFile(p).Groups {
			if g.Name != "fspair.workload" {
				continue
			}
			for _, r := range g.Rules {
				order = append(order, r.Record)
				byName[r.Record] = r
			}
		}
		pos := func(name string) int {
			i := slices.Index(order, name)
			if i < 0 {
				t.Fatalf("-short %s: fspair.workload has no rule %s", short, name)
			}
			return i
		}
		class, since, settled := pos(className), pos(sinceName), pos(settledName)
		conf, pair := pos("domain_disk:fspair_workload_class:confidence"), pos("domain_disk:fspair_class_pair:info")
		if !(class < since && since < settled && settled < conf && settled < pair) {
			t.Errorf("-short %s: order %v: want the class rule, since, settled ratio, then confidence and the pairing", short, order)
		}
		for _, c := range []struct{ rule, want string }{
			{sinceName, sinceName + "\nand on (" + diskLabels + ", class)\n  " + className},
			{sinceName, className + " * 0 + time()"},
			{settledName, fmt.Sprintf("(time() - %s) / %s,", sinceName, secs)},
			{"domain_disk:fspair_workload_class:confidence", "* on (" + diskLabels + ")\n  " + settledName},
			{"domain_disk:fspair_class_pair:info", "and on (" + diskLabels + ", class)\n    (" + settledName + " == 1)"},
			// The confidence gate: classes.yaml's settle.min_confidence.
			{"domain_disk:fspair_class_pair:info", "and on (" + diskLabels + ")\n    (\n        domain_disk:fspair_workload_class:confidence >= 0.5\n      or\n        " + className + `{class=~"idle|mixed"}`},
		} {
			if !strings.Contains(byName[c.rule].Expr, c.want) {
				t.Errorf("-short %s: %s lacks %q:\n%s", short, c.rule, c.want, byName[c.rule].Expr)
			}
		}
	}
	// Nothing reads the unsettled class for a verdict or an alert: the
	// pairing reads class_pair, and no alert reads the class rule.
	p, err := params(committed)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range pairingRules() {
		if strings.Contains(r.Expr, className) || !strings.Contains(r.Expr, "domain_disk:fspair_class_pair:info") {
			t.Errorf("%s reads %s, not the settled pairing:\n%s", r.Record, className, r.Expr)
		}
	}
	for _, a := range alerts(p) {
		if strings.Contains(a.expr, className) {
			t.Errorf("alert %s reads the class rule %s, which includes classes still settling", a.name, className)
		}
	}
}

// TestSettleFlag: -settle sets the settle time (the test stacks that are
// not about settling use a few seconds) and changes nothing else in any
// rule file, per host or fleet, but the settled ratio's comment, which
// names it; without it the time is classes.yaml's. A settle time of 0 or
// no duration is refused: the settled ratio divides by it.
func TestSettleFlag(t *testing.T) {
	o := committed
	o.Settle = "5s"
	// The files without their comment lines, which wrap around the
	// settle time's source.
	uncommented := func(b []byte) string {
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	againstCommitted(t, o, func(name string, def, got []byte) {
		want := strings.ReplaceAll(uncommented(def), ") / 360,", ") / 5,")
		if uncommented(got) != want {
			t.Errorf("%s with -settle 5s: want the committed file with the settle time at 5 s and nothing else changed", name)
		}
		if strings.Contains(string(def), settledName) != strings.Contains(string(got), "rules/gen -settle, a test's setting, here 5 s") {
			t.Errorf("%s with -settle 5s: the settled ratio's comment does not name -settle", name)
		}
	})
	for _, bad := range []string{"0s", "5", "-1m"} {
		o.Settle = bad
		if _, err := Generate(o); err == nil {
			t.Errorf("-settle %q: no error", bad)
		}
	}
}
