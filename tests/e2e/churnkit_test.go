package e2e

// Pieces of the reliability tests (reliability_test.go) and the soak
// (soak_test.go, build tag soak) that report errors instead of failing the
// test at once, so that a long run can count what went wrong and go on.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// noKeepAlive closes each scrape's connection, so that the exporter's
// open descriptors can be counted exactly between scrapes.
var noKeepAlive = &http.Transport{DisableKeepAlives: true}

// fetch scrapes url once, with a deadline, and returns the parsed families
// and how long the scrape took.
func fetch(url string) (scrape, time.Duration, error) {
	c := http.Client{Timeout: 5 * time.Second, Transport: noKeepAlive}
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		return nil, time.Since(start), fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		return nil, took, fmt.Errorf("read scrape: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, took, fmt.Errorf("scrape %s: HTTP %d: %s", url, resp.StatusCode, truncated(string(body), 200))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, took, fmt.Errorf("parse scrape: %w", err)
	}
	return fams, took, nil
}

func truncated(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// get is scrape.value without a test: the value of the one series matching
// (0 if none), or an error if several match.
func (s scrape) get(name string, want map[string]string) (float64, error) {
	ms := s.series(name, want)
	switch {
	case len(ms) > 1:
		return 0, fmt.Errorf("%s%v: %d series match, want one", name, want, len(ms))
	case len(ms) == 0:
		return 0, nil
	}
	m := ms[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), nil
	case m.Gauge != nil:
		return m.Gauge.GetValue(), nil
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), nil
	}
	return 0, nil
}

// sum adds up every series of a family that matches (counters and gauges).
func (s scrape) sum(name string, want map[string]string) float64 {
	total := 0.0
	for _, m := range s.series(name, want) {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}

// watcher scrapes an exporter on behalf of a test and checks, on every
// scrape, that no counter of the watched disks went down: every counter
// family, and every histogram's count and buckets (not its sum: seek
// distances are signed). A disk's counters may start again from zero only
// when the watcher is told (reset), as when the exporter restarts.
type watcher struct {
	url     string
	disks   []string // source_file values watched
	last    map[string]float64
	scrapes int
	slowest time.Duration
	slow    int      // scrapes that took a second or more
	backs   []string // counters that went down, described
}

func newWatcher(url string, disks ...string) *watcher {
	return &watcher{url: url, disks: disks, last: map[string]float64{}}
}

// reset points the watcher at a new exporter, whose counters start afresh.
func (w *watcher) reset(url string) {
	w.url = url
	w.last = map[string]float64{}
}

// get scrapes once and checks the watched counters.
func (w *watcher) get() (scrape, error) {
	s, took, err := fetch(w.url)
	if err != nil {
		return nil, err
	}
	w.scrapes++
	w.slowest = max(w.slowest, took)
	if took >= time.Second {
		w.slow++
	}
	w.observe(s)
	return s, nil
}

func (w *watcher) observe(s scrape) {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := s[name]
		for _, m := range f.GetMetric() {
			file := labelsOf(m)["source_file"]
			watched := false
			for _, d := range w.disks {
				watched = watched || file == d
			}
			if !watched {
				continue
			}
			key := name + seriesKey(m)
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				w.check(key, m.GetCounter().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				w.check(key+"#count", float64(h.GetSampleCount()))
				for _, b := range h.GetBucket() {
					w.check(fmt.Sprintf("%s#le=%g", key, b.GetUpperBound()), float64(b.GetCumulativeCount()))
				}
			}
		}
	}
}

func (w *watcher) check(key string, v float64) {
	if prev, ok := w.last[key]; ok && v < prev && len(w.backs) < 20 {
		w.backs = append(w.backs, fmt.Sprintf("%s went from %v to %v", key, prev, v))
	}
	w.last[key] = v
}

// seriesKey renders a series' labels in a fixed order.
func seriesKey(m *dto.Metric) string {
	l := labelsOf(m)
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, l[k])
	}
	b.WriteByte('}')
	return b.String()
}

// until scrapes every 100ms until cond holds or timeout passes, and
// returns the scrape that satisfied it and how long it took.
func (w *watcher) until(timeout time.Duration, what string, cond func(scrape) bool) (scrape, time.Duration, error) {
	start := time.Now()
	for {
		s, err := w.get()
		if err != nil {
			return nil, time.Since(start), err
		}
		if cond(s) {
			return s, time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return s, time.Since(start), fmt.Errorf("waited %s for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pausedVM is a QEMU that runs no guest code (-S): a VM whose block layer
// the test drives over QMP (HMP qemu-io), cheap enough to start and stop
// many times while a real guest runs beside it.
type pausedVM struct {
	name   string
	cmd    *exec.Cmd
	q      *qmpConn
	exited chan struct{}
	log    *logBuffer
}

// startPaused starts a paused QEMU named name with its QMP socket at sock
// and the extra arguments (drives), and connects to QMP.
func startPaused(sock, name string, args ...string) (*pausedVM, error) {
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("qemu-system-x86_64 not found (install qemu-system-x86): %w", err)
	}
	all := append([]string{"-name", "guest=" + name, "-accel", "tcg", "-nographic", "-S", "-nodefaults",
		"-monitor", "none", "-serial", "none", "-qmp", "unix:" + sock + ",server=on,wait=off"}, args...)
	v := &pausedVM{name: name, cmd: exec.Command(bin, all...), exited: make(chan struct{}), log: &logBuffer{}}
	v.cmd.Stdout, v.cmd.Stderr = v.log, v.log
	// Should the test die, QEMU goes with it.
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu %s: %w", name, err)
	}
	go func() { v.cmd.Wait(); close(v.exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if conn, err := net.Dial("unix", sock); err == nil {
			v.q = &qmpConn{conn: conn, r: bufio.NewReader(conn)}
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := v.q.r.ReadBytes('\n'); err != nil { // the greeting
				v.kill()
				return nil, fmt.Errorf("qemu %s: QMP greeting: %w", name, err)
			}
			if _, err := v.q.call("qmp_capabilities", nil); err != nil {
				v.kill()
				return nil, err
			}
			return v, nil
		}
		select {
		case <-v.exited:
			return nil, fmt.Errorf("qemu %s exited: %v: %s", name, v.cmd.ProcessState, v.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			v.kill()
			return nil, fmt.Errorf("qemu %s did not open %s within 20s: %s", name, sock, v.log.String())
		}
	}
}

func (v *pausedVM) pid() int { return v.cmd.Process.Pid }

// write has QEMU write size bytes at off through the block node or device
// dev (HMP qemu-io), one request.
func (v *pausedVM) write(dev string, off, size int64) error {
	return v.hmp(fmt.Sprintf(`qemu-io %s "write -P 0x5a %d %d"`, dev, off, size))
}

// hmp runs a human monitor command that prints nothing on success.
func (v *pausedVM) hmp(line string) error {
	raw, err := v.q.call("human-monitor-command", map[string]any{"command-line": line})
	if err != nil {
		return err
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("%s: %w", line, err)
	}
	if strings.TrimSpace(out) != "" {
		return fmt.Errorf("%s: %s", line, strings.TrimSpace(out))
	}
	return nil
}

// stop quits QEMU over QMP and waits for it; kills it after 10s.
func (v *pausedVM) stop() error {
	select {
	case <-v.exited:
		return nil
	default:
	}
	_, qerr := v.q.call("quit", nil)
	v.q.conn.Close()
	select {
	case <-v.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	v.kill()
	return fmt.Errorf("qemu %s did not quit within 10s (quit: %v); killed", v.name, qerr)
}

func (v *pausedVM) kill() {
	v.cmd.Process.Kill()
	<-v.exited
	if v.q != nil {
		v.q.conn.Close()
	}
}

// call runs one QMP command and returns its result, skipping events.
func (q *qmpConn) call(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	q.conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := json.NewEncoder(q.conn).Encode(req); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct{ Desc string }
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("qmp %s: %s", cmd, resp.Error.Desc)
		}
		if resp.Return != nil {
			return resp.Return, nil
		}
	}
}

// sparseImage creates a sparse raw image of size bytes.
func sparseImage(p string, size int64) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// cycleConfig is one short-lived VM of a churn run.
type cycleConfig struct {
	dir     string // where its image and QMP socket go
	name    string // its -name guest=, unique per cycle
	writes  int    // requests it writes
	qcow2   bool   // a qcow2 image (metadata preallocated) instead of a raw one
	hotplug bool   // also hot-plug a second image over QMP, write to it and unplug it
	timeout time.Duration
}

// cycleResult is what a cycle measured.
type cycleResult struct {
	appeared time.Duration // from QEMU's start until the disk was exported
	gone     time.Duration // from QEMU's exit until its series were gone
}

// churnWriteSize is the size of each write of a churn cycle.
const churnWriteSize = 64 << 10

// runCycle starts a paused QEMU on a fresh image file, waits until the
// exporter shows the disk, writes c.writes requests through QEMU's block
// layer and checks that the exporter counted exactly those (no request lost
// or counted twice), optionally does the same for a disk hot-plugged with
// blockdev-add and removed with blockdev-del, quits QEMU and waits until
// every series of the disk is gone. Nothing is left behind, whatever
// fails.
func runCycle(w *watcher, c cycleConfig) (res cycleResult, err error) {
	img := filepath.Join(c.dir, c.name+".raw")
	sock := filepath.Join(c.dir, c.name+".qmp")
	format := "raw"
	if c.qcow2 {
		// Metadata preallocated: each write is one data request, and
		// the exporter hands the image's metadata clusters to the
		// probes (format_clusters), which must go with the disk.
		img, format = filepath.Join(c.dir, c.name+".qcow2"), "qcow2"
		out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-o", "preallocation=metadata", img, "64M").CombinedOutput()
		if err != nil {
			return res, fmt.Errorf("qemu-img create %s: %v: %s", img, err, out)
		}
	} else if err := sparseImage(img, 64<<20); err != nil {
		return res, err
	}
	defer os.Remove(img)
	defer os.Remove(sock)
	start := time.Now()
	vm, err := startPaused(sock, c.name, "-drive", "file="+img+",if=virtio,format="+format+",cache=none,aio=native")
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := vm.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	has := func(file string) func(scrape) bool {
		return func(s scrape) bool {
			return len(s.series("fspair_disk_info", map[string]string{"source_file": file})) == 1
		}
	}
	if _, _, err := w.until(c.timeout, "disk of "+c.name, has(img)); err != nil {
		return res, err
	}
	res.appeared = time.Since(start)
	if err := writeAndCount(w, vm, "virtio0", img, c.writes, c.timeout); err != nil {
		return res, fmt.Errorf("%s: %w", c.name, err)
	}
	if c.hotplug {
		hot := filepath.Join(c.dir, c.name+"-hot.raw")
		if err := sparseImage(hot, 16<<20); err != nil {
			return res, err
		}
		defer os.Remove(hot)
		if _, err := vm.q.call("blockdev-add", map[string]any{
			"driver": "raw", "node-name": "hot0",
			"file": map[string]any{"driver": "file", "filename": hot, "cache": map[string]any{"direct": true}, "aio": "native"},
		}); err != nil {
			return res, err
		}
		if _, _, err := w.until(c.timeout, "hot-plugged disk of "+c.name, has(hot)); err != nil {
			return res, err
		}
		if err := writeAndCount(w, vm, "hot0", hot, c.writes, c.timeout); err != nil {
			return res, fmt.Errorf("%s hot-plugged: %w", c.name, err)
		}
		if _, err := vm.q.call("blockdev-del", map[string]any{"node-name": "hot0"}); err != nil {
			return res, err
		}
		if _, _, err := w.until(c.timeout, "unplugged disk of "+c.name+" to go", func(s scrape) bool { return !has(hot)(s) }); err != nil {
			return res, err
		}
	}
	if err := vm.stop(); err != nil {
		return res, err
	}
	exited := time.Now()
	_, _, err = w.until(c.timeout, "series of "+c.name+" to go", func(s scrape) bool {
		for _, f := range s {
			for _, m := range f.GetMetric() {
				if labelsOf(m)["source_file"] == img {
					return false
				}
			}
		}
		return true
	})
	res.gone = time.Since(exited)
	return res, err
}

// writeAndCount writes n requests to dev and checks that the exporter
// counts exactly n writes of n*churnWriteSize bytes on file, also a
// little later.
func writeAndCount(w *watcher, vm *pausedVM, dev, file string, n int, timeout time.Duration) error {
	k := map[string]string{"source_file": file, "op": "write"}
	s, err := w.get()
	if err != nil {
		return err
	}
	r0, err := s.get("fspair_disk_requests_total", k)
	if err != nil {
		return err
	}
	b0, _ := s.get("fspair_disk_bytes_total", k)
	for i := range n {
		if err := vm.write(dev, int64(i)*churnWriteSize, churnWriteSize); err != nil {
			return err
		}
	}
	counted := func(s scrape) (float64, float64) {
		r, _ := s.get("fspair_disk_requests_total", k)
		b, _ := s.get("fspair_disk_bytes_total", k)
		return r - r0, b - b0
	}
	if _, _, err := w.until(timeout, fmt.Sprintf("%d writes on %s counted", n, filepath.Base(file)), func(s scrape) bool {
		r, _ := counted(s)
		return r >= float64(n)
	}); err != nil {
		return err
	}
	// Settle, then the exact figures: more would be double counts.
	time.Sleep(300 * time.Millisecond)
	if s, err = w.get(); err != nil {
		return err
	}
	if r, b := counted(s); r != float64(n) || b != float64(n*churnWriteSize) {
		return fmt.Errorf("%s: %v writes of %v bytes counted, want %d of %d", filepath.Base(file), r, b, n, n*churnWriteSize)
	}
	return nil
}

// procSample is what /proc says of a process.
type procSample struct {
	rssKiB, hwmKiB int64 // VmRSS, VmHWM
	threads        int
	fds            int
}

// readProc reads a process's memory, threads and open descriptors.
func readProc(pid int) (procSample, error) {
	var p procSample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			p.rssKiB = n
		case "VmHWM":
			p.hwmKiB = n
		case "Threads":
			p.threads = int(n)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return p, err
	}
	p.fds = len(fds)
	return p, nil
}

// bpfIDs lists the ids of the BPF maps and programs a process holds
// descriptors of, from the map_id and prog_id lines of its fdinfo.
func bpfIDs(pid int) (maps, progs []int, err error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			id, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				continue
			}
			switch k {
			case "map_id":
				maps = append(maps, id)
			case "prog_id":
				progs = append(progs, id)
			}
		}
	}
	// A map both BPF objects share is held through more than one
	// descriptor.
	return slices.Compact(slices.Sorted(slices.Values(maps))), slices.Compact(slices.Sorted(slices.Values(progs))), nil
}

// hashMaps are the exporter's BPF hash maps whose entries the exporter
// adds and removes as disks come and go (bpf/disk.bpf.c, bpf/host.bpf.c);
// the LRU maps bound themselves and the arrays never change size.
var hashMaps = []string{"disk_by_inode", "vmm_tgids", "format_clusters", "host_devices", "btrfs_devices", "flush_windows", "aio_calls"}

// mapEntries counts the entries of the named hash maps among ids.
func mapEntries(ids []int) (map[string]int, error) {
	want := map[string]bool{}
	for _, n := range hashMaps {
		want[n] = true
	}
	out := map[string]int{}
	for _, id := range ids {
		raw, err := exec.Command("bpftool", "-j", "map", "show", "id", strconv.Itoa(id)).Output()
		if err != nil {
			return nil, fmt.Errorf("bpftool map show id %d: %w", id, err)
		}
		var info struct{ Name string }
		if err := json.Unmarshal(raw, &info); err != nil {
			return nil, fmt.Errorf("bpftool map show id %d: %w", id, err)
		}
		if !want[info.Name] {
			continue
		}
		raw, err = exec.Command("bpftool", "-j", "map", "dump", "id", strconv.Itoa(id)).Output()
		if err != nil {
			return nil, fmt.Errorf("bpftool map dump id %d: %w", id, err)
		}
		var entries []json.RawMessage
		if err := json.Unmarshal(raw, &entries); err != nil {
			return nil, fmt.Errorf("bpftool map dump id %d: %w", id, err)
		}
		out[info.Name] += len(entries)
	}
	return out, nil
}

// progExists reports whether the kernel still has a BPF program of that id.
func progExists(id int) bool {
	return exec.Command("bpftool", "prog", "show", "id", strconv.Itoa(id)).Run() == nil
}

// runningExporter is an exporter runExporter started, and when it exited.
type runningExporter struct {
	*exporter
	exited chan struct{} // closed once the process has been reaped
}

// stop ends the exporter with SIGTERM, as systemd stops it, and returns
// its exit code and how long it took; it kills it after 15s.
func (e *runningExporter) stop() (int, time.Duration, error) {
	start := time.Now()
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return -1, 0, err
	}
	select {
	case <-e.exited:
		return e.cmd.ProcessState.ExitCode(), time.Since(start), nil
	case <-time.After(15 * time.Second):
		e.cmd.Process.Kill()
		<-e.exited
		return -1, time.Since(start), errors.New("exporter did not exit within 15s of SIGTERM; killed")
	}
}

// logErrors returns the exporter's log lines at level error.
func (e *exporter) logErrors() []string {
	return e.grep("level=ERROR")
}

// runExporter runs the exporter with exactly args (besides the listen
// address and debug logging) until the test ends, and waits until it
// serves. Unlike startExporterWith it sets no discovery interval, which
// kingpin would refuse to see twice.
func runExporter(t *testing.T, args ...string) *runningExporter {
	t.Helper()
	return startProcess(t, nil, nil, args...)
}

// hungListener listens on the UNIX socket sock, accepts connections and
// never answers, as a hung daemon does, until the test ends.
func hungListener(t *testing.T, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			go io.Copy(io.Discard, c) // read, never answer
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
	})
}

// startFUSEExport exports the raw image backing as a regular file on the
// existing file mountpoint with qemu-storage-daemon's FUSE export (QEMU
// docs, qemu-storage-daemon --export type=fuse), and returns the server
// process. When the test ends the server is resumed and stopped, which
// unmounts the export.
func startFUSEExport(t *testing.T, qsd, backing, mountpoint string) *os.Process {
	t.Helper()
	cmd := exec.Command(qsd,
		"--blockdev", "driver=file,node-name=file0,filename="+backing,
		"--blockdev", "driver=raw,node-name=fmt0,file=file0",
		"--export", "type=fuse,id=exp0,node-name=fmt0,mountpoint="+mountpoint)
	log := &logBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if mounted(mountpoint) {
			if out, err := exec.Command("umount", "-l", mountpoint).CombinedOutput(); err != nil {
				t.Errorf("unmount FUSE export %s: %v: %s", mountpoint, err, out)
			}
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for !mounted(mountpoint) {
		select {
		case <-exited:
			t.Fatalf("qemu-storage-daemon exited: %v: %s", cmd.ProcessState, log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("FUSE export on %s not mounted within 15s: %s", mountpoint, log.String())
		}
	}
	return cmd.Process
}

// mounted reports whether something is mounted on path (mountinfo's fifth
// field, with spaces escaped as \040; test paths have none).
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// runReplaceCycle is a cycle whose image is replaced while its VM runs: a
// paused QEMU writes n requests, a new file is renamed over its image
// path, it writes n more; the exporter must count all 2n on the one disk
// (the file the VM has open) and drop the disk when QEMU is gone.
func runReplaceCycle(w *watcher, c cycleConfig) (res cycleResult, err error) {
	img := filepath.Join(c.dir, c.name+".raw")
	sock := filepath.Join(c.dir, c.name+".qmp")
	if err := sparseImage(img, 128<<20); err != nil {
		return res, err
	}
	defer os.Remove(img)
	defer os.Remove(sock)
	start := time.Now()
	vm, err := startPaused(sock, c.name, "-drive", "file="+img+",if=virtio,format=raw,cache=none,aio=native")
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := vm.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	disk := map[string]string{"domain": c.name, "source_file": img}
	if _, _, err := w.until(c.timeout, "disk of "+c.name, func(s scrape) bool {
		return len(s.series("fspair_disk_info", disk)) == 1
	}); err != nil {
		return res, err
	}
	res.appeared = time.Since(start)
	if err := writeCount(w, vm, "virtio0", disk, 0, c.writes); err != nil {
		return res, fmt.Errorf("%s: %w", c.name, err)
	}
	repl := img + ".new"
	if err := sparseImage(repl, 64<<20); err != nil {
		return res, err
	}
	if err := os.Rename(repl, img); err != nil {
		return res, err
	}
	if err := writeCount(w, vm, "virtio0", disk, c.writes, c.writes); err != nil {
		return res, fmt.Errorf("%s after its image was replaced: %w", c.name, err)
	}
	// Still the 128 MiB file the VM has, not the 64 MiB one at the path.
	s, err := w.get()
	if err != nil {
		return res, err
	}
	if size, _ := s.get("fspair_disk_virtual_size_bytes", disk); size != 128<<20 {
		return res, fmt.Errorf("%s after its image was replaced: virtual size %v, want %d (the file the VM has open)", c.name, size, 128<<20)
	}
	if err := vm.stop(); err != nil {
		return res, err
	}
	exited := time.Now()
	_, _, err = w.until(c.timeout, "series of "+c.name+" to go", func(s scrape) bool {
		return len(s.series("fspair_disk_info", disk)) == 0
	})
	res.gone = time.Since(exited)
	return res, err
}
