package workload

import (
	"math"
	"strings"
	"testing"

	"github.com/fspair/fspair/rules/classifier"
)

func liveModel(t *testing.T) *classifier.Model {
	t.Helper()
	m, err := classifier.Load("../../rules/classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// synthetic returns a settled window of workload w on pair with the given
// reads per write, mean read and write sizes, durable share and flushes
// per write, at 300 requests/s.
func synthetic(w Workload, pair string, end, rw, readKiB, writeKiB, durable, flushes float64) Observation {
	writes := 300 / (1 + rw)
	reads := 300 - writes
	x := classifier.Inputs(classifier.Counts{Reads: reads, Writes: writes, ReadBytes: reads * readKiB * 1024,
		WriteBytes: writes * writeKiB * 1024, SyncWrites: writes * durable, Flushes: writes * flushes})
	return Observation{Truth: w, Run: string(w) + "@" + pair, Pair: pair, GuestFS: GuestFS(pair), End: end,
		Inputs: x, IOPS: 300, Settled: end >= 180, Source: "filebench"}
}

// boxFit is DefaultFit with boxes (5-95% of a class's windows, half a
// unit of margin) instead of centres, and every class charged the far
// ramp's end for a missing mean request size: the form the candidate had
// before centres, which Fit still fits.
var boxFit = func() FitOptions {
	o := DefaultFit
	o.Quantile, o.Margin, o.Missing, o.FioCentres = 0.05, 0.5, false, false
	return o
}()

// mailAndFileserver returns a mail and a fileserver window on each pair at
// each end, a little apart from pair to pair; mail's writes durable at
// durable, on a btrfs guest at 0.1, as its log batches the fsyncs.
func mailAndFileserver(pairs []string, ends []float64, durable float64) []Observation {
	var obs []Observation
	for i, pair := range pairs {
		d := float64(i) * 0.02
		dur := durable - d
		if GuestFS(pair) == "btrfs" {
			dur = 0.1 + d
		}
		for _, end := range ends {
			obs = append(obs,
				synthetic(Mail, pair, end, 1+d, 12, 20, dur, dur/2),
				synthetic(Fileserver, pair, end, 0.5+d, 100, 64, 0.01, 0.001))
		}
	}
	return obs
}

// TestFit checks what Fit promises with boxes: every settled training window lies
// inside its class's box (ranges of its own guest file system where it has
// them), per-guest ranges appear only with enough runs, a class without
// windows keeps the base box, and windows that are idle at the host or not
// settled train nothing.
func TestFit(t *testing.T) {
	base := liveModel(t)
	obs := mailAndFileserver([]string{"ext4/xfs/raw", "xfs/ext4/qcow2", "btrfs/btrfs/raw", "btrfs/xfs/raw"}, []float64{60, 210, 240}, 0.9)
	// A mail window that trains nothing: the host saw almost nothing.
	quiet := synthetic(Mail, "ext4/ext4/raw", 300, 50, 4, 4, 0, 0)
	quiet.IOPS = 0.5
	obs = append(obs, quiet)
	m, err := Fit(base, obs, boxFit)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range obs {
		if !o.Settled || o.Expected(base) == classifier.Idle {
			continue
		}
		c := classOf(t, m, o.Expected(base))
		box := c.BoxFor(o.GuestFS)
		for f, v := range o.Inputs {
			b, ok := box[f]
			if ok && (v < b[0] || v > b[1]) {
				t.Errorf("%s window on %s: %s %.3f outside its box %v", o.Truth, o.Pair, f, v, b)
			}
		}
	}
	mail := classOf(t, m, "mail")
	if _, ok := mail.GuestFS["btrfs"][classifier.SyncWriteShare]; !ok {
		t.Errorf("mail has two btrfs runs: want a btrfs range on the durable share, got %v", mail.GuestFS)
	}
	if _, ok := mail.GuestFS["ext4"]; ok {
		t.Errorf("mail has one ext4 run: want no ext4 ranges, got %v", mail.GuestFS["ext4"])
	}
	if _, ok := mail.GuestFS["btrfs"][classifier.ReadWriteLog2]; ok {
		t.Errorf("the read/write ratio is not a guest feature: %v", mail.GuestFS["btrfs"])
	}
	if b := mail.Box[classifier.ReadWriteLog2]; b[1] > 2 {
		t.Errorf("mail's ratio box %v reaches the quiet window's (log2 50)", b)
	}
	if rfa := classOf(t, m, "rfa"); rfa.Source != classOf(t, base, "rfa").Source || len(rfa.Box) != len(classOf(t, base, "rfa").Box) {
		t.Errorf("rfa has no windows: want base's box, got %+v", rfa)
	}
	if !strings.Contains(mail.Source, "on 8 windows of 4 Filebench runs on 4 guest/host pairs") {
		t.Errorf("mail's source: %s", mail.Source)
	}
	for _, f := range m.Features {
		if !(f.Scale > 0) || f.Source == "" {
			t.Errorf("feature %s: scale %v, source %q", f.Name, f.Scale, f.Source)
		}
	}
	// A training window classed by the model fitted on it is right.
	for _, e := range Evaluate(m, obs) {
		if e.Settled && !e.Right() {
			t.Errorf("fitted window %s on %s at %.0f s: %s (distances %v)", e.Truth, e.Pair, e.End, e.Class, e.Distances)
		}
	}
}

func classOf(t *testing.T, m *classifier.Model, name string) classifier.Class {
	t.Helper()
	for _, c := range m.Classes {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no class %s", name)
	return classifier.Class{}
}

// TestLeaveOnePairOut checks that every Filebench window is classed once,
// by a model fitted without its guest/host pair (another format or cache
// of the same pair is left out too), and that the fio models' windows are
// trained on, never evaluated.
func TestLeaveOnePairOut(t *testing.T) {
	base := liveModel(t)
	var obs []Observation
	pairs := []string{"ext4/xfs/raw", "ext4/xfs/qcow2", "xfs/ext4/qcow2", "btrfs/btrfs/raw"}
	for i, pair := range pairs {
		d := float64(i) * 0.01
		obs = append(obs, synthetic(Mail, pair, 210, 1+d, 12, 20, 0.9, 0.5), synthetic(Fileserver, pair, 210, 0.5, 100+d, 64, 0.01, 0.001))
	}
	// A pair only the first pair's fio run has: held out together.
	fio := synthetic(Mail, "ext4/xfs/raw/writeback", 70, 1, 12, 20, 0.9, 0.5)
	fio.Source = "fio"
	obs = append(obs, fio)
	// A far-off fileserver window on ext4/xfs: if its pair's model had
	// seen it, the other ext4/xfs windows would be inside a wide box.
	odd := synthetic(Fileserver, "ext4/xfs/raw", 240, 0.5, 1000, 64, 0.01, 0.001)
	obs = append(obs, odd)
	ev, err := LeaveOnePairOut(base, obs, DefaultFit)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != len(obs)-1 {
		t.Fatalf("%d windows evaluated, want the %d Filebench windows", len(ev), len(obs)-1)
	}
	for _, e := range ev {
		if e.Source != "filebench" {
			t.Errorf("a fio window was evaluated: %+v", e.Observation)
		}
	}
	// xfs/ext4's fileserver window is classed by a model fitted on the
	// other pairs, whose fileserver windows (the odd one included) are
	// all fileserver: right. The odd window is far beyond the other
	// pairs' read sizes: its model never saw it, so it is not inside.
	for _, e := range ev {
		if e.Truth == Fileserver && e.Pair == "ext4/xfs/raw" && e.Inputs[classifier.ReadSizeLog2] > 19 {
			if d := e.Distances["fileserver"]; !(d > 0) || math.IsNaN(d) {
				t.Errorf("the odd window's distance from fileserver %v: its own pair trained the box", d)
			}
		}
	}
}

func TestPairOf(t *testing.T) {
	for in, want := range map[string]string{"ext4/xfs/raw": "ext4/xfs", "btrfs/ext4/raw/none/native": "btrfs/ext4", "odd": "odd"} {
		if got := PairOf(in); got != want {
			t.Errorf("PairOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFitLeavesOutContradictingFio: a class's fio windows train its box
// only where that classes more inner held-out Filebench windows right. fio
// "mail" windows that sit on the real fileserver's stream (large reads, no
// durable writes) would stretch mail's box over fileserver's and class the
// real fileserver windows of a left-out pair mail or mixed: they are left
// out. fio fileserver windows that agree with the real program are kept.
func TestFitLeavesOutContradictingFio(t *testing.T) {
	base := liveModel(t)
	var obs []Observation
	fio := func(o Observation) Observation {
		o.Source, o.Run = "fio", "fio-"+o.Run
		return o
	}
	for i, pair := range []string{"ext4/xfs/raw", "xfs/ext4/qcow2", "btrfs/btrfs/raw", "xfs/xfs/raw", "ext4/ext4/raw"} {
		d := float64(i) * 0.02
		for _, end := range []float64{210, 240, 270} {
			obs = append(obs,
				synthetic(Mail, pair, end, 1+d, 12, 20, 0.5+d, 0.3),
				synthetic(Fileserver, pair, end, 0.5+d, 100, 64, 0.01+d/10, 0.001),
				fio(synthetic(Mail, pair, end, 0.5+d, 100, 64, 0.01, 0.001)),
				fio(synthetic(Fileserver, pair, end, 0.5+d, 96, 64, 0.01, 0.001)))
		}
	}
	m, err := Fit(base, obs, boxFit)
	if err != nil {
		t.Fatal(err)
	}
	mail, fs := classOf(t, m, "mail"), classOf(t, m, "fileserver")
	if !strings.Contains(mail.Source, "fio model's windows left out") {
		t.Errorf("mail's contradicting fio windows: want them left out, mail's source: %s", mail.Source)
	}
	if strings.Contains(fs.Source, "fio model's windows left out") {
		t.Errorf("fileserver's agreeing fio windows: want them kept, its source: %s", fs.Source)
	}
	if b := mail.Box[classifier.ReadSizeLog2]; b[1] > 15 {
		t.Errorf("mail's read-size box %v reaches the fio windows' 100 KiB (log2 16.6)", b)
	}
}

// TestFitCentres checks what Fit promises with DefaultFit's centres: each
// class is the median of its settled windows (one value per feature), a
// guest file system gets a centre of its own only where it lies
// GuestShift units or more from the centre over every guest, a class some
// of whose windows lack reads counts -2 ln of their share for lacking
// them (a class with reads on every window: the far ramp's end), and the
// training windows are classed right by the model fitted on them.
func TestFitCentres(t *testing.T) {
	base := liveModel(t)
	pairs := []string{"ext4/xfs/raw", "ext4/btrfs/qcow2", "btrfs/btrfs/raw", "btrfs/xfs/raw"}
	obs := mailAndFileserver(pairs, []float64{210, 240, 270}, 0.5)
	for i, pair := range pairs {
		d := float64(i) * 0.02
		for _, end := range []float64{210, 240, 270} {
			// rfa whose reads stay in the guest's cache on 2 of its 12
			// windows: write-only at the host.
			rw, kib := 4+d, 8.0
			if end == 270 && i%2 == 0 {
				rw, kib = 0, 0
			}
			obs = append(obs, synthetic(RFA, pair, end, rw, kib, 32, 0.02, 0.01))
		}
	}
	m, err := Fit(base, obs, DefaultFit)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Classes[1:] { // web has no windows: base's box
		for f, b := range c.Box {
			if b[0] != b[1] {
				t.Errorf("%s: %s range %v, want a centre", c.Name, f, b)
			}
		}
	}
	mail := classOf(t, m, "mail")
	if b := mail.Box[classifier.ReadWriteLog2]; math.Abs(b[0]-math.Log2(1.03)) > 0.02 {
		t.Errorf("mail's read/write centre %v, want the median window's log2(1.03)", b)
	}
	if _, ok := mail.GuestFS["btrfs"][classifier.SyncWriteShare]; !ok {
		t.Errorf("mail's durable share on btrfs lies far from every guest's: want a btrfs centre, got %v", mail.GuestFS)
	}
	if _, ok := mail.GuestFS["ext4"][classifier.SyncWriteShare]; !ok {
		t.Errorf("mail's durable share on ext4 lies far from every guest's: want an ext4 centre, got %v", mail.GuestFS)
	}
	if fs := classOf(t, m, "fileserver"); len(fs.GuestFS) != 0 {
		t.Errorf("fileserver is the same on every guest: want no guest centres, got %v", fs.GuestFS)
	}
	// rfa: 2 of its 12 windows lack reads.
	rfa := classOf(t, m, "rfa")
	if v, ok := rfa.Missing[classifier.ReadSizeLog2]; !ok || math.Abs(v-round2(-2*math.Log(2.0/12))) > 1e-9 {
		t.Errorf("rfa's missing read size: %v (set %v), want -2 ln(2/12)", v, ok)
	}
	if _, ok := mail.Missing[classifier.ReadSizeLog2]; ok {
		t.Errorf("mail reads on every window: want no missing read size of its own, got %v", mail.Missing)
	}
	writeOnly := classifier.Inputs(classifier.Counts{Writes: 300, WriteBytes: 300 * 32 << 10, SyncWrites: 6, Flushes: 3})
	if r := m.Classify(writeOnly, 300, "xfs"); r.Distances["rfa"] >= r.Distances["mail"] || r.Distances["rfa"] >= r.Distances["fileserver"] {
		t.Errorf("a write-only rfa window: distances %v, want rfa nearest", r.Distances)
	}
	for _, e := range Evaluate(m, obs) {
		if e.Settled && !e.Right() {
			t.Errorf("fitted window %s on %s at %.0f s: %s (distances %v)", e.Truth, e.Pair, e.End, e.Class, e.Distances)
		}
	}
}

// TestFitEarlyCentres checks EarlyCentres and FarPastNear: a class whose
// early windows (past the layout, before the settle) lie apart from its
// settled ones gets a centre of its own for them, named early, which
// classes such a window as its own; a class whose early windows look like
// its settled ones gets none; a layout window trains nothing; without the
// option no early centre is fitted; and far starts no nearer than where the
// confidence's near ramp ends.
func TestFitEarlyCentres(t *testing.T) {
	base := liveModel(t)
	pairs := []string{"ext4/xfs/raw", "xfs/ext4/qcow2", "btrfs/btrfs/raw", "btrfs/xfs/raw", "ext4/ext4/raw"}
	obs := mailAndFileserver(pairs, []float64{120, 150, 210, 240, 270}, 0.5)
	for i, pair := range pairs {
		d := float64(i) * 0.02
		for _, end := range []float64{210, 240, 270} {
			obs = append(obs, synthetic(Web, pair, end, 700+10*d, 18, 512, 0.06+d, 0.1))
		}
		// Web's first reads: small writes of access times behind them.
		for _, end := range []float64{90, 120, 150} {
			obs = append(obs, synthetic(Web, pair, end, 40+d, 18, 40, 0.02, 0.02))
		}
		// Its layout: write-only, trains nothing.
		layout := synthetic(Web, pair, 60, 0, 0, 128, 0, 0)
		layout.Layout = true
		obs = append(obs, layout)
	}
	early := func(c classifier.Class) (classifier.Class, bool) {
		for _, o := range c.Others {
			if o.Name == "early" {
				return o, true
			}
		}
		return classifier.Class{}, false
	}
	m, err := Fit(base, obs, DefaultFit)
	if err != nil {
		t.Fatal(err)
	}
	web, mail := classOf(t, m, "web"), classOf(t, m, "mail")
	e, ok := early(web)
	if !ok {
		t.Fatalf("web's early windows lie apart from its settled ones: want an early centre, got others %v", web.Others)
	}
	if b := e.Box[classifier.ReadWriteLog2]; math.Abs(b[0]-math.Log2(40.04)) > 0.05 {
		t.Errorf("web's early read/write centre %v, want the early windows' median log2(40.04) (no layout window in it)", b)
	}
	if _, ok := early(mail); ok {
		t.Errorf("mail's early windows are its settled ones' shape: want no early centre, got others %v", mail.Others)
	}
	first := synthetic(Web, "xfs/xfs/raw", 120, 41, 18, 40, 0.02, 0.02)
	if r := m.Classify(first.Inputs, first.IOPS, first.GuestFS); r.Class != "web" {
		t.Errorf("a web window of first reads: classed %s (distances %v), want web", r.Class, r.Distances)
	}
	if far, near := m.Far.Bounds()[0], m.Confidence.Near.Bounds()[1]; far < near {
		t.Errorf("far starts at %.2f, nearer than the near ramp's end %.2f", far, near)
	}
	opt := DefaultFit
	opt.EarlyCentres = false
	m, err = Fit(base, obs, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := early(classOf(t, m, "web")); ok {
		t.Error("EarlyCentres off: want no early centre")
	}
}
