package workload

import (
	"fmt"
	"math"
)

// Class is a workload class: one of Workloads, or Idle or Mixed.
type Class string

// Classes besides the four workloads.
const (
	Idle  Class = "idle"  // too few requests to say
	Mixed Class = "mixed" // active, but no workload's rule holds
)

// Cut points between the classes, from the lab measurements in
// testdata/features.json (six pairs, FEATURES.md "Proposed thresholds").
// Each lies between the nearest measured values of the classes it
// separates, with a margin on both sides; ratios on a log scale.
const (
	// IdleIOPS: below this many reads+writes per second the mix is noise.
	IdleIOPS = 1.0
	// LargeReadBytes: fileserver reads whole 64-192 KiB files (measured
	// 96-102 KiB per read); web, mail and rfa 8.6-10.9 KiB.
	LargeReadBytes = 32 << 10
	// SyncWriteShare: mail makes its writes durable (0.90-1.00); fileserver
	// and rfa stay at or below 0.07. Web reaches 0.77 (1.00 in short
	// windows) because its few writes are mostly journal commits, so the
	// mail rule pairs this with WriteHeavyReadShare.
	SyncWriteShare = 0.75
	// WriteHeavyReadShare: mail (0.41-0.57) and fileserver (0.31-0.34)
	// read at most this share of their requests; web (1.00) and rfa
	// (0.91-0.94) more.
	WriteHeavyReadShare = 0.8
	// ReadOnlyRatio: web's reads per write (390-965) against rfa's
	// (10-15).
	ReadOnlyRatio = 50.0
	// RandomReadShare: web reads whole small files in random order, one
	// request per file (0.89-0.94 random); a workload reading files in
	// several small requests, as rfa does (0.31-0.32), is mostly
	// sequential by the exporter's rule.
	RandomReadShare = 0.6
	// MinReadWriteRatio: rfa reads 10-15 times as often as it writes; below
	// 2, a non-durable small-request mix is not rfa.
	MinReadWriteRatio = 2.0
)

// open is an open bound of a Range.
var open = math.NaN()

// Expect is, per workload, the range of each feature its rule in Classify
// tests: the measured values of every pair lie inside with margin
// (TestFeaturesFile), and tests/validate's TestValidate checks fresh runs
// in make test against them (Mismatches).
var Expect = map[Workload]map[string]Range{
	Web: {
		FeatReadWriteRatio:  {ReadOnlyRatio, open},
		FeatRandomReadShare: {RandomReadShare, open},
		FeatMeanReadSize:    {open, LargeReadBytes},
	},
	Mail: {
		FeatSyncWriteShare: {SyncWriteShare, open},
		FeatReadShare:      {open, WriteHeavyReadShare},
		FeatMeanReadSize:   {open, LargeReadBytes},
	},
	Fileserver: {
		FeatMeanReadSize:   {LargeReadBytes, open},
		FeatSyncWriteShare: {open, SyncWriteShare},
		FeatReadShare:      {open, WriteHeavyReadShare},
	},
	// rfa is told from web by the read/write ratio alone: its low random
	// share comes from reading small files in 8 KiB pieces (Filebench's
	// readwholefile with 8 KiB reads), which large files would not show.
	RFA: {
		FeatReadWriteRatio: {MinReadWriteRatio, ReadOnlyRatio},
		FeatSyncWriteShare: {open, SyncWriteShare},
		FeatMeanReadSize:   {open, LargeReadBytes},
	},
}

// Classify names the class of one window's features with the cut points
// above: idle first, then the rule of each workload in Expect, in the
// order fileserver, mail, web, rfa (fileserver's request size and mail's
// synchronous writes are the strongest signals). A window no rule fits is
// Mixed. A window with reads and no writes has an infinite read/write
// ratio, which satisfies web's ratio rule.
func Classify(f Features) Class {
	if f[FeatIOPS] < IdleIOPS {
		return Idle
	}
	g := Features{}
	for k, v := range f {
		g[k] = v
	}
	if _, ok := g[FeatReadWriteRatio]; !ok && g[FeatReadShare] == 1 {
		g[FeatReadWriteRatio] = math.Inf(1)
	}
	for _, w := range []Workload{Fileserver, Mail, Web, RFA} {
		if matches(g, Expect[w]) {
			return Class(w)
		}
	}
	return Mixed
}

// Mismatches lists how the features f of a window of w (one of
// Workloads) differ from what Classify is built on: each feature of
// Expect[w] absent or outside its range, and the class Classify names
// when it is not w's. Empty when the window is one of w's.
func Mismatches(w Workload, f Features) []string {
	var out []string
	for _, n := range sortedKeys(Expect[w]) {
		r := Expect[w][n]
		if v, ok := f[n]; !ok || !r.Contains(v) {
			out = append(out, fmt.Sprintf("%s = %s, want %s", n, fv(f, n), r))
		}
	}
	if got := Classify(f); got != Class(w) {
		out = append(out, fmt.Sprintf("classified %s", got))
	}
	return out
}

// matches reports whether every feature of want is present in f and in
// its range.
func matches(f Features, want map[string]Range) bool {
	for n, r := range want {
		v, ok := f[n]
		if !ok || !r.Contains(v) {
			return false
		}
	}
	return true
}
