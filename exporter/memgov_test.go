package main

import (
	"math"
	"runtime"
	"testing"
	"time"
)

// fakeClock is a settable time for the governor's slots.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestMemoryGovernor: the limit is the floor until the live heap's peak
// asks more, then the ratio over the peak plus the slack; it never exceeds
// the ceiling; a lower live heap leaves the limit where the window's peak
// holds it, and once the peak is older than the window the limit falls to
// what the later collections found; it is set only when it changes.
func TestMemoryGovernor(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC)}
	var sets []int64
	set := func(n int64) int64 { sets = append(sets, n); return 0 }
	g := newMemoryGovernor(math.MaxInt64, set, clock.now)
	if len(sets) != 1 || sets[0] != governorFloor {
		t.Fatalf("first limit: sets %v, want [%d]", sets, governorFloor)
	}
	want := func(live int64) int64 { return int64(float64(live)*governorRatio) + governorSlack }
	steps := []struct {
		after time.Duration
		live  int64
		limit int64
	}{
		{time.Second, 10 << 20, governorFloor},              // a small heap keeps the floor
		{time.Second, 80 << 20, want(80 << 20)},             // a scrape's peak raises it at once
		{30 * time.Second, 40 << 20, want(80 << 20)},        // between scrapes the peak holds it
		{5 * time.Minute, 60 << 20, want(80 << 20)},         // still inside the window
		{4*time.Minute + 50*time.Second, 0, want(60 << 20)}, // the 80 MiB slot has left the window
		{9 * time.Minute, 56 << 20, want(56 << 20)},         // 60 MiB has left it too
		{time.Hour, 1 << 20, governorFloor},                 // a whole window idle: every slot cleared
	}
	for i, st := range steps {
		clock.advance(st.after)
		if got := g.observe(st.live); got != st.limit {
			t.Errorf("step %d (+%s, live %d MiB): limit %d, want %d", i, st.after, st.live>>20, got, st.limit)
		}
	}
	n := len(sets)
	g.observe(0)
	g.observe(1 << 20)
	if len(sets) != n {
		t.Errorf("an unchanged limit was set again: %v", sets[n:])
	}
	for i := 1; i < len(sets); i++ {
		if sets[i] == sets[i-1] {
			t.Errorf("limit %d set twice in a row: %v", sets[i], sets)
		}
	}

	// A cgroup's share caps it, the floor included.
	sets = nil
	capped := newMemoryGovernor(200<<20, set, clock.now)
	if got := capped.observe(400 << 20); got != 200<<20 {
		t.Errorf("ceiling 200 MiB, live 400 MiB: limit %d", got)
	}
	low := newMemoryGovernor(48<<20, set, clock.now)
	if got := low.observe(1 << 20); got != 48<<20 {
		t.Errorf("ceiling 48 MiB under the floor: limit %d, want the ceiling", got)
	}
}

// TestMemoryGovernorFollowsCollections: started, the governor observes the
// runtime's own collections and sets the limit from the heap they found
// live (here with a setter that records, so the test's process keeps its
// own limit).
func TestMemoryGovernorFollowsCollections(t *testing.T) {
	got := make(chan int64, 64)
	set := func(n int64) int64 {
		select {
		case got <- n:
		default:
		}
		return 0
	}
	g := newMemoryGovernor(math.MaxInt64, set, time.Now)
	defer g.stopObserving()
	<-got // the floor, set on creation
	g.start()
	keep := make([][]byte, 0, 128)
	for i := 0; i < 128; i++ {
		keep = append(keep, make([]byte, 1<<20)) // 128 MiB live: above the floor's share
	}
	deadline := time.After(30 * time.Second)
	for {
		runtime.GC()
		select {
		case n := <-got:
			// Collections during the allocations found less live first.
			if n > int64(float64(128<<20+16<<20)*governorRatio)+governorSlack {
				t.Fatalf("limit %d with 128 MiB live: more than the ratio over it", n)
			}
			if n >= 128<<20 {
				runtime.KeepAlive(keep)
				return
			}
		case <-deadline:
			t.Fatal("no limit over the 128 MiB live within 30 s of collections")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
