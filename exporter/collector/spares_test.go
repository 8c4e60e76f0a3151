package collector

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSpares: a value put back comes out again, past a garbage collection
// (a sync.Pool's would not); beyond max, values are let go.
func TestSpares(t *testing.T) {
	s := spares[[]byte]{max: 1}
	a, b := s.get(), s.get()
	if a == b {
		t.Fatal("two gets of an empty list returned the same value")
	}
	s.put(a)
	s.put(b) // over max: dropped
	runtime.GC()
	runtime.GC()
	if got := s.get(); got != a {
		t.Error("the value put back did not come out after two garbage collections")
	}
	if got := s.get(); got == b {
		t.Error("a value put beyond max was kept")
	}
}

// TestSnapshotReused: consecutive scrapes read into one snapshot, with
// garbage collections between them, so that its rows and the arena of
// their packed counters are not allocated again each scrape; the snapshot
// kept holds no pointer to the inventory's disks or anything else it read.
func TestSnapshotReused(t *testing.T) {
	inv, k := randomFleet(rand.New(rand.NewPCG(3, 3)), 20)
	h, err := NewHandler(prometheus.NewRegistry(), inv, k, k, HandlerOpts{MaxRequestsInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	var rows *diskRow
	for i := 0; i < 3; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("scrape %d: %d", i, rec.Code)
		}
		s := h.snapshots.get()
		if len(s.disks) != 0 || cap(s.disks) == 0 || len(s.arena.chunks) == 0 {
			t.Fatalf("scrape %d: the snapshot kept has %d rows (want 0) of %d, %d arena chunks", i, len(s.disks), cap(s.disks), len(s.arena.chunks))
		}
		all := s.disks[:cap(s.disks)]
		for j := range all {
			if r := &all[j]; r.d != nil || r.c.vals != nil || r.guest.Reading != nil || r.labels.text != "" {
				t.Fatalf("scrape %d: kept row %d still points to what it read", i, j)
			}
		}
		if i > 0 && &all[0] != rows {
			t.Errorf("scrape %d read into new rows", i)
		}
		rows = &all[0]
		h.snapshots.put(s)
		runtime.GC() // twice: a sync.Pool keeps its values through one
		runtime.GC()
	}
}
