package guest

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestReadingPacked: a reading gives back the Stats it was made of, for
// histograms absent, empty, sparse and full, on every operation (discard
// included, though QEMU keeps none for it); Observed and HistogramOK say
// what the bins and flags say.
func TestReadingPacked(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	at := time.UnixMilli(1_764_480_000_000)
	for round := range 500 {
		var s Stats
		for f := range numFields {
			for op := range NumOps {
				if rng.IntN(3) > 0 {
					s.field(f)[op] = Counter{V: rng.Uint64N(1 << 40), OK: rng.IntN(4) > 0}
				}
			}
		}
		for op := range s.Latency {
			h := &s.Latency[op]
			h.OK = rng.IntN(3) > 0
			share := []float64{0, 0.1, 0.5, 1}[rng.IntN(4)]
			for k := range h.Bins {
				if rng.Float64() < share {
					h.Bins[k] = rng.Uint64N(1<<50) + 1
				}
			}
		}
		r := NewReading(&s, at)
		if got := r.Stats(); got != s {
			t.Fatalf("round %d: unpacked %+v, want %+v", round, got, s)
		}
		if r.At != at {
			t.Fatalf("round %d: at %v", round, r.At)
		}
		buf := make([]uint64, LatencySlots)
		for op := range s.Latency {
			observed := false
			for _, n := range s.Latency[op].Bins {
				observed = observed || n != 0
			}
			if r.Observed(op) != observed || r.HistogramOK(op) != s.Latency[op].OK {
				t.Fatalf("round %d op %d: observed %v ok %v, want %v %v", round, op, r.Observed(op), r.HistogramOK(op), observed, s.Latency[op].OK)
			}
			if got := r.Bins(op, buf); [LatencySlots]uint64(got) != s.Latency[op].Bins {
				t.Fatalf("round %d op %d: bins %v", round, op, got)
			}
		}
	}
}
