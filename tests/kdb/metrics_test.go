package main

import (
	"testing"

	"github.com/fspair/fspair/tests/workload"
)

func TestMetrics(t *testing.T) {
	m := synthRun("ext4/xfs", workload.Mail, 1, synth{bw: 4e6, wamp: 1.25, writeLat: 0.0004}).Metrics()
	for name, want := range map[string]float64{
		MThroughputBytes: 4e6,
		MThroughputOps:   133.5,
		MSyncs:           10,     // 900 syncs in 90 s
		MGuestWriteAmp:   1.5,    // as stored
		MWriteAmp:        1.25,   // 25e6 device bytes for 20e6 image bytes
		MImageIOPS:       140,    // 7000 requests in 50 s
		MFileRead:        0.0002, // 1 s over 5000 reads
		MQueueRead:       0.00002,
		MDeviceRead:      0.0001,
		MFileWrite:       0.0004,
		MQueueWrite:      0.00005,
		MDeviceWrite:     0.0003,
		MFlushLatency:    0.002,
		MFlushBytes:      8192, // 500 flushes caused 4096000 device bytes
		MFlushRate:       10,
	} {
		got, ok := m[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		approx(t, name, got, want)
	}
	for name := range m {
		if metric(name).title == name {
			t.Errorf("figure %s has no display definition in metricDefs", name)
		}
	}
}

func TestMetricsWithoutWindow(t *testing.T) {
	r := synthRun("ext4/xfs", workload.Web, 1, synth{bw: 1e6})
	r.To = r.From // no window: only fio's figures
	r.Fio.ReadBWBytes, r.Fio.WriteBWBytes = 0, 0
	m := r.Metrics()
	approx(t, "throughput from fio's byte counts", m[MThroughputBytes], 120e6/90)
	for _, name := range []string{MWriteAmp, MFileWrite, MFlushBytes} {
		if _, ok := m[name]; ok {
			t.Errorf("%s present without a window", name)
		}
	}
}

func TestStat(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Stat
	}{
		{[]float64{3, 1, 2}, Stat{N: 3, Median: 2, Min: 1, Max: 3}},
		{[]float64{4, 1, 3, 2}, Stat{N: 4, Median: 2.5, Min: 1, Max: 4}},
		{[]float64{7}, Stat{N: 1, Median: 7, Min: 7, Max: 7}},
	} {
		got, ok := statOf(c.in)
		if !ok || got != c.want {
			t.Errorf("statOf(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if _, ok := statOf(nil); ok {
		t.Error("statOf(nil) ok")
	}
}

func TestCells(t *testing.T) {
	var runs []Run
	runs = append(runs, synthCell("xfs/xfs", workload.Mail, 3e6, 1e6, 2e6)...)
	runs = append(runs, synthCell("ext4/xfs", workload.Web, 5e6)...)
	runs = append(runs, synthCell("btrfs/ext4", workload.Mail, 4e6, 4e6)...)
	runs = append(runs, synthCell("ext4/xfs", workload.Mail, 6e6)...)
	cells := Cells(runs)
	var got []string
	for _, c := range cells {
		got = append(got, string(c.Workload)+" "+c.Pair)
	}
	want := []string{"web ext4/xfs", "mail ext4/xfs", "mail xfs/xfs", "mail btrfs/ext4"}
	if len(got) != len(want) {
		t.Fatalf("cells %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cells %v, want %v (workload order, then guest, then host)", got, want)
		}
	}
	s := cells[2].Stats[MThroughputBytes]
	if s != (Stat{N: 3, Median: 2e6, Min: 1e6, Max: 3e6}) {
		t.Errorf("mail xfs/xfs throughput %+v", s)
	}
	if len(cells[2].Runs) != 3 || cells[2].Runs[0].Repeat != 1 || cells[2].Runs[2].Repeat != 3 {
		t.Errorf("runs of a cell not in repeat order")
	}
}

func TestAllPairs(t *testing.T) {
	p := AllPairs()
	if len(p) != 9 || p[0] != "ext4/ext4" || p[8] != "btrfs/btrfs" {
		t.Errorf("AllPairs() = %v", p)
	}
}
