package main

import (
	"fmt"
	"strings"
)

// feature is a per-disk input of the classifier: a PromQL expression over the
// short-window feature rules whose result carries the disk labels only.
type feature struct {
	name, expr string
}

// features are the classifier's inputs, named in rules/classes.yaml. They
// come from the workload characters of the knowledge base (read or write
// dominated, random or sequential, synchronous or not, small or large
// requests); see rules/classes.yaml for what each measures.
var features = []feature{
	{"iops", `domain_disk:fspair_disk_rw_requests:rate${w}`},
	{"read_share", `sum without (op) (domain_disk:fspair_disk_requests:ratio_rate${w}{op="read"})`},
	{"random_read", `sum without (op, pattern) (domain_disk:fspair_disk_pattern_requests:ratio_rate${w}{op="read", pattern="random"})`},
	{"random_write", `sum without (op, pattern) (domain_disk:fspair_disk_pattern_requests:ratio_rate${w}{op="write", pattern="random"})`},
	{"random_read_share", `sum without (op) (domain_disk:fspair_disk_random_requests:ratio_rate${w}{op="read"})`},
	{"random_write_share", `sum without (op) (domain_disk:fspair_disk_random_requests:ratio_rate${w}{op="write"})`},
	{"sequential_read", `sum without (op, pattern) (domain_disk:fspair_disk_pattern_requests:ratio_rate${w}{op="read", pattern="sequential"})`},
	{"sequential_write", `sum without (op, pattern) (domain_disk:fspair_disk_pattern_requests:ratio_rate${w}{op="write", pattern="sequential"})`},
	{"random", `sum without (op, pattern) (domain_disk:fspair_disk_pattern_requests:ratio_rate${w}{pattern="random"})`},
	{"sequential", `sum without (op, pattern) (domain_disk:fspair_disk_pattern_requests:ratio_rate${w}{pattern="sequential"})`},
	{"sync_write_share", `domain_disk:fspair_disk_sync_writes:ratio_rate${w}`},
	{"flushes_per_write", `domain_disk:fspair_disk_flushes_per_write:ratio_rate${w}`},
	{"read_size_bytes", `sum without (op) (domain_disk:fspair_disk_request_size_bytes:mean${w}{op="read"})`},
	{"write_size_bytes", `sum without (op) (domain_disk:fspair_disk_request_size_bytes:mean${w}{op="write"})`},
}

func featureByName(name string) (feature, bool) {
	for _, f := range features {
		if f.name == name {
			return f, true
		}
	}
	return feature{}, false
}

func featureNames() []string {
	var n []string
	for _, f := range features {
		n = append(n, f.name)
	}
	return n
}

// ramp is the membership of a value in [0, 1].
func ramp(r Ramp, value string) string {
	b := r.bounds()
	span := num(b[1] - b[0])
	if r.Above != nil {
		return fmt.Sprintf("clamp((%s - %s) / %s, 0, 1)", value, num(b[0]), span)
	}
	return fmt.Sprintf("clamp((%s - %s) / %s, 0, 1)", num(b[1]), value, span)
}

// zeroForEveryDisk completes a score with 0 for disks it has no value for
// (idle disks: no feature is defined without requests). Every disk with
// counters has an IOPS series.
const zeroForEveryDisk = "0 * domain_disk:fspair_disk_rw_requests:rate${w}"

const (
	scoreName = "domain_disk:fspair_workload_score:ratio"
	className = "domain_disk:fspair_workload_class:info"
)

func scoreSel(class string) string { return fmt.Sprintf(`%s{class="%s"}`, scoreName, class) }

func workloadRules(p *Params) []Rule {
	w, t := p.Short, p.T
	notIdle := fmt.Sprintf("* ignoring (class)\n  (1 - %s)", scoreSel(classIdle))
	out := []Rule{
		rec(w, scoreName, ramp(t.Idle, "domain_disk:fspair_disk_rw_requests:rate${w}"),
			"Score of class idle: 1 at or below the low end of idle (IOPS), 0 at or above its high end.",
			[2]string{"class", classIdle}),
	}
	for _, wl := range t.Workloads {
		var terms []string
		for _, c := range wl.Conditions {
			f, _ := featureByName(c.Feature)
			terms = append(terms, ramp(c.Ramp, "("+f.expr+")"))
		}
		expr := fmt.Sprintf("(\n    %s\n)\n%s\nor\n  %s", strings.Join(terms, "\n  * "), notIdle, zeroForEveryDisk)
		out = append(out, rec(w, scoreName, expr,
			fmt.Sprintf("Score of class %s: the product of its conditions in rules/classes.yaml (all must hold), "+
				"each a ramp on one feature, damped by the idle score. A disk that cannot show one of "+
				"the features (a write feature without writes, a read feature without reads) scores 0.",
				wl.Name),
			[2]string{"class", wl.Name}))
	}
	out = append(out,
		rec(w, scoreName, fmt.Sprintf(`
clamp(
  (%s - max by (${disk}) (%s{class=~"%s"})) / %s,
  0, 1
)
%s
or
  %s`, num(t.Mixed.Below[1]), scoreName, classList(), num(t.Mixed.Below[1]-t.Mixed.Below[0]), notIdle, zeroForEveryDisk),
			"Score of class mixed: high when no workload class fits (the best workload score is low), "+
				"damped by the idle score.",
			[2]string{"class", classMixed}),
		rec(w, className, fmt.Sprintf(`
topk by (${disk}) (1,
    %s
  + %s * %s
  or
    %s
)
* 0 + 1`, scoreName, num(t.HysteresisBonus.V()), className, scoreName),
			"The chosen class: the highest score, where the class chosen at the previous evaluation "+
				"(this rule's own last sample) gets hysteresis_bonus on top, so that a disk does not "+
				"flap between two classes with close scores. A real change of workload moves the scores "+
				"by more than the bonus as the short window fills with it."),
		rec(w, "domain_disk:fspair_workload_class:confidence", fmt.Sprintf(`
  max by (${disk}) (topk by (${disk}) (2, %[1]s))
- min by (${disk}) (topk by (${disk}) (2, %[1]s))`, scoreName),
			"Confidence of the classification: the best score minus the runner-up (the two highest scores' spread)."),
		rec(w, "domain_disk:fspair_class_pair:info", fmt.Sprintf(`
  %s
* on (${disk}) group_left (guest_fs, host_fs)
  fspair_disk_info{${job}}`, className),
			"The disk's live class with its guest/host file-system pair, for the fleet view and the knowledge base."),
	)
	return out
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
* on (class, guest_fs, host_fs) group_left (verdict, standout, source, better_pairs)
  label_replace(fspair_kdb_pair_verdict, "class", "$1", "workload", "(.+)")`, classList()),
			"The knowledge base's verdict (best, worst, contested) on the disk's pair for its live class, "+
				"with the better pairs for that class. Disks whose pair the knowledge base does not list have none."),
	}
}
