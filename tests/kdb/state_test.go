package main

import (
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
// and the plan keeps its order (pair, then repeat, then workload).
func TestResume(t *testing.T) {
	dir := t.TempDir()
	s := testSettings
	st, err := OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	o := quickOptions()
	pending, all := plan(o, st)
	if all != 8 || len(pending) != 8 {
		t.Fatalf("fresh state: %d pending of %d, want 8 of 8", len(pending), all)
	}
	want := []string{
		"mail on ext4/xfs #1", "fileserver on ext4/xfs #1", "mail on ext4/xfs #2", "fileserver on ext4/xfs #2",
		"mail on xfs/xfs #1", "fileserver on xfs/xfs #1", "mail on xfs/xfs #2", "fileserver on xfs/xfs #2",
	}
	if got := jobNames(pending); !reflect.DeepEqual(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	done := []Run{
		synthRun("ext4/xfs", workload.Mail, 1, synth{bw: 1e6}),
		synthRun("ext4/xfs", workload.Fileserver, 1, synth{bw: 2e6}),
		synthRun("xfs/xfs", workload.Mail, 2, synth{bw: 3e6}),
		synthRun("btrfs/btrfs", workload.Web, 1, synth{bw: 4e6}), // not asked for: kept, not planned
	}
	for _, r := range done {
		if err := st.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	st, err = OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.Runs()); n != 4 {
		t.Fatalf("reopened state holds %d runs, want 4", n)
	}
	pending, all = plan(o, st)
	want = []string{"mail on ext4/xfs #2", "fileserver on ext4/xfs #2", "mail on xfs/xfs #1", "fileserver on xfs/xfs #1", "fileserver on xfs/xfs #2"}
	if got := jobNames(pending); all != 8 || !reflect.DeepEqual(got, want) {
		t.Errorf("after 3 of 8 runs: plan %v of %d, want %v of 8", got, all, want)
	}
	// A run read back gives the same figures as the one stored.
	for i, r := range st.Runs() {
		if !reflect.DeepEqual(r.Metrics(), done[i].Metrics()) {
			t.Errorf("run %d: figures changed through the state file:\n got %v\nwant %v", i, r.Metrics(), done[i].Metrics())
		}
	}
	// More repeats later: only the new ones are planned.
	st2, _ := OpenStore(dir, &s)
	for _, j := range pending {
		if err := st2.Append(synthRun(j.pair, j.workload, j.repeat, synth{bw: 1e6})); err != nil {
			t.Fatal(err)
		}
	}
	o.Repeats = 3
	pending, _ = plan(o, st2)
	want = []string{"mail on ext4/xfs #3", "fileserver on ext4/xfs #3", "mail on xfs/xfs #3", "fileserver on xfs/xfs #3"}
	if got := jobNames(pending); !reflect.DeepEqual(got, want) {
		t.Errorf("with -repeats 3: plan %v, want %v", got, want)
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
	if st.Done("xfs/xfs", workload.Mail, 1) {
		t.Error("the cut run counts as done")
	}
	if err := st.Append(synthRun("xfs/xfs", workload.Mail, 1, synth{bw: 1e6})); err != nil {
		t.Fatal(err)
	}
	st, err = OpenStore(dir, &s)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped != "" || len(st.Runs()) != 3 || !st.Done("xfs/xfs", workload.Mail, 1) {
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
