package probe

import (
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// Index of each operation in the counters, as enum op in bpf/call.h.
const (
	opRead = iota
	opWrite
	opFlush
	opDiscard
	opWriteZeroes
)

// enum cache_result in bpf/disk.bpf.c.
const cacheDirect = 2

// tracked loads the probes in mode m and tracks one fresh 64 MiB file (in
// TMPDIR: the kernel matrix points it at each file system) as slot 3,
// followed for this process only.
func tracked(t *testing.T, m Mode) (*Probes, *os.File) {
	t.Helper()
	p := load(t, m)
	f := trackFile(t, p, filepath.Join(t.TempDir(), "disk.img"), 3)
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	return p, f
}

func counters(t testing.TB, p *Probes) Counters {
	t.Helper()
	c, err := p.Counters(3)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sum(v []uint64) uint64 {
	var s uint64
	for _, x := range v {
		s += x
	}
	return s
}

// TestOperationsCounted: every operation QEMU issues from its threads,
// through the host page cache and with O_DIRECT, is counted with its bytes
// and timed where the mode follows its path, and where it does not the
// counters stay at 0 and Unfollowed says so; an untracked file never counts.
func TestOperationsCounted(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		for _, cache := range []string{"writeback", "none"} {
			t.Run(cache, func(t *testing.T) { operationsCounted(t, m, cache) })
		}
	})
}

func operationsCounted(t *testing.T, m Mode, cache string) {
	p, f := tracked(t, m)
	fd := openAs(t, f.Name(), cache)
	buf := alignedBuf(t, 8192)
	for i := 0; i < 10; i++ {
		if _, err := unix.Pwrite(fd, buf[:4096], int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		if _, err := unix.Pread(fd, buf, int64(i)*8192); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := unix.Pwritev(fd, [][]byte{buf[:512], buf[512:2048]}, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Preadv(fd, [][]byte{buf[:1024], buf[1024:2048], buf[2048:4096]}, 1<<20); err != nil {
		t.Fatal(err)
	}
	writes, writeBytes, dsync := uint64(12), uint64(10*4096+2048+4096), uint64(1)
	// An RWF_DSYNC write syncs itself through the file system's fsync,
	// which a mode that does not follow the write as a call (the tracepoint
	// mode for buffered writes, and for direct ones before Linux 6.3) cannot
	// tell from a flush; QEMU sends none (it opens the image O_DSYNC for
	// cache=writethrough, a mode the tracepoint mode reports as unfollowed
	// for flushes).
	if _, timed := coverage(t, p, f.Name(), cache, "threads", "write"); !timed {
		writes, writeBytes, dsync = 11, 10*4096+2048, 0
	} else if _, err := unix.Pwritev2(fd, [][]byte{buf[:4096]}, 2<<20, unix.RWF_DSYNC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(fd); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 8<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, 16<<20, 64<<10); err != nil {
		t.Fatal(err)
	}
	// An untracked file: nothing of it may be counted.
	other, err := os.CreateTemp(filepath.Dir(f.Name()), "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := unix.Pwrite(int(other.Fd()), buf, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(other.Fd())); err != nil {
		t.Fatal(err)
	}

	c := counters(t, p)
	want := map[int][2]uint64{ // op -> requests, bytes
		opRead:        {6, 5*8192 + 4096},
		opWrite:       {writes, writeBytes},
		opFlush:       {2, 0},
		opDiscard:     {1, 1 << 20},
		opWriteZeroes: {1, 64 << 10},
	}
	var requests uint64
	for op, w := range want {
		counted, timed := coverage(t, p, f.Name(), cache, "threads", opNames[op])
		t.Logf("%s: counted %v, timed %v", opNames[op], counted, timed)
		if !counted {
			w = [2]uint64{}
		}
		requests += w[0]
		if c.Requests[op] != w[0] || c.Bytes[op] != w[1] {
			t.Errorf("op %s: got %d requests, %d bytes; want %d, %d", opNames[op], c.Requests[op], c.Bytes[op], w[0], w[1])
		}
		lat := w[0]
		if !timed {
			lat = 0
		}
		if got := sum(c.Latency[op][:]); got != lat {
			t.Errorf("op %s: latency histogram holds %d requests, want %d", opNames[op], got, lat)
		}
	}
	if counted, _ := coverage(t, p, f.Name(), cache, "threads", "write"); counted && c.SyncWrites[0] != dsync {
		t.Errorf("dsync writes = %d, want %d (the RWF_DSYNC pwritev2)", c.SyncWrites[0], dsync)
	}
	if c.Submissions[0] != requests {
		t.Errorf("syscall submissions = %d, want %d", c.Submissions[0], requests)
	}
	if counted, _ := coverage(t, p, f.Name(), cache, "threads", "write"); counted {
		// Size histogram: le = 512*2^k bytes. 4 KiB writes land in k=3, 8 KiB reads in k=4.
		if c.Size[opWrite][3] != 10+dsync || c.Size[opRead][4] != 5 {
			t.Errorf("size histogram: writes 4KiB bucket %d (want %d), reads 8KiB bucket %d (want 5)",
				c.Size[opWrite][3], 10+dsync, c.Size[opRead][4])
		}
	}
	if sum(c.Outstanding[:]) != requests {
		t.Errorf("outstanding histogram holds %d, want %d", sum(c.Outstanding[:]), requests)
	}
}

// opNames are the op label values, as enum op in bpf/call.h.
var opNames = Ops

func TestSequentialAndRandom(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, f := tracked(t, m)
		fd := openAs(t, f.Name(), cacheFor(t, p, f.Name()))
		buf := alignedBuf(t, 4096)
		sequentialAndRandom(t, p, fd, buf)
	})
}

func sequentialAndRandom(t *testing.T, p *Probes, fd int, buf []byte) {
	// 200 strictly sequential reads.
	for i := 0; i < 200; i++ {
		if _, err := unix.Pread(fd, buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	c := counters(t, p)
	if c.Sequential[opRead] != 199 || c.Random[opRead] != 1 {
		t.Errorf("sequential reads: %d sequential, %d random; want 199, 1 (the first has no history)",
			c.Sequential[opRead], c.Random[opRead])
	}
	// Distance 0 from the previous end: all 199 in the le=0 bucket (slot 14).
	if c.SeekPrev[14] != 199 {
		t.Errorf("seek distance 0 bucket = %d, want 199", c.SeekPrev[14])
	}

	// Reordered pairs (N+1 before N), as concurrent workers issue them: still sequential.
	base := int64(32 << 20)
	if _, err := unix.Pwrite(fd, buf, base); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i < 100; i += 2 {
		for _, j := range []int64{i + 1, i} {
			if _, err := unix.Pwrite(fd, buf, base+j*4096); err != nil {
				t.Fatal(err)
			}
		}
	}
	c = counters(t, p)
	if c.Sequential[opWrite] != 100 || c.Random[opWrite] != 1 {
		t.Errorf("reordered writes: %d sequential, %d random; want 100, 1", c.Sequential[opWrite], c.Random[opWrite])
	}

	// Random 4 KiB reads over 64 MiB.
	before := counters(t, p)
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 500; i++ {
		if _, err := unix.Pread(fd, buf, rng.Int63n(16384)*4096); err != nil {
			t.Fatal(err)
		}
	}
	c = counters(t, p)
	seq, rnd := c.Sequential[opRead]-before.Sequential[opRead], c.Random[opRead]-before.Random[opRead]
	if seq+rnd != 500 || rnd < 475 {
		t.Errorf("random reads: %d sequential, %d random; want >= 95%% random of 500", seq, rnd)
	}
}

func TestFlushEpochs(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, f := tracked(t, m)
		flushEpochs(t, p, openAs(t, f.Name(), cacheFor(t, p, f.Name())))
	})
}

func flushEpochs(t *testing.T, p *Probes, fd int) {
	buf := alignedBuf(t, 4096)
	// Write + fdatasync, 20 times: each write is made durable by its own flush.
	for i := 0; i < 20; i++ {
		if _, err := unix.Pwrite(fd, buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			t.Fatal(err)
		}
	}
	// 100 streaming writes, then one flush: not synchronous.
	for i := 0; i < 100; i++ {
		if _, err := unix.Pwrite(fd, buf, int64(1000+i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		t.Fatal(err)
	}
	c := counters(t, p)
	if c.SyncWrites[1] != 20 || c.SyncWrites[0] != 0 {
		t.Errorf("sync writes: flush-bound %d, dsync %d; want 20, 0", c.SyncWrites[1], c.SyncWrites[0])
	}
	if c.Requests[opFlush] != 21 {
		t.Errorf("flushes = %d, want 21", c.Requests[opFlush])
	}
}

func TestUntrackStopsCounting(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, f := tracked(t, m)
		fd := openAs(t, f.Name(), cacheFor(t, p, f.Name()))
		ino, err := p.Inode(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Untrack(ino, 3); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Pwrite(fd, alignedBuf(t, 4096), 0); err != nil {
			t.Fatal(err)
		}
		if c := counters(t, p); c.Requests[opWrite] != 0 {
			t.Errorf("untracked image still counted: %d writes", c.Requests[opWrite])
		}
	})
}

// TestDeniedProgramDegrades: a program denied (standing in for a hook the
// kernel lacks) is reported, the others attach, and the disks whose paths
// needed it say they are not followed.
func TestDeniedProgramDegrades(t *testing.T) {
	deny := map[Mode]string{ModeFentry: bpf.DiskProgExt4WriteEnter, ModeTracepoint: bpf.DiskProgDioRwBegin, ModeSyscall: bpf.DiskProgPwrite64Enter}
	forModes(t, func(t *testing.T, m Mode) {
		full := load(t, m)
		p := load(t, m, deny[m])
		attached := 0
		for _, pr := range p.Programs() {
			if pr.Name == deny[m] {
				if pr.Attached || pr.Err != ErrDenied {
					t.Errorf("denied program: attached=%v err=%v", pr.Attached, pr.Err)
				}
				continue
			}
			if pr.Attached {
				attached++
			}
		}
		want := 0
		for _, pr := range full.Programs() {
			if pr.Attached && pr.Name != deny[m] {
				want++
			}
		}
		if attached != want {
			t.Errorf("%d other programs attached, want %d (as without the denial)", attached, want)
		}
		cache := map[Mode]string{ModeFentry: "writeback", ModeTracepoint: "none", ModeSyscall: "writeback"}[m]
		gap := Gap{Op: "write", Path: DiskPaths("write", cache, "threads")[0], Missing: MissingRequests}
		if !slices.Contains(p.Unfollowed("ext4", cache, "threads"), gap) {
			t.Errorf("with %s denied, an ext4 disk's gaps %v lack %v", deny[m], p.Unfollowed("ext4", cache, "threads"), gap)
		}
		if slices.Contains(full.Unfollowed("ext4", cache, "threads"), gap) {
			t.Skipf("this kernel lacks %s's hook: even with every program an ext4 disk's gaps %v hold %v, so denying it changes nothing to see",
				deny[m], full.Unfollowed("ext4", cache, "threads"), gap)
		}
	})
}

// iocb is the linux-aio UAPI struct iocb (include/uapi/linux/aio_abi.h).
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   int32
	opcode    uint16
	reqprio   int16
	fd        uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// aioRound submits n 4 KiB requests of opcode (0 read, 1 write) with
// io_submit and waits for them with io_getevents; it returns their results.
func aioRound(t *testing.T, fd int, opcode uint16, n int) []int64 {
	t.Helper()
	return aioRoundAt(t, fd, opcode, n, 4096, func(i int) int64 { return int64(i) * 4096 })
}

// aioRoundAt submits n linux-aio requests of size bytes at off(i) in one
// io_submit and reaps them all; it returns their results (bytes or -errno),
// in the order they completed.
func aioRoundAt(t *testing.T, fd int, opcode uint16, n, size int, off func(int) int64) []int64 {
	t.Helper()
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 64, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		t.Fatalf("io_setup: %v", e)
	}
	defer unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
	mem := alignedBuf(t, n*4096)
	cbs := make([]iocb, n)
	ptrs := make([]uintptr, n)
	for i := range cbs {
		cbs[i] = iocb{opcode: opcode, fd: uint32(fd), buf: uint64(uintptr(unsafe.Pointer(&mem[i*4096]))),
			nbytes: uint64(size), offset: off(i)}
		ptrs[i] = uintptr(unsafe.Pointer(&cbs[i]))
	}
	r, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, ctx, uintptr(n), uintptr(unsafe.Pointer(&ptrs[0])))
	if e != 0 || int(r) != n {
		t.Fatalf("io_submit: %d, %v", r, e)
	}
	events := make([][4]uint64, n)
	got := 0
	for got < n {
		r, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, ctx, 1, uintptr(n-got), uintptr(unsafe.Pointer(&events[got])), 0, 0)
		if e == unix.EINTR {
			// A signal (the Go runtime preempts its threads with
			// SIGURG) ended the wait early: wait again.
			continue
		}
		if e != 0 {
			t.Fatalf("io_getevents: %v", e)
		}
		got += int(r)
	}
	runtime.KeepAlive(cbs)
	res := make([]int64, n)
	for i, ev := range events {
		res[i] = int64(ev[2])
	}
	return res
}

// TestLinuxAIO covers both ways a linux-aio request ends: direct I/O seen
// by iomap, and a request done inside io_submit (a buffered file). QEMU's
// aio=native is direct only; the tracepoint mode, which sees linux-aio
// through iomap, does not see the buffered ones and is not asked to.
func TestLinuxAIO(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, f := tracked(t, m)
		n := 0
		if m != ModeTracepoint {
			buffered := int(f.Fd())
			aioRound(t, buffered, 1, 8)
			aioRound(t, buffered, 0, 8)
			n = 8
		}
		direct := openAs(t, f.Name(), "none")
		aioRound(t, direct, 1, 16)
		aioRound(t, direct, 0, 16)
		counted, timed := coverage(t, p, f.Name(), "none", "native", "read")
		if !counted {
			// Before v6.3 the tracepoint mode has no iomap tracepoints: said so, nothing counted.
			if c := counters(t, p); c.Requests[opRead] != 0 || c.Requests[opWrite] != 0 {
				t.Errorf("linux-aio not followed in mode %s, yet %d reads and %d writes counted", m, c.Requests[opRead], c.Requests[opWrite])
			}
			t.Logf("linux-aio direct I/O not followed in mode %s on this kernel (Unfollowed says so)", m)
			return
		}
		c := counters(t, p)
		if c.Requests[opWrite] != uint64(16+n) || c.Requests[opRead] != uint64(16+n) {
			t.Errorf("linux-aio: %d writes, %d reads; want %d, %d", c.Requests[opWrite], c.Requests[opRead], 16+n, 16+n)
		}
		if c.Bytes[opRead] != uint64(16+n)*4096 || c.Submissions[1] != uint64(32+2*n) {
			t.Errorf("linux-aio: %d read bytes (want %d), %d aio submissions (want %d)", c.Bytes[opRead], (16+n)*4096, c.Submissions[1], 32+2*n)
		}
		// Untimed (the syscall mode before v6.3 counts each request when
		// io_submit returns, and says so): no latency at all, not a wrong one.
		wantTimed := uint64(16 + n)
		if !timed {
			wantTimed = 0
		}
		if got := sum(c.Latency[opRead][:]); got != wantTimed {
			t.Errorf("read latency histogram holds %d, want %d (timed: %v)", got, wantTimed, timed)
		}
		// Only the direct ones are classified: direct I/O bypassed the host page cache.
		if c.CacheReads[cacheDirect] != 16 || c.CacheWriteBytes[cacheDirect] != 16*4096 {
			t.Errorf("linux-aio direct I/O: %d direct reads, %d direct write bytes; want 16, %d",
				c.CacheReads[cacheDirect], c.CacheWriteBytes[cacheDirect], 16*4096)
		}
		if n := inflight(t, p); n != 0 {
			t.Errorf("%d requests still counted in flight after all completed", n)
		}
	})
}

// inflight is the count of requests disk slot 3 has in flight.
func inflight(t *testing.T, p *Probes) int64 {
	t.Helper()
	var s bpf.DiskSeekState
	if err := p.objs.DiskSeek.Lookup(uint32(3), &s); err != nil {
		t.Fatal(err)
	}
	return s.Inflight
}

// TestSeekBuckets checks the signed seek distance buckets against chosen
// distances (le bounds -B12..-B0, -1, 0, B0..B12 with B_k = 4 KiB * 4^k).
func TestSeekBuckets(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, f := tracked(t, m)
		seekBuckets(t, p, openAs(t, f.Name(), cacheFor(t, p, f.Name())))
	})
}

func seekBuckets(t *testing.T, p *Probes, fd int) {
	buf := alignedBuf(t, 4096)
	at := func(off int64) {
		if _, err := unix.Pread(fd, buf, off); err != nil {
			t.Fatal(err)
		}
	}
	base := int64(32 << 20)
	at(base)                  // history starts; previous end = base+4K
	at(base + 4096 + 8192)    // +8 KiB: (4K, 16K] -> slot 16
	at(base + 4096 + 8192)    // -4 KiB from the end just before: [4K,16K) below 0 -> slot 12
	at(base + 4096*4 + 1<<20) // +1 MiB from the previous end (base+16K)
	c := counters(t, p)
	want := map[int]uint64{16: 1, 12: 1}
	for slot, n := range want {
		if c.SeekPrev[slot] != n {
			t.Errorf("seek_prev slot %d = %d, want %d (all: %v)", slot, c.SeekPrev[slot], n, c.SeekPrev)
		}
	}
	// The fourth read: exactly B4 = 1 MiB -> slot 15+4.
	if c.SeekPrev[19] != 1 {
		t.Errorf("seek_prev slot 19 (le=1MiB) = %d, want 1 (all: %v)", c.SeekPrev[19], c.SeekPrev)
	}
	if c.SeekPrevSum != 8192-4096+1<<20 {
		t.Errorf("seek_prev sum = %d, want %d", c.SeekPrevSum, 8192-4096+1<<20)
	}
}

// TestLinuxAIOXFSRetry: XFS does a sub-block direct write under its shared
// lock first and, when that cannot be done as an overwrite, completes the
// attempt with -EAGAIN and retries under the exclusive lock, all inside
// io_submit. The request counts once, as written, not as an error.
func TestLinuxAIOXFSRetry(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		_, mnt := testFS(t, fsXFS)
		p := load(t, m)
		img := filepath.Join(mnt, "disk.img")
		f := trackFile(t, p, img, 3)
		if err := f.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		d := openAs(t, img, "none")
		aioRoundAt(t, d, 1, 32, 512, func(i int) int64 { return int64(i)*8192 + 512 })
		want := uint64(32)
		if counted, _ := coverage(t, p, img, "none", "native", "write"); !counted {
			want = 0
		}
		c := counters(t, p)
		if c.Requests[opWrite] != want || c.Errors[opWrite] != 0 || c.Bytes[opWrite] != want*512 {
			t.Errorf("sub-block linux-aio writes on XFS: %d written (%d bytes), %d errors; want %d (%d bytes), 0",
				c.Requests[opWrite], c.Bytes[opWrite], c.Errors[opWrite], want, want*512)
		}
	})
}

// TestLinuxAIOUntimed: the syscall mode without its iomap programs (kernels
// before 6.3 lack their tracepoints; here one is denied) counts each
// linux-aio request when io_submit returns, classified as direct, untimed,
// and says so: latency missing, requests followed.
func TestLinuxAIOUntimed(t *testing.T) {
	if !slices.Contains(testModes(t), ModeSyscall) {
		t.Skip("the syscall mode does not run here")
	}
	p := load(t, ModeSyscall, bpf.DiskProgIomapDioDone)
	f := trackFile(t, p, filepath.Join(t.TempDir(), "disk.img"), 3)
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	counted, timed := coverage(t, p, f.Name(), "none", "native", "write")
	if !counted || timed {
		t.Errorf("without %s, linux-aio is counted %v and timed %v; want counted, untimed", bpf.DiskProgIomapDioDone, counted, timed)
	}
	direct := openAs(t, f.Name(), "none")
	aioRound(t, direct, 1, 16)
	aioRound(t, direct, 0, 16)
	c := counters(t, p)
	if c.Requests[opWrite] != 16 || c.Requests[opRead] != 16 || c.Bytes[opRead] != 16*4096 || c.Bytes[opWrite] != 16*4096 {
		t.Errorf("untimed linux-aio: %d writes, %d reads, %d/%d bytes; want 16, 16, %d each",
			c.Requests[opWrite], c.Requests[opRead], c.Bytes[opWrite], c.Bytes[opRead], 16*4096)
	}
	if got := sum(c.Latency[opRead][:]) + sum(c.Latency[opWrite][:]); got != 0 {
		t.Errorf("untimed linux-aio: latency histograms hold %d, want 0", got)
	}
	if c.CacheReads[cacheDirect] != 16 || c.CacheWriteBytes[cacheDirect] != 16*4096 {
		t.Errorf("untimed linux-aio: %d direct reads, %d direct write bytes; want 16, %d",
			c.CacheReads[cacheDirect], c.CacheWriteBytes[cacheDirect], 16*4096)
	}
	if n := inflight(t, p); n != 0 {
		t.Errorf("untimed linux-aio: %d requests left in flight, want 0", n)
	}
}

// TestLookupIntoChecksSize: the counter reads copy the kernel's value
// straight into Go memory, so a Go type of another size than the map's
// values must be refused before the kernel writes past it; the right one
// reads.
func TestLookupIntoChecksSize(t *testing.T) {
	p := load(t, testModes(t)[0])
	var short [8]byte
	if err := lookupInto(p.objs.DiskStats, 0, &short); err == nil {
		t.Error("an 8-byte destination for the disk counters was accepted")
	}
	var c bpf.DiskCounters
	if err := lookupInto(p.objs.DiskStats, 0, &c); err != nil {
		t.Errorf("disk counters: %v", err)
	}
	var h bpf.HostImageDeviceCounters
	if err := lookupInto(p.host.ImageDeviceStats, 0, &h); err != nil {
		t.Errorf("image device counters: %v", err)
	}
	var d bpf.HostDeviceCounters
	if err := lookupInto(p.host.DeviceStats, 0, &d); err != nil {
		t.Errorf("device counters: %v", err)
	}
}

// TestShapeSampled: loaded as the exporter loads them, the shape histograms
// (seek distances, outstanding, inter-arrival) count one request in
// SHAPE_SAMPLE (8) of a disk, in submission order, while requests, bytes
// and the sequential rule count every one.
func TestShapeSampled(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, err := Load(Options{Mode: m, followSelf: true})
		if err != nil {
			t.Fatalf("load probes in mode %s: %v", m, err)
		}
		t.Cleanup(func() { p.Close() })
		f := trackFile(t, p, filepath.Join(t.TempDir(), "disk.img"), 3)
		if err := f.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		fd := openAs(t, f.Name(), cacheFor(t, p, f.Name()))
		buf := alignedBuf(t, 4096)
		const n = 800
		for i := 0; i < n; i++ {
			if _, err := unix.Pread(fd, buf, int64(i)*4096); err != nil {
				t.Fatal(err)
			}
		}
		c := counters(t, p)
		if c.Requests[opRead] != n || c.Bytes[opRead] != n*4096 {
			t.Errorf("reads: %d requests, %d bytes; want %d, %d", c.Requests[opRead], c.Bytes[opRead], n, n*4096)
		}
		if c.Sequential[opRead] != n-1 || c.Random[opRead] != 1 {
			t.Errorf("sequential rule: %d sequential, %d random; want %d, 1", c.Sequential[opRead], c.Random[opRead], n-1)
		}
		// Requests 0, 8, ... 792 are the sample; the first has no previous request.
		if got := sum(c.Outstanding[:]); got != n/8 {
			t.Errorf("outstanding histogram counts %d requests, want %d (1 in 8)", got, n/8)
		}
		if got, want := sum(c.SeekPrev[:]), uint64(n/8-1); got != want || c.SeekPrev[14] != want || sum(c.SeekNear[:]) != want {
			t.Errorf("seek histograms count %d (le=0: %d) and %d requests, want %d", got, c.SeekPrev[14], sum(c.SeekNear[:]), want)
		}
		if got := sum(c.Interarrival[:]); got != n/8-1 {
			t.Errorf("inter-arrival histogram counts %d requests, want %d", got, n/8-1)
		}
	})
}
