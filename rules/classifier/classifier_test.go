package classifier

import (
	"math"
	"testing"
)

func model(t *testing.T) *Model {
	t.Helper()
	m, err := Load("../classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// centre returns the middle of every range of c's box on guest file
// system g ("": the box), the features without a range as a disk without
// durable writes or flushes.
func centre(c Class, g string) map[string]float64 {
	x := map[string]float64{SyncWriteShare: 0, FlushesPerWriteLog2: 0}
	for f, b := range c.BoxFor(g) {
		x[f] = (b[0] + b[1]) / 2
	}
	return x
}

// TestBoxesSeparate checks what a model must give every class: a disk in
// the middle of its box (on every guest file system the class has ranges
// for; the features it has no range on as a disk without durable writes
// or flushes) is classed that class, with more than half the score.
func TestBoxesSeparate(t *testing.T) {
	m := model(t)
	for _, c := range m.Classes {
		for _, g := range append([]string{""}, GuestFileSystems...) {
			r := m.Classify(centre(c, g), 100, g)
			if r.Class != c.Name || r.Scores[c.Name] <= 0.5 {
				t.Errorf("centre of %s (guest %q): class %s, scores %v", c.Name, g, r.Class, r.Scores)
			}
		}
	}
}

// TestOneFeatureOut checks the point of distances: moving one feature of a
// class's centre out of its range lowers the class's score step by step
// instead of zeroing it at once, and the disk ends up mixed (far from all)
// only when it is far from every class.
func TestOneFeatureOut(t *testing.T) {
	m := model(t)
	mail := m.Classes[1]
	prev := 1.0
	for _, sync := range []float64{0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3} {
		x := centre(mail, "")
		x[SyncWriteShare] = sync
		r := m.Classify(x, 100, "")
		s := r.Scores["mail"]
		if s <= 0 || s > prev+1e-12 {
			t.Errorf("sync share %.1f: mail score %.3f (previous %.3f): want positive and not rising", sync, s, prev)
		}
		prev = s
	}
	// The mail application of issue 22: 42% reads of 13.5 KiB, 32% of writes durable.
	r := m.Classify(Inputs(Counts{Reads: 0.42, Writes: 0.58, ReadBytes: 0.42 * 13824, WriteBytes: 0.58 * 16384, SyncWrites: 0.58 * 0.32, Flushes: 0.58 * 0.32}), 1400, "")
	if r.Class != "mail" {
		t.Errorf("mail application: class %s, scores %v, distances %v", r.Class, r.Scores, r.Distances)
	}
	// A write-only disk of large writes is far from every class.
	r = m.Classify(Inputs(Counts{Writes: 1000, WriteBytes: 1000 << 20}), 1000, "")
	if r.Class != Mixed || r.Scores[Mixed] != 1 {
		t.Errorf("write-only disk: class %s, scores %v", r.Class, r.Scores)
	}
}

func TestInputs(t *testing.T) {
	x := Inputs(Counts{Reads: 300, ReadBytes: 300 * 4096})
	if x[ReadWriteLog2] != RatioClamp || x[ReadSizeLog2] != 12 || x[SyncWriteShare] != 0 {
		t.Errorf("read-only disk: %v", x)
	}
	x = Inputs(Counts{Writes: 10, WriteBytes: 10 * 8192, SyncWrites: 5, Flushes: 5})
	if _, ok := x[ReadSizeLog2]; ok || x[ReadWriteLog2] != -RatioClamp || x[SyncWriteShare] != 0.5 || x[FlushesPerWriteLog2] != -1 || x[WriteSizeLog2] != 13 {
		t.Errorf("write-only disk: %v", x)
	}
	if x := Inputs(Counts{}); len(x) != 2 || x[SyncWriteShare] != 0 || x[FlushesPerWriteLog2] != 0 {
		t.Errorf("idle disk: %v, want only the durable share and flushes per write, 0", x)
	}
	if x := Inputs(Counts{Flushes: 3}); x[FlushesPerWriteLog2] != FlushClampHigh {
		t.Errorf("a disk that flushes without writing: %v", x)
	}
	if x := Inputs(Counts{Writes: 1e6, Flushes: 1}); x[FlushesPerWriteLog2] != -FlushClamp {
		t.Errorf("a disk that writes without flushing: %v", x)
	}
	m := model(t)
	r := m.Classify(Inputs(Counts{}), 0, "")
	if r.Class != Idle || r.Scores[Idle] != 1 || r.Scores["web"] != 0 || !math.IsNaN(r.Distances["web"]) {
		t.Errorf("idle disk: %+v", r)
	}
}

func TestValidate(t *testing.T) {
	for name, mod := range map[string]func(*Model){
		"unknown feature":          func(m *Model) { m.Features[0].Name = "iops" },
		"zero scale":               func(m *Model) { m.Features[1].Scale = 0 },
		"no source":                func(m *Model) { m.Features[2].Source = " " },
		"inverted box":             func(m *Model) { m.Classes[0].Box[ReadWriteLog2] = [2]float64{2, 1} },
		"class order":              func(m *Model) { m.Classes[0].Name, m.Classes[1].Name = "mail", "web" },
		"far must rise":            func(m *Model) { m.Far.Above, m.Far.Below = nil, []float64{2.5, 3.5} },
		"box on unlisted":          func(m *Model) { m.Features = m.Features[:2] },
		"class no source":          func(m *Model) { m.Classes[3].Source = "" },
		"idle bounds flat":         func(m *Model) { m.Idle.Below = []float64{1, 1} },
		"bonus of 1":               func(m *Model) { one := 1.0; m.Hysteresis.Value = &one },
		"negative bonus":           func(m *Model) { neg := -0.1; m.Hysteresis.Value = &neg },
		"bonus no value":           func(m *Model) { m.Hysteresis.Value = nil },
		"bonus no source":          func(m *Model) { m.Hysteresis.Source = "" },
		"settle no source":         func(m *Model) { m.Settle.Source = " " },
		"settle no window":         func(m *Model) { m.Settle.Windows = nil },
		"settle negative":          func(m *Model) { neg := -1.0; m.Settle.Seconds = &neg },
		"softmax over what":        func(m *Model) { m.Softmax = &Softmax{Over: "cube", Source: "x"} },
		"softmax no source":        func(m *Model) { m.Softmax = &Softmax{Over: OverDistance} },
		"min_confidence no value":  func(m *Model) { m.Settle.MinConfidence.Value = nil },
		"min_confidence no source": func(m *Model) { m.Settle.MinConfidence.Source = "" },
		"min_confidence above 1":   func(m *Model) { v := 1.01; m.Settle.MinConfidence.Value = &v },
		"min_confidence below 0":   func(m *Model) { v := -0.01; m.Settle.MinConfidence.Value = &v },
		"min_confidence NaN":       func(m *Model) { v := math.NaN(); m.Settle.MinConfidence.Value = &v },
		"settle of 0": func(m *Model) {
			zero := 0.0
			m.Settle.Windows, m.Settle.Seconds = &zero, &zero
		},
	} {
		m := model(t)
		mod(m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

// TestHeld: the class held at the previous evaluation keeps a lead of the
// bonus classes.yaml gives it, as the rules' class rule does.
func TestHeld(t *testing.T) {
	m := model(t)
	b := m.Hysteresis.V()
	if b <= 0 || b >= 1 {
		t.Fatalf("hysteresis bonus %v read from classes.yaml, want in (0, 1)", b)
	}
	scores := map[string]float64{"mail": 0.5, "fileserver": 0.5 + b/2}
	if got := m.Held(scores, ""); got != "fileserver" {
		t.Errorf("no previous class: %s, want fileserver", got)
	}
	if got := m.Held(scores, "mail"); got != "mail" {
		t.Errorf("previous mail, within the bonus: %s, want mail", got)
	}
	scores["fileserver"] = 0.5 + 2*b
	if got := m.Held(scores, "mail"); got != "fileserver" {
		t.Errorf("previous mail, beyond the bonus: %s, want fileserver", got)
	}
}

// TestSoftmaxOver: over the distances a margin of one unit between the two
// nearest classes gives the same split wherever the disk lies; over their
// squares the same margin far from both boxes makes the nearer class win
// outright (the confident wrong class the distance softmax avoids).
func TestSoftmaxOver(t *testing.T) {
	dist := func(near, far float64) map[string]float64 {
		return map[string]float64{"web": near, "mail": far, "fileserver": 60, "rfa": 60}
	}
	m := model(t)
	m.Far.Above, m.Far.Below = []float64{70, 71}, nil // nothing is far here
	m.Softmax = &Softmax{Over: OverDistance, Source: "test"}
	m.Temperature = nil // 1
	close, distant := m.Score(dist(0, 1), 100), m.Score(dist(3, 4), 100)
	if math.Abs(close.Scores["web"]-distant.Scores["web"]) > 1e-9 {
		t.Errorf("over distances: web scores %g at 0/1 units and %g at 3/4, want equal", close.Scores["web"], distant.Scores["web"])
	}
	if want := 1 / (1 + math.Exp(-1)); math.Abs(close.Scores["web"]-want) > 1e-6 {
		t.Errorf("over distances at temperature 1: web scores %g, want %g", close.Scores["web"], want)
	}
	m.Softmax = nil
	close, distant = m.Score(dist(0, 1), 100), m.Score(dist(3, 4), 100)
	if !(distant.Scores["web"] > 0.99 && close.Scores["web"] < 0.75) {
		t.Errorf("over squared distances: web scores %g at 0/1 units and %g at 3/4, want under 0.75 and over 0.99", close.Scores["web"], distant.Scores["web"])
	}
	if m.SoftmaxOver() != OverSquared {
		t.Errorf("unset softmax: over %s, want %s", m.SoftmaxOver(), OverSquared)
	}
}

// TestMissingOf checks a class's own charge for a mean read size a disk
// cannot show: it replaces the far ramp's end in the class's distance, and
// is capped at that end, so that no class counts as farther for lacking a
// feature than the model without missing: would.
func TestMissingOf(t *testing.T) {
	m := model(t)
	writeOnly := Inputs(Counts{Writes: 100, WriteBytes: 100 * 32768, SyncWrites: 1, Flushes: 1})
	// A class with a range on the mean read size, charging nothing of its
	// own for it yet.
	var cls Class
	for _, c := range m.Classes {
		if _, ok := c.Box[ReadSizeLog2]; ok {
			cls = c
			break
		}
	}
	if cls.Name == "" {
		t.Fatal("no class of classes.yaml has a range on the mean read size")
	}
	cls.Missing, cls.Others = nil, nil
	plain := cls
	before := m.Distance(cls, writeOnly, "")
	rest := before*before - m.MissingTerm() // the other features' squared distances
	cls.Missing = map[string]float64{ReadSizeLog2: 2}
	if got := m.Distance(cls, writeOnly, ""); math.Abs(got*got-(rest+2)) > 1e-9 {
		t.Errorf("missing read size charged 2: squared distance %v, want %v", got*got, rest+2)
	}
	cls.Missing[ReadSizeLog2] = 1e6
	if got := m.Distance(cls, writeOnly, ""); math.Abs(got-before) > 1e-9 {
		t.Errorf("missing read size charged 1e6: distance %v, want the far ramp's end's %v", got, before)
	}
	withReads := Inputs(Counts{Reads: 100, ReadBytes: 100 * 8192, Writes: 100, WriteBytes: 100 * 32768})
	cls.Missing[ReadSizeLog2] = 0
	if got, want := m.Distance(cls, withReads, ""), m.Distance(plain, withReads, ""); got != want {
		t.Errorf("a disk with reads: distance %v with missing: set, want %v: it counts only without reads", got, want)
	}
	bad := *m
	bad.Classes = append([]Class(nil), m.Classes...)
	bad.Classes[3].Missing = map[string]float64{SyncWriteShare: 1}
	if err := bad.Validate(); err == nil {
		t.Error("missing on the durable share, which is never undefined: want an error")
	}
}
