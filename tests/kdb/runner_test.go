package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

func TestReadFlush(t *testing.T) {
	fams, err := workload.ParseMetrics([]byte(`# TYPE fspair_disk_flush_device_write_bytes_total counter
fspair_disk_flush_device_write_bytes_total{source_file="/a.raw",source="call",kind="data"} 4096
fspair_disk_flush_device_write_bytes_total{source_file="/a.raw",source="journal",kind="metadata"} 8192
fspair_disk_flush_device_write_bytes_total{source_file="/b.raw",source="call",kind="data"} 1e9
# TYPE fspair_disk_flush_device_writes_total counter
fspair_disk_flush_device_writes_total{source_file="/a.raw",source="call",kind="data"} 1
fspair_disk_flush_device_writes_total{source_file="/a.raw",source="journal",kind="metadata"} 2
# TYPE fspair_disk_flush_device_cache_flushes_total counter
fspair_disk_flush_device_cache_flushes_total{source_file="/a.raw"} 7
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := readFlush(fams, "/a.raw"); got != (Flush{DeviceWrites: 3, DeviceWriteBytes: 12288, CacheFlushes: 7}) {
		t.Errorf("readFlush = %+v", got)
	}
	if got := readFlush(fams, "/c.raw"); got != (Flush{}) {
		t.Errorf("readFlush of another disk = %+v", got)
	}
}

func TestSamples(t *testing.T) {
	ss := []sample{
		{Scrape: Scrape{Snapshot: workload.Snapshot{Time: t0}, Flush: Flush{CacheFlushes: 1}}, Phase: "mail"},
		{Scrape: Scrape{Snapshot: workload.Snapshot{Time: t0.Add(time.Second)}, Flush: Flush{CacheFlushes: 2}}, Phase: "after:mail"},
	}
	pts := points(ss)
	if len(pts) != 2 || pts[1].Phase != "after:mail" || !pts[1].Time.Equal(t0.Add(time.Second)) {
		t.Errorf("points %+v", pts)
	}
	if s, ok := at(ss, t0.Add(time.Second)); !ok || s.Flush.CacheFlushes != 2 {
		t.Errorf("at: %+v %v", s, ok)
	}
	if _, ok := at(ss, t0.Add(time.Hour)); ok {
		t.Error("at found a scrape that was not taken")
	}
}

func TestMountOf(t *testing.T) {
	m, err := mountOf("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	if m.fsType != "proc" || m.point != "/proc" {
		t.Errorf("mount of /proc/self: %+v", m)
	}
	if got := unescapeOctal(`/mnt/my\040disk\134x`); got != `/mnt/my disk\x` {
		t.Errorf("unescapeOctal: %q", got)
	}
	if !within("/a/b", "/a") || within("/ab", "/a") || !within("/x", "/") {
		t.Error("within")
	}
}

// TestBudget: with -budget the runner starts no run the estimate says
// would end after it; without one it never stops on time.
func TestBudget(t *testing.T) {
	o := &Options{Runtime: 90 * time.Second, Budget: 10 * time.Minute}
	r := &runner{o: o, t0: time.Now().Add(-7 * time.Minute)}
	// Before any run: 110 s a run and 60 s a guest boot.
	if r.overBudget(1) {
		t.Error("7 min in, a run of about 3 min stops a 10 min budget")
	}
	r.made, r.runTime = 4, 4*150*time.Second
	r.t0 = time.Now().Add(-8 * time.Minute)
	if !r.overBudget(0) {
		t.Error("8 min in, a 150 s run would end after a 10 min budget and was started")
	}
	o.Budget = 0
	if r.overBudget(1) {
		t.Error("no budget stopped the runs")
	}
}

// TestSettledProgress: after a block's end control the runner prints the
// verdicts settled so far and the drift the controls measured.
func TestSettledProgress(t *testing.T) {
	st, err := OpenStore(t.TempDir(), &testSettings)
	if err != nil {
		t.Fatal(err)
	}
	o := &Options{Tolerance: DefaultTolerance, Confidence: DefaultConfidence}
	jobs := schedule([]string{"ext4/xfs", "xfs/xfs", "btrfs/btrfs", "ext4/ext4"}, []workload.Workload{workload.Mail, workload.Web}, 3, controlCell{"ext4/xfs", workload.Mail}, 1)
	for _, run := range synthJobs(jobs, planted(map[string]float64{"btrfs/btrfs": 0.5}), slowing(time.Hour, time.Hour), 0.02, 1) {
		if err := st.Append(run); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	r := &runner{o: o, st: st, progress: &out, t0: time.Now()}
	r.settled(3)
	for _, want := range []string{"block 3 done; drift measured by the controls so far 0.8", "settled: web: ", "ext4/xfs best (1.00)", "btrfs/btrfs worst* (1.00); mail: ", "btrfs/btrfs worst* (1.00)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("progress %q lacks %q", out.String(), want)
		}
	}
}

// TestRemaining: the time left is the missing runs at the median pace of
// the runs held, leaving out interruptions.
func TestRemaining(t *testing.T) {
	jobs := schedule([]string{"ext4/xfs"}, []workload.Workload{workload.Mail}, 2, controlCell{"ext4/xfs", workload.Mail}, 1)
	runs := synthJobs(jobs, planted(nil), noDrift, 0, 0) // one every 100 s
	runs[len(runs)-1].Start = runs[len(runs)-1].Start.Add(5 * time.Hour)
	if got := remaining(runs, 12, testSettings); got != 20*time.Minute {
		t.Errorf("12 runs at 100 s: %s, want 20m", got)
	}
	if got := remaining(nil, 3, testSettings); got != 6*time.Minute { // (90 s + 30 s) x 3
		t.Errorf("no runs held: %s, want 6m", got)
	}
	if got := remaining(runs, 0, testSettings); got != 0 {
		t.Errorf("nothing missing: %s", got)
	}
}
