package probe

import (
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// Index of each operation in the counters, as enum op in disk.bpf.c.
const (
	opRead = iota
	opWrite
	opFlush
	opDiscard
	opWriteZeroes
)

// enum cache_result in bpf/disk.bpf.c.
const cacheDirect = 2

// tracked loads the probes and tracks one fresh file as slot 3, followed
// for this process only.
func tracked(t *testing.T) (*Probes, *os.File) {
	t.Helper()
	p, err := Load(Options{})
	if err != nil {
		t.Fatalf("load probes (this test needs root and BPF): %v", err)
	}
	t.Cleanup(func() { p.Close() })
	for _, pr := range p.Programs() {
		if !pr.Attached {
			t.Errorf("program %s not attached: %v", pr.Name, pr.Err)
		}
	}
	f := trackFile(t, p, filepath.Join(t.TempDir(), "disk.img"), 3)
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	return p, f
}

func counters(t *testing.T, p *Probes) bpf.DiskCounters {
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

func TestOperationsCounted(t *testing.T) {
	p, f := tracked(t)
	fd := int(f.Fd())
	buf := make([]byte, 8192)
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
	if _, err := unix.Pwritev(fd, [][]byte{buf[:512], buf[:1536]}, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Preadv(fd, [][]byte{buf[:1024], buf[:1024], buf[:2048]}, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwritev2(fd, [][]byte{buf[:4096]}, 2<<20, unix.RWF_DSYNC); err != nil {
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
	other, err := os.CreateTemp(t.TempDir(), "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := unix.Pwrite(int(other.Fd()), buf, 0); err != nil {
		t.Fatal(err)
	}

	c := counters(t, p)
	want := map[int][2]uint64{ // op -> requests, bytes
		opRead:        {6, 5*8192 + 4096},
		opWrite:       {12, 10*4096 + 2048 + 4096},
		opFlush:       {2, 0},
		opDiscard:     {1, 1 << 20},
		opWriteZeroes: {1, 64 << 10},
	}
	for op, w := range want {
		if c.Requests[op] != w[0] || c.Bytes[op] != w[1] {
			t.Errorf("op %d: got %d requests, %d bytes; want %d, %d", op, c.Requests[op], c.Bytes[op], w[0], w[1])
		}
		if got := sum(c.Latency[op][:]); got != w[0] {
			t.Errorf("op %d: latency histogram holds %d requests, want %d", op, got, w[0])
		}
	}
	if c.SyncWrites[0] != 1 {
		t.Errorf("dsync writes = %d, want 1 (the RWF_DSYNC pwritev2)", c.SyncWrites[0])
	}
	if c.Submissions[0] != 22 {
		t.Errorf("syscall submissions = %d, want 22", c.Submissions[0])
	}
	// Size histogram: le = 512*2^k bytes. 4 KiB writes land in k=3, 8 KiB reads in k=4.
	if c.Size[opWrite][3] != 11 || c.Size[opRead][4] != 5 {
		t.Errorf("size histogram: writes 4KiB bucket %d (want 11), reads 8KiB bucket %d (want 5)",
			c.Size[opWrite][3], c.Size[opRead][4])
	}
	if sum(c.Outstanding[:]) != 22 {
		t.Errorf("outstanding histogram holds %d, want 22", sum(c.Outstanding[:]))
	}
}

func TestSequentialAndRandom(t *testing.T) {
	p, f := tracked(t)
	fd := int(f.Fd())
	buf := make([]byte, 4096)
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
	p, f := tracked(t)
	fd := int(f.Fd())
	buf := make([]byte, 4096)
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
	p, f := tracked(t)
	ino, err := p.Inode(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Untrack(ino, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(int(f.Fd()), make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	if c := counters(t, p); c.Requests[opWrite] != 0 {
		t.Errorf("untracked image still counted: %d writes", c.Requests[opWrite])
	}
}

func TestDeniedProgramDegrades(t *testing.T) {
	p, err := Load(Options{Deny: []string{bpf.DiskProgPwrite64Enter}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	attached := 0
	for _, pr := range p.Programs() {
		if pr.Name == bpf.DiskProgPwrite64Enter {
			if pr.Attached || pr.Err != ErrDenied {
				t.Errorf("denied program: attached=%v err=%v", pr.Attached, pr.Err)
			}
			continue
		}
		if pr.Attached {
			attached++
		}
	}
	if attached != len(p.Programs())-1 {
		t.Errorf("%d of %d other programs attached", attached, len(p.Programs())-1)
	}
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
// io_submit and waits for them with io_getevents.
func aioRound(t *testing.T, fd int, opcode uint16, n int) {
	t.Helper()
	aioRoundAt(t, fd, opcode, n, 4096, func(i int) int64 { return int64(i) * 4096 })
}

// aioRoundAt submits n linux-aio requests of size bytes at off(i) in one
// io_submit and reaps them all.
func aioRoundAt(t *testing.T, fd int, opcode uint16, n, size int, off func(int) int64) {
	t.Helper()
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 64, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		t.Fatalf("io_setup: %v", e)
	}
	defer unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
	mem, err := unix.Mmap(-1, 0, n*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
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
		r, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, ctx, 1, uintptr(n-got), uintptr(unsafe.Pointer(&events[0])), 0, 0)
		if e != 0 {
			t.Fatalf("io_getevents: %v", e)
		}
		got += int(r)
	}
	runtime.KeepAlive(cbs)
}

// TestLinuxAIO covers both ways a linux-aio request ends: direct I/O seen
// by iomap, and a request done inside io_submit (a buffered file).
func TestLinuxAIO(t *testing.T) {
	p, f := tracked(t)
	buffered := int(f.Fd())
	aioRound(t, buffered, 1, 8)
	aioRound(t, buffered, 0, 8)
	direct, err := unix.Open(f.Name(), unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(direct)
	aioRound(t, direct, 1, 16)
	aioRound(t, direct, 0, 16)
	c := counters(t, p)
	if c.Requests[opWrite] != 24 || c.Requests[opRead] != 24 {
		t.Errorf("linux-aio: %d writes, %d reads; want 24, 24", c.Requests[opWrite], c.Requests[opRead])
	}
	if c.Bytes[opRead] != 24*4096 || c.Submissions[1] != 48 {
		t.Errorf("linux-aio: %d read bytes (want %d), %d aio submissions (want 48)", c.Bytes[opRead], 24*4096, c.Submissions[1])
	}
	if got := sum(c.Latency[opRead][:]); got != 24 {
		t.Errorf("read latency histogram holds %d, want 24", got)
	}
	// Only the direct ones are classified: direct I/O bypassed the host page cache.
	if c.CacheReads[cacheDirect] != 16 || c.CacheWriteBytes[cacheDirect] != 16*4096 {
		t.Errorf("linux-aio direct I/O: %d direct reads, %d direct write bytes; want 16, %d",
			c.CacheReads[cacheDirect], c.CacheWriteBytes[cacheDirect], 16*4096)
	}
	var s bpf.DiskSeekState
	if err := p.objs.DiskSeek.Lookup(uint32(3), &s); err != nil {
		t.Fatal(err)
	}
	if s.Inflight != 0 {
		t.Errorf("%d requests still counted in flight after all completed", s.Inflight)
	}
}

// TestSeekBuckets checks the signed seek distance buckets against chosen
// distances (le bounds -B12..-B0, -1, 0, B0..B12 with B_k = 4 KiB * 4^k).
func TestSeekBuckets(t *testing.T) {
	p, f := tracked(t)
	fd := int(f.Fd())
	buf := make([]byte, 4096)
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
	_, mnt := loopFS(t, "mkfs.xfs", 512)
	p, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	img := filepath.Join(mnt, "disk.img")
	f := trackFile(t, p, img, 3)
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	d, err := unix.Open(img, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	aioRoundAt(t, d, 1, 32, 512, func(i int) int64 { return int64(i)*8192 + 512 })
	c := counters(t, p)
	if c.Requests[opWrite] != 32 || c.Errors[opWrite] != 0 || c.Bytes[opWrite] != 32*512 {
		t.Errorf("sub-block linux-aio writes on XFS: %d written (%d bytes), %d errors; want 32 (%d bytes), 0",
			c.Requests[opWrite], c.Bytes[opWrite], c.Errors[opWrite], 32*512)
	}
}
