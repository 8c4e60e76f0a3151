package main

import (
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/workload"
)

// PubVerdict is the published verdict on one pair for one workload.
type PubVerdict struct {
	Verdict  string `yaml:"verdict"` // best, worst, contested
	Standout bool   `yaml:"standout"`
	Note     string `yaml:"note"`
}

// Published is the part of rules/kdb/pairs.yaml the comparison needs: the
// published best/worst table.
type Published struct {
	Path    string
	Sources map[string]string                           // key: citation
	Source  map[workload.Workload]string                // workload: source key
	Pairs   map[workload.Workload]map[string]PubVerdict // workload, guest/host
}

// LoadPublished reads the knowledge base rules/gen reads (rules/kdb/pairs.yaml).
// It reads the file as it is and leaves checking it to rules/gen; it only
// refuses a file without the four workloads.
func LoadPublished(path string) (*Published, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load published table: %w", err)
	}
	var kb struct {
		Sources   map[string]string `yaml:"sources"`
		Workloads []struct {
			Name   string `yaml:"name"`
			Source string `yaml:"source"`
			Pairs  []struct {
				Pair       string `yaml:"pair"`
				PubVerdict `yaml:",inline"`
			} `yaml:"pairs"`
		} `yaml:"workloads"`
	}
	if err := yaml.Unmarshal(b, &kb); err != nil {
		return nil, fmt.Errorf("load published table %s: %w", path, err)
	}
	p := &Published{Path: path, Sources: kb.Sources, Source: map[workload.Workload]string{},
		Pairs: map[workload.Workload]map[string]PubVerdict{}}
	for _, w := range kb.Workloads {
		wl, err := workload.ParseWorkload(w.Name)
		if err != nil {
			return nil, fmt.Errorf("load published table %s: %w", path, err)
		}
		p.Source[wl] = w.Source
		p.Pairs[wl] = map[string]PubVerdict{}
		for _, v := range w.Pairs {
			p.Pairs[wl][v.Pair] = v.PubVerdict
		}
	}
	for _, w := range workload.Workloads {
		if _, ok := p.Pairs[w]; !ok {
			return nil, fmt.Errorf("load published table %s: workload %s missing", path, w)
		}
	}
	return p, nil
}

// Verdict returns the published verdict on pair for w; a pair the table
// does not list is between its best and worst groups (""), which is what
// the site's "no verdict" means too.
func (p *Published) Verdict(w workload.Workload, pair string) PubVerdict {
	return p.Pairs[w][pair]
}

// Comparison statuses.
const (
	StatusAgree    = "agree"    // same verdict (both none counts)
	StatusOpposite = "opposite" // best against worst
	StatusDiffer   = "differ"   // any other difference
	StatusUnranked = "unranked" // fewer than two pairs measured: no site verdict
	// StatusUndecided: the site's runs cannot call the pair (not_distinguishable).
	StatusUndecided = "not distinguishable"
)

// Comparison is the site's verdict on one measured pair beside the
// published one.
type Comparison struct {
	Workload workload.Workload
	Site     Ranked
	Pub      PubVerdict
	Status   string
}

// Compare sets each ranked pair beside the published table.
func Compare(ranked map[workload.Workload][]Ranked, pub *Published) []Comparison {
	var out []Comparison
	for _, w := range workload.Workloads {
		for _, r := range ranked[w] {
			c := Comparison{Workload: w, Site: r, Pub: pub.Verdict(w, r.Pair)}
			switch {
			case r.Of < 2:
				c.Status = StatusUnranked
			case r.Verdict == VerdictNotDistinguishable:
				c.Status = StatusUndecided
			case r.Verdict == c.Pub.Verdict:
				c.Status = StatusAgree
			case r.Verdict == VerdictBest && c.Pub.Verdict == VerdictWorst,
				r.Verdict == VerdictWorst && c.Pub.Verdict == VerdictBest:
				c.Status = StatusOpposite
			default:
				c.Status = StatusDiffer
			}
			out = append(out, c)
		}
	}
	return out
}

// meanRank is the mean site rank of the pairs the published table gives
// verdict v for workload w, among those measured; ok is false for none.
// It says whether the site's order leans the published way even where the
// groups differ.
func meanRank(cmp []Comparison, w workload.Workload, v string) (mean float64, n int) {
	sum := 0
	for _, c := range cmp {
		if c.Workload == w && c.Pub.Verdict == v && c.Site.Of >= 2 {
			sum += c.Site.Rank
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(sum) / float64(n), n
}
