package workload

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/fspair/fspair/rules/classifier"
)

// A Scored window is one measured window of a run, classified by the live
// classifier (rules/classifier with rules/classes.yaml) as the recording
// rules would class it at one evaluation.
type Scored struct {
	Workload   Workload // the job that ran; its Class is the right answer
	Pair       string
	Seconds    float64 // window width
	Class      string  // what the classifier said
	Confidence float64
	Scores     map[string]float64
	Distances  map[string]float64
	// Expect, when set, is the right answer instead of the workload's
	// class (idle, for a window in which the host saw almost nothing).
	Expect string
}

// Right reports whether the classifier named the right class: Expect, or
// the workload's class.
func (s Scored) Right() bool { return s.Class == s.expected() }

func (s Scored) expected() string {
	if s.Expect != "" {
		return s.Expect
	}
	return string(s.Workload.Class())
}

// ModelInputs returns the classifier's inputs and the IOPS of a window from
// its features (read share, IOPS, mean request sizes, durable share of
// writes, flushes per write).
func ModelInputs(f Features) (map[string]float64, float64) {
	iops := f[FeatIOPS]
	reads := f[FeatReadShare] * iops
	writes := iops - reads
	flushes := f[FeatFlushesPerWrite] * writes
	if writes == 0 {
		flushes = f[FeatFlushRate]
	}
	return classifier.Inputs(classifier.Counts{Reads: reads, Writes: writes, ReadBytes: f[FeatMeanReadSize] * reads,
		WriteBytes: f[FeatMeanWriteSize] * writes, SyncWrites: f[FeatSyncWriteShare] * writes, Flushes: flushes,
		RandomWrites: f[FeatRandomWriteShare] * writes}), iops
}

// GuestFS returns the guest file system of a pair written GUEST/HOST[/...].
func GuestFS(pair string) string {
	g, _, _ := strings.Cut(pair, "/")
	return g
}

// ScoreRuns classifies every run of runs with m: its whole window, or with
// sub, each of its disjoint windows (TestMeasure -subwindow) instead.
func ScoreRuns(m *classifier.Model, runs []RunResult, sub bool) []Scored {
	return scoreWindows(runs, sub, func(r RunResult, x map[string]float64, iops float64) classifier.Result {
		return m.Classify(x, iops, GuestFS(r.Pair))
	})
}

// scoreWindows classes every window of runs (sub: the disjoint
// sub-windows) with classify, given the window's run, its classifier
// inputs and its IOPS.
func scoreWindows(runs []RunResult, sub bool, classify func(r RunResult, x map[string]float64, iops float64) classifier.Result) []Scored {
	var out []Scored
	for _, r := range runs {
		for _, w := range windows(r, sub) {
			x, iops := ModelInputs(w.f)
			c := classify(r, x, iops)
			out = append(out, Scored{Workload: r.Workload, Pair: r.Pair, Seconds: w.secs, Class: c.Class,
				Confidence: c.Confidence, Scores: c.Scores, Distances: c.Distances})
		}
	}
	return out
}

// A window is the features of one measured window and its width.
type window struct {
	f    Features
	secs float64
}

// windows returns r's run window, or with sub its disjoint sub-windows.
func windows(r RunResult, sub bool) []window {
	if !sub {
		return []window{{r.Features, r.WindowSeconds}}
	}
	var ws []window
	for _, s := range r.Windows {
		ws = append(ws, window{s.Features, s.Span})
	}
	return ws
}

// ErrNoWindows is returned by RenderEvaluation when there is nothing to
// evaluate.
var ErrNoWindows = errors.New("no windows to evaluate")

// confidenceBands are the bands of the calibration table: the lower bound
// of each.
var confidenceBands = []float64{0, 0.25, 0.5, 0.75, 0.9}

// RenderEvaluation writes the held-out tables in Markdown: accuracy per
// class, the confusion matrix per class (rows: the workload's class,
// columns: what the classifier said), accuracy per class and pair, the
// windows the classifier got wrong, and how often it was right per band of
// its confidence.
func RenderEvaluation(ws []Scored) (string, error) {
	if len(ws) == 0 {
		return "", ErrNoWindows
	}
	cols := append(append([]string{}, classifier.Workloads...), classifier.Mixed, classifier.Idle)
	conf := map[Workload]map[string]int{}
	pairs := map[string]bool{}
	byPair := map[string]map[Workload][2]int{}
	for _, w := range ws {
		c := Workload(w.expected())
		if conf[c] == nil {
			conf[c] = map[string]int{}
		}
		conf[c][w.Class]++
		pairs[w.Pair] = true
		if byPair[w.Pair] == nil {
			byPair[w.Pair] = map[Workload][2]int{}
		}
		n := byPair[w.Pair][c]
		n[1]++
		if w.Right() {
			n[0]++
		}
		byPair[w.Pair][c] = n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Confusion matrix over %d windows (rows: the class of the workload that ran; columns: the class the rules chose):\n\n", len(ws))
	fmt.Fprintf(&b, "| ran \\ chosen | %s | right |\n|---|%s---:|\n", strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
	for _, c := range append(append([]Workload{}, Workloads...), Workload(classifier.Idle)) {
		row := conf[c]
		if row == nil {
			continue
		}
		total := 0
		var cells []string
		for _, col := range cols {
			cells = append(cells, fmt.Sprint(row[col]))
			total += row[col]
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", c, strings.Join(cells, " | "), pct(row[string(c)], total))
	}
	ps := make([]string, 0, len(pairs))
	for p := range pairs {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	fmt.Fprintf(&b, "\nRight per class and pair (windows right / windows):\n\n| pair | %s |\n|---|%s\n", joinWorkloads(Workloads, " | "), strings.Repeat("---:|", len(Workloads)))
	for _, p := range ps {
		var cells []string
		for _, c := range Workloads {
			n := byPair[p][c]
			if n[1] == 0 {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, fmt.Sprintf("%d/%d", n[0], n[1]))
		}
		fmt.Fprintf(&b, "| %s | %s |\n", p, strings.Join(cells, " | "))
	}
	fmt.Fprintf(&b, "\nRight per band of `domain_disk:fspair_workload_class:confidence` (as the rules record it: rules/README.md, Groups):\n\n| confidence | windows | right |\n|---|---:|---:|\n")
	for i, lo := range confidenceBands {
		hi := 1.0
		if i+1 < len(confidenceBands) {
			hi = confidenceBands[i+1]
		}
		n, right := 0, 0
		for _, w := range ws {
			if w.Confidence >= lo && (w.Confidence < hi || i == len(confidenceBands)-1) {
				n++
				if w.Right() {
					right++
				}
			}
		}
		fmt.Fprintf(&b, "| %.2f-%.2f | %d | %s |\n", lo, hi, n, pct(right, n))
	}
	var wrong []string
	for _, w := range ws {
		if w.Right() {
			continue
		}
		d := []string{"-"} // windows recorded without their distances
		if len(w.Distances) > 0 {
			d = d[:0]
			for _, c := range classifier.Workloads {
				d = append(d, fmt.Sprintf("%s %.2f", c, w.Distances[c]))
			}
		}
		wrong = append(wrong, fmt.Sprintf("| %s | %s | %s | %.2f | %s |", w.Workload, w.Pair, w.Class, w.Confidence, strings.Join(d, ", ")))
	}
	if len(wrong) > 0 {
		fmt.Fprintf(&b, "\nThe windows classed wrong, with their distances (units) from each class:\n\n| workload | pair | chosen | confidence | distances |\n|---|---|---|---:|---|\n%s\n", strings.Join(wrong, "\n"))
	}
	return b.String(), nil
}

func pct(n, total int) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", math.Floor(100*float64(n)/float64(total)+0.5))
}
