package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fspair/fspair/rules/classifier"
	"github.com/fspair/fspair/tests/workload"
)

// Results is the results file of a series, and its state: a run it holds
// without an error is not made again, so an interrupted series continues
// where it stopped.
type Results struct {
	Updated time.Time `json:"updated"`
	// Command is the last command that made runs (a -report-only
	// rendering does not replace it).
	Command string `json:"command,omitempty"`
	Setup   Setup  `json:"setup"`
	Runs    []Run  `json:"runs"`
}

// Setup is what every run of a results file shares; a series with other
// settings needs another file.
type Setup struct {
	Filebench      string  `json:"filebench"` // version and source tarball
	GuestMemMiB    int     `json:"guest_mem_mib"`
	GuestCPUs      int     `json:"guest_cpus"`
	ImageMiB       int     `json:"image_mib"`
	RuntimeSeconds float64 `json:"runtime_seconds"` // the run phase; the layout comes first
	MemSize        string  `json:"memsize"`
	Interval       float64 `json:"interval_seconds"` // scrape interval
	// MountOptions are the guest file system's mount options (-o); empty:
	// its defaults (relatime), as the studies ran.
	MountOptions string `json:"mount_options,omitempty"`
	Notes        string `json:"notes,omitempty"`
}

// ErrSetupChanged is returned by Results.Adopt when the file holds runs
// made with other settings.
var ErrSetupChanged = errors.New("results hold runs made with other settings")

// Run is one personality on one guest/host pair with one set of host
// settings: the scrapes of its disk from Filebench's start to the end,
// the features and the live classifier's class per window.
type Run struct {
	Spec
	Class   workload.Workload `json:"class"` // the right answer: the knowledge base's name of the personality
	Files   int               `json:"files"` // $nfiles
	Started time.Time         `json:"started"`
	// WallSeconds is the whole run with boot and teardown: what a run
	// costs in lab time (-budget plans with it).
	WallSeconds float64 `json:"wall_seconds"`
	// LayoutSeconds is Filebench's layout (creating and preallocating the
	// file set), RunSeconds its run phase, both by Filebench's own clock.
	LayoutSeconds float64 `json:"layout_seconds"`
	RunSeconds    float64 `json:"run_seconds"`
	// Remade says why the run was made again and what the run it replaced
	// took (-runs long-layout); empty for a run made once.
	Remade string `json:"remade,omitempty"`
	// WorkingSetBytes is what the file set takes on the guest file
	// system after the run (du), GuestMemBytes the guest's MemTotal,
	// GuestAvailableBytes its MemAvailable before Filebench started and
	// RunAvailableBytes when its run phase began (Filebench's shared
	// memory and thread buffers taken): the page cache the file set
	// competes for.
	WorkingSetBytes     float64 `json:"working_set_bytes"`
	GuestMemBytes       float64 `json:"guest_mem_bytes"`
	GuestAvailableBytes float64 `json:"guest_available_bytes"`
	RunAvailableBytes   float64 `json:"run_available_bytes,omitempty"`
	// Summary is Filebench's "IO Summary" line, OpsPerSecond from it.
	Summary      string  `json:"summary,omitempty"`
	OpsPerSecond float64 `json:"ops_per_second,omitempty"`
	// FilebenchLog is Filebench's output (with the per-operation
	// breakdown).
	FilebenchLog string `json:"filebench_log,omitempty"`
	Error        string `json:"error,omitempty"`
	// Origin is when Filebench started; window times count from it.
	Origin time.Time `json:"origin"`
	// Points are the scrapes, phases "layout", "run" and "after" (the
	// sync after Filebench ended).
	Points []workload.Point `json:"points,omitempty"`
	// Phases are the features over each whole phase (layout, run).
	Phases  map[string]workload.Features `json:"phases,omitempty"`
	Windows []Window                     `json:"windows,omitempty"`
}

// WorkingSetRatio is the working set over the guest's memory.
func (r Run) WorkingSetRatio() float64 {
	if r.GuestMemBytes == 0 {
		return 0
	}
	return r.WorkingSetBytes / r.GuestMemBytes
}

// Window is one window of a run, classed as the live rules would class it
// at one evaluation (rules/classifier on rules/classes.yaml).
type Window struct {
	End  float64 `json:"end_seconds"`  // since Filebench started
	Span float64 `json:"span_seconds"` // width (the first windows are shorter)
	// Phase is the one running at the window's end: that of the scrape
	// before its last (a change of phase takes a scrape at once, so the
	// phase a scrape is tagged with lasts until the next scrape).
	Phase    string            `json:"phase"`
	Features workload.Features `json:"features"`
	Class    string            `json:"class"` // highest score at this evaluation alone
	// Held is the class with the rules' hysteresis: the class held at
	// the previous window gets hysteresis_bonus on its score.
	Held       string             `json:"held"`
	Confidence float64            `json:"confidence"`
	Scores     map[string]float64 `json:"scores"`
}

// LoadResults reads a results file; a missing one is empty results.
func LoadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Results{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load results: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("load results %s: %w", path, err)
	}
	return &r, nil
}

// Adopt makes s the results' setup: that of a file without runs, or the
// same as the runs were made with.
func (r *Results) Adopt(s Setup) error {
	if len(r.Runs) > 0 && r.Setup != s {
		return fmt.Errorf("%w: stored %+v, asked %+v; use the same flags or another -out", ErrSetupChanged, r.Setup, s)
	}
	r.Setup = s
	return nil
}

// Done reports whether the results hold a run of spec without an error.
func (r *Results) Done(s Spec) bool {
	for _, run := range r.Runs {
		if run.Spec == s && run.Error == "" {
			return true
		}
	}
	return false
}

// Put adds a run, replacing an earlier one of the same spec.
func (r *Results) Put(run Run) {
	for i, old := range r.Runs {
		if old.Spec == run.Spec {
			r.Runs[i] = run
			return
		}
	}
	r.Runs = append(r.Runs, run)
}

// Save writes the results as indented JSON, through a temporary file and
// a rename, so that a kill leaves the old file or the new one.
func (r *Results) Save(path string) error {
	r.Updated = time.Now().UTC().Truncate(time.Second)
	for i := range r.Runs {
		for j := range r.Runs[i].Points {
			if j > 0 {
				r.Runs[i].Points[j].Info = nil
			}
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	return nil
}

// Classifier classes a run's windows as the recording rules would, with
// their hysteresis (classifier.Model.Held).
type Classifier struct {
	Model *classifier.Model
}

// LoadClassifier reads rules/classes.yaml.
func LoadClassifier(path string) (*Classifier, error) {
	m, err := classifier.Load(path)
	if err != nil {
		return nil, err
	}
	return &Classifier{Model: m}, nil
}

// Windows derives the run's windows of width, one ending every step from
// Filebench's start on, each from the scrape nearest its start (never
// before the first of the run) to the one nearest its end, and classes
// them; the first windows, shorter than width, are the first minutes of
// the layout. A window of fewer than two scrapes is left out.
func (c *Classifier) Windows(r Run, width, step time.Duration) []Window {
	var out []Window
	prev := ""
	for _, w := range RunWindows(r, width, step) {
		x, iops := workload.ModelInputs(w.Features)
		res := c.Model.Classify(x, iops, r.Guest)
		held := c.Model.Held(res.Scores, prev)
		prev = held
		w.Class, w.Held, w.Confidence, w.Scores = res.Class, held, round(res.Confidence), roundAll(res.Scores)
		out = append(out, w)
	}
	return out
}

// RunWindows returns the run's windows as Windows derives them, with
// their features and not yet classed.
func RunWindows(r Run, width, step time.Duration) []Window {
	pts := r.Points
	if len(pts) < 2 || step <= 0 {
		return nil
	}
	nearest := func(t time.Time) int {
		best := 0
		for i, p := range pts {
			if math.Abs(float64(p.Time.Sub(t))) < math.Abs(float64(pts[best].Time.Sub(t))) {
				best = i
			}
		}
		return best
	}
	first := 0
	for first < len(pts)-1 && pts[first].Time.Before(r.Origin) {
		first++
	}
	var out []Window
	last := pts[len(pts)-1].Time
	for end := r.Origin.Add(step); !end.After(last.Add(step / 2)); end = end.Add(step) {
		j := nearest(end)
		i := max(nearest(end.Add(-width)), first)
		if i >= j || (len(out) > 0 && pts[j].Time.Sub(r.Origin).Seconds() == out[len(out)-1].End) {
			continue
		}
		out = append(out, Window{
			End: round(pts[j].Time.Sub(r.Origin).Seconds()), Span: round(pts[j].Time.Sub(pts[i].Time).Seconds()),
			Phase: pts[j-1].Phase, Features: workload.Compute(pts[i].Snapshot, pts[j].Snapshot),
		})
	}
	return out
}

// VariantSource is the Source of a held-out variant's observations.
const VariantSource = "filebench-variant"

// Observations returns the windows of every run without an error as the
// classifier's observations, in run order: a window is settled when it
// ends settle or more after Filebench's start. A held-out variant's are of
// VariantSource.
func Observations(res *Results, width, step, settle time.Duration) []workload.Observation {
	var out []workload.Observation
	for _, r := range res.Runs {
		if r.Error != "" {
			continue
		}
		src := "filebench"
		if r.Variant() {
			src = VariantSource
		}
		for _, w := range RunWindows(r, width, step) {
			x, iops := workload.ModelInputs(w.Features)
			out = append(out, workload.Observation{
				Truth: r.Class, Run: r.Spec.String(), Pair: r.Spec.Pair(), GuestFS: r.Guest, End: w.End,
				Inputs: x, IOPS: iops, Settled: w.End >= settle.Seconds(), Source: src,
				Layout: w.End-w.Span < r.LayoutSeconds,
			})
		}
	}
	return out
}

// PhaseFeatures returns the features over each phase of the run, from its
// first scrape to the first scrape of the next phase.
func PhaseFeatures(pts []workload.Point) map[string]workload.Features {
	out := map[string]workload.Features{}
	for i := 0; i < len(pts); {
		j := i
		for j+1 < len(pts) && pts[j+1].Phase == pts[i].Phase {
			j++
		}
		end := min(j+1, len(pts)-1)
		if end > i {
			out[pts[i].Phase] = workload.Compute(pts[i].Snapshot, pts[end].Snapshot)
		}
		i = j + 1
	}
	return out
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }

func roundAll(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = round(v)
	}
	return out
}

// Tally counts a run's windows by held class, for the windows whose
// phase is phase ("" for all), as "fileserver 7, mixed 2".
func Tally(ws []Window, phase string) string {
	n := map[string]int{}
	for _, w := range ws {
		if phase == "" || w.Phase == phase {
			n[w.Held]++
		}
	}
	return countText(n)
}

// countText spells counts by class as "fileserver 7, mixed 2", most
// first, ties by name.
func countText(n map[string]int) string {
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if n[keys[i]] != n[keys[j]] {
			return n[keys[i]] > n[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, n[k])
	}
	return strings.Join(parts, ", ")
}
