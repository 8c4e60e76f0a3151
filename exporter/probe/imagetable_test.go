package probe

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"

	"golang.org/x/sys/unix"
)

// recordingMemory is the table's value in a buffer, with every store kept
// in order, to check what a program probing at the same time could see.
type recordingMemory struct {
	b      []byte
	stores []int64  // offsets, in order
	values []uint64 // what each stored
}

func newRecordingMemory() *recordingMemory {
	return &recordingMemory{b: make([]byte, imageTableHead+imageTableSlots*imageEntrySize)}
}

func (m *recordingMemory) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, fmt.Errorf("store at %d+%d outside the value", off, len(p))
	}
	if len(p) != 8 || off%8 != 0 {
		return 0, fmt.Errorf("store of %d bytes at %d: not one aligned 8-byte store", len(p), off)
	}
	m.stores = append(m.stores, off)
	m.values = append(m.values, binary.NativeEndian.Uint64(p))
	return copy(m.b[off:], p), nil
}

func (m *recordingMemory) u64(off int64) uint64 { return binary.NativeEndian.Uint64(m.b[off:]) }

// find is bpf/call.h image_of over the buffer: the slot and VMM, whether
// the table gave an answer, and whether the probe would go on to
// disk_by_inode.
func (m *recordingMemory) find(inode, ino uint64) (slot, vmm uint32, found, asksMap bool) {
	h := int(imageHome(ino))
	for i := range imageProbes {
		off := entryOffset((h + i) & (imageTableSlots - 1))
		k := m.u64(off + 8)
		if k == inode {
			return binary.NativeEndian.Uint32(m.b[off:]), binary.NativeEndian.Uint32(m.b[off+4:]), true, false
		}
		if k == 0 {
			return 0, 0, false, false
		}
	}
	return 0, 0, false, m.u64(0) != 0
}

// TestImageTable: images with colliding homes each land within the probe
// window or overflow to disk_by_inode (the count tells the programs to
// ask it); a removed image's place turns into a tombstone the probe goes
// past and a later image reuses; every store is one aligned 8-byte word,
// an entry's ref before its inode.
func TestImageTable(t *testing.T) {
	mem := newRecordingMemory()
	tbl := newImageTableOn(mem)
	rng := rand.New(rand.NewSource(1))
	type image struct {
		inode, ino uint64
		slot, vmm  uint32
	}
	var images []image
	// Twelve images share one inode number (one home: eight places, four
	// overflow); two hundred more are spread.
	for i := range 212 {
		ino := uint64(4242)
		if i >= 12 {
			ino = rng.Uint64()
		}
		im := image{inode: 0xffff888000000000 + uint64(i)*0x400, ino: ino, slot: uint32(i), vmm: uint32(1000 + i)}
		images = append(images, im)
		if err := tbl.put(im.inode, im.ino, im.slot, 0); err != nil {
			t.Fatal(err)
		}
		if err := tbl.put(im.inode, im.ino, im.slot, im.vmm); err != nil { // SetVMM
			t.Fatal(err)
		}
	}
	if got := mem.u64(0); got != 4 {
		t.Errorf("overflow count %d, want 4 (twelve images on eight places)", got)
	}
	for _, im := range images {
		slot, vmm, found, asks := mem.find(im.inode, im.ino)
		switch {
		case found && (slot != im.slot || vmm != im.vmm):
			t.Errorf("image %#x: slot %d vmm %d, want %d %d", im.inode, slot, vmm, im.slot, im.vmm)
		case !found && !(asks && tbl.overflow[im.inode]):
			t.Errorf("image %#x: not found, and the probe does not ask disk_by_inode for it", im.inode)
		}
	}
	if _, _, found, asks := mem.find(0xffff888012345000, 77); found || asks {
		// An empty place ends the probe of an inode number nobody shares.
		t.Errorf("a file that is no image: found %v, asks the map %v", found, asks)
	}

	// Remove one that has a place and one that overflowed.
	placed, over := images[2], images[10]
	if err := tbl.remove(placed.inode); err != nil {
		t.Fatal(err)
	}
	if err := tbl.remove(over.inode); err != nil {
		t.Fatal(err)
	}
	if got := mem.u64(0); got != 3 {
		t.Errorf("overflow count after removing one %d, want 3", got)
	}
	if _, _, found, _ := mem.find(placed.inode, placed.ino); found {
		t.Error("a removed image is still found")
	}
	// The images past the tombstone are still found.
	for _, im := range images[3:8] {
		if _, _, found, _ := mem.find(im.inode, im.ino); !found {
			t.Errorf("image %#x behind a tombstone is lost", im.inode)
		}
	}
	// A new image of that home takes the tombstone's place.
	fresh := image{inode: 0xffff8880ffff0000, ino: 4242, slot: 900, vmm: 9}
	if err := tbl.put(fresh.inode, fresh.ino, fresh.slot, fresh.vmm); err != nil {
		t.Fatal(err)
	}
	if p, want := tbl.at[fresh.inode], (tbl.at[images[1].inode]+1)&(imageTableSlots-1); p != want {
		t.Errorf("the new image went to place %d, not the tombstone's %d", p, want)
	}
	if slot, _, found, _ := mem.find(fresh.inode, fresh.ino); !found || slot != fresh.slot {
		t.Errorf("the new image: found %v slot %d", found, slot)
	}

	// Order: an inode stored into an entry (not a tombstone) comes right
	// after that entry's ref, so a probe never matches an inode whose ref
	// is not yet there.
	for i, off := range mem.stores {
		if off < imageTableHead || (off-imageTableHead)%imageEntrySize == 0 {
			continue
		}
		entry := off - 8
		if i == 0 || mem.stores[i-1] != entry {
			if mem.values[i] != imageTombstone {
				t.Fatalf("store %d: inode of the entry at %d not right after its ref", i, entry)
			}
		}
	}
	if err := tbl.put(imageTombstone, 1, 0, 0); err == nil {
		t.Error("an inode address of 1 (the tombstone) was accepted")
	}
}

// TestImageTableOverflowFollowed: an image that finds no place in the
// image table (its home's window taken) is followed through disk_by_inode,
// in every mode, and stops being followed when untracked.
func TestImageTableOverflowFollowed(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, f := tracked(t, m)
		cache := cacheFor(t, p, f.Name())
		inode, err := p.Inode(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Untrack(inode, 3); err != nil {
			t.Fatal(err)
		}
		// Register again (Untrack forgets the inode), fill the window of
		// its home with images that are not files (addresses no inode
		// has), then track it: it overflows.
		if _, err := p.Inode(f); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		ino := p.inoOf[inode]
		for i := range imageProbes {
			if err := p.images.put(0x10000+uint64(i)*0x1000, ino, 100+uint32(i), 1); err != nil {
				p.mu.Unlock()
				t.Fatal(err)
			}
		}
		p.mu.Unlock()
		if err := p.Track(inode, 3, ImageConfig{}); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		overflowed := p.images.overflow[inode]
		p.mu.Unlock()
		if !overflowed {
			t.Fatal("the image found a place: the test did not fill its window")
		}
		fd := openAs(t, f.Name(), cache)
		buf := alignedBuf(t, 4096)
		for i := range 5 {
			if _, err := unix.Pwrite(fd, buf, int64(i)*4096); err != nil {
				t.Fatal(err)
			}
		}
		if c := counters(t, p); c.Requests[opWrite] != 5 || c.Bytes[opWrite] != 5*4096 {
			t.Errorf("overflowed image: %d writes, %d bytes; want 5, %d", c.Requests[opWrite], c.Bytes[opWrite], 5*4096)
		}
		if err := p.Untrack(inode, 3); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Pwrite(fd, buf, 0); err != nil {
			t.Fatal(err)
		}
		if c := counters(t, p); c.Requests[opWrite] != 5 {
			t.Errorf("untracked overflowed image still counted: %d writes", c.Requests[opWrite])
		}
	})
}
