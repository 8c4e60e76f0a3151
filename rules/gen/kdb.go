package main

import (
	"fmt"
	"strconv"
	"strings"
)

// kdbFile turns the knowledge base into constant series, so that rules,
// alerts and dashboards can join it with live data.
func kdbFile(p *Params) File {
	var rules []Rule
	for i := range p.KB.Workloads {
		w := &p.KB.Workloads[i]
		rules = append(rules, Rule{
			Record: "fspair_kdb_workload_info", Expr: "vector(1)",
			Comment: fmt.Sprintf("Workload %s: %s", w.Name, oneLine(w.Character)),
			Labels: [][2]string{
				{"workload", w.Name}, {"source", w.Source},
				{"best_pairs", strings.Join(w.betterPairs(""), ", ")},
				{"advice", w.advice().String()},
			},
		})
		for _, v := range w.Pairs {
			labels := [][2]string{
				{"workload", w.Name}, {"guest_fs", v.GuestFS}, {"host_fs", v.HostFS},
				{"verdict", v.Verdict}, {"standout", strconv.FormatBool(v.Standout)},
				{"source", v.Source}, {"better_pairs", strings.Join(w.betterPairs(v.Pair), ", ")},
			}
			// The other source's verdict on the pair, where both rated it
			// (source says which one the rules act on).
			if v.PublishedVerdict != "" {
				labels = append(labels, [2]string{"published_verdict", v.PublishedVerdict})
			}
			if v.SiteVerdict != "" {
				labels = append(labels, [2]string{"site_verdict", v.SiteVerdict})
			}
			if v.Date != "" {
				labels = append(labels, [2]string{"date", v.Date})
			}
			comment := oneLine(v.Note)
			if v.Confidence != nil {
				comment = strings.TrimSpace(fmt.Sprintf("%s (confidence %v)", comment, *v.Confidence))
			}
			if v.Conditions != "" {
				comment = strings.TrimSpace(fmt.Sprintf("%s; conditions: %s", comment, oneLine(v.Conditions)))
			}
			rules = append(rules, Rule{
				Record: "fspair_kdb_pair_verdict", Expr: "vector(1)", Labels: labels,
				Comment: comment,
			})
			for _, fig := range sortedKeys(v.Measured) {
				rules = append(rules, Rule{
					Record: "fspair_kdb_site_measurement", Expr: fmt.Sprintf("vector(%s)", num(v.Measured[fig])),
					Labels: [][2]string{
						{"workload", w.Name}, {"guest_fs", v.GuestFS}, {"host_fs", v.HostFS},
						{"figure", fig}, {"date", v.Date},
					},
				})
			}
		}
		for _, layer := range []struct {
			name string
			fs   FSVerdict
		}{{"guest", w.Guest}, {"host", w.Host}} {
			for _, v := range []struct {
				verdict string
				list    []string
			}{{"best", layer.fs.Best}, {"worst", layer.fs.Worst}} {
				for _, fs := range v.list {
					rules = append(rules, Rule{
						Record: "fspair_kdb_fs_verdict", Expr: "vector(1)",
						Labels: [][2]string{
							{"workload", w.Name}, {"layer", layer.name}, {"fs", fs},
							{"verdict", v.verdict}, {"source", w.Source},
						},
					})
				}
			}
		}
	}
	comment := "The knowledge base as series (rules/kdb/pairs.yaml, merged with the site's rules/kdb/site.yaml):\n" +
		"fspair_kdb_pair_verdict{workload, guest_fs, host_fs, verdict, standout, source, better_pairs} 1, the verdict in force\n" +
		"(the site's where its measurement replaced the published one, at confidence " + num(MinSiteConfidence) + " or more, or asserted by hand),\n" +
		"with published_verdict (the published verdict it replaced) or site_verdict (a site verdict the rules do not act on) where both rated the pair,\n" +
		"fspair_kdb_workload_info{workload, source, best_pairs, advice} 1 (advice derived from the verdicts in force),\n" +
		"fspair_kdb_fs_verdict{workload, layer, fs, verdict, source} 1 (the published study's verdicts per layer),\n" +
		"fspair_kdb_site_measurement{workload, guest_fs, host_fs, figure, date} = the measured figure."
	if len(p.KB.Ignored) > 0 {
		// Said where a reader of the rules looks for why a site verdict
		// is missing; absent for a site file with none, so the committed
		// rules do not change.
		comment += fmt.Sprintf("\nSite entries left out (the published verdict stays; a measured verdict needs confidence %v): %s.",
			MinSiteConfidence, strings.Join(p.KB.Ignored, "; "))
	}
	return File{
		Name:   "fspair-kdb.rules.yml",
		Header: header(p),
		Groups: []Group{{
			Name:    "fspair.kdb",
			Comment: comment,
			Rules:   rules,
		}},
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
