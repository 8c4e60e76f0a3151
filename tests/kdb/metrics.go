package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

// The figures of a run, named as site-file figures are (snake_case, unit
// last; rules/kdb/site.yaml's header), so that a cell's medians go into the
// site file under the same names.
const (
	// Throughput as fio reports it from inside the guest: bw_bytes and iops
	// of reads and writes, summed over the workload's jobs. The verdicts
	// rank by bytes per second, the unit of the published throughput
	// tables (shared/kdb/published-findings.yaml, hypervisors).
	MThroughputBytes = "throughput_bytes_per_second"
	MThroughputOps   = "throughput_ops_per_second"
	// MSyncs is fio's fsync/fdatasync/sync_file_range calls per second:
	// mail's fsyncs, fileserver's write-back kicks (jobs/*.fio).
	MSyncs = "syncs_per_second"
	// MWriteAmp is host device write bytes per image-file write byte over
	// the window (workload.FeatWriteAmplification): what the host file
	// system and the image format add.
	MWriteAmp = "write_amplification_ratio"
	// MGuestWriteAmp is image-file write bytes per byte fio wrote, over the
	// whole run: what the guest file system adds.
	MGuestWriteAmp = "guest_write_amplification_ratio"
	// Mean latency per request by stage (fspair_disk_stage_seconds): file
	// is the image-file request the VMM waits for, host_queue the host I/O
	// scheduler, device the host device's service.
	MFileRead    = "file_read_latency_seconds"
	MQueueRead   = "host_queue_read_latency_seconds"
	MDeviceRead  = "device_read_latency_seconds"
	MFileWrite   = "file_write_latency_seconds"
	MQueueWrite  = "host_queue_write_latency_seconds"
	MDeviceWrite = "device_write_latency_seconds"
	// Flush cost: the mean flush the VMM waits for, and the device bytes
	// each flush causes (fspair_disk_flush_device_write_bytes_total per
	// flush), with the flush rate beside them.
	MFlushLatency = "flush_latency_seconds"
	MFlushBytes   = "flush_device_write_bytes_per_flush"
	MFlushRate    = "flushes_per_second"
	// MImageIOPS is the image-file reads and writes per second the exporter
	// counted over the window.
	MImageIOPS = "image_requests_per_second"
)

// metricDef says how a figure is shown.
type metricDef struct {
	name  string
	title string // column heading
	unit  string // unit shown in the heading
	scale float64
	prec  int
}

// metricDefs lists the figures in table order.
var metricDefs = []metricDef{
	{MThroughputBytes, "throughput", "MB/s", 1e-6, 2},
	{MThroughputOps, "ops", "ops/s", 1, 0},
	{MSyncs, "syncs", "/s", 1, 1},
	{MImageIOPS, "image requests", "/s", 1, 0},
	{MWriteAmp, "write amplification", "device/image", 1, 2},
	{MGuestWriteAmp, "guest write amplification", "image/fio", 1, 2},
	{MFileRead, "read: file", "ms", 1e3, 3},
	{MQueueRead, "read: host queue", "ms", 1e3, 3},
	{MDeviceRead, "read: device", "ms", 1e3, 3},
	{MFileWrite, "write: file", "ms", 1e3, 3},
	{MQueueWrite, "write: host queue", "ms", 1e3, 3},
	{MDeviceWrite, "write: device", "ms", 1e3, 3},
	{MFlushLatency, "flush latency", "ms", 1e3, 2},
	{MFlushBytes, "device bytes per flush", "KiB", 1.0 / 1024, 1},
	{MFlushRate, "flushes", "/s", 1, 1},
}

func metric(name string) metricDef {
	for _, d := range metricDefs {
		if d.name == name {
			return d
		}
	}
	return metricDef{name: name, title: name, scale: 1, prec: 2}
}

// format prints v in the figure's display unit.
func (d metricDef) format(v float64) string {
	return fmt.Sprintf("%.*f", d.prec, v*d.scale)
}

// Metrics derives the run's figures. A figure without a denominator in the
// run (no flushes for the flush cost) is absent.
func (r Run) Metrics() map[string]float64 {
	m := map[string]float64{}
	set := func(name string, num, den float64) {
		if den > 0 && !math.IsNaN(num) && !math.IsInf(num, 0) {
			m[name] = num / den
		}
	}
	bw := r.Fio.ReadBWBytes + r.Fio.WriteBWBytes
	if bw == 0 && r.Fio.Seconds > 0 {
		bw = float64(r.Fio.ReadBytes+r.Fio.WriteBytes) / r.Fio.Seconds
	}
	if bw > 0 {
		m[MThroughputBytes] = bw
	}
	if ops := r.Fio.ReadIOPS + r.Fio.WriteIOPS; ops > 0 {
		m[MThroughputOps] = ops
	}
	set(MSyncs, float64(r.Fio.Syncs), r.Fio.Seconds)
	if r.GuestWriteAmplification > 0 {
		m[MGuestWriteAmp] = r.GuestWriteAmplification
	}

	a, b := r.From.Snapshot, r.To.Snapshot
	if !b.Time.After(a.Time) {
		return m
	}
	f := workload.Compute(a, b)
	for name, feat := range map[string]string{
		MWriteAmp:     workload.FeatWriteAmplification,
		MFlushLatency: workload.FeatFlushLatency,
		MFlushRate:    workload.FeatFlushRate,
		MImageIOPS:    workload.FeatIOPS,
	} {
		if v, ok := f[feat]; ok {
			m[name] = v
		}
	}
	stage := func(name, key string) {
		x, y := a.Stage[key], b.Stage[key]
		set(name, y.Sum-x.Sum, y.Count-x.Count)
	}
	stage(MFileRead, "file/read")
	stage(MQueueRead, "host_queue/read")
	stage(MDeviceRead, "device/read")
	stage(MFileWrite, "file/write")
	stage(MQueueWrite, "host_queue/write")
	stage(MDeviceWrite, "device/write")
	flushes := b.Requests["flush"] - a.Requests["flush"]
	set(MFlushBytes, r.To.Flush.DeviceWriteBytes-r.From.Flush.DeviceWriteBytes, flushes)
	return m
}

// Stat is the spread of one figure over a cell's repeats.
type Stat struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// statOf summarises vs; ok is false for none. The median of an even count
// is the mean of the middle two. Min-max rather than quartiles: with the
// three repeats of a full run quartiles say nothing more.
func statOf(vs []float64) (Stat, bool) {
	if len(vs) == 0 {
		return Stat{}, false
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Stat{N: n, Median: med, Min: s[0], Max: s[n-1]}, true
}

// Cell is one workload on one pair, with its repeats.
type Cell struct {
	Workload workload.Workload
	Pair     string // guest/host
	Runs     []Run  // by repeat
	Stats    map[string]Stat
}

// Last is when the cell's last run ended.
func (c *Cell) Last() time.Time {
	var t time.Time
	for _, r := range c.Runs {
		if r.End.After(t) {
			t = r.End
		}
	}
	return t
}

// Cells groups runs into cells and summarises each figure over the
// repeats, in knowledge-base workload order, then pair order. Control runs
// (drift.go) are left out: they measure the machine, not their cell.
func Cells(runs []Run) []Cell {
	byKey := map[string]*Cell{}
	var cells []*Cell
	for _, r := range runs {
		if r.Control != "" {
			continue
		}
		k := string(r.Workload) + " " + r.Pair
		c := byKey[k]
		if c == nil {
			c = &Cell{Workload: r.Workload, Pair: r.Pair}
			byKey[k] = c
			cells = append(cells, c)
		}
		c.Runs = append(c.Runs, r)
	}
	out := make([]Cell, 0, len(cells))
	for _, c := range cells {
		sort.Slice(c.Runs, func(i, j int) bool { return c.Runs[i].Repeat < c.Runs[j].Repeat })
		vals := map[string][]float64{}
		for _, r := range c.Runs {
			for k, v := range r.Metrics() {
				vals[k] = append(vals[k], v)
			}
		}
		c.Stats = map[string]Stat{}
		for k, vs := range vals {
			if s, ok := statOf(vs); ok {
				c.Stats[k] = s
			}
		}
		out = append(out, *c)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Workload != b.Workload {
			return workloadRank(a.Workload) < workloadRank(b.Workload)
		}
		return pairLess(a.Pair, b.Pair)
	})
	return out
}

// FileSystems are the file systems of the matrix, in the knowledge base's
// order (ext4, XFS, Btrfs), as guest and as host.
var FileSystems = []string{"ext4", "xfs", "btrfs"}

// AllPairs are the nine guest/host pairs over FileSystems.
func AllPairs() []string {
	var out []string
	for _, g := range FileSystems {
		for _, h := range FileSystems {
			out = append(out, g+"/"+h)
		}
	}
	return out
}

func fsRank(fs string) int {
	if i := slices.Index(FileSystems, fs); i >= 0 {
		return i
	}
	return len(FileSystems)
}

// pairLess orders pairs by guest, then host, in FileSystems order.
func pairLess(a, b string) bool {
	ag, ah, _ := strings.Cut(a, "/")
	bg, bh, _ := strings.Cut(b, "/")
	if ag != bg {
		return fsRank(ag) < fsRank(bg)
	}
	return fsRank(ah) < fsRank(bh)
}

func workloadRank(w workload.Workload) int {
	if i := slices.Index(workload.Workloads, w); i >= 0 {
		return i
	}
	return len(workload.Workloads)
}
