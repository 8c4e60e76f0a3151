package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/fspair/fspair/tests/lab"
)

// The capability bits as include/uapi/linux/capability.h numbers them,
// written out here rather than taken from the exporter, so that changing
// what the exporter keeps means changing this test too.
const (
	capDACReadSearch = 1 << 2
	capSysPtrace     = 1 << 19

	// keptCaps is what the exporter keeps with /proc discovery on.
	keptCaps = capDACReadSearch | capSysPtrace

	// startCaps is what deploy/systemd/fspair_exporter.service grants,
	// in setpriv's spelling.
	startCaps = "+bpf,+perfmon,+setpcap,+sys_admin,+dac_read_search,+sys_ptrace"

	// qemuUID runs the QEMU of these tests: neither root nor the test's
	// user, as libvirt-qemu is on a libvirt host (Debian gives it 64055).
	qemuUID = 64055
	// nobody is the unprivileged user the exporter runs as where a test
	// wants it without root's file ownership.
	nobody = 65534
)

// TestLeastPrivilege: once attached, every thread of the exporter holds
// only CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE (bounding set the same,
// nothing inheritable or ambient, no_new_privs set), and with only those it
// finds and follows a VM started afterwards by another user, on a mode 0600
// image of that user in a mode 0700 directory, and a disk hot-plugged into
// it that only the QEMU process's open files show. Then it shows that each
// of the two is needed, and that the exporter started the way the systemd
// unit starts it (another user, ambient capabilities) works too.
func TestLeastPrivilege(t *testing.T) {
	dir := privateDir(t, qemuUID)
	imgA, imgB := filepath.Join(dir, "a.raw"), filepath.Join(dir, "b.raw")
	ownedImage(t, imgA, qemuUID)
	ownedImage(t, imgB, qemuUID)

	// As root with every capability; /proc discovery; the programs' run
	// statistics asked for, to show they stay readable after the drop.
	ex := startExporter(t, "--probe.stats")
	pid := ex.cmd.Process.Pid
	checkCaps(t, "after start", pid, 0, keptCaps)

	// The VM only starts now, as another user, paused (-S): no guest code
	// runs; the test writes through QEMU's block layer with HMP qemu-io.
	q := startQEMUAs(t, qemuUID, dir, "-name", "guest=least-priv",
		"-drive", "file="+imgA+",if=virtio,format=raw,cache=none,aio=native")
	ex.waitFor(t, 15*time.Second, "the disk of a VM started after the drop", hasDisk(imgA))
	q.do(t, "blockdev-add", map[string]any{
		"driver": "raw", "node-name": "hot0",
		"file": map[string]any{"driver": "file", "filename": imgB, "cache": map[string]any{"direct": true}},
	})
	ex.waitFor(t, 15*time.Second, "a disk hot-plugged after the drop", hasDisk(imgB))

	before := ex.scrape(t)
	const writes, size = 8, 64 << 10
	for i := range writes {
		q.hmp(t, fmt.Sprintf(`qemu-io virtio0 "write -P 0x5a %d %d"`, i*size, size))
		q.hmp(t, fmt.Sprintf(`qemu-io hot0 "write -P 0xa5 %d %d"`, i*size, size))
	}
	delta := func(s scrape, name, img string) float64 {
		l := map[string]string{"source_file": img, "op": "write"}
		return s.value(t, name, l) - before.value(t, name, l)
	}
	after, _ := ex.waitFor(t, 15*time.Second, "the writes counted", func(s scrape) bool {
		return delta(s, "fspair_disk_requests_total", imgA) >= writes && delta(s, "fspair_disk_requests_total", imgB) >= writes
	})
	for _, img := range []string{imgA, imgB} {
		if n, b := delta(after, "fspair_disk_requests_total", img), delta(after, "fspair_disk_bytes_total", img); n != writes || b != writes*size {
			t.Errorf("%s: %v writes of %v bytes counted, want %d of %d", filepath.Base(img), n, b, writes, writes*size)
		}
	}
	// bpf_stats (--probe.stats) are read through the program descriptors held since start.
	if r0, r1 := sumOf(before, "fspair_probe_runs_total"), sumOf(after, "fspair_probe_runs_total"); r1 <= r0 {
		t.Errorf("fspair_probe_runs_total did not grow (%v -> %v): program stats unreadable after the drop?", r0, r1)
	}
	for _, m := range after.series("fspair_scrape_collector_success", nil) {
		if m.GetGauge().GetValue() != 1 {
			t.Errorf("collector %v failed after the drop", labelsOf(m)["collector"])
		}
	}
	checkCaps(t, "while following disks", pid, 0, keptCaps)

	// Negative controls: the same exporter with one of the two missing
	// for its whole life (--no-privilege.drop, or it would refuse to start).
	t.Run("without CAP_SYS_PTRACE", func(t *testing.T) {
		ex := launch(t, setpriv("--bounding-set", "-all,+bpf,+perfmon,+sys_admin,+dac_read_search"), "--no-privilege.drop")
		ex.waitFor(t, 15*time.Second, "the disk on the command line", hasDisk(imgA))
		// Only /proc/PID/fd tells of the hot-plugged disk, and reading
		// those links is a ptrace access check.
		ex.waitRounds(t, 4)
		if hasDisk(imgB)(ex.scrape(t)) {
			t.Errorf("hot-plugged %s found without CAP_SYS_PTRACE: is the capability still needed?", imgB)
		}
	})
	t.Run("without CAP_DAC_READ_SEARCH", func(t *testing.T) {
		ex := launch(t, setpriv("--bounding-set", "-all,+bpf,+perfmon,+sys_admin,+sys_ptrace"), "--no-privilege.drop")
		ex.waitRounds(t, 4)
		s := ex.scrape(t)
		if hasDisk(imgA)(s) || hasDisk(imgB)(s) {
			t.Errorf("mode 0600 images of uid %d tracked without CAP_DAC_READ_SEARCH: is the capability still needed?", qemuUID)
		}
		if !ex.logHas(imgA, "permission denied") {
			t.Errorf("no 'permission denied' for %s in the log", imgA)
		}
	})
	// What the systemd unit does: another user than root, the start-up
	// set as ambient and bounding set.
	t.Run("as the systemd unit starts it", func(t *testing.T) {
		c := startCaps
		ex := launch(t, setpriv("--reuid", strconv.Itoa(nobody), "--regid", strconv.Itoa(nobody), "--clear-groups",
			"--inh-caps", c, "--ambient-caps", c, "--bounding-set", "-all,"+c))
		checkCaps(t, "after start", ex.cmd.Process.Pid, nobody, keptCaps)
		ex.waitFor(t, 15*time.Second, "both disks", func(s scrape) bool { return hasDisk(imgA)(s) && hasDisk(imgB)(s) })
	})
}

// TestWebTLSAndBasicAuth: with --web.config.file enabling TLS and basic
// auth (exporter-toolkit), a client that trusts the test CA gets the metrics
// with the right password and 401 otherwise; plain HTTP and a client that
// does not trust the CA get nothing. The certificate and the users are read
// again on each connection, after the capabilities are dropped.
func TestWebTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	tf := makeTLS(t, dir)
	const user, pass = "prometheus", "correct horse"
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := writeFile(t, dir, "web.yml", fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n",
		tf.cert, tf.key, user, hash))
	img := filepath.Join(dir, "tls.raw")
	ownedImage(t, img, 0)
	cfg := writeFile(t, dir, "disks.yml", "disks:\n  - domain: tls\n    target_device: vda\n    source_file: "+img+"\n")

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tf.pool}}}
	var base string
	get := func(c *http.Client, url string, auth bool, u, p string) (int, string, error) {
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			return 0, "", err
		}
		if auth {
			req.SetBasicAuth(u, p)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	ex := launchReady(t, nil, func(e *exporter) bool {
		base = strings.Replace(e.url, "http://", "https://", 1)
		code, _, err := get(client, base, true, user, pass)
		return err == nil && code == 200
	}, "--web.config.file="+webCfg, "--no-discovery.libvirt", "--no-discovery.proc", "--discovery.config.file="+cfg)
	checkCaps(t, "after start", ex.cmd.Process.Pid, 0, capDACReadSearch)

	code, body, err := get(client, base, true, user, pass)
	if err != nil || code != 200 || !strings.Contains(body, "fspair_disk_info{") || !strings.Contains(body, img) {
		t.Errorf("good credentials: %d, %v, want 200 and the disk's metrics", code, err)
	}
	for _, c := range []struct {
		name       string
		auth       bool
		user, pass string
	}{
		{"wrong password", true, user, "wrong"},
		{"unknown user", true, "root", pass},
		{"no credentials", false, "", ""},
	} {
		code, body, err := get(client, base, c.auth, c.user, c.pass)
		if err != nil || code != 401 || strings.Contains(body, "fspair_") {
			t.Errorf("%s: %d, %v, want 401 and no metrics", c.name, code, err)
		}
	}
	// Plain HTTP to the TLS port: net/http answers a first record that looks
	// like an HTTP request rather than a TLS handshake with 400, and closes.
	plain := strings.Replace(base, "https://", "http://", 1)
	if code, body, err := get(&http.Client{Timeout: 5 * time.Second}, plain, true, user, pass); err == nil && (code == 200 || strings.Contains(body, "fspair_")) {
		t.Errorf("plain HTTP to the TLS port: %d, metrics served", code)
	}
	// A client that does not trust the test CA.
	var uerr *tls.CertificateVerificationError
	if _, _, err := get(&http.Client{Timeout: 5 * time.Second}, base, true, user, pass); !errors.As(err, &uerr) {
		t.Errorf("client without the CA: %v, want a certificate verification error", err)
	}

	// And with curl, the client operators use by hand.
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl not found (install curl): %v", err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"curl, good credentials", []string{"--cacert", tf.ca, "-u", user + ":" + pass, base}, "200"},
		{"curl, wrong password", []string{"--cacert", tf.ca, "-u", user + ":nope", base}, "401"},
		{"curl, plain HTTP", []string{"-u", user + ":" + pass, plain}, "400"},
	} {
		out, err := exec.Command(curl, append([]string{"-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"}, c.args...)...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("%s: %q, %v, want HTTP %s", c.name, out, err, c.want)
		}
	}
}

// TestStartFailures: what cli_test.go does not cover. Each bad start exits
// non-zero with one line saying what to fix, before the exporter has
// loaded a BPF object, opened a perf event or mounted anything (strace
// shows no such call).
func TestStartFailures(t *testing.T) {
	// Under /var/tmp and open to all, so that the exporter run as another
	// user fails on the very file each case names.
	dir, err := os.MkdirTemp("/var/tmp", "fspair-start-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tf := makeTLS(t, dir)
	other := makeTLS(t, filepath.Join(dir, "other"))
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	certDir := filepath.Join(dir, "certdir")
	if err := os.Mkdir(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	web := func(name, cert, key string) string {
		return writeFile(t, dir, name, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", cert, key))
	}
	// A config and a certificate key only root can read, for the exporter
	// run as another user.
	rootOnly := writeFile(t, dir, "root-only.yml", "disks: []\n")
	for _, p := range []string{rootOnly, tf.key} {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := setpriv("--reuid", strconv.Itoa(nobody), "--regid", strconv.Itoa(nobody), "--clear-groups")

	for _, c := range []struct {
		name   string
		prefix []string
		args   []string
		want   []string
	}{
		{"listen address in use", nil, []string{"--web.listen-address=" + addr}, []string{addr, "address already in use"}},
		{"second listen address in use", nil, []string{fmt.Sprintf("--web.listen-address=127.0.0.1:%d", freePort(t)), "--web.listen-address=" + addr},
			[]string{addr, "address already in use"}},
		{"no systemd sockets", nil, []string{"--web.systemd-socket"}, []string{"systemd socket activation"}},
		{"cert file missing", nil, []string{"--web.config.file=" + web("w1.yml", filepath.Join(dir, "nope.crt"), tf.key)}, []string{"web config", "nope.crt"}},
		{"cert file a directory", nil, []string{"--web.config.file=" + web("w2.yml", certDir, tf.key)}, []string{"web config", certDir}},
		{"key of another certificate", nil, []string{"--web.config.file=" + web("w3.yml", tf.cert, other.key)}, []string{"web config", "private key does not match"}},
		{"key not PEM", nil, []string{"--web.config.file=" + web("w4.yml", tf.cert, writeFile(t, dir, "junk.key", "junk\n"))}, []string{"web config", "X509KeyPair"}},
		{"key unreadable by the exporter's user", asNobody, []string{"--web.config.file=" + web("w5.yml", tf.cert, tf.key)}, []string{"web config", tf.key, "permission denied"}},
		{"config unreadable by the exporter's user", asNobody, []string{"--discovery.config.file=" + rootOnly}, []string{rootOnly, "permission denied"}},
		{"config a directory", nil, []string{"--discovery.config.file=" + certDir}, []string{certDir, "is a directory"}},
		{"config not YAML", nil, []string{"--discovery.config.file=" + writeFile(t, dir, "bad.yml", "disks: [\n")}, []string{"bad.yml", "line 1"}},
		{"without CAP_BPF", setpriv("--bounding-set", "-all,+perfmon,+setpcap,+sys_admin,+dac_read_search,+sys_ptrace"), nil, []string{"missing capabilities", "CAP_BPF"}},
		{"without CAP_SYS_PTRACE", setpriv("--bounding-set", "-all,+bpf,+perfmon,+setpcap,+sys_admin,+dac_read_search"), nil, []string{"missing capabilities", "CAP_SYS_PTRACE"}},
		{"without CAP_SETPCAP", setpriv("--bounding-set", "-all,+bpf,+perfmon,+sys_admin,+dac_read_search,+sys_ptrace"), nil, []string{"missing capabilities", "CAP_SETPCAP"}},
		{"as nobody without capabilities", asNobody, nil, []string{"missing capabilities", "CAP_BPF", "CAP_DAC_READ_SEARCH"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if !strings.Contains(strings.Join(args, " "), "--web.listen-address") {
				args = append(args, fmt.Sprintf("--web.listen-address=127.0.0.1:%d", freePort(t)))
			}
			out, code, kernel := runTraced(t, c.prefix, append([]string{"--no-discovery.libvirt"}, args...)...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code == 0 || len(lines) != 1 {
				t.Errorf("exit %d with %d lines, want non-zero and one line:\n%s", code, len(lines), out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not name %q:\n%s", w, out)
				}
			}
			if len(kernel) > 0 {
				t.Errorf("started touching the kernel before failing:\n%s", strings.Join(kernel, "\n"))
			}
		})
	}
}

// launch runs the exporter, behind prefix (setpriv ...) when given, with
// /proc discovery, until the test ends, and waits until it serves.
func launch(t *testing.T, prefix []string, args ...string) *exporter {
	t.Helper()
	return launchReady(t, prefix, func(e *exporter) bool {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(e.url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, append([]string{"--no-discovery.libvirt"}, args...)...)
}

// launchReady is startExporterWith for a command behind prefix and a
// readiness check of the caller's (TLS needs its own client).
func launchReady(t *testing.T, prefix []string, ready func(*exporter) bool, args ...string) *exporter {
	t.Helper()
	args = append([]string{"--discovery.interval=1s"}, args...)
	return startProcess(t, prefix, ready, args...).exporter
}

// startProcess starts the exporter behind prefix with a loopback listen address,
// debug logging and args, stops it when the test ends (logging its tail if
// the test failed), and waits up to 60s for ready; ready nil waits for a
// successful scrape of e.url.
func startProcess(t *testing.T, prefix []string, ready func(*exporter) bool, args ...string) *runningExporter {
	t.Helper()
	if ready == nil {
		ready = func(e *exporter) bool { _, _, err := fetch(e.url); return err == nil }
	}
	port := freePort(t)
	e := &exporter{url: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), log: &logBuffer{}}
	all := append([]string{}, prefix...)
	all = append(all, binary(t), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=debug")
	all = append(all, lab.WithProbeMode(args)...)
	e.cmd = exec.Command(all[0], all[1:]...)
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { e.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		e.cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			e.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			keepLog(t, "exporter", e.log.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("exporter exited: %v\n%s", e.cmd.ProcessState, e.log.String())
		default:
		}
		if ready(e) {
			return &runningExporter{exporter: e, exited: exited}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("exporter did not serve within 60s; log:\n%s", e.log.String())
	return nil
}

// setpriv returns the command prefix that runs the exporter with the given
// setpriv(1) options (util-linux).
func setpriv(opts ...string) []string {
	return append(append([]string{"setpriv"}, opts...), "--")
}

// runTraced runs the exporter once under strace and returns its output,
// exit code, and the calls that would have set anything up in the kernel:
// bpf(), perf_event_open() and mount().
func runTraced(t *testing.T, prefix []string, args ...string) (string, int, []string) {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace not found (install strace): %v", err)
	}
	trace := filepath.Join(t.TempDir(), "trace")
	all := append([]string{"-f", "-qq", "-e", "trace=bpf,perf_event_open,mount", "-o", trace}, prefix...)
	all = append(append(all, binary(t)), lab.WithProbeMode(args)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, strace, all...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("did not exit within 60s:\n%s", out.String())
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var kernel []string
	call := regexp.MustCompile(`\b(bpf|perf_event_open|mount)\(`)
	// cilium/ebpf's rlimit package creates and at once closes one nameless
	// array map when the program starts (rlimit.detectMemcgAccounting: does
	// the kernel charge BPF memory to the memory cgroup?). That is the
	// library's init, not the exporter starting; every map of fspair's has a
	// name.
	probe := regexp.MustCompile(`bpf\(BPF_MAP_CREATE, \{map_type=BPF_MAP_TYPE_ARRAY, key_size=4, value_size=4, max_entries=1, .*map_name="",`)
	for _, line := range strings.Split(string(b), "\n") {
		if call.MatchString(line) && !probe.MatchString(line) {
			kernel = append(kernel, line)
		}
	}
	return out.String(), code, kernel
}

// capState is a thread's capability lines of /proc/PID/task/TID/status
// (proc(5)).
type capState struct {
	uid                     int
	inh, prm, eff, bnd, amb uint64
	noNewPrivs              bool
}

// checkCaps asserts that every thread of pid runs as uid with exactly want
// effective, permitted and bounding, nothing inheritable or ambient, and
// no_new_privs.
func checkCaps(t *testing.T, when string, pid, uid int, want uint64) {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) < 2 {
		t.Fatalf("%s: threads of %d: %v %v (a Go program runs several)", when, pid, tasks, err)
	}
	wantSt := capState{uid: uid, prm: want, eff: want, bnd: want, noNewPrivs: true}
	wrong := map[capState][]string{} // threads by their state, when not wantSt
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			t.Fatal(err)
		}
		var st capState
		hex := map[string]*uint64{"CapInh": &st.inh, "CapPrm": &st.prm, "CapEff": &st.eff, "CapBnd": &st.bnd, "CapAmb": &st.amb}
		seen := 0
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			f := strings.Fields(v)
			switch {
			case hex[k] != nil && len(f) == 1:
				if *hex[k], err = strconv.ParseUint(f[0], 16, 64); err != nil {
					t.Fatalf("%s: %s: %v", p, line, err)
				}
				seen++
			case k == "NoNewPrivs" && len(f) == 1:
				st.noNewPrivs = f[0] == "1"
				seen++
			case k == "Uid" && len(f) == 4:
				st.uid, _ = strconv.Atoi(f[1]) // effective uid
				seen++
			}
		}
		if seen != 7 {
			t.Fatalf("%s: %d of the 7 lines wanted:\n%s", p, seen, b)
		}
		if st != wantSt {
			wrong[st] = append(wrong[st], filepath.Base(filepath.Dir(p)))
		}
	}
	for st, tids := range wrong {
		t.Errorf("%s: %d of %d threads (%s) have uid %d CapInh %016x CapPrm %016x CapEff %016x CapBnd %016x CapAmb %016x NoNewPrivs %v; want uid %d, %016x in CapPrm, CapEff and CapBnd, nothing else, NoNewPrivs 1",
			when, len(tids), len(tasks), strings.Join(tids, ","), st.uid, st.inh, st.prm, st.eff, st.bnd, st.amb, st.noNewPrivs, uid, want)
	}
}

func hasDisk(img string) func(scrape) bool {
	return func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"source_file": img})) == 1
	}
}

func sumOf(s scrape, name string) float64 {
	sum := 0.0
	for _, m := range s.series(name, nil) {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// waitRounds waits until the exporter has run n more discovery rounds.
func (e *exporter) waitRounds(t *testing.T, n float64) {
	t.Helper()
	start := e.scrape(t).value(t, "fspair_discovery_refreshes_total", nil)
	e.waitFor(t, time.Duration(n+10)*time.Second, fmt.Sprintf("%v discovery rounds", n), func(s scrape) bool {
		return s.value(t, "fspair_discovery_refreshes_total", nil)-start >= n
	})
}

// logHas reports whether a line of the exporter's log contains all of parts.
func (e *exporter) logHas(parts ...string) bool {
	for _, line := range e.grep(parts[0]) {
		all := true
		for _, p := range parts[1:] {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// privateDir returns a directory of mode 0700 owned by uid, in a directory
// others may enter, on a file system that supports O_DIRECT (/var/tmp).
func privateDir(t *testing.T, uid int) string {
	t.Helper()
	parent, err := os.MkdirTemp("/var/tmp", "fspair-privilege-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	dir := filepath.Join(parent, "vm")
	for _, err := range []error{os.Chmod(parent, 0o755), os.Mkdir(dir, 0o700), os.Chown(dir, uid, uid)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ownedImage creates a 64 MiB sparse raw image of mode 0600 owned by uid.
func ownedImage(t *testing.T, p string, uid int) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{f.Truncate(64 << 20), f.Close(), os.Chown(p, uid, uid)} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// qmpConn is the smallest QMP client the test needs (QEMU's
// docs/interop/qmp-spec.rst): one command at a time, events skipped.
type qmpConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// startQEMUAs starts a paused QEMU (TCG, -S: no guest code runs) as uid
// with a QMP socket in dir, and stops it when the test ends.
func startQEMUAs(t *testing.T, uid int, dir string, args ...string) *qmpConn {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("qemu-system-x86_64 not found (install qemu-system-x86): %v", err)
	}
	sock := filepath.Join(dir, "qmp.sock")
	all := append([]string{"-accel", "tcg", "-nographic", "-S", "-nodefaults", "-monitor", "none", "-serial", "none",
		"-qmp", "unix:" + sock + ",server=on,wait=off"}, args...)
	cmd := exec.Command(bin, all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if conn, err := net.Dial("unix", sock); err == nil {
			q := &qmpConn{conn: conn, r: bufio.NewReader(conn)}
			t.Cleanup(func() { conn.Close() })
			if _, err := q.r.ReadBytes('\n'); err != nil { // the greeting
				t.Fatalf("QMP greeting: %v", err)
			}
			q.do(t, "qmp_capabilities", nil)
			return q
		}
		select {
		case <-exited:
			t.Fatalf("qemu exited: %v\n%s", cmd.ProcessState, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu did not open %s in time\n%s", sock, stderr.String())
		}
	}
}

func (q *qmpConn) do(t *testing.T, cmd string, args any) json.RawMessage {
	t.Helper()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	q.conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := json.NewEncoder(q.conn).Encode(req); err != nil {
		t.Fatalf("qmp %s: %v", cmd, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("qmp %s: %v", cmd, err)
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct{ Desc string }
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatalf("qmp %s: %v", cmd, err)
		}
		if resp.Error != nil {
			t.Fatalf("qmp %s: %s", cmd, resp.Error.Desc)
		}
		if resp.Return != nil {
			return resp.Return
		}
	}
}

// hmp runs a human monitor command; qemu-io prints nothing there on
// success and its error otherwise.
func (q *qmpConn) hmp(t *testing.T, line string) {
	t.Helper()
	var out string
	if err := json.Unmarshal(q.do(t, "human-monitor-command", map[string]any{"command-line": line}), &out); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "" {
		t.Fatalf("%s: %s", line, out)
	}
}

// tlsFiles are a test CA and a server certificate for 127.0.0.1 it signed.
type tlsFiles struct {
	ca, cert, key string
	pool          *x509.CertPool
}

// makeTLS writes ca.crt, server.crt and server.key (ECDSA P-256) into dir.
func makeTLS(t *testing.T, dir string) tlsFiles {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fspair test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey := newKey()
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pemFile := func(name, typ string, der []byte) string {
		return writeFile(t, dir, name, string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})))
	}
	tf := tlsFiles{
		ca:   pemFile("ca.crt", "CERTIFICATE", caDER),
		cert: pemFile("server.crt", "CERTIFICATE", srvDER),
		key:  pemFile("server.key", "PRIVATE KEY", keyDER),
		pool: x509.NewCertPool(),
	}
	tf.pool.AddCert(ca)
	return tf
}
