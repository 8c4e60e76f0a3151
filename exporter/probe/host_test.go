package probe

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// kernelDev is the kernel's dev_t (major << 20 | minor) of a block device node.
func kernelDev(t testing.TB, node string) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil {
		t.Fatal(err)
	}
	return uint32(unix.Major(st.Rdev))<<20 | uint32(unix.Minor(st.Rdev))
}

// sysBlockStat reads sectors read and written from /sys/block/<dev>/stat.
func sysBlockStat(t *testing.T, dev string) (rd, wr uint64) {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + dev + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	rd, _ = strconv.ParseUint(f[2], 10, 64)
	wr, _ = strconv.ParseUint(f[6], 10, 64)
	return rd * 512, wr * 512
}

// TestHostDeviceAttribution: on a loop-backed ext4, XFS and Btrfs, an
// image's buffered (writeback) and direct writes and its direct reads are
// charged to its disk, the journal or log to metadata, another file to
// other; the device totals equal the device's own /sys/block stat.
func TestHostDeviceAttribution(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		for _, fs := range hookFS {
			t.Run(fs, func(t *testing.T) { hostDeviceAttribution(t, m, fs, 0) })
		}
	})
}

// TestHostDeviceFilterFull: with more followed devices than the block
// programs' first filter holds (FILTER_SLOTS), the filter is off and the
// device map decides: the attribution is the same.
func TestHostDeviceFilterFull(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) { hostDeviceAttribution(t, m, "ext4", filterSlots) })
}

// hostDeviceAttribution checks the attribution on a loop-backed fs, with
// others more devices followed beside it (device numbers no device has).
func hostDeviceAttribution(t *testing.T, m Mode, fs string, others int) {
	loop, mnt := testFS(t, fs)
	dev := kernelDev(t, loop)

	p := load(t, m)
	img := filepath.Join(mnt, "disk.img")
	f := trackFile(t, p, img, 2)
	for i := range others {
		if err := p.TrackDevice(uint32(4000+i)<<20, uint32(1+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.TrackDevice(dev, 0); err != nil {
		t.Fatal(err)
	}
	sh(t, "sync")
	name := filepath.Base(loop)
	rd0, wr0 := sysBlockStat(t, name)

	buf := make([]byte, 1<<20)
	for i := 0; i < 8; i++ { // 8 MiB buffered, written back by fsync
		unix.Pwrite(int(f.Fd()), buf, int64(i)<<20)
	}
	if err := unix.Fsync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	// O_DSYNC: each direct write ends with a cache flush the thread issues
	// itself, whose empty bio is no data of the image's.
	d, err := unix.Open(img, unix.O_RDWR|unix.O_DIRECT|unix.O_DSYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The direct I/O buffer lies in a transparent huge page where the
	// kernel gives one: its bios' pages are tail pages then, whose own
	// fields say nothing (QEMU madvises guest memory so).
	mem, huge := hugeGuestBuf(t, 1<<20)
	if !huge {
		t.Logf("no transparent huge page here: the direct I/O buffer is plain pages")
		mem = alignedBuf(t, 1<<20)
	}
	for i := 8; i < 12; i++ { // 4 MiB direct, synchronous
		if _, err := unix.Pwrite(d, mem, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ { // 4 MiB direct reads
		if _, err := unix.Pread(d, mem, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
	}
	unix.Close(d)
	other := filepath.Join(mnt, "other")
	os.WriteFile(other, make([]byte, 2<<20), 0o600)
	sh(t, "sync")
	rd1, wr1 := sysBlockStat(t, name)

	ic, err := p.ImageDeviceCounters(2)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := p.DeviceCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image: %d/%d requests, %d/%d bytes (read/write)", ic.Requests[0], ic.Requests[1], ic.Bytes[0], ic.Bytes[1])
	// The device's own statistics again: background writes (journal
	// commits; ext4's lazy inode table init where the file system was not
	// made by loopFS) may land between the readings.
	rd2, wr2 := sysBlockStat(t, name)
	t.Logf("device: data %v metadata %v other %v bytes; flushes %d; /sys/block: read %d-%d written %d-%d",
		dc.Bytes[0], dc.Bytes[1], dc.Bytes[2], dc.Flushes, rd1-rd0, rd2-rd0, wr1-wr0, wr2-wr0)
	// Btrfs submits its direct I/O bios itself, so they name no request:
	// they are charged to the image only while the mode follows the direct
	// call (which marks the thread). Where it does not, Unfollowed says so
	// for those requests and their device bytes count as other, unless the
	// kernel turned the direct writes buffered (Btrfs from 6.15, and Debian's 6.12),
	// whose writeback pages are the image's again.
	directCharged := func(op string) bool {
		counted, _ := coverage(t, p, img, "none", "threads", op)
		return fs != fsBtrfs || counted
	}
	switch {
	case directCharged("write") && ic.Bytes[1] != 12<<20:
		t.Errorf("image data written to the device: %d bytes, want %d (8 MiB writeback + 4 MiB direct)", ic.Bytes[1], 12<<20)
	case !directCharged("write") && ic.Bytes[1] != 8<<20 && ic.Bytes[1] != 12<<20:
		t.Errorf("image data written to the device: %d bytes, want 8 MiB writeback, plus 4 MiB if the direct writes went buffered", ic.Bytes[1])
	}
	wantRead := uint64(0)
	if directCharged("read") {
		wantRead = 4 << 20
	}
	if ic.Bytes[0] != wantRead {
		t.Errorf("image data read from the device: %d bytes, want %d (4 MiB direct where charged)", ic.Bytes[0], wantRead)
	}
	if uncharged := uint64(12<<20) - min(ic.Bytes[1], 12<<20); dc.Bytes[2][1] < 2<<20+uncharged {
		t.Errorf("other writes %d, want >= 2 MiB (the other file) + %d (the image's uncharged direct writes)", dc.Bytes[2][1], uncharged)
	}
	if dc.Bytes[1][1] == 0 {
		t.Errorf("no journal/metadata writes on the device")
	}
	var wr, rd uint64
	for k := 0; k < 3; k++ {
		rd += dc.Bytes[k][0]
		wr += dc.Bytes[k][1]
	}
	// The exporter's totals, read between the two readings of /sys/block,
	// lie between them, within 2% (journal commits completing), as the
	// acceptance allows.
	within := func(a, lo, hi uint64) bool { return float64(a) >= 0.98*float64(lo) && float64(a) <= 1.02*float64(hi) }
	if !within(wr, wr1-wr0, wr2-wr0) || !within(rd, rd1-rd0, rd2-rd0) {
		t.Errorf("device totals read %d written %d; /sys/block says read %d-%d, written %d-%d", rd, wr, rd1-rd0, rd2-rd0, wr1-wr0, wr2-wr0)
	}

	// Every direct I/O bio's tag is dropped when the bio completes: a tag
	// left behind charges a later bio at the same address to this disk.
	var key uint64
	var owner uint32
	left := 0
	for it := p.host.BioOwner.Iterate(); it.Next(&key, &owner); {
		left++
	}
	if left != 0 {
		t.Errorf("%d direct I/O bio tags left after every bio completed", left)
	}

	// The fsync opened the device's flush window; untracking the device
	// drops it with the device. (Btrfs keys its window by its anonymous
	// dev_t, not the device's.)
	if fs == fsBtrfs {
		return
	}
	if !flushCostFollowed(p, fs, "writeback", "threads") {
		t.Logf("mode %s does not follow the flush cost on %s: no flush window to check", m, fs)
		return
	}
	var w bpf.DiskFlushWindow
	if err := p.objs.FlushWindows.Lookup(dev, &w); err != nil {
		t.Errorf("no flush window for the device after an fsync on its image: %v", err)
	}
	if err := p.UntrackDevice(dev); err != nil {
		t.Fatal(err)
	}
	if err := p.objs.FlushWindows.Lookup(dev, &w); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("flush window of an untracked device: lookup says %v, want %v", err, ebpf.ErrKeyNotExist)
	}
}

// TestCacheAndFlushCost: on each host file system, what the host page cache
// does for synchronous calls (a read that waits for the device is a miss,
// the same read again a hit, O_DIRECT bypasses it; a write on a page already
// dirty is absorbed) and what a flush costs on the device (the writeback it
// forces, and journal or log writes).
func TestCacheAndFlushCost(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		for _, fs := range hookFS {
			t.Run(fs, func(t *testing.T) { cacheAndFlushCost(t, m, fs) })
		}
	})
}

func cacheAndFlushCost(t *testing.T, m Mode, fs string) {
	{
		{
			loop, mnt := testFS(t, fs)
			var st unix.Stat_t
			if err := unix.Stat(loop, &st); err != nil {
				t.Fatal(err)
			}
			p := load(t, m)
			img := filepath.Join(mnt, "disk.img")
			f := trackFile(t, p, img, 3)
			if err := p.TrackDevice(uint32(unix.Major(st.Rdev))<<20|uint32(unix.Minor(st.Rdev)), 1); err != nil {
				t.Fatal(err)
			}
			fd := int(f.Fd())

			// 4 MiB of new blocks, then a flush: allocation makes it a journal transaction.
			buf := make([]byte, 1<<20)
			for i := 0; i < 4; i++ {
				if _, err := unix.Pwrite(fd, buf, int64(i)<<20); err != nil {
					t.Fatal(err)
				}
			}
			if err := unix.Fdatasync(fd); err != nil {
				t.Fatal(err)
			}
			ic, err := p.ImageDeviceCounters(3)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("flush: call writes %v bytes %v (data, metadata, other); journal %d writes %d bytes; cache flushes %d",
				ic.FlushWrites[:3], ic.FlushWriteBytes[:3], ic.FlushJournalWrites, ic.FlushJournalBytes, ic.FlushCacheFlushes)
			if !flushCostFollowed(p, fs, "writeback", "threads") {
				if ic.FlushWriteBytes[0]+ic.FlushWriteBytes[1]+ic.FlushJournalBytes != 0 {
					t.Errorf("flush cost counted in mode %s on %s, where Unfollowed says it is not followed", m, fs)
				}
			} else if ic.FlushWriteBytes[0] < 4<<20 {
				t.Errorf("flush wrote %d bytes of image data, want >= 4 MiB (the dirty pages it forced out)", ic.FlushWriteBytes[0])
			}
			if flushCostFollowed(p, fs, "writeback", "threads") && ic.FlushWriteBytes[1]+ic.FlushJournalBytes == 0 {
				t.Errorf("flush of new blocks caused no journal or metadata writes")
			}
			if flushCostFollowed(p, fs, "writeback", "threads") && ic.FlushCacheFlushes == 0 {
				t.Errorf("flush caused no device cache flush")
			}

			// The first 4 KiB page is clean after the flush: the first write
			// dirties it, the second lands on the dirty page.
			page := make([]byte, 4096)
			for i := 0; i < 2; i++ {
				if _, err := unix.Pwrite(fd, page, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := unix.Fdatasync(fd); err != nil {
				t.Fatal(err)
			}
			// Evict the file's clean pages: the next read must go to the device.
			if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
			rd := make([]byte, 64<<10)
			for i := 0; i < 2; i++ { // a miss, then a hit
				if _, err := unix.Pread(fd, rd, 1<<20); err != nil {
					t.Fatal(err)
				}
			}
			d, err := unix.Open(img, unix.O_RDONLY|unix.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(d)
			mem := alignedBuf(t, 64<<10)
			if _, err := unix.Pread(d, mem, 2<<20); err != nil {
				t.Fatal(err)
			}
			c := counters(t, p)
			t.Logf("cache: reads %v bytes %v (hit, miss, direct); writes %v (absorbed, dirtied, direct)",
				c.CacheReads[:3], c.CacheReadBytes[:3], c.CacheWriteBytes[:3])
			// The buffered calls are classified where the mode follows
			// them; the direct read wherever direct reads are followed.
			buffered, timed := coverage(t, p, img, "writeback", "threads", "read")
			direct, _ := coverage(t, p, img, "none", "threads", "read")
			want := [3]uint64{0, 0, 0}
			if buffered && timed {
				want[0], want[1] = 1, 1
			}
			if direct {
				want[2] = 1
			}
			if [3]uint64(c.CacheReads[:3]) != want {
				t.Errorf("reads by result %v, want %v (hit, miss, direct)", c.CacheReads[:3], want)
			}
			for i := range want {
				want[i] *= 64 << 10
			}
			if [3]uint64(c.CacheReadBytes[:3]) != want {
				t.Errorf("read bytes by result %v, want %v", c.CacheReadBytes[:3], want)
			}
			// Large folios: the 4 MiB of new writes may dirty fewer, larger folios,
			// so only the single-page rewrite is exact.
			if bufferedWrites, timed := coverage(t, p, img, "writeback", "threads", "write"); bufferedWrites && timed &&
				(c.CacheWriteBytes[0] < 4096 || c.CacheWriteBytes[1] < 4096 || c.CacheWriteBytes[0]+c.CacheWriteBytes[1] != 4<<20+8192) {
				t.Errorf("write bytes absorbed %d dirtied %d, want >= 4096 each summing to 4 MiB + 8 KiB",
					c.CacheWriteBytes[0], c.CacheWriteBytes[1])
			}
		}
	}
}

// flushCostFollowed: the disk's flushes on path are followed as calls, so
// the device writes they cause are charged to the disk.
func flushCostFollowed(p *Probes, fs, cache, aio string) bool {
	for _, g := range p.Unfollowed(fs, cache, aio) {
		if g.Op == "flush" && (g.Missing == MissingRequests || g.Missing == MissingFlushCost) {
			return false
		}
	}
	return true
}

// TestDeviceWriteZeroes: zeroing a range without a payload (what ext4's lazy
// inode table init and blkdev_issue_zeroout send) counts as written bytes of
// kind other, as the device's own statistics count it.
func TestDeviceWriteZeroes(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		loop := loopDevice(t, filepath.Join(t.TempDir(), "dev.img"), 64)
		name := filepath.Base(loop)
		zb, _ := os.ReadFile("/sys/block/" + name + "/queue/write_zeroes_max_bytes")
		t.Logf("%s: write_zeroes_max_bytes %s", name, strings.TrimSpace(string(zb)))
		p := load(t, m)
		if err := p.TrackDevice(kernelDev(t, loop), 0); err != nil {
			t.Fatal(err)
		}
		_, wr0 := sysBlockStat(t, name)
		zeroOut(t, loop, 0, 8<<20)
		_, wr1 := sysBlockStat(t, name)
		dc, err := p.DeviceCounters(0)
		if err != nil {
			t.Fatal(err)
		}
		if wr1-wr0 != 8<<20 {
			t.Fatalf("/sys/block says %d bytes written, want %d: the zeroing did not reach the device as asked", wr1-wr0, 8<<20)
		}
		if got := dc.Bytes[2][1]; got != wr1-wr0 {
			t.Errorf("other bytes written %d, want %d (/sys/block)", got, wr1-wr0)
		}
		if dc.Bytes[0][1] != 0 || dc.Bytes[1][1] != 0 {
			t.Errorf("zeroing counted as data %d or metadata %d", dc.Bytes[0][1], dc.Bytes[1][1])
		}
	})
}

// zeroOut asks the block layer to zero length bytes at off of the device
// (BLKZEROOUT: a write-zeroes request where the device takes one).
func zeroOut(t *testing.T, dev string, off, length uint64) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const blkZeroOut = 0x127f // _IO(0x12, 127), include/uapi/linux/fs.h
	r := [2]uint64{off, length}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), blkZeroOut, uintptr(unsafe.Pointer(&r))); errno != 0 {
		t.Fatalf("BLKZEROOUT %s: %v", dev, errno)
	}
}

// hugeGuestBuf is n bytes of anonymous memory inside a transparent huge
// page, starting one page in (so every page of it is a tail page), as a
// VMM's guest memory is where the host madvises huge pages. ok is false when
// the kernel did not back it with a huge page (THP off, or no huge page free).
func hugeGuestBuf(t *testing.T, n int) (buf []byte, ok bool) {
	t.Helper()
	const huge = 2 << 20
	mem, err := unix.Mmap(-1, 0, 2*huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	start := int((huge - uintptr(unsafe.Pointer(&mem[0]))%huge) % huge)
	region := mem[start : start+huge]
	if err := unix.Madvise(region, unix.MADV_HUGEPAGE); err != nil {
		return nil, false
	}
	for i := 0; i < len(region); i += 4096 {
		region[i] = 1
	}
	return region[4096 : 4096+n], anonHugeAt(t, uintptr(unsafe.Pointer(&region[0])))
}

// anonHugeAt says whether /proc/self/smaps shows the mapping holding addr
// backed by anonymous huge pages.
func anonHugeAt(t *testing.T, addr uintptr) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if lo, hi, ok := strings.Cut(strings.Fields(line + " x")[0], "-"); ok {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h
			continue
		}
		if f := strings.Fields(line); in && len(f) >= 2 && f[0] == "AnonHugePages:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb >= 2048
		}
	}
	return false
}

// TestIssueTimeLookup: while no followed device needs host_rq_issue (its
// queue keeps the issue time and the kernel has no plug-cached clock), the
// program stays unlinked and the completion does not look its map up
// (rq_issue_noted 0); a device that needs it links it and sets the flag.
// Either way every data request of the device is timed.
func TestIssueTimeLookup(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		loop, mnt := testFS(t, "ext4")
		dev := kernelDev(t, loop)
		if !queueKeepsIssueTime(dev) {
			t.Fatalf("%s keeps no issue time (no wbt_lat_usec): this test needs a queue that does", loop)
		}
		plugTime := blockCachesPlugTime
		blockCachesPlugTime = func() bool { return false }
		t.Cleanup(func() { blockCachesPlugTime = plugTime })

		p := load(t, m)
		if err := p.TrackDevice(dev, 0); err != nil {
			t.Fatal(err)
		}
		img := filepath.Join(mnt, "timed.dat")
		checkIssueLookup(t, p, img, false)
		directRequestsTimed(t, p, img)

		// A device whose queue keeps no issue time (no such device node:
		// queueKeepsIssueTime finds no attribute) needs host_rq_issue.
		if err := p.TrackDevice(4000<<20, 1); err != nil {
			t.Fatal(err)
		}
		checkIssueLookup(t, p, img, true)
		directRequestsTimed(t, p, img)
	})
}

// checkIssueLookup checks that host_rq_issue is linked and rq_issue_noted
// set, or neither.
func checkIssueLookup(t *testing.T, p *Probes, img string, want bool) {
	t.Helper()
	var noted uint32
	if err := p.hostVars.RqIssueNoted.Get(&noted); err != nil {
		t.Fatal(err)
	}
	if got := p.attached(bpf.HostProgHostRqIssue); got != want || (noted == 1) != want {
		t.Fatalf("host_rq_issue attached %v, rq_issue_noted %d; want both %v", got, noted, want)
	}
}

// directRequestsTimed writes and reads 1 MiB direct in 64 KiB requests and
// checks that the device's service histograms gained as many requests as
// its request counters.
func directRequestsTimed(t *testing.T, p *Probes, path string) {
	t.Helper()
	timed := func() (requests, histogram uint64) {
		dc, err := p.DeviceCounters(0)
		if err != nil {
			t.Fatal(err)
		}
		for dir := range 2 {
			for kind := range dc.Requests {
				requests += dc.Requests[kind][dir]
			}
			for _, n := range dc.Service[dir] {
				histogram += n
			}
		}
		return requests, histogram
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := alignedBuf(t, 64<<10)
	r0, h0 := timed()
	for i := range 16 {
		if _, err := unix.Pwrite(fd, buf, int64(i)<<16); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if _, err := unix.Pread(fd, buf, int64(i)<<16); err != nil {
			t.Fatal(err)
		}
	}
	r1, h1 := timed()
	if r1-r0 < 32 || h1-h0 != r1-r0 {
		t.Errorf("%d data requests counted (want at least 32), %d timed", r1-r0, h1-h0)
	}
}
