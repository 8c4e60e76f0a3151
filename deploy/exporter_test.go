package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fspair/fspair/exporter/privilege"
)

// TestExporterWithComposeCapabilities: the exporter built as
// deploy/docker/Dockerfile builds it (static, CGO_ENABLED=0), run as root
// with only the capabilities compose.yaml adds in its bounding set and
// no_new_privs set, as a container gets them, and with the command
// compose.yaml gives it, attaches every BPF program, serves, and then
// holds only the two capabilities it keeps, on every thread. No Docker
// engine runs here, so the container's seccomp and AppArmor profiles are
// not part of this; compose.yaml's comments say what they allow.
func TestExporterWithComposeCapabilities(t *testing.T) {
	requireRoot(t)
	setpriv := requireBinary(t, "setpriv", "util-linux")
	p := loadCompose(t)
	ex := service(t, p, "fspair-exporter")
	df, err := os.ReadFile(dockerfileOf(ex))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "CGO_ENABLED=0") {
		t.Fatalf("%s no longer builds with CGO_ENABLED=0: build the binary here as it does", dockerfileOf(ex))
	}
	bin := buildExporter(t, "CGO_ENABLED=0")

	var caps []string
	for _, c := range ex.CapAdd {
		caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(strings.ToUpper(c), "CAP_")))
	}
	addr := freeAddr(t)
	args := []string{"--bounding-set=-all," + strings.Join(caps, ","), "--inh-caps=-all", "--no-new-privs", "--", bin}
	for _, a := range ex.Command {
		if strings.HasPrefix(a, "--web.listen-address=") {
			a = "--web.listen-address=" + addr
		}
		args = append(args, a)
	}
	cmd := exec.Command(setpriv, args...)
	log := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("exporter log:\n%s", log)
		}
	})
	// setpriv executes the exporter in its own process: same pid.
	pid := cmd.Process.Pid
	if err := waitServing("http://"+addr+"/", 60*time.Second, exited); err != nil {
		t.Fatalf("exporter with compose's capabilities %v: %v", ex.CapAdd, err)
	}

	body := scrape(t, "http://"+addr+"/metrics")
	attached := regexp.MustCompile(`(?m)^fspair_probe_attached\{(?:hook="[^"]*",)?program="([^"]+)"(?:,hook="[^"]*")?\} ([0-9.]+)$`).FindAllStringSubmatch(body, -1)
	if len(attached) == 0 {
		t.Fatalf("no fspair_probe_attached series:\n%s", body)
	}
	for _, m := range attached {
		if m[2] != "1" {
			t.Errorf("program %s not attached with compose's capabilities", m[1])
		}
	}

	keep := privilege.Runtime(true)
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no threads of pid %d: %v", pid, err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		st := string(b)
		for _, field := range []string{"CapEff", "CapPrm", "CapBnd"} {
			if got := statusField(st, field); got != fmt.Sprintf("%016x", uint64(keep)) {
				t.Errorf("%s: %s %s, want %016x (%s)", f, field, got, uint64(keep), keep)
			}
		}
		for _, field := range []string{"CapInh", "CapAmb"} {
			if got := statusField(st, field); got != fmt.Sprintf("%016x", 0) {
				t.Errorf("%s: %s %s, want none", f, field, got)
			}
		}
		if got := statusField(st, "NoNewPrivs"); got != "1" {
			t.Errorf("%s: NoNewPrivs %s", f, got)
		}
	}
}

// statusField returns a field of /proc/PID/status.
func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
