package probe

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// batchTestMap is an array of n disks' counters, each value marked with
// its slot (its first and last words), as the probes' disk_stats holds
// them.
func batchTestMap(t testing.TB, n uint32) *ebpf.Map {
	t.Helper()
	var v bpf.DiskCounters
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "batch_test", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(unsafe.Sizeof(v)), MaxEntries: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for k := range n {
		v.Op[0].Requests = uint64(k) + 1
		v.Pad[6] = uint64(k) + 1000
		if err := m.Put(k, &v); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// readAll reads slots through b and returns, for each index, the slot its
// value was marked with (-1: failed) and the errors.
func readAll(b *slotBatch[bpf.DiskCounters], slots []uint32) ([]int64, []error) {
	got := make([]int64, len(slots))
	errs := make([]error, len(slots))
	for i := range got {
		got[i] = -2 // neither got nor failed
	}
	b.read(slots, func(i int, v *bpf.DiskCounters) {
		if got[i] != -2 {
			errs[i] = fmt.Errorf("index %d given twice", i)
		}
		got[i] = int64(v.Op[0].Requests) - 1
		if v.Pad[6] != v.Op[0].Requests+999 {
			errs[i] = fmt.Errorf("index %d: value torn: first word %d, last %d", i, v.Op[0].Requests, v.Pad[6])
		}
	}, func(i int, err error) {
		if got[i] != -2 {
			errs[i] = fmt.Errorf("index %d given and failed", i)
		}
		got[i] = -1
		errs[i] = err
	})
	return got, errs
}

func TestSlotBatchRead(t *testing.T) {
	const n = 1000
	m := batchTestMap(t, n)
	shuffled := make([]uint32, 0, n)
	for k := range uint32(n) {
		shuffled = append(shuffled, k)
	}
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	cases := []struct {
		name   string
		slots  []uint32
		failed []int // indices that must fail
	}{
		{"every slot, shuffled", shuffled, nil},
		{"the first slots", []uint32{0, 1, 2, 3, 5, 7, 9, 10, 11, 12}, nil},
		{"a slot asked twice", []uint32{3, 4, 5, 6, 3, 7, 0, 1, 2, 4}, nil},
		{"sparse: looked up one by one", []uint32{999, 500, 2}, nil},
		{"past the array's end", append([]uint32{n, n + 7}, shuffled[:200]...), []int{0, 1}},
		{"up to the last slot", append([]uint32{n - 1}, shuffled[:300]...), nil},
		{"one slot", []uint32{0}, nil},
		{"none", nil, nil},
	}
	for _, c := range cases {
		// In batches, and one slot at a time as on a kernel without
		// batch lookups.
		for _, oneByOne := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/one-by-one=%v", c.name, oneByOne), func(t *testing.T) {
				b := slotBatch[bpf.DiskCounters]{m: m, unsupported: oneByOne}
				for round := range 2 { // the buffers kept from one read to the next
					got, errs := readAll(&b, c.slots)
					for i, s := range c.slots {
						if slices.Contains(c.failed, i) {
							if got[i] != -1 || errs[i] == nil {
								t.Errorf("round %d: slot %d (index %d): got the value of %d, error %v; want a failure", round, s, i, got[i], errs[i])
							}
							continue
						}
						if errs[i] != nil || got[i] != int64(s) {
							t.Errorf("round %d: slot %d (index %d): got the value of %d, error %v", round, s, i, got[i], errs[i])
						}
					}
					if b.unsupported != oneByOne {
						t.Errorf("round %d: the kernel refused batch lookups on an array (Linux 5.6 has them)", round)
					}
				}
			})
		}
	}
}

func TestSlotBatchValueSize(t *testing.T) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "batch_small", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b := slotBatch[bpf.DiskCounters]{m: m}
	got, errs := readAll(&b, []uint32{0, 1})
	for i := range got {
		if got[i] != -1 || errs[i] == nil {
			t.Errorf("index %d: got the value of %d, error %v; want a failure: the map's values are not DiskCounters", i, got[i], errs[i])
		}
	}
}

// BenchmarkReadSlots: a scrape's reading of 10,000 disks' counters, one
// lookup a disk against the batches.
func BenchmarkReadSlots(b *testing.B) {
	const n = 10000
	m := batchTestMap(b, n)
	slots := make([]uint32, n)
	for i := range slots {
		slots[i] = uint32(i)
	}
	for _, mode := range []string{"lookup", "batch"} {
		b.Run(mode, func(b *testing.B) {
			sb := slotBatch[bpf.DiskCounters]{m: m, unsupported: mode == "lookup"}
			var sum uint64
			for b.Loop() {
				sb.read(slots, func(_ int, v *bpf.DiskCounters) { sum += v.Op[0].Requests }, func(_ int, err error) { b.Fatal(err) })
			}
			if want := uint64(n) * (n + 1) / 2 * uint64(b.N); sum != want {
				b.Fatalf("sum of first words %d, want %d", sum, want)
			}
		})
	}
}
