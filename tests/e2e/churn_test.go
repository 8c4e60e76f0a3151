package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

func vmDevices(s scrape, dev string) float64 {
	for _, m := range s.series("fspair_host_device_vm_disks", map[string]string{"host_device": dev}) {
		return m.GetGauge().GetValue()
	}
	return 0
}

// TestTwoVMsAndHotplug: two guests doing I/O at the same time are told
// apart; a qcow2 image that allocates as it is written shows its format
// metadata I/O apart from the guest's data; a disk hot-plugged over QMP
// appears within 10 s and disappears when unplugged.
func TestTwoVMsAndHotplug(t *testing.T) {
	l := lab.ForTest(t)
	ex := startExporter(t)
	ctx := context.Background()
	h, err := l.NewHostFS(ctx, "ext4", 2048)
	if err != nil {
		t.Fatal(err)
	}
	rawImg, qcowImg, plugImg := h.Path("a.raw"), h.Path("b.qcow2"), h.Path("plug.raw")
	if err := makeDataImage(ctx, rawImg, "raw"); err != nil {
		t.Fatal(err)
	}
	// Not preallocated: writes allocate clusters, L2 entries and refcounts.
	if err := lab.MakeImage(ctx, qcowImg, "qcow2", "none", 256); err != nil {
		t.Fatal(err)
	}
	if err := makeDataImage(ctx, plugImg, "raw"); err != nil {
		t.Fatal(err)
	}
	vmA, err := l.StartVM(ctx, lab.VMConfig{Name: "two-a", Disks: []lab.DiskConfig{
		{ID: "a1", File: rawImg, Format: "raw", Cache: "writeback", AIO: "threads"}}})
	if err != nil {
		t.Fatal(err)
	}
	vmB, err := l.StartVM(ctx, lab.VMConfig{Name: "two-b", Disks: []lab.DiskConfig{
		{ID: "b1", File: qcowImg, Format: "qcow2", Cache: "none", AIO: "io_uring"}}})
	if err != nil {
		t.Fatal(err)
	}
	ex.waitFor(t, 15*time.Second, "both VMs' disks", func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"source_file": rawImg, "domain": "two-a"})) == 1 &&
			len(s.series("fspair_disk_info", map[string]string{"source_file": qcowImg, "domain": "two-b"})) == 1
	})

	before := ex.scrape(t)
	jobs := []struct {
		vm   *lab.VM
		id   string
		file string
		args func(dev string) []string
	}{
		{vmA, "a1", rawImg, func(dev string) []string { return fioArgs(dev, "randwrite", "4k", "64m", "--number_ios=2000") }},
		{vmB, "b1", qcowImg, func(dev string) []string { return fioArgs(dev, "write", "64k", "48m") }},
	}
	fioWrites := make([]float64, len(jobs))
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs))
	for i, j := range jobs {
		dev, err := j.vm.GuestDevice(ctx, j.id)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(i int, dev string) {
			defer wg.Done()
			res, err := jobs[i].vm.Fio(ctx, lab.FioJob{Args: jobs[i].args("/dev/" + dev)})
			if err != nil {
				errs <- err
				return
			}
			fioWrites[i] = float64(res.Total().Write.TotalIOs)
		}(i, dev)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	exec1(t, "sync") // write back VM A's host page cache
	time.Sleep(500 * time.Millisecond)
	after := ex.scrape(t)
	// Host side: both images on one host FS device; each image's device
	// data is its own, and together they are all the device's data.
	dd := map[string]string{"host_device": h.Loop, "kind": "data", "op": "write"}
	devData := after.value(t, "fspair_host_device_bytes_total", dd) - before.value(t, "fspair_host_device_bytes_total", dd)
	var imgSum float64
	for _, j := range jobs {
		w := map[string]string{"source_file": j.file, "op": "write"}
		dev := after.value(t, "fspair_disk_device_bytes_total", w) - before.value(t, "fspair_disk_device_bytes_total", w)
		guest := after.value(t, "fspair_disk_bytes_total", w) - before.value(t, "fspair_disk_bytes_total", w)
		t.Logf("%s: guest wrote %.0f B, its image's data on the host device %.0f B", j.id, guest, dev)
		if dev <= 0 || dev > 1.1*guest+(1<<20) {
			t.Errorf("%s: device data %.0f B for %.0f B of guest writes: not its own share", j.id, dev, guest)
		}
		imgSum += dev
	}
	if imgSum != devData {
		t.Errorf("device data writes %.0f B, but the two images account for %.0f B", devData, imgSum)
	}
	if v := vmDevices(after, h.Loop); v != 2 {
		t.Errorf("fspair_host_device_vm_disks = %.0f, want 2", v)
	}
	for i, j := range jobs {
		w := map[string]string{"source_file": j.file, "op": "write"}
		got := after.value(t, "fspair_disk_requests_total", w) - before.value(t, "fspair_disk_requests_total", w)
		if !within(got, fioWrites[i], 0.02) {
			t.Errorf("%s: exporter %.0f writes, fio %.0f (within 2%%)", j.id, got, fioWrites[i])
		}
		t.Logf("%s: exporter %.0f writes, fio %.0f", j.id, got, fioWrites[i])
	}
	meta := after.value(t, "fspair_disk_format_metadata_requests_total", map[string]string{"source_file": qcowImg, "op": "write"})
	t.Logf("b1 (qcow2, allocating): %.0f format metadata writes", meta)
	if meta == 0 {
		t.Errorf("allocating qcow2 writes: no format metadata writes seen")
	}
	if v := after.value(t, "fspair_disk_format_metadata_requests_total", map[string]string{"source_file": rawImg, "op": "write"}); v != 0 {
		t.Errorf("raw image: %.0f format metadata writes, want 0", v)
	}

	// Hot-plug into the running guest A.
	start := time.Now()
	dev, err := vmA.HotplugDisk(ctx, lab.DiskConfig{ID: "plug1", File: plugImg, Format: "raw", Cache: "none", AIO: "native"})
	if err != nil {
		t.Fatal(err)
	}
	_, took := ex.waitFor(t, 10*time.Second, "hot-plugged disk", func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"source_file": plugImg, "domain": "two-a"})) == 1
	})
	t.Logf("hot-plugged disk exported %.1fs after device_add returned (%.1fs after it was issued)", took.Seconds(), time.Since(start).Seconds())
	res, err := vmA.Fio(ctx, lab.FioJob{Args: fioArgs("/dev/"+dev, "randread", "4k", "64m", "--number_ios=500")})
	if err != nil {
		t.Fatal(err)
	}
	s := ex.scrape(t)
	if got := s.value(t, "fspair_disk_requests_total", map[string]string{"source_file": plugImg, "op": "read"}); !within(got, float64(res.Total().Read.TotalIOs), 0.02) {
		t.Errorf("hot-plugged disk: exporter %.0f reads, fio %d", got, res.Total().Read.TotalIOs)
	}
	if err := vmA.Unplug(ctx, "plug1"); err != nil {
		t.Fatal(err)
	}
	_, took = ex.waitFor(t, 10*time.Second, "unplugged disk to go", func(s scrape) bool {
		return len(s.series("fspair_disk_info", map[string]string{"source_file": plugImg})) == 0
	})
	t.Logf("unplugged disk gone %.1fs after unplug", took.Seconds())
}
