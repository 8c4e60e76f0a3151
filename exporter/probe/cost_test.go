package probe

import (
	"math/rand"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkRequestCost: the BPF run time fspair's programs take per
// request of a VMM's worker thread on this host, without a guest: 4 KiB
// O_DIRECT preads and pwrites at random offsets of a tracked 64 MiB file
// (QEMU's cache=none, aio=threads), half each, an fdatasync every 16
// requests. From the kernel's per-program statistics (--probe.stats);
// ns/request counts every program's runs, the host's other I/O on the
// same file system and devices included, as bench/pathcost does with a
// guest. The shape histograms sample as the exporter loads them.
//
//	go test ./exporter/probe -run '^$' -bench RequestCost -benchtime 20000x -count 6
func BenchmarkRequestCost(b *testing.B) {
	for _, m := range []Mode{ModeFentry, ModeTracepoint} {
		b.Run(string(m), func(b *testing.B) {
			p, err := Load(Options{Mode: m, followSelf: true, Stats: true})
			if err != nil {
				b.Skipf("mode %s: %v", m, err)
			}
			defer p.Close()
			f := trackFile(b, p, filepath.Join(b.TempDir(), "disk.img"), 3)
			if err := f.Truncate(64 << 20); err != nil {
				b.Fatal(err)
			}
			fd, err := unix.Open(f.Name(), unix.O_RDWR|unix.O_DIRECT, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Close(fd)
			buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Munmap(buf)
			before := p.runTimes(b)
			rng := rand.New(rand.NewSource(1))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := rng.Int63n(16384) * 4096
				if i%2 == 0 {
					_, err = unix.Pread(fd, buf, off)
				} else {
					_, err = unix.Pwrite(fd, buf, off)
				}
				if err == nil && i%16 == 15 {
					err = unix.Fdatasync(fd)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c, err := p.Counters(3)
			if err != nil {
				b.Fatal(err)
			}
			if got := c.Requests[opRead] + c.Requests[opWrite]; got != uint64(b.N) {
				b.Fatalf("%d reads and writes counted of %d", got, b.N)
			}
			var total float64
			for name, ns := range p.runTimes(b) {
				d := float64(ns-before[name]) / float64(b.N)
				total += d
				if d >= 1 {
					b.ReportMetric(d, strings.ReplaceAll(name, "_", "-")+"-ns/req")
				}
			}
			b.ReportMetric(total, "bpf-ns/req")
		})
	}
}

// runTimes is each attached program's run time so far (ns), by name.
func (p *Probes) runTimes(b *testing.B) map[string]uint64 {
	out := map[string]uint64{}
	for _, pr := range p.programs {
		if pr.prog == nil {
			continue
		}
		st, err := pr.prog.Stats()
		if err != nil {
			b.Fatalf("run time of %s: %v", pr.Name, err)
		}
		out[pr.Name] = uint64(st.Runtime.Nanoseconds())
	}
	return out
}
