package main

// What the demo prints of fspair's conclusions: per VM disk the live
// workload class and its confidence (a class that has not held for the
// settle time yet shows as "web (settling)", and a settled one the rules
// did not pair, its confidence below their minimum, as "web (unsure)":
// neither with a verdict, as the rules give them none), the disk's
// guest/host pair, the
// knowledge base's verdict on that pair for the class, the write
// amplification and the alerts on it, all read back from the recording
// rules the dashboards read (rules/README.md names them); and, at exit, a
// summary of what the run showed and where to look next. Collecting
// (Prometheus' HTTP API) and formatting are apart, so that the formatting
// is tested without a VM (conclusions_test.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// lineWidth is the most columns any line the demo prints may take.
const lineWidth = 120

// The series the conclusions come from: the rules' (rules/fspair.rules.yml,
// generated with the default windows, which the demo keeps) and the
// knowledge base's (rules/fspair-kdb.rules.yml).
const (
	seriesClass      = `domain_disk:fspair_workload_class:info`
	seriesConfidence = `domain_disk:fspair_workload_class:confidence`
	seriesSettled    = `domain_disk:fspair_workload_class:settled_ratio`
	seriesPair       = `domain_disk:fspair_class_pair:info`
	seriesVerdict    = `domain_disk:fspair_pair_verdict:info`
	seriesWriteAmp   = `domain_disk:fspair_write_amplification:ratio_rate5m`
	seriesAdvice     = `fspair_kdb_workload_info`
	seriesKdbVerdict = `fspair_kdb_pair_verdict`
	seriesDisks      = `fspair_disk_info`
)

// kdbWorkloads are the classes the knowledge base rates pairs for
// (rules/kdb/pairs.yaml); idle and mixed have no verdict.
var kdbWorkloads = map[string]bool{"web": true, "mail": true, "fileserver": true, "rfa": true}

// diskState is what the demo knows of one VM disk at one moment.
type diskState struct {
	disk                    string // domain/target_device
	domain, target          string
	guestFS, hostFS, format string
	class                   string  // live workload class; "" before the rules have one
	confidence              float64 // domain_disk:fspair_workload_class:confidence (damped while the class settles); NaN: none yet
	// settled is the share of the settle time the class has been held
	// (1: settled; NaN: no class, or the rules have not recorded it yet):
	// until then nothing acts on the class, and the demo shows no verdict
	// on it.
	settled float64
	// paired says the rules paired the disk's class with its guest/host
	// pair (domain_disk:fspair_class_pair:info with the class): settled
	// and, for a workload class, at least their minimum confidence
	// (rules/classes.yaml settle.min_confidence). Verdicts, the fleet view
	// and the alerts act only on a paired class.
	paired          bool
	verdict, source string  // the knowledge base's verdict in force on the pair for the class, and its source label
	betterPairs     string  // the class's best pairs other than this one
	advice          string  // the knowledge base's advice for the class
	kdbRates        bool    // the knowledge base has a verdict on the pair for the class
	writeAmp        float64 // host device bytes per guest byte written, 5m; NaN: none
	alerts          []alertState
	guest           guestLatency // the guest's p99 and the layer holding its time (guestlatency.go)

	// Where the published studies and the site both rated the pair for
	// the class, the verdict of the one not in force (the series'
	// published_verdict or site_verdict label).
	publishedVerdict, siteVerdict string
	study                         string // the class's published study (fspair_kdb_workload_info's source)
}

// alertState is one alert pending or firing.
type alertState struct {
	name, state          string // state: pending or firing
	disk                 string // domain/target_device; "" for an alert on something else
	since                time.Time
	runbook              string // the runbook's path in the repository, or its URL
	summary, description string
}

func (a alertState) firing() bool { return a.state == "firing" }

// settling says whether the disk has a class that has not settled yet:
// held for less than the settle time (rules/classes.yaml settle), or not
// known to have been held at all.
func (d diskState) settling() bool { return d.class != "" && !(d.settled >= 1) }

// unsure says whether the disk has a settled workload class the rules did
// not pair: its confidence is below their minimum, so nothing acts on it.
// (idle and mixed are paired once settled: no verdict rates them.)
func (d diskState) unsure() bool { return kdbWorkloads[d.class] && !d.settling() && !d.paired }

// classText is the class as the table shows it: "web", "web (settling)"
// while it settles, "web (unsure)" when settled but not confident enough
// for the rules to act on; "-" before the rules have one.
func (d diskState) classText() string {
	switch {
	case d.settling():
		return d.class + " (settling)"
	case d.unsure():
		return d.class + " (unsure)"
	}
	return orDash(d.class)
}

// verdictText is the knowledge base's verdict on the disk's pair for its
// live class, with where the verdict comes from: the published studies or
// the site's own measurements (rules/kdb/site.yaml), marked "*" where both
// rated the pair (verdictNotes says what each says). "neither" is a pair the
// knowledge base lists neither best nor worst for the class; "-" a class it
// has no verdicts for (idle, mixed), no class yet, a class still settling
// or unsure (the rules give it no verdict), or a verdict the rules have not
// joined to the disk yet (their pairing group evaluates after the class is
// recorded).
func (d diskState) verdictText() string {
	switch {
	case d.settling(), d.unsure():
		return "-"
	case d.disagreement() != "":
		// The mark refers to the line verdictNotes prints under the table.
		return d.verdict + ", " + sourceKind(d.source) + "*"
	case d.verdict != "":
		return d.verdict + ", " + sourceKind(d.source)
	case kdbWorkloads[d.class] && !d.kdbRates:
		return "neither"
	}
	return "-"
}

// disagreement says what both sources rate the disk's pair for its class
// and which one the rules act on, where the published studies and the
// site both rated it ("" where one did): "published best, site worst; the
// rules act on the site's verdict".
func (d diskState) disagreement() string {
	var published, site string
	switch {
	case d.verdict == "":
		return ""
	case d.publishedVerdict != "":
		published, site = d.publishedVerdict, d.verdict
	case d.siteVerdict != "":
		published, site = d.verdict, strings.ReplaceAll(d.siteVerdict, "_", " ")
	default:
		return ""
	}
	return fmt.Sprintf("published %s, site %s; the rules act on the %s verdict", published, site, sourceKind(d.source))
}

// verdictNotes are the lines under the conclusions table for the disks
// whose verdict is marked: both verdicts, and which one the rules act on.
func verdictNotes(disks []diskState, width int) []string {
	var lines []string
	for _, d := range disks {
		if why := d.disagreement(); why != "" {
			lines = append(lines, wrap("  * ", fmt.Sprintf("%s, %s/%s for %s: %s.", d.disk, d.guestFS, d.hostFS, d.class, why), width)...)
		}
	}
	return lines
}

// sourceKind names a verdict's source label for a reader: "site" for the
// site's own, "published" for a study's (the label names the study).
func sourceKind(source string) string {
	if source == "site" {
		return "site"
	}
	return "published"
}

func (d diskState) pairText() string {
	if d.guestFS == "" && d.hostFS == "" {
		return "-"
	}
	return orDash(d.guestFS) + "/" + orDash(d.hostFS) + " " + orDash(d.format)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func number(v float64, format string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// conclusionsTable is the per-disk table of fspair's conclusions, one line
// per disk, none wider than width: the disk (its domain cut when long),
// class and confidence, pair, verdict, write amplification and the alerts
// on the disk. Firing alerts show with their runbook, pending ones as such;
// when they do not fit, their names only, and then as many as fit and how
// many more (alertLines has them all).
func conclusionsTable(disks []diskState, width int) []string {
	head := []string{"DISK", "CLASS", "CONF", "PAIR(guest/host)", "KDB_VERDICT", "WR_AMP", "ALERTS (runbook)"}
	rows := make([][]string, len(disks))
	for i, d := range disks {
		rows[i] = []string{d.disk, d.classText(), number(d.confidence, "%.2f"), d.pairText(), d.verdictText(), number(d.writeAmp, "%.2f")}
	}
	// Every column but the first and the last is as wide as its widest
	// cell, capped; the disk takes what leaves the alerts room for one
	// alert with its runbook, but at least minDiskWidth. The class column
	// takes "fileserver (settling)".
	caps := []int{0, 21, 4, 20, 20, 7}
	widths := columnWidths(head[:len(head)-1], rows, caps)
	const gap = 2
	fixed := 0
	for _, w := range widths[1:] {
		fixed += w + gap
	}
	widths[0] = min(widths[0], max(minDiskWidth, width-fixed-gap-minAlertsWidth))
	alertsWidth := width - fixed - widths[0] - gap
	lines := []string{joinCells(append(cutCells(head[:len(head)-1], widths), cut(head[len(head)-1], alertsWidth)), widths, gap)}
	for i, d := range disks {
		cells := cutCells(rows[i], widths)
		cells[0] = cutDisk(d.disk, widths[0])
		cells = append(cells, alertsCell(d.alerts, alertsWidth))
		lines = append(lines, joinCells(cells, widths, gap))
	}
	return append(lines, verdictNotes(disks, width)...)
}

// minDiskWidth is the least the disk column is cut to: enough to tell
// most domains apart.
const minDiskWidth = 20

// minAlertsWidth is the room the alerts column keeps before the disk column
// takes it: an alert's name and its runbook's path.
const minAlertsWidth = len("FspairPoorPairing (runbooks/FspairPoorPairing.md)")

// ratesTable is the per-disk table of request rates, indented under the
// conclusions; rates maps a disk to its cells by column head.
func ratesTable(disks []diskState, heads []string, rates map[string]map[string]string, width int) []string {
	const indent = "  "
	head := append([]string{"DISK"}, heads...)
	rows := make([][]string, len(disks))
	for i, d := range disks {
		rows[i] = []string{d.disk}
		for _, h := range heads {
			v := rates[d.disk][h]
			if v == "" || v == "NaN" {
				v = "-"
			}
			rows[i] = append(rows[i], v)
		}
	}
	widths := columnWidths(head, rows, nil)
	const gap = 2
	rest := len(indent)
	for _, w := range widths[1:] {
		rest += w + gap
	}
	widths[0] = min(widths[0], max(8, width-rest))
	lines := []string{indent + joinCells(head, widths, gap)}
	for i, d := range disks {
		cells := cutCells(rows[i], widths)
		cells[0] = cutDisk(d.disk, widths[0])
		lines = append(lines, indent+joinCells(cells, widths, gap))
	}
	return lines
}

// alertLines are two lines per alert, firing first: its name, state, on
// which disk, since when it is active (pending, then firing) and its
// runbook; then its summary, which says why it
// is there.
func alertLines(alerts []alertState, width int) []string {
	if len(alerts) == 0 {
		return []string{"demo: alerts: none pending or firing"}
	}
	var lines []string
	for _, a := range sortedAlerts(alerts) {
		on := ""
		if a.disk != "" {
			on = " on " + cutDisk(a.disk, 40)
		}
		lines = append(lines, wrap("demo: alert ", fmt.Sprintf("%s %s%s, active since %s: %s", a.name, a.state, on, a.since.Format("15:04:05"), a.runbook), width)...)
		lines = append(lines, wrap("  ", a.summary, width)...)
	}
	return lines
}

// sortedAlerts orders alerts firing first, then by name and disk.
func sortedAlerts(alerts []alertState) []alertState {
	out := append([]alertState(nil), alerts...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].firing() != out[j].firing() {
			return out[i].firing()
		}
		if out[i].name != out[j].name {
			return out[i].name < out[j].name
		}
		return out[i].disk < out[j].disk
	})
	return out
}

// alertsCell lists a disk's alerts in width columns.
func alertsCell(alerts []alertState, width int) string {
	if len(alerts) == 0 {
		return "-"
	}
	var full, names []string
	for _, a := range sortedAlerts(alerts) {
		if a.firing() {
			full = append(full, a.name+" ("+a.runbook+")")
			names = append(names, a.name)
		} else {
			full = append(full, a.name+" pending")
			names = append(names, a.name+" pending")
		}
	}
	if s := strings.Join(full, ", "); runes(s) <= width {
		return s
	}
	return fitList(names, width)
}

// fitList joins as many items as fit in width with ", ", and " +N" for
// the N left out.
func fitList(items []string, width int) string {
	if s := strings.Join(items, ", "); runes(s) <= width {
		return s
	}
	for n := len(items) - 1; n >= 1; n-- {
		s := strings.Join(items[:n], ", ") + fmt.Sprintf(" +%d", len(items)-n)
		if runes(s) <= width {
			return s
		}
	}
	return cut(fmt.Sprintf("%d alerts", len(items)), width)
}

// columnWidths is each column's widest cell or head, capped where caps
// has a cap above 0.
func columnWidths(head []string, rows [][]string, caps []int) []int {
	w := make([]int, len(head))
	for i, h := range head {
		w[i] = runes(h)
		for _, r := range rows {
			w[i] = max(w[i], runes(r[i]))
		}
		if i < len(caps) && caps[i] > 0 {
			w[i] = min(w[i], max(caps[i], runes(h)))
		}
	}
	return w
}

func cutCells(cells []string, widths []int) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = cut(c, widths[i])
	}
	return out
}

// joinCells pads each cell but the last to its column's width.
func joinCells(cells []string, widths []int, gap int) string {
	var b strings.Builder
	for i, c := range cells {
		b.WriteString(c)
		if i < len(cells)-1 {
			b.WriteString(strings.Repeat(" ", widths[i]-runes(c)+gap))
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// cut shortens s to n columns, its last one a '~' when cut.
func cut(s string, n int) string {
	if runes(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	r := []rune(s)
	return string(r[:n-1]) + "~"
}

// cutDisk shortens domain/target to n columns by cutting the domain, so
// that the target stays readable.
func cutDisk(disk string, n int) string {
	if runes(disk) <= n {
		return disk
	}
	domain, target, ok := strings.Cut(disk, "/")
	if !ok || runes(target)+3 > n {
		return cut(disk, n)
	}
	return cut(domain, n-runes(target)-1) + "/" + target
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// wrap breaks text into lines of at most width columns: the first begins
// with first, the others with an indent as wide. Words longer than a line
// are cut.
func wrap(first, text string, width int) []string {
	indent := strings.Repeat(" ", runes(first))
	var lines []string
	line := first
	empty := true
	for _, w := range strings.Fields(text) {
		switch {
		case empty:
			line += w
			empty = false
		case runes(line)+1+runes(w) <= width:
			line += " " + w
		default:
			lines = append(lines, cut(line, width))
			line = indent + w
		}
	}
	return append(lines, cut(line, width))
}

// finalSummary is what the demo prints last: what it showed of each disk
// (class, the knowledge base's verdict, write amplification, alerts and,
// on a worst pair, the better pairs and the advice), then what to open
// next: the runbooks of the alerts that fired, the dashboards with the
// disks to pick, the report and the logs.
func finalSummary(at time.Time, disks []diskState, alerts []alertState, report []string, reportAt, logs string, width int) []string {
	lines := []string{fmt.Sprintf("demo: what this run showed (from Prometheus at %s, before the teardown):", at.Format("15:04:05"))}
	if len(disks) == 0 {
		lines = append(lines, "  no VM disk in Prometheus")
	}
	diskWidth := 0
	for _, d := range disks {
		diskWidth = max(diskWidth, runes(d.disk))
	}
	diskWidth = min(diskWidth, 30)
	var worstDomain, worstClass string
	for _, d := range disks {
		first := "  " + cutDisk(d.disk, diskWidth) + strings.Repeat(" ", diskWidth-runes(cutDisk(d.disk, diskWidth))+2)
		var text []string
		switch {
		case d.class == "":
			text = append(text, "not classed (yet): the rules need a few minutes of its requests.")
		case d.settling():
			text = append(text, fmt.Sprintf("%s, still settling (confidence %s) on %s: the class has not held for the settle time yet, "+
				"so no verdict nor alert acts on it.", d.class, number(d.confidence, "%.2f"), d.pairText()))
		case d.unsure():
			text = append(text, fmt.Sprintf("%s, unsure (confidence %s) on %s: below the confidence the rules act at "+
				"(rules/classes.yaml settle.min_confidence), so no verdict nor alert acts on it.", d.class, number(d.confidence, "%.2f"), d.pairText()))
		default:
			text = append(text, fmt.Sprintf("%s (confidence %s) on %s.", d.class, number(d.confidence, "%.2f"), d.pairText()))
		}
		switch {
		case d.settling(), d.unsure():
		case d.verdict != "":
			text = append(text, fmt.Sprintf("The knowledge base (%s) lists this pair as %s for %s.", sourceLabel(d.source), d.verdict, d.class))
			text = append(text, d.otherSource()...)
		case kdbWorkloads[d.class] && !d.kdbRates:
			text = append(text, fmt.Sprintf("The knowledge base lists this pair neither best nor worst for %s.", d.class))
		}
		if !math.IsNaN(d.writeAmp) {
			text = append(text, fmt.Sprintf("Write amplification %.2f.", d.writeAmp))
		}
		if d.verdict == "worst" && !d.settling() && !d.unsure() {
			if d.betterPairs != "" {
				text = append(text, fmt.Sprintf("Better pairs for %s: %s.", d.class, d.betterPairs))
			}
			if d.advice != "" {
				text = append(text, "Advice: "+d.advice)
			}
			if worstDomain == "" {
				worstDomain, worstClass = d.domain, d.class
			}
		}
		var fired []string
		for _, a := range sortedAlerts(d.alerts) {
			fired = append(fired, fmt.Sprintf("%s %s, active since %s (%s)", a.name, a.state, a.since.Format("15:04:05"), a.runbook))
		}
		if len(fired) == 0 {
			text = append(text, "No alerts.")
		} else {
			text = append(text, "Alerts: "+strings.Join(fired, "; ")+".")
		}
		lines = append(lines, wrap(first, strings.Join(text, " "), width)...)
	}
	for _, a := range sortedAlerts(alerts) {
		if a.disk == "" {
			lines = append(lines, wrap("  ", fmt.Sprintf("%s %s, active since %s (%s): %s", a.name, a.state, a.since.Format("15:04:05"), a.runbook, a.summary), width)...)
		}
	}
	for _, a := range sortedAlerts(alerts) {
		if a.firing() && a.description != "" {
			lines = append(lines, wrap("  why "+a.name+": ", a.description, width)...)
		}
	}

	lines = append(lines, "demo: open next:")
	var runbooks []string
	seen := map[string]bool{}
	for _, a := range sortedAlerts(alerts) {
		if !seen[a.runbook] {
			seen[a.runbook] = true
			runbooks = append(runbooks, a.runbook)
		}
	}
	if len(runbooks) == 0 {
		runbooks = []string{"none fired; every alert's runbook is in runbooks/ (runbooks/README.md)"}
	}
	lines = append(lines, wrap("  runbooks    ", strings.Join(runbooks, ", "), width)...)
	// The dashboards, opened on the disk that most needs a look.
	diskVars, kdbVars := "", ""
	if worstDomain == "" && len(disks) > 0 {
		worstDomain = disks[0].domain
	}
	if worstDomain != "" {
		diskVars = " with domain=" + worstDomain
	}
	if worstClass != "" {
		kdbVars = " with workload=" + worstClass
	}
	for i, l := range []string{
		"fspair / VM disk (dashboards/fspair-disk.json" + diskVars + "): one disk, guest to host device",
		"fspair / Fleet (dashboards/fspair-fleet.json): every disk by class and pair, the worst pairs, alerts",
		"fspair / Knowledge base (dashboards/fspair-kdb.json" + kdbVars + "): published and site verdicts",
		"in a Grafana on a Prometheus with fspair's rules (compose.yaml runs both, deploy/grafana provisions)",
	} {
		head := "              "
		if i == 0 {
			head = "  dashboards  "
		}
		lines = append(lines, wrap(head, l, width)...)
	}
	if len(report) == 0 {
		lines = append(lines, "  report      none rendered in this run (see the demo: report lines above); make report renders one")
	}
	for i, f := range report {
		head := "              "
		if i == 0 {
			head = "  report      "
			f += " (rendered at " + reportAt + " from this run's Prometheus)"
		}
		lines = append(lines, wrap(head, f, width)...)
	}
	lines = append(lines, wrap("  logs        ", logs, width)...)
	return lines
}

// otherSource is the summary's sentence on the verdict of the source not
// in force, where the published studies and the site both rated the pair.
func (d diskState) otherSource() []string {
	study := "The published studies rate"
	if d.study != "" {
		study = "The published study (" + d.study + ") rates"
	}
	switch {
	case d.publishedVerdict != "":
		return []string{fmt.Sprintf("%s it %s, this site's measurement %s; the rules act on the site's verdict.",
			study, d.publishedVerdict, d.verdict)}
	case d.siteVerdict != "":
		return []string{fmt.Sprintf("This site's measurement rates it %s; the rules act on the published verdict.",
			strings.ReplaceAll(d.siteVerdict, "_", " "))}
	}
	return nil
}

// sourceLabel names a verdict's source for the summary: "site" or
// "published: <study>".
func sourceLabel(source string) string {
	if source == "site" || source == "" {
		return sourceKind(source)
	}
	return "published: " + source
}

// conclusions reads every disk's state and the alerts pending or firing
// from Prometheus. repo is the repository's root, where the runbooks are.
func conclusions(ctx context.Context, promURL, repo string) ([]diskState, []alertState, error) {
	byKey := map[string]*diskState{}
	info, err := query(ctx, promURL, seriesDisks)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range info {
		m := s.Metric
		k := diskKey(m)
		byKey[k] = &diskState{
			disk: k, domain: m["domain"], target: m["target_device"],
			guestFS: m["guest_fs"], hostFS: m["host_fs"], format: m["format"],
			confidence: math.NaN(), writeAmp: math.NaN(), settled: math.NaN(),
			guest: guestLatency{p99: map[string]float64{}, top: map[string]layerShare{}},
		}
	}
	// The class each verdict is on: the pairing group evaluates after the
	// class's, so for one evaluation after a change of class the verdict
	// can still be the previous class's.
	verdictOn := map[string]string{}
	each := func(q string, f func(d *diskState, s sample)) error {
		res, err := query(ctx, promURL, q)
		if err != nil {
			return err
		}
		for _, s := range res {
			if d := byKey[diskKey(s.Metric)]; d != nil {
				f(d, s)
			}
		}
		return nil
	}
	steps := []seriesStep{
		{seriesClass, func(d *diskState, s sample) { d.class = s.Metric["class"] }},
		{seriesConfidence, func(d *diskState, s sample) { d.confidence = s.value() }},
		{seriesSettled, func(d *diskState, s sample) {
			if s.Metric["class"] == d.class {
				d.settled = s.value()
			}
		}},
		{seriesPair, func(d *diskState, s sample) {
			if s.Metric["class"] == d.class {
				d.paired = true
			}
		}},
		{seriesVerdict, func(d *diskState, s sample) {
			d.verdict, d.source, d.betterPairs = s.Metric["verdict"], s.Metric["source"], s.Metric["better_pairs"]
			d.publishedVerdict, d.siteVerdict = s.Metric["published_verdict"], s.Metric["site_verdict"]
			verdictOn[d.disk] = s.Metric["class"]
		}},
		{seriesWriteAmp, func(d *diskState, s sample) { d.writeAmp = s.value() }},
	}
	for _, st := range append(steps, guestSteps...) {
		if err := each(st.q, st.f); err != nil {
			return nil, nil, err
		}
	}
	adv, err := query(ctx, promURL, seriesAdvice)
	if err != nil {
		return nil, nil, err
	}
	advice, study := map[string]string{}, map[string]string{}
	for _, s := range adv {
		if a := s.Metric["advice"]; a != "" {
			advice[s.Metric["workload"]] = a
		}
		study[s.Metric["workload"]] = s.Metric["source"]
	}
	kdb, err := query(ctx, promURL, seriesKdbVerdict)
	if err != nil {
		return nil, nil, err
	}
	rated := map[[3]string]bool{}
	for _, s := range kdb {
		rated[[3]string{s.Metric["workload"], s.Metric["guest_fs"], s.Metric["host_fs"]}] = true
	}
	alerts, err := activeAlerts(ctx, promURL, repo)
	if err != nil {
		return nil, nil, err
	}
	var disks []diskState
	for _, a := range alerts {
		if d := byKey[a.disk]; d != nil {
			d.alerts = append(d.alerts, a)
		}
	}
	for _, d := range byKey {
		if d.settling() || d.unsure() || verdictOn[d.disk] != d.class {
			// Only a verdict on the class shown, and a paired one.
			d.verdict, d.source, d.betterPairs, d.publishedVerdict, d.siteVerdict = "", "", "", "", ""
		}
		d.advice, d.study = advice[d.class], study[d.class]
		d.kdbRates = rated[[3]string{d.class, d.guestFS, d.hostFS}]
		disks = append(disks, *d)
	}
	sort.Slice(disks, func(i, j int) bool { return disks[i].disk < disks[j].disk })
	return disks, alerts, nil
}

// seriesStep is one series the conclusions read, and what a sample of it
// sets on its disk.
type seriesStep struct {
	q string
	f func(d *diskState, s sample)
}

func diskKey(m map[string]string) string { return m["domain"] + "/" + m["target_device"] }

func (s sample) value() float64 {
	if len(s.Value) < 2 {
		return math.NaN()
	}
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// activeAlerts reads the alerts pending or firing (Prometheus' alerts API,
// which has their annotations, runbook_url included).
func activeAlerts(ctx context.Context, promURL, repo string) ([]alertState, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, promURL+"/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query prometheus alerts: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Alerts []struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
				State       string            `json:"state"`
				ActiveAt    time.Time         `json:"activeAt"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode prometheus alerts: %w", err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("prometheus alerts: %s", out.Error)
	}
	var alerts []alertState
	for _, a := range out.Data.Alerts {
		s := alertState{
			name: a.Labels["alertname"], state: a.State, since: a.ActiveAt.Local(),
			runbook: runbookPath(a.Annotations["runbook_url"], repo),
			summary: a.Annotations["summary"], description: a.Annotations["description"],
		}
		if a.Labels["domain"] != "" {
			s.disk = diskKey(a.Labels)
		}
		alerts = append(alerts, s)
	}
	return sortedAlerts(alerts), nil
}

// runbookPath is the runbook's path in the repository at repo when the
// alert's runbook_url points at one there (.../runbooks/<Alert>.md), else
// the URL as it is.
func runbookPath(runbookURL, repo string) string {
	if runbookURL == "" {
		return "no runbook_url"
	}
	u, err := url.Parse(runbookURL)
	if err != nil {
		return runbookURL
	}
	i := strings.LastIndex(u.Path, "/runbooks/")
	if i < 0 {
		return runbookURL
	}
	rel := u.Path[i+1:]
	if _, err := os.Stat(filepath.Join(repo, rel)); err != nil {
		return runbookURL
	}
	return rel
}
