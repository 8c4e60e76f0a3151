package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fspair/fspair/exporter/privilege"
)

// TestSystemdUnit: the unit grants exactly the exporter's start-up set
// (with the optional CAP_SYS_ADMIN, and CAP_SYS_PTRACE for /proc
// discovery, which its default flags keep on), as bounding and ambient
// sets alike, and `systemd-analyze verify` has nothing to say about it
// (it exits 0 on unknown keys and bad values, so any output fails).
func TestSystemdUnit(t *testing.T) {
	analyze := requireBinary(t, "systemd-analyze", "systemd")
	root := repoRoot(t)
	unit := filepath.Join(root, "deploy", "systemd", "fspair_exporter.service")
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(privilege.Startup(privilege.Runtime(true)).String(), ",")
	sort.Strings(want)
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		var got []string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+"="); ok {
				got = append(got, strings.Fields(v)...)
			}
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s=%v, want %v (exporter/privilege)", key, got, want)
		}
	}

	// verify checks that ExecStart's binary exists: point a copy at a
	// real one.
	const installed = "/usr/local/bin/fspair_exporter"
	if !strings.Contains(string(b), "ExecStart="+installed+" ") {
		t.Fatalf("%s does not start %s, the path its README installs to", unit, installed)
	}
	bin := buildExporter(t)
	dir := t.TempDir()
	cp := filepath.Join(dir, "fspair_exporter.service")
	if err := os.WriteFile(cp, []byte(strings.ReplaceAll(string(b), installed, bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", cp).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
