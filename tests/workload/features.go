package workload

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// ErrNoDisk is returned by ReadDisk when the scrape has no disk with the
// given image file.
var ErrNoDisk = errors.New("disk not in scrape")

// Hist is a histogram's sample count and sum.
type Hist struct {
	Count float64 `json:"count"`
	Sum   float64 `json:"sum"`
}

// Snapshot is one disk's counters at one scrape: the image-file request
// stream (fspair_disk_*) and the host device's work for it.
type Snapshot struct {
	Time           time.Time          `json:"time"`
	Info           map[string]string  `json:"info,omitempty"`  // labels of fspair_disk_info
	Requests       map[string]float64 `json:"requests"`        // fspair_disk_requests_total by op
	Bytes          map[string]float64 `json:"bytes"`           // fspair_disk_bytes_total by op
	Errors         map[string]float64 `json:"errors"`          // fspair_disk_request_errors_total by op (absent before its first failure: 0)
	Sequential     map[string]float64 `json:"sequential"`      // fspair_disk_sequential_requests_total by op (read, write)
	Random         map[string]float64 `json:"random"`          // fspair_disk_random_requests_total by op
	SyncWrites     map[string]float64 `json:"sync_writes"`     // fspair_disk_sync_writes_total by mode
	Latency        map[string]Hist    `json:"latency"`         // fspair_disk_request_duration_seconds by op
	Stage          map[string]Hist    `json:"stage"`           // fspair_disk_stage_seconds by "stage/op"
	DeviceRequests map[string]float64 `json:"device_requests"` // fspair_disk_device_requests_total by op
	DeviceBytes    map[string]float64 `json:"device_bytes"`    // fspair_disk_device_bytes_total by op
	Outstanding    Hist               `json:"outstanding"`     // fspair_disk_outstanding_requests
	// The guest side, when the exporter reads it (fspair_disk_guest_*):
	// what the guest asked of its virtio disk, before QEMU merged requests.
	GuestRequests map[string]float64 `json:"guest_requests,omitempty"` // by op
	GuestBytes    map[string]float64 `json:"guest_bytes,omitempty"`    // by op
	// The image file's space on the host file system as the exporter last
	// read it (fspair_disk_image_allocated_bytes, ..._apparent_bytes: at
	// each image refresh, not each scrape); absent in runs recorded before
	// it was kept.
	ImageAllocated float64 `json:"image_allocated,omitempty"`
	ImageApparent  float64 `json:"image_apparent,omitempty"`
}

// ReadDisk picks the disk whose image is sourceFile out of a scrape taken
// at time t.
func ReadDisk(fams map[string]*dto.MetricFamily, sourceFile string, t time.Time) (Snapshot, error) {
	s := Snapshot{
		Time:           t,
		Requests:       map[string]float64{},
		Bytes:          map[string]float64{},
		Errors:         map[string]float64{},
		Sequential:     map[string]float64{},
		Random:         map[string]float64{},
		SyncWrites:     map[string]float64{},
		Latency:        map[string]Hist{},
		Stage:          map[string]Hist{},
		DeviceRequests: map[string]float64{},
		DeviceBytes:    map[string]float64{},
		GuestRequests:  map[string]float64{},
		GuestBytes:     map[string]float64{},
	}
	each := func(name string, fn func(l map[string]string, m *dto.Metric)) {
		EachSeries(fams, name, func(l map[string]string, m *dto.Metric) {
			if l["source_file"] == sourceFile {
				fn(l, m)
			}
		})
	}
	each("fspair_disk_info", func(l map[string]string, _ *dto.Metric) { s.Info = l })
	if s.Info == nil {
		return s, fmt.Errorf("read disk %s: %w", sourceFile, ErrNoDisk)
	}
	counters := []struct {
		name, label string
		into        map[string]float64
	}{
		{"fspair_disk_requests_total", "op", s.Requests},
		{"fspair_disk_bytes_total", "op", s.Bytes},
		{"fspair_disk_request_errors_total", "op", s.Errors},
		{"fspair_disk_sequential_requests_total", "op", s.Sequential},
		{"fspair_disk_random_requests_total", "op", s.Random},
		{"fspair_disk_sync_writes_total", "mode", s.SyncWrites},
		{"fspair_disk_device_requests_total", "op", s.DeviceRequests},
		{"fspair_disk_device_bytes_total", "op", s.DeviceBytes},
		{"fspair_disk_guest_requests_total", "op", s.GuestRequests},
		{"fspair_disk_guest_bytes_total", "op", s.GuestBytes},
	}
	for _, c := range counters {
		each(c.name, func(l map[string]string, m *dto.Metric) { c.into[l[c.label]] = m.GetCounter().GetValue() })
	}
	hist := func(m *dto.Metric) Hist {
		h := m.GetHistogram()
		return Hist{Count: float64(h.GetSampleCount()), Sum: h.GetSampleSum()}
	}
	each("fspair_disk_request_duration_seconds", func(l map[string]string, m *dto.Metric) { s.Latency[l["op"]] = hist(m) })
	each("fspair_disk_stage_seconds", func(l map[string]string, m *dto.Metric) { s.Stage[l["stage"]+"/"+l["op"]] = hist(m) })
	each("fspair_disk_outstanding_requests", func(_ map[string]string, m *dto.Metric) { s.Outstanding = hist(m) })
	each("fspair_disk_image_allocated_bytes", func(_ map[string]string, m *dto.Metric) { s.ImageAllocated = m.GetGauge().GetValue() })
	each("fspair_disk_image_apparent_bytes", func(_ map[string]string, m *dto.Metric) { s.ImageApparent = m.GetGauge().GetValue() })
	return s, nil
}

// Features are one disk's derived features over a window, by name (the
// Feature* constants). A feature whose denominator is zero in the window
// (no reads for a mean read size) is absent.
type Features map[string]float64

// Feature names. Shares are 0..1; sizes in bytes; latencies in seconds.
const (
	FeatIOPS               = "iops"                // reads+writes completed per second
	FeatReadShare          = "read_share"          // reads / (reads+writes), by requests issued
	FeatReadByteShare      = "read_byte_share"     // read bytes / (read+write bytes)
	FeatRandomReadShare    = "random_read_share"   // random / (random+sequential) reads
	FeatRandomWriteShare   = "random_write_share"  // random / (random+sequential) writes
	FeatSyncWriteShare     = "sync_write_share"    // sync writes (dsync+flush mode) / writes
	FeatFlushesPerWrite    = "flushes_per_write"   // flushes / writes
	FeatFlushRate          = "flushes_per_second"  // flushes completed per second
	FeatMeanReadSize       = "mean_read_bytes"     // read bytes / reads
	FeatMeanWriteSize      = "mean_write_bytes"    // write bytes / writes
	FeatReadWriteRatio     = "read_write_ratio"    // reads / writes, by requests
	FeatWriteAmplification = "write_amplification" // host device write bytes / image write bytes
	FeatFileReadLatency    = "file_read_latency_seconds"
	FeatFileWriteLatency   = "file_write_latency_seconds"
	FeatFlushLatency       = "file_flush_latency_seconds"
	FeatDeviceReadLatency  = "device_read_latency_seconds"
	FeatDeviceWriteLatency = "device_write_latency_seconds"
	FeatMeanOutstanding    = "mean_outstanding" // requests in flight at submission, counting the new one (a sample: one request in 8)
	// FeatGuestWriteAmplification is image-file write bytes over the bytes
	// the workload wrote, over a whole phase. It needs the workload's own
	// count, so Compute cannot give it; Phase.Window adds it.
	FeatGuestWriteAmplification = "guest_write_amplification"
	// FeatImageGrowthShare is the image file's growth in allocated space
	// on the host file system over the bytes written to it: near 1 while
	// the guest writes where it never wrote (a file layout on a fresh
	// image, a first fill), near 0 while it rewrites space it had,
	// below 0 where discards freed more than the writes took. A
	// recorded measurement, not a classifier input (not in FeatureNames):
	// an image filled long ago shows no growth whatever runs on it.
	// Absent without the image's space in both snapshots or without
	// writes.
	FeatImageGrowthShare = "image_growth_share"
)

// FeatureNames lists the features in table order.
var FeatureNames = []string{
	FeatIOPS, FeatReadShare, FeatReadByteShare, FeatRandomReadShare, FeatRandomWriteShare,
	FeatSyncWriteShare, FeatFlushesPerWrite, FeatFlushRate, FeatMeanReadSize, FeatMeanWriteSize,
	FeatReadWriteRatio, FeatWriteAmplification, FeatFileReadLatency, FeatFileWriteLatency,
	FeatFlushLatency, FeatDeviceReadLatency, FeatDeviceWriteLatency, FeatMeanOutstanding,
	FeatGuestWriteAmplification,
}

// The guest side's features: the same definitions as their image-file
// namesakes, on what the guest asked before QEMU merged requests and
// skipped flushes (fspair_disk_guest_*). Absent when the exporter has no
// guest side for the disk. rules/README.md (The classifier's inputs)
// compares them with the image-file features.
const (
	FeatGuestReadShare       = "guest_read_share"
	FeatGuestMeanReadSize    = "guest_mean_read_bytes"
	FeatGuestMeanWriteSize   = "guest_mean_write_bytes"
	FeatGuestFlushesPerWrite = "guest_flushes_per_write"
	FeatGuestReadWriteRatio  = "guest_read_write_ratio"
	FeatReadMergeRatio       = "read_merge_ratio"  // guest reads per image-file read
	FeatWriteMergeRatio      = "write_merge_ratio" // guest writes per image-file write
)

// GuestFeatureNames lists the guest side's features in table order.
var GuestFeatureNames = []string{
	FeatGuestReadShare, FeatGuestMeanReadSize, FeatGuestMeanWriteSize, FeatGuestFlushesPerWrite,
	FeatGuestReadWriteRatio, FeatReadMergeRatio, FeatWriteMergeRatio,
}

// Compute derives the features of the window from a to b (b later) from
// counter deltas, as rate() over the window would.
//
// The operation mix (shares, ratios, flushes and synchronous writes per
// write) counts requests issued: completed plus failed
// (fspair_disk_requests_total + fspair_disk_request_errors_total). The
// exporter counts synchronous writes at submission, so completed writes
// alone would let the synchronous share pass 1 whenever writes fail or are
// miscounted as failed. Rates, sizes and latencies use completed requests.
func Compute(a, b Snapshot) Features {
	f := Features{}
	dt := b.Time.Sub(a.Time).Seconds()
	d := func(m func(Snapshot) map[string]float64, k string) float64 { return m(b)[k] - m(a)[k] }
	req := func(s Snapshot) map[string]float64 { return s.Requests }
	byt := func(s Snapshot) map[string]float64 { return s.Bytes }
	errs := func(s Snapshot) map[string]float64 { return s.Errors }
	reads, writes := d(req, "read"), d(req, "write")
	issuedR, issuedW := reads+d(errs, "read"), writes+d(errs, "write")
	flushes := d(req, "flush") + d(errs, "flush")
	rb, wb := d(byt, "read"), d(byt, "write")
	set := func(name string, num, den float64) {
		if den > 0 {
			f[name] = num / den
		}
	}
	set(FeatIOPS, reads+writes, dt)
	set(FeatReadShare, issuedR, issuedR+issuedW)
	set(FeatReadByteShare, rb, rb+wb)
	rnd := func(s Snapshot) map[string]float64 { return s.Random }
	seq := func(s Snapshot) map[string]float64 { return s.Sequential }
	rr, sr := d(rnd, "read"), d(seq, "read")
	rw, sw := d(rnd, "write"), d(seq, "write")
	set(FeatRandomReadShare, rr, rr+sr)
	set(FeatRandomWriteShare, rw, rw+sw)
	syn := func(s Snapshot) map[string]float64 { return s.SyncWrites }
	set(FeatSyncWriteShare, d(syn, "dsync")+d(syn, "flush"), issuedW)
	set(FeatFlushesPerWrite, flushes, issuedW)
	set(FeatFlushRate, d(req, "flush"), dt)
	set(FeatMeanReadSize, rb, reads)
	set(FeatMeanWriteSize, wb, writes)
	set(FeatReadWriteRatio, issuedR, issuedW)
	dev := func(s Snapshot) map[string]float64 { return s.DeviceBytes }
	set(FeatWriteAmplification, d(dev, "write"), wb)
	mean := func(name string, x, y Hist) { set(name, y.Sum-x.Sum, y.Count-x.Count) }
	mean(FeatFileReadLatency, a.Latency["read"], b.Latency["read"])
	mean(FeatFileWriteLatency, a.Latency["write"], b.Latency["write"])
	mean(FeatFlushLatency, a.Latency["flush"], b.Latency["flush"])
	mean(FeatDeviceReadLatency, a.Stage["device/read"], b.Stage["device/read"])
	mean(FeatDeviceWriteLatency, a.Stage["device/write"], b.Stage["device/write"])
	mean(FeatMeanOutstanding, a.Outstanding, b.Outstanding)
	if a.ImageAllocated > 0 && b.ImageAllocated > 0 {
		set(FeatImageGrowthShare, b.ImageAllocated-a.ImageAllocated, wb)
	}
	if len(a.GuestRequests) > 0 && len(b.GuestRequests) > 0 {
		greq := func(s Snapshot) map[string]float64 { return s.GuestRequests }
		gbyt := func(s Snapshot) map[string]float64 { return s.GuestBytes }
		gr, gw, gf := d(greq, "read"), d(greq, "write"), d(greq, "flush")
		set(FeatGuestReadShare, gr, gr+gw)
		set(FeatGuestMeanReadSize, d(gbyt, "read"), gr)
		set(FeatGuestMeanWriteSize, d(gbyt, "write"), gw)
		set(FeatGuestFlushesPerWrite, gf, gw)
		set(FeatGuestReadWriteRatio, gr, gw)
		set(FeatReadMergeRatio, gr, reads)
		set(FeatWriteMergeRatio, gw, writes)
	}
	return f
}

// Names returns the features present, in FeatureNames order.
func (f Features) Names() []string {
	var out []string
	for _, n := range FeatureNames {
		if _, ok := f[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// Range is a closed interval; a NaN bound is open on that side.
type Range struct {
	Min, Max float64
}

// Contains reports whether v lies in r.
func (r Range) Contains(v float64) bool {
	return (math.IsNaN(r.Min) || v >= r.Min) && (math.IsNaN(r.Max) || v <= r.Max)
}

func (r Range) String() string {
	switch {
	case math.IsNaN(r.Min):
		return fmt.Sprintf("<= %g", r.Max)
	case math.IsNaN(r.Max):
		return fmt.Sprintf(">= %g", r.Min)
	}
	return fmt.Sprintf("%g..%g", r.Min, r.Max)
}

// sortedKeys returns m's keys sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
