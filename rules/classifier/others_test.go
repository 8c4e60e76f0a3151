package classifier

import (
	"math"
	"sort"
	"strings"
	"testing"
)

// at is a class centred at rw reads per write (log2), a mean read of 2^rs
// bytes and a durable share of sync.
func at(name string, rw, rs, sync float64) Class {
	return Class{Name: name, Source: "test", Box: map[string][2]float64{
		ReadWriteLog2: {rw, rw}, ReadSizeLog2: {rs, rs}, SyncWriteShare: {sync, sync}}}
}

// unitModel is classes.yaml with every feature's scale 1 and the four
// classes centres, so that distances can be worked out by hand; nothing is
// far (a missing mean request size still costs the far ramp's end, 5
// units), and mail has a second centre, "fio", whose writes are all
// durable.
func unitModel(t *testing.T) *Model {
	t.Helper()
	m := model(t)
	m.Features = nil
	for _, f := range FeatureNames {
		m.Features = append(m.Features, Feature{Name: f, Scale: 1, Source: "test"})
	}
	m.Far = Ramp{Above: []float64{4, 5}, Source: "test"}
	mail := at("mail", 0, 13, 0.2)
	mail.Others = []Class{at("fio", 0, 13, 1)}
	m.Classes = []Class{at("web", 8, 14, 0), mail, at("fileserver", -1, 17, 0), at("rfa", 2, 12, 0)}
	one := 1.0
	m.Softmax = &Softmax{Over: OverDistance, Source: "test"}
	m.Temperature = &Bonus{Value: &one, Source: "test"}
	m.Confidence = nil // the tests set one where they need it
	if err := m.Validate(); err != nil {
		t.Fatalf("the test model: %v", err)
	}
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestDistanceNearestCentre: a class's distance is the distance from the
// nearest of its centres, each judged with its own guest file system
// ranges and its own charge for a missing mean request size.
func TestDistanceNearestCentre(t *testing.T) {
	m := unitModel(t)
	mail := m.Classes[1]
	point := func(sync float64) map[string]float64 {
		return map[string]float64{ReadWriteLog2: 0, ReadSizeLog2: 13, SyncWriteShare: sync, FlushesPerWriteLog2: 0}
	}
	for _, c := range []struct {
		name string
		x    map[string]float64
		want float64
	}{
		{"at the fio centre", point(1), 0},
		{"at the main centre", point(0.2), 0},
		{"nearer the main centre", point(0.5), 0.3},
		{"nearer the fio centre", point(0.7), 0.3},
		{"between them", point(0.6), 0.4},
		{"off both, nearer the main one", map[string]float64{ReadWriteLog2: 3, ReadSizeLog2: 13, SyncWriteShare: 0.2}, 3},
	} {
		if got := m.Distance(mail, c.x, ""); !near(got, c.want) {
			t.Errorf("%s: distance from mail %v, want %v", c.name, got, c.want)
		}
	}
	// Without its other centre the same disk is as far as the main one.
	alone := mail
	alone.Others = nil
	if got := m.Distance(alone, point(1), ""); !near(got, 0.8) {
		t.Errorf("mail without others, at the fio centre: distance %v, want 0.8", got)
	}

	// An other centre's guest file system ranges apply on that guest only.
	mail.Others[0].GuestFS = map[string]map[string][2]float64{"xfs": {SyncWriteShare: {0.5, 0.5}}}
	if got := m.Distance(mail, point(0.5), "xfs"); !near(got, 0) {
		t.Errorf("at fio's xfs centre on xfs: distance %v, want 0", got)
	}
	if got := m.Distance(mail, point(0.5), "ext4"); !near(got, 0.3) {
		t.Errorf("at fio's xfs centre on ext4: distance %v, want 0.3 (the main centre's)", got)
	}

	// Each centre charges its own missing: for a disk without reads.
	noReads := map[string]float64{ReadWriteLog2: 0, SyncWriteShare: 1, FlushesPerWriteLog2: 0}
	mail.Others[0].Missing = map[string]float64{ReadSizeLog2: 1}
	if got := m.Distance(mail, noReads, ""); !near(got, 1) {
		t.Errorf("no reads, fio charging 1 for it: distance %v, want 1 (fio's)", got)
	}
	mail.Others[0].Missing = nil
	mail.Missing = map[string]float64{ReadSizeLog2: 0}
	if got := m.Distance(mail, noReads, ""); !near(got, 0.8) {
		t.Errorf("no reads, only the main centre charging nothing for it: distance %v, want 0.8 (the main centre's)", got)
	}

	// Classify goes through the same distance: a disk at the fio centre is
	// mail, not the runner-up.
	m.Classes[1].Others[0].GuestFS, m.Classes[1].Others[0].Missing = nil, nil
	r := m.Classify(point(1), 100, "")
	if r.Class != "mail" || !near(r.Distances["mail"], 0) {
		t.Errorf("a disk at mail's fio centre: class %s, distances %v", r.Class, r.Distances)
	}
}

// TestCentres: a class's centres are itself, then its others in order.
func TestCentres(t *testing.T) {
	m := unitModel(t)
	mail := m.Classes[1]
	mail.Others = append(mail.Others, at("batched", 0, 13, 0.05))
	var names []string
	for _, c := range mail.Centres() {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "mail,fio,batched" {
		t.Errorf("mail's centres %s, want mail,fio,batched", got)
	}
	if got := len(m.Classes[0].Centres()); got != 1 {
		t.Errorf("web, without others: %d centres, want 1", got)
	}
}

// TestOthersValidate: every other centre is checked as a class's own box
// is, against its own box, and names itself in the error; the names of a
// class's centres are their own.
func TestOthersValidate(t *testing.T) {
	for name, mod := range map[string]func(fio *Class, mail *Class){
		"no name":                   func(fio, _ *Class) { fio.Name = "" },
		"the class's name":          func(fio, _ *Class) { fio.Name = "mail" },
		"two of one name":           func(_, mail *Class) { mail.Others = append(mail.Others, at("fio", 1, 13, 1)) },
		"others of its own":         func(fio, _ *Class) { fio.Others = []Class{at("deeper", 0, 13, 1)} },
		"empty box":                 func(fio, _ *Class) { fio.Box = map[string][2]float64{} },
		"no source":                 func(fio, _ *Class) { fio.Source = " " },
		"box on an unknown feature": func(fio, _ *Class) { fio.Box["iops"] = [2]float64{1, 1} },
		"inverted box":              func(fio, _ *Class) { fio.Box[SyncWriteShare] = [2]float64{1, 0.9} },
		"unknown guest":             func(fio, _ *Class) { fio.GuestFS = map[string]map[string][2]float64{"zfs": {SyncWriteShare: {1, 1}}} },
		"guest range off its own box": func(fio, mail *Class) {
			// mail's own box has the feature: fio's must.
			mail.Box[FlushesPerWriteLog2] = [2]float64{-1, -1}
			fio.GuestFS = map[string]map[string][2]float64{"xfs": {FlushesPerWriteLog2: {0, 0}}}
		},
		"inverted guest range":         func(fio, _ *Class) { fio.GuestFS = map[string]map[string][2]float64{"xfs": {SyncWriteShare: {1, 0}}} },
		"missing on the durable share": func(fio, _ *Class) { fio.Missing = map[string]float64{SyncWriteShare: 1} },
		"missing off its box":          func(fio, _ *Class) { fio.Missing = map[string]float64{WriteSizeLog2: 1} },
		"negative missing":             func(fio, _ *Class) { fio.Missing = map[string]float64{ReadSizeLog2: -1} },
	} {
		m := unitModel(t)
		mod(&m.Classes[1].Others[0], &m.Classes[1])
		err := m.Validate()
		if err == nil {
			t.Errorf("%s: want an error", name)
			continue
		}
		if !strings.Contains(err.Error(), "workload mail") {
			t.Errorf("%s: error %q does not name the class", name, err)
		}
		centred := !strings.Contains(name, "name") && name != "others of its own"
		if centred && !strings.Contains(err.Error(), "mail (fio)") {
			t.Errorf("%s: error %q does not name the centre, mail (fio)", name, err)
		}
	}
}

// TestConfidenceOf: the confidence is the margin ramp on how much nearer
// the nearest class is than the runner-up times the near ramp on the
// nearest's distance.
func TestConfidenceOf(t *testing.T) {
	c := Confidence{Margin: Ramp{Above: []float64{0.5, 1.5}}, Near: Ramp{Below: []float64{2, 4}}}
	for _, v := range []struct{ d1, d2, want float64 }{
		{1, 3, 1},         // clear margin, near: sure
		{1, 2, 0.5},       // half the margin ramp
		{1, 1.2, 0},       // between two classes
		{3, 5, 0.5},       // half way down the near ramp
		{3, 4, 0.25},      // both halves
		{5, 10, 0},        // far from every class
		{0, 0.5, 0},       // at a centre, but another as near as the ramp's start
		{2, 100, 1},       // the near ramp's start is still near
		{4, 100, 0},       // its end is not
		{3.5, 4.5, 0.125}, // half the margin ramp, a quarter of the near one
	} {
		if got := c.Of(v.d1, v.d2); !near(got, v.want) {
			t.Errorf("Of(%v, %v) = %v, want %v", v.d1, v.d2, got, v.want)
		}
	}
}

// TestConfidenceValidate: a model's confidence needs a source, two valid
// ramps, the margin rising and the near falling.
func TestConfidenceValidate(t *testing.T) {
	valid := func() *Confidence {
		return &Confidence{Margin: Ramp{Above: []float64{0, 0.5}, Source: "test"}, Near: Ramp{Below: []float64{2, 3}, Source: "test"}, Source: "test"}
	}
	m := unitModel(t)
	m.Confidence = valid()
	if err := m.Validate(); err != nil {
		t.Fatalf("a valid confidence: %v", err)
	}
	for name, mod := range map[string]func(c *Confidence){
		"no source":          func(c *Confidence) { c.Source = "" },
		"margin no source":   func(c *Confidence) { c.Margin.Source = " " },
		"near no source":     func(c *Confidence) { c.Near.Source = "" },
		"margin falling":     func(c *Confidence) { c.Margin.Above, c.Margin.Below = nil, []float64{0, 0.5} },
		"near rising":        func(c *Confidence) { c.Near.Above, c.Near.Below = []float64{2, 3}, nil },
		"margin both ways":   func(c *Confidence) { c.Margin.Below = []float64{0, 0.5} },
		"margin flat":        func(c *Confidence) { c.Margin.Above = []float64{1, 1} },
		"near inverted":      func(c *Confidence) { c.Near.Below = []float64{3, 2} },
		"near one bound":     func(c *Confidence) { c.Near.Below = []float64{3} },
		"margin no bounds":   func(c *Confidence) { c.Margin.Above = nil },
		"near three bounds":  func(c *Confidence) { c.Near.Below = []float64{1, 2, 3} },
		"margin NaN at high": func(c *Confidence) { c.Margin.Above = []float64{0, math.NaN()} },
	} {
		m := unitModel(t)
		m.Confidence = valid()
		mod(m.Confidence)
		if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "confidence") {
			t.Errorf("%s: error %v, want one about the confidence", name, err)
		}
	}
}

// TestScoreConfidence: with a confidence of its own, a workload class's
// confidence is the ramps on its two nearest distances times (1 - idle),
// whichever class is nearest and whatever the softmax's temperature; idle
// keeps the spread of the scores; mixed gets 0.
func TestScoreConfidence(t *testing.T) {
	m := unitModel(t)
	plain := *m // the same model without a confidence of its own
	c := Confidence{Margin: Ramp{Above: []float64{0.5, 1.5}, Source: "test"}, Near: Ramp{Below: []float64{2, 4}, Source: "test"}, Source: "test"}
	m.Confidence = &c
	dist := func(web, mail, fs, rfa float64) map[string]float64 {
		return map[string]float64{"web": web, "mail": mail, "fileserver": fs, "rfa": rfa}
	}
	for _, v := range []struct {
		name  string
		dist  map[string]float64
		iops  float64
		class string
		want  float64
	}{
		{"web, clear", dist(1, 3, 6, 7), 100, "web", 1},
		{"web, half the margin", dist(1, 2, 6, 7), 100, "web", 0.5},
		{"web, half way out", dist(3, 5, 6, 7), 100, "web", 0.5},
		{"rfa nearest, listed last", dist(6, 7, 4.5, 1), 100, "rfa", c.Of(1, 4.5)},
		{"web, a fifth idle", dist(1, 3, 6, 7), 1.7, "web", 0.8},
	} {
		r := m.Score(v.dist, v.iops)
		if r.Class != v.class || !near(r.Confidence, v.want) {
			t.Errorf("%s: class %s at confidence %v, want %s at %v (scores %v)", v.name, r.Class, r.Confidence, v.class, v.want, r.Scores)
		}
	}

	// The temperature moves the scores, not the confidence.
	cold, hot := *m, *m
	t1, t2 := 0.25, 1.0
	cold.Temperature, hot.Temperature = &Bonus{Value: &t1, Source: "test"}, &Bonus{Value: &t2, Source: "test"}
	a, b := cold.Score(dist(1, 2, 6, 7), 100), hot.Score(dist(1, 2, 6, 7), 100)
	if a.Class != "web" || b.Class != "web" || near(a.Scores["web"], b.Scores["web"]) || !near(a.Confidence, b.Confidence) {
		t.Errorf("temperature 0.25 against 1: web scores %v and %v at confidence %v and %v, want other scores, one confidence",
			a.Scores["web"], b.Scores["web"], a.Confidence, b.Confidence)
	}

	// Idle keeps the spread of the scores, as without a confidence.
	r, p := m.Score(dist(1, 3, 6, 7), 0.8), plain.Score(dist(1, 3, 6, 7), 0.8)
	if r.Class != Idle || !near(r.Confidence, p.Confidence) || near(r.Confidence, c.Of(1, 3)*(1-m.Idle.Of(0.8))) {
		t.Errorf("idle disk: class %s at confidence %v, want idle at the scores' spread %v", r.Class, r.Confidence, p.Confidence)
	}

	// Mixed names no class: 0, though the ramps alone would be sure.
	sure := *m
	sure.Confidence = &Confidence{Margin: Ramp{Above: []float64{0, 0.01}, Source: "test"}, Near: Ramp{Below: []float64{2, 4}, Source: "test"}, Source: "test"}
	hotter := 16.0
	sure.Temperature = &Bonus{Value: &hotter, Source: "test"}
	if r := sure.Score(dist(1, 1.1, 1.2, 1.3), 100); r.Class != Mixed || r.Confidence != 0 {
		t.Errorf("a disk between four classes: class %s at confidence %v, want mixed at 0 (ramps alone: %v)", r.Class, r.Confidence, sure.Confidence.Of(1, 1.1))
	}

	// Without a confidence of its own: the spread of the scores.
	q := plain.Score(dist(1, 2, 6, 7), 100)
	var vals []float64
	for _, v := range q.Scores {
		vals = append(vals, v)
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(vals)))
	if q.Class != "web" || !near(q.Confidence, vals[0]-vals[1]) || near(q.Confidence, c.Of(1, 2)) {
		t.Errorf("no confidence of its own: class %s at %v, want web at the spread %v", q.Class, q.Confidence, vals[0]-vals[1])
	}
}
