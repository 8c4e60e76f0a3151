package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// ciState keeps the CI subset's report and logs after the test.
const ciState = "/var/tmp/fspair-matrix/ci"

// TestMatrixCI is the kernel matrix's CI subset, run by make test's
// lab-test: the first kernel of FSPAIR_MATRIX_KERNELS (the Makefile's
// MATRIX_KERNELS; 6.1), DefaultModes (FSPAIR_MATRIX_MODES overrides them),
// all three file systems and engines, the probe tests on ext4. Like the
// other lab tests it takes no lab lock itself: run it under
// `flock /var/tmp/fspair-lab.lock`. It fails on any DIFF, silent zero,
// cell not measured or probe test failure, and logs the report and its
// time.
func TestMatrixCI(t *testing.T) {
	start := time.Now()
	kernels := kernelsFromEnv()
	if len(kernels) == 0 {
		t.Fatal("FSPAIR_MATRIX_KERNELS is not set: run `make lab-test`, or set it to the Makefile's MATRIX_KERNELS")
	}
	modes := DefaultModes
	if env := list(os.Getenv("FSPAIR_MATRIX_MODES")); len(env) > 0 {
		modes = env
	}
	o := Options{
		Kernels: kernels[:1], Modes: modes, FS: FileSystems, Engines: Engines, ProbeFS: []string{"ext4"}, ProbeCPUs: 1,
		ExporterPer: "mode", FileMiB: 64, FSMiB: 2048, CPUs: 2, MemMiB: 2048,
		State: ciState, CacheDir: lab.DefaultCacheDir(),
		ProbeTimeout: 10 * time.Minute, ExporterTimeout: 3 * time.Minute,
		Command: "FSPAIR_MATRIX_MODES=" + strings.Join(modes, ",") + " go test ./tests/matrix -run TestMatrixCI (kernel " + kernels[0] + ")",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	res, err := RunMatrix(ctx, o, lab.TestLog(t))
	if res != nil {
		t.Log("\n" + res.Markdown())
	}
	t.Logf("kernel matrix CI subset took %s (report and logs in %s)", time.Since(start).Round(time.Second), ciState)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failed() {
		t.Error(f)
	}
}
