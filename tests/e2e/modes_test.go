package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// TestModesAgree: changing the probe mode changes what the host pays, never
// what the counters mean. One guest drives disks on ext4, XFS and Btrfs host
// file systems through QEMU's three aio modes while an exporter in each mode
// this kernel runs watches the same disks. Per disk and op, every mode that
// follows the path counts exactly what reached the image file (reads and
// writes: QEMU's query-blockstats less merged; flushes: the syscall mode's
// count of QEMU's flush calls); a mode that does not follow it says so in
// fspair_disk_unfollowed and counts nothing for it, never a partial 0.
func TestModesAgree(t *testing.T) {
	ctx := context.Background()
	l := lab.ForTest(t)
	modes := exporterModes(t)
	exporters := map[string]*exporter{}
	for _, m := range modes {
		exporters[m] = startExporter(t, "--probe.mode="+m)
	}
	var disks []lab.DiskConfig
	for _, hostFS := range []string{"ext4", "xfs", "btrfs"} {
		h, err := l.NewHostFS(ctx, hostFS, 512)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range aioModes {
			id := fmt.Sprintf("%s%s", hostFS[:2], m.aio[:2])
			path := h.Path(id + ".raw")
			if err := makeDataImage(ctx, path, "raw"); err != nil {
				t.Fatal(err)
			}
			disks = append(disks, lab.DiskConfig{ID: id, File: path, Format: "raw", Cache: m.cache, AIO: m.aio})
		}
	}
	vm, err := l.StartVM(ctx, lab.VMConfig{Name: "modes", Disks: disks})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		exporters[m].waitFor(t, 30*time.Second, fmt.Sprintf("%d disks in mode %s", len(disks), m), func(s scrape) bool {
			return len(s.series("fspair_disk_requests_total", map[string]string{"domain": "modes", "op": "read"})) == len(disks)
		})
	}
	for _, d := range disks {
		t.Run(d.ID, func(t *testing.T) {
			dev, err := vm.GuestDevice(ctx, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			before := map[string]scrape{}
			for m, ex := range exporters {
				before[m] = ex.scrape(t)
			}
			bs0 := blockStats(t, vm, d.ID)
			// Random 4 KiB reads and writes, a flush after every fourth write.
			if _, err := vm.Fio(ctx, lab.FioJob{Args: fioArgs("/dev/"+dev, "randrw", "4k", "64m",
				"--number_ios=400", "--fsync=4")}); err != nil {
				t.Fatal(err)
			}
			bs := blockStats(t, vm, d.ID).minus(bs0)
			time.Sleep(1500 * time.Millisecond)
			after := map[string]scrape{}
			for m, ex := range exporters {
				after[m] = ex.scrape(t)
			}
			count := func(m, name string, k map[string]string) float64 {
				a, err := after[m].get(name, k)
				if err != nil {
					t.Fatal(err)
				}
				b, err := before[m].get(name, k)
				if err != nil {
					t.Fatal(err)
				}
				return a - b
			}
			// Reads and writes: what reached the image file, QEMU's requests
			// less those it merged. Flushes: the syscall mode's count of
			// QEMU's flush calls (QEMU skips a guest flush with nothing
			// written since the last, so its own flush count is higher).
			want := map[string]float64{"read": bs.RdOperations - bs.RdMerged, "write": bs.WrOperations - bs.WrMerged,
				"flush": count("syscall", "fspair_disk_requests_total", map[string]string{"source_file": d.File, "op": "flush"})}
			if want["flush"] == 0 || want["flush"] > bs.FlushOperations {
				t.Fatalf("%s: the syscall mode counted %.0f flushes, QEMU's guest flushes %.0f", d.ID, want["flush"], bs.FlushOperations)
			}
			for _, op := range []string{"read", "write", "flush"} {
				k := map[string]string{"source_file": d.File, "op": op}
				for _, m := range modes {
					got := count(m, "fspair_disk_requests_total", k)
					timed := count(m, "fspair_disk_request_duration_seconds", k)
					gaps := after[m].series("fspair_disk_unfollowed", map[string]string{"source_file": d.File, "op": op})
					missing := map[string]bool{}
					for _, g := range gaps {
						missing[labelsOf(g)["measure"]] = true
					}
					t.Logf("%s %s: mode %s counted %.0f (%.0f timed), want %.0f, unfollowed %v", d.ID, op, m, got, timed, want[op], missing)
					switch {
					case missing["requests"]:
						if got != 0 {
							t.Errorf("%s: mode %s says it does not follow %s, yet counted %.0f", d.ID, m, op, got)
						}
						if m == "syscall" || m == "fentry" {
							t.Errorf("%s: mode %s does not follow %s on %s/%s", d.ID, m, op, d.Cache, d.AIO)
						}
					case got != want[op]:
						t.Errorf("%s: mode %s counted %.0f %s requests, want %.0f", d.ID, m, got, op, want[op])
					case missing["latency"]:
						if timed != 0 {
							t.Errorf("%s: mode %s says it does not time %s, yet timed %.0f", d.ID, m, op, timed)
						}
					case timed != got:
						t.Errorf("%s: mode %s timed %.0f of %.0f %s requests", d.ID, m, timed, got, op)
					}
				}
			}
		})
	}
}
