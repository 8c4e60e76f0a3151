package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/fspair/fspair/rules/classifier"
)

// A model whose every range is one value (pointCentres: the candidate's
// fitted centres) has its distances computed over a table instead of one
// term per feature: each disk's features divided by their scales, recorded
// once (scaledName), less a centre's coordinates over the same scales
// (centreName, constants), joined on the feature and the guest file system,
// squared and summed per disk. Written term by term, each term selected
// its feature's series again and each sum joined two of them: at 10,000
// disks the candidate's eight centres of five features took 3.8-3.9 s of CPU
// per evaluation; here each centre selects the disk's scaled features once
// and joins them with a handful of constants, 1.9-2.6 s for the eight
// (BENCHMARKS.md, "the candidate's distances over a table of centres").
// A centre's cost is still every disk's five features: one join of all
// centres at once would be a many-to-many match, which PromQL refuses.
const (
	scaledName = "domain_disk_guest_fs:fspair_workload_feature:scaled"
	centreName = "workload_centre:fspair_workload_feature:scaled"
	scaleName  = "workload_feature:fspair_workload_feature:scale"
)

// missingSuffix marks the series that stands for a conditional feature a
// disk cannot show (a mean request size or the random share of writes,
// without reads or writes): value 0, and in each centre's table
// minus the square root of what the centre counts for it (MissingOf), so
// that the squared difference is that count.
const missingSuffix = "_missing"

// pointCentres reports whether every range of every centre of m is one
// value, the form the table of centres holds.
func pointCentres(m *classifier.Model) bool {
	point := func(box map[string][2]float64) bool {
		for _, b := range box {
			if b[0] != b[1] {
				return false
			}
		}
		return true
	}
	for _, c := range m.Classes {
		for _, k := range c.Centres() {
			if !point(k.Box) {
				return false
			}
			for _, over := range k.GuestFS {
				if !point(over) {
					return false
				}
			}
		}
	}
	return true
}

// guestFeatureSet returns the features some centre of m has a guest file
// system's value for: the scaled features carry guest_fs for these only, so
// the join with fspair_disk_info labels no more series than the centres
// tell apart.
func guestFeatureSet(m *classifier.Model) []string {
	seen := map[string]bool{}
	for _, c := range m.Classes {
		for _, k := range c.Centres() {
			for _, over := range k.GuestFS {
				for f := range over {
					seen[f] = true
				}
			}
		}
	}
	var out []string
	for _, f := range m.Features {
		if seen[f.Name] {
			out = append(out, f.Name)
		}
	}
	return out
}

// scaledRule records each disk's features over their scales, the features
// of guestFeatureSet labelled with the disk's guest file system (where
// fspair_disk_info names one of classifier.GuestFileSystems), and for each
// mean request size the disk lacks a series of value 0 named
// FEATURE_missing. The scales come from scaleRule's constants, one join of
// all the features: an "or" of each feature over its scale hashes every
// series again at each "or" (at 10,000 disks 361 against 286 ms of CPU,
// bench/results-rules-cost-37-table-cand.txt).
func scaledRule(w window, m *classifier.Model) Rule {
	scaled := func(sel string) string {
		return fmt.Sprintf("%s / on (feature) group_left () %s", sel, scaleName)
	}
	expr := "\n  " + scaled(featureName)
	if g := guestFeatureSet(m); len(g) > 0 {
		expr = fmt.Sprintf(`
    (%[1]s)
  * on (${disk}) group_left (guest_fs)
    group by (${disk}, guest_fs) (fspair_disk_info{${job}, guest_fs=~"%[2]s"})
  or ignoring (guest_fs)
    %[3]s`, scaled(fmt.Sprintf(`%s{feature=~"%s"}`, featureName, strings.Join(g, "|"))),
			strings.Join(classifier.GuestFileSystems, "|"), scaled(featureName))
	}
	// Every disk with requests has a read/write ratio: a disk without
	// any has none, the one feature besides the mean sizes a disk can
	// lack (classifier.Inputs), and then no distance (Distance: NaN), so
	// no scaled features either.
	base := iopsRate
	if m.Scale(classifier.ReadWriteLog2) > 0 {
		base = fmt.Sprintf(`%s{feature="%s"}`, featureName, classifier.ReadWriteLog2)
		expr = fmt.Sprintf("(%s\n)\nand on (${disk})\n  %s", expr, base)
	}
	for _, f := range m.Features {
		if classifier.Conditional(f.Name) {
			expr += fmt.Sprintf(`
or
  label_replace(0 * (%s unless on (${disk}) %s{feature="%s"}), "feature", "%s%s", "", "")`,
				base, featureName, f.Name, f.Name, missingSuffix)
		}
	}
	return rec(w, scaledName, expr,
		"The classifier's features over their scales (rules/classes.yaml features), what the distances from the "+
			"centres are sums of; those a centre has a value per guest file system for labelled with the disk's guest_fs "+
			"(fspair_disk_info's, where it is one the model has values for; none otherwise); and FEATURE"+missingSuffix+
			" (0) for a mean request size the disk has no requests of, which each centre's table charges what it counts for it.")
}

// centreRule records centre k (index i) of class c as constants: per
// feature of its box and guest file system (none for the class's own
// value), the coordinate over the feature's scale; per mean request size of
// its box, FEATURE_missing at minus the square root of what it counts for
// a disk without it.
func centreRule(w window, m *classifier.Model, c classifier.Class, i int, k classifier.Class) Rule {
	guest := map[string]bool{}
	for _, f := range guestFeatureSet(m) {
		guest[f] = true
	}
	var rows []string
	for _, f := range m.BoxFeatures(k) {
		s := m.Scale(f)
		if guest[f] {
			for _, g := range classifier.GuestFileSystems {
				rows = append(rows, constant(k.BoxFor(g)[f][0]/s, f, g))
			}
		}
		rows = append(rows, constant(k.Box[f][0]/s, f, ""))
		if classifier.Conditional(f) {
			rows = append(rows, constant(-math.Sqrt(m.MissingOf(k, f)), f+missingSuffix, ""))
		}
	}
	return rec(w, centreName, "\n  "+strings.Join(rows, "\nor\n  "),
		fmt.Sprintf("Centre %d of class %s in rules/classes.yaml (%s) as constants: per feature and guest file system "+
			"(none: the class's own value), its value over the feature's scale; FEATURE%s, minus the square root of "+
			"what it counts for a conditional feature (a mean request size, the random share of writes) a disk has no requests for.", i, c.Name, centreLabel(c, i), missingSuffix),
		[2]string{"class", c.Name}, [2]string{"centre", fmt.Sprint(i)})
}

// constant is one row of a table of constants: v labelled with the
// feature and, unless empty, the guest file system.
func constant(v float64, feature, guest string) string {
	e := fmt.Sprintf(`label_replace(vector(%s), "feature", "%s", "", "")`, num(v), feature)
	if guest != "" {
		e = fmt.Sprintf(`label_replace(%s, "guest_fs", "%s", "", "")`, e, guest)
	}
	return e
}

// centreLabel names centre i of c as classes.yaml does: the class itself,
// or its others' name.
func centreLabel(c classifier.Class, i int) string {
	if i == 0 {
		return "its own"
	}
	return "others: " + c.Others[i-1].Name
}

// pointDistanceExpr is the distance of a disk from class c in units, over
// the table: the squared distance from each centre summed per disk, the
// nearest centre's, its square root.
func pointDistanceExpr(c classifier.Class) string {
	sq := func(i int) string {
		return fmt.Sprintf(`sum by (${disk}) ((%s - on (feature, guest_fs) group_left () %s{class="%s", centre="%d"}) ^ 2)`,
			scaledName, centreName, c.Name, i)
	}
	if len(c.Others) == 0 {
		return fmt.Sprintf("sqrt(\n  %s\n)", sq(0))
	}
	var each []string
	for i := range c.Centres() {
		each = append(each, fmt.Sprintf(`label_replace(%s, "centre", "%d", "", "")`, sq(i), i))
	}
	return fmt.Sprintf("sqrt(\n  min without (centre) (\n      %s\n  )\n)", strings.Join(each, "\n    or\n      "))
}

// scaleRule records the features' scales as constants, what scaledRule
// divides by.
func scaleRule(w window, m *classifier.Model) Rule {
	var rows []string
	for _, f := range m.Features {
		rows = append(rows, constant(f.Scale, f.Name, ""))
	}
	return rec(w, scaleName, "\n  "+strings.Join(rows, "\nor\n  "),
		"The scale of each of the classifier's features (rules/classes.yaml features): one unit of distance on it.")
}

// pointRules are the table's rules: the scales, the scaled features and
// each centre's constants, in the order the distances read them.
func pointRules(w window, m *classifier.Model) []Rule {
	out := []Rule{scaleRule(w, m), scaledRule(w, m)}
	for _, c := range m.Classes {
		for i, k := range c.Centres() {
			out = append(out, centreRule(w, m, c, i, k))
		}
	}
	return out
}
