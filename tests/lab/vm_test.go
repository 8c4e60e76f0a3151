package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLab is the lab's acceptance: it builds the kit, makes ext4, xfs and
// btrfs host file systems, boots one guest with a raw and a qcow2 disk,
// runs every fio job of jobs/ and checks fio's numbers against QEMU's block
// statistics, mounts guest file systems, hot-plugs and unplugs a disk, and
// verifies that tearing down leaves no loop device, mount or process.
func TestLab(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := ForTest(t)

	hosts := map[string]*HostFS{}
	for _, fs := range []string{"ext4", "xfs", "btrfs"} {
		h, err := l.NewHostFS(ctx, fs, 1024)
		if err != nil {
			t.Fatalf("host fs %s: %v", fs, err)
		}
		assertHostFS(t, h)
		hosts[fs] = h
	}

	// vd1: a raw disk without a file system for fio on the bare device.
	// vd2: a qcow2 disk holding xfs. hot: a raw btrfs disk for hot plug.
	vd1 := DiskConfig{ID: "vd1", File: hosts["ext4"].Path("vd1.raw"), Format: "raw",
		Cache: "none", AIO: "native", Discard: "unmap", Serial: "lab-vd1"}
	vd2 := DiskConfig{ID: "vd2", File: hosts["xfs"].Path("vd2.qcow2"), Format: "qcow2",
		Cache: "writeback", AIO: "io_uring", Discard: "unmap", Serial: "lab-vd2"}
	hot := DiskConfig{ID: "hot1", File: hosts["btrfs"].Path("hot1.raw"), Format: "raw",
		Cache: "writeback", AIO: "threads", Discard: "ignore", Serial: "lab-hot1"}
	hot2 := DiskConfig{ID: "hot2", File: hosts["ext4"].Path("hot2.qcow2"), Format: "qcow2",
		Cache: "none", AIO: "native", Discard: "unmap", Serial: "lab-hot2"}
	for _, img := range []struct {
		d       DiskConfig
		guestFS string
	}{{vd1, "none"}, {vd2, "xfs"}, {hot, "btrfs"}, {hot2, "ext4"}} {
		if err := MakeImage(ctx, img.d.File, img.d.Format, img.guestFS, 512); err != nil {
			t.Fatalf("make image: %v", err)
		}
	}
	assertImageFormat(t, vd2.File, "qcow2")
	assertImageFormat(t, vd1.File, "raw")

	port := freePort(t)
	bootStart := time.Now()
	vm, err := l.StartVM(ctx, VMConfig{
		Disks:   []DiskConfig{vd1, vd2},
		HostFwd: []Forward{{HostPort: port, GuestPort: 80}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot took %.1fs", time.Since(bootStart).Seconds())
	assertQEMUCommandLine(t, vm, vd1, vd2)

	dev1, err := vm.GuestDevice(ctx, vd1.Serial)
	if err != nil {
		t.Fatal(err)
	}
	dev2, err := vm.GuestDevice(ctx, vd2.Serial)
	if err != nil {
		t.Fatal(err)
	}
	if dev1 == dev2 {
		t.Fatalf("both disks map to guest device %s", dev1)
	}

	t.Run("run", func(t *testing.T) {
		out, rc, err := vm.Run(ctx, "echo out; echo err >&2; exit 3")
		if err != nil {
			t.Fatal(err)
		}
		if rc != 3 || out != "out\nerr\n" {
			t.Errorf("Run = %q, %d; want %q, 3", out, rc, "out\nerr\n")
		}
		// Bytes a tty would mangle (CR, control characters, no final
		// newline) must come back unchanged.
		out, err = vm.RunOK(ctx, `printf 'a\r\nb\001\033[0m\tc'`)
		if err != nil {
			t.Fatal(err)
		}
		if out != "a\r\nb\x01\x1b[0m\tc" {
			t.Errorf("output = %q", out)
		}
		// A command that outlives its context is killed in the guest and
		// the channel stays usable.
		short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
		_, _, err = vm.Run(short, "sleep 30")
		cancelShort()
		if err == nil {
			t.Error("Run of sleep 30 with a 2s deadline returned no error")
		}
		if out, err := vm.RunOK(ctx, "echo again"); err != nil || out != "again\n" {
			t.Errorf("after a timed-out command: %q, %v", out, err)
		}
		for _, mod := range []string{"virtio_blk", "virtio_pci", "xfs", "btrfs"} {
			if _, err := vm.RunOK(ctx, "test -d /sys/module/"+mod); err != nil {
				t.Errorf("module %s not loaded: %v", mod, err)
			}
		}
	})

	// Every job in jobs/ on the bare raw disk; QEMU's counters for vd1 must
	// grow at least by what fio did (the kernel may split but not drop
	// requests; merged requests show up in *_merged).
	// Writes before reads (so reads hit allocated blocks), discard last (so
	// there is something to free).
	order := []string{"seq-write", "seq-read", "rand-write", "rand-read", "flush", "discard"}
	if strings.Join(sortedCopy(order), ",") != strings.Join(Jobs(), ",") {
		t.Fatalf("jobs/ holds %v; give each job a place in this test", Jobs())
	}
	for _, name := range order {
		t.Run("fio/"+name, func(t *testing.T) {
			job, err := Job(name)
			if err != nil {
				t.Fatal(err)
			}
			before := blockStats(ctx, t, vm, "vd1")
			allocBefore := allocated(t, vd1.File)
			start := time.Now()
			res, err := vm.Fio(ctx, FioJob{File: job, Env: map[string]string{"DEV": "/dev/" + dev1}})
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			after := blockStats(ctx, t, vm, "vd1")
			tot := res.Total()
			t.Logf("%s: %.1fs, read %d B/%d ios, write %d B/%d ios, trim %d B/%d ios, syncs %d",
				name, took.Seconds(), tot.Read.IOBytes, tot.Read.TotalIOs, tot.Write.IOBytes,
				tot.Write.TotalIOs, tot.Trim.IOBytes, tot.Trim.TotalIOs, tot.Sync.TotalIOs)
			if len(res.Raw) == 0 || !strings.Contains(string(res.Raw), `"jobs"`) {
				t.Errorf("raw fio JSON missing")
			}
			d := diff(before.Node.Stats, after.Node.Stats)
			fileOK, fileBytes := discards(before, after)
			switch name {
			case "seq-read", "rand-read":
				wantOnly(t, tot, "read")
				if d.RdBytes < tot.Read.IOBytes {
					t.Errorf("qemu rd_bytes grew %d, fio read %d", d.RdBytes, tot.Read.IOBytes)
				}
				if d.RdOperations+d.RdMerged < tot.Read.TotalIOs {
					t.Errorf("qemu rd_operations+rd_merged grew %d, fio issued %d", d.RdOperations+d.RdMerged, tot.Read.TotalIOs)
				}
			case "seq-write", "rand-write":
				wantOnly(t, tot, "write")
				if d.WrBytes < tot.Write.IOBytes {
					t.Errorf("qemu wr_bytes grew %d, fio wrote %d", d.WrBytes, tot.Write.IOBytes)
				}
				if d.WrOperations+d.WrMerged < tot.Write.TotalIOs {
					t.Errorf("qemu wr_operations+wr_merged grew %d, fio issued %d", d.WrOperations+d.WrMerged, tot.Write.TotalIOs)
				}
				if after.Node.Stats.WrHighestOffset == 0 {
					t.Errorf("qemu wr_highest_offset still 0 after writes")
				}
			case "flush":
				if len(res.Jobs) != 2 {
					t.Fatalf("flush: %d jobs, want fsync and fdatasync", len(res.Jobs))
				}
				for _, j := range res.Jobs {
					// No sync follows a job's last write (see FioSync).
					if j.Write.TotalIOs == 0 || j.Sync.TotalIOs+1 < j.Write.TotalIOs {
						t.Errorf("job %s: %d syncs for %d writes, want one per write", j.Name, j.Sync.TotalIOs, j.Write.TotalIOs)
					}
				}
				if d.FlushOperations < tot.Sync.TotalIOs {
					t.Errorf("qemu flush_operations grew %d, fio synced %d times", d.FlushOperations, tot.Sync.TotalIOs)
				}
			case "discard":
				wantOnly(t, tot, "trim")
				// QEMU 7.2's virtio-blk does not count discards in
				// unmap_operations; with discard=unmap they reach the
				// image file, whose driver counts them.
				if fileOK == 0 || fileBytes < tot.Trim.IOBytes {
					t.Errorf("file node discards grew %d ops/%d B, fio trimmed %d B", fileOK, fileBytes, tot.Trim.IOBytes)
				}
				// ... and the host file system freed the blocks.
				if freed := int64(allocBefore) - int64(allocated(t, vd1.File)); freed < int64(tot.Trim.IOBytes)/2 {
					t.Errorf("image %s: %d bytes freed on the host after trimming %d", vd1.File, freed, tot.Trim.IOBytes)
				}
			default:
				t.Errorf("job %s has no expectations here; add them", name)
			}
			if took > 30*time.Second {
				t.Errorf("job %s took %s; jobs should take 5-10 s under TCG", name, took)
			}
		})
	}

	// xfs inside the qcow2 disk: write and sync a file, delete it and trim.
	// qcow2 passes a discard down only for clusters it had allocated, hence
	// the file is written first. fstrim skips extents xfs still considers
	// busy (freed, but not yet past a log checkpoint), so the file system
	// is remounted between the delete and the trim.
	t.Run("guest-fs", func(t *testing.T) {
		before := blockStats(ctx, t, vm, "vd2")
		out, err := vm.RunOK(ctx, fmt.Sprintf(
			"mkdir -p /mnt/vd2 && mount -t xfs /dev/%[1]s /mnt/vd2 && dd if=/dev/urandom of=/mnt/vd2/f bs=1M count=8 2>&1 && sync && "+
				"rm /mnt/vd2/f && umount /mnt/vd2 && mount -t xfs /dev/%[1]s /mnt/vd2 && fstrim -v /mnt/vd2 && umount /mnt/vd2", dev2))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("guest: %s", strings.TrimSpace(out))
		after := blockStats(ctx, t, vm, "vd2")
		d := diff(before.Node.Stats, after.Node.Stats)
		if d.WrBytes < 8<<20 || d.FlushOperations == 0 {
			t.Errorf("xfs write of 8 MiB and sync: qemu wr_bytes +%d, flushes +%d", d.WrBytes, d.FlushOperations)
		}
		if ok, _ := discards(before, after); ok == 0 {
			t.Errorf("fstrim on xfs in qcow2 with discard=unmap: no discards reached the image file")
		}
	})

	// User-mode networking with a forwarded port: busybox httpd in the
	// guest, fetched from the host.
	t.Run("network", func(t *testing.T) {
		if _, err := vm.RunOK(ctx, "mkdir -p /tmp/www && echo hello-from-guest >/tmp/www/index.html && httpd -p 80 -h /tmp/www"); err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/index.html", port)
		var body []byte
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get(url)
			if err == nil {
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v (status %v)", url, err, resp)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if string(body) != "hello-from-guest\n" {
			t.Errorf("GET %s = %q", url, body)
		}
	})

	// Hot plug a btrfs raw disk and an ext4 qcow2 disk, mount each in the
	// guest, check QEMU applied the cache mode as -drive would, unplug.
	for _, hd := range []struct {
		d       DiskConfig
		guestFS string
		direct  bool
	}{{hot, "btrfs", false}, {hot2, "ext4", true}} {
		t.Run("hotplug/"+hd.d.ID, func(t *testing.T) {
			dev, err := vm.HotplugDisk(ctx, hd.d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := vm.RunOK(ctx, "test -e /sys/block/"+dev); err != nil {
				t.Fatal(err)
			}
			if _, err := vm.RunOK(ctx, fmt.Sprintf(
				"mkdir -p /mnt/hot && mount -t %s /dev/%s /mnt/hot && echo hi >/mnt/hot/x && sync && umount /mnt/hot", hd.guestFS, dev)); err != nil {
				t.Fatal(err)
			}
			st := blockStats(ctx, t, vm, hd.d.ID)
			if st.Node.Stats.WrOperations == 0 || st.Node.Stats.FlushOperations == 0 {
				t.Errorf("hot-plugged disk: writes %d, flushes %d", st.Node.Stats.WrOperations, st.Node.Stats.FlushOperations)
			}
			raw, err := vm.QMP(ctx, "query-block", nil)
			if err != nil {
				t.Fatal(err)
			}
			var blocks []struct {
				QDev     string `json:"qdev"`
				Inserted struct {
					File  string `json:"file"`
					Cache struct {
						Direct    bool `json:"direct"`
						NoFlush   bool `json:"no-flush"`
						Writeback bool `json:"writeback"`
					} `json:"cache"`
				} `json:"inserted"`
			}
			if err := json.Unmarshal(raw, &blocks); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, b := range blocks {
				if qdevID(b.QDev) == hd.d.ID {
					found = true
					c := b.Inserted.Cache
					if b.Inserted.File != hd.d.File || c.Direct != hd.direct || c.NoFlush || !c.Writeback {
						t.Errorf("query-block for %s: %+v", hd.d.ID, b.Inserted)
					}
				}
			}
			if !found {
				t.Errorf("query-block has no %s", hd.d.ID)
			}
			if err := vm.Unplug(ctx, hd.d.ID); err != nil {
				t.Fatal(err)
			}
			if out, rc, err := vm.Run(ctx, "test -e /sys/block/"+dev); err != nil || rc == 0 {
				t.Errorf("/sys/block/%s still there after unplug (rc %d, %q, %v)", dev, rc, out, err)
			}
			stats, err := vm.BlockStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := stats[hd.d.ID]; ok {
				t.Errorf("qemu still has block stats for %s after unplug", hd.d.ID)
			}
		})
	}

	pid := vm.PID()
	if err := vm.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("qemu pid %d still exists after Stop", pid)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leaks, err := l.Leaks()
	if err != nil {
		t.Fatal(err)
	}
	if len(leaks) > 0 {
		t.Fatalf("leaks after Close: %v", leaks)
	}
	t.Logf("lab test took %.1fs", time.Since(began).Seconds())
}

// TestStartVMFailure boots a guest whose disk image does not exist: QEMU
// exits at once and the error must say why, with nothing left behind.
func TestStartVMFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := ForTest(t)
	missing := filepath.Join(l.Dir, "missing.raw")
	_, err := l.StartVM(ctx, VMConfig{Disks: []DiskConfig{{ID: "vd1", File: missing, Format: "raw"}}})
	if err == nil {
		t.Fatal("StartVM with a missing image succeeded")
	}
	if !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "qemu log") {
		t.Errorf("error does not name the image and carry QEMU's log: %v", err)
	}
	t.Logf("error, as expected: %v", err)
}

// allocated returns the bytes a file occupies on its file system.
func allocated(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512 // st_blocks counts 512-byte units (stat(2))
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func assertHostFS(t *testing.T, h *HostFS) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// mount point is field 5; the fs type follows the " - " separator.
		for i := range f {
			if f[i] == "-" && len(f) > i+2 && len(f) > 4 && f[4] == h.Dir {
				if f[i+1] != h.Type || f[i+2] != h.Loop {
					t.Fatalf("%s mounted as %s from %s, want %s from %s", h.Dir, f[i+1], f[i+2], h.Type, h.Loop)
				}
				return
			}
		}
	}
	t.Fatalf("%s is not mounted", h.Dir)
}

func assertImageFormat(t *testing.T, path, format string) {
	t.Helper()
	out, err := run(context.Background(), "qemu-img", "info", "--output=json", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf(`"format": %q`, format)) {
		t.Fatalf("%s: qemu-img info says %s", path, out)
	}
}

// assertQEMUCommandLine checks that the disks appear on QEMU's command line
// in the -drive/-device spelling the exporter's /proc scanner reads.
func assertQEMUCommandLine(t *testing.T, vm *VM, disks ...DiskConfig) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(vm.PID()), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(b), "\x00")
	has := func(opt, val string) bool {
		for i := 0; i+1 < len(args); i++ {
			if args[i] == opt && args[i+1] == val {
				return true
			}
		}
		return false
	}
	if !has("-name", "guest="+vm.Name+",debug-threads=on") {
		t.Errorf("no -name guest=%s in %q", vm.Name, args)
	}
	for _, d := range disks {
		if !has("-drive", d.driveArg()) || !has("-device", d.deviceArg()) {
			t.Errorf("disk %s not on the command line as -drive %s -device %s", d.ID, d.driveArg(), d.deviceArg())
		}
	}
}

func blockStats(ctx context.Context, t *testing.T, vm *VM, id string) BlockStats {
	t.Helper()
	stats, err := vm.BlockStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := stats[id]
	if !ok {
		t.Fatalf("no block stats for %s in %v", id, stats)
	}
	if st.Parent == nil {
		t.Fatalf("block stats for %s have no parent (file) node", id)
	}
	return st
}

// discards returns how many discards (requests, bytes) the image file's
// driver passed to the host file system between two samples.
func discards(before, after BlockStats) (ok, bytes uint64) {
	b, a := before.Parent.DriverSpecific, after.Parent.DriverSpecific
	if a == nil || b == nil {
		return 0, 0
	}
	return a.DiscardNbOK - b.DiscardNbOK, a.DiscardBytesOK - b.DiscardBytesOK
}

func diff(a, b BlockIOStats) BlockIOStats {
	return BlockIOStats{
		RdBytes:         b.RdBytes - a.RdBytes,
		WrBytes:         b.WrBytes - a.WrBytes,
		UnmapBytes:      b.UnmapBytes - a.UnmapBytes,
		RdOperations:    b.RdOperations - a.RdOperations,
		WrOperations:    b.WrOperations - a.WrOperations,
		FlushOperations: b.FlushOperations - a.FlushOperations,
		UnmapOperations: b.UnmapOperations - a.UnmapOperations,
		RdMerged:        b.RdMerged - a.RdMerged,
		WrMerged:        b.WrMerged - a.WrMerged,
	}
}

// wantOnly checks that a job moved data in one direction only.
func wantOnly(t *testing.T, tot FioJobResult, dir string) {
	t.Helper()
	got := map[string]uint64{"read": tot.Read.IOBytes, "write": tot.Write.IOBytes, "trim": tot.Trim.IOBytes}
	for k, v := range got {
		if (k == dir) != (v > 0) {
			t.Errorf("fio %s bytes = %d (job should only %s)", k, v, dir)
		}
	}
}
