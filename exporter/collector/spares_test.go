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
// garbage collections between them, so that its rows (3.8 KB a disk) are
// not allocated again each scrape.
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
		if len(s.disks) == 0 {
			t.Fatalf("scrape %d: the snapshot kept has no rows", i)
		}
		if i > 0 && &s.disks[0] != rows {
			t.Errorf("scrape %d read into new rows", i)
		}
		rows = &s.disks[0]
		h.snapshots.put(s)
		runtime.GC() // twice: a sync.Pool keeps its values through one
		runtime.GC()
	}
}
