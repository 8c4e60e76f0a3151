package workload

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// Results is testdata/features.json: the measured features of each
// workload on each pair, and recordings of workload switches.
type Results struct {
	Updated  time.Time   `json:"updated"`
	Setup    Setup       `json:"setup"`
	Runs     []RunResult `json:"runs"`
	Switches []Switch    `json:"switches,omitempty"`
}

// Setup records how the runs were made.
type Setup struct {
	RuntimeSeconds  float64 `json:"runtime_seconds"`  // fio runtime per phase
	WarmupSeconds   float64 `json:"warmup_seconds"`   // skipped at a phase's start
	IntervalSeconds float64 `json:"interval_seconds"` // scrape interval
	GuestMemMiB     int     `json:"guest_mem_mib"`
	GuestCPUs       int     `json:"guest_cpus"`
	ImageMiB        int     `json:"image_mib"`
	Notes           string  `json:"notes,omitempty"`
}

// RunResult is one workload on one pair.
type RunResult struct {
	Workload      Workload   `json:"workload"`
	Pair          string     `json:"pair"` // Pair.String()
	WindowSeconds float64    `json:"window_seconds"`
	Features      Features   `json:"features"`
	Fio           FioSummary `json:"fio"`
	Measured      time.Time  `json:"measured"`
	// From and To are the window's first and last scrapes, so that the
	// features can be derived again when their definitions change.
	From *Snapshot `json:"from,omitempty"`
	To   *Snapshot `json:"to,omitempty"`
	// Windows are disjoint shorter windows inside the window (TestMeasure
	// -subwindow), for accuracy figures over windows rather than runs.
	Windows []Sample `json:"windows,omitempty"`
}

// Switch is a recording of one guest changing workload while running.
type Switch struct {
	Pair     string   `json:"pair"`
	From     Workload `json:"from"`
	To       Workload `json:"to"`
	SwitchAt float64  `json:"switch_at_seconds"` // when the second workload's prepare began
	// Points are the scrapes; Windows derives the features of sliding
	// windows of any width from them.
	Points   []Point   `json:"points"`
	Measured time.Time `json:"measured"`
}

// LoadResults reads a results file; a missing file gives empty results.
func LoadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
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

// Put adds a run, replacing an earlier run of the same workload and pair.
func (r *Results) Put(run RunResult) {
	for i, old := range r.Runs {
		if old.Workload == run.Workload && old.Pair == run.Pair {
			r.Runs[i] = run
			return
		}
	}
	r.Runs = append(r.Runs, run)
}

// PutSwitch adds a switch recording, replacing one of the same pair and
// workloads.
func (r *Results) PutSwitch(s Switch) {
	for i, old := range r.Switches {
		if old.Pair == s.Pair && old.From == s.From && old.To == s.To {
			r.Switches[i] = s
			return
		}
	}
	r.Switches = append(r.Switches, s)
}

// Recompute derives each run's features again from its stored window
// scrapes with the current Compute, keeping the whole-phase
// guest_write_amplification, which needs fio's count.
func (r *Results) Recompute() {
	for i, run := range r.Runs {
		if run.From == nil || run.To == nil {
			continue
		}
		f := Compute(*run.From, *run.To)
		if v, ok := run.Features[FeatGuestWriteAmplification]; ok {
			f[FeatGuestWriteAmplification] = v
		}
		r.Runs[i].Features = f
	}
}

// Sort orders runs by class (knowledge-base order), workload, then pair.
func (r *Results) Sort() {
	rank := map[Workload]int{}
	for i, w := range Workloads {
		rank[w] = i
	}
	sort.SliceStable(r.Runs, func(i, j int) bool {
		a, b := r.Runs[i], r.Runs[j]
		if ca, cb := a.Workload.Class(), b.Workload.Class(); ca != cb {
			return rank[ca] < rank[cb]
		}
		if a.Workload != b.Workload {
			return a.Workload < b.Workload
		}
		return a.Pair < b.Pair
	})
}

// compact drops what stored snapshots repeat: the disk labels (a run keeps
// those of its first scrape, a switch those of its first point) and
// counters that stayed zero, which Compute reads as zero anyway.
func (r *Results) compact() {
	for i := range r.Runs {
		if r.Runs[i].From != nil {
			r.Runs[i].From.dropZeros()
		}
		if r.Runs[i].To != nil {
			r.Runs[i].To.Info = nil
			r.Runs[i].To.dropZeros()
		}
	}
	for i := range r.Switches {
		for j := range r.Switches[i].Points {
			if j > 0 {
				r.Switches[i].Points[j].Info = nil
			}
			r.Switches[i].Points[j].dropZeros()
		}
	}
}

func (s *Snapshot) dropZeros() {
	for _, m := range []map[string]float64{s.Requests, s.Bytes, s.Errors, s.Sequential, s.Random, s.SyncWrites, s.DeviceRequests, s.DeviceBytes} {
		for k, v := range m {
			if v == 0 {
				delete(m, k)
			}
		}
	}
	for _, m := range []map[string]Hist{s.Latency, s.Stage} {
		for k, v := range m {
			if v == (Hist{}) {
				delete(m, k)
			}
		}
	}
}

// Save writes the results as indented JSON.
func (r *Results) Save(path string) error {
	r.Sort()
	r.compact()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	return nil
}

// Pairs lists the pairs measured, sorted.
func (r *Results) Pairs() []string {
	seen := map[string]bool{}
	for _, run := range r.Runs {
		seen[run.Pair] = true
	}
	return sortedKeys(seen)
}

// format prints a feature value in the unit a table reader wants:
// shares and ratios with two decimals, sizes in KiB, latencies in ms.
func format(name string, v float64) string {
	switch {
	case strings.HasSuffix(name, "_bytes"):
		return fmt.Sprintf("%.1f KiB", v/1024)
	case strings.HasSuffix(name, "_seconds"):
		return fmt.Sprintf("%.2f ms", v*1e3)
	case name == FeatIOPS:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
