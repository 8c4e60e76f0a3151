package probe

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// A scrape reads every tracked disk's counters and its host-side counters:
// two map lookups a disk, one bpf(2) call each, 20,000 calls a scrape at
// 10,000 disks, on one goroutine before anything is written. The arrays
// are read instead in batches (BPF_MAP_LOOKUP_BATCH, Linux 5.6): one call
// copies batchValues values, from slot 0 up to the highest slot asked for.
// The copies are the same as the lookups' (an array's values are copied
// without a lock either way, so a value may be read half-updated by a
// program on another CPU, each u64 whole), the calls a hundredth.

// batchValues is how many values one batch call copies: 64 disks'
// counters are 196 KiB of buffer, kept from one read to the next.
const batchValues = 64

// sparseFactor: where the slots asked for are fewer than one in this many
// of those up to the highest, each is looked up on its own rather than
// every value below the highest copied. A value's copy costs a tenth of a
// lookup call or less (measured: BenchmarkReadSlots).
const sparseFactor = 8

// slotBatch is a batch read's reusable state for one map.
type slotBatch[T any] struct {
	m    *ebpf.Map
	keys []uint32
	vals []T
	at   []int32 // slot -> index in the slots asked for, -1 for none
	// unsupported is set once the kernel refuses batch lookups on the
	// map (before 5.6): every read then looks each slot up.
	unsupported bool
}

// read calls got(i, v) with the value at slots[i] for every i whose value
// was read, and failed(i, err) for every other; v is valid until got
// returns. Slots may come in any order, and more than once.
func (b *slotBatch[T]) read(slots []uint32, got func(i int, v *T), failed func(i int, err error)) {
	if len(slots) == 0 {
		return
	}
	if b.vals == nil {
		if err := valueSizeIs[T](b.m); err != nil {
			for i := range slots {
				failed(i, err)
			}
			return
		}
		b.keys = make([]uint32, batchValues)
		b.vals = make([]T, batchValues)
	}
	var top uint32
	for _, s := range slots {
		top = max(top, s)
	}
	if b.unsupported || top >= b.m.MaxEntries() || len(slots)*sparseFactor < int(top)+1 {
		b.each(slots, got, failed)
		return
	}
	if cap(b.at) < int(top)+1 {
		b.at = make([]int32, int(top)+1)
	}
	at := b.at[:top+1]
	for i := range at {
		at[i] = -1
	}
	var again []int // slots asked for more than once: looked up after the batches
	for i, s := range slots {
		if at[s] >= 0 {
			again = append(again, i)
			continue
		}
		at[s] = int32(i)
	}
	cursor := new(ebpf.MapBatchCursor)
	seen := 0
	var err error
	for next := uint32(0); next <= top; {
		var n int
		want := min(batchValues, int(top-next)+1)
		n, err = b.m.BatchLookup(cursor, b.keys[:want], b.vals[:want], nil)
		for j, k := range b.keys[:n] {
			if k <= top && at[k] >= 0 {
				got(int(at[k]), &b.vals[j])
				at[k] = -1
				seen++
			}
		}
		next += uint32(n)
		if err != nil || n == 0 {
			break
		}
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		err = nil // the end of the array
	}
	if err != nil && seen == 0 && errors.Is(err, ebpf.ErrNotSupported) {
		// The kernel has no batch lookups (before 5.6): each slot on
		// its own, from now on.
		b.unsupported = true
		b.each(slots, got, failed)
		return
	}
	for _, i := range at {
		switch {
		case i < 0:
		case err != nil:
			failed(int(i), fmt.Errorf("read %s in batches: %w", b.m, err))
		default:
			again = append(again, int(i)) // not in the batches: its own lookup says why
		}
	}
	for _, i := range again {
		b.each(slots[i:i+1], func(_ int, v *T) { got(i, v) }, func(_ int, e error) { failed(i, e) })
	}
}

// each looks the slots up one by one.
func (b *slotBatch[T]) each(slots []uint32, got func(i int, v *T), failed func(i int, err error)) {
	v := &b.vals[0]
	for i, s := range slots {
		if err := lookupInto(b.m, s, v); err != nil {
			failed(i, fmt.Errorf("read %s slot %d: %w", b.m, s, err))
			continue
		}
		got(i, v)
	}
}

// CountersInto reads the counters of the disks at slots: got(i, c) with
// those of slots[i] (c is valid until got returns), or failed(i, err) when
// they cannot be read. One scrape's worth in a few system calls (see
// slotBatch).
func (p *Probes) CountersInto(slots []uint32, got func(i int, c *Counters), failed func(i int, err error)) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	if p.objs.DiskStats.Type() == ebpf.PerCPUArray {
		for i, s := range slots {
			if err := p.sumPerCPU(s); err != nil {
				failed(i, fmt.Errorf("read counters of slot %d: %w", s, err))
				continue
			}
			p.counters.from(&p.diskBuf)
			got(i, &p.counters)
		}
		return
	}
	if p.diskBatch.m == nil {
		p.diskBatch.m = p.objs.DiskStats
	}
	p.diskBatch.read(slots, func(i int, v *bpf.DiskCounters) {
		p.counters.from(v)
		got(i, &p.counters)
	}, failed)
}

// ImageDeviceCountersInto reads the host-side counters of the disks at
// slots, as CountersInto.
func (p *Probes) ImageDeviceCountersInto(slots []uint32, got func(i int, h *bpf.HostImageDeviceCounters), failed func(i int, err error)) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	if p.imageBatch.m == nil {
		p.imageBatch.m = p.host.ImageDeviceStats
	}
	p.imageBatch.read(slots, got, failed)
}
