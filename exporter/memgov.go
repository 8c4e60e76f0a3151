package main

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// --memory-limit=auto without GOMEMLIMIT: the soft memory limit follows the
// live heap. What a scrape keeps live grows with the disks followed (at
// 10,000 disks 70-83 MB at its peaks), so no one size suits a host with ten
// disks and one with ten thousand: a fixed limit below the live heap costs
// CPU and cannot hold, one far above it lets the heap double. After every
// collection the governor takes the highest live heap of the last
// governorWindow and sets the limit to governorRatio times it plus
// governorSlack, never below governorFloor (so that a small exporter keeps
// the runtime's own pacing, GOGC=100) nor above the cgroup's share.
//
// The runtime paces its collector to the lower of GOGC's goal (twice the
// live heap) and the limit, so between scrapes, when less is live, the heap
// may still grow to the window's peak times the ratio before a collection.
// A scrape that reaches a new peak (the first after start-up, or one after
// more disks came) collects whenever its heap passes a quarter over what
// the last collection found live, many times as it grows: that scrape is
// the slow one (BENCHMARKS.md, "a memory limit that follows the live
// heap"). The limit is visible as go_gc_gomemlimit_bytes.
const (
	governorRatio  = 1.25
	governorSlack  = 2 << 20
	governorFloor  = 64 << 20
	governorWindow = 10 * time.Minute
	governorSlots  = 10
)

// memoryGovernor keeps the highest live heap per slot of
// governorWindow/governorSlots and sets the limit those peaks imply.
type memoryGovernor struct {
	ceiling int64             // the highest limit it may set (math.MaxInt64: none)
	set     func(int64) int64 // runtime/debug.SetMemoryLimit but in tests
	now     func() time.Time  // time.Now but in tests

	mu    sync.Mutex
	slot  int64                // the current slot's number since the epoch (never negative)
	peaks [governorSlots]int64 // the highest live heap of each slot, by slot number mod governorSlots
	limit int64                // the limit last set
	stop  atomic.Bool
}

// newMemoryGovernor returns a governor whose limit never exceeds ceiling and
// sets its first limit (governorFloor, or ceiling when lower).
func newMemoryGovernor(ceiling int64, set func(int64) int64, now func() time.Time) *memoryGovernor {
	g := &memoryGovernor{ceiling: ceiling, set: set, now: now}
	g.slot = g.slotOf(now())
	g.observe(0)
	return g
}

func (g *memoryGovernor) slotOf(t time.Time) int64 {
	return t.UnixNano() / int64(governorWindow/governorSlots)
}

// observe records a collection's live heap and sets the limit it implies;
// it returns the limit in force.
func (g *memoryGovernor) observe(live int64) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.slotOf(g.now())
	if s > g.slot {
		// Clear the slots passed since the last observation (all of them
		// once a whole window has gone by).
		for i := g.slot + 1; i <= s && i <= g.slot+governorSlots; i++ {
			g.peaks[i%governorSlots] = 0
		}
		g.slot = s
	}
	cur := &g.peaks[g.slot%governorSlots]
	if live > *cur {
		*cur = live
	}
	var peak int64
	for _, p := range g.peaks {
		peak = max(peak, p)
	}
	want := int64(governorFloor)
	if f := float64(peak)*governorRatio + governorSlack; f > float64(want) {
		want = int64(min(f, math.MaxInt64/2))
	}
	want = min(want, g.ceiling)
	if want != g.limit {
		g.set(want)
		g.limit = want
	}
	return want
}

// gcSentinel is garbage the moment it is made; its finalizer runs once the
// collection that found it unreachable has ended. It holds a pointer so
// that it is never one of the runtime's tiny allocations, whose finalizers
// may wait for a neighbour.
type gcSentinel struct{ _ *byte }

// start observes the live heap after every collection until stopped.
func (g *memoryGovernor) start() { g.arm() }

// stopObserving ends start's observations after the next collection.
func (g *memoryGovernor) stopObserving() { g.stop.Store(true) }

func (g *memoryGovernor) arm() {
	runtime.SetFinalizer(new(gcSentinel), func(*gcSentinel) {
		if g.stop.Load() {
			return
		}
		if live, ok := liveHeap(); ok {
			g.observe(live)
		}
		g.arm()
	})
}

// liveHeap is the heap the last collection marked live.
func liveHeap() (int64, bool) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return int64(min(s[0].Value.Uint64(), math.MaxInt64)), true
}
