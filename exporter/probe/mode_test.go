package probe

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	bpf "github.com/fspair/fspair/bpf/obj"
	"github.com/fspair/fspair/exporter/hostfs"
)

var (
	fentryOnce sync.Once
	fentryErr  error
)

// fentryAvailable reports whether this kernel runs the fentry mode. Any
// failure but the absence of trampolines fails the test.
func fentryAvailable(t *testing.T) bool {
	t.Helper()
	fentryOnce.Do(func() {
		p, err := Load(Options{Mode: ModeFentry, followSelf: true})
		if err == nil {
			p.Close()
		}
		fentryErr = err
	})
	if fentryErr != nil && !errors.Is(fentryErr, ErrNoTrampolines) {
		t.Fatalf("load fentry mode: %v", fentryErr)
	}
	return fentryErr == nil
}

// testModes are the attach modes the request tests run in: those named in
// FSPAIR_PROBE_MODE (comma-separated), as the kernel matrix sets it in each
// guest, else every mode this kernel runs.
func testModes(t *testing.T) []Mode {
	t.Helper()
	if env := os.Getenv("FSPAIR_PROBE_MODE"); env != "" {
		var modes []Mode
		for _, s := range strings.Split(env, ",") {
			m, err := ParseMode(s)
			if err != nil || m == ModeAuto {
				t.Fatalf("FSPAIR_PROBE_MODE=%s: want fentry, tracepoint or syscall", env)
			}
			modes = append(modes, m)
		}
		return modes
	}
	modes := []Mode{ModeTracepoint, ModeSyscall}
	if fentryAvailable(t) {
		modes = append([]Mode{ModeFentry}, modes...)
	}
	return modes
}

// forModes runs f as a subtest in each test mode.
func forModes(t *testing.T, f func(t *testing.T, m Mode)) {
	for _, m := range testModes(t) {
		t.Run(string(m), func(t *testing.T) { f(t, m) })
	}
}

// load loads the probes in mode m, following this process's requests, with
// every request in the shape histograms (TestShapeSampled checks the
// sample). Programs whose hook this kernel lacks are logged
// (TestProgramsAttach checks that nothing else fails).
func load(t *testing.T, m Mode, deny ...string) *Probes {
	t.Helper()
	p, err := Load(Options{Mode: m, Deny: deny, followSelf: true, shapeAll: true})
	if err != nil {
		t.Fatalf("load probes in mode %s (this test needs root and BPF): %v", m, err)
	}
	t.Cleanup(func() { p.Close() })
	if running, _ := p.Mode(); running != m {
		t.Fatalf("asked for mode %s, running %s", m, running)
	}
	for _, pr := range p.Programs() {
		if !pr.Attached && !errors.Is(pr.Err, ErrDenied) {
			t.Logf("program %s (%s) not attached: %v", pr.Name, pr.Hook, pr.Err)
		}
	}
	return p
}

// fsOf is the type of the file system holding path, as mountinfo names it.
func fsOf(t *testing.T, path string) string {
	t.Helper()
	m, err := hostfs.Lookup(path)
	if err != nil {
		t.Fatalf("file system of %s: %v", path, err)
	}
	return m.FSType
}

// coverage says how p follows op on the image at path opened with QEMU's
// cache mode cache ("none": O_DIRECT) and aio mode: counted, and timed.
func coverage(t *testing.T, p *Probes, path, cache, aio, op string) (counted, timed bool) {
	t.Helper()
	counted, timed = true, true
	for _, g := range p.Unfollowed(fsOf(t, path), cache, aio) {
		if g.Op != op {
			continue
		}
		switch g.Missing {
		case MissingRequests:
			counted, timed = false, false
		case MissingLatency:
			timed = false
		}
	}
	return counted, timed
}

// cacheFor is the cache mode a request test uses in p's mode: writeback
// (the host page cache) where buffered reads and writes are followed and
// timed, else none (O_DIRECT) where those are; where neither is (the
// tracepoint mode before Linux 6.3 on ext4) the test is skipped, saying so.
func cacheFor(t *testing.T, p *Probes, path string) string {
	t.Helper()
	for _, cache := range []string{"writeback", "none"} {
		r, rt := coverage(t, p, path, cache, "threads", "read")
		w, wt := coverage(t, p, path, cache, "threads", "write")
		if r && w && rt && wt {
			return cache
		}
	}
	m, _ := p.Mode()
	t.Skipf("mode %s follows and times reads and writes on %s neither through the page cache nor with O_DIRECT on this kernel (Unfollowed says so): nothing to count", m, fsOf(t, path))
	return ""
}

// openAs opens path for reads and writes as QEMU does for cache: O_DIRECT
// for none.
func openAs(t *testing.T, path, cache string) int {
	t.Helper()
	flags := unix.O_RDWR
	if cache == "none" {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// alignedBuf is n bytes of page-aligned memory, as O_DIRECT wants.
func alignedBuf(t *testing.T, n int) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, (n+4095)&^4095, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	if uintptr(unsafe.Pointer(&mem[0]))&4095 != 0 {
		t.Fatal("mmap returned unaligned memory")
	}
	// Fault the pages in, as a running guest's memory is: Btrfs does
	// direct reads with page faults off and reads what faulted buffered.
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 0
	}
	return mem[:n]
}

// TestModes: auto runs fentry exactly where the kernel attaches
// trampolines, and tracepoint elsewhere; fentry asked for on a kernel
// without them is an error, not a silent fallback; a mode loads only its
// own programs.
func TestModes(t *testing.T) {
	p, err := Load(Options{followSelf: true})
	if err != nil {
		t.Fatal(err)
	}
	running, requested := p.Mode()
	p.Close()
	want := ModeTracepoint
	if fentryAvailable(t) {
		want = ModeFentry
	}
	if running != want || requested != ModeAuto {
		t.Errorf("auto: running %s (asked %s), want %s", running, requested, want)
	}
	if !fentryAvailable(t) && !errors.Is(fentryErr, ErrNoTrampolines) {
		t.Errorf("fentry on a kernel without trampolines: %v, want ErrNoTrampolines", fentryErr)
	}
	if _, err := ParseMode("kprobe"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
	for _, m := range testModes(t) {
		p := load(t, m)
		for _, pr := range p.Programs() {
			i := slices.IndexFunc(programs, func(d program) bool { return d.name == pr.Name || d.alt == pr.Name })
			if i < 0 || !programs[i].inMode(m) {
				t.Errorf("mode %s loaded %s, which is not one of its programs", m, pr.Name)
			}
			if strings.HasPrefix(pr.Hook, "tracepoint/syscalls/") && m != ModeSyscall {
				t.Errorf("mode %s attached a syscall tracepoint: %s", m, pr.Hook)
			}
		}
	}
}

// TestProgramTable: every program of the BPF objects is in the table of
// modes, and the other way round.
func TestProgramTable(t *testing.T) {
	disk, err := bpf.LoadDisk()
	if err != nil {
		t.Fatal(err)
	}
	host, err := bpf.LoadHost()
	if err != nil {
		t.Fatal(err)
	}
	inObjects := map[string]bool{}
	for name := range disk.Programs {
		inObjects[name] = true
	}
	for name := range host.Programs {
		inObjects[name] = true
	}
	inTable := map[string]bool{}
	for _, d := range programs {
		inTable[d.name] = true
		if d.alt != "" {
			inTable[d.alt] = true
		}
	}
	for name := range inObjects {
		if !inTable[name] {
			t.Errorf("program %s is in the BPF objects but in no mode", name)
		}
	}
	for name := range inTable {
		if !inObjects[name] {
			t.Errorf("program %s is in the mode table but not in the BPF objects", name)
		}
	}
}

// TestProgramsAttach: in every mode this kernel runs, every program
// attaches, but for those whose hook the kernel does not have at all (its
// tracepoint or function is in no BTF and no tracefs): a program that fails
// for any other reason is a bug. The file systems' programs are tried once
// an image on each is tracked.
func TestProgramsAttach(t *testing.T) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{}
	for _, fs := range hookFS {
		_, dirs[fs] = testFS(t, fs)
	}
	forModes(t, func(t *testing.T, m Mode) {
		p := load(t, m)
		for i, fs := range hookFS {
			trackFile(t, p, filepath.Join(dirs[fs], string(m)+"-attach.img"), uint32(i))
		}
		for _, pr := range p.programs {
			if pr.FS != "" && pr.Pending {
				t.Errorf("program %s of %s still pending with an image on every file system", pr.Name, pr.FS)
			}
		}
		for _, pr := range p.Programs() {
			if pr.Attached {
				continue
			}
			if hookExists(t, kernel, pr.Hook, pr.FS) {
				t.Errorf("program %s: its hook %s exists, but it did not attach: %v", pr.Name, pr.Hook, pr.Err)
			} else {
				t.Logf("program %s: hook %s absent from this kernel: not attached, and says so", pr.Name, pr.Hook)
			}
		}
	})
}

// hookExists looks a program's hook up in the kernel's (or its file
// system module's) BTF, or tracefs for classic tracepoints.
func hookExists(t *testing.T, kernel *btf.Spec, section, fs string) bool {
	t.Helper()
	kind, name, _ := strings.Cut(section, "/")
	switch kind {
	case "tracepoint":
		_, err := os.Stat(filepath.Join("/sys/kernel/tracing/events", name))
		return err == nil
	case "tp_btf":
		name = "btf_trace_" + name
	case "iter":
		name = "bpf_iter_" + name
	}
	specs := []*btf.Spec{kernel}
	if fs != "" {
		if mod, err := btf.LoadKernelModuleSpec(fs); err == nil {
			specs = append(specs, mod)
		}
	}
	for _, s := range specs {
		if _, err := s.AnyTypeByName(name); err == nil {
			return true
		}
	}
	return false
}
