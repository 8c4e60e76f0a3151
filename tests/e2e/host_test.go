package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

func sysBlockBytes(t *testing.T, dev string) (rd, wr float64) {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	r, _ := strconv.ParseFloat(f[2], 64)
	w, _ := strconv.ParseFloat(f[6], 64)
	return r * 512, w * 512
}

// TestHostSide: for an fsync-heavy guest workload on each host file system,
// the host device's requests are attributed (image data, journal/metadata,
// other) and add up to the device's own /sys/block counters, and Btrfs
// writes more device bytes per guest byte than ext4 and XFS.
func TestHostSide(t *testing.T) {
	l := lab.ForTest(t)
	ex := startExporter(t)
	ctx := context.Background()
	amp := map[string]float64{}
	for _, hostFS := range []string{"ext4", "xfs", "btrfs"} {
		t.Run(hostFS, func(t *testing.T) {
			h, err := l.NewHostFS(ctx, hostFS, 2048)
			if err != nil {
				t.Fatal(err)
			}
			img := h.Path("sync.raw")
			if err := makeDataImage(ctx, img, "raw"); err != nil {
				t.Fatal(err)
			}
			vm, err := l.StartVM(ctx, lab.VMConfig{Name: "host-" + hostFS, Disks: []lab.DiskConfig{
				{ID: "s1", File: img, Format: "raw", Cache: "writeback", AIO: "threads"}}})
			if err != nil {
				t.Fatal(err)
			}
			ex.waitFor(t, 15*time.Second, "the disk", func(s scrape) bool {
				return len(s.series("fspair_host_device_vm_disks", map[string]string{"host_device": h.Loop})) == 1
			})
			dev, err := vm.GuestDevice(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			// Let boot-time I/O settle, then measure the workload alone.
			vm.RunOK(ctx, "sync")
			exec1(t, "sync")
			s0 := ex.scrape(t)
			rd0, wr0 := sysBlockBytes(t, h.Loop)
			// fsync-heavy: 4 KiB writes each followed by a flush, then 16 MiB streamed.
			if _, err := vm.Fio(ctx, lab.FioJob{Args: fioArgs("/dev/"+dev, "randwrite", "4k", "64m", "--number_ios=400", "--fsync=1")}); err != nil {
				t.Fatal(err)
			}
			if _, err := vm.Fio(ctx, lab.FioJob{Args: fioArgs("/dev/"+dev, "write", "64k", "16m", "--offset=128m", "--end_fsync=1")}); err != nil {
				t.Fatal(err)
			}
			exec1(t, "sync")
			time.Sleep(500 * time.Millisecond)
			rd1, wr1 := sysBlockBytes(t, h.Loop)
			s1 := ex.scrape(t)

			d := map[string]string{"host_device": h.Loop}
			sum := func(s scrape, op string) (total float64, byKind map[string]float64) {
				byKind = map[string]float64{}
				for _, k := range kindNames() {
					v := s.value(t, "fspair_host_device_bytes_total", merge(d, map[string]string{"kind": k, "op": op}))
					byKind[k] = v
					total += v
				}
				return
			}
			w0, _ := sum(s0, "write")
			w1, kinds1 := sum(s1, "write")
			_, kinds0 := sum(s0, "write")
			r0, _ := sum(s0, "read")
			r1, _ := sum(s1, "read")
			devW, devR := w1-w0, r1-r0
			t.Logf("%s: device writes %.0f B (data %.0f, metadata %.0f, other %.0f), /sys/block %.0f; reads %.0f vs %.0f",
				hostFS, devW, kinds1["data"]-kinds0["data"], kinds1["metadata"]-kinds0["metadata"], kinds1["other"]-kinds0["other"],
				wr1-wr0, devR, rd1-rd0)
			if !within(devW, wr1-wr0, 0.02) || !within(devR, rd1-rd0, 0.02) {
				t.Errorf("device totals (write %.0f, read %.0f) differ from /sys/block (%.0f, %.0f) by more than 2%%", devW, devR, wr1-wr0, rd1-rd0)
			}
			if kinds1["metadata"]-kinds0["metadata"] <= 0 {
				t.Errorf("fsync-heavy workload: no journal/metadata writes on %s", hostFS)
			}
			f := map[string]string{"source_file": img, "op": "write"}
			guest := s1.value(t, "fspair_disk_bytes_total", f) - s0.value(t, "fspair_disk_bytes_total", f)
			data := s1.value(t, "fspair_disk_device_bytes_total", f) - s0.value(t, "fspair_disk_device_bytes_total", f)
			if data <= 0 || guest <= 0 {
				t.Fatalf("image data on the device %.0f B, guest writes %.0f B: want both > 0", data, guest)
			}
			// The image's data plus the device's metadata, over the guest's bytes.
			amp[hostFS] = (data + kinds1["metadata"] - kinds0["metadata"]) / guest
			t.Logf("%s: guest wrote %.0f B, image data on device %.0f B, write amplification %.2f", hostFS, guest, data, amp[hostFS])
			if err := vm.Stop(); err != nil {
				t.Error(err)
			}
		})
	}
	if amp["btrfs"] <= amp["ext4"] || amp["btrfs"] <= amp["xfs"] {
		t.Errorf("write amplification: btrfs %.2f, ext4 %.2f, xfs %.2f; want btrfs highest", amp["btrfs"], amp["ext4"], amp["xfs"])
	}
}

func kindNames() []string { return []string{"data", "metadata", "other"} }

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func exec1(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := execCommand(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", name, err, out)
	}
}
