package main

import (
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fspair/fspair/tests/lab"
	"github.com/fspair/fspair/tests/workload"
)

// Run is one workload run on one pair: one line of the state file.
// It keeps the window's first and last scrapes, not only figures derived
// from them, so that the figures can be derived again when their
// definitions change.
type Run struct {
	Pair     string            `json:"pair"` // guest/host, e.g. ext4/xfs
	Workload workload.Workload `json:"workload"`
	// Repeat is the block the run was made in (1-based): a matrix run is
	// its cell's repeat number Repeat, a control run (Control set) one of
	// the block's three runs of the control cell. State files written
	// before blocks existed have the repeat here and no Control.
	Repeat int `json:"repeat"`
	// Control is "start", "middle" or "end" for a run of the control cell
	// made to measure the drift (schedule.go); empty for a matrix run.
	Control string    `json:"control,omitempty"`
	Start   time.Time `json:"start"` // fio started (after Prepare)
	End     time.Time `json:"end"`   // fio returned and the guest synced
	Fio     Fio       `json:"fio"`
	// GuestWriteAmplification is the image-file write bytes from Start to
	// End (with the final sync) over the bytes fio wrote.
	GuestWriteAmplification float64 `json:"guest_write_amplification,omitempty"`
	WindowSeconds           float64 `json:"window_seconds"`
	From                    Scrape  `json:"from"` // first scrape of the window
	To                      Scrape  `json:"to"`   // last scrape of the window
	Env                     Env     `json:"env"`
}

// Scrape is one disk's counters at one scrape: what tests/workload reads
// (workload.ReadDisk) plus the flush-cost counters, which it does not.
type Scrape struct {
	workload.Snapshot
	Flush Flush `json:"flush"`
}

// Flush is the disk's flush-cost counters, summed over their labels:
// fspair_disk_flush_device_writes_total and _write_bytes_total (device
// writes the disk's flushes caused, data and journal) and
// fspair_disk_flush_device_cache_flushes_total.
type Flush struct {
	DeviceWrites     float64 `json:"device_writes"`
	DeviceWriteBytes float64 `json:"device_write_bytes"`
	CacheFlushes     float64 `json:"cache_flushes"`
}

// readFlush sums the flush-cost counters of the disk whose image is
// sourceFile out of a scrape.
func readFlush(fams map[string]*dto.MetricFamily, sourceFile string) Flush {
	var f Flush
	sum := func(name string, into *float64) {
		fam := fams[name]
		if fam == nil {
			return
		}
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "source_file" && lp.GetValue() == sourceFile {
					*into += m.GetCounter().GetValue()
				}
			}
		}
	}
	sum("fspair_disk_flush_device_writes_total", &f.DeviceWrites)
	sum("fspair_disk_flush_device_write_bytes_total", &f.DeviceWriteBytes)
	sum("fspair_disk_flush_device_cache_flushes_total", &f.CacheFlushes)
	return f
}

// Fio is what fio reported for a run, summed over its jobs: the counts
// tests/workload keeps, and the bandwidth and IOPS fio computes itself
// (bw_bytes and iops of each job), which are the throughput a Filebench
// user reads.
type Fio struct {
	workload.FioSummary
	Version      string  `json:"version"`
	ReadBWBytes  float64 `json:"read_bw_bytes"` // bytes per second
	WriteBWBytes float64 `json:"write_bw_bytes"`
	ReadIOPS     float64 `json:"read_iops"`
	WriteIOPS    float64 `json:"write_iops"`
}

// fioFrom sums a fio run's jobs.
func fioFrom(r *lab.FioResult) Fio {
	t := r.Total()
	return Fio{
		FioSummary: workload.FioSummary{
			ReadIOs: t.Read.TotalIOs, WriteIOs: t.Write.TotalIOs,
			ReadBytes: t.Read.IOBytes, WriteBytes: t.Write.IOBytes,
			// fio 3.33 reports fdatasyncs only as latency samples
			// (tests/lab/README.md); take the larger count.
			Syncs:   max(t.Sync.TotalIOs, t.Sync.LatNs.N),
			Seconds: t.Runtime.Seconds(),
		},
		Version:      r.Version,
		ReadBWBytes:  float64(t.Read.BWBytes),
		WriteBWBytes: float64(t.Write.BWBytes),
		ReadIOPS:     t.Read.IOPS,
		WriteIOPS:    t.Write.IOPS,
	}
}

// Env is where a run was made: the measurement conditions the report
// states.
type Env struct {
	HostKernel  string `json:"host_kernel"`  // uname -r
	HostCPU     string `json:"host_cpu"`     // /proc/cpuinfo model name
	HostCPUs    int    `json:"host_cpus"`    // online CPUs
	QEMU        string `json:"qemu"`         // qemu-system-x86_64 --version, first line
	Accel       string `json:"accel"`        // tcg: the lab has no other (tests/lab/vm.go)
	GuestKernel string `json:"guest_kernel"` // the lab kit's kernel
	HostStorage string `json:"host_storage"` // what the host file system sits on
	GuestMemMiB int    `json:"guest_mem_mib"`
	GuestCPUs   int    `json:"guest_cpus"`
	ImageMiB    int    `json:"image_mib"`
}

// Settings are the conditions every run of one state directory shares;
// a rerun with other settings would mix incomparable runs, so the state
// refuses it.
type Settings struct {
	Format          string  `json:"format"` // raw or qcow2
	Cache           string  `json:"cache"`  // QEMU cache mode
	RuntimeSeconds  float64 `json:"runtime_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	IntervalSeconds float64 `json:"interval_seconds"`
	Storage         string  `json:"storage"` // "loop" (lab loop devices) or "hostdir" (-hostdir)
	// HostDevice is what the lab's loop devices sit on (-hostdev,
	// hostdev.go); empty with -hostdir.
	HostDevice string `json:"host_device,omitempty"`
	// Method is MethodBlocks for a state made in randomized blocks with
	// control runs; empty in a state written before (see OpenStore).
	Method string `json:"method,omitempty"`
	// Seed is the seed of the blocks' order (schedule.go) and of the
	// bootstrap (verdict.go); recorded so that a resumed run keeps the
	// order and a rerendering gives the same intervals.
	Seed int64 `json:"seed,omitempty"`
	// Control is the control cell, "pair:workload" (schedule.go).
	Control string `json:"control,omitempty"`
}

// MethodBlocks names the run order of schedule.go in Settings.Method.
const MethodBlocks = "randomized-blocks-v1"
