package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/fspair/fspair/rules/classifier"
)

// inputs are the classifier's features (rules/classifier) as PromQL over the
// short-window feature rules, one series per disk with the disk labels only.
// workloadRules records them as featureName{feature="..."} so that each
// distance selects one series per feature. The mean read size has no series
// on a disk without reads; the distances count it as missing.
var inputs = map[string]string{
	// log2(r / (1 - r)) as -log2(1 / r - 1), which selects the read share
	// r once (its 8,000 series at 10,000 disks: 58 against 96 ms per
	// evaluation); equal up to float rounding, and the same at both
	// clamps (r = 1: +Inf, r = 0: -Inf).
	classifier.ReadWriteLog2: fmt.Sprintf(`clamp(-log2(1 / %[1]s - 1), -%[2]d, %[2]d)`,
		`sum without (op) (domain_disk:fspair_disk_requests:ratio_rate${w}{op="read"})`, classifier.RatioClamp),
	classifier.ReadSizeLog2:   `log2(sum without (op) (domain_disk:fspair_disk_request_size_bytes:mean${w}{op="read"}))`,
	classifier.SyncWriteShare: `domain_disk:fspair_disk_sync_writes:ratio_rate${w}` + "\nor\n  0 * " + iopsRate,
	// Without writes: 0, or the top of the clamp when the disk flushes.
	classifier.FlushesPerWriteLog2: fmt.Sprintf(`clamp(log2(domain_disk:fspair_disk_flushes_per_write:ratio_rate${w}), -%[1]d, %[2]d)
or
  %[2]d * (sum without (op) (domain_disk:fspair_disk_requests:rate${w}{op="flush"}) > bool 0)`, classifier.FlushClamp, classifier.FlushClampHigh),
	classifier.WriteSizeLog2: `log2(sum without (op) (domain_disk:fspair_disk_request_size_bytes:mean${w}{op="write"}))`,
	// No series on a disk without writes (the ratio's divisor is > 0).
	classifier.RandomWriteShare: `sum without (op, pattern) (domain_disk:fspair_disk_random_requests:ratio_rate${w}{op="write"})`,
}

// ramp is the membership of a value in [0, 1].
func ramp(r Ramp, value string) string {
	b := r.Bounds()
	span := num(b[1] - b[0])
	if r.Above != nil {
		return fmt.Sprintf("clamp((%s - %s) / %s, 0, 1)", value, num(b[0]), span)
	}
	return fmt.Sprintf("clamp((%s - %s) / %s, 0, 1)", num(b[1]), value, span)
}

// iopsRate is the per-disk rate of reads and writes: every disk with counters
// has one, so it completes rules with a value for every disk.
const iopsRate = "domain_disk:fspair_disk_rw_requests:rate${w}"

const (
	scoreName    = "domain_disk:fspair_workload_score:ratio"
	className    = "domain_disk:fspair_workload_class:info"
	distanceName = "domain_disk:fspair_workload_distance:scaled"
	featureName  = "domain_disk:fspair_workload_feature:value"
)

func scoreSel(class string) string { return fmt.Sprintf(`%s{class="%s"}`, scoreName, class) }

// distanceExpr is the distance of a disk from class c in units: the norm of
// the scaled distances of its features from c's box, each the distance from
// the box's middle less its half width (0 inside the box). Where c has a
// range of its own for the disk's guest file system (fspair_disk_info's
// guest_fs), that range replaces the box's.
//
// A class with further centres (Others) is as far as its nearest centre:
// each centre's distance labelled with its index, the minimum over them.
func distanceExpr(m *classifier.Model, c classifier.Class) string {
	if len(c.Others) == 0 {
		return centreExpr(m, c)
	}
	var each []string
	for i, k := range c.Centres() {
		each = append(each, fmt.Sprintf(`label_replace(%s, "centre", "%d", "", "")`, strings.ReplaceAll(centreExpr(m, k), "\n", "\n  "), i))
	}
	return fmt.Sprintf("min without (centre) (\n    %s\n)", strings.Join(each, "\n  or\n    "))
}

// centreExpr is the distance of a disk from one centre (or box) of a
// class, in units.
//
// Where the model has ranges per guest file system (guestFeatures), each
// feature is read from the features labelled with the disk's guest file
// system: a range of the disk's guest selects its series by label, the
// class's own range the rest, where a join with fspair_disk_info per
// range would cost one join of every disk each.
func centreExpr(m *classifier.Model, c classifier.Class) string {
	present, labelled := guestFeatures(m)
	var terms []string
	for _, f := range m.BoxFeatures(c) {
		if !labelled {
			term := boxTerm(featureSel(f), c.Box[f], m.Scale(f))
			var per []string
			for _, g := range classifier.GuestFileSystems {
				if b, ok := c.GuestFS[g][f]; ok {
					per = append(per, fmt.Sprintf("(%s and on (${disk}) fspair_disk_info{${job}, guest_fs=\"%s\"})", boxTerm(featureSel(f), b, m.Scale(f)), g))
				}
			}
			if len(per) > 0 {
				term = "(" + strings.Join(append(per, term), " or ") + ")"
			}
			if classifier.Conditional(f) {
				term = fmt.Sprintf("(%s or ignoring (feature) 0 * %s + %s)", term, iopsRate, num(m.MissingOf(c, f)))
			}
			terms = append(terms, term)
			continue
		}
		var per, own []string
		for _, g := range classifier.GuestFileSystems {
			if b, ok := c.GuestFS[g][f]; ok {
				per = append(per, boxTerm(fmt.Sprintf(`%s{feature="%s", guest_fs="%s"}`, guestFeatureName, f, g), b, m.Scale(f)))
				own = append(own, g)
			}
		}
		sel := fmt.Sprintf(`%s{feature="%s"}`, guestFeatureName, f)
		if len(own) > 0 {
			sel = fmt.Sprintf(`%s{feature="%s", guest_fs!~"%s"}`, guestFeatureName, f, strings.Join(own, "|"))
		}
		term := boxTerm(sel, c.Box[f], m.Scale(f))
		if len(per) > 0 {
			term = "(" + strings.Join(append(per, term), " or ") + ")"
		}
		if classifier.Conditional(f) {
			// Every disk has the present feature, labelled as its size
			// features would be.
			term = fmt.Sprintf(`(%s or ignoring (feature) 0 * %s{feature="%s"} + %s)`, term, guestFeatureName, present, num(m.MissingOf(c, f)))
		}
		terms = append(terms, term)
	}
	drop := "feature"
	if labelled {
		drop = "feature, guest_fs"
	}
	if len(terms) == 1 {
		// Sums drop the feature label; a lone term needs it dropped by hand.
		return fmt.Sprintf("sqrt(\n  sum without (%s) (%s)\n)", drop, terms[0])
	}
	out := fmt.Sprintf("sqrt(\n    %s\n)", strings.Join(terms, "\n  + ignoring (feature) "))
	if labelled {
		out = fmt.Sprintf("sum without (guest_fs) (\n  %s\n)", strings.ReplaceAll(out, "\n", "\n  "))
	}
	return out
}

// guestFeatureName holds the classifier's features labelled with the
// disk's guest file system (guest_fs, where fspair_disk_info names one of
// classifier.GuestFileSystems; none otherwise).
const guestFeatureName = "domain_disk_guest_fs:fspair_workload_feature:value"

// guestFeatures reports whether the distances read guestFeatureName: the
// model has ranges per guest file system and a feature that every disk
// with requests has (present), to stand in for a conditional feature (a
// mean request size, the random share of writes) a disk lacks.
func guestFeatures(m *classifier.Model) (present string, ok bool) {
	any := false
	for _, c := range m.Classes {
		for _, k := range c.Centres() {
			any = any || len(k.GuestFS) > 0
		}
	}
	if !any {
		return "", false
	}
	for _, f := range []string{classifier.SyncWriteShare, classifier.FlushesPerWriteLog2} {
		if m.Scale(f) > 0 {
			return f, true
		}
	}
	return "", false
}

// boxTerm is the squared, scaled distance of a feature's series sel from
// the range b on a feature of scale s.
func boxTerm(sel string, b [2]float64, s float64) string {
	if b[0] == b[1] {
		// A range of one value (a class's centre): no inside to clamp.
		return fmt.Sprintf("((%s - %s) / %s) ^ 2", sel, signed(b[0]), num(s))
	}
	return fmt.Sprintf("(clamp_min(abs(%s - %s) - %s, 0) / %s) ^ 2", sel, signed((b[0]+b[1])/2), num((b[1]-b[0])/2), num(s))
}

func featureSel(f string) string { return fmt.Sprintf(`%s{feature="%s"}`, featureName, f) }

// signed is num with a negative number in parentheses, to follow an operator.
func signed(v float64) string {
	if v < 0 {
		return "(" + num(v) + ")"
	}
	return num(v)
}

func workloadRules(p *Params) []Rule {
	w, t := p.Short, p.T
	m := &t.Model
	// on (${disk}) already leaves the idle score's class label out of the
	// match: no sum without (class) to drop it (one aggregation of every
	// disk fewer, the same values).
	notIdle := fmt.Sprintf("* on (${disk}) group_left ()\n  (1 - %s)", scoreSel(classIdle))
	out := []Rule{
		rec(w, scoreName, ramp(t.Idle, iopsRate),
			"Score of class idle: 1 at or below the low end of idle (IOPS), 0 at or above its high end.",
			[2]string{"class", classIdle}),
	}
	for _, f := range m.Features {
		out = append(out, rec(w, featureName, inputs[f.Name],
			fmt.Sprintf("Classifier feature %s of the disk (rules/classes.yaml has what it measures).", f.Name),
			[2]string{"feature", f.Name}))
	}
	points := pointCentres(m)
	if points {
		out = append(out, pointRules(w, m)...)
	} else if _, ok := guestFeatures(m); ok {
		out = append(out, rec(w, guestFeatureName, fmt.Sprintf(`
  %[1]s
* on (${disk}) group_left (guest_fs)
  group by (${disk}, guest_fs) (fspair_disk_info{${job}, guest_fs=~"%[2]s"})
or ignoring (guest_fs)
  %[1]s`, featureName, strings.Join(classifier.GuestFileSystems, "|")),
			"The classifier's features labelled with the disk's guest file system (fspair_disk_info's guest_fs, where it is one the "+
				"model has ranges for; none otherwise): the distances select a guest's ranges by this label, one join of the "+
				"features with fspair_disk_info in place of one per range."))
	}
	for _, c := range m.Classes {
		var expr, help string
		if points {
			expr, help = pointDistanceExpr(c), fmt.Sprintf("Distance of the disk from class %s in rules/classes.yaml, in units: "+
				"from the nearest of its centres, the norm of the disk's scaled features less the centre's (a conditional "+
				"feature the disk has none of, a mean request size or the random share of writes, costs what the centre counts for it).", c.Name)
		} else {
			expr, help = distanceExpr(m, c), fmt.Sprintf("Distance of the disk from class %s in rules/classes.yaml, in units: per feature of the class's "+
				"box, how far the disk's value lies outside the box over the feature's scale; the norm of those. "+
				"0 inside the box. A read feature on a disk without reads counts as the end of the far ramp.", c.Name)
		}
		out = append(out, rec(w, distanceName, expr, help, [2]string{"class", c.Name}))
	}
	// A model with a confidence of its own reads the nearest distance in
	// the score's far ramp and twice in the confidence: recorded once, one
	// aggregation of every disk's distances instead of three (at 10,000
	// disks 127 ms of CPU each, bench/results-rules-cost-37-table-cand.txt).
	nearest := fmt.Sprintf("min by (${disk}) (%s)", distanceName)
	if m.Confidence != nil {
		out = append(out, rec(w, nearestName, nearest,
			"Distance of the disk from its nearest workload class, in units: what far and the confidence read."))
		nearest = nearestName
	}
	// exp(-d^2) does not underflow: the largest distance a disk can have is
	// under 15 units (clamped read/write ratio, read sizes of 512 B to 1 MiB).
	exponent, of := fmt.Sprintf("(%s ^ 2)", distanceName), "squared distances"
	if m.SoftmaxOver() == classifier.OverDistance {
		exponent, of = distanceName, "distances"
	}
	// Over the temperature negated rather than the distance: the same
	// value, one operation on every disk's four series fewer (a unary
	// minus copies each series' labels), twice in the rule.
	fit := fmt.Sprintf("exp(-%s)", exponent)
	if t := m.T(); t != 1 {
		fit = fmt.Sprintf("exp(%s / %s)", exponent, num(-t))
	}
	// The zeros are joined among themselves first and then once to the
	// scores: each "or" hashes its whole left side, and the scores are the
	// larger side (the same series, as no two zeros share a class).
	var zeros []string
	for _, c := range m.Classes {
		zeros = append(zeros, fmt.Sprintf(`label_replace(0 * %s, "class", "%s", "", "")`, iopsRate, c.Name))
	}
	// The softmax's denominator and the two dampings are one factor per
	// disk, combined among the disks' series (one each) before the one
	// join with the four classes' series, rather than three joins of
	// those.
	out = append(out, rec(w, scoreName, fmt.Sprintf(`
    %[1]s
  * on (${disk}) group_left ()
    (
        (1 - %[2]s)
      * on (${disk})
        (1 - %[3]s)
      / on (${disk})
        sum by (${disk}) (%[1]s)
    )
or
  (
      %[4]s
  )`, fit, ramp(m.Far, nearest), scoreSel(classIdle), strings.Join(zeros, "\n    or\n      ")),
		"Scores of the workload classes: each class's share of the softmax of the negative "+of+" over the four "+
			"(divided by the model's temperature), damped by far (the distance to the nearest class) and by the idle score. "+
			"A disk whose distances are undefined (no reads or writes) scores 0."))
	// Every disk with the IOPS rate has the four scores (the zeros above)
	// and the idle one: no zero fill here.
	out = append(out,
		rec(w, scoreName, fmt.Sprintf(`
clamp(
  (%s - max by (${disk}) (%s{class=~"%s"})) / %s,
  0, 1
)
%s`, num(t.Mixed.Below[1]), scoreName, classList(), num(t.Mixed.Below[1]-t.Mixed.Below[0]), notIdle),
			"Score of class mixed: high when no workload class fits (two classes are as close, or the disk is far "+
				"from all: the best workload score is low), damped by the idle score.",
			[2]string{"class", classMixed}),
		rec(w, className, fmt.Sprintf(`
topk by (${disk}) (1,
    %s
  + %s * %s
  or
    %s
)
* 0 + 1`, scoreName, num(t.Hysteresis.V()), className, scoreName),
			"The chosen class: the highest score, where the class chosen at the previous evaluation "+
				"(this rule's own last sample) gets hysteresis_bonus on top, so that a disk does not "+
				"flap between two classes with close scores. A real change of workload moves the scores "+
				"by more than the bonus as the short window fills with it."),
	)
	out = append(out, settleRules(p)...)
	out = append(out,
		// The spread with mixed's test folded in: the highest score other
		// than mixed's less the second highest of all is the spread where
		// that score is the highest, and 0 where mixed ties or tops it
		// (mixed is then first and that score second, or both are equal).
		// One aggregation and one join of every disk's scores fewer than
		// the spread times a separate mixed test, the same values.
		confidenceRule(w, m, nearest),
		// The class is filtered before the join with fspair_disk_info,
		// which then matches only the disks that pass (the same series).
		rec(w, "domain_disk:fspair_class_pair:info", fmt.Sprintf(`
(
    %[1]s
  and on (${disk}, class)
    (%[2]s == 1)
  and on (${disk})
    (
        domain_disk:fspair_workload_class:confidence >= %[3]s
      or
        %[1]s{class=~"%[4]s|%[5]s"}
    )
)
* on (${disk}) group_left (guest_fs, host_fs)
  fspair_disk_info{${job}}`, className, settledName, num(t.Settle.MinConfidence.V()), classIdle, classMixed),
			fmt.Sprintf("The disk's live class with its guest/host file-system pair, for the fleet view and the knowledge base; "+
				"only once the class is settled, so that no verdict, fleet figure or alert acts on a class still settling, "+
				"and, for a workload class, only at a confidence of at least %s (rules/classes.yaml settle.min_confidence), "+
				"so that none acts on a class held steadily by a disk that sits between two classes. idle and mixed, "+
				"which no verdict rates (mixed's confidence is 0 by definition), are paired once settled. A confidence that "+
				"wavers around the threshold makes the series come and go; an alert on it then starts its `for` again "+
				"each time it comes back, as intended: the alert fires only on a class held confidently for the whole `for`.",
				num(t.Settle.MinConfidence.V()))),
	)
	return out
}

// confidenceRule records the confidence of each disk's class: the spread
// of its two highest scores, or, where the model has a confidence of its
// own (classifier.Confidence) and a workload class scores highest, that
// confidence's ramps on the distances; times the settled share.
func confidenceRule(w window, m *classifier.Model, nearest string) Rule {
	spread := fmt.Sprintf(`(
    max by (${disk}) (%[1]s{class!="%[2]s"})
  - min by (${disk}) (topk by (${disk}) (2, %[1]s))
)`, scoreName, classMixed)
	help := "Confidence of the classification: the best score minus the runner-up (the two highest scores' spread); " +
		"0 when mixed scores highest, as mixed names no class; times the share of the settle time the class " +
		"has been held (1 once settled), so that a class still settling says so. " +
		"rules/README.md has how often the class was right per band of it on held-out runs."
	if c := m.Confidence; c != nil {
		mb, nb := c.Margin.Bounds(), c.Near.Bounds()
		// Where a workload class does not score highest, idle or mixed
		// does: idle's spread is idle less the highest of the others,
		// and the same difference is below 0 where mixed is highest,
		// whose confidence is 0. One aggregation of the scores and a
		// join of one series a disk, where the spread above takes
		// two and a topk (at 10,000 disks 351 against 627 ms of CPU,
		// bench/results-rules-cost-37-table-cand.txt).
		spread = fmt.Sprintf(`clamp_min(
    %[1]s
  - on (${disk})
    max by (${disk}) (%[2]s{class!="%[3]s"}),
  0
)`, scoreSel(classIdle), scoreName, classIdle)
		spread = fmt.Sprintf(`(
    (
        clamp((max by (${disk}) (bottomk by (${disk}) (2, %[1]s)) - %[2]s - %[3]s) / %[4]s, 0, 1)
      * on (${disk})
        clamp((%[5]s - %[2]s) / %[6]s, 0, 1)
      * on (${disk})
        (1 - %[7]s)
    )
    and on (${disk})
    (
        max by (${disk}) (%[8]s{class=~"%[9]s"})
      >= on (${disk})
        max by (${disk}) (%[8]s{class=~"%[10]s|%[11]s"})
    )
  or
    %[12]s
)`, distanceName, nearest, signed(mb[0]), num(mb[1]-mb[0]), num(nb[1]), num(nb[1]-nb[0]), scoreSel(classIdle),
			scoreName, classList(), classIdle, classMixed, strings.ReplaceAll(spread, "\n", "\n    "))
		help = fmt.Sprintf("Confidence of the classification. Where a workload class scores highest: how much nearer the disk "+
			"lies to its nearest class than to the runner-up (a ramp from %[1]s to %[2]s units of margin) times how near it lies "+
			"to the nearest (a ramp down from %[3]s to %[4]s units), times (1 - the idle score): calibrated on held-out runs "+
			"(rules/classes.yaml confidence), apart from the softmax that chooses the class. Where idle scores highest: "+
			"the two highest scores' spread; 0 where mixed does, as mixed names no class. Times the share of the settle "+
			"time the class has been held (1 once settled), so that a class still settling says so. rules/README.md has "+
			"how often the class was right per band of it on held-out runs.", num(mb[0]), num(mb[1]), num(nb[0]), num(nb[1]))
	}
	return rec(w, "domain_disk:fspair_workload_class:confidence", fmt.Sprintf("\n%s\n* on (${disk})\n  %s", spread, settledName), help)
}

// nearestName is the nearest class's distance, where the model has a
// confidence of its own.
const nearestName = "domain_disk:fspair_workload_distance:min_scaled"

const (
	sinceName   = "domain_disk:fspair_workload_class:since_timestamp_seconds"
	settledName = "domain_disk:fspair_workload_class:settled_ratio"
)

// settleRules record how long each disk has held its class
// (rules/classifier Settling does the same on recorded windows). The since
// rule reads its own last sample, as the class rule does: it keeps it while
// the class rule still chooses the same class, else starts at time(). A
// class the disk no longer has drops out of the rule's result and its
// series goes stale at the next evaluation, so a class chosen again later
// starts a new hold; a gap of Prometheus' lookback (5m) between evaluations
// does too. Both rules come after the class rule in the group, which
// Prometheus evaluates in order: they read its sample of the same
// evaluation.
func settleRules(p *Params) []Rule {
	w, settle := p.Short, p.T.Settle
	// The settle time: classes.yaml's, or -settle's for a test stack.
	source := fmt.Sprintf("rules/classes.yaml settle: %s x the short window + %s s", num(*settle.Windows), num(*settle.Seconds))
	if float64(p.Settle) != math.Ceil(settle.Time(float64(w.secs))) {
		source = "rules/gen -settle, a test's setting"
	}
	return []Rule{
		rec(w, sinceName, fmt.Sprintf(`
  %[1]s
and on (${disk}, class)
  %[2]s
or
  %[2]s * 0 + time()`, sinceName, className),
			"When the disk first chose its class, of the evaluations that have chosen it since (Unix time): this "+
				"rule's own last sample while the class rule still chooses the same class, else the time of this evaluation."),
		rec(w, settledName, fmt.Sprintf(`
clamp_max(
  (time() - %s) / %d,
  1
)`, sinceName, p.Settle),
			fmt.Sprintf("Share of the settle time (%s, here %d s) "+
				"the disk has held its class, at most 1. At 1 the class is settled: the pairing, the verdict and the "+
				"alerts act on it; below 1 it is still settling (the disk laying out its files or changing workload "+
				"can be classed confidently wrong for a while).", source, p.Settle)),
	}
}

func fleetRules(p *Params) []Rule {
	l := p.Long
	minDisks := num(p.T.Fleet.MinDisksPerPair.V())
	perDisk := func(metric string) string {
		return fmt.Sprintf(`
    %s
  * on (${disk}) group_left (class, guest_fs, host_fs)
    domain_disk:fspair_class_pair:info{class!="idle"}`, metric)
	}
	wa := "domain_disk:fspair_write_amplification:ratio_rate${w}"
	lat := "domain_disk:fspair_hostfs_latency_overhead:ratio_rate${w}"
	best := func(median, by string) string {
		return fmt.Sprintf(`
max without (guest_fs, host_fs) (
  label_join(
    bottomk by (%s) (1,
        %s
      and on (class, guest_fs, host_fs)
        class_pair:fspair_disks:count >= %s
    ),
    "best_pair", "/", "guest_fs", "host_fs"
  )
)`, by, median, minDisks)
	}
	return []Rule{
		rec(l, "class_pair:fspair_disks:count", `count by (class, guest_fs, host_fs) (domain_disk:fspair_class_pair:info{class!="idle"})`,
			"Disks per live class and pair (idle disks left out)."),
		rec(l, "class_pair:fspair_write_amplification:median_ratio_rate${w}",
			"quantile by (class, guest_fs, host_fs) (0.5,"+perDisk(wa)+"\n)",
			"Median write amplification of the disks of each class and pair."),
		rec(l, "class_pair:fspair_write_amplification:min_ratio_rate${w}",
			"min by (class, guest_fs, host_fs) ("+perDisk(wa)+"\n)",
			"Lowest write amplification among the disks of each class and pair."),
		rec(l, "class_pair:fspair_hostfs_latency_overhead:median_ratio_rate${w}",
			"quantile by (class, guest_fs, host_fs, op) (0.5,"+perDisk(lat)+"\n)",
			"Median host-FS latency overhead of the disks of each class and pair."),
		rec(l, "class_pair:fspair_hostfs_latency_overhead:min_ratio_rate${w}",
			"min by (class, guest_fs, host_fs, op) ("+perDisk(lat)+"\n)",
			"Lowest host-FS latency overhead among the disks of each class and pair."),
		rec(l, "class:fspair_write_amplification:best_pair_median_ratio_rate${w}",
			best("class_pair:fspair_write_amplification:median_ratio_rate${w}", "class"),
			"The best pair seen for each class: the lowest median write amplification among pairs with at "+
				"least fleet.min_disks_per_pair disks; best_pair names it (GUEST/HOST)."),
		rec(l, "class:fspair_hostfs_latency_overhead:best_pair_median_ratio_rate${w}",
			best("class_pair:fspair_hostfs_latency_overhead:median_ratio_rate${w}", "class, op"),
			"The best pair seen for each class and operation by median host-FS latency overhead."),
		rec(l, "domain_disk:fspair_write_amplification_vs_best:ratio_rate${w}", perDisk(wa)+`
  / on (class) group_left (best_pair)
    (class:fspair_write_amplification:best_pair_median_ratio_rate${w} > 0)`,
			"Each disk's write amplification per the best pair's median for its class."),
		rec(l, "domain_disk:fspair_hostfs_latency_overhead_vs_best:ratio_rate${w}", perDisk(lat)+`
  / on (class, op) group_left (best_pair)
    (class:fspair_hostfs_latency_overhead:best_pair_median_ratio_rate${w} > 0)`,
			"Each disk's host-FS latency overhead per the best pair's median for its class."),
	}
}

func pairingRules() []Rule {
	return []Rule{
		rec(window{}, "domain_disk:fspair_pair_verdict:info", fmt.Sprintf(`
  domain_disk:fspair_class_pair:info{class=~"%s"}
* on (class, guest_fs, host_fs) group_left (verdict, standout, source, better_pairs, published_verdict, site_verdict)
  label_replace(fspair_kdb_pair_verdict, "class", "$1", "workload", "(.+)")`, classList()),
			"The knowledge base's verdict (best, worst, contested) on the disk's pair for its live class, "+
				"with the better pairs for that class and, where the published studies and the site both rated the pair, "+
				"the other one's verdict (published_verdict or site_verdict; source is the one in force). "+
				"Disks whose pair the knowledge base does not list have none."),
	}
}
