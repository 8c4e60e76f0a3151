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

// ciModes are the CI subset's probe modes: the fentry mode, the production
// path, which this host cannot run; the tracepoint and syscall modes run on
// the host itself in every make test (exporter/probe's tests and
// TestModesAgree), and in the guests in make matrix.
var ciModes = []string{"fentry"}

// ciProbeTests are the probe tests the CI subset runs in the guest: the
// request tests, without those that make file systems of their own on loop
// devices (TestHostDeviceAttribution, TestCacheAndFlushCost,
// TestBtrfsSubvolumeImage, TestLinuxAIOXFSRetry: minutes under TCG; they
// run on the host in make test and in the guests in make matrix), and
// without three that exercise what every mode shares: TestSeekBuckets
// (seek_bucket's bounds, bpf/disk.h; TestSequentialAndRandom keeps the
// fentry hooks' positions checked), TestUntrackStopsCounting (the
// followed-image lookup every hook filters on) and
// TestDeniedProgramDegrades (the loader's handling of a program the
// kernel refuses; TestProgramTable keeps the fentry programs' table
// checked). They took 165 s of the CI run's 547 s of probe tests
// (2026-11-28); they run on the host in make test and in the guests in
// make matrix.
const ciProbeTests = `^Test(Modes|ProgramTable|ProgramsAttach|OperationsCounted|SequentialAndRandom|FlushEpochs|LinuxAIO|OwnRequestsNotCounted)$`

// TestMatrixCI is the kernel matrix's CI subset, run by make test's
// lab-test: the first kernel of FSPAIR_MATRIX_KERNELS (the Makefile's
// MATRIX_KERNELS; 6.1), ciModes (FSPAIR_MATRIX_MODES overrides them),
// all three file systems and engines, the request probe tests on ext4. Like the
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
	modes := ciModes
	if env := list(os.Getenv("FSPAIR_MATRIX_MODES")); len(env) > 0 {
		modes = env
	}
	o := Options{
		Kernels: kernels[:1], Modes: modes, FS: FileSystems, Engines: Engines, ProbeFS: []string{"ext4"}, ProbeCPUs: 1,
		ProbeRun:    ciProbeTests,
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
