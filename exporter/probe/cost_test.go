package probe

import (
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
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
	for name, st := range p.runStats(b) {
		out[name] = uint64(st.Runtime.Nanoseconds())
	}
	return out
}

// runStats is each attached program's run count and time so far, by name.
func (p *Probes) runStats(b *testing.B) map[string]ebpf.ProgramStats {
	out := map[string]ebpf.ProgramStats{}
	for _, pr := range p.programs {
		if pr.prog == nil {
			continue
		}
		st, err := pr.prog.Stats()
		if err != nil {
			b.Fatalf("run time of %s: %v", pr.Name, err)
		}
		out[pr.Name] = *st
	}
	return out
}

// BenchmarkEngineCost: the BPF run time per request of each of QEMU's aio
// modes without a guest, the host-side loop of bench/pathcost: fio (psync
// for aio=threads, libaio for aio=native, io_uring for aio=io_uring) does
// 4 KiB O_DIRECT random reads and writes, half each, an fdatasync every 8
// writes, at queue depth 1, on a tracked image on a loop-backed ext4 whose
// device is followed, so the block-layer programs do their work as they do
// for a guest's image. fio is another process: the disk has no known VMM,
// which follows every process but the exporter (SetVMM's 0). Each fio run
// is one b.N; every program's run time over it is divided by the requests
// counted (reads, writes and flushes, checked against fio's own count), and
// reported per program beside the total (bpf-ns/req). The programs load as
// the exporter loads them (the shape histograms sample 1 in 8).
//
//	go test ./exporter/probe -run '^$' -bench EngineCost/tracepoint -benchtime 1x -count 3
func BenchmarkEngineCost(b *testing.B) {
	fioCostModes(b, false, func(b *testing.B, p *Probes) {
		f := followedExt4(b, p)
		followForAll(b, p, f, 128<<20)
		for _, engine := range []string{"psync", "libaio", "io_uring"} {
			b.Run(engine, func(b *testing.B) { engineCost(b, p, f.Name(), engine) })
		}
	})
}

// fioCostModes runs bench in each mode that loads here, with the programs
// loaded as the exporter loads them and their run-time statistics on.
func fioCostModes(b *testing.B, perCPU bool, bench func(*testing.B, *Probes)) {
	if _, err := exec.LookPath("fio"); err != nil {
		b.Fatal("fio is needed (make test-deps installs it)")
	}
	for _, m := range []Mode{ModeFentry, ModeTracepoint} {
		b.Run(string(m), func(b *testing.B) {
			p, err := Load(Options{Mode: m, Stats: true, perCPUCounters: perCPU})
			if err != nil {
				b.Skipf("mode %s: %v", m, err)
			}
			defer p.Close()
			bench(b, p)
		})
	}
}

// followedExt4 makes a loop-backed ext4 whose device p follows (slot 1)
// and tracks a file on it, disk.img, as slot 3 (trackFile).
func followedExt4(b *testing.B, p *Probes) *os.File {
	loop, mnt := loopFS(b, "mkfs.ext4", 512)
	var st unix.Stat_t
	if err := unix.Stat(loop, &st); err != nil {
		b.Fatal(err)
	}
	f := trackFile(b, p, filepath.Join(mnt, "disk.img"), 3)
	if err := p.TrackDevice(uint32(unix.Major(st.Rdev))<<20|uint32(unix.Minor(st.Rdev)), 1); err != nil {
		b.Fatal(err)
	}
	return f
}

// engineIOs is the reads and writes of one fio run of BenchmarkEngineCost.
const engineIOs = 20000

// fioIOs runs fio with args (one job) and returns the reads and writes it did.
func fioIOs(b *testing.B, args ...string) uint64 {
	out, err := exec.Command("fio", append(args, "--output-format=json")...).Output()
	if err != nil {
		b.Fatalf("fio %v: %v", args, err)
	}
	var res struct {
		Jobs []struct {
			Read, Write struct {
				TotalIOs uint64 `json:"total_ios"`
			}
		}
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) != 1 {
		b.Fatalf("fio %v: output: %v", args, err)
	}
	return res.Jobs[0].Read.TotalIOs + res.Jobs[0].Write.TotalIOs
}

func engineCost(b *testing.B, p *Probes, path, engine string) {
	var requests float64
	times := progTimes{}
	for i := 0; i < b.N; i++ {
		before, c0 := p.runTimes(b), counters(b, p)
		want := fioIOs(b, "--name=cost", "--filename="+path, "--ioengine="+engine, "--direct=1",
			"--rw=randrw", "--bs=4k", "--size=128m", "--iodepth=1", "--fdatasync=8", "--randrepeat=0",
			"--number_ios="+strconv.Itoa(engineIOs))
		c1 := counters(b, p)
		rw := c1.Requests[opRead] + c1.Requests[opWrite] - c0.Requests[opRead] - c0.Requests[opWrite]
		if rw != want {
			b.Fatalf("fio %s: %d reads and writes counted, fio did %d", engine, rw, want)
		}
		requests += float64(rw + c1.Requests[opFlush] - c0.Requests[opFlush])
		times.add(b, p, before)
	}
	times.report(b, requests)
}

// progTimes is each program's run time (ns) summed over a benchmark's runs.
type progTimes map[string]float64

// add adds each program's run time since before.
func (t progTimes) add(b *testing.B, p *Probes, before map[string]uint64) {
	for name, ns := range p.runTimes(b) {
		t[name] += float64(ns - before[name])
	}
}

// report reports each program's time per request (those of 1 ns or more)
// and all programs' (bpf-ns/req).
func (t progTimes) report(b *testing.B, requests float64) {
	var total float64
	for name, ns := range t {
		total += ns
		if d := ns / requests; d >= 1 {
			b.ReportMetric(d, strings.ReplaceAll(name, "_", "-")+"-ns/req")
		}
	}
	b.ReportMetric(total/requests, "bpf-ns/req")
}

// BenchmarkUntrackedCost: the BPF run time fspair's programs take for I/O
// it does not follow on a device it does: fio (another process) does 4 KiB
// random writes into the page cache of an untracked file beside a tracked
// image on a loop-backed ext4 whose device is followed, with an fsync
// every 64 writes so that its writeback goes through the block programs
// during the run, or 4 KiB O_DIRECT random reads of that file. Each
// program's time is reported per run of it (ns/run) and per fio request
// (ns/req), beside the total per request (bpf-ns/req): the block
// completion's cost for another file's requests is what its ns/run shows.
//
//	go test ./exporter/probe -run '^$' -bench UntrackedCost/tracepoint -benchtime 1x -count 3
func BenchmarkUntrackedCost(b *testing.B) {
	fioCostModes(b, false, func(b *testing.B, p *Probes) {
		other := filepath.Join(filepath.Dir(followedExt4(b, p).Name()), "other.dat")
		for _, w := range []struct{ name, rw, direct, fsync string }{
			{"randwrite-cached", "randwrite", "0", "64"},
			{"randread-direct", "randread", "1", "0"},
		} {
			b.Run(w.name, func(b *testing.B) {
				untrackedCost(b, p, "--filename="+other, "--rw="+w.rw, "--direct="+w.direct, "--fsync="+w.fsync)
			})
		}
	})
}

func untrackedCost(b *testing.B, p *Probes, args ...string) {
	var requests float64
	runs, times := map[string]float64{}, map[string]float64{}
	for i := 0; i < b.N; i++ {
		before := p.runStats(b)
		requests += float64(fioIOs(b, append([]string{"--name=untracked", "--ioengine=psync", "--bs=4k", "--size=64m",
			"--randrepeat=0", "--end_fsync=1", "--number_ios=" + strconv.Itoa(engineIOs)}, args...)...))
		for name, st := range p.runStats(b) {
			runs[name] += float64(st.RunCount - before[name].RunCount)
			times[name] += float64(st.Runtime - before[name].Runtime)
		}
	}
	var total float64
	for name, ns := range times {
		total += ns
		if runs[name] == 0 || ns/requests < 1 {
			continue
		}
		n := strings.ReplaceAll(name, "_", "-")
		b.ReportMetric(ns/runs[name], n+"-ns/run")
		b.ReportMetric(ns/requests, n+"-ns/req")
	}
	b.ReportMetric(total/requests, "bpf-ns/req")
}
