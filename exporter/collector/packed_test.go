package collector

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	bpf "github.com/fspair/fspair/bpf/obj"
	"github.com/fspair/fspair/exporter/probe"
)

// TestPackedLayouts: the packed layouts read a value as its words, so
// every field must be a 64-bit integer or an array of them (a padding
// field would be packed as data, a narrower one misread).
func TestPackedLayouts(t *testing.T) {
	for _, v := range []any{probe.Counters{}, bpf.HostImageDeviceCounters{}} {
		typ := reflect.TypeOf(v)
		var words uintptr
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Type.Size() == 0 {
				continue // structs.HostLayout
			}
			e := f.Type
			for e.Kind() == reflect.Array {
				e = e.Elem()
			}
			if e.Kind() != reflect.Uint64 && e.Kind() != reflect.Int64 {
				t.Errorf("%s.%s is made of %s, not 64-bit integers", typ, f.Name, e)
			}
			if f.Offset != words*8 {
				t.Errorf("%s.%s at byte %d, want %d (no padding)", typ, f.Name, f.Offset, words*8)
			}
			words += f.Type.Size() / 8
		}
		if words*8 != typ.Size() {
			t.Errorf("%s: fields cover %d of %d bytes", typ, words*8, typ.Size())
		}
	}
}

// numbered is a probe.Counters and a bpf.HostImageDeviceCounters whose
// words are 1, 2, 3 ... but where keep(word) is false, which stay 0.
func numbered(keep func(w int) bool) (probe.Counters, bpf.HostImageDeviceCounters) {
	var c probe.Counters
	var h bpf.HostImageDeviceCounters
	cw := unsafe.Slice((*uint64)(unsafe.Pointer(&c)), counterWords)
	hw := unsafe.Slice((*uint64)(unsafe.Pointer(&h)), hostWords)
	for i := range cw {
		if keep(i) {
			cw[i] = uint64(i + 1)
		}
	}
	for i := range hw {
		if keep(i) {
			hw[i] = uint64(1000 + i)
		}
	}
	return c, h
}

// TestPackedFields: each field the families read unpacks to the same
// words as the dense value's field, for values dense, sparse and empty.
func TestPackedFields(t *testing.T) {
	for name, keep := range map[string]func(int) bool{
		"dense":  func(int) bool { return true },
		"sparse": func(w int) bool { return w%7 == 3 },
		"empty":  func(int) bool { return false },
	} {
		c, h := numbered(keep)
		var a wordArena
		var pc, ph packed
		pc.set(countersWords(&c), &a)
		ph.set(hostWordsOf(&h), &a)
		buf := make([]uint64, maxField)
		cs := []struct {
			f    field
			want []uint64
		}{
			{cRequests, c.Requests[:]}, {cBytes, c.Bytes[:]}, {cErrors, c.Errors[:]},
			{cLatencySum, c.LatencySumNs[:]}, {cSizeSum, c.SizeSum[:]},
			{cSeekPrev, c.SeekPrev[:]}, {cSeekNear, c.SeekNear[:]},
			{cSeekPrevSum, []uint64{uint64(c.SeekPrevSum)}}, {cSeekNearSum, []uint64{uint64(c.SeekNearSum)}},
			{cSequential, c.Sequential[:]}, {cRandom, c.Random[:]}, {cSyncWrites, c.SyncWrites[:]},
			{cOutstanding, c.Outstanding[:]}, {cOutstandingSum, []uint64{c.OutstandingSum}},
			{cInterarrival, c.Interarrival[:]}, {cInterarrivalSum, []uint64{c.InterarrivalSumNs}},
			{cSubmissions, c.Submissions[:]}, {cFormatRequests, c.FormatRequests[:]}, {cFormatBytes, c.FormatBytes[:]},
			{cPunted, []uint64{c.IoUringPunted}}, {cCacheReads, c.CacheReads[:]},
			{cCacheReadBytes, c.CacheReadBytes[:]}, {cCacheWriteBytes, c.CacheWriteBytes[:]},
		}
		for op := range c.Latency {
			cs = append(cs, struct {
				f    field
				want []uint64
			}{cLatency.at(op, latencyRow), c.Latency[op][:]})
		}
		for dir := range c.Size {
			cs = append(cs, struct {
				f    field
				want []uint64
			}{cSize.at(dir, sizeRow), c.Size[dir][:]})
		}
		for k, x := range cs {
			if got := pc.get(x.f, buf); !slices.Equal(got, x.want) {
				t.Errorf("%s: counters field %d %+v: got %v, want %v", name, k, x.f, got, x.want)
			}
			for i, w := range x.want {
				if got := pc.word(x.f.w(i)); got != w {
					t.Errorf("%s: counters field %d word %d: got %d, want %d", name, k, i, got, w)
				}
			}
		}
		hs := []struct {
			f    field
			want []uint64
		}{
			{hRequests, h.Requests[:]}, {hBytes, h.Bytes[:]}, {hServiceSum, h.ServiceSumNs[:]}, {hQueueSum, h.QueueSumNs[:]},
			{hCowExtents, []uint64{h.CowExtents}}, {hCowBytes, []uint64{h.CowBytes}},
			{hNocowExtents, []uint64{h.NocowExtents}}, {hNocowBytes, []uint64{h.NocowBytes}},
			{hFlushWrites, h.FlushWrites[:]}, {hFlushWriteBytes, h.FlushWriteBytes[:]},
			{hFlushCacheFlushes, []uint64{h.FlushCacheFlushes}}, {hFlushJournal, []uint64{h.FlushJournalWrites}},
			{hFlushJournalBytes, []uint64{h.FlushJournalBytes}},
			{hService.at(0, hostRow), h.Service[0][:]}, {hService.at(1, hostRow), h.Service[1][:]},
			{hQueue.at(0, hostRow), h.Queue[0][:]}, {hQueue.at(1, hostRow), h.Queue[1][:]},
		}
		for k, x := range hs {
			if got := ph.get(x.f, buf); !slices.Equal(got, x.want) {
				t.Errorf("%s: host field %d %+v: got %v, want %v", name, k, x.f, got, x.want)
			}
		}
		if n := len(pc.vals) + len(ph.vals); name == "empty" && n != 0 {
			t.Errorf("empty: %d words kept", n)
		}
	}
}

// TestPackedRows: many rows of random density packed into one arena,
// across its chunks, each read back whole; then the arena reset and
// filled again with other values, as a reused snapshot is.
func TestPackedRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a wordArena
	for round := range 3 {
		a.reset()
		const rows = 400 // 400 x up to 332 words: several 32k-word chunks
		dense := make([]probe.Counters, rows)
		packed := make([]packed, rows)
		for i := range dense {
			share := rng.Float64()
			w := unsafe.Slice((*uint64)(unsafe.Pointer(&dense[i])), counterWords)
			for j := range w {
				if rng.Float64() < share {
					w[j] = rng.Uint64() | 1
				}
			}
			packed[i].set(countersWords(&dense[i]), &a)
		}
		if round == 0 && len(a.chunks) < 2 {
			t.Fatalf("the rows took %d chunks: the test does not cross a chunk", len(a.chunks))
		}
		buf := make([]uint64, counterWords)
		for i := range dense {
			want := unsafe.Slice((*uint64)(unsafe.Pointer(&dense[i])), counterWords)
			if got := packed[i].get(field{0, counterWords}, buf); !slices.Equal(got, want) {
				t.Fatalf("round %d row %d: unpacked words differ", round, i)
			}
		}
	}
}

// TestArenaShrinks: chunks the last reading did not use are let go.
func TestArenaShrinks(t *testing.T) {
	var a wordArena
	for range 5 {
		a.alloc(arenaChunk / 2)
	}
	a.reset()
	if len(a.chunks) != 3 {
		t.Fatalf("after 2.5 chunks: %d kept", len(a.chunks))
	}
	a.alloc(10)
	a.reset()
	if len(a.chunks) != 1 {
		t.Fatalf("after a reading of one chunk: %d kept", len(a.chunks))
	}
	if s := a.alloc(arenaChunk + 1); len(s) != arenaChunk+1 {
		t.Fatalf("a run longer than a chunk: %d words", len(s))
	}
}
