package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/workload"
)

// SiteEntry is one verdict of the site knowledge-base file, in the schema
// rules/gen reads (rules/kdb/site.yaml's header; rules/gen/config.go,
// Verdict and KB.merge).
type SiteEntry struct {
	Workload string             `yaml:"workload"`
	Pair     string             `yaml:"pair"`
	Verdict  string             `yaml:"verdict"`
	Standout bool               `yaml:"standout"`
	Date     string             `yaml:"date"`
	Measured map[string]float64 `yaml:"measured,omitempty"`
	Note     string             `yaml:"note,omitempty"`
}

// siteFigures are the medians a site entry carries as measured figures
// (fspair_kdb_site_measurement series), besides the throughput spread and
// the rank.
var siteFigures = []string{
	MThroughputBytes, MThroughputOps, MWriteAmp, MGuestWriteAmp,
	MFileWrite, MDeviceWrite, MFlushLatency,
}

// SiteEntries turns the ranked cells into site verdicts: one entry per
// pair with a verdict (best, worst or contested). Pairs between the groups
// get none, so for them the published verdict stays in effect: the site
// file's schema has no "neither" verdict.
func SiteEntries(cells []Cell, ranked map[workload.Workload][]Ranked, set Settings, env []Env) []SiteEntry {
	byKey := map[string]*Cell{}
	for i := range cells {
		byKey[string(cells[i].Workload)+" "+cells[i].Pair] = &cells[i]
	}
	var out []SiteEntry
	for _, w := range workload.Workloads {
		for _, r := range ranked[w] {
			if r.Verdict == "" {
				continue
			}
			c := byKey[string(w)+" "+r.Pair]
			m := map[string]float64{
				"throughput_min_bytes_per_second": round4(r.Throughput.Min),
				"throughput_max_bytes_per_second": round4(r.Throughput.Max),
				"runs":                            float64(r.Throughput.N),
				"rank":                            float64(r.Rank),
				"pairs_ranked":                    float64(r.Of),
			}
			for _, name := range siteFigures {
				if s, ok := c.Stats[name]; ok && !math.IsNaN(s.Median) && !math.IsInf(s.Median, 0) {
					m[name] = round4(s.Median)
				}
			}
			out = append(out, SiteEntry{
				Workload: string(w), Pair: r.Pair, Verdict: r.Verdict, Standout: r.Standout,
				Date: c.Last().UTC().Format("2006-01-02"), Measured: m,
				Note: siteNote(w, r, set, env),
			})
		}
	}
	return out
}

func siteNote(w workload.Workload, r Ranked, set Settings, env []Env) string {
	where := "TCG guest"
	if len(env) > 0 && env[0].Accel != "" {
		where = strings.ToUpper(env[0].Accel) + " guest"
	}
	if set.Storage == "loop" {
		where += ", host file system on a loop device"
	}
	return fmt.Sprintf("pair lab (tests/kdb): %d runs of tests/workload/jobs/%s.fio, %s, cache=%s, %g s each; rank %d of %d by median fio throughput; %s",
		r.Throughput.N, w, set.Format, set.Cache, set.RuntimeSeconds, r.Rank, r.Of, where)
}

// round4 keeps four significant digits: the repeats differ by more.
func round4(v float64) float64 {
	f, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	if err != nil {
		return v
	}
	return f
}

// defaultSiteHeader starts a new site file; an existing file keeps its own.
const defaultSiteHeader = `# This site's own verdicts on guest/host file-system pairs (schema: see
# rules/kdb/site.yaml and rules/README.md, "Adding a site's verdicts"), written by
# the pair lab (tests/kdb). rules/gen merges them with the published verdicts of
# rules/kdb/pairs.yaml: an entry here replaces the published verdict for the same
# workload and pair. Regenerate the rules after changing it.
`

// WriteSite writes entries to the site file at path. An existing file keeps
// its leading comment and its entries for the cells not in measured
// (workload + " " + pair); entries for measured cells are replaced by
// entries, so a pair that moved between the groups loses its old verdict.
func WriteSite(path string, entries []SiteEntry, measured map[string]bool) error {
	header := defaultSiteHeader
	var keep []SiteEntry
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if h := leadingComment(old); h != "" {
			header = h
		}
		var prev []SiteEntry
		if err := yaml.Unmarshal(old, &prev); err != nil {
			return fmt.Errorf("read site file %s: %w", path, err)
		}
		for _, e := range prev {
			if !measured[e.Workload+" "+e.Pair] {
				keep = append(keep, e)
			}
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read site file %s: %w", path, err)
	}
	all := append(keep, entries...)
	var body []byte
	if len(all) == 0 {
		body = []byte("[]\n")
	} else {
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(all); err != nil {
			return fmt.Errorf("write site file %s: %w", path, err)
		}
		if err := enc.Close(); err != nil {
			return fmt.Errorf("write site file %s: %w", path, err)
		}
		body = buf.Bytes()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write site file %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append([]byte(header), body...), 0o644); err != nil {
		return fmt.Errorf("write site file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write site file %s: %w", path, err)
	}
	return nil
}

// leadingComment returns the comment lines a YAML file starts with.
func leadingComment(b []byte) string {
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break
		}
		out.WriteString(line + "\n")
	}
	return out.String()
}
