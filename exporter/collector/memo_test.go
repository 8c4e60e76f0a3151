package collector

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/hostfs"
)

// exposition is the text and the protobuf (native and classic
// histograms) writers' output for one snapshot.
func exposition(t *testing.T, s *snapshot) string {
	t.Helper()
	var text, pb bytes.Buffer
	tw := newTextWriter(&text)
	writeDirect(tw, s)
	tw.flush()
	for _, mode := range []Histograms{HistogramsNative, HistogramsClassic} {
		pw := newProtoWriter(&pb, mode)
		writeDirect(pw, s)
		pw.flush()
		if pw.err != nil {
			t.Fatal(pw.err)
		}
	}
	if tw.err != nil {
		t.Fatal(tw.err)
	}
	return text.String() + "\x00" + pb.String()
}

// TestLabelMemo: a snapshot read again and again, as the handler reuses
// it, writes what a new snapshot writes, while the inventory changes
// between readings: label values and fspair_disk_info's values changed,
// disks added in the middle (every later one moves), removed, given the
// label set of another, their cache mode (and so the paths the probes do
// not follow) changed, and the guest statuses changed.
func TestLabelMemo(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	inv, k := randomFleet(rng, 40)
	g := randomGuest(rand.New(rand.NewPCG(11, 13)), inv)
	var kept snapshot
	changes := []struct {
		name   string
		change func()
	}{
		{"first reading", func() {}},
		{"unchanged", func() {}},
		{"label values", func() {
			inv.disks[3].SourceFile += "/moved"
			inv.disks[7].UUID = "another-uuid"
			inv.disks[8].Domain += "\xff"
		}},
		{"info values", func() {
			inv.disks[4].GuestFS = "btrfs"
			inv.disks[5].HostFS = hostfs.Mount{FSType: "xfs", MountPoint: "/new\n", Device: "/dev/sdz"}
			inv.disks[6].ImageFormat = ""
			inv.disks[9].Source = "qemu"
		}},
		{"cache and aio", func() {
			for i := range inv.disks {
				inv.disks[i].Cache, inv.disks[i].AIO = "writethrough", "io_uring"
			}
		}},
		{"inserted", func() {
			d := inv.disks[10]
			d.Domain, d.Slot = "inserted", 10
			inv.disks = slices.Insert(inv.disks, 2, d)
		}},
		{"removed", func() { inv.disks = slices.Delete(inv.disks, 5, 9)[:len(inv.disks)-6] }},
		{"duplicate label set", func() { inv.disks[1].Disk = inv.disks[0].Disk }},
		{"guest statuses", func() {
			for i, d := range inv.disks {
				st := g[d.Domain]
				st.Status = []string{guest.StatusOK, guest.StatusStale, guest.StatusNoDevice}[i%3]
				st.Histogram = []string{guest.HistogramOK, guest.HistogramRefused}[i%2]
				g[d.Domain] = st
			}
		}},
		{"none", func() { inv.disks = nil }},
		{"back", func() {
			inv2, _ := randomFleet(rand.New(rand.NewPCG(11, 12)), 40)
			inv.disks = inv2.disks
		}},
	}
	for _, c := range changes {
		c.change()
		kept.read(inv, k, k)
		kept.readGuest(g)
		var fresh snapshot
		fresh.read(inv, k, k)
		fresh.readGuest(g)
		if fmt.Sprint(kept.diskErr) != fmt.Sprint(fresh.diskErr) {
			t.Errorf("%s: disk error %v, a new snapshot's %v", c.name, kept.diskErr, fresh.diskErr)
		}
		if got, want := exposition(t, &kept), exposition(t, &fresh); got != want {
			t.Errorf("%s: the reused snapshot writes other bytes than a new one (%d against %d)", c.name, len(got), len(want))
		}
	}
}

// TestLabelMemoBounded: the runs kept by value (guest statuses, paths not
// followed) stay within maxMemoRuns whatever values come, and are still
// right after the memo starts over.
func TestLabelMemoBounded(t *testing.T) {
	var m labelMemo
	for i := range 3 * maxMemoRuns {
		st := fmt.Sprintf("status-%d", i)
		if got, want := m.guestInfo(guest.SourceQMP, st, guest.HistogramOK), extra("source", guest.SourceQMP, "status", st, "histogram", guest.HistogramOK); got != want {
			t.Fatalf("guestInfo(%s) = %q, want %q", st, got.text, want.text)
		}
		if len(m.guest) > maxMemoRuns {
			t.Fatalf("%d guest runs kept, at most %d", len(m.guest), maxMemoRuns)
		}
	}
}

// TestProtoPartsMatchSerial: the protobuf families encoded in parts
// (protoWriter.direct) are the bytes of the serial writer, for any number
// of parts, including more parts than disks and no disk at all, in every
// histogram mode, with guest values.
func TestProtoPartsMatchSerial(t *testing.T) {
	for _, n := range []int{0, 1, 3, 17, 100} {
		rng := rand.New(rand.NewPCG(uint64(n), 21))
		inv, k := randomFleet(rng, n)
		g := randomGuest(rng, inv)
		var s snapshot
		s.read(inv, k, k)
		s.readGuest(g)
		for _, mode := range []Histograms{HistogramsClassic, HistogramsNative, HistogramsBoth} {
			var serial bytes.Buffer
			w := newProtoWriter(&serial, mode)
			writeDirect(w, &s)
			if err := w.finish(); err != nil {
				t.Fatal(err)
			}
			if n > 0 && serial.Len() == 0 {
				t.Fatalf("%d disks: nothing written", n)
			}
			for parts := 1; parts <= 5; parts++ {
				var b bytes.Buffer
				w := newProtoWriter(&b, mode)
				w.direct(&s, parts)
				if err := w.finish(); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b.Bytes(), serial.Bytes()) {
					t.Errorf("%d disks, %s, %d parts: %d bytes unlike the serial writer's %d", n, mode, parts, b.Len(), serial.Len())
				}
			}
		}
	}
}

// TestProtoPartsError: a histogram that does not fit its family, in any
// part, fails the scrape as it fails the serial writer.
func TestProtoPartsError(t *testing.T) {
	h := histFamilyOf(diskLatency, latencyShape)
	w := newProtoPart(HistogramsNative)
	w.family(&h.family)
	w.histogram(h, lbl{}, lbl{}, make([]uint64, 3), 0)
	var b bytes.Buffer
	t2 := newProtoWriter(&b, HistogramsNative)
	t2.joinParts([]*protoWriter{newProtoPart(HistogramsNative), w})
	if t2.err == nil {
		t.Error("a part's error was lost")
	}
}

func TestProtoParts(t *testing.T) {
	for _, c := range []struct{ disks, max int }{{0, 1}, {minPartDisks - 1, 1}, {10000, maxProtoParts}} {
		if got := protoParts(c.disks); got < 1 || got > c.max {
			t.Errorf("protoParts(%d) = %d, want 1 to %d", c.disks, got, c.max)
		}
	}
}

// TestAppendTagVarint: the inline key and varint are protowire's bytes,
// for every field number below 16 (all those of metrics.proto written
// here) and wire type, and for varints of every length.
func TestAppendTagVarint(t *testing.T) {
	for n := protowire.Number(1); n < 16; n++ {
		for _, typ := range []protowire.Type{protowire.VarintType, protowire.Fixed64Type, protowire.BytesType} {
			if got, want := appendTag(nil, n, typ), protowire.AppendTag(nil, n, typ); !bytes.Equal(got, want) {
				t.Errorf("appendTag(%d, %d) = %x, want %x", n, typ, got, want)
			}
		}
	}
	for _, v := range []uint64{0, 1, 0x7f, 0x80, 0x3fff, 0x4000, 1<<35 + 3, 1<<63 - 1, 1 << 63, ^uint64(0)} {
		if got, want := appendVarint([]byte{9}, v), protowire.AppendVarint([]byte{9}, v); !bytes.Equal(got, want) {
			t.Errorf("appendVarint(%d) = %x, want %x", v, got, want)
		}
	}
}
