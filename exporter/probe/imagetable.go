package probe

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// The image table (bpf/call.h image_of): the tracked images by inode, one
// array value that the programs probe in place instead of a hash lookup on
// every file, page and direct request they meet. These mirror its layout.
const (
	imageTableBits  = 12
	imageTableSlots = 1 << imageTableBits
	imageProbes     = 8
	imageTombstone  = 1 // an image left this place; probing goes on past it
	imageEntrySize  = 16
	imageTableHead  = 64 // the overflow count and its padding, one cache line
)

// imageHome is an inode's home place in the table: Fibonacci hashing of
// its inode number (the kernel's i_ino, which the registration reports),
// the same as bpf/call.h image_home.
func imageHome(ino uint64) uint32 {
	return uint32((ino * 0x9E3779B97F4A7C15) >> (64 - imageTableBits))
}

// memoryWriter is what the table writes through: the array's mapped value
// (ebpf.Memory), or a plain buffer in tests.
type memoryWriter interface {
	WriteAt(p []byte, off int64) (int, error)
}

// imageTable keeps the table's user-space copy and writes each change into
// the mapped value as aligned 8-byte stores, in an order under which a
// program probing at the same time sees every entry whole: an entry's ref
// before its inode; an image leaves by its inode turning into a tombstone,
// and entries never move, so an image that stays is never missed.
// disk_by_inode holds every image as well; the overflow count tells the
// programs to ask it when an image found no place within imageProbes of
// its home. Callers hold Probes.mu.
type imageTable struct {
	mem      memoryWriter
	place    [imageTableSlots]uint64 // inode per place: 0 never used, imageTombstone freed
	at       map[uint64]int          // inode -> its place
	overflow map[uint64]bool         // images in disk_by_inode only
}

func newImageTable(m *ebpf.Map) (*imageTable, error) {
	if want := uint32(unsafe.Sizeof(bpf.DiskImageTable{})); m.ValueSize() != want ||
		want != imageTableHead+imageTableSlots*imageEntrySize {
		return nil, fmt.Errorf("image table: value of %d bytes, layout of %d", m.ValueSize(), want)
	}
	mem, err := m.Memory()
	if err != nil {
		return nil, fmt.Errorf("map the image table: %w", err)
	}
	return newImageTableOn(mem), nil
}

func newImageTableOn(mem memoryWriter) *imageTable {
	return &imageTable{mem: mem, at: map[uint64]int{}, overflow: map[uint64]bool{}}
}

func (t *imageTable) store(off int64, v uint64) error {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	if _, err := t.mem.WriteAt(b[:], off); err != nil {
		return fmt.Errorf("write the image table: %w", err)
	}
	return nil
}

func entryOffset(place int) int64 { return imageTableHead + int64(place)*imageEntrySize }

// ref packs an image_ref (slot, then the VMM's tgid) into one 8-byte store.
func ref(slot, vmm uint32) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint32(b[:4], slot)
	binary.NativeEndian.PutUint32(b[4:], vmm)
	return binary.NativeEndian.Uint64(b[:])
}

// put places inode (its kernel address; ino its inode number) with its
// slot and VMM, or updates them where it is.
func (t *imageTable) put(inode, ino uint64, slot, vmm uint32) error {
	if inode <= imageTombstone {
		return fmt.Errorf("image table: inode %#x is not a kernel address", inode)
	}
	if p, ok := t.at[inode]; ok {
		return t.store(entryOffset(p), ref(slot, vmm))
	}
	if t.overflow[inode] {
		return nil // disk_by_inode has it
	}
	h := int(imageHome(ino))
	for i := range imageProbes {
		p := (h + i) & (imageTableSlots - 1)
		if t.place[p] > imageTombstone {
			continue
		}
		if err := t.store(entryOffset(p), ref(slot, vmm)); err != nil {
			return err
		}
		if err := t.store(entryOffset(p)+8, inode); err != nil {
			return err
		}
		t.place[p] = inode
		t.at[inode] = p
		return nil
	}
	t.overflow[inode] = true
	return t.store(0, uint64(len(t.overflow)))
}

// remove takes inode out: its place becomes a tombstone. The caller has
// removed it from disk_by_inode first, so an overflowed image is gone
// before the count that sends programs there drops.
func (t *imageTable) remove(inode uint64) error {
	if t.overflow[inode] {
		delete(t.overflow, inode)
		return t.store(0, uint64(len(t.overflow)))
	}
	p, ok := t.at[inode]
	if !ok {
		return nil
	}
	if err := t.store(entryOffset(p)+8, imageTombstone); err != nil {
		return err
	}
	t.place[p] = imageTombstone
	delete(t.at, inode)
	return nil
}
