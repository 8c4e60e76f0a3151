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
	Workload string `yaml:"workload"`
	Pair     string `yaml:"pair"`
	Verdict  string `yaml:"verdict"`
	Standout bool   `yaml:"standout"`
	Date     string `yaml:"date"`
	// Confidence is the bootstrap confidence of a best or worst call
	// (verdict.go); rules/gen ignores a verdict below its floor (0.95).
	// A not_distinguishable entry has none.
	Confidence *float64 `yaml:"confidence,omitempty"`
	// Conditions are the measurement conditions the verdict holds under
	// (image format, cache mode, host device, accelerator): a verdict on
	// loop devices says nothing about a disk with flush costs.
	Conditions string             `yaml:"conditions,omitempty"`
	Measured   map[string]float64 `yaml:"measured,omitempty"`
	Note       string             `yaml:"note,omitempty"`
}

// siteFigures are the medians a site entry carries as measured figures
// (fspair_kdb_site_measurement series), besides the throughput spread and
// the rank.
var siteFigures = []string{
	MThroughputBytes, MThroughputOps, MWriteAmp, MGuestWriteAmp,
	MFileWrite, MDeviceWrite, MFlushLatency,
}

// SiteEntries turns the ranked cells into site verdicts: one entry per
// pair of every workload with two pairs or more measured, best or worst
// with its confidence, or not_distinguishable (rules/gen keeps the
// published verdict for those), each with its conditions and figures.
func SiteEntries(cells []Cell, ranked map[workload.Workload][]Ranked, assessed map[workload.Workload]Assessment, set Settings, env []Env) []SiteEntry {
	byKey := map[string]*Cell{}
	for i := range cells {
		byKey[string(cells[i].Workload)+" "+cells[i].Pair] = &cells[i]
	}
	cond := conditions(set, env)
	var out []SiteEntry
	for _, w := range workload.Workloads {
		a := assessed[w]
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
			put := func(name string, v float64) {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					m[name] = round4(v)
				}
			}
			put("throughput_corrected_bytes_per_second", r.Estimate)
			put("throughput_corrected_low_bytes_per_second", r.Low)
			put("throughput_corrected_high_bytes_per_second", r.High)
			if a.Reason == "" {
				put("minimum_detectable_difference_ratio", a.MDD)
			}
			for _, name := range siteFigures {
				if s, ok := c.Stats[name]; ok {
					put(name, s.Median)
				}
			}
			e := SiteEntry{
				Workload: string(w), Pair: r.Pair, Verdict: r.Verdict, Standout: r.Standout,
				Date: c.Last().UTC().Format("2006-01-02"), Conditions: cond, Measured: m,
				Note: siteNote(w, r, a, set),
			}
			if r.Verdict == VerdictBest || r.Verdict == VerdictWorst {
				conf := math.Floor(r.Confidence*1000) / 1000 // rounded down: never above what was computed
				e.Confidence = &conf
			}
			out = append(out, e)
		}
	}
	return out
}

// conditions names the measurement conditions a verdict holds under.
func conditions(set Settings, env []Env) string {
	accel := "tcg"
	if len(env) > 0 && env[0].Accel != "" {
		accel = env[0].Accel
	}
	host := "host directories (-hostdir)"
	if set.Storage == "loop" {
		host = "host device " + orText(set.HostDevice, HostDevLoop)
	}
	return fmt.Sprintf("image %s, cache=%s, %s, %s guest, fio %g s runs", set.Format, set.Cache, host, accel, set.RuntimeSeconds)
}

func siteNote(w workload.Workload, r Ranked, a Assessment, set Settings) string {
	how := fmt.Sprintf("pair lab (tests/kdb): %d runs of tests/workload/jobs/%s.fio in randomized blocks (seed %d), drift-corrected by the control %s; rank %d of %d by corrected throughput",
		r.Throughput.N, w, set.Seed, orText(set.Control, "(none)"), r.Rank, r.Of)
	switch {
	case r.Verdict == VerdictNotDistinguishable && a.Reason != "":
		return how + "; not distinguishable: " + a.Reason
	case r.Verdict == VerdictNotDistinguishable:
		return how + fmt.Sprintf("; not distinguishable as best or worst at confidence %g", a.Level)
	}
	return how + fmt.Sprintf("; %s at confidence %.3f (level %g, bootstrap of %d)", r.Verdict, r.Confidence, a.Level, a.Replicates)
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
# workload and pair when its confidence is at least 0.95; not_distinguishable
# entries and verdicts below that leave the published verdict in effect.
# Regenerate the rules after changing it.
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
