package deploy

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/alerting"
)

// TestStackFleet: `scripts/stack.sh fleet` starts the lab fleet, reports it
// up with its URLs, Thanos Query sees every host's sidecar and the Ruler,
// and stop leaves nothing running.
func TestStackFleet(t *testing.T) {
	pinnedBinary(t, "thanos")
	requireBinary(t, "curl", "curl")
	root := repoRoot(t)
	dir := filepath.Join(t.TempDir(), "fleet")
	query := freeAddr(t)
	env := []string{"FSPAIR_FLEET_QUERY_ADDR=" + query}
	stack := func(args ...string) (string, int) {
		cmd := exec.Command("bash", append([]string{filepath.Join(root, "scripts", "stack.sh"), "fleet"}, append(args, "--dir", dir)...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("scripts/stack.sh fleet %v: %v", args, err)
		}
		return string(out), code
	}
	out, code := stack("start")
	t.Cleanup(func() {
		if out, code := stack("stop"); code != 0 {
			t.Errorf("fleet stop: exit %d:\n%s", code, out)
		}
	})
	if code != 0 {
		log, _ := os.ReadFile(filepath.Join(dir, "log", "fleet.log"))
		t.Fatalf("fleet start: exit %d:\n%s\nlog:\n%s", code, out, log)
	}
	if !strings.Contains(out, "FLEET_QUERY_URL=http://"+query) {
		t.Errorf("fleet start does not print Thanos Query's URL:\n%s", out)
	}
	if out, code := stack("status"); code != 0 || !strings.Contains(out, "fleet up") {
		t.Errorf("fleet status: exit %d:\n%s", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stores struct {
		Data map[string][]struct {
			LastError *string `json:"lastError"`
		} `json:"data"`
	}
	if err := alerting.GetJSON(ctx, "http://"+query+"/api/v1/stores", &stores); err != nil {
		t.Fatal(err)
	}
	if n := len(stores.Data["sidecar"]); n != len(fleetHosts) || len(stores.Data["rule"]) != 1 {
		t.Errorf("Thanos Query's stores: %d sidecars and %d rulers, want %d and 1: %+v", n, len(stores.Data["rule"]), len(fleetHosts), stores.Data)
	}
	pid, err := os.ReadFile(filepath.Join(dir, "run", "fleet.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if out, code := stack("stop"); code != 0 || !strings.Contains(out, "stopped the lab fleet") {
		t.Errorf("fleet stop: exit %d:\n%s", code, out)
	}
	// Gone, or a zombie its adoptive parent has not reaped yet.
	if st, err := os.ReadFile("/proc/" + strings.Fields(string(pid))[0] + "/stat"); err == nil {
		if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && f[0] != "Z" {
			t.Errorf("the lab (pid %s) still runs after stop (state %s)", strings.Fields(string(pid))[0], f[0])
		}
	}
	// The daemons the lab ran listened inside its directory's addresses;
	// none answers once it stopped.
	if c, err := net.DialTimeout("tcp", query, time.Second); err == nil {
		c.Close()
		t.Errorf("Thanos Query still answers on %s after stop", query)
	}
	if out, code := stack("status"); code != 3 {
		t.Errorf("fleet status after stop: exit %d, want 3:\n%s", code, out)
	}
}
