//go:build measure

package workload

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// TestPersonalities checks the measurement basis on one guest: one pair
// runs each workload briefly, alone (laid out right before its run,
// removed after it), while fspair_exporter watches the image file, and
// each workload's separating features (Expect) must land in their ranges
// and Classify must name the workload. make test makes the same check on
// tests/validate's TestValidate runs (ext4 on xfs as here, and xfs on xfs,
// each workload following another in the running guest), so this test
// runs by hand: go test -tags measure ./tests/workload/ -run
// TestPersonalities (under the lab lock, about 3 minutes).
//
// The phases are short, so each window starts after the workload's own
// transient: mail and fileserver reach the disk at once (fsync,
// sync_file_range); web's reads do too; rfa's asynchronous writes reach it
// only through the guest's write-back, which writes pages once they are
// 30 s old (vm.dirty_expire_centisecs), so its window starts at 40 s.
func TestPersonalities(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin := buildExporter(t)
	l := lab.ForTest(t)
	p := Pair{GuestFS: "ext4", HostFS: "xfs", Format: "raw", Cache: "none"}
	g := bootPair(ctx, t, l, p)
	ex, err := StartExporter(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ex.Close()
		if t.Failed() {
			t.Logf("exporter log (tail):\n%s", tail(ex.Log(), 40))
		}
	})
	info, err := ex.WaitDisk(ctx, g.disk.File, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if info.Info["guest_fs"] != p.GuestFS || info.Info["host_fs"] != p.HostFS || info.Info["format"] != p.Format {
		t.Fatalf("exporter labels %v, want guest_fs=%s host_fs=%s format=%s", info.Info, p.GuestFS, p.HostFS, p.Format)
	}
	rec := ex.Record(ctx, g.disk.File, 2*time.Second)
	phases := []struct {
		w               Workload
		runtime, warmup time.Duration
	}{
		{Web, 30 * time.Second, 8 * time.Second},
		{Mail, 30 * time.Second, 8 * time.Second},
		{Fileserver, 30 * time.Second, 8 * time.Second},
		{RFA, 60 * time.Second, 40 * time.Second},
	}
	for _, ph := range phases {
		run, err := RunPhase(ctx, g.vm, rec, ph.w, ph.runtime)
		if err != nil {
			t.Fatal(err)
		}
		f, span, err := run.Window(rec.Points(), ph.warmup)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: window %.0fs, fio %+v\n%s", ph.w, span.Seconds(), run.Fio, Describe(f))
		for _, m := range Mismatches(ph.w, f) {
			t.Errorf("%s: %s", ph.w, m)
		}
		if err := Clean(ctx, g.vm, ph.w); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rec.Stop(); err != nil {
		t.Logf("scrape errors (those points are missing): %v", err)
	}
	t.Logf("TestPersonalities took %.0fs", time.Since(began).Seconds())
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
