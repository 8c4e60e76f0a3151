//go:build querywalk

package k6

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"
)

var (
	walkProm       = flag.String("prometheus", "", "the Prometheus to walk the dashboards against, e.g. http://127.0.0.1:19090 (make demo's)")
	walkDashboards = flag.String("dashboards", "../../dashboards", "directory of the dashboards' JSON")
	walkRange      = flag.Duration("range", 5*time.Minute, "time range the dashboards are opened on (range queries span it; $__range)")
	walkScrape     = flag.Duration("scrape", 15*time.Second, "the data source's scrape interval (Grafana's timeInterval), for $__interval and $__rate_interval")
	walkWait       = flag.Duration("wait", 0, "keep asking again, every scrape interval, while queries are empty and no query failed, for up to this long (a Prometheus that just started: the long-window rule groups evaluate every 3m as committed, every 30s in make demo-smoke)")
	walkRulesConf  = flag.String("rules.classes", "../../rules/classes.yaml", "the rules' thresholds (efficiency.min_stage_requests_per_second: the fewest requests a second of an operation over the hour a stage's mean latency is kept for)")
	walkClasses    = flag.String("classes", "", "comma-separated live workload classes that must be there at the end: CLASS (some disk has it) or DOMAIN=CLASS (that domain's disks have it; make demo: demo-web=web,demo-mail=mail); with -wait, waited for")
	walkVars       = varFlags{}
)

func init() {
	flag.Var(walkVars, "var", "NAME=VALUE: open the dashboards with this selection instead of the saved one (VALUE: a value, several joined by commas, or All); repeatable")
}

// varFlags collects -var NAME=VALUE.
type varFlags map[string]string

func (v varFlags) String() string { return fmt.Sprint(map[string]string(v)) }

func (v varFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	v[name] = value
	return nil
}

// walkFacts are what the reasons for empty queries look at, and how the
// dashboards were opened.
type walkFacts struct {
	liveClasses map[string]bool // the disks' live workload classes at the end of the range
	// pairedClasses are the live classes some disk has paired
	// (domain_disk:fspair_class_pair:info: settled, and at the rules'
	// minimum confidence for a workload class), what the fleet series
	// are made of.
	pairedClasses map[string]bool
	domainClass   map[string]string // each domain's live classes, joined by commas
	// domainInfo is each domain's disks' fspair_disk_info labels: label
	// name -> the values its disks have, joined by commas.
	domainInfo map[string]map[string]string
	// domainGuestHistogram is each domain's disks' fspair_disk_guest_info
	// histogram labels (ok, or why a disk has no guest histogram), joined
	// by commas.
	domainGuestHistogram map[string]string
	// classOpRate is, per paired class and operation, the most requests a
	// second over 1h a paired disk of the class made, counting the fewer
	// of its image-file and device requests (the host-FS overhead divides
	// the mean latency of one stage by the other's).
	classOpRate  map[classOp]float64
	minStageRate float64  // efficiency.min_stage_requests_per_second
	selections   []string // per dashboard: its variables' values
}

// classOp is a workload class and an operation.
type classOp struct{ class, op string }

func (f walkFacts) classList() string {
	var out []string
	for c := range f.liveClasses {
		out = append(out, c)
	}
	if len(out) == 0 {
		return "none"
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// emptyReason is a query that may come back empty, and why. Such a query
// must still parse and run; it is counted and listed apart.
type emptyReason struct {
	why     func(q Query, f walkFacts) string // "" when it does not cover q
	summary string                            // the reason, as the output lists it
}

var (
	fleetSeries = regexp.MustCompile(`\b(class_pair|class|domain_disk):fspair_`)
	domainMatch = regexp.MustCompile(`\bdomain="([^"]*)"`)
	opMatch     = regexp.MustCompile(`\bop="([^"]*)"`)
	// Per-operation stage means over 1h and what is made of them: kept
	// only over efficiency.min_stage_requests_per_second requests.
	stageMean = regexp.MustCompile(`fspair_hostfs_latency_overhead|fspair_disk_stage_seconds:mean1h`)
	// The guest latency histogram's series, not the counter of its total
	// time (fspair_disk_guest_request_duration_seconds_total).
	guestHistogram = regexp.MustCompile(`\bfspair_disk_guest_request_duration_seconds(_bucket|_sum|_count)?([^_a-zA-Z0-9]|$)`)
)

// configCounters are the families the exporter writes only on disks whose
// fspair_disk_info label says they can count them (exposition.go's
// expect rules), or once they have counted something.
var configCounters = []struct {
	family, label string
	counts        []string // the label's values on which the kernel counts the family
}{
	{"fspair_disk_io_uring_punted_total", "aio", []string{"io_uring"}},
	{"fspair_disk_format_metadata_", "format", []string{"qcow2"}},
	// Btrfs ordered extents: only images on a Btrfs host (btrfsVec).
	{"fspair_disk_btrfs_extent", "host_fs", []string{"btrfs"}},
	// Page-cache hits and misses: only the buffered cache modes
	// (cacheClassified); the O_DIRECT modes' reads are all direct.
	{"fspair_disk_host_cache_reads_total", "cache", []string{"writeback", "writethrough", "unsafe"}},
}

// readsFamily is a reason's why for every query whose template reads a
// family (name or prefix): reason for those, whatever the facts.
func readsFamily(name, reason string) func(q Query, _ walkFacts) string {
	return func(q Query, _ walkFacts) string {
		if strings.Contains(q.Template, name) {
			return reason
		}
		return ""
	}
}

// expectedEmpty is the short list of queries that cannot return data on
// the demo's Prometheus after a few minutes, whatever the demo does; every
// other query must.
var expectedEmpty = []emptyReason{
	{
		summary: "k6 series (the VM disk dashboard's load-test row): k6 writes them into Prometheus only during " +
			"`make loadtest` (TestLoad, remote write); the demo runs no load test",
		why: readsFamily("k6_http_", "written by k6 during make loadtest only"),
	},
	{
		summary: "copies of a row repeated per workload class (fleet: class, knowledge base: workload) for a class " +
			"no disk has paired at the end of the range (live, settled and, for a workload class, at the rules' minimum " +
			"confidence): their fleet series (class_pair:*, class:*, domain_disk:*) are empty; the demo runs a web-like " +
			"and a mail-like VM (demo-smoke requires them classed so, -classes demo-web=web,demo-mail=mail), so " +
			"fileserver, rfa and mixed have no disk, and web none paired while demo-web's class is unsure",
		why: func(q Query, f walkFacts) string {
			name, class, ok := strings.Cut(q.Repeat, "=")
			if !ok || (name != "class" && name != "workload") || f.pairedClasses[class] || !fleetSeries.MatchString(q.Template) {
				return ""
			}
			if f.liveClasses[class] {
				return fmt.Sprintf("no disk has its class %s paired (unsure or settling)", class)
			}
			return fmt.Sprintf("no disk's live class is %s", class)
		},
	},
	{
		summary: "counters the exporter leaves out while 0 on a disk whose configuration cannot count them " +
			"(README, Metrics): io_uring punts off aio=io_uring, qcow2 format metadata on other formats, Btrfs extents " +
			"off a Btrfs host, host page-cache hits and misses under cache=none or directsync; the demo's VMs run " +
			"aio=native and cache=none on raw images on ext4 (the conditions the site knowledge base was measured in)",
		why: func(q Query, f walkFacts) string {
			m := domainMatch.FindStringSubmatch(q.Expr)
			if m == nil {
				return ""
			}
			for _, c := range configCounters {
				if !strings.Contains(q.Template, c.family) {
					continue
				}
				have := f.domainInfo[m[1]][c.label]
				for _, v := range strings.Split(have, ",") {
					if v == "" || v == "unknown" || slices.Contains(c.counts, v) {
						return "" // some disk of the domain can count it
					}
				}
				return fmt.Sprintf("%s has %s=%s: no %s", m[1], c.label, have, c.family)
			}
			return ""
		},
	},
	{
		summary: "request errors on the image file (VM disk dashboard: Request errors): an operation's series starts " +
			"with the disk's first failed request (README, Metrics), and the demo's disks fail none",
		why: readsFamily("fspair_disk_request_errors_total", "no request of the disk has failed: no fspair_disk_request_errors_total"),
	},
	{
		summary: "the guest's latency histograms (VM disk dashboard: the heatmaps of the first row) for a domain none " +
			"of whose disks has them (fspair_disk_guest_info's histogram label not ok): the demo's mail VM runs through " +
			"Debian 12's libvirt 9.0, which keeps none (histogram=\"libvirt_too_old\"), and the walk opens the VM disk " +
			"dashboard on it (-var domain=demo-mail)",
		why: func(q Query, f walkFacts) string {
			m := domainMatch.FindStringSubmatch(q.Expr)
			if m == nil || !guestHistogram.MatchString(q.Template) {
				return ""
			}
			have := f.domainGuestHistogram[m[1]]
			if slices.Contains(strings.Split(have, ","), "ok") {
				return "" // some disk of the domain has them
			}
			if have == "" {
				return fmt.Sprintf("%s has no fspair_disk_guest_info: no guest side", m[1])
			}
			return fmt.Sprintf("%s has histogram=%s: no guest latency histogram", m[1], have)
		},
	},
	{
		summary: "host-FS latency overheads (image-file per device mean latency over 1h) of an operation in a copy " +
			"for a class (fleet: class, knowledge base: workload) whose paired disks all made fewer requests of it over " +
			"the hour than efficiency.min_stage_requests_per_second (rules/classes.yaml), the fewer of image-file and " +
			"device requests: the rules keep no stage mean so thin; the demo's web job appends to a log it never " +
			"syncs, which reaches the disk in a few write-backs, well under one write a second",
		why: func(q Query, f walkFacts) string {
			name, class, ok := strings.Cut(q.Repeat, "=")
			if !ok || (name != "class" && name != "workload") || !f.pairedClasses[class] || !stageMean.MatchString(q.Template) {
				return "" // unpaired classes have their own reason
			}
			if m := opMatch.FindStringSubmatch(q.Expr); m != nil {
				if r := f.classOpRate[classOp{class, m[1]}]; r < f.minStageRate {
					return fmt.Sprintf("class %s's paired disks made at most %.2f %s requests a second over 1h, under %g", class, r, m[1], f.minStageRate)
				}
				return ""
			}
			for k, r := range f.classOpRate {
				if k.class == class && r >= f.minStageRate {
					return ""
				}
			}
			return fmt.Sprintf("class %s's paired disks made under %g requests a second of every operation over 1h", class, f.minStageRate)
		},
	},
	{
		summary: "the fleet's knowledge-base verdicts in the copy for class mixed: the knowledge base has verdicts " +
			"for web, mail, fileserver and rfa; mixed (the class of a disk no workload fits) has none (rules/kdb/pairs.yaml)",
		why: func(q Query, _ walkFacts) string {
			if q.Repeat == "class=mixed" && strings.Contains(q.Template, "fspair_kdb_pair_verdict") && !fleetSeries.MatchString(q.Template) {
				return "the knowledge base has no verdicts for mixed"
			}
			return ""
		},
	},
}

// walkResult is one query's answers.
type walkResult struct {
	q                Query
	instant, ranged  int
	err              error
	expected         string // the reason it may be empty, when one covers it
	status           string // ok, empty (expected), EMPTY, ERROR
	expectedButFound bool
}

// TestQueryWalk opens every dashboard of dashboards/ on the last -range
// against the Prometheus of -prometheus as Grafana would (saved
// selections, All for the multi-value variables, the first value of the
// others, repeated rows copied per value) and runs every panel query and
// every query variable's selector through /api/v1/query (at the end of the
// range) and /api/v1/query_range (over it, at $__interval). Each must
// parse (HTTP 200, status success) and return at least one series both
// ways; the few queries expectedEmpty explains may come back empty (they
// must still run), and are counted apart. With -wait, it asks again while
// queries are only empty (or the -classes are not all live yet), so that
// a Prometheus that just started can evaluate its long-window rule groups.
func TestQueryWalk(t *testing.T) {
	if *walkProm == "" {
		t.Fatal("no Prometheus to walk the dashboards against: pass -prometheus URL (make demo's: http://127.0.0.1:19090)")
	}
	ds, err := ReadDashboards(*walkDashboards)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *walkWait+5*time.Minute)
	defer cancel()
	deadline := time.Now().Add(*walkWait)
	fmt.Printf("walk: %d dashboards against %s, range %s, step %s, rate interval %s\n", len(ds), *walkProm,
		*walkRange, Window{Range: *walkRange, Scrape: *walkScrape}.Step(), Window{Range: *walkRange, Scrape: *walkScrape}.RateInterval())

	minRate, err := minStageRate(*walkRulesConf)
	if err != nil {
		t.Fatal(err)
	}
	waitRuleGroups(ctx, t, deadline)

	var (
		results     []walkResult
		missing     []string
		hidden      int
		facts       walkFacts
		wantClasses []string
		notLiveYet  []string
	)
	for _, c := range strings.Split(*walkClasses, ",") {
		if c = strings.TrimSpace(c); c != "" {
			wantClasses = append(wantClasses, c)
		}
	}
	for round := 1; ; round++ {
		results, missing, hidden, facts = walkOnce(ctx, t, minRate)
		var empty, failed []walkResult
		for _, r := range results {
			switch r.status {
			case "EMPTY":
				empty = append(empty, r)
			case "ERROR":
				failed = append(failed, r)
			}
		}
		notLiveYet = nil
		for _, c := range wantClasses {
			if domain, class, ok := strings.Cut(c, "="); ok {
				if facts.domainClass[domain] != class {
					notLiveYet = append(notLiveYet, fmt.Sprintf("%s (%s has %q)", class, domain, facts.domainClass[domain]))
				}
			} else if !facts.liveClasses[c] {
				notLiveYet = append(notLiveYet, c)
			}
		}
		if (len(empty) == 0 && len(notLiveYet) == 0) || len(failed) > 0 || time.Now().Add(*walkScrape).After(deadline) {
			break
		}
		groups, _ := RuleGroups(ctx, *walkProm)
		pending := fmt.Sprintf("%d of %d queries still empty", len(empty), len(results))
		if len(empty) > 0 {
			pending += fmt.Sprintf(" (first: %s / %s%s)", empty[0].q.Dashboard, empty[0].q.Panel, refOf(empty[0].q))
		}
		fmt.Printf("walk: %s round %d: %s; live classes %s; long-window groups last evaluated: %s; asking again until %s\n",
			time.Now().UTC().Format("15:04:05"), round, pending, facts.classList(), longGroups(groups), deadline.UTC().Format("15:04:05"))
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(*walkScrape):
		}
	}
	for _, s := range facts.selections {
		fmt.Printf("walk: opened %s\n", s)
	}
	printWalk(results, missing, hidden)
	fmt.Printf("walk: live classes at the end: %s\n", facts.classList())

	if len(notLiveYet) > 0 {
		t.Errorf("live classes missing: %s (live: %s); -classes asks for %s", strings.Join(notLiveYet, ", "), facts.classList(), *walkClasses)
	}
	for _, r := range results {
		switch r.status {
		case "ERROR":
			t.Errorf("%s / %s%s: %v\n  %s", r.q.Dashboard, r.q.Panel, refOf(r.q), r.err, r.q.Expr)
		case "EMPTY":
			t.Errorf("%s / %s%s: no data (instant %d series, range %d)\n  %s", r.q.Dashboard, r.q.Panel, refOf(r.q), r.instant, r.ranged, r.q.Expr)
		}
	}
}

// waitRuleGroups waits, until deadline, for every rule group of Prometheus
// to have evaluated at least once, and fails if one has not by then.
func waitRuleGroups(ctx context.Context, t *testing.T, deadline time.Time) {
	t.Helper()
	for {
		groups, err := RuleGroups(ctx, *walkProm)
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) == 0 {
			t.Fatalf("%s has no rule groups: the dashboards read fspair's recording rules (rules/*.yml)", *walkProm)
		}
		var waiting []string
		for _, g := range groups {
			if g.LastEvaluation.IsZero() || g.LastEvaluation.Year() < 2000 {
				waiting = append(waiting, fmt.Sprintf("%s (every %gs)", g.Name, g.Interval))
			}
		}
		if len(waiting) == 0 {
			fmt.Printf("walk: all %d rule groups have evaluated; long-window ones last at %s\n", len(groups), longGroups(groups))
			return
		}
		if time.Now().Add(*walkScrape).After(deadline) {
			t.Fatalf("rule groups not evaluated yet: %s (pass a longer -wait)", strings.Join(waiting, ", "))
		}
		fmt.Printf("walk: %s waiting for rule groups to evaluate a first time: %s\n", time.Now().UTC().Format("15:04:05"), strings.Join(waiting, ", "))
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(*walkScrape):
		}
	}
}

// longGroups lists the groups evaluated less often than the most frequent
// ones (the long-window groups: every 3m as committed, every 30s in
// make demo-smoke), with their last evaluation.
func longGroups(groups []RuleGroup) string {
	var out []string
	least := math.Inf(1)
	for _, g := range groups {
		least = math.Min(least, g.Interval)
	}
	for _, g := range groups {
		if g.Interval > least {
			last := "never"
			if !g.LastEvaluation.IsZero() && g.LastEvaluation.Year() >= 2000 {
				last = g.LastEvaluation.UTC().Format("15:04:05")
			}
			out = append(out, g.Name+" "+last)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// minStageRate reads efficiency.min_stage_requests_per_second from the
// rules' thresholds file.
func minStageRate(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var conf struct {
		Efficiency struct {
			MinStage *struct {
				Value float64 `yaml:"value"`
			} `yaml:"min_stage_requests_per_second"`
		} `yaml:"efficiency"`
	}
	if err := yaml.Unmarshal(b, &conf); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if conf.Efficiency.MinStage == nil {
		return 0, fmt.Errorf("%s: no efficiency.min_stage_requests_per_second", path)
	}
	return conf.Efficiency.MinStage.Value, nil
}

// walkOnce opens every dashboard and runs all its queries once.
func walkOnce(ctx context.Context, t *testing.T, minRate float64) (results []walkResult, missing []string, hidden int, facts walkFacts) {
	t.Helper()
	ds, err := ReadDashboards(*walkDashboards)
	if err != nil {
		t.Fatal(err)
	}
	w := Window{End: time.Now(), Range: *walkRange, Scrape: *walkScrape}
	// The classes the disks have now: a copy for a class one disk had a
	// while ago may miss the fleet group's evaluations of it.
	facts = walkFacts{minStageRate: minRate, liveClasses: map[string]bool{}, pairedClasses: map[string]bool{}, domainClass: map[string]string{},
		domainInfo: map[string]map[string]string{}, domainGuestHistogram: map[string]string{}}
	paired, err := instantQuery(ctx, *walkProm, `group by (class) (domain_disk:fspair_class_pair:info)`, w.End)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range paired.Data.Result {
		facts.pairedClasses[s.Metric["class"]] = true
	}
	classes, err := instantQuery(ctx, *walkProm, `group by (domain, class) (domain_disk:fspair_workload_class:info)`, w.End)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range classes.Data.Result {
		facts.liveClasses[s.Metric["class"]] = true
		d := s.Metric["domain"]
		if facts.domainClass[d] != "" {
			facts.domainClass[d] += ","
		}
		facts.domainClass[d] += s.Metric["class"]
	}
	by := []string{"domain"}
	for _, c := range configCounters {
		if !slices.Contains(by, c.label) {
			by = append(by, c.label)
		}
	}
	info, err := instantQuery(ctx, *walkProm, "group by ("+strings.Join(by, ", ")+") (fspair_disk_info)", w.End)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Data.Result {
		d := s.Metric["domain"]
		if facts.domainInfo[d] == nil {
			facts.domainInfo[d] = map[string]string{}
		}
		for _, c := range configCounters {
			if v := facts.domainInfo[d][c.label]; v != "" {
				facts.domainInfo[d][c.label] = v + ","
			}
			facts.domainInfo[d][c.label] += s.Metric[c.label]
		}
	}
	facts.classOpRate = map[classOp]float64{}
	rates, err := instantQuery(ctx, *walkProm, `max by (class, op) (
    min without (stage) (domain_disk:fspair_disk_stage_seconds_count:rate1h)
  * on (instance, domain, uuid, target_device, source_file) group_left (class)
    domain_disk:fspair_class_pair:info
)`, w.End)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rates.Data.Result {
		v, err := s.number()
		if err != nil {
			t.Fatalf("stage request rates: %v", err)
		}
		facts.classOpRate[classOp{s.Metric["class"], s.Metric["op"]}] = v
	}
	guest, err := instantQuery(ctx, *walkProm, `group by (domain, histogram) (fspair_disk_guest_info)`, w.End)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range guest.Data.Result {
		d := s.Metric["domain"]
		if facts.domainGuestHistogram[d] != "" {
			facts.domainGuestHistogram[d] += ","
		}
		facts.domainGuestHistogram[d] += s.Metric["histogram"]
	}
	for _, d := range ds {
		o, err := Open(ctx, *walkProm, d, w, walkVars)
		if err != nil {
			t.Fatal(err)
		}
		missing = append(missing, o.Missing...)
		hidden += o.Hidden
		var sel []string
		for _, v := range o.Selections {
			val := strings.Join(v.Values, ",")
			if v.All {
				val = "All"
			}
			sel = append(sel, v.Name+"="+val)
		}
		facts.selections = append(facts.selections, d.UID+": "+strings.Join(sel, " "))
		for _, q := range append(append([]Query(nil), o.Variables...), o.Panels...) {
			r := walkResult{q: q}
			r.instant, r.err = Instant(ctx, *walkProm, q.Expr, w.End)
			if r.err == nil {
				r.ranged, r.err = Range(ctx, *walkProm, q.Expr, w)
			}
			for _, e := range expectedEmpty {
				if why := e.why(q, facts); why != "" {
					r.expected = why
					break
				}
			}
			switch {
			case r.err != nil:
				r.status = "ERROR"
				if ctx.Err() != nil || !isAPIError(r.err) {
					t.Fatalf("ask %s: %v", *walkProm, r.err)
				}
			case r.instant > 0 && r.ranged > 0:
				r.status = "ok"
				r.expectedButFound = r.expected != ""
			case r.expected != "":
				r.status = "empty (expected)"
			default:
				r.status = "EMPTY"
			}
			results = append(results, r)
		}
	}
	return results, missing, hidden, facts
}

func isAPIError(err error) bool {
	var ae *APIError
	return errors.As(err, &ae)
}

func refOf(q Query) string {
	s := ""
	if q.RefID != "" {
		s = " [" + q.RefID + "]"
	}
	if q.Repeat != "" {
		s += " (" + q.Repeat + ")"
	}
	return s
}

// printWalk prints the table, the totals and the expected-empty reasons.
func printWalk(results []walkResult, missing []string, hidden int) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DASHBOARD\tPANEL\tREF\tINSTANT\tRANGE\tRESULT\t")
	count := map[string]int{}
	byReason := map[string]int{}
	var surprises []walkResult
	for _, r := range results {
		count[r.status]++
		res := r.status
		switch {
		case r.status == "empty (expected)":
			res += ": " + r.expected
			byReason[r.expected]++
		case r.status == "ERROR":
			res += ": " + r.err.Error()
		case r.expectedButFound:
			surprises = append(surprises, r)
		}
		ref := r.q.RefID
		if r.q.Repeat != "" {
			ref = strings.TrimPrefix(ref+" "+r.q.Repeat, " ")
		}
		panel := r.q.Panel
		if len(panel) > 60 {
			panel = panel[:57] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t\n", r.q.Dashboard, panel, ref, r.instant, r.ranged, res)
	}
	tw.Flush()
	vars := 0
	for _, r := range results {
		if r.q.Variable != "" {
			vars++
		}
	}
	fmt.Printf("\nwalk: %d queries (%d panel targets, %d variable selectors), each instant and range: %d ok, %d empty as expected, %d EMPTY, %d ERROR\n",
		len(results), len(results)-vars, vars, count["ok"], count["empty (expected)"], count["EMPTY"], count["ERROR"])
	if hidden > 0 {
		fmt.Printf("walk: %d hidden targets not run (Grafana does not run them)\n", hidden)
	}
	fmt.Println("walk: queries allowed to be empty (they must still run):")
	for _, e := range expectedEmpty {
		fmt.Printf("  - %s\n", e.summary)
	}
	if len(byReason) > 0 {
		fmt.Println("walk: empty in this run, by reason:")
		reasons := make([]string, 0, len(byReason))
		for k := range byReason {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		for _, k := range reasons {
			fmt.Printf("  %3d  %s\n", byReason[k], k)
		}
	}
	for _, r := range surprises {
		fmt.Printf("walk: note: %s / %s%s has data although listed as possibly empty (%s)\n", r.q.Dashboard, r.q.Panel, refOf(r.q), r.expected)
	}
	for _, m := range missing {
		fmt.Printf("walk: variable without values: %s\n", m)
	}
}

// TestConfigCounterReason: a configuration-dependent family is allowed
// empty only for a domain none of whose disks can count it.
func TestConfigCounterReason(t *testing.T) {
	reason := expectedReason(t, "io_uring punts off aio=io_uring")
	f := walkFacts{domainInfo: map[string]map[string]string{
		"threads": {"aio": "threads", "format": "raw", "host_fs": "ext4", "cache": "none"},
		"mixed":   {"aio": "threads,io_uring", "format": "raw,qcow2", "host_fs": "ext4,btrfs", "cache": "none,writethrough"},
		"unknown": {"aio": "unknown", "format": "unknown", "host_fs": "unknown", "cache": "unknown"},
	}}
	for _, c := range []struct {
		expr  string
		empty bool
	}{
		{`sum(rate(fspair_disk_io_uring_punted_total{domain="threads"}[1m]))`, true},
		{`sum(rate(fspair_disk_format_metadata_bytes_total{domain="threads"}[1m]))`, true},
		{`sum(rate(fspair_disk_io_uring_punted_total{domain="mixed"}[1m]))`, false},
		{`sum(rate(fspair_disk_format_metadata_bytes_total{domain="mixed"}[1m]))`, false},
		{`sum(rate(fspair_disk_btrfs_extent_bytes_total{domain="threads"}[1m]))`, true},
		{`sum(rate(fspair_disk_host_cache_reads_total{domain="threads", result="hit"}[1m]))`, true},
		{`sum(rate(fspair_disk_btrfs_extent_bytes_total{domain="mixed"}[1m]))`, false},
		{`sum(rate(fspair_disk_host_cache_reads_total{domain="mixed", result="hit"}[1m]))`, false},
		{`sum(rate(fspair_disk_io_uring_punted_total{domain="unknown"}[1m]))`, false},
		{`sum(rate(fspair_disk_host_cache_reads_total{domain="unknown", result="hit"}[1m]))`, false},
		{`sum(rate(fspair_disk_io_uring_punted_total{domain="absent"}[1m]))`, false},
		{`sum(rate(fspair_disk_requests_total{domain="threads"}[1m]))`, false},
	} {
		q := Query{Expr: c.expr, Template: c.expr}
		if got := reason.why(q, f) != ""; got != c.empty {
			t.Errorf("%s: allowed empty %v, want %v", c.expr, got, c.empty)
		}
	}
}

// TestEmptyReasonGuestHistogram: the guest latency histogram is allowed
// empty only for a domain none of whose disks has one; the guest's total
// time and the rules are not.
func TestEmptyReasonGuestHistogram(t *testing.T) {
	reason := expectedReason(t, "the guest's latency histograms")
	f := walkFacts{domainGuestHistogram: map[string]string{"old": "libvirt_too_old", "mixed": "libvirt_too_old,ok", "qmp": "ok"}}
	heatmap := `sum(rate(fspair_disk_guest_request_duration_seconds{domain="%s", op="read"}[1m])) or on () ` +
		`sum by (le) (rate(fspair_disk_guest_request_duration_seconds_bucket{domain="%s", op="read"}[1m]))`
	for _, c := range []struct {
		expr  string
		empty bool
	}{
		{fmt.Sprintf(heatmap, "old", "old"), true},
		{fmt.Sprintf(heatmap, "absent", "absent"), true},
		{fmt.Sprintf(heatmap, "mixed", "mixed"), false},
		{fmt.Sprintf(heatmap, "qmp", "qmp"), false},
		{`histogram_count(rate(fspair_disk_guest_request_duration_seconds{domain="old"}[1m]))`, true},
		{`rate(fspair_disk_guest_request_duration_seconds_total{domain="old"}[1m])`, false},
		{`domain_disk:fspair_disk_guest_path_latency_seconds:quantile5m{domain="old", layer="guest"}`, false},
		{`sum(rate(fspair_disk_requests_total{domain="old"}[1m]))`, false},
	} {
		q := Query{Expr: c.expr, Template: c.expr}
		if got := reason.why(q, f) != ""; got != c.empty {
			t.Errorf("%s: allowed empty %v, want %v (%q)", c.expr, got, c.empty, reason.why(q, f))
		}
	}
}

// TestEmptyReasonErrors: the image file's errors may be empty (no request
// failed); the requests beside them may not.
func TestEmptyReasonErrors(t *testing.T) {
	reason := expectedReason(t, "request errors on the image file")
	for _, c := range []struct {
		expr  string
		empty bool
	}{
		{`sum by (op) (rate(fspair_disk_request_errors_total{domain="demo-web", target_device="vda"}[1m]))`, true},
		{`sum by (op) (rate(fspair_disk_requests_total{domain="demo-web", target_device="vda"}[1m]))`, false},
		{`sum(rate(fspair_disk_guest_requests_total{domain="demo-web"}[1m]))`, false},
	} {
		q := Query{Expr: c.expr, Template: c.expr}
		if got := reason.why(q, walkFacts{}) != ""; got != c.empty {
			t.Errorf("%s: allowed empty %v, want %v", c.expr, got, c.empty)
		}
	}
}

// TestEmptyReasonUnpairedClass: a fleet row repeated for a class is allowed
// empty while no disk has that class paired, live or not; never once one has.
func TestEmptyReasonUnpairedClass(t *testing.T) {
	reason := expectedReason(t, "copies of a row repeated per workload class")
	f := walkFacts{liveClasses: map[string]bool{"web": true, "mail": true}, pairedClasses: map[string]bool{"mail": true}}
	tmpl := `count by (guest_fs, host_fs) (domain_disk:fspair_class_pair:info{class="$class"})`
	for _, c := range []struct {
		class string
		empty bool
	}{{"mail", false}, {"web", true}, {"rfa", true}} {
		q := Query{Expr: tmpl, Template: tmpl, Repeat: "class=" + c.class}
		if got := reason.why(q, f) != ""; got != c.empty {
			t.Errorf("class %s: allowed empty %v, want %v (%q)", c.class, got, c.empty, reason.why(q, f))
		}
	}
}

// TestEmptyReasonThinOperation: a paired class's host-FS overhead of an
// operation is allowed empty only while no paired disk of the class made
// enough requests of it; never for an unpaired class (its own reason
// covers it) nor for other families.
func TestEmptyReasonThinOperation(t *testing.T) {
	reason := expectedReason(t, "host-FS latency overheads (image-file per device mean latency")
	rate, err := minStageRate(*walkRulesConf)
	if err != nil {
		t.Fatal(err)
	}
	f := walkFacts{pairedClasses: map[string]bool{"web": true, "mail": true}, minStageRate: rate,
		classOpRate: map[classOp]float64{
			{"web", "read"}: 3 * rate, {"web", "write"}: rate / 5,
			{"mail", "read"}: 2 * rate, {"mail", "write"}: rate, {"mail", "flush"}: rate / 2,
		}}
	overhead := `class_pair:fspair_hostfs_latency_overhead:median_ratio_rate1h{class=~"$class", op="%s"}`
	for _, c := range []struct {
		tmpl, repeat string
		empty        bool
	}{
		{fmt.Sprintf(overhead, "write"), "class=web", true},
		{fmt.Sprintf(overhead, "read"), "class=web", false},
		{fmt.Sprintf(overhead, "write"), "class=mail", false}, // at the threshold: kept
		{fmt.Sprintf(overhead, "flush"), "class=mail", true},
		{fmt.Sprintf(overhead, "write"), "workload=web", true},
		{fmt.Sprintf(overhead, "write"), "class=rfa", false}, // not paired
		{fmt.Sprintf(overhead, "write"), "", false},          // no class copy
		{`class_pair:fspair_hostfs_latency_overhead:median_ratio_rate1h{class=~"$class"}`, "class=web", false},
		{`domain_disk:fspair_disk_stage_seconds:mean1h{op="write"} * on (domain) group_left (class) domain_disk:fspair_class_pair:info{class=~"$class"}`, "class=web", true},
		{`class_pair:fspair_write_amplification:median_ratio_rate1h{class=~"$class", op="write"}`, "class=web", false},
	} {
		q := Query{Expr: c.tmpl, Template: c.tmpl, Repeat: c.repeat}
		if got := reason.why(q, f) != ""; got != c.empty {
			t.Errorf("%s (%s): allowed empty %v, want %v (%q)", c.tmpl, c.repeat, got, c.empty, reason.why(q, f))
		}
	}
	none := walkFacts{pairedClasses: map[string]bool{"web": true}, minStageRate: rate,
		classOpRate: map[classOp]float64{{"web", "read"}: rate / 2, {"mail", "read"}: 2 * rate}}
	all := Query{Expr: `class_pair:fspair_hostfs_latency_overhead:median_ratio_rate1h{class=~"web"}`, Repeat: "class=web"}
	all.Template = all.Expr
	if reason.why(all, none) == "" {
		t.Errorf("a class below the rate for every operation: not allowed empty")
	}
}

// expectedReason is the reason for expected empty queries whose summary
// holds part.
func expectedReason(t *testing.T, part string) emptyReason {
	t.Helper()
	for _, r := range expectedEmpty {
		if strings.Contains(r.summary, part) && r.why != nil {
			return r
		}
	}
	t.Fatalf("no reason for expected empty queries mentions %q", part)
	return emptyReason{}
}
