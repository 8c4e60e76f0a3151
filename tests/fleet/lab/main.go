// Command lab runs the lab fleet of package fleet until it is stopped
// (SIGINT, SIGTERM): `make fleet` starts it through scripts/stack.sh fleet.
//
//	go run ./tests/fleet/lab -dir /var/tmp/fspair-fleet
//
// It writes DIR/fleet.env (the URLs: Thanos Query is the fleet's data source)
// and prints each notification the Alertmanager delivers. The rules are
// generated into DIR/rules with every alert's `for` x0.01 and evaluated every
// -interval (a fleet alert within two minutes), or -committed-rules takes
// rules/fleet as committed (alerts after an hour and more).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fspair/fspair/tests/alerting"
	"github.com/fspair/fspair/tests/fleet"
)

func main() { os.Exit(run()) }

func run() int {
	dir := flag.String("dir", "/var/tmp/fspair-fleet", "state directory: configuration, data, fleet.env")
	queryAddr := flag.String("query-addr", "127.0.0.1:19192", "Thanos Query's HTTP listen address")
	interval := flag.Duration("interval", 5*time.Second, "scrape and evaluation interval of every Prometheus and of the Ruler")
	committed := flag.Bool("committed-rules", false, "use the committed rules/fleet (production for durations and group intervals)")
	disks := flag.String("disks", "", "only serve the hosts' synthetic exporters, on these comma-separated addresses in host order (compose.yaml's fleet-disks)")
	flag.Parse()
	if *disks != "" {
		return serveDisks(strings.Split(*disks, ","))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := alerting.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 1
	}
	labDir := filepath.Join(*dir, "lab")
	if err := os.RemoveAll(labDir); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: clear %s: %v\n", labDir, err)
		return 1
	}
	rules := filepath.Join(root, "rules")
	if !*committed {
		rules = filepath.Join(*dir, "rules")
		fmt.Println("fleet: generating rules with every alert's for x0.01 (rules/gen -for-scale 0.01)")
		gctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := alerting.GenerateRulesDir(gctx, rules, alerting.RuleOptions{Short: "5m", Long: "1h"})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			return 1
		}
	}
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	lab, err := fleet.Start(sctx, fleet.Options{
		RulesDir: rules, Interval: *interval, Dir: labDir, QueryAddr: *queryAddr,
		// Every group at the lab's interval: the fleet view within a minute.
		EveryInterval: !*committed,
		// Notifications as fast as the tests have them: the lab is for looking.
		Timing: alerting.Timing{GroupWait: time.Second, GroupInterval: 5 * time.Second, RepeatInterval: time.Hour},
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet: start:", err)
		return 1
	}
	defer func() {
		fmt.Println("fleet: stopping")
		if err := lab.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "fleet: stop:", err)
		}
	}()

	env := []string{
		"FLEET_QUERY_URL=" + lab.QueryURL,
		"FLEET_RULER_URL=" + lab.RulerURL,
		"FLEET_ALERTMANAGER_URL=" + lab.Alertmanager.AlertmanagerURL(),
	}
	for _, h := range lab.Hosts {
		env = append(env, "FLEET_PROMETHEUS_"+strings.ReplaceAll(strings.ToUpper(h.Name), "-", "_")+"="+h.PrometheusURL)
	}
	if err := os.WriteFile(filepath.Join(*dir, "fleet.env"), []byte(strings.Join(env, "\n")+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 1
	}
	fmt.Printf("fleet: up in %s\n", time.Since(start).Round(time.Second))
	fmt.Printf("  Thanos Query (the fleet's data source) %s\n  Thanos Ruler %s\n  Alertmanager %s\n", lab.QueryURL, lab.RulerURL, lab.Alertmanager.AlertmanagerURL())
	for _, h := range lab.Hosts {
		fmt.Printf("  %s: Prometheus %s, exporter http://%s/metrics\n", h.Name, h.PrometheusURL, h.Exporter.Addr())
	}
	fmt.Println("fleet: notifications follow (FspairWriteAmplificationHigh for kvm-2 within about two minutes)")

	seen := 0
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(time.Second):
		}
		as := lab.Alertmanager.Alerts()
		for ; seen < len(as); seen++ {
			fmt.Printf("fleet: %s %s\n", as[seen].Received.Format(time.TimeOnly), as[seen])
		}
	}
}

// serveDisks serves each host's synthetic exporter on its address until
// SIGINT or SIGTERM.
func serveDisks(addrs []string) int {
	hosts := fleet.Hosts()
	if len(addrs) != len(hosts) {
		fmt.Fprintf(os.Stderr, "fleet: -disks names %d addresses for %d hosts\n", len(addrs), len(hosts))
		return 2
	}
	for i, h := range hosts {
		t, err := alerting.NewSyntheticTargetAt(addrs[i], h.Disks)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fleet: %s: %v\n", h.Name, err)
			return 1
		}
		defer t.Close()
		fmt.Printf("fleet: %s's exporter on %s\n", h.Name, t.Addr())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return 0
}
