package main

import (
	"fmt"
	"regexp"
	"strings"
)

// A fleet of KVM hosts, each with its own Prometheus, evaluates fspair's
// rules in two places (deploy/fleet): the per-host Prometheus every rule
// that needs only its own host's series, and Thanos Ruler, through Thanos
// Query, the rules that compare disks across hosts. The two files are cut
// from the same rules as fspair.rules.yml, fspair-kdb.rules.yml and
// fspair.alerts.yml; nothing is written twice.
const (
	fleetDir      = "fleet"
	hostRulesFile = "fspair-host.rules.yml"
	fleetRuleFile = "fspair-fleet.rules.yml"
	// hostLabel is the external label each host's Prometheus carries (its
	// name in the fleet): the Ruler sees every host's series through Thanos
	// Query, where instance and image paths repeat across hosts.
	hostLabel = "host"
)

// perHostLevels are the levels of recorded series about one disk or one host
// device (domain_disk_guest_fs: a disk's, labelled with its guest file
// system), computed from one host's series, and of the classifier's
// constants (workload_feature, workload_centre), which each host records
// for itself. Any other level (class_pair, class, pair_mode) aggregates the
// disks of the whole fleet.
var perHostLevels = map[string]bool{
	"domain_disk": true, "domain_disk_guest_fs": true, "host_device": true,
	"workload_feature": true, "workload_centre": true,
}

// seriesName finds the recorded names a rule's expression reads.
var seriesName = regexp.MustCompile(`[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]*[a-zA-Z0-9_]`)

// fleetRecords returns the names of the recording rules that need more than
// one host's series: those at a fleet level, and every rule that reads one
// of them (transitively, in file order, which is dependency order).
func fleetRecords(files []File) map[string]bool {
	fleet := map[string]bool{}
	for _, f := range files {
		for _, g := range f.Groups {
			for _, r := range g.Rules {
				if r.Record == "" {
					continue
				}
				level, _, ok := strings.Cut(r.Record, ":")
				if ok && !perHostLevels[level] || readsAny(r.Expr, fleet) {
					fleet[r.Record] = true
				}
			}
		}
	}
	return fleet
}

func readsAny(expr string, names map[string]bool) bool {
	for _, n := range seriesName.FindAllString(expr, -1) {
		if names[n] {
			return true
		}
	}
	return false
}

// fleetIdentity puts the host label in front of every label list that keeps a
// disk or a host device apart: across hosts, instance (often
// localhost:9476 everywhere) and source_file repeat, the host does not.
var fleetIdentity = strings.NewReplacer(
	diskLabels, hostLabel+", "+diskLabels,
	deviceLabels, hostLabel+", "+deviceLabels,
	"on {{ $labels.instance }}", "on {{ $labels."+hostLabel+" }} ({{ $labels.instance }})",
)

// fleetFiles splits the rule files into the per-host file and the fleet
// file. Groups keep their names, order and intervals in both; a group with
// no rule left on one side is left out of that side.
func fleetFiles(p *Params, files []File) (host, fleet File) {
	names := fleetRecords(files)
	host = File{Name: fleetDir + "/" + hostRulesFile, Header: header(p) + "\n" +
		"The rules one KVM host's Prometheus evaluates in a fleet (deploy/fleet): every rule that needs only that host's series. " +
		"Thanos Ruler evaluates the rest, " + fleetRuleFile + "."}
	fleet = File{Name: fleetDir + "/" + fleetRuleFile, Header: header(p) + "\n" +
		"The rules Thanos Ruler evaluates through Thanos Query in a fleet (deploy/fleet): those that compare disks across hosts " +
		"(fleet baselines per class and pair, the best pair per class, each disk against it, and the alerts on that). " +
		"Disks and host devices are kept apart by the " + hostLabel + " label, each host Prometheus's external label."}
	for _, f := range files {
		for _, g := range f.Groups {
			hg, fg := g, g
			hg.Rules, fg.Rules = nil, nil
			for _, r := range g.Rules {
				if names[r.Record] || r.Alert != "" && readsAny(r.Expr, names) {
					r.Expr = fleetIdentity.Replace(r.Expr)
					ann := make([][2]string, len(r.Annotations))
					for i, a := range r.Annotations {
						ann[i] = [2]string{a[0], fleetIdentity.Replace(a[1])}
					}
					r.Annotations = ann
					fg.Rules = append(fg.Rules, r)
					continue
				}
				hg.Rules = append(hg.Rules, r)
			}
			if len(hg.Rules) > 0 {
				host.Groups = append(host.Groups, hg)
			}
			if len(fg.Rules) > 0 {
				fleet.Groups = append(fleet.Groups, fg)
			}
		}
	}
	return host, fleet
}

// GenerateFleet returns the per-host and fleet rule files, by their paths
// under -out (fleet/...).
func GenerateFleet(o Options) (map[string][]byte, error) {
	p, err := params(o)
	if err != nil {
		return nil, err
	}
	host, fleet := fleetFiles(p, []File{recordingFile(p), kdbFile(p), alertFile(p)})
	out := map[string][]byte{}
	for _, f := range []File{host, fleet} {
		if len(f.Groups) == 0 {
			return nil, fmt.Errorf("split rules for a fleet: %s has no rules", f.Name)
		}
		b, err := f.Marshal()
		if err != nil {
			return nil, err
		}
		out[f.Name] = b
	}
	return out, nil
}
