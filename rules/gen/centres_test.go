package main

import (
	"strings"
	"testing"
)

// TestPointCentresChoice checks which models get the table of centres: the
// fitted model of rules/classes.yaml (every range one value) does, the
// boxes the fit starts from (tests/workload/testdata/classes-fitbase.yaml)
// do not, and neither does the fitted model with one guest file system's
// value widened to a range, which the table's single coordinate cannot hold.
func TestPointCentresChoice(t *testing.T) {
	fitted, boxes := thresholdsOf(t, "../classes.yaml"), thresholdsOf(t, "../../tests/workload/testdata/classes-fitbase.yaml")
	if !pointCentres(&fitted.Model) {
		t.Error("the fitted model's centres are not taken as points")
	}
	if pointCentres(&boxes.Model) {
		t.Error("the boxes are taken as points")
	}
	widened := false
	for _, c := range fitted.Model.Classes {
		for g, over := range c.GuestFS {
			for f, b := range over {
				c.GuestFS[g][f] = [2]float64{b[0], b[0] + 1}
				widened = true
				break
			}
			break
		}
		if widened {
			break
		}
	}
	if !widened {
		t.Fatal("the fitted model has no guest file system's value to widen")
	}
	if pointCentres(&fitted.Model) {
		t.Error("a centre with a guest file system's range is taken as a point")
	}
}

// TestPointRulesOrder checks that the workload group of the fitted model
// (rules/classes.yaml) records the scale, the scaled features and every
// centre before the distances that read them, as Prometheus evaluates a
// group's rules in order: out of order, a distance would read the previous
// evaluation's features, which a steady promtool fixture does not show.
func TestPointRulesOrder(t *testing.T) {
	th := thresholdsOf(t, committed.Classes)
	p, err := params(committed)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	centres := 0
	for _, c := range th.Model.Classes {
		centres += len(c.Centres())
	}
	for _, r := range workloadRules(p) {
		if r.Record == "domain_disk:fspair_workload_distance:scaled" {
			if seen[scaleName] != 1 || seen[scaledName] != 1 || seen[centreName] != centres {
				t.Fatalf("a distance comes after %d scale, %d scaled-feature and %d centre rules, want 1, 1 and %d", seen[scaleName], seen[scaledName], seen[centreName], centres)
			}
			if !strings.Contains(r.Expr, centreName) {
				t.Errorf("the distance does not read the centres:\n%s", r.Expr)
			}
		}
		seen[r.Record]++
	}
	if seen["domain_disk:fspair_workload_distance:scaled"] != len(th.Model.Classes) {
		t.Errorf("%d distance rules, want one per class", seen["domain_disk:fspair_workload_distance:scaled"])
	}
}

func thresholdsOf(t *testing.T, path string) *Thresholds {
	t.Helper()
	th, err := LoadThresholds(path)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// TestFleetSplitClassifier checks that in a fleet's split the classifier
// stays on each host's Prometheus: its scaled features and constants are
// per host, so nothing that reads them moves to Thanos Ruler.
func TestFleetSplitClassifier(t *testing.T) {
	p, err := params(committed)
	if err != nil {
		t.Fatal(err)
	}
	host, fleet := fleetFiles(p, []File{recordingFile(p), kdbFile(p), alertFile(p)})
	onHost := map[string]bool{}
	for _, g := range host.Groups {
		for _, r := range g.Rules {
			onHost[r.Record] = true
		}
	}
	for _, name := range []string{scaledName, centreName, scaleName, nearestName, distanceName, scoreName, className} {
		if !onHost[name] {
			t.Errorf("%s is not recorded on the hosts", name)
		}
	}
	for _, g := range fleet.Groups {
		if g.Name == "fspair.workload" {
			for _, r := range g.Rules {
				t.Errorf("%s of fspair.workload is recorded on the fleet side", r.Record)
			}
		}
	}
}
