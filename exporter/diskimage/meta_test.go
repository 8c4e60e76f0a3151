package diskimage

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestQcow2Metadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    qcowOpts
	}{
		{"v3", qcowOpts{}},
		{"v2-512", qcowOpts{version: 2, clusterBits: 9}},
		{"extended-l2", qcowOpts{extL2: true}},
		{"compressed", qcowOpts{clusterBits: 12, compress: func(gc int64) bool { return gc%3 == 0 }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := tc.o.clusterBits
			if cb == 0 {
				cb = 16
			}
			guest := guestPattern(4*mib, int64(1)<<cb, 11)
			q := buildQcow2(guest, tc.o)
			l, err := Qcow2Metadata(bytes.NewReader(q.data), int64(len(q.data)), 0)
			if err != nil {
				t.Fatal(err)
			}
			if l.ClusterSize != q.cs || l.Truncated || l.Skipped != 0 {
				t.Errorf("cluster size %d truncated %v skipped %d", l.ClusterSize, l.Truncated, l.Skipped)
			}
			if !slices.Equal(l.Ranges, q.meta) {
				t.Errorf("ranges\n got %v\nwant %v", l.Ranges, q.meta)
			}
			for _, r := range q.meta {
				if !l.Contains(r.Start) || !l.Contains(r.End-1) || l.Contains(r.End) {
					t.Errorf("Contains disagrees with range %v", r)
				}
				if !l.Overlaps(r.Start-100, r.Start+1) || l.Overlaps(r.End, r.End) {
					t.Errorf("Overlaps disagrees with range %v", r)
				}
			}
			// A data cluster is never metadata.
			r, err := NewQcow2Reader(bytes.NewReader(q.data), int64(len(q.data)))
			if err != nil {
				t.Fatal(err)
			}
			for gc := int64(0); gc*q.cs < int64(len(guest)); gc++ {
				e, _, err := r.l2Entry(gc)
				if err != nil {
					t.Fatal(err)
				}
				if e&qcowCompressed == 0 && e&qcowOffsetMask != 0 && l.Contains(int64(e&qcowOffsetMask)) {
					t.Errorf("data cluster of guest cluster %d at %#x classified as metadata", gc, e&qcowOffsetMask)
				}
			}

			small, err := Qcow2Metadata(bytes.NewReader(q.data), int64(len(q.data)), 3)
			if err != nil {
				t.Fatal(err)
			}
			if !small.Truncated || small.Clusters > 3 {
				t.Errorf("maxClusters 3: truncated %v clusters %d", small.Truncated, small.Clusters)
			}
		})
	}
}

// An internal snapshot whose L1 table is a copy of the active one, and a
// bitmap directory with one bitmap, added to a built image.
func TestQcow2MetadataSnapshotsAndBitmaps(t *testing.T) {
	guest := guestPattern(2*mib, 64<<10, 5)
	guest[0] = 1
	q := buildQcow2(guest, qcowOpts{})
	d := withSnapshotAndBitmap(q)
	l, err := Qcow2Metadata(bytes.NewReader(d), int64(len(d)), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := mergeRanges(append(append([]Range(nil), q.meta...), Range{int64(len(q.data)), int64(len(d))}))
	if !slices.Equal(l.Ranges, want) {
		t.Errorf("ranges\n got %v\nwant %v", l.Ranges, want)
	}
	// The guest still reads the same through the active L1.
	r, err := NewQcow2Reader(bytes.NewReader(d), int64(len(d)))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(guest))
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, guest) {
		t.Errorf("guest contents changed: %v", err)
	}
}

func TestQcow2MetadataErrors(t *testing.T) {
	base := buildQcow2(make([]byte, mib), qcowOpts{}).data
	set := func(off int, b ...byte) []byte {
		d := append([]byte(nil), base...)
		copy(d[off:], b)
		return d
	}
	for _, tc := range []struct {
		name string
		data []byte
		err  error
	}{
		{"not-qcow2", make([]byte, 4096), ErrNotQcow2},
		{"refcount-table-huge", set(56, 0x10, 0, 0, 0), ErrCorrupt},
		{"snapshots-many", set(60, 0x10, 0, 0, 0), ErrCorrupt},
		{"snapshot-table-past-eof", set(60, 0, 0, 0, 1, 0, 0, 0, 0, 0x10, 0, 0, 0), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Qcow2Metadata(bytes.NewReader(tc.data), int64(len(tc.data)), 0)
			if !errors.Is(err, tc.err) {
				t.Errorf("error %v, want %v", err, tc.err)
			}
		})
	}
	// Entries pointing past the end of the file are skipped, not mapped.
	d := set(int(buildQcow2(make([]byte, mib), qcowOpts{}).cs), 0x80, 0, 0x10, 0, 0, 0, 0, 0)
	l, err := Qcow2Metadata(bytes.NewReader(d), int64(len(d)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Skipped != 1 {
		t.Errorf("skipped %d, want 1", l.Skipped)
	}
}
