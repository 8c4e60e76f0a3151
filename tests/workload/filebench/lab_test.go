package main

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

// switchRecording is a web -> mail switch scraped every 5 s: web's
// layout from 0 s, its run from 5 s to 100 s, mail's prepare from 100 s,
// its run from 105 s to 200 s, then the sync after it.
func switchRecording() workload.Switch {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var pts []workload.Point
	add := func(at float64, phase string, reads, writes, syncs float64) {
		pts = append(pts, workload.Point{Phase: phase, Snapshot: workload.Snapshot{
			Time:       t0.Add(time.Duration(at * float64(time.Second))),
			Requests:   map[string]float64{"read": reads, "write": writes, "flush": syncs},
			Bytes:      map[string]float64{"read": reads * 10240, "write": writes * 16384},
			SyncWrites: map[string]float64{"flush": syncs},
		}})
	}
	add(0, "prepare:web", 0, 0, 0)
	var r, w, s float64
	for t := 5.0; t < 100; t += 5 {
		add(t, "web", r, w, s)
		r, w = r+2500, w+5
	}
	add(100, "prepare:mail", r, w, s)
	for t := 105.0; t <= 200; t += 5 {
		add(t, "mail", r, w, s)
		r, w, s = r+250, w+250, s+250
	}
	add(201, "after:mail", r, w, s)
	return workload.Switch{Pair: "ext4/xfs/raw", From: workload.Web, To: workload.Mail, SwitchAt: 100, Points: pts}
}

// TestSwitchObservations: a window is the new workload's once it ends
// after the new run's first scrape, and settled only when every scrape in
// it is of its workload's run (or the sync after it); the hysteresis
// carries through one run.
func TestSwitchObservations(t *testing.T) {
	obs := switchObservations(switchRecording(), time.Minute)
	if len(obs) == 0 {
		t.Fatal("no windows")
	}
	var sawEarlyWeb, sawSettledWeb, sawSwitch, sawSettledMail bool
	for _, o := range obs {
		if o.Run != obs[0].Run || o.Source != "" || o.GuestFS != "ext4" {
			t.Errorf("window at %.0f s: run %q, source %q, guest %q: want one run, no source (labSources names it), ext4", o.End, o.Run, o.Source, o.GuestFS)
		}
		start := o.End - 60
		switch {
		case o.End <= 105:
			if o.Truth != workload.Web {
				t.Errorf("window ending %.0f s (before mail's run): %s, want web", o.End, o.Truth)
			}
			// What ran from a scrape to the next is the first one's
			// phase: web's run from 5 s up to mail's prepare at 100 s.
			settled := start >= 5 && o.End <= 100
			if o.Settled != settled {
				t.Errorf("web window %.0f-%.0f s: settled %v, want %v", start, o.End, o.Settled, settled)
			}
			sawEarlyWeb = sawEarlyWeb || !o.Settled && o.End < 100
			sawSettledWeb = sawSettledWeb || o.Settled
			sawSwitch = sawSwitch || o.End > 100
		default:
			if o.Truth != workload.Mail {
				t.Errorf("window ending %.0f s: %s, want mail", o.End, o.Truth)
			}
			if want := start >= 105; o.Settled != want {
				t.Errorf("mail window %.0f-%.0f s: settled %v, want %v", start, o.End, o.Settled, want)
			}
			sawSettledMail = sawSettledMail || o.Settled
		}
	}
	if !sawEarlyWeb || !sawSettledWeb || !sawSwitch || !sawSettledMail {
		t.Errorf("windows cover: layout %v, web alone %v, the switch %v, mail alone %v; want all", sawEarlyWeb, sawSettledWeb, sawSwitch, sawSettledMail)
	}
}

// TestRunCheck: a check counts its settled windows, the right ones paired
// where it needs them, and a paired wrong class it forbids; idle and
// mixed are paired on settling alone and never forbidden.
func TestRunCheck(t *testing.T) {
	ev := func(class string, conf float64, settled bool) workload.Evaluated {
		return workload.Evaluated{Observation: workload.Observation{Truth: workload.Mail, Pair: "xfs/xfs/raw", Source: "fio", Settled: settled},
			Expect: "mail", Class: class, Confidence: conf}
	}
	all := []workload.Evaluated{
		ev("mail", 0.8, true), ev("mail", 0.3, true), ev("rfa", 0.7, true), ev("fileserver", 0.4, true),
		ev("mixed", 0, true), ev("fileserver", 0.95, false), // not settled: not judged
	}
	match := func(o workload.Observation) bool { return o.Pair == "xfs/xfs/raw" }
	c := labCheck{Sources: []string{"fio"}, Match: match,
		Paired: func(workload.Observation) bool { return true },
		Forbid: func(_ workload.Observation, class string) bool { return class != "mail" }}
	r := runCheck(c, all, 0.5)
	if r.Windows != 5 || r.Right != 2 || r.NeedPaired != 5 || r.Paired != 1 || r.Forbidden != 1 {
		t.Errorf("windows %d right %d need paired %d paired %d forbidden %d; want 5, 2, 5, 1, 1 (rfa at 0.7 paired, fileserver at 0.4 not)",
			r.Windows, r.Right, r.NeedPaired, r.Paired, r.Forbidden)
	}
	if got := r.holds(false); got != "**fails**" {
		t.Errorf("holds: %q, want it to fail", got)
	}
	// AnyClass: whichever class, paired; the class need not be right.
	c.AnyClass = true
	if r := runCheck(c, all, 0.5); r.Paired != 3 {
		t.Errorf("AnyClass: paired %d, want 3 (mail at 0.8, rfa at 0.7, mixed)", r.Paired)
	}
	if got := runCheck(c, all[:1], 0.5).holds(false); got != "holds" {
		t.Errorf("one right window at 0.8: %q, want holds", got)
	}
	tied := []workload.Evaluated{ev("mail", 0.01, true)}
	if got := runCheck(labCheck{Sources: []string{"fio"}, Match: match}, tied, 0.5).holds(false); got != "holds, at a tie" {
		t.Errorf("one right window at 0.01: %q, want holds, at a tie", got)
	}
	if got := runCheck(labCheck{Sources: []string{"other"}, Match: match}, all, 0.5).holds(false); got != "no recorded windows" {
		t.Errorf("no windows of its sources: %q", got)
	}
}

// TestLabSources reads every recorded source: each has windows, the pair
// lab one per line of its runs.jsonl with the state's image format in the
// pair, and each run-window source one window per run.
func TestLabSources(t *testing.T) {
	srcs, err := labSources("../../..", "tests/workload/testdata/features.json")
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, s := range srcs {
		if len(s.Obs) == 0 {
			t.Errorf("%s: no windows", s.Name)
		}
		for _, o := range s.Obs {
			n[o.Source]++
			if o.Source == "pair-lab" && !strings.HasSuffix(o.Pair, "/raw") {
				t.Errorf("pair lab window on %q: want the state's raw format in the pair", o.Pair)
			}
		}
	}
	f, err := os.Open("../../../" + labPairLab + "/runs.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines++
	}
	if n["pair-lab"] != lines {
		t.Errorf("pair lab: %d windows, want one per run (%d)", n["pair-lab"], lines)
	}
	for src, file := range map[string]string{"variants": labVariants, "apps": labApps} {
		res, err := workload.LoadResults("../../../" + file)
		if err != nil {
			t.Fatal(err)
		}
		if n[src] != len(res.Runs) {
			t.Errorf("%s: %d windows, want one per run (%d)", src, n[src], len(res.Runs))
		}
		if n[src+"-sub"] <= len(res.Runs) {
			t.Errorf("%s-sub: %d windows, want the runs' sub-windows, more than the runs (%d)", src, n[src+"-sub"], len(res.Runs))
		}
	}
	if n["synthetic"] != len(syntheticDisks) {
		t.Errorf("synthetic: %d windows, want one per disk (%d)", n["synthetic"], len(syntheticDisks))
	}
}

// TestLabTablesCurrent keeps rules/README.md's tables of the lab's other
// windows what the stored data, the live model and the candidate give now:
// a change of any of them must come with its new tables (go run
// ./tests/workload/filebench -lab -write).
func TestLabTablesCurrent(t *testing.T) {
	want, err := labTables("../../..", fitBasePath, livePath, "tests/workload/testdata/features.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../../rules/README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, labBegin+"\n"), strings.Index(s, "\n"+labEnd+"\n")
	if i < 0 || j < i {
		t.Fatalf("rules/README.md lacks the block %q ... %q", labBegin, labEnd)
	}
	if got := s[i+len(labBegin)+1 : j]; got != strings.TrimRight(want, "\n") {
		t.Errorf("rules/README.md's lab tables are stale; run go run ./tests/workload/filebench -lab -write. Now:\n%s", want)
	}
}
