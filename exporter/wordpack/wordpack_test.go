package wordpack

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRoundTrip: for words of every density, every run of them unpacks to
// what was packed, each word reads back, and Any says whether a run holds
// a non-zero word, the runs that end at the bitmap's last bit included.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	alloc := func(n int) []uint64 { return make([]uint64, n) }
	for round := range 200 {
		w := make([]uint64, 128) // two whole mask words: runs end at the last bit
		share := []float64{0, 0.05, 0.5, 1}[round%4]
		for i := range w {
			if rng.Float64() < share {
				w[i] = rng.Uint64() | 1
			}
		}
		var mask [2]uint64
		vals := Pack(mask[:], w, alloc)
		if share == 0 && vals != nil {
			t.Fatalf("round %d: %d words kept of none", round, len(vals))
		}
		buf := make([]uint64, len(w))
		for range 20 {
			off := rng.IntN(len(w))
			n := 1 + rng.IntN(len(w)-off)
			if got := Unpack(mask[:], vals, off, n, buf); !slices.Equal(got, w[off:off+n]) {
				t.Fatalf("round %d: words %d+%d unpacked %v, want %v", round, off, n, got, w[off:off+n])
			}
			want := slices.ContainsFunc(w[off:off+n], func(v uint64) bool { return v != 0 })
			if Any(mask[:], off, n) != want {
				t.Fatalf("round %d: Any(%d, %d) = %v, want %v", round, off, n, !want, want)
			}
		}
		for i, v := range w {
			if At(mask[:], vals, i) != v {
				t.Fatalf("round %d: word %d", round, i)
			}
		}
	}
}
