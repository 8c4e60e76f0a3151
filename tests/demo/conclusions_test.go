package main

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

const runbookURL = "https://github.com/fspair/fspair/blob/main/runbooks/"

var since = time.Date(2026, 11, 25, 16, 33, 39, 0, time.Local)

func poorPairing(disk string) alertState {
	return alertState{
		name: "FspairPoorPairing", state: "firing", disk: disk, since: since,
		runbook: "runbooks/FspairPoorPairing.md",
		summary: "A VM disk runs a workload on a guest/host file-system pair known to be poor for it.",
		description: "demo-mail disk vda (/tmp/fspair-lab-1273968828/hostfs-ext4-3369894872/demo-mail.raw) on " +
			"127.0.0.1:19477 has run a mail workload for 3m on btrfs inside the VM over ext4 on the host, a pair the " +
			"knowledge base (source: site) lists among the worst for mail (classifier confidence 1.00). The published " +
			"studies rate it best; the rules act on this site's measured verdict. Better pairs for mail: ext4/xfs, " +
			"ext4/ext4, xfs/ext4.",
	}
}

// demoDisks are the demo's two disks as a run showed them, mail's alert
// firing.
func demoDisks() []diskState {
	return []diskState{
		{
			disk: "demo-mail/vda", domain: "demo-mail", target: "vda", guestFS: "btrfs", hostFS: "ext4", format: "raw",
			class: "mail", confidence: 1, settled: 1, paired: true, verdict: "worst", source: "site", publishedVerdict: "best", study: "djordjevic2022",
			betterPairs: "ext4/xfs, ext4/ext4, xfs/ext4",
			advice: "Prefer the pairs ext4/xfs, ext4/ext4, xfs/ext4 (guest/host). " +
				"Avoid btrfs inside the VM, btrfs on the host, and the pair xfs/xfs (guest/host).",
			writeAmp: 1.04, alerts: []alertState{poorPairing("demo-mail/vda")},
		},
		{
			disk: "demo-web/vda", domain: "demo-web", target: "vda", guestFS: "xfs", hostFS: "ext4", format: "raw",
			class: "web", confidence: 0.987, settled: 1, paired: true, verdict: "best", source: "djordjevic2022", writeAmp: 1.02,
		},
	}
}

// earlyDisks are the demo's disks in its first minutes, as the rules give
// them: web still laying out its files and classed rfa, a class that has
// not settled (the rules give it no verdict, its confidence damped); mail
// classed mail, settling too.
func earlyDisks() []diskState {
	return []diskState{
		{
			disk: "demo-mail/vda", domain: "demo-mail", target: "vda", guestFS: "btrfs", hostFS: "ext4", format: "raw",
			class: "mail", confidence: 0.4, settled: 0.4, kdbRates: true, writeAmp: 1.04,
		},
		{
			disk: "demo-web/vda", domain: "demo-web", target: "vda", guestFS: "xfs", hostFS: "ext4", format: "raw",
			class: "rfa", confidence: 0.15, settled: 0.17, kdbRates: true, writeAmp: math.NaN(),
		},
	}
}

// longDisks have what a real host may have: long domain names, a pair the
// knowledge base does not rate, a contested verdict, no class yet, a
// write amplification in the thousands and several alerts on one disk.
func longDisks() []diskState {
	long := "tenant-4711-production-postgresql-primary-eu-west-1b-0123456789abcdef/vdb"
	many := []alertState{
		poorPairing(long),
		{name: "FspairWriteAmplificationHigh", state: "firing", disk: long, since: since, runbook: "runbooks/FspairWriteAmplificationHigh.md", summary: "x"},
		{name: "FspairMailFlushLatencyHigh", state: "firing", disk: long, since: since, runbook: "runbooks/FspairMailFlushLatencyHigh.md", summary: "x"},
		{name: "FspairHostFSLatencyOverheadHigh", state: "pending", disk: long, since: since, runbook: "runbooks/FspairHostFSLatencyOverheadHigh.md", summary: "x"},
	}
	return []diskState{
		{disk: long, domain: strings.TrimSuffix(long, "/vdb"), target: "vdb", guestFS: "btrfs", hostFS: "btrfs", format: "qcow2",
			class: "fileserver", confidence: 0.64, settled: 1, paired: true, verdict: "contested", source: "djordjevic2022", writeAmp: 1234.5678, alerts: many},
		{disk: "a/vda", domain: "a", target: "vda", guestFS: "ext4", hostFS: "zfs", format: "raw", class: "mail", confidence: 0.5,
			settled: 1, paired: true, writeAmp: math.NaN()},
		{disk: "booting-guest-with-a-name-of-sixty-four-characters-0123456789ab/sda", domain: "booting-guest-with-a-name-of-sixty-four-characters-0123456789ab",
			target: "sda", confidence: math.NaN(), settled: math.NaN(), writeAmp: math.NaN()},
		{disk: strings.Repeat("x", 200) + "/vda", domain: strings.Repeat("x", 200), target: "vda",
			guestFS: "ext4", hostFS: "ext4", format: "raw", class: "idle", confidence: 1, settled: 1, paired: true, writeAmp: math.NaN()},
	}
}

func checkWidth(t *testing.T, what string, lines []string) {
	t.Helper()
	if len(lines) == 0 {
		t.Fatalf("%s: no lines", what)
	}
	for _, l := range lines {
		if runes(l) > lineWidth {
			t.Errorf("%s: line of %d columns, over %d:\n%s", what, runes(l), lineWidth, l)
		}
	}
}

// The rows demo-smoke checks (scripts/demo-smoke.sh greps the same
// patterns): keep both in step.
var (
	smokeMail = regexp.MustCompile(`^demo-mail/vda +mail +[0-9.]+ +btrfs/ext4 raw +worst, site\* +[0-9.]+ +.*FspairPoorPairing( \(runbooks/FspairPoorPairing\.md\))?$`)
	smokeWeb  = regexp.MustCompile(`^demo-web/vda +(web +[0-9.]+ +xfs/ext4 raw +best, published +[0-9.]+|web \(unsure\) +[0-9.]+ +xfs/ext4 raw +- +([0-9.]+|-)) +-$`)
	smokeNote = regexp.MustCompile(`^  \* demo-mail/vda, btrfs/ext4 for mail: published best, site worst; the rules act on the site verdict\.$`)
	// A row whose class is still settling, and such a row without a
	// verdict: every row matching the first must match the second.
	smokeSettling  = regexp.MustCompile(`^demo-(web|mail)/vda +[a-z]+ \(settling\) `)
	smokeNoVerdict = regexp.MustCompile(`^demo-(web|mail)/vda +[a-z]+ \(settling\) +([0-9.]+|-) +[^ ]+ [^ ]+ +- `)
)

func TestConclusionsTableDemo(t *testing.T) {
	lines := conclusionsTable(demoDisks(), lineWidth)
	checkWidth(t, "conclusions", lines)
	want := []string{
		"DISK           CLASS  CONF  PAIR(guest/host)  KDB_VERDICT      WR_AMP  ALERTS (runbook)",
		"demo-mail/vda  mail   1.00  btrfs/ext4 raw    worst, site*     1.04    FspairPoorPairing (runbooks/FspairPoorPairing.md)",
		"demo-web/vda   web    0.99  xfs/ext4 raw      best, published  1.02    -",
		"  * demo-mail/vda, btrfs/ext4 for mail: published best, site worst; the rules act on the site verdict.",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if !smokeMail.MatchString(lines[1]) {
		t.Errorf("demo-smoke's pattern for the mail row does not match %q", lines[1])
	}
	if !smokeWeb.MatchString(lines[2]) {
		t.Errorf("demo-smoke's pattern for the web row does not match %q", lines[2])
	}
	if !smokeNote.MatchString(lines[3]) {
		t.Errorf("demo-smoke's pattern for the mail row's note does not match %q", lines[3])
	}
	// demo-web settled but unsure (the rules did not pair it): no verdict,
	// which the smoke's pattern takes too; a verdict beside it, never.
	u := demoDisks()
	u[1].confidence, u[1].paired = 0, false
	ut := conclusionsTable(u, lineWidth)
	unsure := ut[2]
	if !strings.Contains(unsure, "web (unsure)") || !smokeWeb.MatchString(unsure) {
		t.Errorf("demo-smoke's pattern for the web row does not match the unsure row %q", unsure)
	}
	// Its wider class cell leaves the mail row's alert its name only: the
	// smoke's pattern takes it (the alert's line names the runbook).
	if !smokeMail.MatchString(ut[1]) {
		t.Errorf("demo-smoke's pattern for the mail row does not match %q (beside an unsure web row)", ut[1])
	}
	if bad := "demo-web/vda   web (unsure)  0.00  xfs/ext4 raw      best, published  1.02    -"; smokeWeb.MatchString(bad) {
		t.Errorf("demo-smoke's pattern for the web row takes a verdict beside an unsure class: %q", bad)
	}
	// The pending alert shows as such, without its runbook, and the
	// smoke's pattern wants it firing.
	d := demoDisks()
	d[0].alerts[0].state = "pending"
	pending := conclusionsTable(d, lineWidth)[1]
	if !strings.HasSuffix(pending, "FspairPoorPairing pending") || smokeMail.MatchString(pending) {
		t.Errorf("pending alert row: %q", pending)
	}
}

// TestConclusionsTableSettling: in the demo's first minutes each class is
// shown as settling, with its damped confidence and no verdict; the rows
// match demo-smoke's settling patterns and none of its final ones.
func TestConclusionsTableSettling(t *testing.T) {
	lines := conclusionsTable(earlyDisks(), lineWidth)
	checkWidth(t, "conclusions", lines)
	want := []string{
		"DISK           CLASS            CONF  PAIR(guest/host)  KDB_VERDICT  WR_AMP  ALERTS (runbook)",
		"demo-mail/vda  mail (settling)  0.40  btrfs/ext4 raw    -            1.04    -",
		"demo-web/vda   rfa (settling)   0.15  xfs/ext4 raw      -            -       -",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, l := range lines[1:] {
		if !smokeSettling.MatchString(l) || !smokeNoVerdict.MatchString(l) {
			t.Errorf("demo-smoke's settling patterns do not match %q", l)
		}
		if smokeMail.MatchString(l) || smokeWeb.MatchString(l) {
			t.Errorf("demo-smoke's final pattern matches a settling row %q", l)
		}
	}
	// A verdict beside a settling class would fail demo-smoke: its
	// patterns tell the two apart. (The demo never prints such a row:
	// verdictText gives "-" while the class settles.)
	bad := "demo-web/vda   rfa (settling)   0.95  xfs/ext4 raw      worst, published  -       -"
	if !smokeSettling.MatchString(bad) || smokeNoVerdict.MatchString(bad) {
		t.Errorf("demo-smoke's settling patterns do not catch %q", bad)
	}
	// Once settled, the same disks show as demo-smoke expects at the end.
	lines = conclusionsTable(demoDisks(), lineWidth)
	for _, l := range lines[1:3] {
		if smokeSettling.MatchString(l) {
			t.Errorf("a settled row matches the settling pattern: %q", l)
		}
	}
	// The widest class while settling still leaves a line within the width.
	d := earlyDisks()
	d[1].class = "fileserver"
	checkWidth(t, "conclusions with fileserver settling", conclusionsTable(append(d, longDisks()...), lineWidth))
	if c := conclusionsTable(d, lineWidth)[2]; !strings.Contains(c, "fileserver (settling)") {
		t.Errorf("row %q, want the class whole", c)
	}
}

// smokeAwk is demo-smoke's check on every row of every table, the awk
// program of scripts/demo-smoke.sh itself: it prints a row whose class (the
// first word of the CLASS cell) is not the VM's (demo-web: web, demo-mail:
// mail) and whose KDB_VERDICT cell is not "-".
var smokeAwk = regexp.MustCompile(`awk -F '  \+' '([^']*)'`)

// smokeWrongVerdict reports whether demo-smoke's own awk fails row.
func smokeWrongVerdict(t *testing.T, row string) bool {
	t.Helper()
	b, err := os.ReadFile("../../scripts/demo-smoke.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := smokeAwk.FindSubmatch(b)
	if m == nil {
		t.Fatal("scripts/demo-smoke.sh: no awk -F '  +' check on the rows")
	}
	cmd := exec.Command("awk", "-F", "  +", string(m[1]))
	cmd.Stdin = strings.NewReader(row + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("demo-smoke's awk on %q: %v", row, err)
	}
	return strings.TrimSpace(string(out)) != ""
}

// TestConclusionsTableUnsure: what the lab showed on 2026-11-28 before the
// confidence gate: demo-web, laying out its files, classed rfa at 0.00
// once rfa had held for the smoke's settle time, with "worst, published"
// and FspairPoorPairing pending. The rules no longer pair such a class, so
// the table shows it as unsure, without a verdict, and the summary says
// why; demo-smoke's check on every row passes it and fails the old row.
func TestConclusionsTableUnsure(t *testing.T) {
	d := earlyDisks()
	d[0].settled, d[0].paired, d[0].confidence = 1, true, 1
	d[0].verdict, d[0].source, d[0].publishedVerdict = "worst", "site", "best"
	d[1].settled, d[1].confidence = 1, 0
	// A verdict series the rules no longer record on such a class: not shown.
	d[1].verdict, d[1].source, d[1].betterPairs = "worst", "djordjevic2022", "xfs/xfs, ext4/xfs"
	lines := conclusionsTable(d, lineWidth)
	checkWidth(t, "conclusions", lines)
	want := []string{
		"DISK           CLASS         CONF  PAIR(guest/host)  KDB_VERDICT   WR_AMP  ALERTS (runbook)",
		"demo-mail/vda  mail          1.00  btrfs/ext4 raw    worst, site*  1.04    -",
		"demo-web/vda   rfa (unsure)  0.00  xfs/ext4 raw      -             -       -",
	}
	if strings.Join(lines[:3], "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, l := range lines[1:3] {
		if smokeWrongVerdict(t, l) || smokeSettling.MatchString(l) {
			t.Errorf("demo-smoke's checks fail a row the demo must be able to print: %q", l)
		}
	}
	// The row the lab printed, and others like it, fail the smoke.
	for _, bad := range []string{
		"demo-web/vda   rfa           0.00  xfs/ext4 raw      worst, published  -       FspairPoorPairing pending",
		"demo-web/vda   rfa (unsure)  0.00  xfs/ext4 raw      neither       -       -",
		"demo-mail/vda  fileserver    0.95  btrfs/ext4 raw    best, published  1.04    -",
	} {
		if !smokeWrongVerdict(t, bad) {
			t.Errorf("demo-smoke's check passes %q", bad)
		}
	}
	// Its own class with a verdict passes; so does a wrong class without one.
	for _, l := range append(conclusionsTable(demoDisks(), lineWidth)[1:3], conclusionsTable(earlyDisks(), lineWidth)[1:]...) {
		if smokeWrongVerdict(t, l) {
			t.Errorf("demo-smoke's check fails %q", l)
		}
	}
	at := time.Date(2026, 11, 25, 16, 41, 0, 0, time.Local)
	summary := finalSummary(at, d, nil, nil, "", "/var/tmp/fspair-demo/log", lineWidth)
	checkWidth(t, "final summary, an unsure class", summary)
	flat := strings.Join(strings.Fields(strings.Join(summary, "\n")), " ")
	if w := "demo-web/vda rfa, unsure (confidence 0.00) on xfs/ext4 raw: below the confidence the rules act at " +
		"(rules/classes.yaml settle.min_confidence), so no verdict nor alert acts on it."; !strings.Contains(flat, w) {
		t.Errorf("summary lacks %q:\n%s", w, strings.Join(summary, "\n"))
	}
	if strings.Contains(flat, "worst for rfa") || strings.Contains(flat, "Better pairs for rfa") {
		t.Errorf("summary gives a verdict on the unsure class:\n%s", strings.Join(summary, "\n"))
	}
}

func TestConclusionsTableLongValues(t *testing.T) {
	lines := conclusionsTable(longDisks(), lineWidth)
	checkWidth(t, "conclusions", lines)
	t.Logf("\n%s", strings.Join(lines, "\n"))
	long := lines[1]
	if !strings.Contains(long, "~/vdb ") {
		t.Errorf("long domain not cut to keep its target: %q", long)
	}
	for _, w := range []string{"fileserver", "0.64", "btrfs/btrfs qcow2", "contested, published", "1234.57", "FspairMailFlushLatencyHigh +3"} {
		if !strings.Contains(long, w) {
			t.Errorf("row %q lacks %q", long, w)
		}
	}
	if !strings.Contains(lines[2], " neither ") {
		t.Errorf("a mail disk on a pair the knowledge base does not rate: %q, want verdict neither", lines[2])
	}
	if f := strings.Fields(lines[3]); f[1] != "-" || f[2] != "-" {
		t.Errorf("a disk not classed yet: %q, want class and confidence -", lines[3])
	}
	if f := strings.Fields(lines[4]); f[1] != "idle" || f[5] != "-" {
		t.Errorf("an idle disk: %q, want class idle, no verdict", lines[4])
	}
	// The columns line up: every row's class starts under CLASS.
	col := strings.Index(lines[0], "CLASS")
	for _, l := range lines[1:] {
		if l[col-2:col] != "  " || l[col] == ' ' {
			t.Errorf("class not in its column %d: %q", col, l)
		}
	}
}

func TestAlertsCell(t *testing.T) {
	alerts := longDisks()[0].alerts
	for _, width := range []int{300, 60, 30, 12, 5} {
		c := alertsCell(alerts, width)
		if runes(c) > width {
			t.Errorf("width %d: %q is wider", width, c)
		}
		t.Logf("width %d: %q", width, c)
	}
	if c := alertsCell(alerts, 300); !strings.Contains(c, "FspairMailFlushLatencyHigh (runbooks/FspairMailFlushLatencyHigh.md)") ||
		!strings.HasSuffix(c, "FspairHostFSLatencyOverheadHigh pending") {
		t.Errorf("wide: %q, want every firing alert with its runbook, the pending one last", c)
	}
	if c, want := alertsCell(alerts, 60), "FspairMailFlushLatencyHigh, FspairPoorPairing +2"; c != want {
		t.Errorf("60 columns: %q, want %q", c, want)
	}
	if c := alertsCell(nil, 10); c != "-" {
		t.Errorf("no alerts: %q", c)
	}
}

func TestRatesTable(t *testing.T) {
	disks := append(demoDisks(), longDisks()...)
	rates := map[string]map[string]string{
		"demo-mail/vda": {"READ/s": "122.9", "WRITE/s": "128.8", "FLUSH/s": "95.2", "KiB/req": "5.3", "RANDOM%": "80", "SYNC_WR%": "99", "P99_WRITE_ms": "0.23"},
		"demo-web/vda":  {"READ/s": "316.0", "WRITE/s": "3.0", "FLUSH/s": "0.1", "KiB/req": "4.6", "RANDOM%": "82", "SYNC_WR%": "NaN", "P99_WRITE_ms": "14.87"},
	}
	heads := []string{"READ/s", "WRITE/s", "FLUSH/s", "KiB/req", "RANDOM%", "SYNC_WR%", "P99_WRITE_ms"}
	lines := ratesTable(disks, heads, rates, lineWidth)
	checkWidth(t, "rates", lines)
	if want := "  demo-web/vda "; !strings.HasPrefix(lines[2], want) {
		t.Fatalf("row %q, want it to begin %q", lines[2], want)
	}
	// demo-smoke reads READ/s and WRITE/s as the second and third fields.
	if f := strings.Fields(lines[1]); f[1] != "122.9" || f[2] != "128.8" {
		t.Errorf("mail rates row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[6] != "-" {
		t.Errorf("NaN shows as %q, want -", f[6])
	}
}

func TestAlertLines(t *testing.T) {
	if got := alertLines(nil, lineWidth); len(got) != 1 || got[0] != "demo: alerts: none pending or firing" {
		t.Errorf("no alerts: %q", got)
	}
	alerts := append(longDisks()[0].alerts, alertState{name: "FspairExporterDown", state: "pending", since: since,
		runbook: "runbooks/FspairExporterDown.md", summary: "The fspair exporter cannot be scraped."})
	lines := alertLines(alerts, lineWidth)
	checkWidth(t, "alerts", lines)
	if !strings.HasPrefix(lines[0], "demo: alert FspairMailFlushLatencyHigh firing on tenant-4711-production-postgresql-p~/vdb, active since 16:33:39:") {
		t.Errorf("first alert line %q, want the firing ones first, by name", lines[0])
	}
	all := strings.Join(lines, "\n")
	for _, w := range []string{"runbooks/FspairPoorPairing.md", "runbooks/FspairExporterDown.md", "active since 16:33:39", "known to be poor for it."} {
		if !strings.Contains(all, w) {
			t.Errorf("alert lines lack %q:\n%s", w, all)
		}
	}
}

func TestFinalSummary(t *testing.T) {
	at := time.Date(2026, 11, 25, 16, 41, 0, 0, time.Local)
	disks := demoDisks()
	report := []string{"/var/tmp/fspair-demo/report/report.html", "/var/tmp/fspair-demo/report/report.png"}
	lines := finalSummary(at, disks, disks[0].alerts, report, "16:39:30", "/var/tmp/fspair-demo/log", lineWidth)
	checkWidth(t, "final summary", lines)
	t.Logf("\n%s", strings.Join(lines, "\n"))
	all := strings.Join(lines, "\n")
	flat := strings.Join(strings.Fields(all), " ")
	for _, w := range []string{
		"demo-mail/vda mail (confidence 1.00) on btrfs/ext4 raw. The knowledge base (site) lists this pair as worst for mail.",
		"The published study (djordjevic2022) rates it best, this site's measurement worst; the rules act on the site's verdict.",
		"Better pairs for mail: ext4/xfs, ext4/ext4, xfs/ext4.",
		"Advice: Prefer the pairs ext4/xfs, ext4/ext4, xfs/ext4 (guest/host). Avoid btrfs inside the VM,",
		"Alerts: FspairPoorPairing firing, active since 16:33:39 (runbooks/FspairPoorPairing.md).",
		"demo-web/vda web (confidence 0.99) on xfs/ext4 raw. The knowledge base (published: djordjevic2022) lists this pair as best for web. Write amplification 1.02. No alerts.",
		"why FspairPoorPairing: demo-mail disk vda",
		"runbooks runbooks/FspairPoorPairing.md",
		"dashboards/fspair-disk.json with domain=demo-mail", "dashboards/fspair-fleet.json", "dashboards/fspair-kdb.json with workload=mail",
		"report /var/tmp/fspair-demo/report/report.html (rendered at 16:39:30", "/var/tmp/fspair-demo/report/report.png",
		"logs /var/tmp/fspair-demo/log",
	} {
		if !strings.Contains(flat, w) {
			t.Errorf("summary lacks %q", w)
		}
	}
	if !strings.HasPrefix(lines[0], "demo: what this run showed (from Prometheus at 16:41:00") {
		t.Errorf("first line %q", lines[0])
	}

	// A disk whose class is still settling: said so, no verdict nor advice.
	early := finalSummary(at, earlyDisks(), nil, nil, "", "/var/tmp/fspair-demo/log", lineWidth)
	checkWidth(t, "final summary, classes settling", early)
	flat = strings.Join(strings.Fields(strings.Join(early, "\n")), " ")
	for _, w := range []string{
		"demo-web/vda rfa, still settling (confidence 0.15) on xfs/ext4 raw: the class has not held for the settle time yet, " +
			"so no verdict nor alert acts on it.",
		"demo-mail/vda mail, still settling (confidence 0.40)",
	} {
		if !strings.Contains(flat, w) {
			t.Errorf("summary of settling disks lacks %q:\n%s", w, strings.Join(early, "\n"))
		}
	}
	if strings.Contains(flat, "lists this pair") || strings.Contains(flat, "neither best nor worst") {
		t.Errorf("summary of settling disks gives a verdict:\n%s", strings.Join(early, "\n"))
	}

	// Long values, no report, no alert fired.
	lines = finalSummary(at, longDisks(), nil, nil, "", "/var/tmp/fspair-demo/log", lineWidth)
	checkWidth(t, "final summary, long values", lines)
	flat = strings.Join(strings.Fields(strings.Join(lines, "\n")), " ")
	for _, w := range []string{"not classed (yet)", "none rendered in this run", "runbooks none fired", "neither best nor worst for mail"} {
		if !strings.Contains(flat, w) {
			t.Errorf("summary with long values lacks %q:\n%s", w, strings.Join(lines, "\n"))
		}
	}
}

// TestDisagreement: where the published studies and the site both rated
// the pair, the note under the table and the summary give both verdicts
// and say which one the rules act on, whichever is in force.
func TestDisagreement(t *testing.T) {
	published := diskState{disk: "db/vda", domain: "db", target: "vda", guestFS: "ext4", hostFS: "btrfs", format: "raw",
		class: "mail", confidence: 0.9, settled: 1, paired: true, verdict: "worst", source: "djordjevic2022", siteVerdict: "not_distinguishable",
		study: "djordjevic2022", kdbRates: true, writeAmp: math.NaN()}
	site := demoDisks()[0]
	notes := verdictNotes([]diskState{published, site, demoDisks()[1]}, lineWidth)
	want := []string{
		"  * db/vda, ext4/btrfs for mail: published worst, site not distinguishable; the rules act on the published verdict.",
		"  * demo-mail/vda, btrfs/ext4 for mail: published best, site worst; the rules act on the site verdict.",
	}
	if strings.Join(notes, "\n") != strings.Join(want, "\n") {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(notes, "\n"), strings.Join(want, "\n"))
	}
	at := time.Date(2026, 11, 25, 16, 41, 0, 0, time.Local)
	lines := finalSummary(at, []diskState{published}, nil, nil, "", "/var/tmp/fspair-demo/log", lineWidth)
	checkWidth(t, "summary with a published verdict in force beside a site one", lines)
	flat := strings.Join(strings.Fields(strings.Join(lines, "\n")), " ")
	for _, w := range []string{
		"The knowledge base (published: djordjevic2022) lists this pair as worst for mail.",
		"This site's measurement rates it not distinguishable; the rules act on the published verdict.",
	} {
		if !strings.Contains(flat, w) {
			t.Errorf("summary lacks %q:\n%s", w, strings.Join(lines, "\n"))
		}
	}
}

func TestWrap(t *testing.T) {
	text := "FspairPoorPairing firing since 16:33:39 " + strings.Repeat("word ", 60) + strings.Repeat("y", 300)
	lines := wrap("  why FspairPoorPairing: ", text, 80)
	for i, l := range lines {
		if runes(l) > 80 {
			t.Errorf("line %d of %d columns: %q", i, runes(l), l)
		}
		if i > 0 && !strings.HasPrefix(l, strings.Repeat(" ", 25)) {
			t.Errorf("line %d not indented under the first's text: %q", i, l)
		}
	}
	if got := strings.Join(strings.Fields(strings.Join(lines[:len(lines)-1], " ")), " "); got != "why FspairPoorPairing: FspairPoorPairing firing since 16:33:39 "+strings.TrimSpace(strings.Repeat("word ", 60)) {
		t.Errorf("words lost or reordered: %q", got)
	}
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, "y~") {
		t.Errorf("a word longer than a line: %q, want it cut", last)
	}
}

func TestCutDisk(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"demo-mail/vda", 20, "demo-mail/vda"},
		{"demo-mail/vda", 10, "demo-~/vda"},
		{"demo-mail/vda", 5, "demo~"},
		{"no-target-at-all", 8, "no-targ~"},
		{"ünïcödé-dömäin/vda", 12, "ünïcödé~/vda"},
	} {
		if got := cutDisk(c.in, c.n); got != c.want {
			t.Errorf("cutDisk(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestRunbookPath(t *testing.T) {
	if got := runbookPath(runbookURL+"FspairPoorPairing.md", "../.."); got != "runbooks/FspairPoorPairing.md" {
		t.Errorf("a runbook of the repository: %q", got)
	}
	if got := runbookPath(runbookURL+"NoSuchAlert.md", "../.."); got != runbookURL+"NoSuchAlert.md" {
		t.Errorf("a runbook the repository lacks: %q, want the URL", got)
	}
	if got := runbookPath("", "../.."); got != "no runbook_url" {
		t.Errorf("no runbook_url: %q", got)
	}
}

// The series the conclusions read are recorded by the rules (not names of
// the demo's own making).
func TestSeriesAreRecorded(t *testing.T) {
	var rules string
	for _, f := range []string{"../../rules/fspair.rules.yml", "../../rules/fspair-kdb.rules.yml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rules += string(b)
	}
	for _, s := range []string{seriesClass, seriesConfidence, seriesSettled, seriesPair, seriesVerdict, seriesWriteAmp, seriesAdvice, seriesKdbVerdict,
		seriesGuestQuantile, seriesTopLayer} {
		if !strings.Contains(rules, "- record: "+s+"\n") {
			t.Errorf("%s is recorded by no rule of rules/", s)
		}
	}
}

// conclusions joins the series by disk, against a Prometheus that answers
// as the demo's did.
func TestConclusionsFromPrometheus(t *testing.T) {
	disk := func(domain string, extra ...string) map[string]string {
		m := map[string]string{"instance": "127.0.0.1:19477", "domain": domain, "target_device": "vda", "source_file": "/x/" + domain}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	results := map[string][]sample{
		seriesDisks: {
			{Metric: disk("demo-mail", "guest_fs", "ext4", "host_fs", "btrfs", "format", "qcow2")},
			{Metric: disk("demo-web", "guest_fs", "xfs", "host_fs", "ext4", "format", "raw")},
			{Metric: disk("early", "guest_fs", "xfs", "host_fs", "ext4", "format", "raw")},
			{Metric: disk("changed", "guest_fs", "xfs", "host_fs", "ext4", "format", "raw")},
			{Metric: disk("unsure", "guest_fs", "xfs", "host_fs", "ext4", "format", "raw")},
		},
		// early: rfa, still settling, with a verdict series (the rules give
		// none; the demo must not show one whatever Prometheus answers);
		// changed: web, settled, but the verdict is still the previous
		// class's (the pairing group evaluates after the class's); unsure:
		// rfa, settled at confidence 0.3, which the rules do not pair (the
		// pairing they have is of a class it held before), with a verdict
		// series all the same.
		seriesClass: {{Metric: disk("demo-mail", "class", "mail")}, {Metric: disk("demo-web", "class", "web")},
			{Metric: disk("early", "class", "rfa")}, {Metric: disk("changed", "class", "web")}, {Metric: disk("unsure", "class", "rfa")}},
		seriesConfidence: {{Metric: disk("demo-mail"), Value: []any{1.0, "1"}}, {Metric: disk("demo-web"), Value: []any{1.0, "0.9867"}},
			{Metric: disk("early"), Value: []any{1.0, "0.17"}}, {Metric: disk("changed"), Value: []any{1.0, "0.9"}},
			{Metric: disk("unsure"), Value: []any{1.0, "0.3"}}},
		seriesSettled: {{Metric: disk("demo-mail", "class", "mail")}, {Metric: disk("demo-web", "class", "web")},
			{Metric: disk("early", "class", "rfa"), Value: []any{1.0, "0.17"}}, {Metric: disk("changed", "class", "web")},
			{Metric: disk("unsure", "class", "rfa")}},
		seriesPair: {{Metric: disk("demo-mail", "class", "mail")}, {Metric: disk("demo-web", "class", "web")},
			{Metric: disk("changed", "class", "web")}, {Metric: disk("unsure", "class", "web")}},
		seriesVerdict: {
			{Metric: disk("demo-mail", "class", "mail", "verdict", "worst", "source", "site", "better_pairs", "btrfs/ext4, xfs/ext4", "published_verdict", "best")},
			{Metric: disk("demo-web", "class", "web", "verdict", "best", "source", "djordjevic2022")},
			{Metric: disk("early", "class", "rfa", "verdict", "worst", "source", "djordjevic2022")},
			{Metric: disk("changed", "class", "rfa", "verdict", "worst", "source", "djordjevic2022")},
			{Metric: disk("unsure", "class", "rfa", "verdict", "worst", "source", "djordjevic2022")},
		},
		seriesWriteAmp: {{Metric: disk("demo-mail"), Value: []any{1.0, "13.88"}}},
		seriesAdvice:   {{Metric: map[string]string{"workload": "mail", "source": "djordjevic2022", "advice": "Avoid btrfs on the host."}}},
		seriesKdbVerdict: {
			{Metric: map[string]string{"workload": "mail", "guest_fs": "ext4", "host_fs": "btrfs", "verdict": "best", "source": "djordjevic2022"}},
			{Metric: map[string]string{"workload": "web", "guest_fs": "xfs", "host_fs": "ext4", "verdict": "best", "source": "djordjevic2022"}},
		},
		// demo-web's guest side has histograms, demo-mail's not (libvirt 9.0).
		seriesGuestInfo: {{Metric: disk("demo-web", "source", "qmp", "status", "ok", "histogram", "ok")},
			{Metric: disk("demo-mail", "source", "libvirt", "status", "ok", "histogram", "libvirt_too_old")}},
		seriesGuestP99: {{Metric: disk("demo-web", "op", "read", "layer", "guest", "quantile", "0.99"), Value: []any{1.0, "0.0123"}},
			{Metric: disk("demo-web", "op", "flush", "layer", "guest", "quantile", "0.99"), Value: []any{1.0, "0.04"}}},
		seriesTopLayer: {{Metric: disk("demo-web", "op", "read", "layer", "host_fs"), Value: []any{1.0, "0.55"}},
			{Metric: disk("demo-mail", "op", "write", "layer", "device"), Value: []any{1.0, "0.7"}}},
		// A disk the rules know of that fspair_disk_info no longer lists is left out.
		"": {{Metric: disk("gone", "class", "web")}},
	}
	results[seriesClass] = append(results[seriesClass], results[""]...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/query":
			res, ok := results[r.URL.Query().Get("query")]
			if !ok {
				t.Errorf("unexpected query %q", r.URL.Query().Get("query"))
			}
			for i := range res {
				if res[i].Value == nil {
					res[i].Value = []any{1.0, "1"}
				}
			}
			json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": res}})
		case "/api/v1/alerts":
			w.Write([]byte(`{"status":"success","data":{"alerts":[
				{"labels":{"alertname":"FspairPoorPairing","domain":"demo-mail","target_device":"vda"},
				 "annotations":{"summary":"poor","description":"why","runbook_url":"` + runbookURL + `FspairPoorPairing.md"},
				 "state":"firing","activeAt":"2026-11-25T16:33:39Z"},
				{"labels":{"alertname":"FspairExporterDown"},"annotations":{},"state":"pending","activeAt":"2026-11-25T16:40:00Z"}]}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	disks, alerts, err := conclusions(context.Background(), srv.URL, "../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 5 || len(alerts) != 2 {
		t.Fatalf("%d disks, %d alerts; want 5 and 2: %+v %+v", len(disks), len(alerts), disks, alerts)
	}
	changed, mail, web, early, unsure := disks[0], disks[1], disks[2], disks[3], disks[4]
	if unsure.settling() || !unsure.unsure() || unsure.paired || unsure.classText() != "rfa (unsure)" || unsure.verdict != "" || unsure.verdictText() != "-" {
		t.Errorf("a disk whose settled class the rules did not pair: %+v, want rfa (unsure) without a verdict", unsure)
	}
	if !early.settling() || early.settled != 0.17 || early.classText() != "rfa (settling)" || early.verdict != "" || early.verdictText() != "-" {
		t.Errorf("a disk whose class settles: %+v, want rfa (settling) without a verdict", early)
	}
	if changed.settling() || changed.verdict != "" || changed.verdictText() != "-" {
		t.Errorf("a disk whose verdict is on its previous class: %+v, want no verdict", changed)
	}
	if mail.disk != "demo-mail/vda" || mail.class != "mail" || mail.confidence != 1 || mail.verdict != "worst" || mail.source != "site" ||
		mail.betterPairs != "btrfs/ext4, xfs/ext4" || mail.writeAmp != 13.88 || mail.advice != "Avoid btrfs on the host." ||
		mail.pairText() != "ext4/btrfs qcow2" || mail.publishedVerdict != "best" || mail.siteVerdict != "" || mail.study != "djordjevic2022" {
		t.Errorf("mail disk: %+v", mail)
	}
	if !mail.kdbRates || !web.kdbRates {
		t.Errorf("the knowledge base rates both pairs: mail %v, web %v", mail.kdbRates, web.kdbRates)
	}
	if len(mail.alerts) != 1 || mail.alerts[0].runbook != "runbooks/FspairPoorPairing.md" || !mail.alerts[0].firing() {
		t.Errorf("mail disk's alerts: %+v", mail.alerts)
	}
	if web.disk != "demo-web/vda" || web.verdictText() != "best, published" || !math.IsNaN(web.writeAmp) || len(web.alerts) != 0 || web.advice != "" {
		t.Errorf("web disk: %+v", web)
	}
	if web.guest.histogram != "ok" || web.guest.cell("read") != "12.30 ms, host_fs 55%" || web.guest.cell("write") != "too few requests" ||
		web.guest.cell("flush") != "40.00 ms" {
		t.Errorf("web disk's guest latency: %+v", web.guest)
	}
	if mail.guest.whyNone() != "no guest histogram: libvirt_too_old (libvirt before 12.1 has none)" || mail.guest.top["write"].layer != "device" {
		t.Errorf("mail disk's guest latency: %+v", mail.guest)
	}
	if early.guest.whyNone() != "no guest side (no fspair_disk_guest_info)" {
		t.Errorf("a disk without fspair_disk_guest_info: %+v", early.guest)
	}
	if alerts[0].name != "FspairPoorPairing" || alerts[1].name != "FspairExporterDown" || alerts[1].disk != "" || alerts[1].runbook != "no runbook_url" {
		t.Errorf("alerts: %+v", alerts)
	}
}

func TestVerdictText(t *testing.T) {
	for _, c := range []struct {
		d    diskState
		want string
	}{
		{diskState{class: "mail", settled: 1, paired: true, verdict: "worst", source: "site", kdbRates: true}, "worst, site"},
		{diskState{class: "web", settled: 1, paired: true, verdict: "best", source: "djordjevic2022", kdbRates: true}, "best, published"},
		{diskState{class: "mail", settled: 1, paired: true, verdict: "contested", source: "djordjevic2022", kdbRates: true}, "contested, published"},
		// Both sources rated the pair: marked, for the note under the table.
		{diskState{class: "mail", settled: 1, paired: true, verdict: "worst", source: "site", publishedVerdict: "best", kdbRates: true}, "worst, site*"},
		{diskState{class: "mail", settled: 1, paired: true, verdict: "worst", source: "djordjevic2022", siteVerdict: "not_distinguishable", kdbRates: true}, "worst, published*"},
		// A pair the knowledge base does not list for the class.
		{diskState{class: "mail", settled: 1, paired: true}, "neither"},
		// Listed, but the rules have not joined the verdict to the disk yet.
		{diskState{class: "mail", settled: 1, paired: true, kdbRates: true}, "-"},
		// Settled but not paired (its confidence below the rules' minimum):
		// no verdict, whatever the series say, and not "neither" either.
		{diskState{class: "rfa", settled: 1, confidence: 0.3, verdict: "worst", source: "djordjevic2022", kdbRates: true}, "-"},
		{diskState{class: "rfa", settled: 1, confidence: 0}, "-"},
		// A class still settling has no verdict, whatever the series say.
		{diskState{class: "mail", settled: 0.99, verdict: "worst", source: "site", kdbRates: true}, "-"},
		{diskState{class: "mail", settled: 0.5}, "-"},
		{diskState{class: "mail", settled: math.NaN(), verdict: "worst", source: "site"}, "-"},
		{diskState{class: "idle"}, "-"},
		{diskState{class: "mixed"}, "-"},
		{diskState{}, "-"},
	} {
		if got := c.d.verdictText(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.d, got, c.want)
		}
	}
}
