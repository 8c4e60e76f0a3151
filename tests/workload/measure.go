package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// Point is one scrape of a disk, with the phase running when it was taken.
type Point struct {
	Snapshot
	Phase string `json:"phase"`
}

// Recorder scrapes one disk at a fixed interval in the background and keeps
// every snapshot, tagged with the phase set last.
type Recorder struct {
	ex       *Exporter
	file     string
	interval time.Duration

	mu     sync.Mutex
	phase  string
	points []Point
	errs   []error

	cancel context.CancelFunc
	done   chan struct{}
}

// Record starts scraping the disk of sourceFile every interval until Stop.
// The first scrape happens at once.
func (e *Exporter) Record(ctx context.Context, sourceFile string, interval time.Duration) *Recorder {
	ctx, cancel := context.WithCancel(ctx)
	r := &Recorder{ex: e, file: sourceFile, interval: interval, cancel: cancel, done: make(chan struct{}), phase: "idle"}
	go r.loop(ctx)
	return r
}

func (r *Recorder) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		r.scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Recorder) scrape(ctx context.Context) {
	s, err := r.ex.Snapshot(ctx, r.file)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			r.errs = append(r.errs, err)
		}
		return
	}
	r.points = append(r.points, Point{Snapshot: s, Phase: r.phase})
}

// SetPhase tags the following scrapes with phase and takes one scrape at
// once, so that a phase's start has a snapshot.
func (r *Recorder) SetPhase(ctx context.Context, phase string) {
	r.mu.Lock()
	r.phase = phase
	r.mu.Unlock()
	r.scrape(ctx)
}

// Points returns the snapshots so far.
func (r *Recorder) Points() []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Point(nil), r.points...)
}

// Stop ends the scraping and returns every snapshot, and the scrape errors
// joined (a scrape that failed is missing from the points).
func (r *Recorder) Stop() ([]Point, error) {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Point(nil), r.points...), errors.Join(r.errs...)
}

// FioSummary is what fio reports for a run, summed over its jobs.
type FioSummary struct {
	ReadIOs    uint64  `json:"read_ios"`
	WriteIOs   uint64  `json:"write_ios"`
	ReadBytes  uint64  `json:"read_bytes"`
	WriteBytes uint64  `json:"write_bytes"`
	Syncs      uint64  `json:"syncs"`
	Seconds    float64 `json:"seconds"`
}

func summarize(r *lab.FioResult) FioSummary {
	t := r.Total()
	return FioSummary{
		ReadIOs: t.Read.TotalIOs, WriteIOs: t.Write.TotalIOs,
		ReadBytes: t.Read.IOBytes, WriteBytes: t.Write.IOBytes,
		Syncs: t.Sync.TotalIOs, Seconds: t.Runtime.Seconds(),
	}
}

// Phase is one workload run in a guest.
type Phase struct {
	Workload Workload
	Start    time.Time     // fio started (after Prepare)
	Runtime  time.Duration // fio's time-based runtime
	End      time.Time     // fio returned, and a sync after it completed
	Fio      FioSummary
	// GuestWriteAmplification is the bytes written to the image file from
	// Start to End (including the final sync) over the bytes fio wrote:
	// what the guest file system (journal, metadata, copy-on-write) adds.
	GuestWriteAmplification float64
}

// RunPhase prepares and runs w for runtime in vm while rec records,
// tagging the scrapes "prepare:<w>" and then "<w>". After fio returns it
// syncs the guest file system so that the image-file bytes of the phase are
// complete, and the files stay in place (Clean removes them).
func RunPhase(ctx context.Context, vm *lab.VM, rec *Recorder, w Workload, runtime time.Duration) (*Phase, error) {
	var res *lab.FioResult
	first := -1
	p, err := recordPhase(ctx, vm, rec, w, runtime, func() error { return Prepare(ctx, vm, w) }, func() error {
		first = len(rec.Points()) - 1
		var err error
		res, err = Run(ctx, vm, w, runtime)
		return err
	})
	if err != nil {
		return nil, err
	}
	p.Fio = summarize(res)
	pts := rec.Points()
	if first >= 0 && p.Fio.WriteBytes > 0 {
		a, b := pts[first].Snapshot, pts[len(pts)-1].Snapshot
		p.GuestWriteAmplification = (b.Bytes["write"] - a.Bytes["write"]) / float64(p.Fio.WriteBytes)
	}
	return p, nil
}

// recordPhase runs prepare under the phase "prepare:<w>" and run under
// "<w>" (the phase's Start is when run began), syncs the guest file system
// so that the image-file bytes of the phase are complete, and ends the
// phase with "after:<w>".
func recordPhase(ctx context.Context, vm *lab.VM, rec *Recorder, w Workload, runtime time.Duration, prepare, run func() error) (*Phase, error) {
	rec.SetPhase(ctx, "prepare:"+string(w))
	if err := prepare(); err != nil {
		return nil, err
	}
	rec.SetPhase(ctx, string(w))
	p := &Phase{Workload: w, Start: time.Now(), Runtime: runtime}
	if err := run(); err != nil {
		return nil, err
	}
	if _, err := vm.RunOK(ctx, "sync"); err != nil {
		return nil, fmt.Errorf("run %s: sync after the run: %w", w, err)
	}
	rec.SetPhase(ctx, "after:"+string(w))
	p.End = time.Now()
	return p, nil
}

// Window returns the features of the phase's steady state: from the first
// scrape at least warmup after the start to the last scrape within the
// runtime (fio's clock starts after the host's, so fio is still running
// then). It fails when the window is shorter than half the time asked.
func (p *Phase) Window(points []Point, warmup time.Duration) (Features, time.Duration, error) {
	f, _, _, span, err := p.window(points, warmup)
	return f, span, err
}

// WindowSnapshots is Window that also returns the window's first and last
// scrapes.
func (p *Phase) WindowSnapshots(points []Point, warmup time.Duration) (f Features, from, to Snapshot, span time.Duration, err error) {
	return p.window(points, warmup)
}

func (p *Phase) window(points []Point, warmup time.Duration) (Features, Snapshot, Snapshot, time.Duration, error) {
	var a, b *Point
	for i := range points {
		pt := &points[i]
		if pt.Phase != string(p.Workload) {
			continue
		}
		off := pt.Time.Sub(p.Start)
		if a == nil && off >= warmup {
			a = pt
		}
		if off <= p.Runtime {
			b = pt
		}
	}
	if a == nil || b == nil || !b.Time.After(a.Time) {
		return nil, Snapshot{}, Snapshot{}, 0, fmt.Errorf("window of %s: no scrapes between %s and %s after the start", p.Workload, warmup, p.Runtime)
	}
	span := b.Time.Sub(a.Time)
	if want := p.Runtime - warmup; span < want/2 {
		return nil, Snapshot{}, Snapshot{}, span, fmt.Errorf("window of %s: scrapes span only %s of %s", p.Workload, span, want)
	}
	f := Compute(a.Snapshot, b.Snapshot)
	if p.GuestWriteAmplification > 0 {
		f[FeatGuestWriteAmplification] = p.GuestWriteAmplification
	}
	return f, a.Snapshot, b.Snapshot, span, nil
}

// Windows returns the features over sliding windows of width span, one
// ending at each scrape from span after the first scrape on, with the
// phase of the window's last scrape.
func Windows(points []Point, span time.Duration) []Sample {
	var out []Sample
	if len(points) == 0 {
		return nil
	}
	t0 := points[0].Time
	j := 0
	for i := range points {
		for j < i && points[i].Time.Sub(points[j+1].Time) >= span {
			j++
		}
		if points[i].Time.Sub(points[j].Time) < span {
			continue
		}
		out = append(out, Sample{
			At:       points[i].Time.Sub(t0).Seconds(),
			Span:     points[i].Time.Sub(points[j].Time).Seconds(),
			Phase:    points[i].Phase,
			Features: Compute(points[j].Snapshot, points[i].Snapshot),
		})
	}
	return out
}

// Disjoint returns the features over back-to-back windows of at least
// span inside the phase's steady state (from warmup after its start to
// its runtime), each starting at the scrape the previous one ended on.
func (p *Phase) Disjoint(points []Point, warmup, span time.Duration) []Sample {
	var in []Point
	for _, pt := range points {
		off := pt.Time.Sub(p.Start)
		if pt.Phase == string(p.Workload) && off >= warmup && off <= p.Runtime {
			in = append(in, pt)
		}
	}
	var out []Sample
	for i, j := 0, 1; j < len(in); j++ {
		if d := in[j].Time.Sub(in[i].Time); d >= span {
			out = append(out, Sample{At: in[j].Time.Sub(p.Start).Seconds(), Span: d.Seconds(), Phase: in[j].Phase,
				Features: Compute(in[i].Snapshot, in[j].Snapshot)})
			i = j
		}
	}
	return out
}

// Sample is the features of one window of a recording.
type Sample struct {
	At       float64  `json:"at_seconds"`   // window end, seconds since the recording started
	Span     float64  `json:"span_seconds"` // window width
	Phase    string   `json:"phase"`        // phase at the window end
	Features Features `json:"features"`
}
