package main

import (
	"strings"
	"testing"
)

// TestSiteConfidence checks that the rules act only on site verdicts that
// carry enough confidence (issue 20): a measured verdict below
// MinSiteConfidence and a not_distinguishable entry leave the published
// verdict in effect and are named in the generated file's comment; a
// verdict at the floor, and one without a confidence (asserted by hand,
// as before the pair lab wrote confidences), replace it; a confidence
// outside 0-1 is refused.
func TestSiteConfidence(t *testing.T) {
	site := `
- {workload: mail, pair: xfs/ext4, verdict: worst, date: "2026-11-27", confidence: 0.94, conditions: "image raw, cache=none", measured: {throughput_bytes_per_second: 1.0e6}}
- {workload: mail, pair: ext4/xfs, verdict: not_distinguishable, date: "2026-11-27", measured: {throughput_bytes_per_second: 1.1e6}}
- {workload: mail, pair: xfs/btrfs, verdict: best, date: "2026-11-27", confidence: 0.95, conditions: "image qcow2, cache=writeback, host device loop-sync"}
- {workload: web, pair: xfs/xfs, verdict: worst, date: "2026-11-27"}
`
	kb, err := LoadKB("../kdb/pairs.yaml", writeTemp(t, site))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, w := range kb.Workloads {
		for _, v := range w.Pairs {
			got[w.Name+" "+v.Pair] = v.Verdict + "/" + v.Source
		}
	}
	for key, want := range map[string]string{
		"mail xfs/ext4":  "best/djordjevic2022", // 0.94: ignored, published best stays
		"mail ext4/xfs":  "best/djordjevic2022", // not distinguishable: published stays
		"mail xfs/btrfs": "best/site",           // 0.95: acted on
		"web xfs/xfs":    "worst/site",          // no confidence: asserted by hand
	} {
		if got[key] != want {
			t.Errorf("%s: got %q, want %q", key, got[key], want)
		}
	}
	if len(kb.Ignored) != 2 || !strings.Contains(kb.Ignored[0], "mail xfs/ext4: worst at confidence 0.94") ||
		!strings.Contains(kb.Ignored[1], "mail ext4/xfs: not distinguishable") {
		t.Errorf("ignored: %q", kb.Ignored)
	}
	f := kdbFile(&Params{KB: kb})
	var comments []string
	for _, r := range f.Groups[0].Rules {
		if r.Record == "fspair_kdb_pair_verdict" && r.Comment != "" {
			comments = append(comments, r.Comment)
		}
	}
	if !strings.Contains(f.Groups[0].Comment, "Site entries left out") || !strings.Contains(f.Groups[0].Comment, "mail xfs/ext4") {
		t.Errorf("group comment does not name the ignored entries:\n%s", f.Groups[0].Comment)
	}
	if !strings.Contains(strings.Join(comments, "\n"), "(confidence 0.95); conditions: image qcow2, cache=writeback, host device loop-sync") {
		t.Errorf("the acted-on verdict's comment lacks its confidence and conditions:\n%s", strings.Join(comments, "\n"))
	}

	for name, bad := range map[string]string{
		"confidence above 1":  `- {workload: web, pair: ext4/xfs, verdict: best, date: "2026-01-02", confidence: 1.5}`,
		"negative confidence": `- {workload: web, pair: ext4/xfs, verdict: best, date: "2026-01-02", confidence: -0.1}`,
		"not_distinguishable in the published table's place of verdict, misspelt": `- {workload: web, pair: ext4/xfs, verdict: not-distinguishable, date: "2026-01-02"}`,
	} {
		if _, err := LoadKB("../kdb/pairs.yaml", writeTemp(t, bad)); err == nil {
			t.Errorf("site file with %s: want an error", name)
		}
	}
}
