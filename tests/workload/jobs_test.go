package workload

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// TestJobs runs each job for a few seconds with the host's fio (the kit
// copies the same binary into the guest) in a temporary directory and
// checks the operation mix fio itself reports: the ratios each job file
// promises in its comments, which fio's flow control is to keep whatever
// the speed of the disk. The jobs run side by side (go test's -parallel,
// the CPUs by default): each is time-based and mostly waits (12 jobs took
// 105 s one after another and 41 s of CPU), and what is checked are
// ratios, which a slower disk or CPU does not change.
func TestJobs(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Fatalf("fio not found (install the packages in tests/lab/packages.txt): %v", err)
	}
	type mix struct {
		readsPerWrite Range   // fio read I/Os per write I/O
		syncsPerWrite Range   // fsync/fdatasync/sync_file_range calls per write
		minWriteBytes float64 // mean bytes per write at least
	}
	want := map[Workload]mix{
		// 40 reads of 4 KiB (10 files) per log append; no syncs.
		Web: {Range{25, 60}, Range{0, 0}, 1024},
		// One 16 KiB file (4 reads) per append, every append fsynced.
		Mail: {Range{2.5, 7}, Range{0.95, 1.05}, 1024},
		// Per file written (2 writes) one append (1 write) and one file read
		// (2 reads); each write followed by sync_file_range.
		Fileserver: {Range{0.45, 0.9}, Range{0.95, 1.05}, 16 << 10},
		// Three reads per write, an fsync every 64 writes.
		RFA: {Range{2, 4.5}, Range{0.005, 0.04}, 4096},
	}
	// The variants (the classifier's held-out set) promise no exact mix;
	// they must run, and every job of theirs must do I/O.
	variants := Variants()
	if len(variants) < 2*len(Workloads) {
		t.Errorf("variants %v: want at least two per workload class", variants)
	}
	for _, w := range append(append([]Workload{}, Workloads...), variants...) {
		t.Run(string(w), func(t *testing.T) {
			t.Parallel()
			job, err := Job(w)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			jobFile := dir + "/job.fio"
			if err := os.WriteFile(jobFile, []byte(job), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			env := append(os.Environ(), "DIR="+dir, "RUNTIME=4")
			prep := exec.CommandContext(ctx, "fio", "--create_only=1", jobFile)
			prep.Env = env
			if out, err := prep.CombinedOutput(); err != nil {
				t.Fatalf("fio --create_only: %v\n%s", err, out)
			}
			cmd := exec.CommandContext(ctx, "fio", "--output-format=json", jobFile)
			cmd.Env = env
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("fio: %v\n%s", err, out)
			}
			res, err := lab.ParseFio(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range res.Jobs {
				if j.Error != 0 {
					t.Errorf("job %s: error %d", j.Name, j.Error)
				}
				if j.Read.TotalIOs+j.Write.TotalIOs == 0 {
					t.Errorf("job %s did no I/O", j.Name)
				}
			}
			tot := res.Total()
			if tot.Write.TotalIOs == 0 {
				t.Fatalf("no writes: %+v", tot)
			}
			wr := float64(tot.Write.TotalIOs)
			m, ok := want[w]
			if !ok {
				t.Logf("%s: %d reads, %d writes, %d syncs", w, tot.Read.TotalIOs, tot.Write.TotalIOs, tot.Sync.TotalIOs)
				return
			}
			t.Logf("%s: %d reads, %d writes (%.0f B mean), %d syncs", w, tot.Read.TotalIOs, tot.Write.TotalIOs,
				float64(tot.Write.IOBytes)/wr, tot.Sync.TotalIOs)
			if r := float64(tot.Read.TotalIOs) / wr; !m.readsPerWrite.Contains(r) {
				t.Errorf("reads per write %.2f, want %s", r, m.readsPerWrite)
			}
			if s := float64(tot.Sync.TotalIOs) / wr; !m.syncsPerWrite.Contains(s) {
				t.Errorf("syncs per write %.3f, want %s", s, m.syncsPerWrite)
			}
			if b := float64(tot.Write.IOBytes) / wr; b < m.minWriteBytes {
				t.Errorf("mean write %.0f B, want at least %.0f", b, m.minWriteBytes)
			}
		})
	}
}
