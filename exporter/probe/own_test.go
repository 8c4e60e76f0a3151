package probe

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// ownIOEnv makes the test binary, run again as a child, play another process:
// it does ownIOCount reads and writes of 4 KiB on the file it names, opened
// with the cache mode ownIOCacheEnv names, and exits.
const (
	ownIOEnv      = "FSPAIR_PROBE_OWN_IO_FILE"
	ownIOCacheEnv = "FSPAIR_PROBE_OWN_IO_CACHE"
	ownIOCount    = 6
)

// ownIO writes then reads n blocks of 4 KiB at offsets from base on fd.
func ownIO(fd int, buf []byte, base int64, n int) error {
	for i := 0; i < n; i++ {
		if _, err := unix.Pwrite(fd, buf[:4096], base+int64(i)*4096); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		if _, err := unix.Pread(fd, buf[:4096], base+int64(i)*4096); err != nil {
			return err
		}
	}
	return nil
}

// TestOwnIOChild is the child side of TestOwnRequestsNotCounted, skipped
// unless run by it.
func TestOwnIOChild(t *testing.T) {
	path := os.Getenv(ownIOEnv)
	if path == "" {
		t.Skip("the other process of TestOwnRequestsNotCounted; runs only as its child")
	}
	fd := openAs(t, path, os.Getenv(ownIOCacheEnv))
	if err := ownIO(fd, alignedBuf(t, 4096), 1<<20, ownIOCount); err != nil {
		t.Fatal(err)
	}
}

// TestOwnRequestsNotCounted: loaded as the exporter loads them, the probes
// never count the loading process's own requests (the exporter's image
// checks), even when every process is followed (a disk tracked without a
// VMM pid); another process's requests on the same file are counted.
func TestOwnRequestsNotCounted(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, err := Load(Options{Mode: m})
		if err != nil {
			t.Fatalf("load probes in mode %s: %v", m, err)
		}
		t.Cleanup(func() { p.Close() })
		f := trackForAll(t, p, filepath.Join(t.TempDir(), "disk.img"))
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		followed := 0
		for _, cache := range []string{"writeback", "none"} {
			rd, _ := coverage(t, p, f.Name(), cache, "threads", "read")
			wr, _ := coverage(t, p, f.Name(), cache, "threads", "write")
			if !rd || !wr {
				t.Logf("mode %s does not follow cache=%s reads and writes here: not checked with it", m, cache)
				continue
			}
			followed++
			before := counters(t, p)
			fd := openAs(t, f.Name(), cache)
			if err := ownIO(fd, alignedBuf(t, 4096), 0, 2*ownIOCount); err != nil {
				t.Fatal(err)
			}
			if err := unix.Fdatasync(fd); err != nil {
				t.Fatal(err)
			}
			own := counters(t, p)
			for op := range own.Requests {
				if own.Requests[op] != before.Requests[op] || own.Bytes[op] != before.Bytes[op] {
					t.Errorf("cache=%s: the loading process's own requests counted: op %d requests %d -> %d, bytes %d -> %d",
						cache, op, before.Requests[op], own.Requests[op], before.Bytes[op], own.Bytes[op])
				}
			}
			cmd := exec.Command(self, "-test.run=^TestOwnIOChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), ownIOEnv+"="+f.Name(), ownIOCacheEnv+"="+cache)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child: %v: %s", err, out)
			}
			other := counters(t, p)
			for op := range 2 { // read, write
				got := other.Requests[op] - own.Requests[op]
				bytes := other.Bytes[op] - own.Bytes[op]
				if got != ownIOCount || bytes != ownIOCount*4096 {
					t.Errorf("cache=%s: another process's %s: %d requests, %d bytes counted, want %d, %d",
						cache, Ops[op], got, bytes, ownIOCount, ownIOCount*4096)
				}
			}
			t.Logf("cache=%s: own requests counted 0; another process's %d reads and %d writes counted",
				cache, other.Requests[0]-own.Requests[0], other.Requests[1]-own.Requests[1])
		}
		if followed == 0 {
			t.Skipf("mode %s follows neither cache=writeback nor cache=none reads and writes on %s here (Unfollowed says so)", m, fsOf(t, f.Name()))
		}
	})
}

// TestOtherProcessNotFollowed: an image whose VMM is known is followed for
// that process only: another process's requests on the same file are not
// counted, even while every process runs some disk (the first filter of the
// syscall mode lets them all through; the file-system hooks find the VMM
// with the disk, in one lookup).
func TestOtherProcessNotFollowed(t *testing.T) {
	forModes(t, func(t *testing.T, m Mode) {
		p, f := tracked(t, m) // the image's VMM: this process
		if err := p.SetProcesses(nil, true); err != nil {
			t.Fatal(err)
		}
		cache := cacheFor(t, p, f.Name())
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		before := counters(t, p)
		cmd := exec.Command(self, "-test.run=^TestOwnIOChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), ownIOEnv+"="+f.Name(), ownIOCacheEnv+"="+cache)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v: %s", err, out)
		}
		after := counters(t, p)
		for op := range after.Requests {
			if after.Requests[op] != before.Requests[op] || after.Bytes[op] != before.Bytes[op] {
				t.Errorf("cache=%s: another process's requests counted: op %d requests %d -> %d", cache, op,
					before.Requests[op], after.Requests[op])
			}
		}
		// This process's own requests on it still count.
		fd := openAs(t, f.Name(), cache)
		if err := ownIO(fd, alignedBuf(t, 4096), 0, ownIOCount); err != nil {
			t.Fatal(err)
		}
		own := counters(t, p)
		if got := own.Requests[opRead] - after.Requests[opRead]; got != ownIOCount {
			t.Errorf("cache=%s: the VMM's own %d reads counted %d times", cache, ownIOCount, got)
		}
	})
}

// TestIOURingCounted: io_uring reads and writes (fio's io_uring engine, as
// QEMU's aio=io_uring submits them with plain fds) are counted exactly with
// their bytes and as io_uring submissions: at the kiocb where the file
// system sees them in the fentry and tracepoint modes (once, though a
// no-wait attempt and io-wq's retry both reach it), at submission in the
// syscall mode, and done at io_uring's completion in every mode.
func TestIOURingCounted(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Fatal("fio is needed (make test-deps installs it)")
	}
	forModes(t, func(t *testing.T, m Mode) {
		p, f := tracked(t, m)
		// fio is another process: a disk without a known VMM follows it.
		if err := p.SetVMM(3, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.SetProcesses(nil, true); err != nil {
			t.Fatal(err)
		}
		before := counters(t, p)
		const n = 64
		for _, rw := range []string{"randwrite", "randread"} {
			cmd := exec.Command("fio", "--name=uring", "--filename="+f.Name(), "--ioengine=io_uring", "--direct=1",
				"--rw="+rw, "--bs=4k", "--size=16m", "--io_size="+strconv.Itoa(n*4096), "--iodepth=4", "--randrepeat=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("fio %s: %v: %s", rw, err, out)
			}
		}
		c := counters(t, p)
		for op := range 2 {
			if got, bytes := c.Requests[op]-before.Requests[op], c.Bytes[op]-before.Bytes[op]; got != n || bytes != n*4096 {
				t.Errorf("io_uring %s: %d requests, %d bytes counted, want %d, %d", Ops[op], got, bytes, n, n*4096)
			}
		}
		if got := c.Submissions[2] - before.Submissions[2]; got != 2*n {
			t.Errorf("io_uring submissions: %d, want %d", got, 2*n)
		}
	})
}

// trackForAll tracks a 16 MiB file at path as slot 3, a disk without a
// known VMM: every process's requests on it are followed but the loading
// one's.
func trackForAll(t *testing.T, p *Probes, path string) *os.File {
	t.Helper()
	f := trackFile(t, p, path, 3)
	followForAll(t, p, f, 16<<20)
	return f
}

// followForAll sizes f, a file tracked as slot 3, and makes its disk one
// without a known VMM, whose requests are followed from every process but
// the loading one.
func followForAll(t testing.TB, p *Probes, f *os.File, size int64) {
	t.Helper()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := p.SetVMM(3, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.SetProcesses(nil, true); err != nil {
		t.Fatal(err)
	}
}

// TestOwnDeviceReadsNotCounted: the loading process's own reads of an
// image (the exporter's identification and qcow2 tables), direct or through
// the page cache, reach the device as its other reads, never the image's
// (bpf/host.bpf.c self_bios); another process's direct reads of the same
// image are the image's, each request and byte.
func TestOwnDeviceReadsNotCounted(t *testing.T) {
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			loop, mnt := testFS(t, fs)
			m := testModes(t)[0]
			p, err := Load(Options{Mode: m})
			if err != nil {
				t.Fatalf("load probes in mode %s: %v", m, err)
			}
			t.Cleanup(func() { p.Close() })
			img := filepath.Join(mnt, "disk.img")
			f := trackFile(t, p, img, 3)
			followForAll(t, p, f, 16<<20)
			if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			// Out of the page cache: the buffered read below goes to the device.
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
			if err := p.TrackDevice(kernelDev(t, loop), 0); err != nil {
				t.Fatal(err)
			}
			read := func() (image, imageBytes, other uint64) {
				t.Helper()
				ic, err := p.ImageDeviceCounters(3)
				if err != nil {
					t.Fatal(err)
				}
				dc, err := p.DeviceCounters(0)
				if err != nil {
					t.Fatal(err)
				}
				return ic.Requests[0], ic.Bytes[0], dc.Bytes[2][0]
			}
			sys0, _ := sysBlockStat(t, filepath.Base(loop))
			req0, bytes0, other0 := read()

			const chunk = 64 << 10
			fd := openAs(t, img, "none")
			buf := alignedBuf(t, chunk)
			for i := range 4 {
				if _, err := unix.Pread(fd, buf, int64(i)*chunk); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.ReadAt(buf, 8*chunk); err != nil {
				t.Fatal(err)
			}
			sys1, _ := sysBlockStat(t, filepath.Base(loop))
			req1, bytes1, other1 := read()
			t.Logf("own reads: device %d bytes read (/sys/block), the device's other reads +%d bytes, the image's +%d requests, +%d bytes",
				sys1-sys0, other1-other0, req1-req0, bytes1-bytes0)
			if sys1-sys0 < 5*chunk {
				t.Fatalf("the device read %d bytes: the own reads (%d bytes) did not reach it", sys1-sys0, 5*chunk)
			}
			if req1 != req0 || bytes1 != bytes0 {
				t.Errorf("the loading process's own reads counted as the image's: %d requests, %d bytes", req1-req0, bytes1-bytes0)
			}
			if other1-other0 < 5*chunk {
				t.Errorf("the device's other reads grew by %d bytes, want at least the own reads' %d", other1-other0, 5*chunk)
			}

			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "-test.run=^TestOwnIOChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), ownIOEnv+"="+img, ownIOCacheEnv+"=none")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child: %v: %s", err, out)
			}
			req2, bytes2, _ := read()
			if req2-req1 != ownIOCount || bytes2-bytes1 != ownIOCount*4096 {
				t.Errorf("another process's %d direct reads of 4 KiB: the image's device reads +%d requests, +%d bytes", ownIOCount, req2-req1, bytes2-bytes1)
			}
		})
	}
}
