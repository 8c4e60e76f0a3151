package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fspair/fspair/tests/lab"
)

// Paths and names of the Debian 12 libvirt 9.0 packages (libvirt-daemon,
// libvirt-daemon-driver-qemu, libvirt-clients).
const (
	libvirtSocketRW = "/var/run/libvirt/libvirt-sock"
	libvirtSocketRO = "/var/run/libvirt/libvirt-sock-ro"
	virtlogdSocket  = "/var/run/libvirt/virtlogd-sock"
	libvirtURI      = "qemu:///system"
	// libvirtQEMUConf is read by libvirtd's QEMU driver once, at start.
	libvirtQEMUConf = "/etc/libvirt/qemu.conf"
	// libvirtQEMUUser is the QEMU user Debian builds libvirt with
	// (--with-qemu-user). The privileged QEMU driver resolves it when it
	// starts, before it reads qemu.conf, and refuses to start without it;
	// the user is made by libvirt-daemon-system, which CI does not install
	// (it pulls in systemd).
	libvirtQEMUUser = "libvirt-qemu"
	// libvirtPIDDir is where the QEMU driver writes <domain>.pid.
	libvirtPIDDir = "/run/libvirt/qemu"
)

// libvirtPackages is what to install when a libvirt binary is missing.
const libvirtPackages = "apt-get install -y --no-install-recommends libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients"

// TestLibvirt runs the exporter with libvirt as its only discovery source
// against a live libvirtd and a transient domain booted from the lab kit:
// the domain's two disks must appear with libvirt's names and the
// configured modes, with the guest file system read from the image for one
// and taken from the domain's fspair metadata for the other; guest I/O must
// be counted; the series must go when the domain is destroyed; and when
// libvirtd stops, discovery must report the source down while scrapes keep
// answering at once.
func TestLibvirt(t *testing.T) {
	began := time.Now()
	ctx := context.Background()
	requireLibvirtTools(t)
	l := lab.ForTest(t)
	lv := ensureLibvirt(t)

	h, err := l.NewHostFS(ctx, "xfs", 1024)
	if err != nil {
		t.Fatal(err)
	}
	vda, vdb := h.Path("vda.raw"), h.Path("vdb.qcow2")
	if err := lab.MakeImage(ctx, vda, "raw", "ext4", 320); err != nil {
		t.Fatal(err)
	}
	// The image holds btrfs; the metadata says xfs, so an xfs label can
	// only have come from the override.
	if err := lab.MakeImage(ctx, vdb, "qcow2", "btrfs", 320); err != nil {
		t.Fatal(err)
	}

	// The exporter runs before the domain starts so that it follows the
	// disks from the guest's first request on.
	ex := startExporterWith(t, "--no-discovery.proc")

	name := fmt.Sprintf("fspair-e2e-libvirt-%d", os.Getpid())
	dom := createDomain(t, l, name, []domainDisk{
		{target: "vda", file: vda, format: "raw", cache: "none", io: "native", discard: "unmap"},
		{target: "vdb", file: vdb, format: "qcow2", cache: "writeback", io: "threads"},
	}, map[string]string{"vdb": "xfs"})
	t.Logf("domain %s (uuid %s) started %.1fs into the test", name, dom.uuid, time.Since(began).Seconds())

	// Discovery: both disks, libvirt's names, the configured modes.
	s, took := ex.waitFor(t, 15*time.Second, "two libvirt disks of "+name, func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"domain": name, "discovery": "libvirt"})) == 2
	})
	t.Logf("exporter listed both disks %.1fs after the domain started", took.Seconds())
	want := []map[string]string{
		{"target_device": "vda", "source_file": vda, "format": "raw", "guest_fs": "ext4", "guest_fs_source": "image",
			"cache": "none", "aio": "native"},
		{"target_device": "vdb", "source_file": vdb, "format": "qcow2", "guest_fs": "xfs", "guest_fs_source": "override",
			"cache": "writeback", "aio": "threads"},
	}
	for _, w := range want {
		w["domain"], w["uuid"], w["discovery"] = name, dom.uuid, "libvirt"
		w["host_fs"], w["host_mountpoint"], w["host_device"] = "xfs", h.Dir, h.Loop
		info := s.series("fspair_disk_info", map[string]string{"source_file": w["source_file"]})
		if len(info) != 1 {
			t.Fatalf("disk %s: %d fspair_disk_info series, want 1", w["target_device"], len(info))
		}
		got := labelsOf(info[0])
		for k, v := range w {
			if got[k] != v {
				t.Errorf("disk %s: label %s=%q, want %q (all labels: %v)", w["target_device"], k, got[k], v, got)
			}
		}
	}
	if up := s.value(t, "fspair_discovery_source_up", map[string]string{"source": "libvirt"}); up != 1 {
		t.Errorf("fspair_discovery_source_up{source=libvirt} = %v, want 1", up)
	}
	// The QEMU process comes from the driver's pid file, so the probes
	// need not look at every process's I/O.
	if v := s.value(t, "fspair_probe_follow_all_processes", nil); v != 0 {
		t.Errorf("fspair_probe_follow_all_processes = %v, want 0 (libvirt disks carry their QEMU pid)", v)
	}
	// /proc discovery is off: libvirt alone found the disks.
	for _, m := range s.series("fspair_discovery_source_up", nil) {
		if src := labelsOf(m)["source"]; src != "libvirt" {
			t.Errorf("discovery source %q is enabled; the test runs libvirt alone", src)
		}
	}

	// I/O at boot: the guest kernel reads the partition table of each
	// virtio disk as it probes it.
	_, took = ex.waitFor(t, 30*time.Second, "boot reads on vda", func(s scrape) bool {
		return s.value(t, "fspair_disk_requests_total", map[string]string{"source_file": vda, "op": "read"}) > 0
	})
	t.Logf("first reads of vda counted %.1fs after the discovery", took.Seconds())

	// I/O the test makes: fio in the guest, through the lab's control
	// channel on the guest's second serial port, which the domain wires to
	// a UNIX socket. O_DIRECT and one request at a time make each fio I/O
	// one request on the raw image (cache=none).
	g := readyGuest(ctx, t, dom)
	defer g.close()
	before := ex.scrape(t)
	const n = 256 // 4 KiB requests per job: 1 MiB
	script := strings.Join([]string{
		"set -e",
		`dev() { for d in /sys/block/vd*; do if [ "$(cat "$d/serial")" = "$1" ]; then echo "/dev/${d##*/}"; return 0; fi; done; echo "no disk with serial $1" >&2; return 1; }`,
		"a=$(dev fspair-vda)",
		"b=$(dev fspair-vdb)",
		fioLine(`"$a"`, "read", "64m"),
		fioLine(`"$a"`, "write", "200m"),
		fioLine(`"$b"`, "write", "200m"),
	}, "\n")
	jobCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	out, rc, err := g.run(jobCtx, script, 100)
	cancel()
	if err != nil || rc != 0 {
		t.Fatalf("guest fio: rc %d, err %v, output:\n%s", rc, err, out)
	}
	after := ex.scrape(t)
	delta := func(file, metric, label, value string) float64 {
		k := map[string]string{"source_file": file, label: value}
		return after.value(t, metric, k) - before.value(t, metric, k)
	}
	t.Logf("counted for the guest's fio jobs: vda %v reads, %v writes; vdb %v writes",
		delta(vda, "fspair_disk_requests_total", "op", "read"), delta(vda, "fspair_disk_requests_total", "op", "write"),
		delta(vdb, "fspair_disk_requests_total", "op", "write"))
	if got := delta(vda, "fspair_disk_requests_total", "op", "read"); !within(got, n, 0.02) {
		t.Errorf("vda: %v reads counted, want %d (fio read 1 MiB in 4 KiB O_DIRECT requests)", got, n)
	}
	if got := delta(vda, "fspair_disk_requests_total", "op", "write"); !within(got, n, 0.02) {
		t.Errorf("vda: %v writes counted, want %d", got, n)
	}
	if got := delta(vda, "fspair_disk_bytes_total", "op", "read"); !within(got, n*4096, 0.02) {
		t.Errorf("vda: %v bytes read counted, want %d", got, n*4096)
	}
	// qcow2 allocates clusters as the guest writes: more requests than the
	// guest's, never fewer.
	if got := delta(vdb, "fspair_disk_requests_total", "op", "write"); got < n {
		t.Errorf("vdb: %v writes counted, want at least %d", got, n)
	}
	// The interface follows the disk's aio mode (QEMU docs, -blockdev
	// file aio=threads|native).
	if got := delta(vda, "fspair_disk_submissions_total", "interface", "linux_aio"); got < 2*n {
		t.Errorf("vda (aio=native): %v linux_aio submissions, want at least %d", got, 2*n)
	}
	if got := delta(vdb, "fspair_disk_submissions_total", "interface", "syscall"); got < n {
		t.Errorf("vdb (aio=threads): %v syscall submissions, want at least %d", got, n)
	}

	// Destroy: the domain's series go.
	g.close()
	dom.destroy(t)
	_, took = ex.waitFor(t, 10*time.Second, "series of destroyed "+name+" to go", func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"domain": name})) == 0 &&
			len(s.series("fspair_disk_requests_total", map[string]string{"domain": name})) == 0
	})
	t.Logf("series of %s gone %.1fs after destroy", name, took.Seconds())

	// libvirtd stops: the source goes down, errors count, scrapes stay fast.
	t.Run("libvirtd_stopped", func(t *testing.T) {
		if lv.libvirtd == nil {
			t.Skip("libvirtd ran before the test; stopping a daemon the test did not start is not its business")
		}
		s, _ := ex.timedScrape(t)
		errs0 := s.value(t, "fspair_discovery_errors_total", map[string]string{"source": "libvirt"})
		if err := lv.libvirtd.stop(); err != nil {
			t.Fatalf("stop libvirtd: %v", err)
		}
		stopped := time.Now()
		watch := ex.watchScrapes(t, 15*time.Second, "libvirt source down after libvirtd stopped", func(s scrape) bool {
			return s.value(t, "fspair_discovery_source_up", map[string]string{"source": "libvirt"}) == 0 &&
				s.value(t, "fspair_discovery_errors_total", map[string]string{"source": "libvirt"}) > errs0
		})
		t.Logf("libvirt source down %.1fs after libvirtd stopped", time.Since(stopped).Seconds())
		errs1 := watch.last.value(t, "fspair_discovery_errors_total", map[string]string{"source": "libvirt"})
		// Keep scraping: every round fails again, and none slows a scrape.
		more := ex.watchScrapes(t, 10*time.Second, "more failed libvirt rounds", func(s scrape) bool {
			return s.value(t, "fspair_discovery_errors_total", map[string]string{"source": "libvirt"}) >= errs1+2
		})
		slowest := max(watch.max, more.max)
		t.Logf("%d scrapes while libvirtd was down, slowest %s", watch.n+more.n, slowest)
		if slowest >= time.Second {
			t.Errorf("slowest scrape while libvirtd was down took %s, want < 1s", slowest)
		}
		if lines := ex.grep("connect to libvirt at " + libvirtSocketRO); len(lines) == 0 {
			t.Errorf("exporter log does not name the failed libvirt connection")
		}
	})
	t.Logf("libvirt test took %.1fs", time.Since(began).Seconds())
}

// TestLibvirtHung points the exporter at a socket that accepts connections
// and never answers, as a hung libvirtd does: each libvirt round must fail
// within the call timeout, the source must report down, and scrapes must
// not wait for libvirt.
func TestLibvirtHung(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "libvirt-sock-ro")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(io.Discard, c) }() // read, never answer
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})

	ex := startExporterWith(t, "--no-discovery.proc", "--discovery.libvirt.socket="+sock, "--discovery.libvirt.timeout=2s")
	w := ex.watchScrapes(t, 20*time.Second, "two failed rounds against a hung libvirt", func(s scrape) bool {
		return s.value(t, "fspair_discovery_source_up", map[string]string{"source": "libvirt"}) == 0 &&
			s.value(t, "fspair_discovery_errors_total", map[string]string{"source": "libvirt"}) >= 2
	})
	t.Logf("%d scrapes, slowest %s; the exporter connected %d times", w.n, w.max, conns.Load())
	if w.max >= time.Second {
		t.Errorf("slowest scrape against a hung libvirt took %s, want < 1s", w.max)
	}
	if conns.Load() < 2 {
		t.Errorf("exporter connected %d times; after a timeout it must drop the connection and dial again", conns.Load())
	}
	if lines := ex.grep("no answer within"); len(lines) == 0 {
		t.Errorf("exporter log does not report the libvirt timeout (\"no answer within\")")
	}
}

// timedScrape scrapes with a deadline and returns how long it took; unlike
// scrape it cannot hang the test on a stalled exporter.
func (e *exporter) timedScrape(t *testing.T) (scrape, time.Duration) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	resp, err := c.Get(e.url)
	if err != nil {
		t.Fatalf("scrape: %v (after %s)", err, time.Since(start))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("read scrape: %v", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return fams, took
}

// scrapeWatch is what watchScrapes saw.
type scrapeWatch struct {
	last scrape
	n    int
	max  time.Duration // slowest scrape
}

// watchScrapes scrapes every 200ms until cond holds, timing every scrape.
func (e *exporter) watchScrapes(t *testing.T, timeout time.Duration, what string, cond func(scrape) bool) scrapeWatch {
	t.Helper()
	var w scrapeWatch
	start := time.Now()
	for {
		s, took := e.timedScrape(t)
		w.last, w.n = s, w.n+1
		if took > w.max {
			w.max = took
		}
		if cond(s) {
			return w
		}
		if time.Since(start) > timeout {
			t.Fatalf("waited %s for %s (%d scrapes, slowest %s)", timeout, what, w.n, w.max)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fioLine is a shell line running one fio job of n 4 KiB O_DIRECT requests
// on dev (a quoted shell word) at offset.
func fioLine(dev, rw, offset string) string {
	return "fio --output=/dev/null " + strings.Join(fioArgs(dev, rw, "4k", "1m", "--offset="+offset), " ")
}

// requireLibvirtTools fails the test if a libvirt program is missing.
func requireLibvirtTools(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"libvirtd", "virtlogd", "virsh", "qemu-system-x86_64"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing (%v); install libvirt: %s", bin, err, libvirtPackages)
		}
	}
}

// libvirtEnv is the libvirt the test talks to.
type libvirtEnv struct {
	libvirtd *daemon // nil when a libvirtd ran before the test
}

// ensureLibvirt makes sure libvirtd answers on its system sockets. If it
// does not, it starts virtlogd (QEMU's logs go through it) and libvirtd as
// children of the test, in the foreground: the test then owns their process
// ids and reaps them, where daemonised copies would be orphans of PID 1.
// t.Cleanup stops what it started and undoes what it changed.
func ensureLibvirt(t *testing.T) *libvirtEnv {
	t.Helper()
	requireLibvirtTools(t)
	if socketAnswers(libvirtSocketRW) {
		t.Logf("using the libvirtd already running on %s", libvirtSocketRW)
		if _, err := virsh(context.Background(), "uri"); err != nil {
			t.Fatalf("libvirtd on %s does not open %s: %v", libvirtSocketRW, libvirtURI, err)
		}
		return &libvirtEnv{}
	}

	if _, err := user.Lookup(libvirtQEMUUser); err != nil {
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/var/lib/libvirt", "--shell", "/usr/sbin/nologin", libvirtQEMUUser).CombinedOutput()
		if err != nil {
			t.Fatalf("create user %s for libvirt's QEMU driver: %v: %s", libvirtQEMUUser, err, out)
		}
		t.Logf("created user %s (libvirt's QEMU driver needs it to exist)", libvirtQEMUUser)
		t.Cleanup(func() {
			if out, err := exec.Command("userdel", libvirtQEMUUser).CombinedOutput(); err != nil {
				t.Errorf("remove user %s: %v: %s", libvirtQEMUUser, err, out)
			}
		})
	}

	if !socketAnswers(virtlogdSocket) {
		d := startDaemon(t, "virtlogd", virtlogdSocket)
		t.Cleanup(func() {
			if err := d.stop(); err != nil {
				t.Errorf("stop virtlogd: %v", err)
			}
		})
	}

	d := startLibvirtd(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("libvirtd log (tail):\n%s", tail(d.log.String(), 30))
		}
		if err := d.stop(); err != nil {
			t.Errorf("stop libvirtd: %v", err)
		}
	})
	if !socketAnswers(libvirtSocketRO) {
		t.Fatalf("libvirtd serves %s but not the read-only socket %s", libvirtSocketRW, libvirtSocketRO)
	}
	return &libvirtEnv{libvirtd: d}
}

// startLibvirtd starts libvirtd with QEMU running as root and returns once
// its QEMU driver is up; the caller stops it.
//
// QEMU runs as root: /dev/kvm is root-only on these hosts, and when the
// QEMU user cannot open it libvirt 9.0 finds its capability cache invalid
// on every lookup ("KVM was enabled when probing ..., but it is not
// available now", virQEMUCapsIsValid in src/qemu/qemu_capabilities.c) and
// probes QEMU again each time, which makes one domain start take a minute
// or more. The QEMU driver reads qemu.conf once, while libvirtd initialises
// its drivers, which it does after its socket already accepts connections
// (clients are served once the drivers are up). So qemu.conf is restored
// only after a call through the QEMU driver has been answered: restored at
// the first answer of the socket, a loaded machine let the driver read the
// stock file and run QEMU as libvirt-qemu, which then could not open the
// test's images.
func startLibvirtd(t *testing.T) *daemon {
	t.Helper()
	restore := swapFile(t, libvirtQEMUConf, "# fspair e2e test: written while libvirtd starts, then restored\nuser = \"root\"\ngroup = \"root\"\n")
	d := startDaemon(t, "libvirtd", libvirtSocketRW)
	if _, err := virsh(context.Background(), "uri"); err != nil {
		d.stop()
		t.Fatalf("libvirtd does not open %s: %v\nlibvirtd log:\n%s", libvirtURI, err, tail(d.log.String(), 30))
	}
	if err := restore(); err != nil {
		d.stop()
		t.Fatal(err)
	}
	return d
}

// swapFile replaces path with content and returns a function that puts the
// old file back (or removes path if there was none). t.Cleanup calls it too,
// so a failing test restores the file; calls after the first do nothing.
func swapFile(t *testing.T, path, content string) func() error {
	t.Helper()
	old, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read %s: %v", path, err)
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	var once sync.Once
	var rerr error
	restore := func() error {
		once.Do(func() {
			if existed {
				rerr = os.WriteFile(path, old, mode)
			} else {
				rerr = os.Remove(path)
			}
			if rerr != nil {
				rerr = fmt.Errorf("restore %s: %w", path, rerr)
			}
		})
		return rerr
	}
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Error(err)
		}
	})
	return restore
}

// socketAnswers reports whether something accepts connections on a UNIX
// socket. A socket file alone proves nothing: a killed daemon leaves it.
func socketAnswers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// daemon is a libvirt daemon the test started in the foreground.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  *logBuffer
	done chan struct{} // closed when the process has been reaped
	err  error         // its exit status, once done
}

// startDaemon starts name in the foreground and waits until it accepts
// connections on socket.
func startDaemon(t *testing.T, name, socket string) *daemon {
	t.Helper()
	d := &daemon{name: name, log: &logBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(name)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	// Should the test process die (go test -timeout), the daemon goes
	// with it. The signal follows the exit of the thread that forked,
	// and the Go runtime ends threads only when a goroutine locked to
	// one exits, which nothing in this test does.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	start := time.Now()
	for !socketAnswers(socket) {
		select {
		case <-d.done:
			t.Fatalf("%s exited at start (%v); its log:\n%s", name, d.err, d.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > 30*time.Second {
			d.stop()
			t.Fatalf("%s did not listen on %s within 30s; its log:\n%s", name, socket, d.log.String())
		}
	}
	t.Logf("started %s (pid %d), listening after %.1fs", name, d.cmd.Process.Pid, time.Since(start).Seconds())
	return d
}

// stop ends the daemon with SIGTERM (SIGKILL after 15s) and waits for it.
// Stopping a stopped daemon does nothing.
func (d *daemon) stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	d.cmd.Process.Kill()
	<-d.done
	return fmt.Errorf("%s did not exit within 15s of SIGTERM; killed; log:\n%s", d.name, tail(d.log.String(), 20))
}

// virsh runs virsh on the system URI. The first domain a fresh libvirtd
// starts waits for it to probe QEMU's capabilities whenever its cache is
// stale, which runs QEMU under TCG: over 60 s on this 2-core machine with
// two guests running beside it. 3 minutes covers that.
func virsh(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-c", libvirtURI}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// domainDisk is one file-backed virtio disk of a test domain.
type domainDisk struct {
	target, file, format, cache, io, discard string
}

// domain is a running transient libvirt domain.
type domain struct {
	name, uuid string
	console    string // ttyS0, the kernel console, logged to a file
	control    string // ttyS1, the lab control channel, on a UNIX socket
	destroyed  bool
}

// createDomain starts a transient domain (virsh create): TCG, 512 MiB, one
// vCPU, direct kernel boot of the lab kit, no network, no graphics, the
// disks given, and guestFS overrides by target in fspair metadata. Cleanup
// destroys it.
func createDomain(t *testing.T, l *lab.Lab, name string, disks []domainDisk, guestFS map[string]string) *domain {
	t.Helper()
	dir := filepath.Join(l.Dir, "libvirt-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// libvirt's DAC security driver hands the kernel and initramfs to the
	// QEMU user while the domain runs (libvirt 9.0 chowns them when QEMU
	// runs as libvirt-qemu, as with a stock qemu.conf); copies keep the
	// shared kit cache out of that.
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.img")
	for src, dst := range map[string]string{l.Kit.Kernel: kernel, l.Kit.Initramfs: initrd} {
		if err := copyFile(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	d := &domain{name: name, console: filepath.Join(dir, "console.log"), control: filepath.Join(dir, "control.sock")}

	var b strings.Builder
	x := xmlEscape
	fmt.Fprintf(&b, "<domain type='qemu'>\n  <name>%s</name>\n", x(name))
	b.WriteString("  <memory unit='MiB'>512</memory>\n  <vcpu>1</vcpu>\n")
	// Operator metadata (https://libvirt.org/formatdomain.html#general-metadata).
	b.WriteString("  <metadata>\n    <fspair:disks xmlns:fspair='https://fspair.dev/xmlns/libvirt/1'>\n")
	for target, gfs := range guestFS {
		fmt.Fprintf(&b, "      <fspair:disk target='%s' guest_fs='%s'/>\n", x(target), x(gfs))
	}
	b.WriteString("    </fspair:disks>\n  </metadata>\n")
	fmt.Fprintf(&b, "  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n    <kernel>%s</kernel>\n    <initrd>%s</initrd>\n",
		x(kernel), x(initrd))
	b.WriteString("    <cmdline>console=ttyS0 panic=-1 quiet</cmdline>\n  </os>\n")
	b.WriteString("  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>destroy</on_reboot>\n  <on_crash>destroy</on_crash>\n")
	b.WriteString("  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n")
	for _, dk := range disks {
		fmt.Fprintf(&b, "    <disk type='file' device='disk'>\n      <driver name='qemu' type='%s' cache='%s' io='%s'", x(dk.format), x(dk.cache), x(dk.io))
		if dk.discard != "" {
			fmt.Fprintf(&b, " discard='%s'", x(dk.discard))
		}
		fmt.Fprintf(&b, "/>\n      <source file='%s'/>\n      <target dev='%s' bus='virtio'/>\n      <serial>fspair-%s</serial>\n    </disk>\n",
			x(dk.file), x(dk.target), x(dk.target))
	}
	b.WriteString("    <controller type='usb' model='none'/>\n")
	fmt.Fprintf(&b, "    <serial type='file'>\n      <source path='%s'/>\n      <target port='0'/>\n    </serial>\n", x(d.console))
	fmt.Fprintf(&b, "    <serial type='unix'>\n      <source mode='bind' path='%s'/>\n      <target port='1'/>\n    </serial>\n", x(d.control))
	b.WriteString("    <memballoon model='none'/>\n  </devices>\n</domain>\n")

	xmlPath := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(xmlPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Registered before the create: a create that timed out on our side
	// may still start the domain in libvirtd, and its QEMU must not
	// outlive the test.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("guest console (tail):\n%s", tailFile(d.console, 30))
			t.Logf("QEMU log (tail):\n%s", tailFile("/var/log/libvirt/qemu/"+name+".log", 20))
		}
		d.destroy(t)
		os.Remove("/var/log/libvirt/qemu/" + name + ".log")
	})
	if _, err := virsh(ctx, "create", xmlPath); err != nil {
		t.Fatalf("%v\ndomain XML:\n%s", err, b.String())
	}
	out, err := virsh(ctx, "domuuid", name)
	if err != nil {
		t.Fatal(err)
	}
	d.uuid = strings.TrimSpace(out)
	return d
}

// destroy stops the domain's QEMU. If libvirtd is gone it kills the QEMU
// process named in the driver's pid file, so that the lab can unmount the
// host file system.
func (d *domain) destroy(t *testing.T) {
	t.Helper()
	if d.destroyed {
		return
	}
	d.destroyed = true
	pid := readPIDFile(filepath.Join(libvirtPIDDir, d.name+".pid"))
	_, err := virsh(context.Background(), "destroy", d.name)
	if err == nil {
		return
	}
	if pid > 0 && processNamed(pid, "guest="+d.name) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("%v; killed its QEMU (pid %d)", err, pid)
		return
	}
	t.Errorf("%v", err)
}

func readPIDFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// processNamed reports whether process pid has s in its command line.
func processNamed(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

func xmlEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '\'':
			b.WriteString("&apos;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return tail(string(b), n)
}

// readyGuest dials the domain's control channel and waits up to 90s for the
// guest to answer on it; on failure the test ends with the console's tail.
func readyGuest(ctx context.Context, t *testing.T, dom *domain) *guestChannel {
	t.Helper()
	g, err := dialGuest(ctx, dom.control)
	if err != nil {
		t.Fatal(err)
	}
	readyCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	waited, err := g.waitReady(readyCtx)
	cancel()
	if err != nil {
		g.close()
		t.Fatalf("guest control channel: %v\nguest console (tail):\n%s", err, tailFile(dom.console, 20))
	}
	t.Logf("guest control channel answered after %.1fs", waited.Seconds())
	return g
}

// guestChannel speaks the lab control protocol (tests/lab/lab-ctl.sh) to
// the guest's second serial port, which the domain exposes on a UNIX socket.
type guestChannel struct {
	conn  net.Conn
	lines chan string
	seq   int
}

func dialGuest(ctx context.Context, path string) (*guestChannel, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to guest control channel: %w", err)
	}
	g := &guestChannel{conn: c, lines: make(chan string, 1024)}
	go func() {
		defer close(g.lines)
		sc := bufio.NewScanner(c)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			g.lines <- strings.TrimRight(sc.Text(), "\r")
		}
	}()
	return g, nil
}

func (g *guestChannel) close() { g.conn.Close() }

// send writes one request and returns its id.
func (g *guestChannel) send(script string, limit int) (string, error) {
	g.seq++
	id := fmt.Sprintf("lv%d", g.seq)
	_, err := fmt.Fprintf(g.conn, "LAB-RUN %s %d %s\n", id, limit, base64.StdEncoding.EncodeToString([]byte(script)))
	return id, err
}

// waitReady sends a no-op request every second until one is answered: the
// guest's READY line may have gone out before the test connected, and
// requests sent before the control shell ran are lost or run late, which
// is harmless for a no-op.
func (g *guestChannel) waitReady(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	for {
		if _, err := g.send("true", 10); err != nil {
			return 0, fmt.Errorf("send to guest: %w", err)
		}
		tick := time.After(time.Second)
	wait:
		for {
			select {
			case line, ok := <-g.lines:
				if !ok {
					return 0, errors.New("guest control channel closed")
				}
				if strings.HasPrefix(line, "@@LAB-END lv") {
					return time.Since(start), nil
				}
			case <-tick:
				break wait
			case <-ctx.Done():
				return 0, fmt.Errorf("guest control shell did not answer: %w", ctx.Err())
			}
		}
	}
}

// run runs a shell script in the guest and returns its output and status.
func (g *guestChannel) run(ctx context.Context, script string, limit int) (string, int, error) {
	id, err := g.send(script, limit)
	if err != nil {
		return "", -1, fmt.Errorf("send to guest: %w", err)
	}
	begin, end := "@@LAB-BEGIN "+id+"@@", "@@LAB-END "+id+" "
	var body strings.Builder
	in := false
	for {
		select {
		case line, ok := <-g.lines:
			if !ok {
				return "", -1, errors.New("guest control channel closed")
			}
			switch {
			case line == begin:
				in = true
			case in && strings.HasPrefix(line, end):
				rc, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(line, end), "@@"))
				if err != nil {
					return "", -1, fmt.Errorf("bad end line %q", line)
				}
				out, err := base64.StdEncoding.DecodeString(body.String())
				if err != nil {
					return body.String(), rc, fmt.Errorf("decode guest output: %w", err)
				}
				return string(out), rc, nil
			case in:
				body.WriteString(line)
			}
		case <-ctx.Done():
			return body.String(), -1, fmt.Errorf("guest command %s: %w", id, ctx.Err())
		}
	}
}
