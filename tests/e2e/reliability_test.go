package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/alerting"
	"github.com/fspair/fspair/tests/lab"
)

// Churn figures. The discovery interval is short so that 50 cycles fit in
// a CI budget; every bound below is stated in intervals.
const (
	churnCycles   = 50
	churnWarmup   = 5 // cycles before the "before" figures are taken
	churnInterval = 500 * time.Millisecond
	churnWrites   = 8
	// A gone VM's series must be gone by the end of the discovery round
	// after it exited: at most one interval of waiting for the round to
	// start plus the round itself (a /proc scan, well under an interval
	// here), plus the scrape that sees it. Three intervals cover that
	// with room for a loaded 2-core machine.
	goneBound = 3 * churnInterval
	// rssBound is how much the exporter's resident memory may grow over
	// the 50 cycles. What 50 cycles of bookkeeping could leak is small
	// (an inventory entry with its strings is well under 10 KiB, 0.5 MiB
	// for all 50), below what RSS can tell from the garbage collector's
	// swings; descriptors, BPF map entries and goroutines are counted
	// exactly below for that. RSS is there for the gross kind, a buffer
	// kept per scrape or per round: 50 cycles make some 600 scrapes and
	// 150 discovery rounds. 8 MiB is a third of the exporter's RSS here
	// (about 26 MB), more than the Go heap's growth to its target (twice
	// the live heap, which is a few MiB) can explain.
	rssBound = 8 << 10 // KiB
)

// steadyFio is a rate-limited random read/write job on the guest's disk
// that runs in the background until it is killed; its pid goes to
// /tmp/steady.pid. 20 reads and 20 writes a second keep the TCG guest
// from taking more than its one CPU.
func steadyFio(dev string) string {
	return "fio --name=steady --filename=" + dev + " --direct=1 --ioengine=psync --rw=randrw --bs=4k --size=64m " +
		"--time_based --runtime=3600 --rate_iops=20,20 --randrepeat=0 --output=/dev/null >/tmp/steady.log 2>&1 </dev/null &\n" +
		"echo $! >/tmp/steady.pid"
}

// steadyGuest boots a lab guest named name on the raw image file (cache=none,
// aio=native) and starts steadyFio on it.
func steadyGuest(ctx context.Context, t *testing.T, l *lab.Lab, name, file string) *lab.VM {
	t.Helper()
	vm, err := l.StartVM(ctx, lab.VMConfig{Name: name, Disks: []lab.DiskConfig{
		{ID: "stay", File: file, Format: "raw", Cache: "none", AIO: "native"}}})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vm.GuestDevice(ctx, "stay")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.RunOK(ctx, steadyFio("/dev/"+dev)); err != nil {
		t.Fatal(err)
	}
	return vm
}

// TestChurn: one lab guest does steady I/O on a disk that stays, while 50
// short-lived VMs (paused QEMU processes, each on its own image file) come
// and go beside it, every third on a qcow2 image, every fifth with a disk
// hot-plugged and unplugged over QMP. Each short-lived disk must be exported while it lives, with exactly
// the writes made through it counted, and its series must be gone within
// goneBound of its QEMU's exit; the staying disk's counters never go down;
// afterwards the tracked disks, the exporter's descriptors, goroutines and
// BPF hash map entries are back where they were, and its resident memory
// within rssBound. Then the exporter is stopped with SIGTERM while the
// guest keeps writing and started again: it exits 0, its BPF programs go,
// and the new one attaches every program and reports the staying disk with
// counters starting afresh (a restart is a counter reset, which rate() and
// increase() handle) and growing.
func TestChurn(t *testing.T) {
	began := time.Now()
	ctx := context.Background()
	l := lab.ForTest(t)
	h, err := l.NewHostFS(ctx, "xfs", 1024)
	if err != nil {
		t.Fatal(err)
	}
	stay := h.Path("stay.raw")
	if err := makeDataImage(ctx, stay, "raw"); err != nil {
		t.Fatal(err)
	}
	args := []string{"--no-discovery.libvirt", "--discovery.interval=" + churnInterval.String()}
	ex := runExporter(t, args...)
	vm := steadyGuest(ctx, t, l, "churn-stay", stay)
	stayWrites := map[string]string{"source_file": stay, "op": "write"}
	w := newWatcher(ex.url, stay)
	s, _, err := w.until(20*time.Second, "the staying disk's writes", func(s scrape) bool {
		v, _ := s.get("fspair_disk_requests_total", stayWrites)
		return v > 0
	})
	if err != nil {
		t.Fatal(err)
	}
	baseline, _ := s.get("fspair_disks_tracked", nil)
	t.Logf("guest up and writing %.1fs into the test; %v disk(s) tracked", time.Since(began).Seconds(), baseline)

	pid := ex.cmd.Process.Pid
	dir := filepath.Join(h.Dir, "churn")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var appeared, gone []time.Duration
	cycle := func(i int) {
		t.Helper()
		r, err := runCycle(w, cycleConfig{dir: dir, name: fmt.Sprintf("churn-%02d", i), writes: churnWrites,
			qcow2: i%3 == 2, hotplug: i%5 == 4, timeout: 15 * time.Second})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		appeared, gone = append(appeared, r.appeared), append(gone, r.gone)
	}
	for i := range churnWarmup {
		cycle(i)
	}
	before := snapshotExporter(t, w, pid)
	cyclesStart := time.Now()
	for i := churnWarmup; i < churnWarmup+churnCycles; i++ {
		cycle(i)
	}
	cyclesTook := time.Since(cyclesStart)
	after := snapshotExporter(t, w, pid)

	slowestGone := maxOf(gone)
	t.Logf("%d cycles (%d on qcow2, %d with a hot-plug) in %.1fs; disk exported %s..%s after QEMU started; series gone %s..%s after it exited",
		churnCycles+churnWarmup, (churnCycles+churnWarmup)/3, (churnCycles+churnWarmup)/5, cyclesTook.Seconds(),
		minOf(appeared), maxOf(appeared), minOf(gone), slowestGone)
	t.Logf("before the %d cycles: %s", churnCycles, before)
	t.Logf("after them:          %s", after)
	if slowestGone > goneBound {
		t.Errorf("a gone VM's series lasted %s after its exit, want at most %s (3 discovery intervals)", slowestGone, goneBound)
	}
	if after.tracked != baseline {
		t.Errorf("fspair_disks_tracked %v after the churn, want the %v of before", after.tracked, baseline)
	}
	if after.proc.fds != before.proc.fds {
		t.Errorf("exporter holds %d descriptors after the churn, %d before: leaked files?", after.proc.fds, before.proc.fds)
	}
	// A scrape runs a goroutine per collector and one for its connection;
	// two more than before is scheduling noise, more is a leak.
	if after.goroutines > before.goroutines+2 {
		t.Errorf("go_goroutines %v after the churn, %v before", after.goroutines, before.goroutines)
	}
	// Maps keyed by disk, VMM process or request must be back where they
	// were. Those keyed by host block device (a flush window, a device's
	// counters) get an entry the first time a device is seen and keep it
	// while it exists: the churn's images share the staying disk's
	// device, so they may not grow beyond the devices the host has
	// (other VMs on the host may show a device for the first time).
	perDevice := map[string]bool{"flush_windows": true, "host_devices": true, "btrfs_devices": true}
	for name, n := range before.entries {
		switch got := after.entries[name]; {
		case perDevice[name] && got > after.entries["host_devices"]:
			t.Errorf("BPF map %s has %d entries after the churn for %d host devices", name, got, after.entries["host_devices"])
		case !perDevice[name] && got != n:
			t.Errorf("BPF map %s has %d entries after the churn, %d before", name, got, n)
		}
	}
	if before.entries["disk_by_inode"] != int(baseline) {
		t.Errorf("disk_by_inode has %d entries with %v disks tracked", before.entries["disk_by_inode"], baseline)
	}
	if grew := after.proc.rssKiB - before.proc.rssKiB; grew > rssBound {
		t.Errorf("exporter RSS grew by %d KiB over %d cycles (%d -> %d KiB), want at most %d KiB",
			grew, churnCycles, before.proc.rssKiB, after.proc.rssKiB, rssBound)
	}

	// The exporter restarted while the guest writes.
	s, err = w.get()
	if err != nil {
		t.Fatal(err)
	}
	lastWrites, _ := s.get("fspair_disk_requests_total", stayWrites)
	programs := attachedPrograms(s)
	_, progs, err := bpfIDs(pid)
	if err != nil {
		t.Fatal(err)
	}
	code, took, err := ex.stop()
	if err != nil || code != 0 {
		t.Fatalf("exporter stop: exit code %d, %v", code, err)
	}
	t.Logf("exporter exited 0 %s after SIGTERM, having counted %v writes on the staying disk", took.Round(time.Millisecond), lastWrites)
	if len(ex.grep("stopping")) == 0 {
		t.Errorf("exporter log does not say it is stopping")
	}
	if errs := ex.logErrors(); len(errs) > 0 {
		t.Errorf("exporter logged errors:\n%s", strings.Join(errs, "\n"))
	}
	// Its programs are freed once their last descriptor and link are
	// gone; the kernel frees them after an RCU grace period.
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range progs {
		for progExists(id) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if progExists(id) {
			t.Errorf("BPF program %d of the stopped exporter is still loaded", id)
		}
	}
	restarted := time.Now()
	ex2 := runExporter(t, args...)
	w.reset(ex2.url)
	s, _, err = w.until(15*time.Second, "the staying disk after the restart", func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"source_file": stay})) == 1
	})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.get("fspair_disk_requests_total", stayWrites)
	t.Logf("restarted exporter served the staying disk %.1fs after it was started, with %v writes counted", time.Since(restarted).Seconds(), first)
	if first >= lastWrites {
		t.Errorf("restarted exporter starts at %v writes, the old one ended at %v: counters should start afresh", first, lastWrites)
	}
	if got := attachedPrograms(s); strings.Join(got, ",") != strings.Join(programs, ",") {
		t.Errorf("programs attached after the restart: %v; before: %v", got, programs)
	}
	for _, m := range s.series("fspair_probe_attached", nil) {
		if m.GetGauge().GetValue() != 1 {
			t.Errorf("after the restart program %s is not attached", labelsOf(m)["program"])
		}
	}
	if _, _, err := w.until(10*time.Second, "the staying disk's writes to grow after the restart", func(s scrape) bool {
		v, _ := s.get("fspair_disk_requests_total", stayWrites)
		return v > first
	}); err != nil {
		t.Error(err)
	}
	for _, m := range s.series("fspair_scrape_collector_success", nil) {
		if m.GetGauge().GetValue() != 1 {
			t.Errorf("after the restart collector %s failed", labelsOf(m)["collector"])
		}
	}
	if errs := ex2.logErrors(); len(errs) > 0 {
		t.Errorf("restarted exporter logged errors:\n%s", strings.Join(errs, "\n"))
	}

	// The guest's I/O ran all along.
	if out, err := vm.RunOK(ctx, `kill -0 "$(cat /tmp/steady.pid)" && kill "$(cat /tmp/steady.pid)"; cat /tmp/steady.log`); err != nil {
		t.Errorf("steady fio in the guest is not running: %v: %s", err, out)
	}
	if len(w.backs) > 0 {
		t.Errorf("counters of the staying disk went down:\n%s", strings.Join(w.backs, "\n"))
	}
	t.Logf("%d scrapes, slowest %s; test took %.1fs", w.scrapes, w.slowest.Round(time.Millisecond), time.Since(began).Seconds())
}

// exporterSnapshot is the exporter's footprint at one moment.
type exporterSnapshot struct {
	proc       procSample
	goroutines float64
	tracked    float64
	entries    map[string]int // BPF hash map entries by map name
}

func (s exporterSnapshot) String() string {
	return fmt.Sprintf("RSS %d KiB, %d fds, %d threads, %v goroutines, %v disks tracked, map entries %v",
		s.proc.rssKiB, s.proc.fds, s.proc.threads, s.goroutines, s.tracked, s.entries)
}

func snapshotExporter(t *testing.T, w *watcher, pid int) exporterSnapshot {
	t.Helper()
	s, err := w.get()
	if err != nil {
		t.Fatal(err)
	}
	var snap exporterSnapshot
	snap.goroutines, _ = s.get("go_goroutines", nil)
	snap.tracked, _ = s.get("fspair_disks_tracked", nil)
	if snap.proc, err = readProc(pid); err != nil {
		t.Fatal(err)
	}
	// The fewest goroutines and descriptors over two discovery rounds: a
	// round, an image refresh or a scrape under way holds a few of each
	// for a moment (CI saw 15 goroutines after the churn against 12
	// before in one sample; the server side of the last scrape's
	// connection may not be closed yet when the client has read it),
	// while leaked ones stay in every sample.
	for range 4 {
		time.Sleep(churnInterval / 2)
		s, err := w.get()
		if err != nil {
			t.Fatal(err)
		}
		if g, err := s.get("go_goroutines", nil); err == nil && g < snap.goroutines {
			snap.goroutines = g
		}
		p, err := readProc(pid)
		if err != nil {
			t.Fatal(err)
		}
		snap.proc.fds = min(snap.proc.fds, p.fds)
	}
	maps, _, err := bpfIDs(pid)
	if err != nil {
		t.Fatal(err)
	}
	if snap.entries, err = mapEntries(maps); err != nil {
		t.Fatal(err)
	}
	return snap
}

// attachedPrograms lists the programs a scrape reports attached.
func attachedPrograms(s scrape) []string {
	var out []string
	for _, m := range s.series("fspair_probe_attached", nil) {
		if m.GetGauge().GetValue() == 1 {
			out = append(out, labelsOf(m)["program"])
		}
	}
	sort.Strings(out)
	return out
}

func minOf(ds []time.Duration) time.Duration {
	m := time.Duration(0)
	for i, d := range ds {
		if i == 0 || d < m {
			m = d
		}
	}
	return m.Round(time.Millisecond)
}

func maxOf(ds []time.Duration) time.Duration {
	m := time.Duration(0)
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(time.Millisecond)
}

// TestImageReplaced: a new image renamed over the path of a running VM's
// image leaves the VM on its old file, and the exporter goes on following
// that file: same identity (format, guest file system, size), counters not
// reset, the VM's later writes counted on it. A second VM that opens the
// path afterwards gets the new file, a disk of its own with the new file's
// identity, and neither disk's counts leak into the other. When the first
// VM stops, its disk goes and the exporter lets go of the old file.
func TestImageReplaced(t *testing.T) {
	ctx := context.Background()
	l := lab.ForTest(t)
	h, err := l.NewHostFS(ctx, "ext4", 1024)
	if err != nil {
		t.Fatal(err)
	}
	img, repl := h.Path("vm.img"), h.Path("vm.img.new")
	if err := lab.MakeImage(ctx, img, "raw", "ext4", 128); err != nil {
		t.Fatal(err)
	}
	// Metadata preallocated: each guest write is one data write, no
	// allocation of the format's own.
	if err := makeDataImage(ctx, repl, "qcow2"); err != nil {
		t.Fatal(err)
	}
	ex := runExporter(t, "--no-discovery.libvirt", "--discovery.interval=500ms", "--image.refresh-interval=1s")
	w := newWatcher(ex.url, img)
	a, err := startPaused(filepath.Join(l.Dir, "a.qmp"), "replace-a",
		"-drive", "file="+img+",if=virtio,format=raw,cache=none,aio=native")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.stop() })
	diskA := map[string]string{"domain": "replace-a", "source_file": img}
	diskB := map[string]string{"domain": "replace-b", "source_file": img}
	identity := func(s scrape, disk map[string]string) string {
		info := s.series("fspair_disk_info", disk)
		if len(info) != 1 {
			return fmt.Sprintf("%d fspair_disk_info series", len(info))
		}
		l := labelsOf(info[0])
		size, _ := s.get("fspair_disk_virtual_size_bytes", disk)
		return fmt.Sprintf("format=%s guest_fs=%s size=%.0f", l["format"], l["guest_fs"], size)
	}
	const wantA, wantB = "format=raw guest_fs=ext4 size=134217728", "format=qcow2 guest_fs=unknown size=268435456"
	if _, _, err := w.until(15*time.Second, "VM A's disk", func(s scrape) bool { return identity(s, diskA) == wantA }); err != nil {
		s, _ := w.get()
		t.Fatalf("%v: VM A's disk is %s, want %s", err, identity(s, diskA), wantA)
	}
	writes := func(s scrape, disk map[string]string) float64 {
		v, _ := s.get("fspair_disk_requests_total", with2(disk, "op", "write"))
		return v
	}
	if err := writeCount(w, a, "virtio0", diskA, 0, churnWrites); err != nil {
		t.Fatal(err)
	}

	// Replace the image under the running VM A.
	if err := os.Rename(repl, img); err != nil {
		t.Fatal(err)
	}
	t.Logf("renamed a qcow2 image over %s while VM A runs", img)
	rounds := func(n float64) {
		t.Helper()
		s, err := w.get()
		if err != nil {
			t.Fatal(err)
		}
		r0, _ := s.get("fspair_discovery_refreshes_total", nil)
		if _, _, err := w.until(10*time.Second, "discovery rounds", func(s scrape) bool {
			r, _ := s.get("fspair_discovery_refreshes_total", nil)
			return r >= r0+n
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Enough rounds for the image refresh (1s) to have read the image
	// again too.
	rounds(4)
	s, err := w.get()
	if err != nil {
		t.Fatal(err)
	}
	if got := identity(s, diskA); got != wantA {
		t.Errorf("after the replacement VM A's disk is %s, want still %s (the file A has open)", got, wantA)
	}
	if got := writes(s, diskA); got != churnWrites {
		t.Errorf("after the replacement VM A's disk shows %v writes, want the %d made before", got, churnWrites)
	}
	if err := writeCount(w, a, "virtio0", diskA, churnWrites, churnWrites); err != nil {
		t.Errorf("VM A writing to its replaced image: %v", err)
	}

	// VM B opens the path: the new file.
	b, err := startPaused(filepath.Join(l.Dir, "b.qmp"), "replace-b",
		"-drive", "file="+img+",if=virtio,format=qcow2,cache=none,aio=native")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.stop() })
	if _, _, err := w.until(15*time.Second, "VM B's disk", func(s scrape) bool { return identity(s, diskB) == wantB }); err != nil {
		s, _ := w.get()
		t.Fatalf("%v: VM B's disk is %s, want %s", err, identity(s, diskB), wantB)
	}
	if err := writeCount(w, b, "virtio0", diskB, 0, churnWrites); err != nil {
		t.Error(err)
	}
	s, err = w.get()
	if err != nil {
		t.Fatal(err)
	}
	if got := identity(s, diskA); got != wantA {
		t.Errorf("with VM B on the new file, VM A's disk is %s, want %s", got, wantA)
	}
	if got := writes(s, diskA); got != 2*churnWrites {
		t.Errorf("VM A's disk shows %v writes, want %d: B's writes counted on it?", got, 2*churnWrites)
	}
	// Two disks on the one path, each on its own file (other VMs on the
	// host, if any, are not this test's).
	if n := len(s.series("fspair_disk_info", map[string]string{"source_file": img})); n != 2 {
		t.Errorf("%d disks exported on %s, want 2 (A's old file and B's new one)", n, img)
	}

	// A stops: its disk goes, B's stays, and the exporter no longer holds
	// A's unlinked file (whose blocks are freed only then).
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.until(goneBound, "VM A's disk to go", func(s scrape) bool {
		return len(s.series("fspair_disk_info", diskA)) == 0
	}); err != nil {
		t.Error(err)
	}
	s, err = w.get()
	if err != nil {
		t.Fatal(err)
	}
	if got := identity(s, diskB); got != wantB || writes(s, diskB) != churnWrites {
		t.Errorf("after A stopped, VM B's disk is %s with %v writes, want %s with %d", got, writes(s, diskB), wantB, churnWrites)
	}
	if held := deletedFiles(t, ex.cmd.Process.Pid); len(held) > 0 {
		t.Errorf("exporter still holds unlinked files after VM A stopped: %v", held)
	}
	if len(w.backs) > 0 {
		t.Errorf("counters went down:\n%s", strings.Join(w.backs, "\n"))
	}
}

func with2(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// writeOffset is where writeCount writes: 64 MiB into the disk, clear of
// the file system metadata at the start of the test images (a guest file
// system the writes destroyed would change the disk's identity).
const writeOffset = 64 << 20

// writeCount writes n requests through dev of vm, after the had written
// before, and checks that the disk's write count goes from had to had+n
// exactly.
func writeCount(w *watcher, vm *pausedVM, dev string, disk map[string]string, had, n int) error {
	k := with2(disk, "op", "write")
	for i := range n {
		if err := vm.write(dev, writeOffset+int64(had+i)*churnWriteSize, churnWriteSize); err != nil {
			return err
		}
	}
	want := float64(had + n)
	if _, _, err := w.until(10*time.Second, fmt.Sprintf("%v writes on %v", want, disk), func(s scrape) bool {
		v, _ := s.get("fspair_disk_requests_total", k)
		return v >= want
	}); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	s, err := w.get()
	if err != nil {
		return err
	}
	r, _ := s.get("fspair_disk_requests_total", k)
	b, _ := s.get("fspair_disk_bytes_total", k)
	if r != want || b != want*churnWriteSize {
		return fmt.Errorf("%v: %v writes of %v bytes counted, want %v of %v", disk, r, b, want, want*churnWriteSize)
	}
	return nil
}

// deletedFiles lists the unlinked files a process holds open.
func deletedFiles(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasSuffix(target, " (deleted)") {
			out = append(out, target)
		}
	}
	return out
}

// TestProbeDenied: an exporter told not to load one program
// (--probe.deny, standing in for a tracepoint or BTF the kernel lacks)
// reports that program not attached and everything else attached, serves
// its metrics, and counts what the other programs feed: a VM's writes are
// counted exactly, while the device-side counts host_rq_complete feeds stay
// at zero (an exporter beside it with every program counts them). The
// shipped alert FspairProbeNotAttached, evaluated by promtool on the
// scraped series, selects that program and no other.
func TestProbeDenied(t *testing.T) {
	const denied = "host_rq_complete" // block_rq_complete: device-side counts
	ctx := context.Background()
	l := lab.ForTest(t)
	h, err := l.NewHostFS(ctx, "xfs", 512)
	if err != nil {
		t.Fatal(err)
	}
	img := h.Path("deny.raw")
	if err := sparseImage(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	degraded := runExporter(t, "--no-discovery.libvirt", "--discovery.interval=500ms", "--probe.deny="+denied)
	full := runExporter(t, "--no-discovery.libvirt", "--discovery.interval=500ms")
	vm, err := startPaused(filepath.Join(l.Dir, "deny.qmp"), "deny",
		"-drive", "file="+img+",if=virtio,format=raw,cache=none,aio=native")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.stop() })
	disk := map[string]string{"source_file": img}
	wd, wf := newWatcher(degraded.url, img), newWatcher(full.url, img)
	for _, w := range []*watcher{wd, wf} {
		if _, _, err := w.until(15*time.Second, "the disk", hasDisk(img)); err != nil {
			t.Fatal(err)
		}
	}
	// O_DIRECT writes (cache=none) reach the device at once.
	for i := range churnWrites {
		if err := vm.write("virtio0", int64(i)*churnWriteSize, churnWriteSize); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []*watcher{wd, wf} {
		if _, _, err := w.until(10*time.Second, "the writes", func(s scrape) bool {
			v, _ := s.get("fspair_disk_requests_total", with2(disk, "op", "write"))
			return v >= churnWrites
		}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	sd, err := wd.get()
	if err != nil {
		t.Fatal(err)
	}
	sf, err := wf.get()
	if err != nil {
		t.Fatal(err)
	}
	dw := with2(disk, "op", "write")
	for name, s := range map[string]scrape{"degraded": sd, "full": sf} {
		r, _ := s.get("fspair_disk_requests_total", dw)
		b, _ := s.get("fspair_disk_bytes_total", dw)
		dev, _ := s.get("fspair_disk_device_requests_total", dw)
		t.Logf("%s exporter: %v writes, %v bytes; %v device write requests", name, r, b, dev)
		if r != churnWrites || b != churnWrites*churnWriteSize {
			t.Errorf("%s exporter: %v writes of %v bytes, want %d of %d", name, r, b, churnWrites, churnWrites*churnWriteSize)
		}
	}
	if dev, _ := sf.get("fspair_disk_device_requests_total", dw); dev < churnWrites {
		t.Errorf("exporter with every program: %v device writes for %d direct writes", dev, churnWrites)
	}
	if dev, _ := sd.get("fspair_disk_device_requests_total", dw); dev != 0 {
		t.Errorf("exporter without %s: %v device writes, want 0 (the program that counts them is not loaded)", denied, dev)
	}
	progs := sd.series("fspair_probe_attached", nil)
	if len(progs) < 10 {
		t.Fatalf("%d programs reported", len(progs))
	}
	for _, m := range progs {
		name, v := labelsOf(m)["program"], m.GetGauge().GetValue()
		if want := map[bool]float64{true: 0, false: 1}[name == denied]; v != want {
			t.Errorf("fspair_probe_attached{program=%q} = %v, want %v", name, v, want)
		}
	}
	if runs, _ := sd.get("fspair_probe_runs_total", map[string]string{"program": denied}); runs != 0 {
		t.Errorf("denied program ran %v times", runs)
	}
	for _, m := range sd.series("fspair_scrape_collector_success", nil) {
		if m.GetGauge().GetValue() != 1 {
			t.Errorf("collector %s failed with a program denied", labelsOf(m)["collector"])
		}
	}
	checkProbeAlert(t, sd, denied)
}

// checkProbeAlert evaluates the expression of the shipped alert
// FspairProbeNotAttached with promtool over the fspair_probe_attached
// series of s (as the job "fspair" would have scraped them) and checks
// that it selects exactly the program denied; and that the alert's
// runbook exists.
func checkProbeAlert(t *testing.T, s scrape, denied string) {
	t.Helper()
	const alerts = "../../rules/fspair.alerts.yml"
	file, err := alerting.ReadRuleFile(alerts)
	if err != nil {
		t.Fatalf("%s: %v", alerts, err)
	}
	expr, runbook := "", ""
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "FspairProbeNotAttached" {
				expr, runbook = r.Expr, r.Annotations["runbook_url"]
			}
		}
	}
	if expr == "" || !strings.Contains(expr, "fspair_probe_attached") {
		t.Fatalf("%s: no alert FspairProbeNotAttached on fspair_probe_attached (expr %q)", alerts, expr)
	}
	if _, err := os.Stat(filepath.Join("../../runbooks", filepath.Base(runbook))); runbook == "" || err != nil {
		t.Errorf("FspairProbeNotAttached: runbook %q: %v", runbook, err)
	}
	promtool, err := alerting.PinnedBinary("promtool")
	if err != nil {
		t.Fatal(err)
	}
	var series strings.Builder
	for _, m := range s.series("fspair_probe_attached", nil) {
		fmt.Fprintf(&series, "      - series: 'fspair_probe_attached{instance=\"host:9477\",job=\"fspair\",program=\"%s\"}'\n        values: '%v+0x20'\n",
			labelsOf(m)["program"], m.GetGauge().GetValue())
	}
	test := fmt.Sprintf(`rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
%s    promql_expr_test:
      - expr: %q
        eval_time: 15m
        exp_samples:
          - labels: 'fspair_probe_attached{instance="host:9477",job="fspair",program="%s"}'
            value: 0
`, series.String(), expr, denied)
	p := filepath.Join(t.TempDir(), "probe-alert-test.yml")
	if err := os.WriteFile(p, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", p).CombinedOutput(); err != nil {
		t.Errorf("promtool: the alert expression %q over the scraped series does not select exactly %s: %v\n%s", expr, denied, err, out)
	}
}

// TestLibvirtDownProcDiscovers: with libvirt unreachable (nothing on its
// socket, or a daemon that accepts connections and never answers), /proc
// discovery still finds a plain QEMU and its writes are counted exactly;
// fspair_discovery_source_up says libvirt is down and qemu up;
// fspair_discovery_errors_total counts libvirt's failed rounds and no
// others; and no scrape waits on libvirt.
func TestLibvirtDownProcDiscovers(t *testing.T) {
	for _, hung := range []bool{false, true} {
		name := map[bool]string{false: "no daemon", true: "hung daemon"}[hung]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "libvirt-sock-ro")
			if hung {
				hungListener(t, sock)
			}
			imgDir, err := os.MkdirTemp("/var/tmp", "fspair-lvdown-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(imgDir) })
			img := filepath.Join(imgDir, "proc.raw")
			if err := sparseImage(img, 128<<20); err != nil {
				t.Fatal(err)
			}
			const timeout = 2 * time.Second
			ex := runExporter(t, "--discovery.interval=500ms", "--discovery.libvirt.socket="+sock,
				"--discovery.libvirt.timeout="+timeout.String())
			vm, err := startPaused(filepath.Join(dir, "q.qmp"), "libvirt-down", "-drive", "file="+img+",if=virtio,format=raw")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { vm.stop() })
			w := newWatcher(ex.url, img)
			disk := map[string]string{"source_file": img, "domain": "libvirt-down"}
			// A round ends when its slowest source does: a hung libvirt
			// holds each round for its timeout.
			_, took, err := w.until(timeout+5*time.Second, "the QEMU's disk from /proc", func(s scrape) bool {
				return len(s.series("fspair_disk_info", with2(disk, "discovery", "qemu"))) == 1
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("/proc discovery found the disk %.1fs after QEMU started", took.Seconds())
			if err := writeCount(w, vm, "virtio0", disk, 0, churnWrites); err != nil {
				t.Error(err)
			}
			s, _, err := w.until(4*timeout+5*time.Second, "two failed libvirt rounds", func(s scrape) bool {
				v, _ := s.get("fspair_discovery_errors_total", map[string]string{"source": "libvirt"})
				return v >= 2
			})
			if err != nil {
				t.Fatal(err)
			}
			for src, want := range map[string]float64{"libvirt": 0, "qemu": 1} {
				if v, _ := s.get("fspair_discovery_source_up", map[string]string{"source": src}); v != want {
					t.Errorf("fspair_discovery_source_up{source=%q} = %v, want %v", src, v, want)
				}
			}
			if v, _ := s.get("fspair_discovery_errors_total", map[string]string{"source": "qemu"}); v != 0 {
				t.Errorf("fspair_discovery_errors_total{source=\"qemu\"} = %v, want 0", v)
			}
			t.Logf("%d scrapes, slowest %s", w.scrapes, w.slowest.Round(time.Millisecond))
			if w.slowest >= time.Second {
				t.Errorf("slowest scrape %s with libvirt unreachable, want < 1s", w.slowest)
			}
		})
	}
}

// TestLibvirtRestart: libvirtd stops and starts again under a running
// exporter (libvirt and /proc discovery both on) while a libvirt domain
// runs and writes. While libvirtd is down,
// fspair_discovery_source_up{source="libvirt"} is 0, the domain's disk
// stays exported and goes on counting the guest's writes (discovery uses
// libvirt's last answer while the domain's QEMU lives), and /proc discovery
// finds a QEMU started meanwhile. Once libvirtd is back the source is up
// again and the domain's disk is the same disk: its counters never went
// back, and writes after the restart add to them.
func TestLibvirtRestart(t *testing.T) {
	ctx := context.Background()
	requireLibvirtTools(t)
	l := lab.ForTest(t)
	lv := ensureLibvirt(t, l)
	if lv.Libvirtd == nil {
		t.Fatalf("a libvirtd was running before the test; the test restarts libvirtd and does not touch a daemon it did not start: stop it (and virtlogd) and run again")
	}
	h, err := l.NewHostFS(ctx, "xfs", 1024)
	if err != nil {
		t.Fatal(err)
	}
	vda, other := h.Path("lv.raw"), h.Path("proc.raw")
	if err := lab.MakeImage(ctx, vda, "raw", "none", 320); err != nil {
		t.Fatal(err)
	}
	if err := sparseImage(other, 128<<20); err != nil {
		t.Fatal(err)
	}
	ex := runExporter(t, "--discovery.interval=500ms", "--discovery.libvirt.timeout=2s")
	name := fmt.Sprintf("fspair-e2e-restart-%d", os.Getpid())
	dom := createDomain(t, l, name, []lab.DomainDisk{
		{Target: "vda", File: vda, Format: "raw", Cache: "none", IO: "native"},
	}, nil)
	disk := map[string]string{"domain": name, "source_file": vda}
	w := newWatcher(ex.url, vda, other)
	fromLibvirt := func(s scrape) bool {
		return len(s.series("fspair_disk_info", with2(disk, "discovery", "libvirt"))) == 1
	}
	if _, _, err := w.until(15*time.Second, "the domain's disk from libvirt", fromLibvirt); err != nil {
		t.Fatal(err)
	}
	// The guest writes through the lab control channel on its second
	// serial port, a UNIX socket QEMU serves: it works with libvirtd
	// down too.
	g := readyGuest(ctx, t, dom)
	defer g.Close()
	const n = 256 // 4 KiB O_DIRECT writes a job: each one request on the image (cache=none)
	jobs := 0
	write := func(when string) {
		t.Helper()
		k := with2(disk, "op", "write")
		s, err := w.get()
		if err != nil {
			t.Fatal(err)
		}
		before, _ := s.get("fspair_disk_requests_total", k)
		script := "set -e\n" +
			`for d in /sys/block/vd*; do [ "$(cat "$d/serial")" = fspair-vda ] && dev=/dev/${d##*/}; done` + "\n" +
			fioLine(`"$dev"`, "write", fmt.Sprintf("%dm", 64*(jobs+1)))
		jobs++
		jobCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		out, rc, err := g.Run(jobCtx, script)
		cancel()
		if err != nil || rc != 0 {
			t.Fatalf("guest fio %s: rc %d, err %v, output:\n%s", when, rc, err, out)
		}
		s, _, err = w.until(10*time.Second, "the guest's writes "+when, func(s scrape) bool {
			v, _ := s.get("fspair_disk_requests_total", k)
			return v-before >= n
		})
		if err != nil {
			t.Fatal(err)
		}
		after, _ := s.get("fspair_disk_requests_total", k)
		t.Logf("%s: the domain's disk went from %v to %v writes", when, before, after)
		// As TestLibvirt: the guest kernel may add a request or two.
		if !within(after-before, n, 0.02) {
			t.Errorf("%s: %v writes counted for the guest's %d", when, after-before, n)
		}
	}
	write("before libvirtd stops")

	s, err := w.get()
	if err != nil {
		t.Fatal(err)
	}
	errs0, _ := s.get("fspair_discovery_errors_total", map[string]string{"source": "libvirt"})
	if err := lv.Libvirtd.Stop(); err != nil {
		t.Fatalf("stop libvirtd: %v", err)
	}
	stopped := time.Now()
	if _, _, err := w.until(10*time.Second, "the libvirt source down", func(s scrape) bool {
		up, _ := s.get("fspair_discovery_source_up", map[string]string{"source": "libvirt"})
		n, _ := s.get("fspair_discovery_errors_total", map[string]string{"source": "libvirt"})
		return up == 0 && n > errs0
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("libvirt source down %.1fs after libvirtd stopped", time.Since(stopped).Seconds())
	q, err := startPaused(filepath.Join(l.Dir, "restart.qmp"), "restart-proc",
		"-drive", "file="+other+",if=virtio,format=raw,cache=none,aio=native")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.stop() })
	procDisk := map[string]string{"domain": "restart-proc", "source_file": other}
	if _, _, err := w.until(10*time.Second, "a QEMU started while libvirtd is down, from /proc", func(s scrape) bool {
		return len(s.series("fspair_disk_info", with2(procDisk, "discovery", "qemu"))) == 1
	}); err != nil {
		t.Fatal(err)
	}
	if err := writeCount(w, q, "virtio0", procDisk, 0, churnWrites); err != nil {
		t.Error(err)
	}
	write("while libvirtd is down")
	s, err = w.get()
	if err != nil {
		t.Fatal(err)
	}
	if !fromLibvirt(s) {
		t.Errorf("the domain's disk is not exported as libvirt's while libvirtd is down")
	}
	if up, _ := s.get("fspair_discovery_source_up", map[string]string{"source": "qemu"}); up != 1 {
		t.Errorf("fspair_discovery_source_up{source=\"qemu\"} = %v while libvirtd is down, want 1", up)
	}

	// libvirtd starts again, the way ensureLibvirt started it.
	d := startLibvirtd(t, l)
	t.Cleanup(func() {
		if err := dom.Destroy(); err != nil { // while libvirtd runs: cleanups run last-registered first
			t.Error(err)
		}
		if err := d.Stop(); err != nil {
			t.Errorf("stop libvirtd: %v", err)
		}
	})
	restarted := time.Now()
	if _, _, err := w.until(20*time.Second, "the libvirt source up again", func(s scrape) bool {
		up, _ := s.get("fspair_discovery_source_up", map[string]string{"source": "libvirt"})
		return up == 1 && fromLibvirt(s)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("libvirt source up %.1fs after libvirtd started again", time.Since(restarted).Seconds())
	write("after libvirtd restarted")
	s, err = w.get()
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.get("fspair_disk_requests_total", with2(disk, "op", "write")); !within(v, 3*n, 0.02) {
		t.Errorf("the domain's disk shows %v writes for the guest's %d over the three jobs", v, 3*n)
	}

	g.Close()
	if err := dom.Destroy(); err != nil {
		t.Error(err)
	}
	if _, _, err := w.until(goneBound+2*time.Second, "the destroyed domain's disk to go", func(s scrape) bool {
		return len(s.series("fspair_disk_info", disk)) == 0
	}); err != nil {
		t.Error(err)
	}
	s, err = w.get()
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.get("fspair_disk_requests_total", with2(procDisk, "op", "write")); v != churnWrites {
		t.Errorf("the /proc QEMU's disk shows %v writes at the end, want %d", v, churnWrites)
	}
	if len(w.backs) > 0 {
		t.Errorf("counters went down:\n%s", strings.Join(w.backs, "\n"))
	}
	t.Logf("%d scrapes, slowest %s", w.scrapes, w.slowest.Round(time.Millisecond))
	if w.slowest >= time.Second {
		t.Errorf("slowest scrape %s, want < 1s", w.slowest)
	}
}

// TestScrapeNotBlockedByImages: an image whose reads hang (a file on a
// FUSE mount whose server, qemu-storage-daemon's FUSE export, is stopped
// with SIGSTOP, as a hung network file system would hang) stalls the
// exporter's discovery and image rounds, but not its scrapes: each answers
// within a second with the disks the exporter knows, and once the server
// runs again the rounds go on.
func TestScrapeNotBlockedByImages(t *testing.T) {
	ctx := context.Background()
	qsd, err := exec.LookPath("qemu-storage-daemon")
	if err != nil {
		t.Fatalf("qemu-storage-daemon not found (install qemu-system-common): %v", err)
	}
	dir, err := os.MkdirTemp("/var/tmp", "fspair-fuse-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	backing, export := filepath.Join(dir, "backing.raw"), filepath.Join(dir, "export.img")
	if err := lab.MakeImage(ctx, backing, "raw", "ext4", 128); err != nil {
		t.Fatal(err)
	}
	// A FUSE export is mounted on an existing regular file.
	if err := os.WriteFile(export, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	server := startFUSEExport(t, qsd, backing, export)
	cfg := writeFile(t, dir, "disks.yml", "disks:\n  - domain: fuse-vm\n    target_device: vda\n    source_file: "+export+"\n")
	ex := runExporter(t, "--no-discovery.libvirt", "--no-discovery.proc", "--discovery.config.file="+cfg,
		"--discovery.interval=500ms", "--image.refresh-interval=1s")
	w := newWatcher(ex.url, export)
	disk := map[string]string{"source_file": export, "guest_fs": "ext4"}
	if _, _, err := w.until(15*time.Second, "the FUSE-backed disk, identified", func(s scrape) bool {
		return len(s.series("fspair_disk_info", disk)) == 1
	}); err != nil {
		t.Fatal(err)
	}
	refreshes := func(s scrape) float64 { v, _ := s.get("fspair_discovery_refreshes_total", nil); return v }

	if err := server.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Signal(syscall.SIGCONT) })
	// Drop the page cache so that the image's next reads go to the
	// stopped server (only pages: dropping inodes would talk to it too).
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o200); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var settled float64 // refreshes one second after the stop
	for time.Since(stopped) < 6*time.Second {
		s, err := w.get()
		if err != nil {
			t.Fatalf("scrape %.1fs after the image's server stopped: %v", time.Since(stopped).Seconds(), err)
		}
		if len(s.series("fspair_disk_info", disk)) != 1 {
			t.Errorf("the disk vanished from a scrape while its server was stopped")
		}
		if time.Since(stopped) < time.Second {
			settled = refreshes(s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s, err := w.get()
	if err != nil {
		t.Fatal(err)
	}
	stalled := refreshes(s)
	t.Logf("server stopped: %d scrapes, slowest %s; discovery rounds %v at 1s, %v at 6s",
		w.scrapes, w.slowest.Round(time.Millisecond), settled, stalled)
	// Proof that the rounds met the hung file: at one round per 500ms they
	// would have run ten more times.
	if stalled > settled+1 {
		t.Errorf("discovery rounds went on (%v -> %v) while the image's server was stopped: the test did not hang an image read", settled, stalled)
	}
	if w.slowest >= time.Second {
		t.Errorf("slowest scrape %s while an image's reads hung, want < 1s", w.slowest)
	}
	if err := server.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.until(30*time.Second, "discovery rounds to go on after the server resumed", func(s scrape) bool {
		return refreshes(s) >= stalled+3
	}); err != nil {
		t.Error(err)
	}
}
