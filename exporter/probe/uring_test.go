package probe

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// uringFile is a file of TestIOURingOnce: the host file system, opened
// O_DIRECT (QEMU's cache=none) or through the page cache (cache=writeback),
// and for Btrfs without data checksums (chattr +C, as images are often
// kept), whose direct writes reach iomap where a checksummed file's do not.
type uringFile struct {
	name   string
	fs     string
	direct bool
	nocow  bool
}

var uringFiles = []uringFile{
	{"ext4-buffered", fsExt4, false, false},
	{"ext4-direct", fsExt4, true, false},
	{"btrfs-buffered", fsBtrfs, false, false},
	{"btrfs-direct", fsBtrfs, true, false},
	{"btrfs-nocow-direct", fsBtrfs, true, true},
	{"xfs-buffered", fsXFS, false, false},
	{"xfs-direct", fsXFS, true, false},
}

// fioRun is what one fio job says it did.
type fioRun struct {
	Read, Write struct {
		TotalIOs uint64 `json:"total_ios"`
		IOBytes  uint64 `json:"io_bytes"`
	}
}

// fioURing runs fio's io_uring engine (plain fds, as QEMU's aio=io_uring)
// on path: n random 4 KiB requests of rw at depth 4, and returns fio's
// own account of them.
func fioURing(t *testing.T, path, rw string, direct bool, n int) fioRun {
	t.Helper()
	d := "0"
	if direct {
		d = "1"
	}
	out, err := exec.Command("fio", "--name=uring", "--filename="+path, "--ioengine=io_uring", "--direct="+d,
		"--rw="+rw, "--bs=4k", "--size=16m", "--io_size="+strconv.Itoa(n*4096), "--iodepth=4",
		"--randrepeat=0", "--output-format=json").Output()
	if err != nil {
		t.Fatalf("fio %s: %v: %s", rw, err, out)
	}
	var res struct{ Jobs []fioRun }
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) != 1 {
		t.Fatalf("fio %s: output (%v): %s", rw, err, out)
	}
	return res.Jobs[0]
}

// TestIOURingOnce: io_uring's reads and writes are counted once each, with
// fio's own counts and bytes, and timed, on every host file system and
// cache mode QEMU uses, in every mode. In the tracepoint mode this takes
// two hooks: the file systems' tracepoints see direct I/O and XFS's
// buffered I/O at the kiocb, and io_uring's submission hook takes the rest
// (buffered I/O on ext4 and Btrfs, Btrfs's direct writes to a checksummed
// file from 6.12 on); a request both see (a Btrfs file without checksums)
// must count once. Buffered reads start with the file's pages dropped
// (fio's invalidate), so io_uring's no-wait attempts fail and are retried:
// the file system sees such a request twice.
func TestIOURingOnce(t *testing.T) {
	dirs := uringDirs(t)
	forModes(t, func(t *testing.T, m Mode) {
		for _, c := range uringFiles {
			t.Run(c.name, func(t *testing.T) { uringOnce(t, load(t, m), dirs[c.fs], c) })
		}
	})
}

// TestIOURingFallback: in the tracepoint mode, io_uring's direct I/O whose
// file-system tracepoint is not attached (here denied; a kernel before 6.3
// has none) is taken at its submission instead, and Unfollowed says it is
// followed.
func TestIOURingFallback(t *testing.T) {
	if !slices.Contains(testModes(t), ModeTracepoint) {
		t.Skip("FSPAIR_PROBE_MODE leaves out the tracepoint mode, whose fallback this is")
	}
	dirs := uringDirs(t)
	for _, c := range uringFiles {
		if !c.direct || c.nocow {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			uringOnce(t, load(t, ModeTracepoint, bpf.DiskProgDioRwBegin), dirs[c.fs], c)
		})
	}
}

// uringDirs gives a directory on a file system of each type of hookFS.
func uringDirs(t *testing.T) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("fio"); err != nil {
		t.Fatal("fio is needed (make test-deps installs it)")
	}
	dirs := map[string]string{}
	for _, fs := range hookFS {
		_, dirs[fs] = testFS(t, fs)
	}
	return dirs
}

// uringOnce checks fio's io_uring writes, then reads, on a file c in dir,
// as another process (a disk without a known VMM follows it), against
// what p counted.
func uringOnce(t *testing.T, p *Probes, dir string, c uringFile) {
	const n = 128
	m, _ := p.Mode()
	path := filepath.Join(dir, string(m)+"-"+c.name+".img")
	if c.nocow {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		noCOW(t, path) // only on an empty file
	}
	trackForAll(t, p, path)
	cache := "writeback"
	if c.direct {
		cache = "none"
	}
	for _, op := range []string{"write", "read"} {
		if counted, timed := coverage(t, p, path, cache, "io_uring", op); !counted || !timed {
			t.Errorf("Unfollowed says io_uring %ss with cache=%s are counted %v, timed %v; want both", op, cache, counted, timed)
		}
	}
	before := counters(t, p)
	w := fioURing(t, path, "randwrite", c.direct, n)
	r := fioURing(t, path, "randread", c.direct, n)
	after := counters(t, p)
	for _, x := range []struct {
		op          int
		ios, nbytes uint64
	}{{opWrite, w.Write.TotalIOs, w.Write.IOBytes}, {opRead, r.Read.TotalIOs, r.Read.IOBytes}} {
		got, bytes := after.Requests[x.op]-before.Requests[x.op], after.Bytes[x.op]-before.Bytes[x.op]
		if x.ios != n || got != x.ios || bytes != x.nbytes {
			t.Errorf("%s: %d requests, %d bytes counted; fio did %d, %d bytes (asked for %d)", Ops[x.op], got, bytes, x.ios, x.nbytes, n)
		}
		if timed := sum(after.Latency[x.op][:]) - sum(before.Latency[x.op][:]); timed != got {
			t.Errorf("%s: %d of %d requests timed", Ops[x.op], timed, got)
		}
	}
	if got, want := after.Submissions[2]-before.Submissions[2], w.Write.TotalIOs+r.Read.TotalIOs; got != want {
		t.Errorf("io_uring submissions: %d, want %d", got, want)
	}
	t.Logf("%d writes, %d reads; %d punted to io-wq", w.Write.TotalIOs, r.Read.TotalIOs, after.IoUringPunted-before.IoUringPunted)
}

// fsNoCOWFlag is FS_NOCOW_FL (include/uapi/linux/fs.h), chattr's C.
const fsNoCOWFlag = 0x00800000

// noCOW turns copy-on-write off for the empty file at path, as chattr +C
// does, by its ioctl: the kernel matrix's guests carry no chattr.
func noCOW(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err == nil {
		err = unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags|fsNoCOWFlag)
	}
	if err == nil {
		flags, err = unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	}
	if err != nil || flags&fsNoCOWFlag == 0 {
		t.Fatalf("set no copy-on-write on %s: flags %#x, %v", path, flags, err)
	}
}
