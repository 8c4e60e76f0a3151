package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fspair/fspair/tests/workload"
)

func quickOptions() *Options {
	return &Options{
		Pairs:     []string{"ext4/xfs", "xfs/xfs"},
		Workloads: []workload.Workload{workload.Mail, workload.Fileserver},
		Repeats:   2,
		control:   controlCell{"ext4/xfs", workload.Mail},
	}
}

func jobNames(js []job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.String())
	}
	return out
}

// TestResume: runs in the state are not made again, after a reopen too,
// and the plan keeps the blocks' order (schedule.go) from the recorded
// seed.
func TestResume(t *testing.T) {
	dir := t.TempDir()
	s := testSettings
	st, err := OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	o := quickOptions()
	pending, all := plan(o, st)
	full := schedule(o.Pairs, o.Workloads, 2, o.control, testSettings.Seed)
	if all != 14 || !reflect.DeepEqual(pending, full) {
		t.Fatalf("fresh state: plan %v of %d, want the schedule %v (14: 2 blocks of 4 cells and 3 controls)", jobNames(pending), all, jobNames(full))
	}
	// Make the first three runs, the 6th and one not asked for.
	var done []Run
	for _, j := range []job{full[0], full[1], full[2], full[5]} {
		done = append(done, synthJobs([]job{j}, planted(nil), noDrift, 0, 0)[0])
	}
	done = append(done, synthRun("btrfs/btrfs", workload.Web, 1, synth{bw: 4e6})) // not asked for: kept, not planned
	for _, r := range done {
		if err := st.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	st, err = OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.Runs()); n != 5 {
		t.Fatalf("reopened state holds %d runs, want 5", n)
	}
	pending, all = plan(o, st)
	want := append(append([]job{}, full[3:5]...), full[6:]...)
	if all != 14 || !reflect.DeepEqual(pending, want) {
		t.Errorf("after 4 of 14 runs: plan %v of %d, want %v of 14", jobNames(pending), all, jobNames(want))
	}
	// A run read back gives the same figures as the one stored, and keeps
	// whether it was a control.
	for i, r := range st.Runs() {
		if !reflect.DeepEqual(r.Metrics(), done[i].Metrics()) || r.Control != done[i].Control {
			t.Errorf("run %d: changed through the state file:\n got %v %q\nwant %v %q", i, r.Metrics(), r.Control, done[i].Metrics(), done[i].Control)
		}
	}
	if st.Runs()[0].Control != ControlStart {
		t.Errorf("the first run is %q, want the start control", st.Runs()[0].Control)
	}
	// More repeats later: only the new block is planned.
	st2, _ := OpenStore(dir, &s)
	for _, r := range synthJobs(pending, planted(nil), noDrift, 0, 0) {
		if err := st2.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	o.Repeats = 3
	pending, _ = plan(o, st2)
	if want := schedule(o.Pairs, o.Workloads, 3, o.control, testSettings.Seed)[14:]; !reflect.DeepEqual(pending, want) {
		t.Errorf("with -repeats 3: plan %v, want block 3 %v", jobNames(pending), jobNames(want))
	}
}

// TestStoreSeed: a new state draws and records a seed; a rerun without
// -seed takes it; another -seed on the same state is refused.
func TestStoreSeed(t *testing.T) {
	defer func(f func() int64) { newSeed = f }(newSeed)
	newSeed = func() int64 { return 1234 }
	dir := t.TempDir()
	s := testSettings
	s.Seed = 0
	if _, err := OpenStore(dir, &s); err != nil || s.Seed != 1234 {
		t.Fatalf("new state: %v, seed %d", err, s.Seed)
	}
	newSeed = func() int64 { return 99 }
	again := testSettings
	again.Seed = 0
	st, err := OpenStore(dir, &again)
	if err != nil || again.Seed != 1234 || st.Settings.Seed != 1234 {
		t.Errorf("rerun: %v, seed %d", err, again.Seed)
	}
	other := testSettings
	other.Seed = 5
	if _, err := OpenStore(dir, &other); !errors.Is(err, ErrSettingsChanged) {
		t.Errorf("another seed: got %v, want ErrSettingsChanged", err)
	}
}

// TestLegacyState: a state written before the blocks (settings without a
// method, runs without controls) is refused for new runs and read for
// -report-only.
func TestLegacyState(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, settingsFile), []byte(`{"format":"raw","cache":"none","runtime_seconds":90,"warmup_seconds":35,"interval_seconds":5,"storage":"loop"}`+"\n"), 0o644)
	r := synthRun("ext4/xfs", workload.Mail, 1, synth{bw: 1e6})
	b, _ := json.Marshal(r)
	os.WriteFile(filepath.Join(dir, runsFile), append(b, '\n'), 0o644)
	s := testSettings
	if _, err := OpenStore(dir, &s); !errors.Is(err, ErrLegacyState) {
		t.Errorf("new runs in a legacy state: got %v, want ErrLegacyState", err)
	}
	st, err := OpenStore(dir, nil)
	if err != nil || len(st.Runs()) != 1 || st.Settings.Method != "" {
		t.Errorf("read-only open of a legacy state: %v, %d runs", err, len(st.Runs()))
	}
}

// TestResumeAfterKill: a line cut short by a kill is dropped and cut off
// the file, and the next run is appended on a line of its own.
func TestResumeAfterKill(t *testing.T) {
	dir := t.TempDir()
	s := testSettings
	st, err := OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	for rep := 1; rep <= 2; rep++ {
		if err := st.Append(synthRun("ext4/xfs", workload.Mail, rep, synth{bw: 1e6})); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, runsFile)
	good, _ := os.ReadFile(p)
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"pair":"xfs/xfs","workload":"mail","repeat":1,"fio":{"read_io`)
	f.Close()

	st, err = OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped == "" || len(st.Runs()) != 2 {
		t.Fatalf("dropped %q, %d runs; want the cut line dropped and 2 runs", st.Dropped, len(st.Runs()))
	}
	if b, _ := os.ReadFile(p); string(b) != string(good) {
		t.Errorf("the cut line was not cut off the file")
	}
	if st.Done(job{"xfs/xfs", workload.Mail, 1, ""}) {
		t.Error("the cut run counts as done")
	}
	if err := st.Append(synthRun("xfs/xfs", workload.Mail, 1, synth{bw: 1e6})); err != nil {
		t.Fatal(err)
	}
	st, err = OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped != "" || len(st.Runs()) != 3 || !st.Done(job{"xfs/xfs", workload.Mail, 1, ""}) {
		t.Errorf("after the rerun: dropped %q, %d runs", st.Dropped, len(st.Runs()))
	}

	// A bad line before the last is not a kill: refuse to guess.
	b, _ := os.ReadFile(p)
	os.WriteFile(p, append([]byte("{garbage\n"), b...), 0o644)
	if _, err := OpenStore(dir, &s); err == nil {
		t.Error("a bad line in the middle of the state was accepted")
	}
}

func TestStoreSettings(t *testing.T) {
	dir := t.TempDir()
	s := testSettings
	if _, err := OpenStore(dir, &s); err != nil {
		t.Fatal(err)
	}
	other := s
	other.RuntimeSeconds = 30
	if _, err := OpenStore(dir, &other); !errors.Is(err, ErrSettingsChanged) {
		t.Errorf("other runtime: got %v, want ErrSettingsChanged", err)
	}
	other = s
	other.Format = "qcow2"
	if _, err := OpenStore(dir, &other); !errors.Is(err, ErrSettingsChanged) {
		t.Errorf("other format: got %v, want ErrSettingsChanged", err)
	}
	st, err := OpenStore(dir, nil)
	if err != nil || st.Settings != s {
		t.Errorf("read-only open: %v, settings %+v", err, st.Settings)
	}
	if _, err := OpenStore(filepath.Join(dir, "none"), nil); err == nil {
		t.Error("read-only open of a missing state succeeded")
	}
}
