package e2e

import (
	"context"
	"os"
	"os/exec"
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
			bio := startRefTool(t, "biolatency", h.Loop)
			bsz := startRefTool(t, "bitesize", h.Loop)
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
			bioCount := total(bio.stop(t))
			sizes := bsz.stop(t)

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
			var reqs float64
			for _, k := range kindNames() {
				for _, op := range []string{"read", "write"} {
					l := merge(d, map[string]string{"kind": k, "op": op})
					reqs += s1.value(t, "fspair_host_device_requests_total", l) - s0.value(t, "fspair_host_device_requests_total", l)
				}
			}
			flushes := s1.value(t, "fspair_host_device_flushes_total", d) - s0.value(t, "fspair_host_device_flushes_total", d)
			reqs += flushes
			t.Logf("%s: %.0f device requests (%.0f flushes); libbpf-tools biolatency counted %.0f, bitesize %.0f", hostFS, reqs, flushes, bioCount, total(sizes))
			if !within(reqs, bioCount, 0.02) {
				t.Errorf("device requests %.0f vs biolatency %.0f: more than 2%% apart", reqs, bioCount)
			}
			if !within(reqs, total(sizes), 0.02) {
				t.Errorf("device requests %.0f vs bitesize %.0f: more than 2%% apart", reqs, total(sizes))
			}
			// bitesize's KiB buckets bound the bytes its requests moved.
			var lo, hi float64
			for _, b := range sizes {
				if b.lo > 0 {
					lo += b.count * b.lo * 1024
				}
				hi += b.count * (b.hi + 1) * 1024
			}
			t.Logf("%s: device bytes %.0f; bitesize buckets bound them to [%.0f, %.0f]", hostFS, devW+devR, lo, hi)
			if devW+devR < 0.98*lo || devW+devR > 1.02*hi {
				t.Errorf("device bytes %.0f outside bitesize's bounds [%.0f, %.0f]", devW+devR, lo, hi)
			}
			commits := s1.value(t, "fspair_host_device_commits_total", d) - s0.value(t, "fspair_host_device_commits_total", d)
			t.Logf("%s: %.0f journal commits / log writes / transaction commits", hostFS, commits)
			if commits <= 0 {
				t.Errorf("fsync-heavy workload: no journal commits counted on %s", hostFS)
			}
			// Flush cost: what the guest's flushes made the host write.
			m := map[string]string{"source_file": img}
			dm := func(name string, l map[string]string) float64 {
				return s1.value(t, name, merge(m, l)) - s0.value(t, name, merge(m, l))
			}
			flushN := dm("fspair_disk_requests_total", map[string]string{"op": "flush"})
			var flushData, flushMeta float64
			for _, src := range []struct{ source, kind string }{{"call", "data"}, {"call", "metadata"}, {"call", "other"}, {"journal", "metadata"}} {
				v := dm("fspair_disk_flush_device_write_bytes_total", map[string]string{"source": src.source, "kind": src.kind})
				if src.kind == "data" {
					flushData += v
				} else {
					flushMeta += v
				}
			}
			cacheFlushes := dm("fspair_disk_flush_device_cache_flushes_total", nil)
			t.Logf("%s: %.0f guest flushes caused %.0f B of image data, %.0f B of journal/metadata and %.0f cache flushes on the device (%.0f B per flush)",
				hostFS, flushN, flushData, flushMeta, cacheFlushes, (flushData+flushMeta)/flushN)
			if flushN < 400 || flushData <= 0 || flushMeta <= 0 || cacheFlushes <= 0 {
				t.Errorf("fsync-heavy workload on %s: flush cost not seen (flushes %.0f, data %.0f B, journal/metadata %.0f B, cache flushes %.0f)",
					hostFS, flushN, flushData, flushMeta, cacheFlushes)
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

// refTool is one of libbpf-tools' block tools (biolatency, bitesize)
// tracing one device, run beside the exporter as a reference.
type refTool struct {
	name string
	cmd  *exec.Cmd
	out  *logBuffer
}

func startRefTool(t *testing.T, name, dev string) *refTool {
	t.Helper()
	// stdbuf: the tool's stdout is a pipe here, line-buffer its banner.
	b := &refTool{name: name, cmd: exec.Command("stdbuf", "-oL", name, "-d", filepath.Base(dev)), out: &logBuffer{}}
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %s (libbpf-tools): %v", name, err)
	}
	// It prints its banner once attached.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.out.String(), "Tracing") {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start: %s", name, b.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b
}

// bucket is one line of a libbpf-tools log2 histogram: lo -> hi : count.
type bucket struct{ lo, hi, count float64 }

// stop ends the tool and returns the buckets it printed (summed over the
// per-process histograms bitesize prints).
func (b *refTool) stop(t *testing.T) []bucket {
	t.Helper()
	b.cmd.Process.Signal(os.Interrupt)
	b.cmd.Wait()
	var out []bucket
	var n float64
	for _, line := range strings.Split(b.out.String(), "\n") {
		// "     64 -> 127        : 12       |****     |"
		f := strings.Split(line, ":")
		if len(f) < 2 || !strings.Contains(f[0], "->") {
			continue
		}
		r := strings.Fields(strings.Replace(f[0], "->", " ", 1))
		c := strings.Fields(f[1])
		if len(r) != 2 || len(c) == 0 {
			continue
		}
		lo, err1 := strconv.ParseFloat(r[0], 64)
		hi, err2 := strconv.ParseFloat(r[1], 64)
		v, err3 := strconv.ParseFloat(c[0], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, bucket{lo, hi, v})
		n += v
	}
	if n == 0 {
		t.Fatalf("%s printed no histogram:\n%s", b.name, b.out.String())
	}
	return out
}

func total(bs []bucket) (n float64) {
	for _, b := range bs {
		n += b.count
	}
	return n
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

// TestBtrfsNocowAndCache: on a Btrfs host, a NOCOW (chattr +C, preallocated)
// image writes in place and amplifies less than a default copy-on-write one
// for the same workload; a cache=none disk's reads all reach the device
// and its writes bypass the host page cache, while a writeback disk's
// repeated reads are served by the host page cache and its rewrites absorbed.
func TestBtrfsNocowAndCache(t *testing.T) {
	l := lab.ForTest(t)
	ex := startExporter(t, "--image.refresh-interval=1s")
	ctx := context.Background()
	h, err := l.NewHostFS(ctx, "btrfs", 2048)
	if err != nil {
		t.Fatal(err)
	}
	cow, nocow, direct := h.Path("cow.raw"), h.Path("nocow.raw"), h.Path("direct.raw")
	for _, c := range [][]string{
		{"create", "-q", "-f", "raw", cow, "256M"},
		{"create", "-q", "-f", "raw", "-o", "nocow=on,preallocation=falloc", nocow, "256M"},
		{"create", "-q", "-f", "raw", direct, "256M"},
	} {
		exec1(t, "qemu-img", c...)
	}
	if out, _ := execCommand("lsattr", nocow).CombinedOutput(); !strings.Contains(strings.Fields(string(out))[0], "C") {
		t.Fatalf("nocow image lacks the C attribute: %s", out)
	}
	vm, err := l.StartVM(ctx, lab.VMConfig{Name: "nocow", Disks: []lab.DiskConfig{
		{ID: "cow", File: cow, Format: "raw", Cache: "writeback", AIO: "threads"},
		{ID: "nocow", File: nocow, Format: "raw", Cache: "writeback", AIO: "threads"},
		{ID: "direct", File: direct, Format: "raw", Cache: "none", AIO: "native"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ex.waitFor(t, 15*time.Second, "three disks", func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"domain": "nocow"})) == 3
	})
	d := map[string]string{"host_device": h.Loop}
	amp := map[string]float64{}
	for _, img := range []struct{ id, file string }{{"cow", cow}, {"nocow", nocow}} {
		dev, err := vm.GuestDevice(ctx, img.id)
		if err != nil {
			t.Fatal(err)
		}
		exec1(t, "sync")
		s0 := ex.scrape(t)
		// Overwrite the same 2 MiB twice with write+fsync: the second pass is a pure overwrite.
		for pass := 0; pass < 2; pass++ {
			if _, err := vm.Fio(ctx, lab.FioJob{Args: fioArgs("/dev/"+dev, "write", "4k", "2m", "--fsync=1")}); err != nil {
				t.Fatal(err)
			}
		}
		exec1(t, "sync")
		time.Sleep(500 * time.Millisecond)
		s1 := ex.scrape(t)
		f := map[string]string{"source_file": img.file, "op": "write"}
		delta := func(name string, l map[string]string) float64 { return s1.value(t, name, l) - s0.value(t, name, l) }
		guest := delta("fspair_disk_bytes_total", f)
		data := delta("fspair_disk_device_bytes_total", f)
		meta := delta("fspair_host_device_bytes_total", merge(d, map[string]string{"kind": "metadata", "op": "write"}))
		m := map[string]string{"source_file": img.file}
		cowX := delta("fspair_disk_btrfs_extents_total", merge(m, map[string]string{"mode": "cow"}))
		nocowX := delta("fspair_disk_btrfs_extents_total", merge(m, map[string]string{"mode": "nocow"}))
		amp[img.id] = (data + meta) / guest
		t.Logf("%s: guest %.0f B, image data %.0f B, metadata %.0f B, amplification %.2f; extents cow %.0f nocow %.0f",
			img.id, guest, data, meta, amp[img.id], cowX, nocowX)
		if img.id == "cow" && (cowX == 0 || nocowX != 0) {
			t.Errorf("default image: %.0f cow and %.0f nocow extents; want cow only", cowX, nocowX)
		}
		if img.id == "nocow" && (nocowX == 0 || cowX != 0) {
			t.Errorf("NOCOW image: %.0f cow and %.0f nocow extents; want nocow only", cowX, nocowX)
		}
	}
	if amp["nocow"] >= amp["cow"] {
		t.Errorf("amplification: NOCOW %.2f, CoW %.2f; want NOCOW lower", amp["nocow"], amp["cow"])
	}

	// Page-cache absorption: write 8 MiB, then read it back three times.
	for _, img := range []struct{ id, file string }{{"cow", cow}, {"direct", direct}} {
		dev, err := vm.GuestDevice(ctx, img.id)
		if err != nil {
			t.Fatal(err)
		}
		w0 := ex.scrape(t)
		// The same 8 MiB twice, with no flush between: the second pass lands on dirty pages.
		for pass := 0; pass < 2; pass++ {
			if _, err := vm.Fio(ctx, lab.FioJob{Args: fioArgs("/dev/"+dev, "write", "64k", "8m", "--offset=64m")}); err != nil {
				t.Fatal(err)
			}
		}
		s0 := ex.scrape(t)
		cw := func(result string) float64 {
			l := map[string]string{"source_file": img.file, "result": result}
			return s0.value(t, "fspair_disk_host_cache_write_bytes_total", l) - w0.value(t, "fspair_disk_host_cache_write_bytes_total", l)
		}
		t.Logf("%s: writes absorbed %.0f B, dirtied %.0f B, direct %.0f B", img.id, cw("absorbed"), cw("dirtied"), cw("direct"))
		if img.id == "direct" && (cw("absorbed") != 0 || cw("dirtied") != 0) {
			t.Errorf("cache=none: host page cache absorbed %.0f B and dirtied %.0f B; want none", cw("absorbed"), cw("dirtied"))
		}
		if img.id == "cow" && cw("absorbed") < 4<<20 {
			t.Errorf("cache=writeback: %.0f B absorbed by the host page cache, want >= 4 MiB of the 8 MiB rewrite", cw("absorbed"))
		}
		for i := 0; i < 3; i++ {
			if _, err := vm.Fio(ctx, lab.FioJob{Args: fioArgs("/dev/"+dev, "read", "64k", "8m", "--offset=64m")}); err != nil {
				t.Fatal(err)
			}
		}
		s1 := ex.scrape(t)
		f := map[string]string{"source_file": img.file, "op": "read"}
		guest := s1.value(t, "fspair_disk_bytes_total", f) - s0.value(t, "fspair_disk_bytes_total", f)
		device := s1.value(t, "fspair_disk_device_bytes_total", f) - s0.value(t, "fspair_disk_device_bytes_total", f)
		cr := func(result string) float64 {
			l := map[string]string{"source_file": img.file, "result": result}
			return s1.value(t, "fspair_disk_host_cache_read_bytes_total", l) - s0.value(t, "fspair_disk_host_cache_read_bytes_total", l)
		}
		t.Logf("%s: guest read %.0f B, device read %.0f B for the image; host cache hit %.0f B, miss %.0f B, direct %.0f B",
			img.id, guest, device, cr("hit"), cr("miss"), cr("direct"))
		if img.id == "direct" && (cr("hit") != 0 || !within(cr("direct"), guest, 0.02)) {
			t.Errorf("cache=none: host cache hits %.0f B, direct %.0f B of %.0f B read; want no hits, all direct", cr("hit"), cr("direct"), guest)
		}
		if img.id == "cow" && cr("hit") < 0.5*guest {
			t.Errorf("cache=writeback: host cache hits %.0f B of %.0f B read; want most", cr("hit"), guest)
		}
		if img.id == "direct" && !within(device, guest, 0.02) {
			t.Errorf("cache=none: device reads %.0f B, guest reads %.0f B; want equal (no host cache)", device, guest)
		}
		if img.id == "cow" && device > 0.5*guest {
			t.Errorf("cache=writeback: device reads %.0f B of guest %.0f B; want most served by the host page cache", device, guest)
		}
		if img.id == "direct" {
			// Stages add up: for direct I/O the file stage contains the device stage.
			st := func(stage string) float64 {
				for _, m := range s1.series("fspair_disk_stage_seconds", map[string]string{"source_file": img.file, "op": "read", "stage": stage}) {
					return m.GetHistogram().GetSampleSum()
				}
				return 0
			}
			t.Logf("direct reads: file stage %.4fs, device stage %.4fs, host queue %.4fs (sums)", st("file"), st("device"), st("host_queue"))
			if st("device") <= 0 || st("file") < st("device") {
				t.Errorf("stage sums: file %.4fs should be >= device %.4fs > 0", st("file"), st("device"))
			}
		}
	}
	time.Sleep(2 * time.Second) // one image refresh round
	s := ex.scrape(t)
	if alloc := s.value(t, "fspair_disk_image_allocated_bytes", map[string]string{"source_file": cow}); alloc < 10<<20 {
		t.Errorf("sparse CoW image after 10 MiB of distinct guest writes: %.0f bytes allocated", alloc)
	}
	for _, f := range []string{cow, nocow} {
		ext := s.value(t, "fspair_disk_image_extents", map[string]string{"source_file": f})
		alloc := s.value(t, "fspair_disk_image_allocated_bytes", map[string]string{"source_file": f})
		t.Logf("%s: %.0f extents, %.0f bytes allocated", filepath.Base(f), ext, alloc)
		if ext < 1 || alloc <= 0 {
			t.Errorf("%s: layout %.0f extents, %.0f allocated; want both > 0", f, ext, alloc)
		}
	}
	if alloc := s.value(t, "fspair_disk_image_allocated_bytes", map[string]string{"source_file": nocow}); alloc != 256<<20 {
		t.Errorf("preallocated NOCOW image: %.0f bytes allocated, want %d", alloc, 256<<20)
	}
}
