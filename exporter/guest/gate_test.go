package guest

import (
	"context"
	"testing"
	"time"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/inventory"
)

func TestGateHolds(t *testing.T) {
	var g Gate
	y := g.round(time.Hour)
	y.wait(context.Background()) // free: returns at once
	r1, r2 := g.Hold(), g.Hold()
	r1()
	r1() // twice: one release
	done := make(chan struct{})
	go func() { y.wait(context.Background()); close(done) }()
	select {
	case <-done:
		t.Fatal("wait returned with one hold still open")
	case <-time.After(50 * time.Millisecond):
	}
	r2()
	<-done
	if g.heldFor() < 50*time.Millisecond {
		t.Errorf("held for %s in all, want at least the 50 ms waited", g.heldFor())
	}
	var none *yielder // no gate: never waits
	none.wait(context.Background())
}

// TestGateBudget: a gate held for good stops a round's sessions for its
// budget only, and ctx's end stops the wait.
func TestGateBudget(t *testing.T) {
	var g Gate
	defer g.Hold()()
	y := g.round(30 * time.Millisecond)
	y.wait(context.Background())
	if held := g.heldFor(); held < 30*time.Millisecond {
		t.Errorf("the wait ended after %s of hold, before the budget", held)
	}
	y.wait(context.Background()) // spent: returns at once, or the test times out
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.round(time.Hour).wait(ctx)
}

// TestPollGivesWay: while a scrape holds the gate the round opens no QMP
// session; once it ends the round reads every VM.
func TestPollGivesWay(t *testing.T) {
	q := startFakeQMP(t, t.TempDir(), "vm.qmp")
	q.set([]map[string]any{{"device": "drive-vd1", "qdev": "/machine/peripheral/vd1/virtio-backend", "node-name": "#b1", "stats": qemuStats(100)}}, nil)
	inv := &fakeInv{disks: []inventory.Disk{disk("vm1", "vd1", "/img/a.raw", 0, discovery.SourceQEMU, q.path)}}
	g := &Gate{}
	p := New(inv, Options{Timeout: time.Second, Interval: time.Minute, Gate: g})
	release := g.Hold()
	done := make(chan struct{})
	go func() { p.Poll(context.Background()); close(done) }()
	time.Sleep(100 * time.Millisecond)
	if n := q.conns.Load(); n != 0 {
		t.Errorf("%d sessions opened while the gate was held", n)
	}
	release()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the round did not go on after the hold ended")
	}
	if s := p.Status(&inv.disks[0]); s.Status != StatusOK || q.conns.Load() != 1 {
		t.Errorf("after the hold: status %s, %d sessions; want ok after one", s.Status, q.conns.Load())
	}
}
