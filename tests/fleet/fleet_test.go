package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/dashboards"
	"github.com/fspair/fspair/tests/alerting"
)

func TestMain(m *testing.M) {
	start := time.Now()
	code := m.Run()
	fmt.Printf("tests/fleet: ran in %s\n", time.Since(start).Round(time.Second))
	os.Exit(code)
}

// The lab's pace: every Prometheus scrapes and evaluates, and the Ruler
// evaluates, every rule group every 2 s. The rules have the production
// windows (5m, 1h), whose names the dashboard reads, and every alert's `for`
// x0.01 (rules/gen -for-scale 0.01): each window's rate has a value from the
// second scrape on. A class is settled once held 10 s (rules/gen -settle):
// the fleet view counts only settled classes, and the production settle
// time (6 minutes with these windows) would add as much to the test, which
// is about the fleet's path, not about settling (rules/gen's promtool tests
// are).
const interval = 2 * time.Second

var ruleOptions = alerting.RuleOptions{Short: "5m", Long: "1h", Settle: "10s"}

// TestFleetThroughThanos runs the lab fleet (three simulated KVM hosts with
// a Prometheus and a Thanos sidecar each, Thanos Query, Thanos Ruler with the
// fleet rules, an Alertmanager) and checks, through Thanos Query as Grafana
// would ask it: a fleet alert (a disk against the fleet's best pair) is
// delivered by the Alertmanager with the host it is about; disks with the
// same identity on two hosts stay two series; every query of the fleet
// dashboard answers, instant and range, with data unless
// dashboards.EmptyReasons says why not.
func TestFleetThroughThanos(t *testing.T) {
	start := time.Now()
	defer func() { t.Logf("TestFleetThroughThanos: %s", time.Since(start).Round(time.Second)) }()
	thanos, err := alerting.PinnedBinary("thanos")
	if err != nil {
		// The one thing the lab cannot do without and may be unable to
		// build here (the Go module proxy unreachable on a cold cache).
		t.Skipf("SKIPPED, not passed: no Thanos (scripts/promstack.sh build thanos): %v", err)
	}
	rules := alerting.GenerateRules(t, ruleOptions)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lab, err := Start(ctx, Options{RulesDir: rules, Interval: interval, EveryInterval: true, Thanos: thanos})
	if err != nil {
		t.Fatalf("start the lab fleet: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("notifications received: %v\n%s", lab.Alertmanager.Alerts(), lab.Logs())
		}
		if err := lab.Close(); err != nil {
			t.Errorf("stop the lab fleet: %v", err)
		}
	})
	t.Logf("lab fleet up in %s: Thanos Query %s, Ruler %s, Alertmanager %s",
		time.Since(start).Round(time.Second), lab.QueryURL, lab.RulerURL, lab.Alertmanager.AlertmanagerURL())

	t.Run("alert", func(t *testing.T) { fleetAlert(ctx, t, lab) })
	t.Run("hosts-apart", func(t *testing.T) { hostsApart(ctx, t, lab) })
	t.Run("dashboard", func(t *testing.T) { walkFleetDashboard(ctx, t, lab) })
}

// fleetAlert waits for FspairWriteAmplificationHigh on kvm-2's mail disk,
// sent by Thanos Ruler (its external label) and delivered by the
// Alertmanager, and checks it is about kvm-2 alone.
func fleetAlert(ctx context.Context, t *testing.T, lab *Lab) {
	wctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	began := time.Now()
	a, err := lab.Alertmanager.WaitAlert(wctx, "FspairWriteAmplificationHigh", map[string]string{"host": "kvm-2", "source_file": SharedImage})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("delivered after %s: %s", time.Since(began).Round(time.Second), a)
	if want, _ := strings.CutPrefix(RulerLabel, `ruler=`); a.Labels["ruler"] != strings.Trim(want, `"`) {
		t.Errorf("the alert does not carry Thanos Ruler's label %s: %v", RulerLabel, a.Labels)
	}
	if a.Labels["instance"] != SharedInstance || a.Labels["best_pair"] != "ext4/ext4" {
		t.Errorf("alert labels %v: want instance %s and best_pair ext4/ext4", a.Labels, SharedInstance)
	}
	if !strings.Contains(a.Annotations["description"], "on kvm-2 ("+SharedInstance+")") {
		t.Errorf("description does not name the host: %q", a.Annotations["description"])
	}
	// The Alertmanager's API holds it too, and nothing of the same alert on
	// the hosts whose mail disks run the best pair.
	active, err := lab.Alertmanager.ActiveAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range active {
		if x.Name() != "FspairWriteAmplificationHigh" {
			continue
		}
		if x.Labels["host"] != "kvm-2" {
			t.Errorf("FspairWriteAmplificationHigh active for another host: %s", x)
		}
		found = found || x.Labels["source_file"] == SharedImage
	}
	if !found {
		t.Errorf("the Alertmanager API (/api/v2/alerts) does not list the alert: %v", active)
	}
	// The Ruler's ALERTS series, which the fleet dashboard's alert panels
	// read, through Thanos Query.
	got, err := alerting.Query(ctx, lab.QueryURL, `ALERTS{alertname="FspairWriteAmplificationHigh", alertstate="firing"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Labels["host"] != "kvm-2" || got[0].Labels["ruler"] == "" {
		t.Errorf("ALERTS through Thanos Query: %v, want the Ruler's one alert, on kvm-2", got)
	}
}

// hostsApart: the mail disks of the three hosts have the same image path and
// instance (kvm-1's and kvm-3's the same UUID too); through Thanos Query they
// are three series, one per host, and the fleet rules, evaluated by the
// Ruler, keep them so. A join without the host label cannot tell kvm-1's
// disk from kvm-3's.
func hostsApart(ctx context.Context, t *testing.T, lab *Lab) {
	for _, q := range []string{
		`domain_disk:fspair_write_amplification:ratio_rate1h{source_file="` + SharedImage + `"}`,
		`domain_disk:fspair_write_amplification_vs_best:ratio_rate1h{source_file="` + SharedImage + `"}`,
	} {
		got, err := alerting.Query(ctx, lab.QueryURL, q)
		if err != nil {
			t.Fatal(err)
		}
		byHost := map[string]float64{}
		for _, s := range got {
			if s.Labels["instance"] != SharedInstance {
				t.Errorf("%s: instance %q, want %s on every host", q, s.Labels["instance"], SharedInstance)
			}
			byHost[s.Labels["host"]] = s.Value
		}
		if len(got) != 3 || len(byHost) != 3 {
			t.Errorf("%s: %d series on %d hosts, want one on each of kvm-1..3: %v", q, len(got), len(byHost), got)
			continue
		}
		// kvm-2 writes about 3.9 bytes per guest byte, the others about 1.5.
		if !(byHost["kvm-2"] > 2*byHost["kvm-1"] && byHost["kvm-2"] > 2*byHost["kvm-3"]) {
			t.Errorf("%s: %v: want kvm-2 above twice kvm-1 and kvm-3", q, byHost)
		}
		t.Logf("%s: %v", q, byHost)
	}
	// The fleet dashboard's join, as it was before it kept the host: the
	// clones on kvm-1 and kvm-3 collide.
	join := func(on string) string {
		return `domain_disk:fspair_write_amplification:ratio_rate1h * on (` + on +
			`) group_left (class) domain_disk:fspair_class_pair:info`
	}
	disks, err := alerting.Query(ctx, lab.QueryURL, `domain_disk:fspair_write_amplification:ratio_rate1h`)
	if err != nil {
		t.Fatal(err)
	}
	withHost, err := alerting.Query(ctx, lab.QueryURL, join("host, instance, domain, uuid, target_device, source_file"))
	if err != nil || len(withHost) != len(disks) || len(disks) < 4 {
		t.Errorf("join on the host: %d series (%v), want one per disk with a write amplification (%d)", len(withHost), err, len(disks))
	}
	if got, err := alerting.Query(ctx, lab.QueryURL, join("instance, domain, uuid, target_device, source_file")); err == nil {
		t.Errorf("join without the host answered %d series; want an error (kvm-1's and kvm-3's disks match each other)", len(got))
	} else {
		t.Logf("join without the host fails, as it must: %v", err)
	}
}

// walkFleetDashboard runs every query of dashboards/fspair-fleet.json
// through Thanos Query, as Grafana does it (instant, range or both), with the
// dashboard's variables at All.
func walkFleetDashboard(ctx context.Context, t *testing.T, lab *Lab) {
	root, err := alerting.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	qs, err := dashboards.Queries(filepath.Join(root, "dashboards", "fspair-fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{"job": "fspair"}
	end := time.Now()
	ran, empty := 0, 0
	hosts := map[string]bool{}
	for _, q := range qs {
		expr := dashboards.Substitute(q.Expr, "30s", values)
		var n int
		var err error
		if q.Instant || !q.Range {
			var got []alerting.Sample
			got, err = alerting.Query(ctx, lab.QueryURL, expr)
			n = len(got)
			for _, s := range got {
				if h := s.Labels["host"]; h != "" {
					hosts[h] = true
				}
			}
		}
		if err == nil && q.Range {
			var got []alerting.Series
			got, err = alerting.QueryRange(ctx, lab.QueryURL, expr, end.Add(-2*time.Minute), end, 10*time.Second)
			n = len(got)
		}
		ran++
		switch {
		case err != nil:
			t.Errorf("%s: %v", q.Where, err)
		case n > 0:
		case dashboards.WhyEmpty(expr) != "":
			empty++
			t.Logf("%s: empty: %s", q.Where, dashboards.WhyEmpty(expr))
		default:
			t.Errorf("%s: no data through Thanos Query:\n%s", q.Where, expr)
		}
	}
	var hs []string
	for h := range hosts {
		hs = append(hs, h)
	}
	sort.Strings(hs)
	t.Logf("%d queries of fspair-fleet.json through Thanos Query, %d empty for a stated reason; hosts seen: %v", ran, empty, hs)
	if len(hs) != 3 {
		t.Errorf("the dashboard's answers name hosts %v, want kvm-1..3", hs)
	}
	if ran < 20 {
		t.Errorf("only %d queries read from the fleet dashboard", ran)
	}
}
