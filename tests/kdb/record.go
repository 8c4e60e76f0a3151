package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

// sample is one scrape of the disk, tagged with the phase running then.
type sample struct {
	Scrape
	Phase string
}

// recorder scrapes one disk at a fixed interval in the background, as
// workload.Recorder does, and keeps the flush-cost counters of the same
// scrape beside what workload.ReadDisk reads.
type recorder struct {
	ex       *workload.Exporter
	file     string
	interval time.Duration

	mu      sync.Mutex
	phase   string
	samples []sample
	errs    []error

	cancel context.CancelFunc
	done   chan struct{}
}

func record(ctx context.Context, ex *workload.Exporter, file string, interval time.Duration) *recorder {
	ctx, cancel := context.WithCancel(ctx)
	r := &recorder{ex: ex, file: file, interval: interval, phase: "idle", cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			r.scrape(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return r
}

func (r *recorder) scrape(ctx context.Context) {
	fams, err := r.ex.Scrape(ctx)
	var s workload.Snapshot
	if err == nil {
		s, err = workload.ReadDisk(fams, r.file, time.Now())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			r.errs = append(r.errs, err)
		}
		return
	}
	r.samples = append(r.samples, sample{Scrape: Scrape{Snapshot: s, Flush: readFlush(fams, r.file)}, Phase: r.phase})
}

// start drops what was recorded, tags the following scrapes with phase and
// takes one at once, so that the phase starts with a scrape.
func (r *recorder) start(ctx context.Context, phase string) {
	r.mu.Lock()
	r.samples, r.errs, r.phase = nil, nil, phase
	r.mu.Unlock()
	r.scrape(ctx)
}

// setPhase tags the following scrapes with phase and takes one at once.
func (r *recorder) setPhase(ctx context.Context, phase string) {
	r.mu.Lock()
	r.phase = phase
	r.mu.Unlock()
	r.scrape(ctx)
}

// taken returns the scrapes since start and the scrape errors joined.
func (r *recorder) taken() ([]sample, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sample(nil), r.samples...), errors.Join(r.errs...)
}

func (r *recorder) stop() {
	r.cancel()
	<-r.done
}

// points converts samples for workload.Phase.WindowSnapshots.
func points(ss []sample) []workload.Point {
	out := make([]workload.Point, len(ss))
	for i, s := range ss {
		out[i] = workload.Point{Snapshot: s.Snapshot, Phase: s.Phase}
	}
	return out
}

// at returns the sample taken at t.
func at(ss []sample, t time.Time) (sample, bool) {
	for _, s := range ss {
		if s.Time.Equal(t) {
			return s, true
		}
	}
	return sample{}, false
}
