package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// TestOwnReadsNotCounted: a disk tracked from a static config without a
// pid follows every process, but never the exporter's own reads of the
// image: here a qcow2 whose L1 table is 4 MiB, which the exporter reads
// again every second. In each attach mode this kernel runs, the exporter
// reads MBs of the image while its request counters (guest data and qcow2
// metadata alike) stay at 0, and so do its device requests while the page
// cache, dropped each second, sends those reads to the host device; another
// process's direct reads of the same file (pread, O_DIRECT) are counted
// exactly. The image is on XFS, where even the tracepoint
// mode sees buffered reads.
func TestOwnReadsNotCounted(t *testing.T) {
	ctx := context.Background()
	l := lab.ForTest(t)
	h, err := l.NewHostFS(ctx, "xfs", 512)
	if err != nil {
		t.Fatal(err)
	}
	img := h.Path("big-l1.qcow2")
	// 4 KiB clusters hold 512 L2 entries: 1 TiB of guest space takes
	// 512 Ki L1 entries, a 4 MiB L1 table.
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=4096", img, "1T").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	cfg := h.Path("disks.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("disks:\n  - domain: selfio\n    uuid: 00000000-0000-0000-0000-00000000fe11\n"+
		"    target_device: vda\n    source_file: %s\n    format: qcow2\n", img)), 0o600); err != nil {
		t.Fatal(err)
	}
	disk := map[string]string{"domain": "selfio", "target_device": "vda"}
	for _, mode := range exporterModes(t) {
		t.Run(mode, func(t *testing.T) {
			ex := runExporter(t, "--probe.mode="+mode, "--no-discovery.libvirt", "--no-discovery.proc",
				"--discovery.config.file="+cfg, "--discovery.interval=500ms", "--image.refresh-interval=1s")
			ex.waitFor(t, 20*time.Second, "the disk tracked", func(s scrape) bool {
				return len(s.series("fspair_disk_requests_total", disk)) > 0
			})
			pid := ex.cmd.Process.Pid
			read0, dev0 := procIO(t, pid, "rchar"), procIO(t, pid, "read_bytes")
			// The page cache dropped each second: the exporter's next
			// read of the table reaches the host device.
			for range 4 {
				if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
			}
			read, dev := procIO(t, pid, "rchar")-read0, procIO(t, pid, "read_bytes")-dev0
			s := ex.scrape(t)
			own := s.sum("fspair_disk_requests_total", disk) + s.sum("fspair_disk_format_metadata_requests_total", disk)
			ownDev := s.sum("fspair_disk_device_requests_total", disk)
			t.Logf("mode %s: the exporter read %d bytes in 4 s, %d of them from the device; counted %v requests, %v device requests",
				mode, read, dev, own, ownDev)
			if read < 8<<20 || dev < 4<<20 {
				t.Fatalf("the exporter read %d bytes of its own in 4 s, %d from the device, want >= 8 MiB and 4 MiB (its image checks): the case under test did not arise", read, dev)
			}
			if own != 0 {
				t.Errorf("the exporter's own reads were counted as the VM's: %v requests", own)
			}
			if ownDev != 0 {
				t.Errorf("the exporter's own reads were counted as the VM's device requests: %v", ownDev)
			}
			// Another process reads 8 clusters of the file (its header and
			// tables: qcow2 metadata) with pread(2) and O_DIRECT, as QEMU
			// reads with cache=none, which every mode follows.
			if out, err := exec.Command("fio", "--name=other", "--filename="+img, "--rw=read", "--bs=4k", "--size=32k",
				"--direct=1", "--ioengine=psync", "--invalidate=0").CombinedOutput(); err != nil {
				t.Fatalf("fio: %v: %s", err, out)
			}
			s, _ = ex.waitFor(t, 10*time.Second, "the other process's reads counted", func(s scrape) bool {
				return s.sum("fspair_disk_requests_total", map[string]string{"domain": "selfio", "op": "read"})+
					s.sum("fspair_disk_format_metadata_requests_total", map[string]string{"domain": "selfio", "op": "read"}) >= 8
			})
			got := s.sum("fspair_disk_requests_total", map[string]string{"domain": "selfio", "op": "read"}) +
				s.sum("fspair_disk_format_metadata_requests_total", map[string]string{"domain": "selfio", "op": "read"})
			if got != 8 {
				t.Errorf("another process's 8 direct reads counted as %v", got)
			}
		})
	}
}

// exporterModes are the attach modes this kernel runs: syscall and
// tracepoint always, fentry where the exporter finds trampolines.
func exporterModes(t *testing.T) []string {
	t.Helper()
	modes := []string{"syscall", "tracepoint"}
	out, err := exec.Command(binary(t), "--check", "--probe.mode=fentry", "--no-discovery.libvirt", "--no-discovery.proc",
		"--discovery.config.file=/dev/null").CombinedOutput()
	switch {
	case err == nil:
		modes = append([]string{"fentry"}, modes...)
	case !strings.Contains(string(out), "cannot attach fentry programs"):
		t.Fatalf("exporter --check --probe.mode=fentry: %v: %s", err, out)
	}
	return modes
}

// procIO is a field of /proc/PID/io: rchar, what a process has read
// through read system calls (from files, pipes and sockets alike), or
// read_bytes, what it had storage read for it.
func procIO(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+": "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/io", field, pid)
	return 0
}
