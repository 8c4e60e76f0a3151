package guest

import (
	"context"
	"sync"
	"time"
)

// Gate lets the poll give way to scrapes. A QMP round of 10,000 VMs keeps
// the exporter and the VMMs answering busy for half of a 5 s interval,
// and a scrape that lands in it shared the cores with them. While a scrape
// holds the gate, the round's workers start no new session (those open
// finish); a round gives way for at most a fifth of its interval in all,
// so that back-to-back scrapes (a load test) do not stop it. The poll's
// work is the same, later in its interval; a reading's time is its own
// (Reading.At), so nothing it reports moves.
type Gate struct {
	mu    sync.Mutex
	holds int
	free  chan struct{} // closed when the last hold ends; nil while none is open
	since time.Time     // when the holds open now began
	held  time.Duration // time with a hold open, before since
}

// Hold keeps the poll from starting sessions until release is called.
// Holds may overlap; release is idempotent.
func (g *Gate) Hold() (release func()) {
	g.mu.Lock()
	if g.holds == 0 {
		g.free = make(chan struct{})
		g.since = time.Now()
	}
	g.holds++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.holds--
			if g.holds == 0 {
				g.held += time.Since(g.since)
				close(g.free)
				g.free = nil
			}
		})
	}
}

// heldFor is the time the gate has been held in all, until now.
func (g *Gate) heldFor() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holds > 0 {
		return g.held + time.Since(g.since)
	}
	return g.held
}

// yielder is one round's use of a gate: it gives way while the gate has
// been held less than budget since the round began.
type yielder struct {
	g      *Gate
	start  time.Duration // the gate's heldFor at the round's start
	budget time.Duration
}

func (g *Gate) round(budget time.Duration) *yielder {
	if g == nil {
		return nil
	}
	return &yielder{g: g, start: g.heldFor(), budget: budget}
}

// wait returns once the gate is free, the round's budget is spent, or ctx
// ends. A nil yielder never waits.
func (y *yielder) wait(ctx context.Context) {
	if y == nil {
		return
	}
	y.g.mu.Lock()
	free := y.g.free
	y.g.mu.Unlock()
	if free == nil {
		return
	}
	left := y.budget - (y.g.heldFor() - y.start)
	if left <= 0 {
		return
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-free:
	case <-t.C:
	case <-ctx.Done():
	}
}
