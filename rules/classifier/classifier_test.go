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

// centre returns the middle of every range of c's box.
func centre(c Class) map[string]float64 {
	x := map[string]float64{SyncWriteShare: 0}
	for f, b := range c.Box {
		x[f] = (b[0] + b[1]) / 2
	}
	return x
}

// TestBoxesSeparate checks what classes.yaml's sources claim: a disk in the
// middle of a class's box scores at least 0.98 for it, and every class is
// at least 2 units from every other's box centre.
func TestBoxesSeparate(t *testing.T) {
	m := model(t)
	for _, c := range m.Classes {
		r := m.Classify(centre(c), 100)
		if r.Class != c.Name || r.Scores[c.Name] < 0.98 {
			t.Errorf("centre of %s: class %s, scores %v", c.Name, r.Class, r.Scores)
		}
		for _, o := range m.Classes {
			if o.Name != c.Name && r.Distances[o.Name] < 2 {
				t.Errorf("centre of %s is %.2f units from %s, want >= 2", c.Name, r.Distances[o.Name], o.Name)
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
		x := centre(mail)
		x[SyncWriteShare] = sync
		r := m.Classify(x, 100)
		s := r.Scores["mail"]
		if s <= 0 || s > prev+1e-12 {
			t.Errorf("sync share %.1f: mail score %.3f (previous %.3f): want positive and not rising", sync, s, prev)
		}
		prev = s
	}
	// The mail application of issue 22: 42% reads of 13.5 KiB, 32% of writes durable.
	r := m.Classify(Inputs(0.42, 0.58, 0.42*13824, 0.58*0.32), 1400)
	if r.Class != "mail" {
		t.Errorf("mail application: class %s, scores %v, distances %v", r.Class, r.Scores, r.Distances)
	}
	// A write-only disk of large writes is far from every class.
	r = m.Classify(Inputs(0, 1000, 0, 0), 1000)
	if r.Class != Mixed || r.Scores[Mixed] != 1 {
		t.Errorf("write-only disk: class %s, scores %v", r.Class, r.Scores)
	}
}

func TestInputs(t *testing.T) {
	x := Inputs(300, 0, 300*4096, 0)
	if x[ReadWriteLog2] != RatioClamp || x[ReadSizeLog2] != 12 || x[SyncWriteShare] != 0 {
		t.Errorf("read-only disk: %v", x)
	}
	x = Inputs(0, 10, 0, 5)
	if _, ok := x[ReadSizeLog2]; ok || x[ReadWriteLog2] != -RatioClamp || x[SyncWriteShare] != 0.5 {
		t.Errorf("write-only disk: %v", x)
	}
	if x := Inputs(0, 0, 0, 0); len(x) != 1 {
		t.Errorf("idle disk: %v, want only the durable share", x)
	}
	m := model(t)
	r := m.Classify(Inputs(0, 0, 0, 0), 0)
	if r.Class != Idle || r.Scores[Idle] != 1 || r.Scores["web"] != 0 || !math.IsNaN(r.Distances["web"]) {
		t.Errorf("idle disk: %+v", r)
	}
}

func TestValidate(t *testing.T) {
	for name, mod := range map[string]func(*Model){
		"unknown feature":  func(m *Model) { m.Features[0].Name = "iops" },
		"zero scale":       func(m *Model) { m.Features[1].Scale = 0 },
		"no source":        func(m *Model) { m.Features[2].Source = " " },
		"inverted box":     func(m *Model) { m.Classes[0].Box[ReadWriteLog2] = [2]float64{2, 1} },
		"class order":      func(m *Model) { m.Classes[0].Name, m.Classes[1].Name = "mail", "web" },
		"far must rise":    func(m *Model) { m.Far.Above, m.Far.Below = nil, []float64{2.5, 3.5} },
		"box on unlisted":  func(m *Model) { m.Features = m.Features[:2] },
		"class no source":  func(m *Model) { m.Classes[3].Source = "" },
		"idle bounds flat": func(m *Model) { m.Idle.Below = []float64{1, 1} },
		"bonus of 1":       func(m *Model) { one := 1.0; m.Hysteresis.Value = &one },
		"negative bonus":   func(m *Model) { neg := -0.1; m.Hysteresis.Value = &neg },
		"bonus no value":   func(m *Model) { m.Hysteresis.Value = nil },
		"bonus no source":  func(m *Model) { m.Hysteresis.Source = "" },
		"settle no source": func(m *Model) { m.Settle.Source = " " },
		"settle no window": func(m *Model) { m.Settle.Windows = nil },
		"settle negative":  func(m *Model) { neg := -1.0; m.Settle.Seconds = &neg },
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
