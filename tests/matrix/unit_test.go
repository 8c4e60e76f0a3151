package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/tests/lab"
)

func TestVerdict(t *testing.T) {
	op := func(name string, fioN, fioB, n, b uint64) OpCount {
		return OpCount{Op: name, FioRequests: fioN, FioBytes: fioB, Requests: n, Bytes: b}
	}
	for _, c := range []struct {
		name   string
		ops    []OpCount
		status Status
		text   string
	}{
		{"equal", []OpCount{op("read", 10, 40960, 10, 40960), op("write", 5, 20480, 5, 20480), op("flush", 2, 0, 2, 0)}, StatusOK, "ok"},
		{"no I/O of a kind is fine when neither counts", []OpCount{op("read", 0, 0, 0, 0)}, StatusOK, "ok"},
		{"one request missing", []OpCount{op("read", 1000, 4096000, 998, 4087808)}, StatusDiff, "DIFF read 998/1000, read bytes 4087808/4096000"},
		{"bytes alone", []OpCount{op("write", 4, 16384, 4, 12288)}, StatusDiff, "DIFF write bytes 12288/16384"},
		{"flush bytes are not compared", []OpCount{op("flush", 3, 0, 3, 7)}, StatusOK, "ok"},
		{"counted where fio did nothing", []OpCount{op("flush", 0, 0, 2, 0)}, StatusDiff, "DIFF flush 2/0"},
		{"silent zero", []OpCount{op("read", 10, 40960, 10, 40960), op("flush", 4, 0, 0, 0)}, StatusSilent, "silent 0: flush"},
		{"said so", []OpCount{op("read", 10, 40960, 10, 40960), {Op: "flush", FioRequests: 4, Unfollowed: true}}, StatusSaidSo, "not followed (said so): flush"},
		{"said so beats a count", []OpCount{{Op: "write", FioRequests: 4, FioBytes: 4096, Requests: 1, Bytes: 1024, Unfollowed: true}}, StatusSaidSo, "not followed (said so): write"},
		{"diff first, then silent, then said so", []OpCount{
			op("read", 10, 40960, 9, 36864), op("write", 4, 4096, 0, 0), {Op: "flush", FioRequests: 2, Unfollowed: true},
		}, StatusDiff, "DIFF read 9/10, read bytes 36864/40960; silent 0: write; not followed (said so): flush"},
		{"counter reset", []OpCount{{Op: "read", FioRequests: 1, NegativeOrFractional: true}}, StatusDiff, "DIFF read counter went back or is not whole"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, text := verdict(c.ops)
			if status != c.status || text != c.text {
				t.Errorf("verdict = %s %q, want %s %q", status, text, c.status, c.text)
			}
		})
	}
	for s, failed := range map[Status]bool{StatusOK: false, StatusSaidSo: false, StatusDiff: true, StatusSilent: true, StatusError: true} {
		if s.Failed() != failed {
			t.Errorf("%s.Failed() = %v", s, !failed)
		}
	}
}

const exposition = `fspair_disk_requests_total{domain="m",op="read",source_file="/mnt/ext4/matrix-psync.dat",target_device="vdb",uuid="u"} 100
fspair_disk_requests_total{domain="m",op="write",source_file="/mnt/ext4/matrix-psync.dat",target_device="vdb",uuid="u"} 50
fspair_disk_requests_total{domain="m",op="flush",source_file="/mnt/ext4/matrix-psync.dat",target_device="vdb",uuid="u"} 7
fspair_disk_requests_total{domain="m",op="read",source_file="/mnt/xfs/matrix-psync.dat",target_device="vdc",uuid="v"} 1e6
fspair_disk_bytes_total{domain="m",op="read",source_file="/mnt/ext4/matrix-psync.dat",target_device="vdb",uuid="u"} 409600
fspair_disk_bytes_total{domain="m",op="write",source_file="/mnt/ext4/matrix-psync.dat",target_device="vdb",uuid="u"} 204800
fspair_disk_unfollowed{op="flush",path="syscall",measure="requests",source_file="/mnt/ext4/matrix-psync.dat"} 1
fspair_disk_unfollowed{op="write",path="io_uring"} 1
fspair_disk_unfollowed{op="read",path="io_uring",measure="requests"} 0
fspair_disk_unfollowed{op="write",path="linux_aio",measure="requests",source_file="/mnt/xfs/matrix-libaio.dat"} 1
fspair_disk_unfollowed{op="read",path="syscall_buffered",measure="latency",source_file="/mnt/xfs/matrix-psync.dat"} 1
fspair_disk_unfollowed{op="flush",path="syscall",measure="flush_cost",source_file="/mnt/xfs/matrix-psync.dat"} 1
fspair_probe_attached{program="pread_enter"} 1
fspair_probe_attached{program="iomap_dio_begin"} 0
`

func TestParseReading(t *testing.T) {
	r, err := parseReading([]byte(exposition))
	if err != nil {
		t.Fatal(err)
	}
	f := "/mnt/ext4/matrix-psync.dat"
	if r.Requests[fileOp{f, "read"}] != 100 || r.Requests[fileOp{f, "flush"}] != 7 || r.Bytes[fileOp{f, "write"}] != 204800 {
		t.Errorf("counters: %v %v", r.Requests, r.Bytes)
	}
	if r.Requests[fileOp{"/mnt/xfs/matrix-psync.dat", "read"}] != 1e6 {
		t.Error("another disk's counter lost")
	}
	if !reflect.DeepEqual(r.Attached, map[string]bool{"pread_enter": true, "iomap_dio_begin": false}) {
		t.Errorf("attached: %v", r.Attached)
	}
	for _, c := range []struct {
		file, op string
		want     bool
	}{
		{f, "flush", true},
		{f, "read", false}, // 0 is followed
		{f, "write", true}, // no source_file (nor measure): every disk
		{"/mnt/xfs/matrix-libaio.dat", "write", true},
		{"/mnt/xfs/matrix-psync.dat", "read", false},    // counted, untimed: compared
		{"/mnt/xfs/matrix-psync.dat", "flush", false},   // counted, its device cost not: compared
		{"/mnt/ext4/matrix-libaio.dat", "flush", false}, // another disk's
	} {
		if got := r.unfollowed(c.file, c.op); got != c.want {
			t.Errorf("unfollowed(%s, %s) = %v", c.file, c.op, got)
		}
	}
}

func TestCompare(t *testing.T) {
	// The exposition without its fspair_disk_unfollowed series: every path followed.
	var clean []string
	for _, l := range strings.SplitAfter(exposition, "\n") {
		if !strings.HasPrefix(l, "fspair_disk_unfollowed") {
			clean = append(clean, l)
		}
	}
	text := strings.Join(clean, "")
	bump := strings.NewReplacer("} 100\n", "} 110\n", "} 409600\n", "} 450560\n", "} 7\n", "} 9\n")
	before, err := parseReading([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	reading := func(extra string) Reading {
		r, err := parseReading([]byte(bump.Replace(text) + extra))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	fio := map[string][2]uint64{"read": {10, 40960}, "write": {0, 0}, "flush": {3, 0}}
	psync, _ := engineByName("psync")
	file := "/mnt/ext4/matrix-psync.dat"
	ops := compare(fio, before, reading(""), file, psync)
	want := []OpCount{
		{Op: "read", FioRequests: 10, FioBytes: 40960, Requests: 10, Bytes: 40960},
		{Op: "write"},
		{Op: "flush", FioRequests: 3, Requests: 2},
	}
	if !reflect.DeepEqual(ops, want) {
		t.Errorf("compare:\n got %+v\nwant %+v", ops, want)
	}
	if s, text := verdict(ops); s != StatusDiff || text != "DIFF flush 2/3" {
		t.Errorf("verdict %s %q", s, text)
	}
	// The exporter says its flushes are not followed (on the flush's own
	// path, syscall, not the engine's): said so.
	ops = compare(fio, before, reading(`fspair_disk_unfollowed{op="flush",path="syscall",measure="requests",source_file="`+file+`"} 1`+"\n"), file, psync)
	if s, text := verdict(ops); s != StatusSaidSo || text != "not followed (said so): flush" {
		t.Errorf("flush unfollowed: verdict %s %q", s, text)
	}
	// Counted but untimed, or their device cost unseen: still compared.
	ops = compare(fio, before, reading(`fspair_disk_unfollowed{op="flush",path="syscall",measure="latency",source_file="`+file+`"} 1`+"\n"), file, psync)
	if s, text := verdict(ops); s != StatusDiff || text != "DIFF flush 2/3" {
		t.Errorf("flush untimed: verdict %s %q", s, text)
	}
}

func TestFioCounts(t *testing.T) {
	// Two jobs as the matrix job has them: fdatasync calls counted only in
	// sync.lat_ns.N (fio 3.33), fsyncs in sync.total_ios.
	out := `{"fio version": "fio-3.33", "jobs": [
	 {"jobname": "small", "read": {"io_bytes": 4096000, "total_ios": 1000}, "write": {"io_bytes": 4194304, "total_ios": 1024},
	  "sync": {"total_ios": 0, "lat_ns": {"N": 127}}},
	 {"jobname": "large", "read": {"io_bytes": 8388608, "total_ios": 128}, "write": {"io_bytes": 8388608, "total_ios": 128},
	  "sync": {"total_ios": 32, "lat_ns": {"N": 32}}}]}`
	res, err := lab.ParseFio([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	got := fioCounts(res)
	want := map[string][2]uint64{"read": {1128, 12484608}, "write": {1152, 12582912}, "flush": {159, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fioCounts = %v, want %v", got, want)
	}
}

func TestEnginePaths(t *testing.T) {
	want := map[string]string{"psync": "syscall_buffered", "libaio": "linux_aio", "io_uring": "io_uring"}
	for _, e := range Engines {
		if e.Path() != want[e.Name] {
			t.Errorf("%s: path %s, want %s", e.Name, e.Path(), want[e.Name])
		}
	}
	if (Engine{Name: "psync", Direct: true}).Path() != "syscall_direct" {
		t.Error("psync with O_DIRECT is syscall_direct")
	}
	if _, err := engineByName("mmap"); err == nil {
		t.Error("unknown engine accepted")
	}
}

// TestConfigYAML: the configuration the guests get is valid for the
// exporter's own loader, tracks no pid, and says cache and aio per engine.
func TestConfigYAML(t *testing.T) {
	var cells []cellSpec
	for _, fs := range FileSystems {
		for _, e := range Engines {
			cells = append(cells, cellSpec{FS: fs, Engine: e})
		}
	}
	path := filepath.Join(t.TempDir(), "all.yml")
	if err := os.WriteFile(path, []byte(configYAML(tracked(cells))), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := discovery.LoadConfig(path)
	if err != nil {
		t.Fatalf("the exporter rejects the configuration: %v\n%s", err, configYAML(tracked(cells)))
	}
	if len(cfg.Disks) != 9 {
		t.Fatalf("%d disks, want 9", len(cfg.Disks))
	}
	seen := map[string]bool{}
	for i, d := range cfg.Disks {
		c := cells[i]
		if d.SourceFile != cellFile(c.FS, c.Engine) || d.PID != 0 || d.Cache != c.Engine.Cache || d.AIO != c.Engine.AIO || d.Format != "raw" {
			t.Errorf("disk %d: %+v for cell %s", i, d, c.name())
		}
		if seen[d.UUID+d.TargetDevice] {
			t.Errorf("disk %d: uuid and target device %s %s repeated", i, d.UUID, d.TargetDevice)
		}
		seen[d.UUID+d.TargetDevice] = true
	}
	if cfg.Disks[0].Cache != "writeback" || cfg.Disks[1].AIO != "native" || cfg.Disks[2].AIO != "io_uring" {
		t.Errorf("engines' disk settings: %+v", cfg.Disks[:3])
	}
}

func TestExporterArgs(t *testing.T) {
	cur := strings.Join(exporterArgs("/opt/fspair/cells/all.yml", modeCurrent), " ")
	if strings.Contains(cur, "--probe.mode") || !strings.Contains(cur, "--no-discovery.libvirt --no-discovery.proc --discovery.config.file=/opt/fspair/cells/all.yml") {
		t.Errorf("current: %s", cur)
	}
	if f := strings.Join(exporterArgs("/c.yml", "fentry"), " "); !strings.HasSuffix(f, " --probe.mode=fentry") {
		t.Errorf("fentry: %s", f)
	}
	if f := strings.Join(exporterArgs("/c.yml", "fentry", "--probe.stats"), " "); !strings.HasSuffix(f, " --probe.mode=fentry --probe.stats") {
		t.Errorf("fentry with statistics: %s", f)
	}
}

func TestProfile(t *testing.T) {
	scrape := func(on int, enter, exit [2]float64) []byte {
		return []byte(fmt.Sprintf(`# TYPE fspair_probe_stats_enabled gauge
fspair_probe_stats_enabled %d
# TYPE fspair_probe_runs_total counter
fspair_probe_runs_total{program="ext4_read_enter"} %g
fspair_probe_runs_total{program="ext4_read_exit"} %g
fspair_probe_runs_total{program="xfs_read_enter"} 7
# TYPE fspair_probe_run_seconds_total counter
fspair_probe_run_seconds_total{program="ext4_read_enter"} %g
fspair_probe_run_seconds_total{program="ext4_read_exit"} %g
fspair_probe_run_seconds_total{program="xfs_read_enter"} 0.5
`, on, enter[0], exit[0], enter[1], exit[1]))
	}
	if _, err := parseProbeStats(scrape(0, [2]float64{1, 1}, [2]float64{1, 1})); err == nil {
		t.Error("statistics off: no error")
	}
	if _, err := parseProbeStats([]byte("fspair_probe_runs_total{program=\"a\"} 1\n")); err == nil {
		t.Error("no fspair_probe_stats_enabled: no error")
	}
	before, err := parseProbeStats(scrape(1, [2]float64{100, 0.001}, [2]float64{100, 0.002}))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseProbeStats(scrape(1, [2]float64{1100, 0.002}, [2]float64{2100, 0.006}))
	if err != nil {
		t.Fatal(err)
	}
	p := profileRun{Requests: 1000, Programs: costDelta(before, after)}
	want := map[string]programCost{"ext4_read_enter": {1000, 0.001}, "ext4_read_exit": {2000, 0.004}}
	if len(p.Programs) != len(want) {
		t.Fatalf("delta %v, want %v (a program that did not run is left out)", p.Programs, want)
	}
	for name, c := range want {
		got := p.Programs[name]
		if got.Runs != c.Runs || math.Abs(got.Seconds-c.Seconds) > 1e-12 {
			t.Errorf("%s: %+v, want %+v", name, got, c)
		}
	}
	// 5 ms over 1,000 requests: 5,000 ns each; the exit first (4,000 ns per request, 2 runs of 2,000 ns).
	if ns := p.NsPerRequest(); math.Abs(ns-5000) > 1e-6 {
		t.Errorf("ns per request %v, want 5000", ns)
	}
	if got, want := p.programsText(), "ext4_read_exit 2.00 x 2000, ext4_read_enter 1.00 x 1000"; got != want {
		t.Errorf("programs %q, want %q", got, want)
	}
	if ns := (profileRun{}).NsPerRequest(); ns != 0 {
		t.Errorf("no requests: %v", ns)
	}
	res := &BenchResult{Options: BenchOptions{Variants: []string{"none", "fentry"}, Runtime: time.Second},
		Profile: map[string]map[string]profileRun{"fentry": {"randread-cached": p}}}
	text := res.profileText()
	if !strings.Contains(text, "| fentry | randread-cached | 1000 | 5000 | ext4_read_exit 2.00 x 2000, ext4_read_enter 1.00 x 1000 |") ||
		!strings.Contains(text, "| fentry | randwrite-cached | 0 | 0 | (none ran) |") || strings.Contains(text, "| none |") {
		t.Errorf("profile text:\n%s", text)
	}
	if (&BenchResult{}).profileText() != "" {
		t.Error("no profile: text")
	}
}

func TestStartUpWarnings(t *testing.T) {
	log := `time=2026-11-25T16:51:55.596Z level=WARN source=probe.go:155 msg="BPF program not attached" program=io_uring_submit err="load: program io_uring_submit: attach Tracing/TraceRawTp: raw_tp io_uring_submit_req not supported"
time=2026-11-25T16:51:55.700Z level=INFO source=main.go:170 msg="capabilities dropped" kept=cap_dac_read_search,cap_sys_ptrace
time=2026-11-25T16:51:55.873Z level=warn source=probe.go:155 msg="BPF program not attached" program=iomap_dio_begin err="a \"quoted\" reason"
time=2026-11-25T16:51:56.000Z level=INFO source=main.go:225 msg=started version=x programs_attached=31 disks=9
time=2026-11-25T16:52:00.000Z level=WARN source=x.go:1 msg="later, not at start-up"
`
	warnings, reasons := startUpWarnings(log)
	if len(warnings) != 2 || !strings.Contains(warnings[1], "iomap_dio_begin") {
		t.Errorf("warnings: %q", warnings)
	}
	want := map[string]string{
		"io_uring_submit": "load: program io_uring_submit: attach Tracing/TraceRawTp: raw_tp io_uring_submit_req not supported",
		"iomap_dio_begin": `a "quoted" reason`,
	}
	if !reflect.DeepEqual(reasons, want) {
		t.Errorf("reasons: %q", reasons)
	}
	// An exporter that never started: every warning counts, and a line
	// that is not logfmt is kept as text without failing.
	warnings, _ = startUpWarnings("fspair_exporter: unknown long flag '--probe.mode'\nlevel=WARN msg=x\n")
	if len(warnings) != 1 {
		t.Errorf("warnings of a failed start: %q", warnings)
	}
}

func TestParseTestOutput(t *testing.T) {
	out := `=== RUN   TestA
--- PASS: TestA (0.10s)
=== RUN   TestB
    probe_test.go:35: program x not attached: load: nope
    probe_test.go:35: program y not attached: load: nope
    probe_test.go:35: program z not attached: load: nope
    probe_test.go:99: fourth line dropped
--- FAIL: TestB (8.32s)
=== RUN   TestC
=== RUN   TestC/ext4
    host_test.go:200: ext4: 0 journal commits
=== RUN   TestC/xfs
--- FAIL: TestC (20.00s)
    --- FAIL: TestC/ext4 (10.00s)
    --- PASS: TestC/xfs (10.00s)
FAIL
`
	v := parseTestOutput(out)
	if v.Pass || !reflect.DeepEqual(v.Failed, []string{"TestB", "TestC", "TestC/ext4"}) {
		t.Errorf("verdict: %+v", v)
	}
	if got := v.Messages["TestB"]; len(got) != maxMessages || got[0] != "program x not attached: load: nope" {
		t.Errorf("TestB messages: %q", got)
	}
	if got := v.Messages["TestC/ext4"]; !reflect.DeepEqual(got, []string{"ext4: 0 journal commits"}) {
		t.Errorf("TestC/ext4 messages: %q", got)
	}
	if v := parseTestOutput("=== RUN   TestA\n--- PASS: TestA (0.10s)\nPASS\n"); !v.Pass || len(v.Failed) != 0 {
		t.Errorf("passing run: %+v", v)
	}
	if v := parseTestOutput("panic: boom\n"); v.Pass {
		t.Error("a panic is not a pass")
	}
}

func TestCheckStatic(t *testing.T) {
	// busybox-static and fio are what the lab needs anyway.
	if err := checkStatic("/bin/busybox"); err != nil {
		t.Errorf("busybox-static: %v", err)
	}
	if err := checkStatic("/usr/bin/fio"); !errors.Is(err, errNotStatic) {
		t.Errorf("fio (dynamic): %v, want errNotStatic", err)
	}
	if err := checkStatic("/etc/hostname"); err == nil {
		t.Error("a text file passed as static")
	}
}

func TestMarkdown(t *testing.T) {
	r := &Results{
		Started: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC), Host: "h", Command: "go run ./tests/matrix run",
		FS: []string{"ext4"}, Engines: []string{"psync", "io_uring"},
		Kernels: []*KernelResult{
			{Package: "linux-image-6.1.0-56-cloud-amd64", Release: "6.1.0-56-cloud-amd64", Modes: []*ModeResult{{
				Mode:     "current",
				Programs: []Program{{Name: "a", Attached: true}, {Name: "iomap_dio_begin", Reason: "raw_tp iomap_dio_rw_begin not supported"}},
				Warnings: []string{`level=WARN msg="BPF program not attached" program=iomap_dio_begin`},
				Cells: []*Cell{
					{FS: "ext4", Engine: "psync", Status: StatusOK, Text: "ok"},
					{FS: "ext4", Engine: "io_uring", Status: StatusSilent, Text: "silent 0: read, write", Ops: []OpCount{{Op: "read", FioRequests: 5, FioBytes: 20480}}},
				},
				Probe: []ProbeRun{{FS: "ext4", Failed: []string{"TestLinuxAIO"}, Messages: map[string][]string{"TestLinuxAIO": {"0 direct reads | want 16"}}, Seconds: 140}},
			}}, Timing: []Timing{{"kit", 1}, {"current: probe tests on ext4", 140}}},
			{Package: "linux-image-6.12.117+deb12-cloud-amd64", Error: "boot: guest did not answer\nmore"},
		},
		Timing: []Timing{{"static binaries", 20}, {"total", 400}},
	}
	md := r.Markdown()
	for _, want := range []string{
		"| kernel | mode | FS | psync | io_uring |",
		"| 6.1.0-56-cloud-amd64 | current | ext4 | ok | silent 0: read, write |",
		"| 6.12.117+deb12-cloud-amd64 | | | did not run: boot: guest did not answer |",
		"| 6.1.0-56-cloud-amd64 | current | iomap_dio_begin | raw_tp iomap_dio_rw_begin not supported |",
		"| 6.1.0-56-cloud-amd64 | current | ext4 | FAIL | TestLinuxAIO | 140 s |",
		"`TestLinuxAIO` (ext4): 0 direct reads | want 16",
		"| 6.1.0-56-cloud-amd64 | current | ext4 | io_uring | read | 5 | 0 | 20480 | 0 |  |",
		"| 6.1.0-56-cloud-amd64: current: probe tests on ext4 | 2m20s |",
		"| **total** | **6m40s** |",
		"**3 failure(s)**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if n := len(r.Failed()); n != 3 {
		t.Errorf("%d failures, want 3 (silent cell, probe tests, kernel): %q", n, r.Failed())
	}
}

func TestParseOptions(t *testing.T) {
	t.Setenv("FSPAIR_MATRIX_KERNELS", "linux-image-a linux-image-b")
	o, err := parseOptions([]string{"-modes", "current", "-probe-fs", "ext4"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Kernels, []string{"linux-image-a", "linux-image-b"}) || !reflect.DeepEqual(o.Modes, []string{"current"}) ||
		len(o.Engines) != 3 || !reflect.DeepEqual(o.FS, FileSystems) || o.ExporterPer != "mode" {
		t.Errorf("options: %+v", o)
	}
	for _, bad := range [][]string{
		{"-fs", "ext4", "-probe-fs", "xfs"},
		{"-engines", "mmap"},
		{"-exporter-per", "disk"},
		{"-kernels", ""},
	} {
		if _, err := parseOptions(bad, os.Stderr); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBenchHelpers(t *testing.T) {
	v := []string{"none", "current", "libbpf-tools"}
	if got := rotate(v, 1); !reflect.DeepEqual(got, []string{"current", "libbpf-tools", "none"}) {
		t.Errorf("rotate 1: %q", got)
	}
	if got := rotate(v, 3); !reflect.DeepEqual(got, v) || &got[0] == &v[0] {
		t.Errorf("rotate 3: %q (a copy of the input)", got)
	}
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median odd: %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median even: %v", m)
	}
	if m := median(nil); m != 0 {
		t.Errorf("median of nothing: %v", m)
	}
}

func TestBenchOptions(t *testing.T) {
	t.Setenv("FSPAIR_MATRIX_KERNELS", "linux-image-6.1.0-56-cloud-amd64 linux-image-6.12.117+deb12-cloud-amd64")
	o, err := parseBenchOptions([]string{"-variants", "none,current,libbpf-tools", "-host-cpu", "0"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kernel != "linux-image-6.1.0-56-cloud-amd64" || o.Rounds != 5 || o.Runtime != 10*time.Second || o.Out != "bench/results-kernel.txt" {
		t.Errorf("options: %+v", o)
	}
	if len(o.Workloads) != 0 || !o.Settle || o.Warmup || len(o.Exporters) != 0 || o.ICount != nil {
		t.Errorf("defaults: workloads %q, settle %v, warm-up %v, exporters %v, icount %+v", o.Workloads, o.Settle, o.Warmup, o.Exporters, o.ICount)
	}
	for _, c := range []struct {
		args []string
		want lab.ICount
	}{
		{[]string{"-icount", "0"}, lab.ICount{Shift: 0}},
		{[]string{"-icount", "3", "-icount-sleep"}, lab.ICount{Shift: 3, Sleep: true}},
	} {
		o, err := parseBenchOptions(c.args, os.Stderr)
		if err != nil || o.ICount == nil || *o.ICount != c.want {
			t.Errorf("%q: icount %+v, %v; want %+v", c.args, o.ICount, err, c.want)
		}
	}
	o, err = parseBenchOptions([]string{"-variants", "none,empty-pair,fentry@base,fentry", "-exporter", "base=/tmp/x",
		"-workloads", "other-randwrite-cached,randread-direct"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.Exporters["base"] != "/tmp/x" || !reflect.DeepEqual(o.Workloads, []string{"other-randwrite-cached", "randread-direct"}) {
		t.Errorf("options: %+v", o)
	}
	for _, bad := range [][]string{{"-variants", "current"}, {"-rounds", "0"}, {"-host-cpu", "0-1"}, {"-kernel", ""},
		{"-icount", "11"}, {"-icount", "-2"}, {"-icount-sleep"},
		{"-variants", "none,fentry@base"}, {"-exporter", "base"}, {"-exporter", "a/b=/x"}, {"-workloads", "randread"}} {
		if _, err := parseBenchOptions(bad, os.Stderr); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBenchWorkloads(t *testing.T) {
	all := benchWorkloads(8 * time.Second)
	want := []string{"randwrite-cached", "randread-cached", "randread-direct", "other-randwrite-cached", "other-randread-direct",
		"noimage-randwrite-cached", "noimage-randread-direct"}
	if got := workloadNames(all); !reflect.DeepEqual(got, want) {
		t.Fatalf("workloads %q, want %q", got, want)
	}
	files := map[string]string{"randread-cached": benchFile, "other-randread-direct": benchOtherFile, "noimage-randwrite-cached": benchNoImageFile}
	for _, w := range all {
		if f, ok := files[w.Name]; ok && (w.File != f || !slices.Contains(w.Args, "--filename="+f)) {
			t.Errorf("%s runs on %s (%q), want %s", w.Name, w.File, w.Args, f)
		}
		if w.Cached == strings.HasSuffix(w.Name, "-direct") || !slices.Contains(w.Args, "--runtime=8s") {
			t.Errorf("%s: cached %v, args %q", w.Name, w.Cached, w.Args)
		}
	}
	sel, err := selectWorkloads(all, []string{"noimage-randread-direct", "randwrite-cached"})
	if err != nil || !reflect.DeepEqual(workloadNames(sel), []string{"randwrite-cached", "noimage-randread-direct"}) {
		t.Errorf("selected %q, %v: want the bench's order", workloadNames(sel), err)
	}
	if _, err := selectWorkloads(all, []string{"randwrite"}); err == nil {
		t.Error("an unknown workload was accepted")
	}
	if sh := settleScript(all[0]); sh != "sync && echo 3 >/proc/sys/vm/drop_caches && cat "+benchFile+" >/dev/null" {
		t.Errorf("settle of a page-cache workload: %q", sh)
	}
	if sh := settleScript(all[2]); strings.Contains(sh, "cat") {
		t.Errorf("settle of an O_DIRECT workload reads the file back: %q", sh)
	}
	if got := strings.Join(exporterArgs("/c.yml", "fentry@base"), " "); !strings.HasPrefix(got, "/opt/fspair/bin/fspair_exporter-base ") ||
		!strings.HasSuffix(got, " --probe.mode=fentry") {
		t.Errorf("exporter of another build: %q", got)
	}
}

func TestBenchText(t *testing.T) {
	r := &BenchResult{
		Options: BenchOptions{Kernel: "k", Variants: []string{"none", "current"}, Rounds: 2, Runtime: 10 * time.Second, GetppidCalls: 1000, HostCPU: "1", MemMiB: 2048,
			Workloads: []string{"randwrite-cached", "randread-cached", "randread-direct"}},
		Release: "6.1.0-56-cloud-amd64",
		Samples: map[string]map[string][]float64{
			"none":    {"randwrite-cached": {1000, 1200}, "randread-cached": {2000, 2000}, "randread-direct": {500, 500}, "getppid": {100, 110}},
			"current": {"randwrite-cached": {900, 1300}, "randread-cached": {1000, 1000}, "randread-direct": {400, 400}, "getppid": {210, 210}},
		},
		Order: [][]string{{"none", "current"}, {"current", "none"}},
	}
	text := r.Text()
	for _, want := range []string{
		"| variant | 4 KiB random writes into the page cache IOPS | ratio | 4 KiB random reads from the page cache IOPS | ratio | 4 KiB random reads, O_DIRECT IOPS | ratio | getppid ns/call | ratio |",
		"| none | 1100 | 1.000 | 2000 | 1.000 | 500 | 1.000 | 105.0 | 1.000 |",
		"| current | 1100 | 1.000 | 1000 | 0.500 | 400 | 0.800 | 210.0 | 2.000 |",
		"# round 2 order: current none",
		"| current | randwrite-cached | 0.992 | 0.900 | 1.083 |",
		"| current | getppid | 2.005 | 1.909 | 2.100 |",
		"# samples current getppid: 210.0 210.0",
		"| none | randwrite-cached | 0.909 | 1.091 |",
		"| current | randwrite-cached | 0.818 | 1.182 |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("results lack %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "icount") {
		t.Errorf("results without -icount speak of it:\n%s", text)
	}
	if strings.Contains(text, "warm-up") {
		t.Errorf("results without -warmup speak of one:\n%s", text)
	}
	r.Options.ICount = &lab.ICount{Shift: 2}
	r.Options.Warmup = true
	if text := r.Text(); !strings.Contains(text, "; a warm-up run of every workload with no tracer before round 1, not counted;") {
		t.Errorf("results with -warmup do not say so:\n%s", text)
	}
	if text := r.Text(); !strings.Contains(text, "\n# guest time: QEMU -icount shift=2,sleep=off with single-threaded TCG: the guest's clock advances 4 ns per instruction executed") ||
		!strings.Contains(text, "the clock jumps to the next timer deadline") {
		t.Errorf("results with -icount 2 do not say so:\n%s", text)
	}
}

func TestProbeResult(t *testing.T) {
	pass := "=== RUN   TestA\n--- PASS: TestA (1.00s)\nPASS\n"
	var r ProbeRun
	probeResult(&r, pass+probeExitMarker+"0\n", time.Minute, time.Second)
	if !r.Passed || r.Error != "" || len(r.Failed) != 0 {
		t.Errorf("passing run: %+v", r)
	}
	r = ProbeRun{}
	probeResult(&r, "=== RUN   TestA\n    a_test.go:1: no\n--- FAIL: TestA (1.00s)\nFAIL\n"+probeExitMarker+"1\n", time.Minute, time.Second)
	if r.Passed || r.Error != "" || !reflect.DeepEqual(r.Failed, []string{"TestA"}) {
		t.Errorf("failing run: %+v", r)
	}
	r = ProbeRun{}
	probeResult(&r, "panic: test timed out after 1m0s\n\trunning tests:\n"+probeExitMarker+"2\n", time.Minute, time.Second)
	if r.Passed || !strings.Contains(r.Error, "exited 2 without a failing test") {
		t.Errorf("panicked run: %+v", r)
	}
	r = ProbeRun{}
	hung := probeHungMarker + "\nthread 42 probe.test in io_schedule\n[<0>] folio_wait_bit\nkernel log:\nINFO: task probe.test blocked\n" +
		probeHungMarker + " end\n=== RUN   TestA\n--- PASS: TestA (1.00s)\n=== RUN   TestCacheAndFlushCost\n=== RUN   TestCacheAndFlushCost/ext4\n"
	probeResult(&r, hung, time.Minute, 30*time.Second)
	if r.Passed || !strings.Contains(r.Error, "did not end within 1m30s") || !strings.Contains(r.Error, "it was in TestCacheAndFlushCost/ext4") ||
		!strings.Contains(r.Tail, "folio_wait_bit") || !strings.Contains(r.Output, "INFO: task probe.test blocked") {
		t.Errorf("hung run: %+v", r)
	}
	r = ProbeRun{}
	probeResult(&r, "sh: probe.test: not found\n", time.Minute, time.Second)
	if r.Passed || r.Error != "probe.test output has no exit status" {
		t.Errorf("run without a marker: %+v", r)
	}
}

func TestKernelTrouble(t *testing.T) {
	console := "[  1.0] virtio_blk virtio1: [vda] 4194304 512-byte logical blocks\n" +
		"[224.7] watchdog: BUG: soft lockup - CPU#0 stuck for 49s! [probe.test:1147]\n" +
		"[224.7] RIP: 0010:queued_spin_lock_slowpath+0x4f/0x1d0\n" +
		"[260.6] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n" +
		"[300.0] lab-init: ok\n"
	got := kernelTrouble(console, 2)
	if got != "[224.7] RIP: 0010:queued_spin_lock_slowpath+0x4f/0x1d0\n[260.6] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:" {
		t.Errorf("kernelTrouble: %q", got)
	}
	if got := kernelTrouble("[1.0] all well\n", 5); got != "(no lockup, hang or crash message)" {
		t.Errorf("quiet console: %q", got)
	}
}

// TestLibbpfScripts runs the bench's start and stop scripts for
// libbpf-tools on this host with busybox sh, as the guest does: the start
// returns once all three attached and sleep, the stop ends them. It loads
// BPF on the host (root, libbpf-tools installed: make deps).
func TestLibbpfScripts(t *testing.T) {
	for _, tool := range append([]string{"busybox"}, benchTools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (make deps): %v", tool, err)
		}
	}
	dir := t.TempDir()
	run := func(script string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "busybox", "sh", "-c", script).CombinedOutput()
		return string(out), err
	}
	if out, err := run(libbpfStartScript("", dir)); err != nil {
		t.Fatalf("start: %v: %s", err, out)
	}
	var pids []int
	for _, tool := range benchTools {
		b, err := os.ReadFile(filepath.Join(dir, tool+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		sc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if nr, _, _ := strings.Cut(string(sc), " "); nr != "230" && nr != "35" {
			t.Errorf("%s (pid %d) not sleeping after the start script: syscall %q", tool, pid, sc)
		}
		pids = append(pids, pid)
	}
	if out, err := run(libbpfStopScript(dir)); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	for i, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("%s (pid %d) still runs after the stop script", benchTools[i], pid)
		}
	}
	// SIGINT makes them print what they gathered.
	if b, _ := os.ReadFile(filepath.Join(dir, "biolatency.out")); !strings.Contains(string(b), "Tracing block device I/O") {
		t.Errorf("biolatency's output: %q", b)
	}
}

// TestLostBetween: what the probes say they missed between two readings,
// beside a failing cell.
func TestLostBetween(t *testing.T) {
	read := func(text string) Reading {
		r, err := parseReading([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := read(`fspair_probe_recursion_misses_total{program="iomap_dio_done"} 2
fspair_probe_events_dropped_total{reason="completion_unseen"} 0
fspair_probe_events_dropped_total{reason="inflight_full"} 5
`)
	after := read(`fspair_probe_recursion_misses_total{program="iomap_dio_done"} 3
fspair_probe_events_dropped_total{reason="completion_unseen"} 2
fspair_probe_events_dropped_total{reason="inflight_full"} 5
`)
	if got, want := lostBetween(before, after), "dropped completion_unseen +2, recursion iomap_dio_done +1"; got != want {
		t.Errorf("lostBetween = %q, want %q", got, want)
	}
	if got := lostBetween(after, after); got != "" {
		t.Errorf("lostBetween of one reading = %q, want empty", got)
	}
}
