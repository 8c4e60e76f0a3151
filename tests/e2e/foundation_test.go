package e2e

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// dataDisk is a disk the guest drives with fio on its raw block device.
type dataDisk struct {
	lab.DiskConfig
	guestDev string
}

// aioModes are QEMU's three ways of issuing I/O, each with a cache mode it allows.
var aioModes = []struct{ aio, cache string }{
	{"threads", "writeback"},
	{"native", "none"},
	{"io_uring", "none"},
}

// fio jobs on the raw guest device: O_DIRECT, one request at a time, so that
// every fio I/O is exactly one guest request (no merging in the guest).
func fioArgs(dev, rw, bs, size string, extra ...string) []string {
	return append([]string{"--name=" + rw, "--filename=" + dev, "--direct=1", "--ioengine=psync",
		"--rw=" + rw, "--bs=" + bs, "--size=" + size, "--randrepeat=0"}, extra...)
}

type counts struct {
	reads, writes, readBytes, writeBytes, flushes, discards, discardBytes float64
	seqReads, rndReads, seqWrites, rndWrites                              float64
}

func (e *exporter) diskCounts(t *testing.T, s scrape, file string) counts {
	k := map[string]string{"source_file": file}
	op := func(name, o string) float64 {
		return s.value(t, name, map[string]string{"source_file": file, "op": o})
	}
	_ = k
	return counts{
		reads: op("fspair_disk_requests_total", "read"), writes: op("fspair_disk_requests_total", "write"),
		readBytes: op("fspair_disk_bytes_total", "read"), writeBytes: op("fspair_disk_bytes_total", "write"),
		flushes: op("fspair_disk_requests_total", "flush"), discards: op("fspair_disk_requests_total", "discard"),
		discardBytes: op("fspair_disk_bytes_total", "discard"),
		seqReads:     op("fspair_disk_sequential_requests_total", "read"),
		rndReads:     op("fspair_disk_random_requests_total", "read"),
		seqWrites:    op("fspair_disk_sequential_requests_total", "write"),
		rndWrites:    op("fspair_disk_random_requests_total", "write"),
	}
}

func (a counts) minus(b counts) counts {
	return counts{a.reads - b.reads, a.writes - b.writes, a.readBytes - b.readBytes, a.writeBytes - b.writeBytes,
		a.flushes - b.flushes, a.discards - b.discards, a.discardBytes - b.discardBytes,
		a.seqReads - b.seqReads, a.rndReads - b.rndReads, a.seqWrites - b.seqWrites, a.rndWrites - b.rndWrites}
}

var flagFoundationAll = flag.Bool("foundation.all", false,
	"TestFoundation: all six data disks (raw and qcow2 x three aio modes) on every host file system (make foundation), not make test's covering subset")

// TestFoundation: for each host file system, one guest with data disks and
// three disks holding a guest file system (the pairs). It checks discovery
// labels, then drives each data disk with fio and compares the exporter with
// fio and query-blockstats.
//
// With -foundation.all (make foundation) the data disks are raw and qcow2 x
// threads, native, io_uring on every host file system: 18 disks. make test
// runs a covering subset of 6: on each host file system one raw and one
// qcow2 disk, the aio modes rotated so that each format meets each aio mode
// once and each host file system two of them (ext4: raw threads, qcow2
// native; xfs: raw native, qcow2 io_uring; btrfs: raw io_uring, qcow2
// threads). The three pairs of a host file system and aio mode it leaves
// out are driven by TestModesAgree in the same make test, which checks
// every host file system x aio mode against query-blockstats exactly. The
// full set took 227 s here, 18 disks at about 11 s each.
func TestFoundation(t *testing.T) {
	l := lab.ForTest(t)
	ex := startExporter(t)
	ctx := context.Background()
	guestFSes := []string{"ext4", "xfs", "btrfs"}

	for hi, hostFS := range []string{"ext4", "xfs", "btrfs"} {
		t.Run("host_"+hostFS, func(t *testing.T) {
			h, err := l.NewHostFS(ctx, hostFS, 4096)
			if err != nil {
				t.Fatal(err)
			}
			var disks []lab.DiskConfig
			var data []string
			for fi, format := range []string{"raw", "qcow2"} {
				for mi, m := range aioModes {
					if !*flagFoundationAll && !inFoundationSubset(hi, fi, mi) {
						continue
					}
					id := fmt.Sprintf("d%s%s", format[:1], m.aio[:2])
					path := h.Path(id + "." + format)
					if err := makeDataImage(ctx, path, format); err != nil {
						t.Fatal(err)
					}
					disks = append(disks, lab.DiskConfig{ID: id, File: path, Format: format, Cache: m.cache, AIO: m.aio, Discard: "unmap"})
					data = append(data, id)
				}
			}
			for i, gfs := range guestFSes {
				format := []string{"raw", "qcow2"}[i%2]
				id := "g" + gfs
				path := h.Path(id + "." + format)
				if err := lab.MakeImage(ctx, path, format, gfs, 320); err != nil {
					t.Fatal(err)
				}
				disks = append(disks, lab.DiskConfig{ID: id, File: path, Format: format, Cache: "writeback", AIO: "threads"})
			}
			vm, err := l.StartVM(ctx, lab.VMConfig{Name: "e2e-" + hostFS, Disks: disks})
			if err != nil {
				t.Fatal(err)
			}
			domain := "e2e-" + hostFS

			// Discovery and labels: every disk, right host and guest FS.
			s, took := ex.waitFor(t, 30*time.Second, fmt.Sprintf("%d disks of %s", len(disks), domain), func(s scrape) bool {
				return len(s.series("fspair_disk_info", map[string]string{"domain": domain})) == len(disks)
			})
			t.Logf("exporter saw %d disks of %s %.1fs after boot", len(disks), domain, took.Seconds())
			for _, d := range disks {
				want := "unknown"
				if d.ID[0] == 'g' {
					want = d.ID[1:]
				}
				info := s.series("fspair_disk_info", map[string]string{"source_file": d.File})
				if len(info) != 1 {
					t.Fatalf("disk %s: %d info series", d.ID, len(info))
				}
				l := labelsOf(info[0])
				if l["guest_fs"] != want || l["host_fs"] != hostFS || l["format"] != d.Format || l["aio"] != d.AIO {
					t.Errorf("disk %s: labels %v; want guest_fs=%s host_fs=%s format=%s aio=%s",
						d.ID, l, want, hostFS, d.Format, d.AIO)
				}
			}

			for i, id := range data {
				d := disks[i]
				t.Run(id, func(t *testing.T) {
					dev, err := vm.GuestDevice(ctx, d.ID)
					if err != nil {
						t.Fatal(err)
					}
					checkDisk(t, ex, vm, d, "/dev/"+dev)
				})
			}

			if err := vm.Stop(); err != nil {
				t.Errorf("stop vm: %v", err)
			}
			_, took = ex.waitFor(t, 15*time.Second, "series of stopped "+domain+" to go", func(s scrape) bool {
				return len(s.series("fspair_disk_info", map[string]string{"domain": domain})) == 0 &&
					len(s.series("fspair_disk_requests_total", map[string]string{"domain": domain})) == 0
			})
			t.Logf("series of %s gone %.1fs after stop", domain, took.Seconds())
		})
	}
}

// inFoundationSubset says whether make test's TestFoundation drives the
// data disk of host file system hi, format fi (raw, qcow2) and aio mode mi
// (aioModes): one aio mode per host file system and format, rotated.
func inFoundationSubset(hi, fi, mi int) bool { return mi == (hi+fi)%len(aioModes) }

// TestFoundationSubset checks what TestFoundation's doc promises of the
// subset: each host file system with both formats, each format with every
// aio mode, each host file system with two aio modes.
func TestFoundationSubset(t *testing.T) {
	hostFS, formats := 3, 2
	perHost := map[int]map[int]bool{}
	formatAIO := map[[2]int]int{}
	for hi := 0; hi < hostFS; hi++ {
		perHost[hi] = map[int]bool{}
		for fi := 0; fi < formats; fi++ {
			n := 0
			for mi := range aioModes {
				if inFoundationSubset(hi, fi, mi) {
					n++
					perHost[hi][mi] = true
					formatAIO[[2]int{fi, mi}]++
				}
			}
			if n != 1 {
				t.Errorf("host FS %d, format %d: %d disks, want 1", hi, fi, n)
			}
		}
		if len(perHost[hi]) != 2 {
			t.Errorf("host FS %d: %d aio modes, want 2", hi, len(perHost[hi]))
		}
	}
	for fi := 0; fi < formats; fi++ {
		for mi := range aioModes {
			if formatAIO[[2]int{fi, mi}] != 1 {
				t.Errorf("format %d, aio %s: %d disks, want 1", fi, aioModes[mi].aio, formatAIO[[2]int{fi, mi}])
			}
		}
	}
}

// makeDataImage makes an empty data disk. qcow2 images get their metadata
// preallocated: every guest read then reaches the file (no unallocated
// clusters read as zeros by QEMU without I/O) and the L2 tables exist before
// the exporter reads the layout.
func makeDataImage(ctx context.Context, path, format string) error {
	args := []string{"create", "-q", "-f", format}
	if format == "qcow2" {
		args = append(args, "-o", "preallocation=metadata")
	}
	args = append(args, path, "256M")
	if out, err := exec.CommandContext(ctx, "qemu-img", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img %v: %v: %s", args, err, out)
	}
	return nil
}

// checkDisk runs the fio jobs on one disk and compares three accounts of them.
func checkDisk(t *testing.T, ex *exporter, vm *lab.VM, d lab.DiskConfig, dev string) {
	ctx := context.Background()
	bsBefore := blockStats(t, vm, d.ID)
	before := ex.diskCounts(t, ex.scrape(t), d.File)
	var fioReads, fioWrites, fioReadBytes, fioWriteBytes, fioSyncs float64

	run := func(name string, args []string) counts {
		start := ex.diskCounts(t, ex.scrape(t), d.File)
		res, err := vm.Fio(ctx, lab.FioJob{Args: args})
		if err != nil {
			t.Fatalf("fio %s: %v", name, err)
		}
		tot := res.Total()
		fioReads += float64(tot.Read.TotalIOs)
		fioWrites += float64(tot.Write.TotalIOs)
		fioReadBytes += float64(tot.Read.IOBytes)
		fioWriteBytes += float64(tot.Write.IOBytes)
		fioSyncs += float64(tot.Sync.TotalIOs)
		return ex.diskCounts(t, ex.scrape(t), d.File).minus(start)
	}

	seqR := run("seq-read", fioArgs(dev, "read", "64k", "32m"))
	seqW := run("seq-write", fioArgs(dev, "write", "64k", "32m"))
	rndR := run("rand-read", fioArgs(dev, "randread", "4k", "256m", "--number_ios=1500"))
	rndW := run("rand-write", fioArgs(dev, "randwrite", "4k", "256m", "--number_ios=1500"))
	run("flush", fioArgs(dev, "write", "4k", "400k", "--fsync=1", "--offset=64m"))
	disc := run("discard", []string{"--name=trim", "--filename=" + dev, "--ioengine=psync", "--rw=trim", "--bs=1m", "--size=16m", "--offset=128m"})

	share := func(seq, rnd float64) float64 { return seq / (seq + rnd) }
	if v := share(seqR.seqReads, seqR.rndReads); v < 0.95 {
		t.Errorf("sequential read job: %.1f%% sequential (%v), want >= 95%%", 100*v, seqR)
	}
	if v := share(seqW.seqWrites, seqW.rndWrites); v < 0.95 {
		t.Errorf("sequential write job: %.1f%% sequential (%v), want >= 95%%", 100*v, seqW)
	}
	if v := share(rndR.rndReads, rndR.seqReads); v < 0.95 {
		t.Errorf("random read job: %.1f%% random (%v), want >= 95%%", 100*v, rndR)
	}
	if v := share(rndW.rndWrites, rndW.seqWrites); v < 0.95 {
		t.Errorf("random write job: %.1f%% random (%v), want >= 95%%", 100*v, rndW)
	}

	got := ex.diskCounts(t, ex.scrape(t), d.File).minus(before)
	bs := blockStats(t, vm, d.ID).minus(bsBefore)
	t.Logf("exporter %+v", got)
	t.Logf("fio reads %.0f/%.0fB writes %.0f/%.0fB syncs %.0f; blockstats %+v", fioReads, fioReadBytes, fioWrites, fioWriteBytes, fioSyncs, bs)

	check := func(what string, got, want, tol float64) {
		if !within(got, want, tol) {
			t.Errorf("%s: exporter %.0f, want %.0f within %.0f%%", what, got, want, 100*tol)
		}
	}
	check("reads vs fio", got.reads, fioReads, 0.02)
	check("writes vs fio", got.writes, fioWrites, 0.02)
	check("read bytes vs fio", got.readBytes, fioReadBytes, 0.02)
	check("write bytes vs fio", got.writeBytes, fioWriteBytes, 0.02)
	check("reads vs blockstats", got.reads, bs.RdOperations-bs.RdMerged, 0.01)
	check("writes vs blockstats", got.writes, bs.WrOperations-bs.WrMerged, 0.01)
	check("read bytes vs blockstats", got.readBytes, bs.RdBytes, 0.01)
	check("write bytes vs blockstats", got.writeBytes, bs.WrBytes, 0.01)
	check("flushes vs blockstats", got.flushes, bs.FlushOperations, 0.01)
	// QEMU 7.2's virtio-blk does not count discards in unmap_operations;
	// the file driver's discard-nb-ok counts those that reached the image.
	if bs.FileDiscards == 0 || disc.discards == 0 {
		t.Errorf("discards: exporter %.0f, file driver %.0f; want both > 0 with discard=unmap", disc.discards, bs.FileDiscards)
	}
	check("discards vs file driver", got.discards, bs.FileDiscards, 0.01)
	check("discard bytes vs file driver", got.discardBytes, bs.FileDiscardBytes, 0.01)
}

// bsDelta are query-blockstats counters of the guest device as floats.
type bsDelta struct {
	RdOperations, RdMerged, WrOperations, WrMerged, RdBytes, WrBytes, FlushOperations float64
	FileDiscards, FileDiscardBytes                                                    float64
}

func (a bsDelta) minus(b bsDelta) bsDelta {
	return bsDelta{a.RdOperations - b.RdOperations, a.RdMerged - b.RdMerged, a.WrOperations - b.WrOperations,
		a.WrMerged - b.WrMerged, a.RdBytes - b.RdBytes, a.WrBytes - b.WrBytes, a.FlushOperations - b.FlushOperations,
		a.FileDiscards - b.FileDiscards, a.FileDiscardBytes - b.FileDiscardBytes}
}

func blockStats(t *testing.T, vm *lab.VM, id string) bsDelta {
	t.Helper()
	all, err := vm.BlockStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, ok := all[id]
	if !ok {
		t.Fatalf("query-blockstats: no device %s", id)
	}
	s := b.Node.Stats
	d := bsDelta{float64(s.RdOperations), float64(s.RdMerged), float64(s.WrOperations), float64(s.WrMerged),
		float64(s.RdBytes), float64(s.WrBytes), float64(s.FlushOperations), 0, 0}
	if b.Parent != nil && b.Parent.DriverSpecific != nil {
		d.FileDiscards = float64(b.Parent.DriverSpecific.DiscardNbOK)
		d.FileDiscardBytes = float64(b.Parent.DriverSpecific.DiscardBytesOK)
	}
	return d
}
