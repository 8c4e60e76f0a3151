package workload

import (
	"math"
	"strings"
	"testing"

	"github.com/fspair/fspair/rules/classifier"
)

// familyRun is a run of w on pair whose window reads readShare of its
// requests at readBytes a read, with syncShare of its writes durable.
func familyRun(w Workload, pair string, readShare, readBytes, syncShare float64) RunResult {
	return RunResult{Workload: w, Pair: pair, WindowSeconds: 60, Features: Features{
		FeatIOPS: 300, FeatReadShare: readShare, FeatMeanReadSize: readBytes, FeatSyncWriteShare: syncShare,
	}}
}

// TestFamilyBoxes: each family's box spans its runs on its class's box
// features, rounded outwards; a window is classed by the nearest box of a
// class; leaving a family's own box out classes it by the others, which is
// the held-out figure of the experiment.
func TestFamilyBoxes(t *testing.T) {
	// The model the experiment was made with: boxes set on the fio models.
	m, err := classifier.Load("testdata/classes-fio.yaml")
	if err != nil {
		t.Fatal(err)
	}
	runs := []RunResult{
		familyRun("web", "a", 0.998, 10800, 0.5),          // 499 reads a write: inside web's box
		familyRun("web-cachedsite", "a", 0.8, 14500, 0),   // 4 reads a write, 14.2 KiB
		familyRun("web-cachedsite", "b", 5.0/6, 14600, 0), // 5 reads a write
		familyRun("rfa", "a", 14.0/15, 8800, 0.06),        // 14 reads a write: inside rfa's box
	}
	boxes := FamilyBoxes(m, runs)
	if len(boxes) != 3 {
		t.Fatalf("got %d boxes, want 3 (one per family): %+v", len(boxes), boxes)
	}
	var site FamilyBox
	for _, b := range boxes {
		if b.Family == "web-cachedsite" {
			site = b
		}
	}
	rw := site.Box[classifier.ReadWriteLog2]
	if want := [2]float64{2, 2.33}; math.Abs(rw[0]-want[0]) > 1e-9 || math.Abs(rw[1]-want[1]) > 1e-9 {
		t.Errorf("web-cachedsite read_write_log2 box %v, want %v", rw, want)
	}
	rs := site.Box[classifier.ReadSizeLog2]
	if rs[0] > math.Log2(14500) || rs[1] < math.Log2(14600) || rs[1]-rs[0] > math.Log2(14600/14500.0)+0.02 {
		t.Errorf("web-cachedsite read_size_log2 box %v: want the runs' range, rounded outwards", rs)
	}
	if _, ok := site.Box[classifier.SyncWriteShare]; ok {
		t.Errorf("web-cachedsite has a sync_write_share range; web's box in the model has none")
	}

	all := ScoreFamilies(m, boxes, runs, false, false)
	out := ScoreFamilies(m, boxes, runs, false, true)
	for i, r := range runs {
		if !all[i].Right() {
			t.Errorf("%s on %s with every family box: classed %s, want %s", r.Workload, r.Pair, all[i].Class, r.Workload.Class())
		}
	}
	// Left out, the cached site is nearer rfa's box than web's, web's own
	// job is far from every other box, and rfa, the only family of its
	// class, is nearest the cached site.
	for i, want := range []string{"mixed", "rfa", "rfa", "web"} {
		if out[i].Class != want {
			t.Errorf("%s on %s with its own box left out: classed %s, want %s", runs[i].Workload, runs[i].Pair, out[i].Class, want)
		}
	}
	md, err := RenderFamilies(ScoreRuns(m, runs, false), all, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| web-cachedsite | 2 | 0 | 2 | 0 | rfa 2 |", "| rfa | 1 | 1 | 1 | 0 | web 1 |",
		"| **web, all families** | 3 | 33% | 100% | 0% | |"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if _, err := RenderFamilies(all, out[:1], out); err == nil {
		t.Error("RenderFamilies of different window counts: no error")
	}
}
