package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dropCompletionUnseen indexes Dropped (enum drop_reason in bpf/call.h).
const dropCompletionUnseen = 5

// TestLinuxAIODoneInCall: a linux-aio direct request can leave iomap
// neither queued nor completed and be done inside io_submit: a read at or
// past the end of the file, a write whose range another user of the file
// keeps in the host page cache (iomap cannot drop it and the file system
// falls back to buffered I/O). Each counts once, none is reported as a
// missed completion (completion_unseen), none stays in flight; the
// requests that did go through iomap stay timed.
func TestLinuxAIODoneInCall(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		for _, fs := range []string{fsExt4, fsXFS, fsBtrfs} {
			t.Run(fs, func(t *testing.T) { doneInCall(t, m, fs) })
		}
	})
}

func doneInCall(t *testing.T, m Mode, fs string) {
	_, mnt := testFS(t, fs)
	p := load(t, m)
	f := trackFile(t, p, filepath.Join(mnt, "disk.img"), 3)
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if counted, _ := coverage(t, p, f.Name(), "none", "native", "write"); !counted {
		t.Skipf("linux-aio direct writes on %s are not followed in mode %s on this kernel (Unfollowed says so)", fs, m)
	}
	_, timed := coverage(t, p, f.Name(), "none", "native", "read")
	// QEMU submits from one thread; so does this test, so that the
	// thread's next request finds the one left inside its call.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	direct := openAs(t, f.Name(), "none")

	// Reads past the end (the file is 64 MiB): iomap returns at once.
	aioRoundAt(t, direct, 0, 8, 4096, func(i int) int64 { return 64<<20 + int64(i)*4096 })
	aioRound(t, direct, 0, 8)
	c := counters(t, p)
	if c.Requests[opRead] != 16 {
		t.Errorf("8 reads past the end and 8 within: %d reads counted, want 16", c.Requests[opRead])
	}
	if timed {
		// The 8 within are timed; those past the end only where the
		// mode sees the call return (fentry), and none twice.
		want := uint64(8)
		if m == ModeFentry {
			want = 16
		}
		if got := sum(c.Latency[opRead][:]); got != want {
			t.Errorf("read latency histogram holds %d, want %d", got, want)
		}
	}

	// Writes into a range another process keeps dirtying through a
	// shared mapping: some fall back to buffered I/O.
	fallbacks := invalidateFailures(t)
	const rounds, n = 40, 16
	var written, failed int64
	dirtyWhile(t, f, n*4096, func() {
		for r := 0; r < rounds; r++ {
			for _, res := range aioRound(t, direct, 1, n) {
				if res < 0 {
					failed++
				} else {
					written += res
				}
			}
		}
	})
	// A last request, so that the thread's last write (the tracepoint
	// mode has no end of call to see) is settled.
	aioRoundAt(t, direct, 0, 1, 4096, func(int) int64 { return 32 << 20 })
	seen := fallbacks()
	c = counters(t, p)
	// Bytes as the kernel reported them done.
	if failed != 0 || written != rounds*n*4096 {
		t.Logf("the kernel wrote %d bytes, %d writes failed", written, failed)
	}
	if c.Requests[opWrite] != rounds*n || c.Bytes[opWrite] != uint64(written) || c.Errors[opWrite] != uint64(failed) {
		t.Errorf("%d direct writes (%d fell back to buffered I/O, %d bytes written, %d failed): %d counted (%d bytes, %d errors)",
			rounds*n, seen, written, failed, c.Requests[opWrite], c.Bytes[opWrite], c.Errors[opWrite])
	}
	if c.Requests[opRead] != 17 {
		t.Errorf("%d reads counted, want 17", c.Requests[opRead])
	}
	if seen >= 0 {
		t.Logf("%d of %d direct writes fell back to buffered I/O (iomap_dio_invalidate_fail)", seen, rounds*n)
	}
	d, err := p.Dropped()
	if err != nil {
		t.Fatal(err)
	}
	if d[dropCompletionUnseen] != 0 {
		t.Errorf("%d requests reported as completions unseen; want 0 (done inside io_submit is not a loss)", d[dropCompletionUnseen])
	}
	if n := inflight(t, p); n != 0 {
		t.Errorf("%d requests still counted in flight after all were done", n)
	}
}

// dirtyWhile writes, from another thread, through a shared mapping of the
// first size bytes of f while fn runs. A write the kernel refuses (SIGBUS:
// the file system could not make the page writable) is counted and logged,
// not fatal: the test checks what fspair counts, whatever the fallbacks.
func dirtyWhile(t *testing.T, f *os.File, size int, fn func()) {
	t.Helper()
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	var stop atomic.Bool
	var faults int
	var first error
	done := make(chan struct{})
	// The writer stops before the mapping goes, also when fn ends the
	// test (t.Fatal): writing on into unmapped memory killed a CI run.
	defer func() {
		stop.Store(true)
		<-done
	}()
	go func() {
		runtime.LockOSThread()
		defer close(done)
		debug.SetPanicOnFault(true)
		for i := 0; !stop.Load() && faults < 1000; i++ {
			if err := dirtyPass(mem, byte(i), i%4096); err != nil {
				if faults++; first == nil {
					first = err
				}
			}
		}
	}()
	fn()
	stop.Store(true)
	<-done
	if faults > 0 {
		t.Logf("the shared mapping faulted %d times; first: %v", faults, first)
	}
}

// dirtyPass writes v at offset at of every page of mem; a memory fault
// (with debug.SetPanicOnFault set by the caller) comes back as an error.
func dirtyPass(mem []byte, v byte, at int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	for off := 0; off < len(mem); off += 4096 {
		mem[off+at] = v
	}
	return nil
}

// invalidateFailures counts iomap_dio_invalidate_fail events (a direct
// write falling back to buffered I/O) from now on, in a trace instance of
// its own; the function it returns gives the count so far, -1 when tracefs
// is not there.
func invalidateFailures(t *testing.T) func() int {
	t.Helper()
	dir := filepath.Join("/sys/kernel/tracing/instances", "fspair-probe-test-"+time.Now().Format("150405.000000000"))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Logf("no trace instance (%v): fallbacks not counted", err)
		return func() int { return -1 }
	}
	t.Cleanup(func() { os.Remove(dir) })
	enable := filepath.Join(dir, "events/iomap/iomap_dio_invalidate_fail/enable")
	if err := os.WriteFile(enable, []byte("1"), 0); err != nil {
		t.Logf("iomap_dio_invalidate_fail not enabled (%v): fallbacks not counted", err)
		return func() int { return -1 }
	}
	t.Cleanup(func() { os.WriteFile(enable, []byte("0"), 0) })
	return func() int {
		b, err := os.ReadFile(filepath.Join(dir, "trace"))
		if err != nil {
			t.Logf("read trace: %v", err)
			return -1
		}
		return strings.Count(string(b), "iomap_dio_invalidate_fail:")
	}
}
