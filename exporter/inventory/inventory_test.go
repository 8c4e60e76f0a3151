package inventory

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/probe"
)

// fakeProber keeps what the inventory registers, as the BPF maps would.
type fakeProber struct {
	inodes   map[uint64]uint32
	clusters map[uint32]map[uint64]bool // by slot
}

func newFakeProber() *fakeProber {
	return &fakeProber{inodes: map[uint64]uint32{}, clusters: map[uint32]map[uint64]bool{}}
}

func (p *fakeProber) Inode(f *os.File) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func (p *fakeProber) Track(inode uint64, slot uint32, cfg probe.ImageConfig) error {
	p.inodes[inode] = slot
	return nil
}

func (p *fakeProber) Configure(slot uint32, cfg probe.ImageConfig) error { return nil }

func (p *fakeProber) UseFS(fsType string) {}

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

// TestRemoveDropsFormatClusters: a qcow2 disk's metadata clusters, handed
// to the probes while it is tracked, are taken back when it goes, so that
// they neither pile up nor mark the requests of the next qcow2 disk in the
// same slot as the format's own.
func TestRemoveDropsFormatClusters(t *testing.T) {
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Fatalf("qemu-img not found (install qemu-utils): %v", err)
	}
	img := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", "-o", "preallocation=metadata", img, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
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
