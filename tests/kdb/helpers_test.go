package main

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

// t0 is when the synthetic runs start.
var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// synth describes one synthetic run: fio's throughput and what the
// exporter would count over a 50 s window.
type synth struct {
	bw       float64 // fio read+write bytes per second
	wamp     float64 // device write bytes per image write byte
	writeLat float64 // file-stage write latency, seconds
}

// synthRun makes a run as the runner would store it, with round counter
// deltas so that the figures are known exactly.
func synthRun(pair string, w workload.Workload, repeat int, s synth) Run {
	start := t0.Add(time.Duration(repeat) * time.Hour)
	const (
		reads, writes, flushes = 5000.0, 2000.0, 500.0
		writeBytes             = 20e6
		window                 = 50 * time.Second
	)
	from := Scrape{Snapshot: workload.Snapshot{
		Time:     start.Add(10 * time.Second),
		Info:     map[string]string{"guest_fs": "ext4"},
		Requests: map[string]float64{"read": 100, "write": 100, "flush": 10},
		Bytes:    map[string]float64{"read": 1e6, "write": 1e6},
		Errors:   map[string]float64{}, Sequential: map[string]float64{}, Random: map[string]float64{}, SyncWrites: map[string]float64{},
		Latency: map[string]workload.Hist{"flush": {Count: 10, Sum: 0.01}},
		Stage: map[string]workload.Hist{
			"file/read": {Count: 100, Sum: 0.1}, "host_queue/read": {Count: 100, Sum: 0.01}, "device/read": {Count: 100, Sum: 0.05},
			"file/write": {Count: 100, Sum: 0.1}, "host_queue/write": {Count: 100, Sum: 0.01}, "device/write": {Count: 100, Sum: 0.05},
		},
		DeviceRequests: map[string]float64{}, DeviceBytes: map[string]float64{"write": 1e6},
	}, Flush: Flush{DeviceWriteBytes: 1000}}
	to := from
	to.Snapshot = workload.Snapshot{
		Time:     from.Time.Add(window),
		Requests: map[string]float64{"read": 100 + reads, "write": 100 + writes, "flush": 10 + flushes},
		Bytes:    map[string]float64{"read": 1e6 + 40e6, "write": 1e6 + writeBytes},
		Errors:   map[string]float64{}, Sequential: map[string]float64{}, Random: map[string]float64{}, SyncWrites: map[string]float64{},
		Latency: map[string]workload.Hist{"flush": {Count: 10 + flushes, Sum: 0.01 + flushes*0.002}},
		Stage: map[string]workload.Hist{
			"file/read": {Count: 100 + reads, Sum: 0.1 + reads*0.0002}, "host_queue/read": {Count: 100 + reads, Sum: 0.01 + reads*0.00002}, "device/read": {Count: 100 + reads, Sum: 0.05 + reads*0.0001},
			"file/write": {Count: 100 + writes, Sum: 0.1 + writes*s.writeLat}, "host_queue/write": {Count: 100 + writes, Sum: 0.01 + writes*0.00005}, "device/write": {Count: 100 + writes, Sum: 0.05 + writes*0.0003},
		},
		DeviceRequests: map[string]float64{}, DeviceBytes: map[string]float64{"write": 1e6 + writeBytes*s.wamp},
	}
	to.Flush = Flush{DeviceWriteBytes: 1000 + flushes*8192}
	return Run{
		Pair: pair, Workload: w, Repeat: repeat, Start: start, End: start.Add(95 * time.Second),
		Fio: Fio{
			FioSummary: workload.FioSummary{ReadIOs: 9000, WriteIOs: 3000, ReadBytes: 90e6, WriteBytes: 30e6, Syncs: 900, Seconds: 90},
			Version:    "fio-3.33", ReadBWBytes: s.bw * 0.75, WriteBWBytes: s.bw * 0.25, ReadIOPS: 100, WriteIOPS: 33.5,
		},
		GuestWriteAmplification: 1.5, WindowSeconds: window.Seconds(), From: from, To: to,
		Env: Env{HostKernel: "6.18.0", HostCPU: "AMD EPYC", HostCPUs: 2, QEMU: "QEMU emulator version 7.2.22", Accel: "tcg",
			GuestKernel: "6.1.0-50-cloud-amd64", HostStorage: "xfs on its own loop device", GuestMemMiB: 512, GuestCPUs: 1, ImageMiB: 1024},
	}
}

// synthCell makes a cell's runs with the given throughputs (one per repeat).
func synthCell(pair string, w workload.Workload, bws ...float64) []Run {
	var out []Run
	for i, bw := range bws {
		out = append(out, synthRun(pair, w, i+1, synth{bw: bw, wamp: 1.25, writeLat: 0.0004}))
	}
	return out
}

// testSettings are the settings of the synthetic runs.
var testSettings = Settings{Format: "raw", Cache: "none", RuntimeSeconds: 90, WarmupSeconds: 35, IntervalSeconds: 5, Storage: "loop",
	HostDevice: HostDevLoop, Method: MethodBlocks, Seed: 20, Control: "ext4/xfs:mail"}

// synthJobs makes the runs of jobs as the runner would, one every 100 s
// from t0 (95 s each), with the throughput truth(job) times the machine's
// speed drift(t) at the run's middle times a log-normal noise of standard
// deviation noise (seeded by noiseSeed; 0: none).
func synthJobs(jobs []job, truth func(j job) float64, drift func(t time.Time) float64, noise float64, noiseSeed uint64) []Run {
	rng := rand.New(rand.NewPCG(noiseSeed, 1))
	var out []Run
	for i, j := range jobs {
		start := t0.Add(time.Duration(i) * 100 * time.Second)
		mid := start.Add(95 * time.Second / 2)
		bw := truth(j) * drift(mid)
		if noise > 0 {
			bw *= math.Exp(noise * rng.NormFloat64())
		}
		r := synthRun(j.pair, j.workload, j.repeat, synth{bw: bw, wamp: 1.25, writeLat: 0.0004})
		r.Start, r.End, r.Control = start, start.Add(95*time.Second), j.control
		out = append(out, r)
	}
	return out
}

// noDrift is a machine whose speed does not change.
func noDrift(time.Time) float64 { return 1 }

func approx(t *testing.T, what string, got, want float64) {
	t.Helper()
	if d := got - want; d > 1e-9*max(1, want) || d < -1e-9*max(1, want) {
		t.Errorf("%s = %g, want %g", what, got, want)
	}
}

// mustPublished loads the committed published table.
func mustPublished(t *testing.T) *Published {
	t.Helper()
	p, err := LoadPublished("../../rules/kdb/pairs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
