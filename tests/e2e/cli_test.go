package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fspair/fspair/tests/lab"
)

// TestCheckMode: --check discovers, loads and attaches, prints what it
// found and exits 0; bad input exits non-zero with one line saying what to fix.
func TestCheckMode(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "disks.yml")
	os.WriteFile(cfg, []byte("disks:\n  - domain: chk\n    uuid: 00000000-0000-0000-0000-00000000c0c0\n"+
		"    target_device: vda\n    source_file: "+img+"\n"), 0o600)
	run := func(args ...string) (string, int) {
		cmd := exec.Command(binary(t), lab.WithProbeMode(args)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	base := []string{"--check", "--no-discovery.libvirt", "--no-discovery.proc", "--discovery.config.file=" + cfg}

	out, code := run(base...)
	if code != 0 || !strings.Contains(out, "chk") || !strings.Contains(out, img) || !strings.Contains(out, "1 disks tracked") {
		t.Errorf("--check: exit %d, output:\n%s", code, out)
	}
	// A program denied on purpose is reported, not a failure.
	out, code = run(append(base, "--probe.deny=pread64_enter")...)
	if code != 0 || !strings.Contains(out, "pread64_enter") || !strings.Contains(out, "denied") {
		t.Errorf("--check with a denied program: exit %d, output:\n%s", code, out)
	}

	bad := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--no-such-flag"}, "unknown long flag"},
		{"missing config", []string{"--discovery.config.file=" + filepath.Join(dir, "nope.yml")}, "nope.yml"},
		{"bad max disks", []string{"--bpf.max-disks=0"}, "--bpf.max-disks"},
		{"bad reuse", []string{"--web.reuse=5s"}, "--web.reuse"},
		{"bad web config", []string{"--web.config.file=" + cfg}, "web config"},
	}
	for _, b := range bad {
		out, code := run(b.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code == 0 || !strings.Contains(out, b.want) || len(lines) != 1 {
			t.Errorf("%s: exit %d, want non-zero and one line naming %q; got:\n%s", b.name, code, b.want, out)
		}
	}
}

func execCommand(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
