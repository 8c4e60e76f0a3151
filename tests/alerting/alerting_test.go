package alerting

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const runbookBase = "https://github.com/fspair/fspair/blob/main/runbooks/"

// The pairs djordjevic2022 singles out as best for mail (Section 7;
// rules/kdb/pairs.yaml, standout): the description of a poor-pairing alert
// for a mail disk must name them.
var mailBestStandout = []string{"btrfs/ext4", "ext4/xfs", "ext4/ext4"}

// testDisks are two VMs running the same mail workload, one on xfs/btrfs
// (the pair the knowledge base singles out as worst for mail) and one on
// ext4/ext4 (among the best). The worst-pair disk also pays what Btrfs
// costs a synced small write: the host-side test's amplification (3.92
// against 1.54 on ext4, HostAmplification) and a file-stage write latency
// five times its device's.
func testDisks() []SyntheticDisk {
	worst := WorkloadMail
	worst.WriteLatency = 5 * worst.DeviceWriteLatency
	return []SyntheticDisk{
		{
			Domain: "mail-worst", UUID: "4d1c2b3a-0000-4000-8000-000000000001", TargetDevice: "vda",
			SourceFile: "/srv/btrfs/mail-worst.raw", Format: "raw", GuestFS: "xfs", HostFS: "btrfs",
			HostDevice: "/dev/vdb", HostMountpoint: "/srv/btrfs", Workload: worst,
		},
		{
			Domain: "mail-best", UUID: "4d1c2b3a-0000-4000-8000-000000000002", TargetDevice: "vda",
			SourceFile: "/srv/ext4/mail-best.raw", Format: "raw", GuestFS: "ext4", HostFS: "ext4",
			HostDevice: "/dev/vdc", HostMountpoint: "/srv/ext4", Workload: WorkloadMail,
		},
	}
}

// testRules are the repository's rules with windows of 1m and 5m, every
// `for` at a hundredth (the poor-pairing hour becomes 36 s) and a class
// settled once held 5 s: this test is about the path from the series to
// the webhook, not about settling (rules/gen's promtool tests are), and the
// default settle time (one short window plus 60 s) would add two minutes.
var testRules = RuleOptions{Short: "1m", Long: "5m", ForScale: 0.01, Settle: "5s"}

// classQuery is the live workload class of a disk as the rules record it.
const classQuery = `domain_disk:fspair_workload_class:info`

// TestAlertPath runs the whole path: synthetic exporter series, the
// repository's rules in a real Prometheus, the example routing in a real
// Alertmanager, and the webhook.
func TestAlertPath(t *testing.T) {
	start := time.Now()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rules := GenerateRules(t, testRules)
	target, err := NewSyntheticTarget(testDisks())
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	const host = "kvm-test-1"
	s := Start(t, Options{
		RulesDir:      rules,
		ScrapeTargets: []Target{{Address: target.Addr(), Labels: map[string]string{"host": host}}},
	})
	t.Logf("stack up in %v: prometheus %s, alertmanager %s", time.Since(start).Round(time.Millisecond),
		s.PrometheusURL(), s.AlertmanagerURL())

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	a, err := s.WaitAlert(ctx, "FspairPoorPairing", map[string]string{"domain": "mail-worst"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("poor pairing delivered %v after start: %v", time.Since(start).Round(time.Second), a)
	for k, want := range map[string]string{
		"severity": "warning", "domain": "mail-worst", "target_device": "vda", "instance": target.Addr(),
		"class": "mail", "guest_fs": "xfs", "host_fs": "btrfs",
	} {
		if got := a.Labels[k]; got != want {
			t.Errorf("poor pairing label %s = %q, want %q", k, got, want)
		}
	}
	if a.Receiver != "fspair-work-queue" {
		t.Errorf("poor pairing went to receiver %q, want fspair-work-queue (severity warning)", a.Receiver)
	}
	checkRunbookURL(t, root, a)
	if a.Annotations["summary"] == "" {
		t.Errorf("poor pairing has no summary")
	}
	desc := a.Annotations["description"]
	for _, p := range mailBestStandout {
		if !strings.Contains(desc, p) {
			t.Errorf("poor pairing description does not name %s, a best pair for mail: %q", p, desc)
		}
	}

	// The same disk pays for its pair: write amplification and host-FS
	// latency overhead far above the best mail pair's (ext4/ext4 here).
	for _, name := range []string{"FspairWriteAmplificationHigh", "FspairHostFSLatencyOverheadHigh"} {
		e, err := s.WaitAlert(ctx, name, map[string]string{"domain": "mail-worst"})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s delivered %v after start: %s", name, time.Since(start).Round(time.Second), e.Annotations["description"])
		if e.Labels["best_pair"] != "ext4/ext4" {
			t.Errorf("%s: best_pair %q, want ext4/ext4 (the other mail disk's pair)", name, e.Labels["best_pair"])
		}
		checkRunbookURL(t, root, e)
	}

	// Every query of the runbooks parses and runs on the live rules.
	t.Run("runbook queries", func(t *testing.T) { runQueries(t, ctx, s, root) })

	// The best-pair disk runs the same workload: it must be classified
	// the same way, and must not have the alert even pending.
	cls, err := s.Query(ctx, classQuery+`{domain="mail-best"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(cls) == 0 {
		t.Errorf("no workload class recorded for mail-best (%s): its silence below proves nothing", classQuery)
	}
	for _, c := range cls {
		if c.Labels["class"] != "mail" {
			t.Errorf("mail-best is classified %q, want mail like mail-worst: its silence below proves nothing", c.Labels["class"])
		}
	}
	// One more group interval, so that a notification for it would have
	// left the Alertmanager.
	time.Sleep(s.opts.Timing.GroupWait + s.opts.Timing.GroupInterval)
	held, err := s.PrometheusAlerts(ctx, map[string]string{"domain": "mail-best"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range held {
		t.Errorf("%s is %s for mail-best, on a best pair", h.Name(), h.State)
	}
	// The check above must see what it looks for: the worst-pair disk's
	// alerts are there.
	if held, err := s.PrometheusAlerts(ctx, map[string]string{"domain": "mail-worst", "alertname": "FspairPoorPairing"}); err != nil || len(held) == 0 || held[0].State != "firing" {
		t.Errorf("prometheus does not list the firing poor-pairing alert of mail-worst: %v %v", held, err)
	}
	for _, got := range s.Alerts() {
		if got.Labels["domain"] == "mail-best" {
			t.Errorf("notification for the best-pair disk: %v", got)
		}
	}

	// The exporter stops: the page arrives.
	target.Close()
	stopped := time.Now()
	down, err := s.WaitAlert(ctx, "FspairExporterDown", map[string]string{"instance": target.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exporter down delivered %v after the target stopped: %v", time.Since(stopped).Round(time.Second), down)
	if down.Labels["host"] != host {
		t.Errorf("exporter down: host %q, want the target label %q", down.Labels["host"], host)
	}
	if down.Labels["severity"] != "critical" || down.Receiver != "fspair-page" {
		t.Errorf("exporter down: severity %q via %q, want critical via fspair-page", down.Labels["severity"], down.Receiver)
	}
	checkRunbookURL(t, root, down)
	t.Logf("whole path in %v", time.Since(start).Round(time.Second))
}

// checkRunbookURL checks that a's runbook_url names its runbook and that
// the file exists.
func checkRunbookURL(t *testing.T, root string, a Alert) {
	t.Helper()
	u := a.Annotations["runbook_url"]
	if want := runbookBase + a.Name() + ".md"; u != want {
		t.Errorf("%s runbook_url = %q, want %q", a.Name(), u, want)
		return
	}
	if _, err := os.Stat(filepath.Join(root, "runbooks", a.Name()+".md")); err != nil {
		t.Errorf("%s: runbook_url points to a missing file: %v", a.Name(), err)
	}
}

// TestAlertmanagerRouting posts alerts straight to an Alertmanager
// running the example's routes and checks where each one goes: critical
// pages, warning goes to the work queue, info nowhere, FspairExporterDown
// mutes the other alerts of its exporter only, and the disks of one VM
// share a notification.
func TestAlertmanagerRouting(t *testing.T) {
	s := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	down := "10.0.0.1:9477"
	up := "10.0.0.2:9477"
	alert := func(name, sev, inst, host, domain, dev string) Alert {
		l := map[string]string{"alertname": name, "severity": sev, "instance": inst, "job": "fspair"}
		if host != "" {
			l["host"] = host
		}
		if domain != "" {
			l["domain"], l["target_device"] = domain, dev
		}
		return Alert{Labels: l, Annotations: map[string]string{"runbook_url": runbookBase + name + ".md"}}
	}
	if err := s.PostAlerts(ctx,
		alert("FspairExporterDown", "critical", down, "kvm1", "", ""),
		alert("FspairPoorPairing", "warning", down, "kvm1", "vm-muted", "vda"),
		alert("FspairPoorPairing", "warning", up, "kvm2", "vm-a", "vda"),
		alert("FspairPoorPairing", "warning", up, "kvm2", "vm-a", "vdb"),
		alert("FspairPoorPairing", "warning", up, "kvm2", "vm-b", "vda"),
		// The same VM name on another host, without a host label (as
		// the rules' per-disk alerts come): a group of its own.
		alert("FspairPoorPairing", "warning", "10.0.0.3:9477", "", "vm-a", "vda"),
		alert("FspairContextOnly", "info", up, "kvm2", "", ""),
	); err != nil {
		t.Fatal(err)
	}
	page, err := s.WaitAlert(ctx, "FspairExporterDown", map[string]string{"instance": down})
	if err != nil {
		t.Fatal(err)
	}
	if page.Receiver != "fspair-page" {
		t.Errorf("critical alert went to %q, want fspair-page", page.Receiver)
	}
	var vmA []Alert
	for _, m := range []map[string]string{
		{"domain": "vm-a", "target_device": "vda", "instance": up},
		{"domain": "vm-a", "target_device": "vdb", "instance": up},
		{"domain": "vm-b"},
	} {
		a, err := s.WaitAlert(ctx, "FspairPoorPairing", m)
		if err != nil {
			t.Fatal(err)
		}
		if a.Receiver != "fspair-work-queue" {
			t.Errorf("warning alert %v went to %q, want fspair-work-queue", m, a.Receiver)
		}
		if m["domain"] == "vm-a" {
			vmA = append(vmA, a)
		}
	}
	if len(vmA) == 2 && vmA[0].GroupKey != vmA[1].GroupKey {
		t.Errorf("the two disks of vm-a came in different groups: %q, %q", vmA[0].GroupKey, vmA[1].GroupKey)
	}
	other, err := s.WaitAlert(ctx, "FspairPoorPairing", map[string]string{"domain": "vm-a", "instance": "10.0.0.3:9477"})
	if err != nil {
		t.Fatal(err)
	}
	if len(vmA) > 0 && other.GroupKey == vmA[0].GroupKey {
		t.Errorf("vm-a of two hosts came in one group %q", other.GroupKey)
	}
	// Past group_wait plus a group_interval, nothing else may arrive.
	time.Sleep(s.opts.Timing.GroupWait + s.opts.Timing.GroupInterval + time.Second)
	for _, a := range s.Alerts() {
		switch {
		case a.Labels["domain"] == "vm-muted":
			t.Errorf("alert of an exporter that is down was not inhibited: %v", a)
		case a.Name() == "FspairContextOnly":
			t.Errorf("info alert was sent: %v", a)
		}
	}
	held, err := s.ActiveAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range held {
		if a.Labels["domain"] == "vm-muted" {
			found = true
			if a.State != "suppressed" || len(a.InhibitedBy) == 0 {
				t.Errorf("vm-muted alert: state %q inhibited by %v, want suppressed by FspairExporterDown", a.State, a.InhibitedBy)
			}
		}
		if a.Labels["domain"] == "vm-a" && len(a.InhibitedBy) > 0 {
			t.Errorf("alert of a healthy exporter inhibited: %v", a)
		}
	}
	if !found {
		t.Errorf("the alertmanager does not hold the vm-muted alert")
	}
}

// TestAlertmanagerExample validates the shipped example with the
// Alertmanager's own checker.
func TestAlertmanagerExample(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	amtool, err := PinnedBinary("amtool")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(amtool, "check-config", filepath.Join(root, "deploy", "alertmanager", "alertmanager.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("amtool check-config (%s): %v\n%s", amtool, err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("amtool check-config did not report SUCCESS:\n%s", out)
	}
}
