package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fspair/fspair/tests/lab"
)

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
	lv := ensureLibvirt(t, l)

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
	dom := createDomain(t, l, name, []lab.DomainDisk{
		{Target: "vda", File: vda, Format: "raw", Cache: "none", IO: "native", Discard: "unmap"},
		{Target: "vdb", File: vdb, Format: "qcow2", Cache: "writeback", IO: "threads"},
	}, map[string]string{"vdb": "xfs"})
	t.Logf("domain %s (uuid %s) started %.1fs into the test", name, dom.UUID, time.Since(began).Seconds())

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
		w["domain"], w["uuid"], w["discovery"] = name, dom.UUID, "libvirt"
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
	defer g.Close()
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
	out, rc, err := g.Run(jobCtx, script)
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
	g.Close()
	if err := dom.Destroy(); err != nil {
		t.Error(err)
	}
	_, took = ex.waitFor(t, 10*time.Second, "series of destroyed "+name+" to go", func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"domain": name})) == 0 &&
			len(s.series("fspair_disk_requests_total", map[string]string{"domain": name})) == 0
	})
	t.Logf("series of %s gone %.1fs after destroy", name, took.Seconds())

	// libvirtd stops: the source goes down, errors count, scrapes stay fast.
	t.Run("libvirtd_stopped", func(t *testing.T) {
		if lv.Libvirtd == nil {
			t.Skip("libvirtd ran before the test; stopping a daemon the test did not start is not its business")
		}
		s, _ := ex.timedScrape(t)
		errs0 := s.value(t, "fspair_discovery_errors_total", map[string]string{"source": "libvirt"})
		if err := lv.Libvirtd.Stop(); err != nil {
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
		if lines := ex.grep("connect to libvirt at " + lab.LibvirtSocketRO); len(lines) == 0 {
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
	if err := lab.LibvirtTools(); err != nil {
		t.Fatal(err)
	}
}

// ensureLibvirt makes sure libvirtd answers on its system sockets, starting
// virtlogd and libvirtd as the test's children if it does not
// (lab.StartLibvirt). t.Cleanup stops what it started and undoes what it
// changed.
func ensureLibvirt(t *testing.T, l *lab.Lab) *lab.Libvirt {
	t.Helper()
	lv, err := lab.StartLibvirt(l.Progress)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() && lv.Libvirtd != nil {
			t.Logf("libvirtd log (tail):\n%s", tail(lv.Libvirtd.Log(), 30))
		}
		if err := lv.Close(); err != nil {
			t.Error(err)
		}
	})
	return lv
}

// startLibvirtd starts libvirtd again, as ensureLibvirt did; the caller
// stops it.
func startLibvirtd(t *testing.T, l *lab.Lab) *lab.Daemon {
	t.Helper()
	d, err := lab.StartLibvirtd(l.Progress)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// createDomain starts a transient domain with the lab's kit
// (lab.CreateDomain). Cleanup destroys it, after logging the guest's
// console and QEMU's log if the test failed.
func createDomain(t *testing.T, l *lab.Lab, name string, disks []lab.DomainDisk, guestFS map[string]string) *lab.Domain {
	t.Helper()
	d, err := l.CreateDomain(context.Background(), name, disks, guestFS)
	// Registered whatever the create said: a create that timed out on
	// our side may still start the domain in libvirtd.
	t.Cleanup(func() {
		if d == nil {
			return
		}
		if t.Failed() {
			t.Logf("guest console (tail):\n%s", tailFile(d.Console, 30))
			t.Logf("QEMU log (tail):\n%s", tailFile(d.QEMULog, 20))
		}
		if err := d.Destroy(); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return tail(string(b), n)
}

// readyGuest waits up to 90s for the domain's guest to answer on its
// control channel; on failure the test ends with the console's tail.
func readyGuest(ctx context.Context, t *testing.T, dom *lab.Domain) *lab.Guest {
	t.Helper()
	start := time.Now()
	g, err := dom.Guest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest control channel answered after %.1fs", time.Since(start).Seconds())
	return g
}
