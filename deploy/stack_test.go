package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// nativeStack is a run of scripts/stack.sh on free loopback ports, with a
// state directory of the test's.
type nativeStack struct {
	t     *testing.T
	root  string
	dir   string
	env   []string
	addrs map[string]string // component -> listen address
}

// requireNativeStack checks what scripts/stack.sh needs: root, the pinned
// Prometheus and Alertmanager, and the Debian packages, failing loudly on
// the first missing.
func requireNativeStack(t *testing.T) {
	t.Helper()
	requireRoot(t)
	pinnedBinary(t, "prometheus")
	pinnedBinary(t, "alertmanager")
	requireBinary(t, "prometheus-node-exporter", "prometheus-node-exporter")
	requireBinary(t, "prometheus-libvirt-exporter", "prometheus-libvirt-exporter")
	requireBinary(t, "curl", "curl")
}

func newNativeStack(t *testing.T, exporterBin, libvirtSocket string) *nativeStack {
	s := &nativeStack{t: t, root: repoRoot(t), dir: filepath.Join(t.TempDir(), "stack"), addrs: map[string]string{}}
	for _, c := range []struct{ name, env string }{
		{"prometheus", "FSPAIR_STACK_PROMETHEUS_ADDR"},
		{"alertmanager", "FSPAIR_STACK_ALERTMANAGER_ADDR"},
		{"node-exporter", "FSPAIR_STACK_NODE_ADDR"},
		{"libvirt-exporter", "FSPAIR_STACK_LIBVIRT_ADDR"},
		{"fspair-exporter", "FSPAIR_STACK_EXPORTER_ADDR"},
	} {
		s.addrs[c.name] = freeAddr(t)
		s.env = append(s.env, c.env+"="+s.addrs[c.name])
	}
	// The exporter's flags are the stack's own, whatever the caller's
	// environment says.
	s.env = append(s.env, "FSPAIR_EXPORTER_BIN="+exporterBin, "FSPAIR_STACK_LIBVIRT_SOCKET="+libvirtSocket, "FSPAIR_EXPORTER_ARGS=")
	return s
}

// script runs scripts/stack.sh with args and returns its output and exit
// code.
func (s *nativeStack) script(args ...string) (string, int) {
	cmd := exec.Command("bash", append([]string{filepath.Join(s.root, "scripts", "stack.sh")}, append(args, "--dir", s.dir)...)...)
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			s.t.Fatalf("run stack.sh %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}

// start starts the stack, failing the test with its output on error, and
// stops it when the test ends (a no-op if the test stopped it).
func (s *nativeStack) start() string {
	s.t.Helper()
	s.t.Cleanup(func() {
		if s.t.Failed() {
			for _, f := range s.logs() {
				b, _ := os.ReadFile(f)
				s.t.Logf("--- %s (tail) ---\n%s", filepath.Base(f), tail(string(b), 15))
			}
		}
		if out, code := s.script("stop"); code != 0 {
			s.t.Errorf("stack.sh stop: exit %d\n%s", code, out)
		}
	})
	start := time.Now()
	out, code := s.script("start")
	if code != 0 {
		s.t.Fatalf("stack.sh start: exit %d\n%s", code, out)
	}
	s.t.Logf("stack.sh start took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	return out
}

func (s *nativeStack) logs() []string {
	m, _ := filepath.Glob(filepath.Join(s.dir, "log", "*.log"))
	return m
}

// pids reads the pid files of the running stack.
func (s *nativeStack) pids() map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(s.dir, "run", "*.pid"))
	for _, f := range files {
		var pid int
		b, err := os.ReadFile(f)
		if err == nil {
			fmt.Sscan(string(b), &pid)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return out
}

// prom is the stack's Prometheus base URL.
func (s *nativeStack) prom() string { return "http://" + s.addrs["prometheus"] }

type target struct {
	Labels     map[string]string `json:"labels"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
	LastScrape time.Time         `json:"lastScrape"`
}

// waitTargets waits until Prometheus has scraped every target of jobs at
// least once and returns all active targets by job.
func (s *nativeStack) waitTargets(jobs ...string) map[string][]target {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	for {
		var d struct {
			Active []target `json:"activeTargets"`
		}
		err := getJSON(ctx, s.prom()+"/api/v1/targets?state=active", &d)
		byJob := map[string][]target{}
		for _, tg := range d.Active {
			byJob[tg.Labels["job"]] = append(byJob[tg.Labels["job"]], tg)
		}
		all := err == nil
		for _, j := range jobs {
			if len(byJob[j]) == 0 {
				all = false
			}
			for _, tg := range byJob[j] {
				if tg.Health == "unknown" || tg.LastScrape.IsZero() {
					all = false
				}
			}
		}
		if all {
			return byJob
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("Prometheus has not scraped every target of %v within 45s (last error %v): %+v", jobs, err, byJob)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkUp: every target of jobs is up and scraped at the stack's address.
func (s *nativeStack) checkUp(byJob map[string][]target, job, component string) {
	s.t.Helper()
	ts := byJob[job]
	if len(ts) != 1 {
		s.t.Errorf("job %s: %d targets, want 1: %+v", job, len(ts), ts)
		return
	}
	if ts[0].Health != "up" {
		s.t.Errorf("job %s: target %s is %s: %s", job, ts[0].ScrapeURL, ts[0].Health, ts[0].LastError)
	}
	if want := "http://" + s.addrs[component] + "/metrics"; ts[0].ScrapeURL != want {
		s.t.Errorf("job %s: scrapes %s, want %s", job, ts[0].ScrapeURL, want)
	}
}

// stopAndCheck stops the stack and checks that nothing it started runs
// and no port is still served.
func (s *nativeStack) stopAndCheck() {
	s.t.Helper()
	pids := s.pids()
	if len(pids) == 0 {
		s.t.Fatalf("no pid files in %s/run", s.dir)
	}
	out, code := s.script("stop")
	if code != 0 {
		s.t.Fatalf("stack.sh stop: exit %d\n%s", code, out)
	}
	for name, pid := range pids {
		if running(pid) {
			s.t.Errorf("%s (pid %d) still runs after stop", name, pid)
		}
	}
	for name, addr := range s.addrs {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			s.t.Errorf("%s's address %s still accepts connections after stop", name, addr)
		}
	}
	out, code = s.script("status")
	if code != 3 || strings.Contains(out, " up ") {
		s.t.Errorf("stack.sh status after stop: exit %d, want 3 and nothing up:\n%s", code, out)
	}
}

// ruleGroups lists the rule groups of rules/*.yml.
func ruleGroups(t *testing.T) []string {
	files, _ := filepath.Glob(filepath.Join(repoRoot(t), "rules", "*.yml"))
	var names []string
	for _, f := range files {
		var rf struct {
			Groups []struct {
				Name string `yaml:"name"`
			} `yaml:"groups"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, g := range rf.Groups {
			names = append(names, g.Name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatalf("no rule group in rules/*.yml")
	}
	return names
}

// TestStackNative: scripts/stack.sh on a host where libvirtd does not
// answer. start brings up Prometheus, Alertmanager, the node exporter and
// fspair_exporter, each ready, says the libvirt exporter is left out and
// why; Prometheus loads every rule group of rules/, knows the
// Alertmanager, and scrapes fspair_exporter (job fspair, as the rules
// select), the node exporter, Alertmanager and itself; status says so;
// stop leaves no process and no port.
func TestStackNative(t *testing.T) {
	requireNativeStack(t)
	bin := buildExporter(t)
	s := newNativeStack(t, bin, filepath.Join(t.TempDir(), "no-libvirtd-here"))
	out := s.start()

	if !strings.Contains(out, "libvirtd does not answer") {
		t.Errorf("start did not say why the libvirt exporter is left out:\n%s", out)
	}
	for _, name := range []string{"alertmanager", "prometheus", "node-exporter", "fspair-exporter"} {
		if !strings.Contains(out, fmt.Sprintf("%s up    http://%s", pad(name), s.addrs[name])) {
			t.Errorf("start does not report %s up at %s:\n%s", name, s.addrs[name], out)
		}
	}
	if !strings.Contains(out, pad("libvirt-exporter")+" skipped") {
		t.Errorf("start does not report the libvirt exporter skipped:\n%s", out)
	}
	if st, code := s.script("status"); code != 0 {
		t.Errorf("status: exit %d, want 0 with everything started up:\n%s", code, st)
	}
	env, err := os.ReadFile(filepath.Join(s.dir, "stack.env"))
	if err != nil || !strings.Contains(string(env), "PROMETHEUS_URL="+s.prom()+"\n") {
		t.Errorf("stack.env does not name Prometheus at %s (%v):\n%s", s.prom(), err, env)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rules struct {
		Groups []struct {
			Name string `json:"name"`
		} `json:"groups"`
	}
	if err := getJSON(ctx, s.prom()+"/api/v1/rules", &rules); err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, g := range rules.Groups {
		loaded = append(loaded, g.Name)
	}
	sort.Strings(loaded)
	if want := ruleGroups(t); !slices.Equal(loaded, want) {
		t.Errorf("Prometheus loaded rule groups %v, want those of rules/*.yml %v", loaded, want)
	}
	// The Alertmanager comes from a targets file too: discovery runs
	// after start.
	var ams struct {
		Active []struct {
			URL string `json:"url"`
		} `json:"activeAlertmanagers"`
	}
	for {
		if err := getJSON(ctx, s.prom()+"/api/v1/alertmanagers", &ams); err != nil {
			t.Fatal(err)
		}
		if len(ams.Active) > 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if len(ams.Active) != 1 || !strings.HasPrefix(ams.Active[0].URL, "http://"+s.addrs["alertmanager"]+"/") {
		t.Errorf("Prometheus sends alerts to %+v, want the stack's Alertmanager at %s", ams.Active, s.addrs["alertmanager"])
	}

	byJob := s.waitTargets("fspair", "node", "prometheus", "alertmanager")
	s.checkUp(byJob, "fspair", "fspair-exporter")
	s.checkUp(byJob, "node", "node-exporter")
	s.checkUp(byJob, "prometheus", "prometheus")
	s.checkUp(byJob, "alertmanager", "alertmanager")
	if n := len(byJob["libvirt"]); n != 0 {
		t.Errorf("job libvirt has %d targets with the libvirt exporter left out", n)
	}
	// Without libvirtd the exporter runs without libvirt discovery, so the
	// libvirt source does not report down and raise FspairDiscoveryFailing.
	res, err := query(ctx, s.prom(), `fspair_discovery_source_up{job="fspair"}`)
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, r := range res {
		sources = append(sources, r.Metric["source"]+"="+fmt.Sprint(r.Value[1]))
	}
	sort.Strings(sources)
	if !slices.Equal(sources, []string{"qemu=1"}) {
		t.Errorf("discovery sources %v: want qemu (/proc) up and no libvirt", sources)
	}

	s.stopAndCheck()
}

// running reports whether pid is a live process: an exited one not yet
// reaped by whatever adopted it (the daemons outlive the script that
// started them) is not.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st := string(b)
	i := strings.LastIndexByte(st, ')')
	return i >= 0 && i+2 < len(st) && st[i+2] != 'Z'
}

// pad is the component name as status prints it, padded to its column.
func pad(name string) string { return fmt.Sprintf("%-17s", name) }

// TestStackErrors: start fails with one line naming the problem, and
// leaves nothing running, when a port is taken or a binary is missing;
// start refuses to start a second stack in the same directory.
func TestStackErrors(t *testing.T) {
	requireNativeStack(t)
	bin := buildExporter(t)
	noLibvirt := filepath.Join(t.TempDir(), "no-libvirtd-here")

	t.Run("port_in_use", func(t *testing.T) {
		s := newNativeStack(t, bin, noLibvirt)
		l, err := net.Listen("tcp", s.addrs["node-exporter"])
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out, code := s.script("start")
		if code == 0 {
			t.Fatalf("start succeeded with node-exporter's port taken:\n%s", out)
		}
		if !strings.Contains(out, "stack: node-exporter: "+s.addrs["node-exporter"]+" is in use") ||
			!strings.Contains(out, "FSPAIR_STACK_NODE_ADDR") {
			t.Errorf("start output does not name the address in use and the variable to change:\n%s", out)
		}
		s.checkNothingRuns()
	})
	t.Run("binary_missing", func(t *testing.T) {
		s := newNativeStack(t, filepath.Join(t.TempDir(), "no-such-exporter"), noLibvirt)
		out, code := s.script("start")
		if code == 0 || !strings.Contains(out, "no-such-exporter not found (make build") {
			t.Errorf("start with a missing exporter binary: exit %d, want a failure naming it:\n%s", code, out)
		}
		s.checkNothingRuns()
	})
	t.Run("already_running", func(t *testing.T) {
		s := newNativeStack(t, bin, noLibvirt)
		s.start()
		out, code := s.script("start")
		if code == 0 || !strings.Contains(out, "already running in "+s.dir) {
			t.Errorf("second start: exit %d, want a refusal:\n%s", code, out)
		}
		s.stopAndCheck()
	})
}

// checkNothingRuns: no pid file left and no address served.
func (s *nativeStack) checkNothingRuns() {
	s.t.Helper()
	if p := s.pids(); len(p) != 0 {
		s.t.Errorf("pid files left after a failed start: %v", p)
	}
	for name, addr := range s.addrs {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			if name != "node-exporter" { // the test's own listener there
				s.t.Errorf("%s's address %s is served after a failed start", name, addr)
			}
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestStackLibvirt: with libvirtd answering on its read-only socket, start
// runs the libvirt exporter too; Prometheus scrapes it (job libvirt), it
// reaches libvirtd through the read-only socket (libvirt_up 1), and
// fspair_exporter's libvirt discovery source is up.
func TestStackLibvirt(t *testing.T) {
	requireNativeStack(t)
	sock := "/var/run/libvirt/libvirt-sock-ro"
	ensureLibvirtd(t, sock)
	bin := buildExporter(t)
	s := newNativeStack(t, bin, sock)
	out := s.start()
	if !strings.Contains(out, fmt.Sprintf("%s up    http://%s", pad("libvirt-exporter"), s.addrs["libvirt-exporter"])) {
		t.Errorf("start does not report the libvirt exporter up:\n%s", out)
	}
	byJob := s.waitTargets("libvirt", "fspair")
	s.checkUp(byJob, "libvirt", "libvirt-exporter")
	s.checkUp(byJob, "fspair", "fspair-exporter")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for q, what := range map[string]string{
		`libvirt_up{job="libvirt"}`:                                  "the libvirt exporter's connection to libvirtd",
		`fspair_discovery_source_up{job="fspair", source="libvirt"}`: "fspair_exporter's libvirt discovery",
	} {
		res, err := query(ctx, s.prom(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Value[1] != "1" {
			t.Errorf("%s: %s = %+v, want 1", what, q, res)
		}
	}
	s.stopAndCheck()
}

// ensureLibvirtd makes libvirtd answer on sock: the running one, or one
// the test starts (and stops at its end). No domain is defined: listing
// none is enough for both exporters.
//
// libvirtd's QEMU driver refuses to start unless the user Debian builds it
// with (libvirt-qemu, made by libvirt-daemon-system, which CI does not
// install as it pulls in systemd) exists. Rather than add a user to the
// host, the test runs libvirtd in a mount namespace of its own where
// /etc/passwd and /etc/group are copies with that user added; its sockets
// and pid file are in /run all the same, which the namespace shares.
func ensureLibvirtd(t *testing.T, sock string) {
	t.Helper()
	libvirtd := requireBinary(t, "libvirtd", "libvirt-daemon")
	virsh := requireBinary(t, "virsh", "libvirt-clients")
	unshare := requireBinary(t, "unshare", "util-linux")
	answers := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return exec.CommandContext(ctx, virsh, "-r", "-c", "qemu:///system?socket="+sock, "uri").Run() == nil
	}
	if answers() {
		t.Logf("using the libvirtd already answering on %s", sock)
		return
	}
	dir := t.TempDir()
	for _, f := range []struct{ name, line string }{
		{"passwd", "libvirt-qemu:x:64055:64055:libvirt (fspair deploy test):/var/lib/libvirt:/usr/sbin/nologin\n"},
		{"group", "libvirt-qemu:x:64055:\n"},
	} {
		b, err := os.ReadFile("/etc/" + f.name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "\nlibvirt-qemu:") && !strings.HasPrefix(string(b), "libvirt-qemu:") {
			b = append(b, f.line...)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && exec "$3"`,
		"sh", filepath.Join(dir, "passwd"), filepath.Join(dir, "group"), libvirtd)
	log := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start libvirtd: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("libvirtd ignored SIGINT for 15s and was killed")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !answers() {
		select {
		case <-exited:
			t.Fatalf("libvirtd exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("libvirtd does not answer on %s after 30s:\n%s", sock, log)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
