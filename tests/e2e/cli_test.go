package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"gopkg.in/yaml.v3"

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

// TestCheckHostileNames: --check prints each disk on one row of its table
// however the operator named its domain or image file (control characters
// quoted Go-style, ordinary names as they are), and lists every image file it
// could not open or identify with the reason, rather than only a count.
func TestCheckHostileNames(t *testing.T) {
	dir := t.TempDir()
	image := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 64<<20); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := image("plain.img")
	newline := image("new\nline.img")
	escape := image("escape.img")
	fifo := filepath.Join(dir, "pipe.img")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	subdir := filepath.Join(dir, "dir.img")
	if err := os.Mkdir(subdir, 0o700); err != nil {
		t.Fatal(err)
	}
	type disk struct {
		Domain       string `yaml:"domain"`
		TargetDevice string `yaml:"target_device"`
		SourceFile   string `yaml:"source_file"`
	}
	const (
		evilDomain = "evil\nvm"
		ttyDomain  = "tab\tvm\x1b[2J"
	)
	disks := []disk{
		{"plain-vm", "vda", plain},
		{evilDomain, "vdb", newline},
		{ttyDomain, "vdc", escape},
		{"pipe-vm", "vdd", fifo},
		{"dir-vm", "vde", subdir},
		{"dev-vm", "vdf", "/dev/null"},
	}
	data, err := yaml.Marshal(map[string][]disk{"disks": disks})
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "disks.yml")
	if err := os.WriteFile(cfg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), "--check", "--no-discovery.libvirt", "--no-discovery.proc", "--discovery.config.file="+cfg)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	err = cmd.Run()
	out := stdout.String()
	t.Logf("--check output:\n%s", out)
	// The three files that are not regular files make --check fail.
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("--check exit: %v, want exit status 1", err)
	}
	if strings.ContainsAny(out, "\t\x1b") {
		t.Errorf("output holds a raw tab or escape character")
	}

	// The disk table: a header, then one row per tracked disk up to the
	// blank line.
	rows := tableRows(t, out, "DOMAIN")
	if len(rows) != 3 {
		t.Errorf("disk table has %d rows, want 3 (one per tracked disk): %q", len(rows), rows)
	}
	for _, want := range [][]string{
		{"plain-vm ", plain + "\n"}, // ordinary names stay unquoted
		{strconv.Quote(evilDomain), strconv.Quote(newline)},
		{strconv.Quote(ttyDomain), escape},
	} {
		if !rowWith(rows, want...) {
			t.Errorf("no disk row holds %q", want)
		}
	}

	// The images not tracked, each with its reason.
	rows = tableRows(t, out, "REASON")
	if len(rows) != 3 {
		t.Errorf("untracked-image table has %d rows, want 3: %q", len(rows), rows)
	}
	for _, want := range [][]string{
		{"pipe-vm", fifo, "named pipe"},
		{"dir-vm", subdir, "directory"},
		{"dev-vm", "/dev/null", "character device"},
	} {
		if !rowWith(rows, want...) {
			t.Errorf("no untracked-image row holds %q", want)
		}
	}
	if strings.Contains(out, "see the log") {
		t.Errorf("--check still sends the reader to the log")
	}
}

// tableRows returns the rows of the table whose header line holds column,
// up to the first blank line, each with its newline.
func tableRows(t *testing.T, out, column string) []string {
	t.Helper()
	lines := strings.SplitAfter(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "DOMAIN") || !strings.Contains(l, column) {
			continue
		}
		var rows []string
		for _, r := range lines[i+1:] {
			if strings.TrimSpace(r) == "" {
				break
			}
			rows = append(rows, r)
		}
		return rows
	}
	t.Errorf("no table with a %s column in the output", column)
	return nil
}

func rowWith(rows []string, parts ...string) bool {
	for _, r := range rows {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(r, p)
		}
		if all {
			return true
		}
	}
	return false
}

func execCommand(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
