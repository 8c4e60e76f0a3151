package main

import (
	"regexp"
	"strings"
	"testing"
)

var fleetRuleFiles = []string{fleetDir + "/" + hostRulesFile, fleetDir + "/" + fleetRuleFile}

// TestFleetFilesUpToDate is the drift check of rules/fleet.
func TestFleetFilesUpToDate(t *testing.T) {
	upToDate(t, GenerateFleet, fleetRuleFiles)
}

// TestFleetSplit: every rule lands on exactly one side; no per-host rule
// reads a series only the fleet side records; the fleet side is what
// compares disks across hosts and keeps hosts apart by the host label.
func TestFleetSplit(t *testing.T) {
	p, err := params(committed)
	if err != nil {
		t.Fatal(err)
	}
	all := []File{recordingFile(p), kdbFile(p), alertFile(p)}
	host, fleet := fleetFiles(p, all)
	count := func(fs ...File) (n int) {
		for _, f := range fs {
			for _, g := range f.Groups {
				n += len(g.Rules)
			}
		}
		return n
	}
	if a, h, f := count(all...), count(host), count(fleet); h+f != a {
		t.Errorf("%d rules in all, %d per host + %d fleet", a, h, f)
	}
	names := fleetRecords(all)
	for _, want := range []string{
		"class_pair:fspair_disks:count", "class:fspair_write_amplification:best_pair_median_ratio_rate1h",
		"domain_disk:fspair_write_amplification_vs_best:ratio_rate1h", "pair_mode:fspair_disk_guest_merge:median_ratio_rate5m",
	} {
		if !names[want] {
			t.Errorf("%s is not on the fleet side", want)
		}
	}
	for _, g := range host.Groups {
		for _, r := range g.Rules {
			if readsAny(r.Expr, names) {
				t.Errorf("per-host rule %s%s reads a fleet series:\n%s", r.Record, r.Alert, r.Expr)
			}
		}
	}
	alerts := map[string]bool{}
	bare := regexp.MustCompile(`\((instance, (domain|host_device))`)
	for _, g := range fleet.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r.Alert != ""
			if m := bare.FindString(r.Expr); m != "" {
				t.Errorf("fleet rule %s%s keeps disks apart by %s) without the host:\n%s", r.Record, r.Alert, m, r.Expr)
			}
			for _, a := range r.Annotations {
				if strings.Contains(a[1], "$labels.instance") && !strings.Contains(a[1], "$labels.host") {
					t.Errorf("fleet alert %s: %s names the instance but not the host", r.Alert, a[0])
				}
			}
		}
	}
	for _, want := range []string{"FspairWriteAmplificationHigh", "FspairHostFSLatencyOverheadHigh"} {
		if !alerts[want] {
			t.Errorf("%s (a disk against the fleet's best pair) is not on the fleet side", want)
		}
	}
}

func TestPromtoolCheckFleetRules(t *testing.T) {
	promtool(t, "..", append([]string{"check", "rules"}, fleetRuleFiles...)...)
}
