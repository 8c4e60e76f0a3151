package workload

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/fspair/fspair/rules/classifier"
)

// A FamilyBox is the box one model family (a training job, a variant or an
// app) spans: per feature of its class's box, the range its run windows were
// measured at over the pairs, rounded outwards to 0.01.
//
// The live classifier has one box per class, set on the training jobs. The
// family boxes are the experiment of rules/README.md ("One box per model
// family"): a class that is the union of every family measured for it, so
// that a real program unlike the training job still has a box of its own.
type FamilyBox struct {
	Family Workload
	Box    map[string][2]float64
}

// FamilyBoxes returns a box per workload of runs, on the features m's box
// of the workload's class has, from the run windows (not the sub-windows).
func FamilyBoxes(m *classifier.Model, runs []RunResult) []FamilyBox {
	byFamily := map[Workload]map[string][2]float64{}
	for _, r := range runs {
		c, ok := modelClass(m, r.Workload.Class())
		if !ok {
			continue
		}
		box := byFamily[r.Workload]
		if box == nil {
			box = map[string][2]float64{}
			byFamily[r.Workload] = box
		}
		x, _ := ModelInputs(r.Features)
		for _, f := range m.BoxFeatures(c) {
			v, ok := x[f]
			if !ok {
				continue
			}
			lo, hi := math.Floor(v*100)/100, math.Ceil(v*100)/100
			if b, seen := box[f]; seen {
				lo, hi = math.Min(lo, b[0]), math.Max(hi, b[1])
			}
			box[f] = [2]float64{lo, hi}
		}
	}
	out := make([]FamilyBox, 0, len(byFamily))
	for w, b := range byFamily {
		out = append(out, FamilyBox{w, b})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Family < out[j].Family })
	return out
}

func modelClass(m *classifier.Model, w Workload) (classifier.Class, bool) {
	for _, c := range m.Classes {
		if c.Name == string(w) {
			return c, true
		}
	}
	return classifier.Class{}, false
}

// ScoreFamilies classes the windows of runs (sub: the disjoint sub-windows)
// with m's scales and scoring, but with each class's distance the distance
// to the nearest of its family boxes. With leaveOut, a window's own family
// box is left out, so that each family is classed by a model it did not set
// (leave one family out).
func ScoreFamilies(m *classifier.Model, boxes []FamilyBox, runs []RunResult, sub, leaveOut bool) []Scored {
	return scoreWindows(runs, sub, func(r RunResult, x map[string]float64, iops float64) classifier.Result {
		dist := map[string]float64{}
		for _, c := range m.Classes {
			dist[c.Name] = math.Inf(1)
		}
		for _, b := range boxes {
			if leaveOut && b.Family == r.Workload {
				continue
			}
			c := classifier.Class{Name: string(b.Family.Class()), Box: b.Box}
			if d := m.Distance(c, x, GuestFS(r.Pair)); d < dist[c.Name] {
				dist[c.Name] = d
			}
		}
		return m.Score(dist, iops)
	})
}

// RenderFamilies writes, per family, how many of its windows each model
// classed right: the live classifier (live), one box per family with every
// family's box (all boxes) and with the family's own box left out (left
// out), and what the left-out model called the wrong ones.
func RenderFamilies(live, all, out []Scored) (string, error) {
	if len(live) == 0 || len(live) != len(all) || len(all) != len(out) {
		return "", fmt.Errorf("%w: want the same windows under the three models (%d, %d, %d)", ErrNoWindows, len(live), len(all), len(out))
	}
	type row struct{ live, all, out, n int }
	rows := map[Workload]*row{}
	classes := map[Workload]*row{}
	wrong := map[Workload]map[string]int{}
	var order []Workload
	for i := range live {
		w := live[i].Workload
		if all[i].Workload != w || out[i].Workload != w {
			return "", fmt.Errorf("window %d: the models scored different runs", i)
		}
		if rows[w] == nil {
			rows[w], wrong[w] = &row{}, map[string]int{}
			order = append(order, w)
		}
		if classes[w.Class()] == nil {
			classes[w.Class()] = &row{}
		}
		for _, r := range []*row{rows[w], classes[w.Class()]} {
			r.n++
			r.live += b2i(live[i].Right())
			r.all += b2i(all[i].Right())
			r.out += b2i(out[i].Right())
		}
		if !out[i].Right() {
			wrong[w][out[i].Class]++
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	var b strings.Builder
	b.WriteString("| family | windows | live classifier | all family boxes | own box left out | left out, called |\n|---|---:|---:|---:|---:|---|\n")
	for _, w := range order {
		r := rows[w]
		var called []string
		for _, c := range sortedKeys(wrong[w]) {
			called = append(called, fmt.Sprintf("%s %d", c, wrong[w][c]))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s |\n", w, r.n, r.live, r.all, r.out, strings.Join(called, ", "))
	}
	for _, c := range Workloads {
		if r := classes[c]; r != nil {
			fmt.Fprintf(&b, "| **%s, all families** | %d | %s | %s | %s | |\n", c, r.n, pct(r.live, r.n), pct(r.all, r.n), pct(r.out, r.n))
		}
	}
	return b.String(), nil
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
