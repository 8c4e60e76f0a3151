package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/fspair/fspair/tests/workload"
)

// The run order cancels drift (issue 20, part 1). The lab machine's speed
// drifts over hours (docs/kdb/README.md: the same cells ran 15-45% faster in
// the first hour than later), so a matrix run pair by pair confounds the
// pair with the time it ran. Instead the runs are made in blocks: every
// block holds every cell (pair x workload) once, so block b is repeat b of
// every cell, and
//
//   - the pairs' order in a block is a new random permutation, drawn from
//     the state's recorded seed and the block number (so a resumed run, or
//     a reader with the seed, gets the same order); a pair's workloads run
//     back to back in one guest, in a random order too: one guest boot per
//     pair per block keeps the cost of the interleaving to a few seconds
//     a pair;
//   - the control cell runs at the start of the block, after the first half
//     of its pairs (middle) and at its end; its runs measure the drift
//     (drift.go) and are kept out of the control cell's own figures.
//
// Randomizing per block turns what drift is left after the correction into
// noise shared fairly by all pairs, instead of a bias against the pairs that
// happened to run late.

// Control positions in a block.
const (
	ControlStart  = "start"
	ControlMiddle = "middle"
	ControlEnd    = "end"
)

// job is one run to make.
type job struct {
	pair     string // guest/host
	workload workload.Workload
	repeat   int    // the block
	control  string // ControlStart, ControlMiddle, ControlEnd; "" for a matrix run
}

func (j job) String() string {
	if j.control != "" {
		return fmt.Sprintf("control %s on %s, block %d %s", j.workload, j.pair, j.repeat, j.control)
	}
	return fmt.Sprintf("%s on %s #%d", j.workload, j.pair, j.repeat)
}

// controlCell is the cell whose repeated runs measure the drift.
type controlCell struct {
	pair     string
	workload workload.Workload
}

func (c controlCell) String() string { return c.pair + ":" + string(c.workload) }

// parseControl reads "pair:workload"; empty means the first pair and the
// first workload.
func parseControl(s string, pairs []string, works []workload.Workload) (controlCell, error) {
	if s == "" {
		return controlCell{pairs[0], works[0]}, nil
	}
	p, w, ok := strings.Cut(s, ":")
	if !ok {
		return controlCell{}, fmt.Errorf("%w: -control %q: want guest/host:workload, e.g. ext4/ext4:mail", ErrUsage, s)
	}
	wp, err := workload.ParsePair(p + "/raw")
	if err != nil || strings.Count(p, "/") != 1 {
		return controlCell{}, fmt.Errorf("%w: -control %q: pair %q: want guest/host over ext4, xfs, btrfs", ErrUsage, s, p)
	}
	wl, err := workload.ParseWorkload(w)
	if err != nil {
		return controlCell{}, fmt.Errorf("%w: -control %q: %v", ErrUsage, s, err)
	}
	return controlCell{wp.GuestFS + "/" + wp.HostFS, wl}, nil
}

// blockOrder is block b's runs in order: the control, the first half of
// the pairs (each with its workloads), the control, the other half, the
// control. The permutations come from a PCG seeded with (seed, b), so that
// they depend on nothing else: adding blocks (-repeats) leaves the earlier
// ones as they were.
func blockOrder(pairs []string, works []workload.Workload, ctrl controlCell, seed int64, b int) []job {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(b)))
	ps := slices.Clone(pairs)
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	ctl := func(pos string) job { return job{ctrl.pair, ctrl.workload, b, pos} }
	out := []job{ctl(ControlStart)}
	mid := len(ps) / 2
	for i, p := range ps {
		if i == mid && mid > 0 {
			out = append(out, ctl(ControlMiddle))
		}
		ws := slices.Clone(works)
		rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
		for _, w := range ws {
			out = append(out, job{p, w, b, ""})
		}
	}
	if mid == 0 { // one pair: the middle control after it
		out = append(out, ctl(ControlMiddle))
	}
	return append(out, ctl(ControlEnd))
}

// schedule is the whole matrix's order: blocks 1..repeats.
func schedule(pairs []string, works []workload.Workload, repeats int, ctrl controlCell, seed int64) []job {
	var out []job
	for b := 1; b <= repeats; b++ {
		out = append(out, blockOrder(pairs, works, ctrl, seed, b)...)
	}
	return out
}
