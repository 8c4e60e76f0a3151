package probe

import bpf "github.com/fspair/fspair/bpf/obj"

// Counters is one disk's counters as the exposition reads them: by metric,
// each indexed by the kernel's enums (operation, direction, cache result,
// interface; bpf/disk.h). The kernel keeps them otherwise (struct counters):
// the exact counters of a request by operation, together, so that a request
// adds to one place rather than a dozen across the struct.
type Counters struct {
	Requests     [6]uint64 // completed without error, by op
	Bytes        [6]uint64
	Errors       [6]uint64
	LatencySumNs [6]uint64
	Latency      [6][25]uint64
	Size         [2][16]uint64 // reads, writes at submission
	SizeSum      [2]uint64
	// The shape histograms count one request in SHAPE_SAMPLE of each disk
	// (bpf/disk.h): seek distances, outstanding and inter-arrival.
	SeekPrev          [29]uint64
	SeekNear          [29]uint64
	SeekPrevSum       int64
	SeekNearSum       int64
	Sequential        [2]uint64 // reads, writes
	Random            [2]uint64
	SyncWrites        [2]uint64 // by enum sync_mode: dsync, flush
	Outstanding       [10]uint64
	OutstandingSum    uint64
	Interarrival      [25]uint64
	InterarrivalSumNs uint64
	Submissions       [4]uint64 // by interface
	FormatRequests    [2]uint64 // qcow2 metadata reads, writes
	FormatBytes       [2]uint64
	IoUringPunted     uint64
	// Synchronous reads and writes by what the host page cache did, by enum cache_result.
	CacheReads      [4]uint64
	CacheReadBytes  [4]uint64
	CacheWriteBytes [4]uint64
}

// from fills c from the kernel's layout.
func (c *Counters) from(k *bpf.DiskCounters) {
	for op := range k.Op {
		o := &k.Op[op]
		c.Requests[op], c.Bytes[op], c.Errors[op], c.LatencySumNs[op] = o.Requests, o.Bytes, o.Errors, o.LatencySumNs
	}
	for dir := range c.SizeSum {
		o := &k.Op[dir]
		c.SizeSum[dir], c.Sequential[dir], c.Random[dir] = o.SizeSum, o.Sequential, o.Random
	}
	c.Latency, c.Size = k.Latency, k.Size
	c.SeekPrev, c.SeekNear, c.SeekPrevSum, c.SeekNearSum = k.SeekPrev, k.SeekNear, k.SeekPrevSum, k.SeekNearSum
	c.SyncWrites = [2]uint64{k.Op[1].Dsync, k.SyncFlush}
	c.Outstanding, c.OutstandingSum = k.Outstanding, k.OutstandingSum
	c.Interarrival, c.InterarrivalSumNs = k.Interarrival, k.InterarrivalSumNs
	c.Submissions = k.Submissions
	c.FormatRequests, c.FormatBytes, c.IoUringPunted = k.FormatRequests, k.FormatBytes, k.IoUringPunted
	c.CacheReads, c.CacheReadBytes, c.CacheWriteBytes = k.Op[0].CacheRequests, k.Op[0].CacheBytes, k.Op[1].CacheBytes
}
