// Command pathcost measures the BPF time spent on each guest request: a lab
// guest (TCG) drives fio on raw virtio disks whose images sit on a
// loop-backed host file system, with cache=none and each of QEMU's aio
// modes, while fspair_exporter runs in one probe mode with --probe.stats.
// The run time of all fspair's programs over a fio run, divided by the
// guest's requests in it (QEMU's query-blockstats), is fspair's BPF time per
// guest request, every program on the request's path included (the file
// system or syscall hooks, io_uring, and the host block layer for the
// device requests it causes), as well as any other I/O of the host in the
// meantime, so it is an upper bound. The same runs with libbpf-tools'
// biolatency, biopattern and bitesize instead give their BPF time per device
// request, beside fspair's host-side programs' (host_*) on the same device.
//
// It boots a guest: run it under the lab lock, as make bench does
// (flock /var/tmp/fspair-lab.lock go run ./bench/pathcost).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		bin     = flag.String("exporter", "bin/fspair_exporter", "the exporter binary")
		mode    = flag.String("mode", "tracepoint", "the probe mode to measure")
		hostFS  = flag.String("host-fs", "ext4", "the host file system of the images")
		ios     = flag.Int("ios", 3000, "guest requests per fio run")
		libbpf  = flag.Bool("libbpf-tools", true, "also measure libbpf-tools' block-layer tools on the same runs")
		cache   = flag.String("cache", os.Getenv("FSPAIR_LAB_CACHE"), "the lab's kit cache (default /var/tmp/fspair-lab-cache)")
		timeout = flag.Duration("timeout", 30*time.Minute, "give up after")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := measure(ctx, *bin, *mode, *hostFS, *cache, *ios, *libbpf); err != nil {
		fmt.Fprintf(os.Stderr, "pathcost: %v\n", err)
		return 1
	}
	return 0
}

// aioModes are QEMU's ways of issuing a cache=none disk's requests.
var aioModes = []string{"threads", "native", "io_uring"}

func measure(ctx context.Context, bin, mode, hostFS, cacheDir string, ios int, libbpf bool) error {
	if cacheDir == "" {
		cacheDir = "/var/tmp/fspair-lab-cache"
	}
	l, err := lab.New(ctx, "", cacheDir, prefixed("lab: "))
	if err != nil {
		return err
	}
	defer l.Close()
	h, err := l.NewHostFS(ctx, hostFS, 2048)
	if err != nil {
		return err
	}
	var disks []lab.DiskConfig
	for _, aio := range aioModes {
		path := h.Path(aio + ".raw")
		if out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "raw", path, "512M").CombinedOutput(); err != nil {
			return fmt.Errorf("qemu-img: %v: %s", err, out)
		}
		disks = append(disks, lab.DiskConfig{ID: "d" + aio[:2], File: path, Format: "raw", Cache: "none", AIO: aio})
	}
	vm, err := l.StartVM(ctx, lab.VMConfig{Name: "pathcost", Disks: disks})
	if err != nil {
		return err
	}
	loopDev := filepath.Base(h.Loop)

	ex, err := startExporter(ctx, bin, "--probe.mode="+mode, "--probe.stats")
	if err != nil {
		return err
	}
	defer ex.stop()
	if err := ex.waitDisks(ctx, len(disks)); err != nil {
		return err
	}
	fmt.Printf("# pathcost %s: fspair_exporter --probe.mode=%s --probe.stats, images on %s (%s), cache=none, %d guest requests per run (4 KiB random, direct in the guest, half reads, a flush every 8 writes)\n",
		time.Now().UTC().Format(time.RFC3339), mode, hostFS, h.Loop, ios)
	for _, d := range disks {
		dev, err := vm.GuestDevice(ctx, d.ID)
		if err != nil {
			return err
		}
		r, err := costOfRun(ctx, vm, d, "/dev/"+dev, loopDev, ios, ex.programRunNs)
		if err != nil {
			return err
		}
		var host float64
		for p, ns := range r.progNs {
			if strings.HasPrefix(p, "host_") {
				host += ns
			}
		}
		fmt.Printf("pathcost fspair %-10s aio=%-8s guest requests %6.0f  device requests %6.0f  BPF %6.0f ns/guest request  host_* %6.0f ns/device request\n",
			mode, d.AIO, r.guest, r.device, r.total()/r.guest, host/r.device)
		fmt.Printf("  per program (ns/guest request): %s\n", r.breakdown())
	}
	ex.stop()
	if !libbpf {
		return nil
	}
	tools, err := startLibbpfTools(ctx)
	if err != nil {
		return err
	}
	defer tools.stop()
	for _, d := range disks {
		dev, err := vm.GuestDevice(ctx, d.ID)
		if err != nil {
			return err
		}
		r, err := costOfRun(ctx, vm, d, "/dev/"+dev, loopDev, ios, tools.programRunNs)
		if err != nil {
			return err
		}
		fmt.Printf("pathcost libbpf-tools aio=%-8s guest requests %6.0f  device requests %6.0f  BPF %6.0f ns/device request (biolatency+biopattern+bitesize)\n",
			d.AIO, r.guest, r.device, r.total()/r.device)
		fmt.Printf("  per program (ns/guest request): %s\n", r.breakdown())
	}
	return nil
}

// runCost is one fio run: the guest's and the device's requests and each
// program's BPF time over it.
type runCost struct {
	guest, device float64
	progNs        map[string]float64
}

func (r runCost) total() float64 {
	var t float64
	for _, ns := range r.progNs {
		t += ns
	}
	return t
}

func (r runCost) breakdown() string {
	var parts []string
	for p, ns := range r.progNs {
		if ns > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", p, ns/r.guest))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func costOfRun(ctx context.Context, vm *lab.VM, d lab.DiskConfig, dev, loopDev string, ios int,
	progs func(context.Context) (map[string]float64, error)) (runCost, error) {
	bs0, err := guestRequests(ctx, vm, d.ID)
	if err != nil {
		return runCost{}, err
	}
	dev0, err := deviceRequests(loopDev)
	if err != nil {
		return runCost{}, err
	}
	p0, err := progs(ctx)
	if err != nil {
		return runCost{}, err
	}
	if _, err := vm.Fio(ctx, lab.FioJob{Args: []string{"--name=pathcost", "--filename=" + dev, "--direct=1",
		"--ioengine=psync", "--rw=randrw", "--bs=4k", "--size=256m", "--randrepeat=0", "--fsync=8",
		"--number_ios=" + strconv.Itoa(ios)}}); err != nil {
		return runCost{}, err
	}
	p1, err := progs(ctx)
	if err != nil {
		return runCost{}, err
	}
	bs1, err := guestRequests(ctx, vm, d.ID)
	if err != nil {
		return runCost{}, err
	}
	dev1, err := deviceRequests(loopDev)
	if err != nil {
		return runCost{}, err
	}
	r := runCost{guest: bs1 - bs0, device: dev1 - dev0, progNs: map[string]float64{}}
	for p, ns := range p1 {
		r.progNs[p] = ns - p0[p]
	}
	if r.guest <= 0 || r.device <= 0 {
		return r, fmt.Errorf("disk %s: %v guest and %v device requests in the run", d.ID, r.guest, r.device)
	}
	return r, nil
}

// guestRequests is the guest's reads, writes and flushes on a disk so far.
func guestRequests(ctx context.Context, vm *lab.VM, id string) (float64, error) {
	all, err := vm.BlockStats(ctx)
	if err != nil {
		return 0, err
	}
	b, ok := all[id]
	if !ok {
		return 0, fmt.Errorf("query-blockstats: no device %s", id)
	}
	s := b.Node.Stats
	return float64(s.RdOperations + s.WrOperations + s.FlushOperations), nil
}

// deviceRequests is a block device's completed reads and writes so far (/sys/block/DEV/stat).
func deviceRequests(dev string) (float64, error) {
	b, err := os.ReadFile("/sys/block/" + dev + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 5 {
		return 0, fmt.Errorf("/sys/block/%s/stat: %q", dev, b)
	}
	rd, err1 := strconv.ParseFloat(f[0], 64)
	wr, err2 := strconv.ParseFloat(f[4], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/sys/block/%s/stat: %q", dev, b)
	}
	return rd + wr, nil
}

type exporter struct {
	cmd *exec.Cmd
	url string
}

func startExporter(ctx context.Context, bin string, args ...string) (*exporter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--web.listen-address=" + addr, "--no-discovery.libvirt",
		"--discovery.interval=1s", "--log.level=warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = prefixed("exporter: "), prefixed("exporter: ")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &exporter{cmd: cmd, url: "http://" + addr + "/metrics"}, nil
}

func (e *exporter) stop() {
	if e.cmd.ProcessState == nil {
		e.cmd.Process.Signal(os.Interrupt)
		e.cmd.Wait()
	}
}

func (e *exporter) get(ctx context.Context) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (e *exporter) waitDisks(ctx context.Context, n int) error {
	for i := 0; i < 120; i++ {
		body, err := e.get(ctx)
		// One info series per tracked disk: the counters of ops a disk
		// has not done yet are left out while 0, so their count says less.
		if err == nil && strings.Count(body, "fspair_disk_info{domain=\"pathcost\"") >= n {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("the exporter did not track the guest's %d disks within 60 s", n)
}

var runSeconds = regexp.MustCompile(`^fspair_probe_run_seconds_total\{program="([^"]+)"\} (\S+)$`)

// programRunNs is every fspair program's run time so far, in ns.
func (e *exporter) programRunNs(ctx context.Context) (map[string]float64, error) {
	body, err := e.get(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m := runSeconds.FindStringSubmatch(sc.Text()); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return nil, err
			}
			out[m[1]] = v * 1e9
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no fspair_probe_run_seconds_total at %s (is --probe.stats on?)", e.url)
	}
	return out, nil
}

// libbpfTools is biolatency, biopattern and bitesize running, with
// bpf_stats on for their run times.
type libbpfTools struct {
	cmds     []*exec.Cmd
	progs    map[int]string // BPF program id -> tool/program
	statsWas string
}

func startLibbpfTools(ctx context.Context) (*libbpfTools, error) {
	was, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	if err != nil {
		return nil, err
	}
	t := &libbpfTools{progs: map[int]string{}, statsWas: strings.TrimSpace(string(was))}
	if err := os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("1"), 0o644); err != nil {
		return nil, err
	}
	for _, tool := range []string{"biolatency", "biopattern", "bitesize"} {
		before, err := progIDs(ctx)
		if err != nil {
			t.stop()
			return nil, err
		}
		cmd := exec.CommandContext(ctx, tool, "3600", "1")
		if err := cmd.Start(); err != nil {
			t.stop()
			return nil, fmt.Errorf("%s (Debian: libbpf-tools): %w", tool, err)
		}
		t.cmds = append(t.cmds, cmd)
		time.Sleep(2 * time.Second)
		after, err := progIDs(ctx)
		if err != nil {
			t.stop()
			return nil, err
		}
		for id, name := range after {
			if _, old := before[id]; !old {
				t.progs[id] = tool + "/" + name
			}
		}
	}
	return t, nil
}

func (t *libbpfTools) stop() {
	for _, c := range t.cmds {
		if c.ProcessState == nil {
			c.Process.Kill()
			c.Wait()
		}
	}
	t.cmds = nil
	os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte(t.statsWas), 0o644)
}

type bpftoolProg struct {
	ID        int    `json:"id"`
	Name      string `json:"name"`
	RunTimeNs uint64 `json:"run_time_ns"`
}

func bpftoolProgs(ctx context.Context) ([]bpftoolProg, error) {
	out, err := exec.CommandContext(ctx, "bpftool", "prog", "show", "-j").Output()
	if err != nil {
		return nil, fmt.Errorf("bpftool prog show: %w", err)
	}
	var progs []bpftoolProg
	if err := json.Unmarshal(out, &progs); err != nil {
		return nil, fmt.Errorf("bpftool prog show: %w", err)
	}
	return progs, nil
}

func progIDs(ctx context.Context) (map[int]string, error) {
	progs, err := bpftoolProgs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, p := range progs {
		out[p.ID] = p.Name
	}
	return out, nil
}

func (t *libbpfTools) programRunNs(ctx context.Context) (map[string]float64, error) {
	progs, err := bpftoolProgs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, p := range progs {
		if name, ok := t.progs[p.ID]; ok {
			out[name] += float64(p.RunTimeNs)
		}
	}
	return out, nil
}

// prefixed writes each line to stderr with a prefix.
func prefixed(prefix string) io.Writer {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(os.Stderr, prefix+sc.Text())
		}
	}()
	return pw
}
