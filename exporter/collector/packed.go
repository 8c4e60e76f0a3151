package collector

import (
	"unsafe"

	bpf "github.com/fspair/fspair/bpf/obj"
	"github.com/fspair/fspair/exporter/probe"
	"github.com/fspair/fspair/exporter/wordpack"
)

// A scrape writes family after family, so it holds every disk's counters
// until its last family is written: at 10,000 disks the dense copies were
// 37 MB of the exporter's 77 MB live heap (a disk's counters and its
// host-side counters are 3,680 bytes), and the garbage collector lets the
// heap grow to twice what stays live. Most of those words are zero: a
// histogram's requests fall in a few of its buckets, and operations,
// interfaces and cache results a disk's configuration never uses stay at
// zero. A row keeps them packed (exporter/wordpack), in words of an arena
// the snapshot reuses. A disk whose every word is non-zero costs its
// bitmaps more than before (2 x 48 bytes).

// counterWords and hostWords are the words of probe.Counters and of
// bpf.HostImageDeviceCounters: both are made of 64-bit integers only
// (TestPackedLayouts), so that a value is read as its words.
const (
	counterWords = int(unsafe.Sizeof(probe.Counters{}) / 8)
	hostWords    = int(unsafe.Sizeof(bpf.HostImageDeviceCounters{}) / 8)
)

// The bitmap's size, for the larger layout; a layout that outgrows it
// fails to compile (a negative array length).
const maskWords = 6

var (
	_ [maskWords*64 - counterWords]struct{}
	_ [maskWords*64 - hostWords]struct{}
)

// packed is a disk's probe.Counters or bpf.HostImageDeviceCounters, packed
// (exporter/wordpack).
type packed struct {
	mask [maskWords]uint64
	vals []uint64
}

func (p *packed) set(w []uint64, a *wordArena) { p.vals = wordpack.Pack(p.mask[:], w, a.alloc) }

func countersWords(c *probe.Counters) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(c)), counterWords)
}

func hostWordsOf(h *bpf.HostImageDeviceCounters) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(h)), hostWords)
}

// get is the field f's words, unpacked into buf (at least f.n long).
func (p *packed) get(f field, buf []uint64) []uint64 {
	return wordpack.Unpack(p.mask[:], p.vals, f.off, f.n, buf)
}

// word is the word at w.
func (p *packed) word(w int) uint64 { return wordpack.At(p.mask[:], p.vals, w) }

// field is n words from word off of a packed layout: an array field, or
// one row of a two-dimensional one (at).
type field struct{ off, n int }

// at is the i-th row of a two-dimensional array field whose rows are n
// words long.
func (f field) at(i, n int) field { return field{f.off + i*n, n} }

// w is the i-th word of f.
func (f field) w(i int) int { return f.off + i }

// fieldOf is the field at byte offset off, size bytes long.
func fieldOf(off, size uintptr) field { return field{int(off / 8), int(size / 8)} }

var (
	zc probe.Counters
	zh bpf.HostImageDeviceCounters
)

// The fields the families read.
var (
	cRequests        = fieldOf(unsafe.Offsetof(zc.Requests), unsafe.Sizeof(zc.Requests))
	cBytes           = fieldOf(unsafe.Offsetof(zc.Bytes), unsafe.Sizeof(zc.Bytes))
	cErrors          = fieldOf(unsafe.Offsetof(zc.Errors), unsafe.Sizeof(zc.Errors))
	cLatencySum      = fieldOf(unsafe.Offsetof(zc.LatencySumNs), unsafe.Sizeof(zc.LatencySumNs))
	cLatency         = fieldOf(unsafe.Offsetof(zc.Latency), unsafe.Sizeof(zc.Latency[0])) // .at(op, len(zc.Latency[0]))
	cSize            = fieldOf(unsafe.Offsetof(zc.Size), unsafe.Sizeof(zc.Size[0]))
	cSizeSum         = fieldOf(unsafe.Offsetof(zc.SizeSum), unsafe.Sizeof(zc.SizeSum))
	cSeekPrev        = fieldOf(unsafe.Offsetof(zc.SeekPrev), unsafe.Sizeof(zc.SeekPrev))
	cSeekNear        = fieldOf(unsafe.Offsetof(zc.SeekNear), unsafe.Sizeof(zc.SeekNear))
	cSeekPrevSum     = fieldOf(unsafe.Offsetof(zc.SeekPrevSum), unsafe.Sizeof(zc.SeekPrevSum))
	cSeekNearSum     = fieldOf(unsafe.Offsetof(zc.SeekNearSum), unsafe.Sizeof(zc.SeekNearSum))
	cSequential      = fieldOf(unsafe.Offsetof(zc.Sequential), unsafe.Sizeof(zc.Sequential))
	cRandom          = fieldOf(unsafe.Offsetof(zc.Random), unsafe.Sizeof(zc.Random))
	cSyncWrites      = fieldOf(unsafe.Offsetof(zc.SyncWrites), unsafe.Sizeof(zc.SyncWrites))
	cOutstanding     = fieldOf(unsafe.Offsetof(zc.Outstanding), unsafe.Sizeof(zc.Outstanding))
	cOutstandingSum  = fieldOf(unsafe.Offsetof(zc.OutstandingSum), unsafe.Sizeof(zc.OutstandingSum))
	cInterarrival    = fieldOf(unsafe.Offsetof(zc.Interarrival), unsafe.Sizeof(zc.Interarrival))
	cInterarrivalSum = fieldOf(unsafe.Offsetof(zc.InterarrivalSumNs), unsafe.Sizeof(zc.InterarrivalSumNs))
	cSubmissions     = fieldOf(unsafe.Offsetof(zc.Submissions), unsafe.Sizeof(zc.Submissions))
	cFormatRequests  = fieldOf(unsafe.Offsetof(zc.FormatRequests), unsafe.Sizeof(zc.FormatRequests))
	cFormatBytes     = fieldOf(unsafe.Offsetof(zc.FormatBytes), unsafe.Sizeof(zc.FormatBytes))
	cPunted          = fieldOf(unsafe.Offsetof(zc.IoUringPunted), unsafe.Sizeof(zc.IoUringPunted))
	cCacheReads      = fieldOf(unsafe.Offsetof(zc.CacheReads), unsafe.Sizeof(zc.CacheReads))
	cCacheReadBytes  = fieldOf(unsafe.Offsetof(zc.CacheReadBytes), unsafe.Sizeof(zc.CacheReadBytes))
	cCacheWriteBytes = fieldOf(unsafe.Offsetof(zc.CacheWriteBytes), unsafe.Sizeof(zc.CacheWriteBytes))

	hRequests          = fieldOf(unsafe.Offsetof(zh.Requests), unsafe.Sizeof(zh.Requests))
	hBytes             = fieldOf(unsafe.Offsetof(zh.Bytes), unsafe.Sizeof(zh.Bytes))
	hServiceSum        = fieldOf(unsafe.Offsetof(zh.ServiceSumNs), unsafe.Sizeof(zh.ServiceSumNs))
	hQueueSum          = fieldOf(unsafe.Offsetof(zh.QueueSumNs), unsafe.Sizeof(zh.QueueSumNs))
	hCowExtents        = fieldOf(unsafe.Offsetof(zh.CowExtents), unsafe.Sizeof(zh.CowExtents))
	hCowBytes          = fieldOf(unsafe.Offsetof(zh.CowBytes), unsafe.Sizeof(zh.CowBytes))
	hNocowExtents      = fieldOf(unsafe.Offsetof(zh.NocowExtents), unsafe.Sizeof(zh.NocowExtents))
	hNocowBytes        = fieldOf(unsafe.Offsetof(zh.NocowBytes), unsafe.Sizeof(zh.NocowBytes))
	hService           = fieldOf(unsafe.Offsetof(zh.Service), unsafe.Sizeof(zh.Service[0]))
	hQueue             = fieldOf(unsafe.Offsetof(zh.Queue), unsafe.Sizeof(zh.Queue[0]))
	hFlushWrites       = fieldOf(unsafe.Offsetof(zh.FlushWrites), unsafe.Sizeof(zh.FlushWrites))
	hFlushWriteBytes   = fieldOf(unsafe.Offsetof(zh.FlushWriteBytes), unsafe.Sizeof(zh.FlushWriteBytes))
	hFlushCacheFlushes = fieldOf(unsafe.Offsetof(zh.FlushCacheFlushes), unsafe.Sizeof(zh.FlushCacheFlushes))
	hFlushJournal      = fieldOf(unsafe.Offsetof(zh.FlushJournalWrites), unsafe.Sizeof(zh.FlushJournalWrites))
	hFlushJournalBytes = fieldOf(unsafe.Offsetof(zh.FlushJournalBytes), unsafe.Sizeof(zh.FlushJournalBytes))
)

// Row lengths of the two-dimensional fields.
const (
	latencyRow = len(zc.Latency[0])
	sizeRow    = len(zc.Size[0])
	hostRow    = len(zh.Service[0])
)

// maxField is the longest field a family reads at once: the buffers the
// writers unpack into are this long.
const maxField = 32

// wordArena hands out runs of words from chunks it keeps from one
// snapshot's reading to the next, so that packing allocates nothing once
// the chunks are there. A run is never moved: rows keep slices of it.
type wordArena struct {
	chunks [][]uint64
	cur    int // the chunk being filled
	used   int // words of it handed out
}

// arenaChunk is a chunk's length in words (256 KiB).
const arenaChunk = 1 << 15

// reset hands the chunks out again from the first; what was handed out
// before must no longer be used. Chunks beyond what the last reading used
// (a fleet that shrank) are let go.
func (a *wordArena) reset() {
	if len(a.chunks) > a.cur+1 {
		clear(a.chunks[a.cur+1:])
		a.chunks = a.chunks[:a.cur+1]
	}
	a.cur, a.used = 0, 0
}

// alloc is n words, their values left as they were.
func (a *wordArena) alloc(n int) []uint64 {
	if n == 0 {
		return nil
	}
	if n > arenaChunk {
		return make([]uint64, n)
	}
	if len(a.chunks) == 0 {
		a.chunks = append(a.chunks, make([]uint64, arenaChunk))
	}
	if a.used+n > arenaChunk {
		a.cur++
		a.used = 0
		if a.cur == len(a.chunks) {
			a.chunks = append(a.chunks, make([]uint64, arenaChunk))
		}
	}
	s := a.chunks[a.cur][a.used : a.used+n : a.used+n]
	a.used += n
	return s
}
