package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

// The live model and the model the fit starts from (-fit-base's default),
// from this package's directory.
const (
	livePath    = "../../../rules/classes.yaml"
	fitBasePath = "../testdata/classes-fitbase.yaml"
)

func liveClassifier(t *testing.T) *Classifier { return classifierAt(t, livePath) }

func classifierAt(t *testing.T, path string) *Classifier {
	t.Helper()
	c, err := LoadClassifier(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// recording is a synthetic run: a layout of asynchronous writes for
// layout, then a mail-like run (a read of 10.8 KiB per write of 16 KiB,
// every write durable, by a flush each) until end, scraped every 10 s
// from origin.
func recording(origin time.Time, layout, end time.Duration) Run {
	r := Run{Spec: Spec{Personality: "varmail"}, Class: workload.Mail, Origin: origin}
	var reads, writes, rbytes, wbytes, syncs float64
	// One scrape before Filebench started, as the recorder takes one.
	r.Points = append(r.Points, point(origin.Add(-3*time.Second), "idle", 0, 0, 0, 0, 0))
	for t := time.Duration(0); t <= end; t += 10 * time.Second {
		phase := "layout"
		if t >= layout {
			phase = "run"
		}
		r.Points = append(r.Points, point(origin.Add(t), phase, reads, writes, rbytes, wbytes, syncs))
		if t+10*time.Second <= layout {
			writes += 1000
			wbytes += 1000 * 64 << 10
		} else {
			reads += 500
			writes += 500
			rbytes += 500 * 11059
			wbytes += 500 * 16 << 10
			syncs += 500
		}
	}
	return r
}

func point(t time.Time, phase string, reads, writes, rbytes, wbytes, syncs float64) workload.Point {
	return workload.Point{Phase: phase, Snapshot: workload.Snapshot{
		Time:       t,
		Requests:   map[string]float64{"read": reads, "write": writes, "flush": syncs},
		Bytes:      map[string]float64{"read": rbytes, "write": wbytes},
		SyncWrites: map[string]float64{"dsync": syncs},
	}}
}

// TestWindows: windows end every step from Filebench's start, the first
// ones shorter (the first minutes are in the record), never reaching back
// before the start; the windows inside the mail-like run are classed
// mail, the layout's are not.
func TestWindows(t *testing.T) {
	c := liveClassifier(t)
	origin := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	r := recording(origin, time.Minute, 3*time.Minute)
	ws := c.Windows(r, time.Minute, 30*time.Second)
	var ends, spans []float64
	for _, w := range ws {
		ends = append(ends, w.End)
		spans = append(spans, w.Span)
	}
	if want := []float64{30, 60, 90, 120, 150, 180}; !slices.Equal(ends, want) {
		t.Fatalf("window ends %v, want %v", ends, want)
	}
	if want := []float64{30, 60, 60, 60, 60, 60}; !slices.Equal(spans, want) {
		t.Errorf("window spans %v, want %v", spans, want)
	}
	for _, w := range ws {
		inRun := w.End-w.Span >= 60
		if inRun && (w.Class != "mail" || w.Held != "mail" || w.Phase != "run") {
			t.Errorf("window ending %.0f s inside the run: class %s, held %s, phase %s; want mail, mail, run", w.End, w.Class, w.Held, w.Phase)
		}
		if w.End <= 60 && (w.Class == "mail" || w.Phase != "layout") {
			t.Errorf("layout window ending %.0f s: class %s, phase %s", w.End, w.Class, w.Phase)
		}
		if w.Scores == nil || w.Features[workload.FeatIOPS] <= 0 {
			t.Errorf("window ending %.0f s: no scores or features: %+v", w.End, w)
		}
	}
	ph := PhaseFeatures(r.Points)
	if got := ph["run"][workload.FeatSyncWriteShare]; got != 1 {
		t.Errorf("run phase durable share %v, want 1", got)
	}
	if got := ph["layout"][workload.FeatReadShare]; got != 0 {
		t.Errorf("layout phase read share %v, want 0", got)
	}
	if got := Tally(ws, "run"); got != "mail 4" {
		t.Errorf("Tally of the run windows: %q, want \"mail 4\"", got)
	}
	if ws := c.Windows(Run{Origin: origin, Points: r.Points[:1]}, time.Minute, 30*time.Second); ws != nil {
		t.Errorf("one scrape gave windows %v", ws)
	}
}

// TestResultsState: the results file is the series' state: a run without
// an error is done, a failed one is made again, another setup is refused,
// and a save survives a reload.
func TestResultsState(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.json")
	res, err := LoadResults(p)
	if err != nil || len(res.Runs) != 0 {
		t.Fatalf("missing file: %v, %v", res, err)
	}
	setup := Setup{Filebench: "1.5", GuestMemMiB: 512, GuestCPUs: 1, ImageMiB: 4096, RuntimeSeconds: 240, MemSize: "1m", Interval: 10}
	if err := res.Adopt(setup); err != nil {
		t.Fatal(err)
	}
	a, _ := ParseSpec("varmail@btrfs/ext4/raw/none/native")
	b, _ := ParseSpec("web@ext4/xfs/qcow2/writeback/io_uring")
	res.Put(Run{Spec: a, WallSeconds: 400, Points: recording(time.Now(), time.Minute, 2*time.Minute).Points})
	res.Put(Run{Spec: b, Error: "boom"})
	if err := res.Save(p); err != nil {
		t.Fatal(err)
	}
	got, err := LoadResults(p)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Done(a) || got.Done(b) || len(got.Runs) != 2 || len(got.Runs[0].Points) == 0 {
		t.Errorf("reloaded: done(a)=%v done(b)=%v runs=%d", got.Done(a), got.Done(b), len(got.Runs))
	}
	got.Put(Run{Spec: b, WallSeconds: 500})
	if len(got.Runs) != 2 || !got.Done(b) {
		t.Errorf("a run made again does not replace the failed one: %+v", got.Runs)
	}
	other := setup
	other.RuntimeSeconds = 300
	if err := got.Adopt(other); !errors.Is(err, ErrSetupChanged) {
		t.Errorf("another runtime: %v, want ErrSetupChanged", err)
	}
	if err := got.Adopt(setup); err != nil {
		t.Errorf("the same setup: %v", err)
	}
}

// TestEstimate: -budget plans with the mean wall time of the runs made,
// or the runtime and an allowance before any.
func TestEstimate(t *testing.T) {
	o := &Options{Runtime: 4 * time.Minute}
	res := &Results{}
	if got := estimate(res, o); got != 8*time.Minute {
		t.Errorf("no runs yet: %s, want 8m", got)
	}
	res.Runs = []Run{{WallSeconds: 400}, {WallSeconds: 500}, {WallSeconds: 10, Error: "failed early"}}
	if got := estimate(res, o); got != 450*time.Second {
		t.Errorf("runs of 400 and 500 s: %s, want 7m30s", got)
	}
}

func TestParseLog(t *testing.T) {
	log := `Filebench Version 1.5-alpha3
0.000: Allocated 177MB of shared memory
0.004: Varmail Version 3.0 personality successfully loaded
0.004: Populating and pre-allocating filesets
95.211: Population and pre-allocation of filesets completed
95.212: Starting 1 filereader instances
96.230: Running...
336.282: Run took 240 seconds...
336.290: Per-Operation Breakdown
336.301: IO Summary: 41020 ops 170.913 ops/s 26/26 rd/wr   0.8mb/s 5.841ms/op
336.301: Shutting down processes
`
	var r Run
	if err := r.parseLog(log); err != nil {
		t.Fatal(err)
	}
	if r.LayoutSeconds != 96.23 || r.RunSeconds != 240 || r.OpsPerSecond != 170.913 ||
		r.Summary != "IO Summary: 41020 ops 170.913 ops/s 26/26 rd/wr   0.8mb/s 5.841ms/op" {
		t.Errorf("parsed %+v", r)
	}
	if err := (&Run{}).parseLog(strings.Split(log, "336.290")[0]); err == nil {
		t.Error("a log without IO Summary parsed as a complete run")
	}
}

func TestParseSpec(t *testing.T) {
	s, err := ParseSpec("mail@btrfs/ext4/raw/none/native")
	if err != nil || s.Personality != "varmail" || s.String() != "varmail@btrfs/ext4/raw/none/native" {
		t.Errorf("ParseSpec: %+v, %v", s, err)
	}
	for _, bad := range []string{
		"varmail@btrfs/ext4/raw/none", "oltp@ext4/ext4/raw/none/native", "varmail@zfs/ext4/raw/none/native",
		"varmail@ext4/ext4/vmdk/none/native", "varmail@ext4/ext4/raw/unsafe/threads",
		"varmail@ext4/ext4/raw/writeback/native", "varmail@ext4/ext4/raw/none/posix",
	} {
		if _, err := ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q): no error", bad)
		}
	}
	if _, err := ParseSpecs(DefaultSeries); err != nil {
		t.Errorf("DefaultSeries: %v", err)
	}
	if _, err := ParseSpecs("web@ext4/xfs/raw/none/native,webserver@ext4/xfs/raw/none/native"); err == nil {
		t.Error("a run named twice was accepted")
	}
}

func TestFlags(t *testing.T) {
	var sb strings.Builder
	o, err := parseFlags([]string{"-files", "varmail=1000,rfa=200"}, &sb)
	if err != nil {
		t.Fatal(err)
	}
	if o.files(Personalities[1]) != 1000 || o.files(Personalities[3]) != 200 || o.files(Personalities[0]) != 40000 {
		t.Errorf("-files: %v", o.Files)
	}
	o, err = parseFlags([]string{"-mount-options", "noatime,nodiratime"}, &sb)
	if err != nil {
		t.Fatal(err)
	}
	if s := o.setup(&lab.FilebenchBuild{}); s.MountOptions != "noatime,nodiratime" {
		t.Errorf("-mount-options: the setup has %q", s.MountOptions)
	}
	for _, bad := range [][]string{{"-files", "oltp=3"}, {"-step", "2m"}, {"-image", "512"}, {"stray"},
		{"-mount-options", "noatime; reboot"}, {"-mount-options", "noatime ro"}, {"-mount-options", "$(id)"}} {
		if _, err := parseFlags(bad, &sb); err == nil {
			t.Errorf("flags %q: no error", bad)
		}
	}
}

// TestFittedModelCurrent checks that the fitted block of rules/classes.yaml
// is what the fit gives on the stored runs from the fit's base (go run
// ./tests/workload/filebench -fit -write writes it), so that no one retunes
// it by hand, and that the file loads as a model.
func TestFittedModelCurrent(t *testing.T) {
	m := storedFit(t)
	got, err := os.ReadFile(livePath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := withFitted(string(got), modelYAML(m))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("rules/classes.yaml's fitted block is not the fit of the stored runs: run go run ./tests/workload/filebench -fit -write")
	}
	if _, err := LoadClassifier(livePath); err != nil {
		t.Errorf("rules/classes.yaml does not load: %v", err)
	}
}

// TestLongLayoutRuns: the runs whose layout outlasted the start of the
// first counted window (180 s less a 1-minute window: 120 s) are made
// again, once; a failed run and one already made again are not.
func TestLongLayoutRuns(t *testing.T) {
	if b := LayoutBound(time.Minute); b != 120 {
		t.Fatalf("layout bound %v s for 1-minute windows, want 120", b)
	}
	spec := func(s string) Spec {
		t.Helper()
		sp, err := ParseSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	res := &Results{Runs: []Run{
		{Spec: spec("webserver@ext4/ext4/qcow2/none/native"), LayoutSeconds: 218},
		{Spec: spec("varmail@xfs/xfs/raw/writeback/threads"), LayoutSeconds: 120},
		{Spec: spec("varmail@ext4/ext4/qcow2/none/native"), LayoutSeconds: 194, Error: "boot failed"},
		{Spec: spec("randomfileaccess@xfs/ext4/raw/none/io_uring"), LayoutSeconds: 131, Remade: "made again"},
		{Spec: spec("randomfileaccess@btrfs/xfs/qcow2/none/io_uring"), LayoutSeconds: 121},
	}}
	got := LongLayoutRuns(res, time.Minute)
	want := []Spec{spec("webserver@ext4/ext4/qcow2/none/native"), spec("randomfileaccess@btrfs/xfs/qcow2/none/io_uring")}
	if !slices.Equal(got, want) {
		t.Errorf("long-layout runs %v, want %v", got, want)
	}
	o, err := parseFlags([]string{"-runs", "long-layout"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if !o.LongLayout || !o.Again || len(o.Specs) != 0 {
		t.Errorf("-runs long-layout: LongLayout %v, Again %v, specs %v; want true, true and none until the results are read", o.LongLayout, o.Again, o.Specs)
	}
}
