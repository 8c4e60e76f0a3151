package main

import (
	"io"
	"strings"
	"testing"
)

func TestCPUCostOptions(t *testing.T) {
	o, err := parseCPUCostOptions([]string{"-kernel", "k"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Variants, ",") != "atomic,percpu" || strings.Join(o.Benches, ",") != "CPUCost/fentry" || o.Rounds != 3 || o.FirstRound != 1 {
		t.Errorf("defaults: %+v", o)
	}
	o, err = parseCPUCostOptions([]string{"-kernel", "k", "-variants", "plain,atomic", "-plain", "/x/plain.test", "-bench", "CPUCost/fentry,CPUCost/tracepoint/cached", "-first-round", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Benches) != 2 || o.Plain != "/x/plain.test" || o.FirstRound != 4 {
		t.Errorf("parsed: %+v", o)
	}
	for _, bad := range [][]string{
		{"-kernel", "k", "-variants", "atomic,plain"},   // plain without -plain
		{"-kernel", "k", "-plain", "/x/plain.test"},     // -plain without plain
		{"-kernel", "k", "-variants", "atomic,striped"}, // unknown layout
		{"-kernel", "k", "-rounds", "0"},                // no rounds
		{"-kernel", "k", "-first-round", "0"},           // rounds count from 1
		{"-kernel", "", "-variants", "atomic"},          // no kernel
		{"-kernel", "k", "-bench", ""},                  // nothing to run
		{"-kernel", "k", "extra"},                       // stray argument
	} {
		if _, err := parseCPUCostOptions(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestCPUCostScript(t *testing.T) {
	o := CPUCostOptions{DirectIOs: 10, CachedIOs: 20, Timeout: 60e9}
	atomic := cpuCostScript(o, cpuCostAtomic, "CPUCost/fentry")
	percpu := cpuCostScript(o, cpuCostPerCPU, "CPUCost/fentry")
	plain := cpuCostScript(o, cpuCostPlain, "CPUCost/fentry")
	for _, want := range []string{guestPath(probeTestBin) + " -test.run '^$' -test.bench 'CPUCost/fentry'",
		"-cpucost.direct-ios 10 -cpucost.cached-ios 20", `-cpucost.hook 'sh /tmp/cpucost-hook.sh "$1"'`, "TMPDIR=/mnt/ext4 "} {
		if !strings.Contains(atomic, want) {
			t.Errorf("atomic's script lacks %q:\n%s", want, atomic)
		}
	}
	if strings.Contains(atomic, "-cpucost.percpu") || !strings.Contains(percpu, "-cpucost.percpu") {
		t.Error("-cpucost.percpu must be the percpu variant's only")
	}
	if !strings.Contains(plain, guestPath(plainTestBin)+" ") || strings.Contains(plain, guestPath(probeTestBin)+" ") {
		t.Error("the plain variant must run the plain build only")
	}
}

// cpuCostOutput is a run's output as the guest script prints it, with the
// CPU online at the hook, the fio processes' samples and the exit line.
func cpuCostOutput(online, samples string, exit string) string {
	return `cpucost hook attached: online ` + online + `
stat attached cpu0 100 0 50 1000 10 0 0 0 0 0
stat attached cpu1 5 0 5 900 0 0 0 0 0 0
goos: linux
BenchmarkCPUCost/fentry/direct/1job         	       1	3060077129 ns/op	      1596 bpf-ns/req	         0 lost-writes	     26810 req/s
BenchmarkCPUCost/fentry/direct/2jobs-1image 	       1	3964283857 ns/op	      2424 bpf-ns/req	         0 lost-writes	     25451 req/s
cpucost hook detach: online ` + online + `
stat detach cpu0 400 0 150 1100 20 0 0 0 0 0
stat detach cpu1 200 0 105 950 0 0 0 0 0 0
PASS
` + cpuCostExitMarker + exit + "\n" + samples
}

func TestCPUCostRun(t *testing.T) {
	// Job 122 sampled once before it pinned itself to CPU 1.
	good := cpuCostOutput("0-1", `fio-sample 120 0-1 0
fio-sample 121 0 0
fio-sample 122 0-1 0
fio-sample 122 1 1
fio-sample 121 0 0
fio-sample 122 1 1
`, "0")
	r := parseCPUCostRun(good)
	if len(r.Results) != 2 || r.Exit != 0 || len(r.Hooks) != 2 {
		t.Fatalf("parsed %+v", r)
	}
	if p := r.Problems(); len(p) != 0 {
		t.Errorf("problems in a good run: %q", p)
	}
	if got, want := r.Pinning(), "fio processes: 1 allowed 0 ran on 0 (2 samples); 2 allowed 0-1 ran on 0 (2 samples); 1 allowed 1 ran on 1 (2 samples)"; got != want {
		t.Errorf("pinning %q, want %q", got, want)
	}
	// cpu0: user 300 + system 100; cpu1: 195 + 100 (idle and iowait left out).
	if b := r.busy(); b["cpu0"] != 400 || b["cpu1"] != 295 {
		t.Errorf("busy %v", b)
	}
	rec := r.Record()
	for _, want := range []string{"BenchmarkCPUCost/fentry/direct/1job ", "# cpucost hook attached: online 0-1", "# busy ticks (USER_HZ, not idle or iowait) from attached to detach: cpu0 400, cpu1 295"} {
		if !strings.Contains(rec, want) {
			t.Errorf("record lacks %q:\n%s", want, rec)
		}
	}
	if strings.Contains(rec, "PROBLEM") {
		t.Errorf("record of a good run has a problem:\n%s", rec)
	}

	for name, tc := range map[string]struct {
		text, want string
	}{
		"one CPU online":      {cpuCostOutput("0", "fio-sample 122 1 1\n", "0"), "not two CPUs online"},
		"no job on CPU 1":     {cpuCostOutput("0-1", "fio-sample 121 0 0\n", "0"), "no fio job seen running on CPU 1"},
		"pinned job migrated": {cpuCostOutput("0-1", "fio-sample 122 1 1\nfio-sample 121 0 1\n", "0"), "fio process 121 pinned to CPU 0 seen on CPU 1"},
		"failed benchmark": {strings.Replace(cpuCostOutput("0-1", "fio-sample 122 1 1\n", "1"), "PASS\n",
			"--- FAIL: BenchmarkCPUCost/fentry/cached/1job\n    cpucost_test.go:150: fio: 9 writes counted, fio did 10\nFAIL\n", 1), "cpucost_test.go:150: fio: 9 writes counted"},
		"no exit line": {strings.Replace(cpuCostOutput("0-1", "fio-sample 122 1 1\n", "0"), cpuCostExitMarker+"0\n", "", 1), "exited -1"},
		"no hook":      {"BenchmarkCPUCost/fentry/direct/1job 1 5 ns/op\n" + cpuCostExitMarker + "0\nfio-sample 122 1 1\n", "the hook never ran"},
	} {
		p := parseCPUCostRun(tc.text).Problems()
		if !strings.Contains(strings.Join(p, "\n"), tc.want) {
			t.Errorf("%s: problems %q, want one with %q", name, p, tc.want)
		}
	}
}
