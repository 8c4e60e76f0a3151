package inventory

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/probe"
)

// fakeProber keeps what the inventory registers, as the BPF maps would.
type fakeProber struct {
	inodes   map[uint64]uint32
	clusters map[uint32]map[uint64]bool // by slot
	configs  map[uint32]probe.ImageConfig
	vmms     map[uint32]uint32 // by slot
}

func newFakeProber() *fakeProber {
	return &fakeProber{inodes: map[uint64]uint32{}, clusters: map[uint32]map[uint64]bool{},
		configs: map[uint32]probe.ImageConfig{}, vmms: map[uint32]uint32{}}
}

func (p *fakeProber) Inode(f *os.File) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Track behaves as probe.Probes': the image is followed for any process until SetVMM.
func (p *fakeProber) Track(inode uint64, slot uint32, cfg probe.ImageConfig) error {
	p.inodes[inode] = slot
	p.configs[slot] = cfg
	p.vmms[slot] = 0
	return nil
}

func (p *fakeProber) SetVMM(slot, tgid uint32) error {
	p.vmms[slot] = tgid
	return nil
}

func (p *fakeProber) Configure(slot uint32, cfg probe.ImageConfig) error {
	p.configs[slot] = cfg
	return nil
}

func (p *fakeProber) Untrack(inode uint64, slot uint32) error {
	delete(p.inodes, inode)
	return nil
}

// SetFormatClusters behaves as probe.Probes': old clusters not in the new
// set are removed, new ones added.
func (p *fakeProber) SetFormatClusters(slot uint32, old, clusters []uint64) error {
	m := p.clusters[slot]
	if m == nil {
		m = map[uint64]bool{}
		p.clusters[slot] = m
	}
	keep := map[uint64]bool{}
	for _, c := range clusters {
		keep[c] = true
	}
	for _, c := range old {
		if !keep[c] {
			delete(m, c)
		}
	}
	for _, c := range clusters {
		m[c] = true
	}
	return nil
}

func (p *fakeProber) SetProcesses(tgids []uint32, all bool) error { return nil }
func (p *fakeProber) MaxDisks() int                               { return 4 }
func (p *fakeProber) TrackDevice(dev, slot uint32) error          { return nil }
func (p *fakeProber) UntrackDevice(dev uint32) error              { return nil }
func (p *fakeProber) TrackBtrfs(fsid [16]byte, slot uint32) error { return nil }
func (p *fakeProber) UntrackBtrfs(fsid [16]byte) error            { return nil }
func (p *fakeProber) MaxDevices() int                             { return 4 }

// fakeDiscoverer reports the disks it is given.
type fakeDiscoverer struct{ disks []discovery.Disk }

func (d *fakeDiscoverer) Discover(context.Context) (*discovery.Result, error) {
	return &discovery.Result{Disks: d.disks, Errors: map[string]error{}}, nil
}

// qcow2Image creates a qcow2 image of size with its metadata preallocated
// (so that it has L2 tables to map) and returns its path.
func qcow2Image(t *testing.T, size string) string {
	t.Helper()
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Fatalf("qemu-img not found (install qemu-utils): %v", err)
	}
	img := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", "-o", "preallocation=metadata", img, size).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	return img
}

// logLines returns the lines of a text-handler log at level that hold msg.
func logLines(log *bytes.Buffer, level, msg string) []string {
	var out []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "level="+level) && strings.Contains(l, msg) {
			out = append(out, l)
		}
	}
	return out
}

// TestTruncatedQcow2ClearsFormatClusters: a tracked qcow2 image that stops
// parsing (truncated to 0 bytes) has its metadata clusters taken back from
// the probes, so that requests at those offsets are no longer counted as the
// format's own; the change is logged once at warn and then at debug while it
// lasts, each failed round counted; once the image parses again its clusters
// are back and the recovery is logged.
func TestTruncatedQcow2ClearsFormatClusters(t *testing.T) {
	img := qcow2Image(t, "64M")
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newFakeProber()
	disc := &fakeDiscoverer{disks: []discovery.Disk{{Domain: "vm", SourceFile: img, Source: discovery.SourceStatic, Format: "qcow2"}}}
	inv := New(p, disc, Options{Logger: logger})
	ctx := context.Background()
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	disks := inv.Disks()
	if len(disks) != 1 || !disks[0].Tracked {
		t.Fatalf("disks after the first round: %+v", disks)
	}
	slot := disks[0].Slot
	before := len(p.clusters[slot])
	if before < 4 {
		t.Fatalf("%d metadata clusters registered for a qcow2 image, want at least 4", before)
	}

	if err := os.Truncate(img, 0); err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	for range rounds {
		if err := inv.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(p.clusters[slot]); n != 0 {
		t.Errorf("%d metadata clusters of the truncated image still in slot %d, want none", n, slot)
	}
	const msg = "qcow2 metadata"
	if w := logLines(&log, "WARN", msg); len(w) != 1 {
		t.Errorf("%d warnings about the unreadable layout in %d rounds, want 1:\n%s", len(w), rounds, strings.Join(w, "\n"))
	}
	if d := logLines(&log, "DEBUG", msg); len(d) != rounds-1 {
		t.Errorf("%d debug lines about the unreadable layout, want %d", len(d), rounds-1)
	}
	if n := inv.Stats().RefreshFailures[RefreshQcow2Metadata]; n != rounds {
		t.Errorf("%d failed refreshes counted, want %d", n, rounds)
	}
	if len(inv.Disks()) != 1 {
		t.Errorf("the truncated image is no longer listed: %+v", inv.Disks())
	}

	// Written back in place (same inode), it parses again.
	if err := os.WriteFile(img, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(p.clusters[slot]); n != before {
		t.Errorf("%d metadata clusters after the image parses again, want %d", n, before)
	}
	if i := logLines(&log, "INFO", msg); len(i) != 1 {
		t.Errorf("%d info lines about the layout readable again, want 1", len(i))
	}
	if w := logLines(&log, "WARN", msg); len(w) != 1 {
		t.Errorf("%d warnings after recovery, want still 1", len(w))
	}
	st := inv.Stats()
	if n := st.RefreshFailures[RefreshQcow2Metadata]; n != rounds {
		t.Errorf("%d failed refreshes counted after recovery, want still %d", n, rounds)
	}
	if n := st.RefreshFailures[RefreshProbeUpdate]; n != 0 {
		t.Errorf("%d probe updates failed, want 0", n)
	}
}

// TestQcow2ReadAsRawDropsFormatClusters: an image whose format is detected
// (no format configured) and that reads as raw once truncated is no longer
// configured as qcow2 and keeps no metadata clusters in the probes.
func TestQcow2ReadAsRawDropsFormatClusters(t *testing.T) {
	img := qcow2Image(t, "64M")
	p := newFakeProber()
	disc := &fakeDiscoverer{disks: []discovery.Disk{{Domain: "vm", SourceFile: img, Source: discovery.SourceStatic}}}
	inv := New(p, disc, Options{ImageRefresh: time.Nanosecond})
	ctx := context.Background()
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	d := inv.Disks()
	if len(d) != 1 || d[0].ImageFormat != "qcow2" || !p.configs[d[0].Slot].QCOW2 || len(p.clusters[d[0].Slot]) < 4 {
		t.Fatalf("after the first round: disks %+v, config %+v, %d clusters", d, p.configs, len(p.clusters[0]))
	}
	slot := d[0].Slot
	if err := os.Truncate(img, 0); err != nil {
		t.Fatal(err)
	}
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if d := inv.Disks(); len(d) != 1 || d[0].ImageFormat != "raw" {
		t.Fatalf("after truncation: %+v, want one raw disk", d)
	}
	if p.configs[slot].QCOW2 {
		t.Errorf("slot %d still configured as qcow2: %+v", slot, p.configs[slot])
	}
	if n := len(p.clusters[slot]); n != 0 {
		t.Errorf("%d metadata clusters left in slot %d of a raw image", n, slot)
	}
}

// TestRejectedQcow2HasNoVirtualSize: once a tracked qcow2's header is one
// the probe rejects (here it claims 1 TiB with an L1 table that maps 64 MiB),
// the disk has no virtual size: neither the header's claim nor the size read
// before.
func TestRejectedQcow2HasNoVirtualSize(t *testing.T) {
	img := qcow2Image(t, "64M")
	p := newFakeProber()
	disc := &fakeDiscoverer{disks: []discovery.Disk{{Domain: "vm", SourceFile: img, Source: discovery.SourceStatic, Format: "qcow2"}}}
	inv := New(p, disc, Options{ImageRefresh: time.Nanosecond})
	ctx := context.Background()
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if d := inv.Disks(); len(d) != 1 || d[0].VirtualSize != 64<<20 {
		t.Fatalf("disks after the first round: %+v, want one of 64 MiB", d)
	}
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Header field "size" (docs/interop/qcow2.txt): bytes 24-31, big-endian.
	_, err = f.WriteAt([]byte{0, 0, 1, 0, 0, 0, 0, 0}, 24)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	d := inv.Disks()
	if len(d) != 1 || d[0].VirtualSize != 0 || d[0].ImageFormat != "qcow2" {
		t.Fatalf("disks after the header was rejected: %+v, want one qcow2 with no virtual size", d)
	}
}

// TestRemoveDropsFormatClusters: a qcow2 disk's metadata clusters, handed
// to the probes while it is tracked, are taken back when it goes, so that
// they neither pile up nor mark the requests of the next qcow2 disk in the
// same slot as the format's own.
func TestRemoveDropsFormatClusters(t *testing.T) {
	img := qcow2Image(t, "64M")
	p := newFakeProber()
	disc := &fakeDiscoverer{disks: []discovery.Disk{{Domain: "vm", SourceFile: img, Source: discovery.SourceStatic, Format: "qcow2"}}}
	inv := New(p, disc, Options{})
	ctx := context.Background()
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	disks := inv.Disks()
	if len(disks) != 1 || !disks[0].Tracked || disks[0].ImageFormat != "qcow2" {
		t.Fatalf("disks after the first round: %+v", disks)
	}
	slot := disks[0].Slot
	// Header, L1 table, refcount table and block, one L2 table.
	if n := len(p.clusters[slot]); n < 4 {
		t.Fatalf("%d metadata clusters registered for a qcow2 image, want at least 4", n)
	}
	disc.disks = nil
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if len(inv.Disks()) != 0 || len(p.inodes) != 0 {
		t.Fatalf("disk still tracked after it went: %+v, inodes %v", inv.Disks(), p.inodes)
	}
	if n := len(p.clusters[slot]); n != 0 {
		t.Errorf("%d metadata clusters of the gone disk left in slot %d", n, slot)
	}
}

// TestVMMFollowed: each tracked image is followed for its own VMM process,
// named again when the disk's process changes (a VM restarted on the same
// image), and for any process when the disk has no known VMM.
func TestVMMFollowed(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")
	for _, f := range []string{a, b} {
		if err := os.WriteFile(f, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := newFakeProber()
	disc := &fakeDiscoverer{disks: []discovery.Disk{
		{Domain: "vm1", SourceFile: a, Source: discovery.SourceStatic, Format: "raw", PID: 4242},
		{Domain: "vm2", SourceFile: b, Source: discovery.SourceStatic, Format: "raw"},
	}}
	inv := New(p, disc, Options{})
	ctx := context.Background()
	vmmOf := func() map[string]uint32 {
		out := map[string]uint32{}
		for _, d := range inv.Disks() {
			out[d.Domain] = p.vmms[d.Slot]
		}
		return out
	}
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := vmmOf(); got["vm1"] != 4242 || got["vm2"] != 0 {
		t.Errorf("VMMs after the first round: %v, want vm1 4242, vm2 0 (any process)", got)
	}
	disc.disks[0].PID = 4343
	if err := inv.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := vmmOf(); got["vm1"] != 4343 {
		t.Errorf("VMM of vm1 after its process changed: %d, want 4343", got["vm1"])
	}
}

// TestImageProblems: each discovered image file that cannot be tracked is
// reported for the round with its reason, the file type named.
func TestImageProblems(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe.img")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	disk := func(domain, file string) discovery.Disk {
		return discovery.Disk{Domain: domain, TargetDevice: "vda", SourceFile: file, Source: discovery.SourceStatic}
	}
	disc := &fakeDiscoverer{disks: []discovery.Disk{
		disk("a-raw", raw), disk("b-pipe", fifo), disk("c-dir", dir), disk("d-gone", filepath.Join(dir, "gone.img")),
	}}
	inv := New(newFakeProber(), disc, Options{})
	for round := 1; round <= 2; round++ {
		if err := inv.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := inv.Stats()
		if len(inv.Disks()) != 1 || st.ImageErrors != uint64(3*round) {
			t.Errorf("round %d: %d disks tracked, %d image errors; want 1 and %d", round, len(inv.Disks()), st.ImageErrors, 3*round)
		}
		want := map[string]string{"b-pipe": "a named pipe, not a regular file", "c-dir": "a directory, not a regular file",
			"d-gone": "no such file or directory"}
		if len(st.ImageProblems) != len(want) {
			t.Errorf("round %d: problems %v, want %d", round, st.ImageProblems, len(want))
		}
		for _, p := range st.ImageProblems {
			if w, ok := want[p.Domain]; !ok || !strings.Contains(p.Err.Error(), w) || !strings.Contains(p.Err.Error(), p.SourceFile) {
				t.Errorf("round %d: problem %s: %v, want the file and %q", round, p.Domain, p.Err, w)
			}
		}
	}
}
