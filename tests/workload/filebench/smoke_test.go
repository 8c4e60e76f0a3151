//go:build filebench

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// TestSmoke builds Filebench (cached after the first time: a cold build is
// 58-89 s on 2 cores), boots one guest with it, and runs each of
// the four patched personalities for a few seconds on a small file set in
// the guest's /tmp: every patched file parses in Filebench 1.5 and runs to
// its IO Summary. Not in make test; run it under the lab lock:
//
//	flock /var/tmp/fspair-lab.lock go test -tags filebench -count=1 -v -timeout 20m ./tests/workload/filebench/ -run TestSmoke
func TestSmoke(t *testing.T) {
	ctx := context.Background()
	tarball, err := lab.FindFilebenchTarball(".")
	if err != nil {
		t.Fatal(err)
	}
	fb, err := lab.BuildFilebench(ctx, lab.DefaultCacheDir(), tarball, lab.TestLog(t))
	if err != nil {
		t.Fatal(err)
	}
	// The build is cached by the tarball's hash: a second build is the
	// reuse of the same directory.
	start := time.Now()
	again, err := lab.BuildFilebench(ctx, lab.DefaultCacheDir(), tarball, lab.TestLog(t))
	if err != nil || again.Dir != fb.Dir || time.Since(start) > 30*time.Second {
		t.Errorf("second build: %v, dir %v (first %s), %s", err, again, fb.Dir, time.Since(start))
	}
	if _, err := os.Stat(fb.Root + "/usr/local/lib/filebench/libcvar-gamma.so"); err != nil {
		t.Errorf("the gamma plugin the personalities' file sizes use: %v", err)
	}
	texts, err := ReadPersonalities(tarball)
	if err != nil {
		t.Fatal(err)
	}
	l := lab.ForTest(t)
	vm, err := l.StartVM(ctx, lab.VMConfig{Name: "filebench-smoke", Initramfs: []string{fb.Initramfs}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Personalities {
		dir := "/tmp/fb-" + p.Name
		// fileserver creates a file where one is missing: with too few
		// entries its threads find none and Filebench stops the run early.
		files := 50
		if p.Name == "fileserver" {
			files = 300
		}
		text, err := Patch(p.Name, texts[p.Name], Params{Dir: dir, Files: files, MemSize: "1m", Runtime: 3})
		if err != nil {
			t.Fatal(err)
		}
		// A hang (Filebench waiting for workers that died) fails the
		// personality instead of holding the lab.
		pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		out, err := vm.RunOK(pctx, fmt.Sprintf("%[4]s && mkdir -p %[1]s && cat >%[1]s.f <<'FSPAIR_EOF'\n%[2]sFSPAIR_EOF\ncd /tmp && %[3]s -f %[1]s.f 2>&1; rm -rf %[1]s", dir, text, lab.FilebenchBinary, lab.FilebenchSetup))
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", p.Name, err, lab.Tail(out, 20))
			continue
		}
		var r Run
		if err := r.parseLog(out); err != nil || r.LayoutSeconds <= 0 || r.RunSeconds < 3 {
			t.Errorf("%s: %v (layout %.1f s, run %.0f s):\n%s", p.Name, err, r.LayoutSeconds, r.RunSeconds, lab.Tail(out, 20))
			continue
		}
		if strings.Contains(out, "syntax error") || strings.Contains(out, "libgcc_s") {
			t.Errorf("%s: Filebench reported an error:\n%s", p.Name, out)
		}
		t.Logf("%s: %s", p.Name, r.Summary)
	}
}
