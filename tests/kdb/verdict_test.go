package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fspair/fspair/tests/workload"
)

// verdicts ranks synthetic cells of one workload, each given as
// pair:throughputs, and prints "pair=verdict[*]" in rank order.
func verdicts(t *testing.T, tol float64, cells map[string][]float64) string {
	t.Helper()
	var runs []Run
	for pair, bws := range cells {
		runs = append(runs, synthCell(pair, workload.Mail, bws...)...)
	}
	rs := Rank(Cells(runs), tol)[workload.Mail]
	var out []string
	for i, r := range rs {
		if r.Rank != i+1 || r.Of != len(cells) {
			t.Errorf("%s: rank %d of %d at position %d of %d", r.Pair, r.Rank, r.Of, i, len(cells))
		}
		v := r.Verdict
		if v == "" {
			v = "none"
		}
		out = append(out, fmt.Sprintf("%s=%s%s", r.Pair, v, star(r.Standout)))
	}
	return strings.Join(out, " ")
}

func TestRank(t *testing.T) {
	for _, c := range []struct {
		name  string
		cells map[string][]float64
		want  string
	}{
		{
			name: "groups by overlap; a lone slowest pair stands out",
			cells: map[string][]float64{
				"ext4/xfs":    {100, 95, 105}, // fastest
				"ext4/ext4":   {96, 104, 90},  // median 96, overlaps the fastest's 95-105
				"xfs/ext4":    {80, 78, 83},   // between
				"btrfs/btrfs": {60, 58, 61},   // between: 60 is more than 5% above 40 and apart
				"xfs/xfs":     {40, 38, 42},   // slowest, alone
			},
			want: "ext4/xfs=best ext4/ext4=best xfs/ext4=none btrfs/btrfs=none xfs/xfs=worst*",
		},
		{
			name: "within the tolerance without overlap; a lone fastest pair stands out",
			cells: map[string][]float64{
				"btrfs/ext4": {200, 199, 201},
				"ext4/xfs":   {100, 100, 100}, // 4.2% above the slowest: near it
				"xfs/xfs":    {97, 97, 97},
				"xfs/btrfs":  {96, 96, 96}, // slowest
			},
			want: "btrfs/ext4=best* ext4/xfs=worst xfs/xfs=worst xfs/btrfs=worst",
		},
		{
			name: "the runs cannot separate the fastest from the slowest: contested",
			cells: map[string][]float64{
				"ext4/xfs":  {100, 90, 110},
				"xfs/xfs":   {98, 92, 105},
				"ext4/ext4": {95, 89, 99},
			},
			want: "ext4/xfs=contested xfs/xfs=contested ext4/ext4=contested",
		},
		{
			name:  "two pairs apart: best and worst, no standout with two",
			cells: map[string][]float64{"ext4/xfs": {10, 11}, "xfs/xfs": {5, 6}},
			want:  "ext4/xfs=best xfs/xfs=worst",
		},
		{
			name:  "one pair: nothing to rank against",
			cells: map[string][]float64{"ext4/xfs": {10, 11}},
			want:  "ext4/xfs=none",
		},
	} {
		if got := verdicts(t, DefaultTolerance, c.cells); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestRankTolerance(t *testing.T) {
	cells := map[string][]float64{"ext4/xfs": {100}, "ext4/ext4": {92}, "xfs/xfs": {50}}
	if got, want := verdicts(t, 0.05, cells), "ext4/xfs=best* ext4/ext4=none xfs/xfs=worst*"; got != want {
		t.Errorf("tolerance 5%%: got %s, want %s", got, want)
	}
	if got, want := verdicts(t, 0.10, cells), "ext4/xfs=best ext4/ext4=best xfs/xfs=worst*"; got != want {
		t.Errorf("tolerance 10%%: got %s, want %s", got, want)
	}
}

func TestRankSkipsCellsWithoutThroughput(t *testing.T) {
	r := synthRun("ext4/xfs", workload.Mail, 1, synth{})
	r.Fio = Fio{}
	rs := Rank(Cells(append([]Run{r}, synthCell("xfs/xfs", workload.Mail, 5)...)), DefaultTolerance)
	if len(rs[workload.Mail]) != 1 || rs[workload.Mail][0].Pair != "xfs/xfs" {
		t.Errorf("ranked %+v, want only xfs/xfs", rs[workload.Mail])
	}
}
