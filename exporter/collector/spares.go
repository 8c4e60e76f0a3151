package collector

import "sync"

// spares keeps up to max values for the next scrapes to reuse. A sync.Pool
// does not do for the scrape's large buffers: the garbage collector empties
// it, and at 10,000 disks it ran between any two scrapes, so that each one
// allocated its snapshot (38 MB when the counters were kept dense) and its
// buffers afresh and the exporter's memory went to twice what one scrape
// holds.
type spares[T any] struct {
	mu   sync.Mutex
	max  int
	free []*T
}

// get returns a kept value, or a new zero one.
func (s *spares[T]) get() *T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		v := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		return v
	}
	return new(T)
}

// put keeps v for a later get, unless max values are kept already.
func (s *spares[T]) put(v *T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) < s.max {
		s.free = append(s.free, v)
	}
}
