package workload

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fspair/fspair/rules/classifier"
)

// fioRun files o as a fio model's window of a run of its own.
func fioRun(o Observation) Observation {
	o.Source, o.Run = "fio", "fio-"+o.Run
	return o
}

// mustFit is Fit with DefaultFit, failing the test on an error.
func mustFit(t *testing.T, base *classifier.Model, obs []Observation) *classifier.Model {
	t.Helper()
	m, err := Fit(base, obs, DefaultFit)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// calibPairs are the guest/host pairs of the synthetic training sets here:
// five, so that each pair left out leaves four to fit on.
var calibPairs = []string{"ext4/xfs/raw", "xfs/ext4/qcow2", "btrfs/btrfs/raw", "xfs/xfs/raw", "ext4/ext4/raw"}

// TestFitLayoutWindows: windows holding Filebench's layout train no
// centre and set no far distance, but the confidence is calibrated on
// them too. Here the layout of every mail run looks to the host exactly
// like the fileserver windows of its pair: had it trained mail's centre,
// mail would move towards fileserver's; had it set far, the far ramp
// would start beyond the 43 units the layout lies from mail. Held out for
// the confidence, it is a mail window classed fileserver wherever a
// fileserver window is, so no fileserver window may be at 0.5 or more (at
// least 90% of the wrong ones must be below it); without the layout
// windows they are.
func TestFitLayoutWindows(t *testing.T) {
	base := liveModel(t)
	obs := mailAndFileserver(calibPairs, []float64{210, 240, 270}, 0.5)
	with := append([]Observation(nil), obs...)
	for _, o := range obs {
		if o.Truth == Fileserver {
			l := o
			l.Truth, l.Run, l.Layout = Mail, string(Mail)+"@"+o.Pair, true
			with = append(with, l)
		}
	}
	m0 := mustFit(t, base, obs)
	m1 := mustFit(t, base, with)
	if !reflect.DeepEqual(m1.Classes, m0.Classes) {
		t.Errorf("the layout windows changed the centres:\nwith    %+v\nwithout %+v", m1.Classes, m0.Classes)
	}
	if !reflect.DeepEqual(m1.Features, m0.Features) {
		t.Errorf("the layout windows changed the scales: %+v, without them %+v", m1.Features, m0.Features)
	}
	if !reflect.DeepEqual(m1.Far, m0.Far) {
		t.Errorf("the layout windows moved the far ramp: %v, without them %v", m1.Far.Bounds(), m0.Far.Bounds())
	}
	// They are never judged, so they choose no softmax either.
	if m1.SoftmaxOver() != m0.SoftmaxOver() || m1.T() != m0.T() || !slices.Equal(m1.Mixed.Bounds(), m0.Mixed.Bounds()) {
		t.Errorf("the layout windows changed the softmax: %s at %v, mixed %v; without them %s at %v, mixed %v",
			m1.SoftmaxOver(), m1.T(), m1.Mixed.Bounds(), m0.SoftmaxOver(), m0.T(), m0.Mixed.Bounds())
	}
	for _, o := range obs {
		if o.Truth != Fileserver {
			continue
		}
		r0, r1 := m0.Classify(o.Inputs, o.IOPS, o.GuestFS), m1.Classify(o.Inputs, o.IOPS, o.GuestFS)
		if r0.Class != "fileserver" || r0.Confidence < 0.5 {
			t.Errorf("fileserver window on %s without the layout windows: %s at %.2f, want fileserver at 0.5 or more", o.Pair, r0.Class, r0.Confidence)
		}
		if r1.Class != "fileserver" || r1.Confidence >= 0.5 {
			t.Errorf("fileserver window on %s with mail's layout looking the same: %s at %.2f, want fileserver below 0.5", o.Pair, r1.Class, r1.Confidence)
		}
	}
}

// fioCentreSet is a mail and a fileserver program on each of calibPairs,
// three windows each, with fio model windows of each: mail.fio's every
// write durable with a flush each, 8 KiB writes (far from varmail's 0.5
// durable and 20 KiB writes), one a pair; fileserver.fio's 96 KiB reads
// (near the program's 100 KiB), three a pair.
func fioCentreSet() (programs, mailFio, fsFio []Observation) {
	ends := []float64{210, 240, 270}
	programs = mailAndFileserver(calibPairs, ends, 0.5)
	for i, pair := range calibPairs {
		d := float64(i) * 0.02
		mailFio = append(mailFio, fioRun(synthetic(Mail, pair, 300, 1+d, 12, 8, 1, 1)))
		for _, end := range ends {
			fsFio = append(fsFio, fioRun(synthetic(Fileserver, pair, end, 0.5+d, 96, 64, 0.01, 0.001)))
		}
	}
	return programs, mailFio, fsFio
}

// TestFitFioCentres: a class whose fio windows lie FioApart units or more
// (median) from its programs' centre gets them as a centre of its own,
// named fio, at their median, and its main centre is its programs' alone;
// a class whose fio windows lie nearer trains its one centre with them.
// The scales are the programs' windows' alone: the same as when mail's
// fio windows are left out altogether.
func TestFitFioCentres(t *testing.T) {
	base := liveModel(t)
	programs, mailFio, fsFio := fioCentreSet()
	all := slices.Concat(programs, mailFio, fsFio)
	m := mustFit(t, base, all)
	noMailFio := mustFit(t, base, slices.Concat(programs, fsFio))
	progsOnly := mustFit(t, base, programs)
	mail, fs := classOf(t, m, "mail"), classOf(t, m, "fileserver")
	if len(mail.Others) != 1 || mail.Others[0].Name != "fio" {
		t.Fatalf("mail's fio windows lie far from varmail's: want one other centre named fio, got %+v", mail.Others)
	}
	fio := mail.Others[0]
	if b := fio.Box[classifier.SyncWriteShare]; b != [2]float64{1, 1} {
		t.Errorf("mail's fio centre: durable share %v, want its windows' 1", b)
	}
	if b := fio.Box[classifier.WriteSizeLog2]; b != [2]float64{13, 13} {
		t.Errorf("mail's fio centre: write size %v, want its windows' log2(8 KiB) = 13", b)
	}
	if b := fio.Box[classifier.ReadWriteLog2]; math.Abs(b[0]-math.Log2(1.04)) > 0.01 || b[0] != b[1] {
		t.Errorf("mail's fio centre: read/write %v, want the median window's log2(1.04)", b)
	}
	if !strings.Contains(fio.Source, "fio model runs") || strings.Contains(fio.Source, "Filebench") {
		t.Errorf("mail's fio centre's source: %s, want it fitted on the fio runs alone", fio.Source)
	}
	// mail's own centre: its programs' alone, as without its fio windows.
	own := mail
	own.Others, own.Source = nil, ""
	want := classOf(t, noMailFio, "mail")
	want.Source = ""
	if !reflect.DeepEqual(own, want) {
		t.Errorf("mail's main centre %+v, want its programs' %+v", own, want)
	}
	if !strings.Contains(mail.Source, "a centre of their own") || strings.Contains(mail.Source, "fio model runs") {
		t.Errorf("mail's source: %s", mail.Source)
	}
	if !reflect.DeepEqual(m.Features, noMailFio.Features) {
		t.Errorf("scales with mail's fio centre %+v, want the programs' windows' alone %+v", m.Features, noMailFio.Features)
	}
	// fileserver: its fio windows lie near its programs' and train its centre.
	if len(fs.Others) != 0 {
		t.Errorf("fileserver's fio windows lie near the program's: want no other centre, got %+v", fs.Others)
	}
	got, progs := fs.Box[classifier.ReadSizeLog2][0], classOf(t, progsOnly, "fileserver").Box[classifier.ReadSizeLog2][0]
	if !(got < progs && got > math.Log2(96*1024)) {
		t.Errorf("fileserver's read size centre %v: want it between the programs' %v and fio's %v", got, progs, math.Log2(96*1024))
	}
	if !strings.Contains(fs.Source, "train this centre") {
		t.Errorf("fileserver's source: %s", fs.Source)
	}
	// A window of mail.fio is classed mail, and confidently so.
	for _, o := range mailFio {
		if r := m.Classify(o.Inputs, o.IOPS, o.GuestFS); r.Class != "mail" || r.Distances["mail"] > 1 {
			t.Errorf("mail.fio window on %s: %s, distances %v", o.Pair, r.Class, r.Distances)
		}
	}
}

// TestFitFioCentresMedian: it is the median distance of a class's fio
// windows that gives them a centre of their own, not their mean: nine of
// fileserver.fio's fifteen windows near the program's and six far off
// (4 MiB reads) train fileserver's one centre.
func TestFitFioCentresMedian(t *testing.T) {
	base := liveModel(t)
	programs, _, fsFio := fioCentreSet()
	for i := range fsFio[:6] {
		fsFio[i] = fioRun(synthetic(Fileserver, fsFio[i].Pair, fsFio[i].End, 0.5, 4096, 64, 0.01, 0.001))
	}
	m := mustFit(t, base, slices.Concat(programs, fsFio))
	progs := mustFit(t, base, programs)
	fs := classOf(t, progs, "fileserver")
	var mean float64
	for _, o := range fsFio {
		mean += progs.Distance(fs, o.Inputs, o.GuestFS) / float64(len(fsFio))
	}
	if mean < FioApart {
		t.Fatalf("the fio windows' mean distance %.1f: the test wants it FioApart or more", mean)
	}
	if got := classOf(t, m, "fileserver"); len(got.Others) != 0 {
		t.Errorf("fileserver.fio, three of five windows near: want no centre of their own, got %+v", got.Others)
	}
}

// TestFitFioOnlyClass: a class whose only training windows are a fio
// model's, far from base's box, is trained on them (there are no programs'
// windows to keep apart from) and says what it was fitted on. Fit keeps a
// class's base box only when it has no training windows. The stored runs
// come to this inside the fit: rfa has training windows (settled, past the
// layout, not idle at the host) of Filebench on two pairs only (xfs/xfs,
// xfs/ext4), so the inner fit that leaves one out while the other is held
// out has rfa's fio windows alone.
func TestFitFioOnlyClass(t *testing.T) {
	base := liveModel(t)
	programs, _, _ := fioCentreSet()
	var webFio []Observation
	for i, pair := range calibPairs {
		// 64 KiB reads, a thousand per write: far from base's web box (10 KiB).
		webFio = append(webFio, fioRun(synthetic(Web, pair, 300, 1000+float64(i)*0.02, 64, 8, 0, 0)))
	}
	m := mustFit(t, base, slices.Concat(programs, webFio))
	web := classOf(t, m, "web")
	if base := classOf(t, base, "web"); reflect.DeepEqual(web.Box, base.Box) && len(web.Others) == 0 {
		t.Errorf("web has five fio windows and no program's: it kept base's box %v and no other centre; its fio windows trained nothing", web.Box)
	}
	if strings.Contains(web.Source, "centre of their own (others)") && len(web.Others) == 0 {
		t.Errorf("web's source says its fio windows have a centre of their own, but it has no others: %s", web.Source)
	}
	if o := webFio[2]; m.Distance(web, o.Inputs, o.GuestFS) > 1 {
		t.Errorf("the median web.fio window: %.1f units from web, want within one of the centre its windows trained", m.Distance(web, o.Inputs, o.GuestFS))
	}
}

// dists spells a window's distances from the four classes.
func dists(web, mail, fs, rfa float64) map[string]float64 {
	return map[string]float64{"web": web, "mail": mail, "fileserver": fs, "rfa": rfa}
}

// repeat returns n copies of h.
func repeat(n int, h heldOut) []heldOut {
	out := make([]heldOut, n)
	for i := range out {
		out[i] = h
	}
	return out
}

func judgedCount(held []heldOut) int {
	n := 0
	for _, h := range held {
		if h.judged {
			n++
		}
	}
	return n
}

// TestCalibrate: calibrate chooses the softmax, temperature and mixed
// ramp that class the most judged held-out windows right (ties: the
// first), whatever the windows not judged would prefer; then the
// confidence ramps that give the most right judged windows 0.5 or more
// while the confidence means what it says on every held-out window.
//
// 20 web windows lie clear of mail (0.5 against 3 units); 10 lie between
// web and mail (1 against 1.6), 5 of them web and 5 mail. The softmax
// classes all 10 web, the nearest, so the 5 mail ones are wrong, and
// windows at the same distances get the same confidence: at most 10% of
// wrong ones may be 0.5 or more, so none of the 10 may, and the best the
// confidence can do is the 20 clear windows at 0.5 or more. 30 windows of
// a disk turning idle (idle score 0.4) are not judged: a hotter softmax
// and a lower mixed ramp would class them right. Nor are 10 web windows
// 2.2 units from web: a near ramp reaching them would count 10 more right
// windows at 0.5 or more if they were.
func TestCalibrate(t *testing.T) {
	base := liveModel(t)
	var held []heldOut
	held = append(held, repeat(20, heldOut{dists(0.5, 3, 5, 6), 100, "web", true})...)
	held = append(held, repeat(5, heldOut{dists(1, 1.6, 5, 6), 100, "web", true})...)
	held = append(held, repeat(5, heldOut{dists(1, 1.6, 5, 6), 100, "mail", true})...)
	held = append(held, repeat(30, heldOut{dists(1, 1.3, 5, 6), 1.4, classifier.Idle, false})...)
	held = append(held, repeat(10, heldOut{dists(2.2, 6, 7, 8), 100, "web", false})...)
	m := *base
	r := calibrate(&m, base, held, judgedCount(held), DefaultFit)
	if r.right != 25 || r.m != &m {
		t.Errorf("right %d, want the 25 judged windows whose nearest class is theirs", r.right)
	}
	over := Softmaxes[0]
	if m.SoftmaxOver() != over || m.T() != Temperatures[over][0] || !slices.Equal(m.Mixed.Bounds(), base.Mixed.Bounds()) {
		t.Errorf("softmax over %s at %v, mixed %v: want the first of those that class 25 right, %s at %v with base's mixed %v",
			m.SoftmaxOver(), m.T(), m.Mixed.Bounds(), over, Temperatures[over][0], base.Mixed.Bounds())
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("the calibrated model: %v", err)
	}
	// The confidence, as the model scores each held-out window.
	conf, confRight, wrong, wrongLow := 0, 0, 0, 0
	for i, h := range held {
		s := m.Score(h.dist, h.iops)
		right := s.Class == h.expect
		if s.Confidence >= 0.9 {
			conf++
			if right {
				confRight++
			}
		}
		if !right {
			wrong++
			if s.Confidence < 0.5 {
				wrongLow++
			}
		}
		if i < 20 && (s.Class != "web" || s.Confidence < 0.5) {
			t.Errorf("a clear web window: %s at %.2f, want web at 0.5 or more", s.Class, s.Confidence)
		}
		if i >= 20 && i < 30 && s.Confidence >= 0.5 {
			t.Errorf("a window between web and mail: %s at %.2f, want below 0.5", s.Class, s.Confidence)
		}
	}
	if float64(confRight) < DefaultFit.ConfidentRight*float64(conf) || float64(wrongLow) < DefaultFit.WrongLow*float64(wrong) {
		t.Errorf("%d of %d at 0.9 or more right, %d of %d wrong below 0.5: the confidence does not mean what it says", confRight, conf, wrongLow, wrong)
	}
	if !strings.Contains(m.Confidence.Source, "20 of the 25 right") {
		t.Errorf("confidence source: %s", m.Confidence.Source)
	}
	// Judged, the idle windows do choose the softmax: another one, which
	// classes them right too.
	for i := range held[30:60] {
		held[30+i].judged = true
	}
	m2 := *base
	r2 := calibrate(&m2, base, held, judgedCount(held), DefaultFit)
	if r2.right != 55 || (m2.T() == m.T() && slices.Equal(m2.Mixed.Bounds(), m.Mixed.Bounds())) {
		t.Errorf("the idle windows judged: %d right at %v, mixed %v; want all 55 with another temperature or mixed ramp", r2.right, m2.T(), m2.Mixed.Bounds())
	}
}

// TestCalibrateIdleDamping: the confidence calibrate judges a ramp by is
// the one the model gives, damped by (1 - idle). 20 right web windows and
// 5 wrong ones (mail, classed web) lie at the same distances, the wrong
// ones on a disk a fifth idle: only a confidence of 0.5 to 0.625 before
// damping puts the right ones at 0.5 or more and the wrong ones below.
func TestCalibrateIdleDamping(t *testing.T) {
	base := liveModel(t)
	if idle := base.Idle.Of(1.7); math.Abs(idle-0.2) > 1e-9 {
		t.Fatalf("idle score at 1.7 IOPS %v: the test counts on 0.2", idle)
	}
	held := append(repeat(20, heldOut{dists(1, 2.2, 5, 6), 100, "web", true}),
		repeat(5, heldOut{dists(1, 2.2, 5, 6), 1.7, "mail", true})...)
	m := *base
	calibrate(&m, base, held, judgedCount(held), DefaultFit)
	right, wrong := m.Score(held[0].dist, held[0].iops), m.Score(held[20].dist, held[20].iops)
	if right.Class != "web" || right.Confidence < 0.5 || wrong.Class != "web" || wrong.Confidence >= 0.5 {
		t.Errorf("right window %s at %.2f, wrong one %s at %.2f: want web at 0.5 or more, web below 0.5 (margin %v, near %v)",
			right.Class, right.Confidence, wrong.Class, wrong.Confidence, m.Confidence.Margin.Bounds(), m.Confidence.Near.Bounds())
	}
}

// TestCalibrateNeverConfident: where no pair of ramps lets the confidence
// mean what it says, no workload class is ever confident, and the model
// still loads (its ramps valid, with sources). Two ways there: wrong
// windows sitting where right ones are, every ramp of the grids sure of
// both; and wrong windows that idle scores highest on, whose confidence
// is the scores' spread (1 here), which no ramp lowers.
func TestCalibrateNeverConfident(t *testing.T) {
	base := liveModel(t)
	clear := heldOut{dists(0, 10, 10, 10), 100, "web", true}
	for name, held := range map[string][]heldOut{
		"wrong among right": append(repeat(20, clear), repeat(5, heldOut{dists(0, 10, 10, 10), 100, "mail", true})...),
		"wrong and idle":    append(repeat(20, clear), repeat(3, heldOut{dists(0, 10, 10, 10), 0.5, "web", true})...),
	} {
		m := *base
		calibrate(&m, base, held, judgedCount(held), DefaultFit)
		if err := m.Validate(); err != nil {
			t.Fatalf("%s: the never-confident model does not validate: %v", name, err)
		}
		if !strings.Contains(m.Confidence.Source, "none of them met both") {
			t.Errorf("%s: confidence source: %s", name, m.Confidence.Source)
		}
		for _, d := range [][2]float64{{0, 10}, {0, 1e3}, {1, 50}} {
			if c := m.Confidence.Of(d[0], d[1]); c != 0 {
				t.Errorf("%s: nearest at %v, runner-up at %v: confidence %v, want 0", name, d[0], d[1], c)
			}
		}
		if s := m.Score(clear.dist, clear.iops); s.Class != "web" || s.Confidence != 0 {
			t.Errorf("%s: a held-out web window: %s at %v, want web at 0", name, s.Class, s.Confidence)
		}
	}
}

// settleSet is a mail and a fileserver run on one pair, their windows
// every 30 s from 30 s interleaved; the mail run turns fileserver after
// 300 s. With a 1m window classes.yaml's settle is 120 s.
func settleSet(t *testing.T) (*classifier.Model, []Observation) {
	base := liveModel(t)
	m := mustFit(t, base, mailAndFileserver(calibPairs, []float64{210, 240, 270}, 0.5))
	if s := m.Settle.Time(60); s != 120 {
		t.Fatalf("settle at a 1m window %v s: the test counts on 120", s)
	}
	var obs []Observation
	for end := 30.0; end <= 420; end += 30 {
		a := synthetic(Mail, "ext4/xfs/raw", end, 1, 12, 20, 0.5, 0.25)
		if end > 300 {
			a = synthetic(Fileserver, "ext4/xfs/raw", end, 0.5, 100, 64, 0.01, 0.001)
		}
		a.Run = "a"
		b := synthetic(Fileserver, "ext4/xfs/raw", end, 0.5, 100, 64, 0.01, 0.001)
		b.Run = "b"
		obs = append(obs, a, b)
	}
	return m, obs
}

// TestEvaluateSettling: the settle rules damp each window's confidence
// by the share of the settle time its run has held its class, run by
// run (interleaved runs do not share a hold), restarting when the class
// changes; the class itself is Evaluate's.
func TestEvaluateSettling(t *testing.T) {
	m, obs := settleSet(t)
	raw, got := Evaluate(m, obs), EvaluateSettling(m, obs, 60)
	if zero := EvaluateSettling(m, obs, 0); !reflect.DeepEqual(zero, raw) {
		t.Error("EvaluateSettling with no window differs from Evaluate")
	}
	for i, e := range got {
		r := raw[i]
		wantClass := "fileserver"
		if e.Run == "a" && e.End <= 300 {
			wantClass = "mail"
		}
		if r.Class != wantClass || r.Confidence <= 0 {
			t.Fatalf("run %s at %.0f s: %s at %.2f; the test wants %s at some confidence", e.Run, e.End, r.Class, r.Confidence, wantClass)
		}
		if e.Class != r.Class {
			t.Errorf("run %s at %.0f s: settling changed the class from %s to %s", e.Run, e.End, r.Class, e.Class)
		}
		since := 30.0 // when the run first chose its class
		if e.Run == "a" && e.End > 300 {
			since = 330
		}
		want := r.Confidence * math.Min((e.End-since)/120, 1)
		if math.Abs(e.Confidence-want) > 1e-12 {
			t.Errorf("run %s at %.0f s, %s since %.0f s: confidence %v, want %v (%v before settling)", e.Run, e.End, e.Class, since, e.Confidence, want, r.Confidence)
		}
	}
}

// TestLeaveOnePairOutWindow: with FitOptions.Window the held-out windows'
// confidence is damped as the settle rules damp it; the classes are the
// same as without.
func TestLeaveOnePairOutWindow(t *testing.T) {
	base := liveModel(t)
	ends := []float64{30, 60, 90, 120, 150, 180, 210, 240, 270}
	obs := mailAndFileserver(calibPairs, ends, 0.5)
	opt := DefaultFit
	plain, err := LeaveOnePairOut(base, obs, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.Window = 60
	settled, err := LeaveOnePairOut(base, obs, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != len(settled) || len(plain) != len(obs) {
		t.Fatalf("%d and %d windows evaluated, want %d", len(plain), len(settled), len(obs))
	}
	firstConfident := false
	for i, s := range settled {
		p := plain[i]
		if s.Run != p.Run || s.End != p.End || s.Class != p.Class {
			t.Fatalf("window %d: %s at %.0f s classed %s, without the window %s at %.0f s classed %s", i, s.Run, s.End, s.Class, p.Run, p.End, p.Class)
		}
		switch {
		case s.End == ends[0]:
			firstConfident = firstConfident || p.Confidence > 0
			if s.Confidence != 0 {
				t.Errorf("%s at %.0f s, its first window: confidence %v, want 0 (held for no time)", s.Run, s.End, s.Confidence)
			}
		case s.End == ends[2] && math.Abs(s.Confidence-p.Confidence/2) > 1e-12:
			t.Errorf("%s at %.0f s, held 60 of 120 s: confidence %v, want half of %v", s.Run, s.End, s.Confidence, p.Confidence)
		case s.End >= ends[0]+120 && s.Confidence != p.Confidence:
			t.Errorf("%s at %.0f s, settled: confidence %v, want all of %v", s.Run, s.End, s.Confidence, p.Confidence)
		}
	}
	if !firstConfident {
		t.Error("no run's first window had any confidence before settling: the test shows nothing")
	}
}
