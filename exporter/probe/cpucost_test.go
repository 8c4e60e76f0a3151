package probe

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// perCPUCounters loads BenchmarkCPUCost's programs with the disk's counters
// in a per-CPU array (Options.perCPUCounters), a third layout beside the
// two builds.
var perCPUCounters = flag.Bool("cpucost.percpu", false, "BenchmarkCPUCost: the disk's counters in a per-CPU array")

// BenchmarkCPUCost's sizes and its hook. The hook is for a TCG guest
// (tests/matrix cpucost), whose second vCPU must be offline while programs
// attach and detach (tests/matrix/README.md, "Probe tests and two vCPUs"):
// it runs as `sh -c HOOK hook attached` once the programs are attached and
// the images written, before the first fio run, and as `... detach` after
// the last, before anything is detached; its output goes to stdout.
var (
	cpuCostDirectIOs = flag.Int("cpucost.direct-ios", 40000, "BenchmarkCPUCost: O_DIRECT writes per fio job")
	cpuCostCachedIOs = flag.Int("cpucost.cached-ios", 200000, "BenchmarkCPUCost: page-cache writes per fio job")
	cpuCostHook      = flag.String("cpucost.hook", "", "BenchmarkCPUCost: shell command run with the argument attached before the fio runs and detach after them")
)

// runCPUCostHook runs -cpucost.hook with the argument stage, if one is set.
func runCPUCostHook(b *testing.B, stage string) {
	if *cpuCostHook == "" {
		return
	}
	cmd := exec.Command("sh", "-c", *cpuCostHook, "hook", stage)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("-cpucost.hook %s: %v", stage, err)
	}
}

// BenchmarkCPUCost: what the disk's counters, shared by every CPU, cost
// when requests on them come from two CPUs at once, without a guest: fio
// writes 4 KiB at random offsets, O_DIRECT or into the page cache, with one
// job pinned to CPU 0, then two jobs pinned to CPUs 0 and 1 (fio's
// cpus_allowed_policy=split) on one tracked image, then on two, each its own
// disk slot, on a loop-backed XFS whose device is followed (XFS, because the
// tracepoint mode follows its page-cache writes: xfs_file_buffered_write).
// Two jobs on one image update the same counter lines from both CPUs; on two
// images only the device's counters are shared. Reported per fio run: the
// BPF run time of every program over the requests (bpf-ns/req, and per
// program), and fio's requests per second summed over its jobs (req/s).
// The requests counted are checked against fio's (lost-writes: how many a
// build with plain adds lost). Comparing builds (the
// atomic adds against an experiment whose adds are plain, bpf/fspair.h
// FSPAIR_PLAIN_ADD) is the caller's: one test binary per build, run in
// alternation (BENCHMARKS.md, "Many CPUs").
//
//	go test ./exporter/probe -run '^$' -bench CPUCost/tracepoint -benchtime 1x -count 1
func BenchmarkCPUCost(b *testing.B) {
	fioCostModes(b, *perCPUCounters, func(b *testing.B, p *Probes) {
		loop, mnt := loopFS(b, "mkfs.xfs", 1024)
		images := []string{filepath.Join(mnt, "a.img"), filepath.Join(mnt, "b.img")}
		for i, path := range images {
			slot := uint32(3 + i)
			// Written whole first: direct writes into a sparse file
			// allocate, and XFS serialises those on the inode.
			f := trackFile(b, p, path, slot)
			chunk := make([]byte, 1<<20)
			for off := int64(0); off < 256<<20; off += 1 << 20 {
				if _, err := f.WriteAt(chunk, off); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.SetVMM(slot, 0); err != nil { // fio is another process
				b.Fatal(err)
			}
		}
		if err := p.SetProcesses(nil, true); err != nil {
			b.Fatal(err)
		}
		if err := p.TrackDevice(kernelDev(b, loop), 1); err != nil {
			b.Fatal(err)
		}
		runCPUCostHook(b, "attached")
		defer runCPUCostHook(b, "detach")
		for _, w := range []struct {
			name, direct string
			ios          int // per job: by default about a second of writes alone on this host
		}{
			{"direct", "1", *cpuCostDirectIOs},
			{"cached", "0", *cpuCostCachedIOs},
		} {
			for _, l := range []struct {
				name  string
				files []string // one per job
			}{
				{"1job", images[:1]},
				{"2jobs-1image", []string{images[0], images[0]}},
				{"2jobs-2images", images},
			} {
				b.Run(w.name+"/"+l.name, func(b *testing.B) {
					cpuCost(b, p, l.files, "--direct="+w.direct, "--number_ios="+strconv.Itoa(w.ios))
				})
			}
		}
	})
}

// cpuCost runs fio b.N times with one job per file, job i pinned to CPU i,
// and reports the BPF time per request and fio's requests per second.
func cpuCost(b *testing.B, p *Probes, files []string, args ...string) {
	args = append([]string{"--ioengine=psync", "--rw=randwrite", "--bs=4k", "--size=256m",
		"--randrepeat=0", "--norandommap", "--cpus_allowed=0-" + strconv.Itoa(len(files)-1),
		"--cpus_allowed_policy=split", "--output-format=json"}, args...)
	for i, f := range files {
		args = append(args, "--name=job"+strconv.Itoa(i), "--filename="+f)
	}
	written := func() uint64 {
		var n uint64
		for slot := uint32(3); slot < 5; slot++ {
			c, err := p.Counters(slot)
			if err != nil {
				b.Fatal(err)
			}
			n += c.Requests[opWrite]
		}
		return n
	}
	plain := plainAdds(b)
	var requests, rate, lost float64
	times := progTimes{}
	for i := 0; i < b.N; i++ {
		// The page cache written back first, so that no run's requests
		// pay for an earlier run's writeback.
		unix.Sync()
		before, w0 := p.runTimes(b), written()
		ios, iops := fioJobs(b, args)
		// Plain adds lose the updates two CPUs make at once: that build
		// reports how many, the shipped one must count every write.
		if got := written() - w0; got > ios || (got != ios && !plain) {
			b.Fatalf("fio %v: %d writes counted, fio did %d", args, got, ios)
		} else {
			lost += float64(ios - got)
		}
		requests += float64(ios)
		rate += iops
		times.add(b, p, before)
	}
	times.report(b, requests)
	b.ReportMetric(rate/float64(b.N), "req/s")
	b.ReportMetric(lost/float64(b.N), "lost-writes")
}

// plainAdds reports whether the programs were built with plain counter
// adds (bpf/fspair.h FSPAIR_PLAIN_ADD): no atomic add in them (the
// exchange that takes writes_since_flush stays atomic in both builds).
func plainAdds(b *testing.B) bool {
	for _, load := range []func() (*ebpf.CollectionSpec, error){bpf.LoadDisk, bpf.LoadHost} {
		spec, err := load()
		if err != nil {
			b.Fatal(err)
		}
		for _, prog := range spec.Programs {
			for _, ins := range prog.Instructions {
				if op := ins.OpCode.AtomicOp(); op == asm.AddAtomic || op == asm.FetchAdd {
					return false
				}
			}
		}
	}
	return true
}

// fioJobs runs fio and returns the writes its jobs did and their requests
// per second, summed over the jobs.
func fioJobs(b *testing.B, args []string) (ios uint64, iops float64) {
	out, err := exec.Command("fio", args...).Output()
	if err != nil {
		b.Fatalf("fio %v: %v", args, err)
	}
	var res struct {
		Jobs []struct {
			Write struct {
				TotalIOs uint64  `json:"total_ios"`
				IOPS     float64 `json:"iops"`
			}
		}
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		b.Fatalf("fio %v: output: %v", args, err)
	}
	for _, j := range res.Jobs {
		ios += j.Write.TotalIOs
		iops += j.Write.IOPS
	}
	return ios, iops
}

// diskWords is a disk's counters (bpf.DiskCounters) as its u64 words.
type diskWords [unsafe.Sizeof(bpf.DiskCounters{}) / 8]uint64

// words is the length of diskWords.
const words = len(diskWords{})

// BenchmarkCountersLayoutRead: what reading every disk's counters costs a
// scrape at 10,000 disks, by layout: one value a disk shared by every CPU
// (the map fspair ships, read with one lookup a disk into a reused buffer),
// or one value a disk for each possible CPU (a per-CPU array), read with
// cilium/ebpf's per-CPU lookup (a slice of values, allocated by the
// library) or with the lookup system call into a reused buffer, and summed
// into one value. Values are the size of bpf.DiskCounters, every u64 of
// them summed. Reported: ns per scrape (ns/op), the kernel's memory for
// the map (memlock-MiB, from fdinfo) and the bytes copied out per scrape.
//
//	go test ./exporter/probe -run '^$' -bench CountersLayoutRead -count 5
func BenchmarkCountersLayoutRead(b *testing.B) {
	const disks = 10000
	size := uint32(unsafe.Sizeof(bpf.DiskCounters{}))
	cpus := ebpf.MustPossibleCPU()
	for _, l := range []struct {
		name string
		typ  ebpf.MapType
		read func(b *testing.B, m *ebpf.Map, key uint32, sum *diskWords)
	}{
		{"shared", ebpf.Array, func(b *testing.B, m *ebpf.Map, key uint32, sum *diskWords) {
			if err := m.Lookup(key, unsafe.Pointer(sum)); err != nil {
				b.Fatal(err)
			}
		}},
		{"percpu-library", ebpf.PerCPUArray, func(b *testing.B, m *ebpf.Map, key uint32, sum *diskWords) {
			var per []diskWords
			if err := m.Lookup(key, &per); err != nil {
				b.Fatal(err)
			}
			*sum = per[0]
			for _, v := range per[1:] {
				for i := range v {
					sum[i] += v[i]
				}
			}
		}},
		{"percpu-syscall", ebpf.PerCPUArray, percpuSyscallRead(cpus)},
	} {
		b.Run(l.name, func(b *testing.B) {
			m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "layout_read", Type: l.typ, KeySize: 4, ValueSize: size, MaxEntries: disks})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			// Every value non-zero, as a busy fleet's are.
			one := make([]diskWords, 1)
			if l.typ == ebpf.PerCPUArray {
				one = make([]diskWords, cpus)
			}
			for c := range one {
				for i := range one[c] {
					one[c][i] = uint64(i + c)
				}
			}
			for k := uint32(0); k < disks; k++ {
				var err error
				if l.typ == ebpf.PerCPUArray {
					err = m.Put(k, one)
				} else {
					err = m.Put(k, unsafe.Pointer(&one[0]))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			var sum diskWords
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				for k := uint32(0); k < disks; k++ {
					l.read(b, m, k, &sum)
				}
			}
			b.StopTimer()
			if want := uint64(len(one)*(words-1) + len(one)*(len(one)-1)/2); sum[words-1] != want {
				b.Fatalf("last disk's last word sums to %d, want %d", sum[words-1], want)
			}
			copies := 1
			if l.typ == ebpf.PerCPUArray {
				copies = cpus
			}
			b.ReportMetric(float64(mapMemlock(b, m))/(1<<20), "memlock-MiB")
			b.ReportMetric(float64(disks*copies*int(size))/(1<<20), "copied-MiB/op")
			b.ReportMetric(float64(cpus), "cpus")
		})
	}
}

// percpuSyscallRead reads a per-CPU value with the lookup system call into
// a buffer kept between calls (values of 8-byte multiples: no padding
// between CPUs' copies), the least a per-CPU layout's reading can cost.
func percpuSyscallRead(cpus int) func(b *testing.B, m *ebpf.Map, key uint32, sum *diskWords) {
	buf := make([]diskWords, cpus)
	return func(b *testing.B, m *ebpf.Map, key uint32, sum *diskWords) {
		attr := struct {
			fd         uint32
			_          uint32
			key, value uint64
			flags      uint64
		}{fd: uint32(m.FD()), key: uint64(uintptr(unsafe.Pointer(&key))), value: uint64(uintptr(unsafe.Pointer(&buf[0])))}
		if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); errno != 0 {
			b.Fatal(errno)
		}
		*sum = buf[0]
		for _, v := range buf[1:] {
			for i := range v {
				sum[i] += v[i]
			}
		}
	}
}

// mapMemlock is the kernel's memory charge for m (its fdinfo's memlock).
func mapMemlock(b *testing.B, m *ebpf.Map) uint64 {
	data, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(m.FD()))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "memlock:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no memlock in fdinfo")
	return 0
}
