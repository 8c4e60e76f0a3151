package inventory

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Layout is where an image's bytes are on the host file system.
type Layout struct {
	// Extents is the number of extents FIEMAP reports (-1 if unknown): a
	// fragmented image turns the guest's sequential I/O into seeks.
	Extents int64
	// Allocated is the space the file takes (st_blocks), Apparent its size.
	Allocated, Apparent int64
}

// fiemap is struct fiemap of include/uapi/linux/fiemap.h without extents.
type fiemap struct {
	start, length        uint64
	flags, mapped, count uint32
	reserved             uint32
}

// fsIocFiemap is FS_IOC_FIEMAP, _IOWR('f', 11, struct fiemap).
const fsIocFiemap = 0xC020660B

// readLayout asks the host file system for the image's extent count
// (FIEMAP with no extent buffer: the kernel only counts) and sizes.
// It runs on the image refresh schedule, never on a scrape.
func readLayout(f *os.File) (Layout, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return Layout{Extents: -1}, fmt.Errorf("stat image %s: %w", f.Name(), err)
	}
	l := Layout{Extents: -1, Allocated: st.Blocks * 512, Apparent: st.Size}
	fm := fiemap{length: ^uint64(0)}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&fm))); e != 0 {
		return l, fmt.Errorf("fiemap image %s: %w", f.Name(), e)
	}
	l.Extents = int64(fm.mapped)
	return l, nil
}
