package collector

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/hostfs"
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
)

var update = flag.Bool("update", false, "rewrite the golden files")

type fakeDisks []inventory.Disk

func (f fakeDisks) Disks() []inventory.Disk { return f }

type fakeCounters map[uint32]probe.Counters

func (f fakeCounters) Counters(slot uint32) (probe.Counters, error) { return f[slot], nil }

// goldenCounters are the counters of slot 7 in the golden fixture.
func goldenCounters() probe.Counters {
	var c probe.Counters
	c.Requests = [6]uint64{100, 50, 5, 1, 2, 0}
	c.Bytes = [6]uint64{409600, 3276800, 0, 1 << 20, 131072, 0}
	c.Errors[1] = 1
	c.LatencySumNs[0] = 12_000_000
	c.Latency[0][7] = 60  // le 128 us
	c.Latency[0][10] = 40 // le 1.024 ms
	c.Latency[1][12] = 50
	c.Size[0][3] = 100 // 4 KiB reads
	c.Size[1][7] = 50  // 64 KiB writes
	c.SizeSum = [2]uint64{409600, 3276800}
	c.SeekPrev[14] = 120 // exactly sequential
	c.SeekPrev[0] = 2    // <= -64 GiB
	c.SeekPrev[28] = 27  // > 64 GiB
	c.SeekNear[14] = 149
	c.Sequential = [2]uint64{60, 49}
	c.Random = [2]uint64{40, 1}
	c.SyncWrites = [2]uint64{3, 5}
	c.CacheReads = [4]uint64{7, 2, 0, 0}
	c.CacheReadBytes = [4]uint64{28672, 8192, 0, 0}
	c.CacheWriteBytes = [4]uint64{4096, 12288, 0, 0}
	c.Outstanding[0], c.Outstanding[2] = 140, 18
	c.OutstandingSum = 212
	c.Interarrival[5] = 157
	c.InterarrivalSumNs = 5_000_000
	c.Submissions = [4]uint64{0, 158, 0, 0}
	c.FormatRequests = [2]uint64{4, 2}
	c.FormatBytes = [2]uint64{262144, 131072}
	return c
}

// goldenDisks are the disks of the golden fixture: one tracked in slot 7,
// one not.
var goldenDisks = fakeDisks{
	{
		Disk: discovery.Disk{Domain: "web1", UUID: "6f1c0e58-6a3c-4d7e-9d34-1b2c3d4e5f60", TargetDevice: "vda",
			SourceFile: "/var/lib/libvirt/images/web1.qcow2", Source: "libvirt", Cache: "none", AIO: "native"},
		ImageFormat: "qcow2", GuestFS: "xfs", GuestFSSource: "image", VirtualSize: 10 << 30,
		HostFS:  hostfs.Mount{FSType: "btrfs", MountPoint: "/var/lib/libvirt/images", Device: "/dev/sdb1"},
		Tracked: true, Slot: 7,
	},
	{
		// Not tracked (over the disk limit): info only.
		Disk:        discovery.Disk{Domain: "web2", TargetDevice: "vdb", SourceFile: "/srv/web2.img", Source: "qemu"},
		ImageFormat: "raw", GuestFS: "unknown", GuestFSSource: "image",
	},
}

// TestDiskExposition compares the disk collector's output for fixed
// counters with a golden exposition file (go test -update rewrites it).
func TestDiskExposition(t *testing.T) {
	c := goldenCounters()
	disks := goldenDisks
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		if err := NewDiskCollector(disks, fakeCounters{7: c}).Update(ch); err != nil {
			t.Error(err)
		}
	}))
	golden := filepath.Join("testdata", "disk.prom")
	if *update {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, mf := range mfs {
			if _, err := expfmtWrite(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

func TestSeekBoundsMatchSlots(t *testing.T) {
	var c probe.Counters
	if len(seekBounds)+1 != len(c.SeekPrev) || len(latencyBounds)+1 != len(c.Latency[0]) ||
		len(sizeBounds)+1 != len(c.Size[0]) || len(outstandingBounds)+1 != len(c.Outstanding) ||
		len(interarrivalBounds)+1 != len(c.Interarrival) {
		t.Fatal("histogram bounds do not match the BPF slot counts")
	}
	if len(opNames) != len(c.Requests) || len(syncModes) != len(c.SyncWrites) || len(ifaceNames) > len(c.Submissions) ||
		len(cacheReadResults) > len(c.CacheReads) || len(cacheWriteResults) > len(c.CacheWriteBytes) {
		t.Fatal("label names do not match the BPF counter arrays")
	}
	for i := 1; i < len(seekBounds); i++ {
		if seekBounds[i] <= seekBounds[i-1] {
			t.Fatalf("seek bounds not increasing at %d: %v", i, seekBounds)
		}
	}
}

// TestHostLabelsBounded: a mount point that is not UTF-8 (legal on Linux)
// or absurdly long becomes a valid, bounded label value instead of a panic.
func TestHostLabelsBounded(t *testing.T) {
	bad := "/srv/\xff\xfeimages/" + strings.Repeat("é", 400)
	disks := fakeDisks{{Disk: discovery.Disk{Domain: "vm", UUID: "u", TargetDevice: "vda", SourceFile: "/srv/x.img"},
		HostFS: hostfs.Mount{MountPoint: bad, Device: "/dev/\xff", FSType: "ext4"}}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewExporter(map[string]Collector{"disk": NewDiskCollector(disks, fakeCounters{})}, nil))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !utf8.ValidString(l.GetValue()) || len(l.GetValue()) > maxLabelBytes {
					t.Errorf("%s: label %s = %q: not valid UTF-8 or longer than %d bytes", mf.GetName(), l.GetName(), l.GetValue(), maxLabelBytes)
				}
			}
		}
	}
	if got := hostLabel(bad); !strings.HasPrefix(got, "/srv/\uFFFD") {
		t.Errorf("hostLabel(%q) = %q", bad, got)
	}
}
