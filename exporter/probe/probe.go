// Package probe loads fspair's BPF programs for one attach mode (fentry,
// tracepoint or syscall: see Mode), attaches each on its own so a missing
// kernel hook disables only that program, says which request paths the
// attached programs follow, and gives the exporter typed access to the maps:
// image registration, the followed processes, and the per-disk counters read
// at scrape time. It is the only code that knows which kernel hooks exist.
package probe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// ErrDenied marks a program the operator asked not to load (--probe.deny).
var ErrDenied = errors.New("denied by configuration")

// ErrNoTrampolines is returned by Load when fentry mode was asked for and
// the kernel cannot attach BPF trampolines.
var ErrNoTrampolines = errors.New("this kernel cannot attach fentry programs (no BPF trampolines)")

// Options tune the loaded objects.
type Options struct {
	// MaxDisks sizes the per-disk maps; 0 keeps the compiled default.
	MaxDisks int
	// Deny lists programs not to load, by program name.
	Deny []string
	// Mode is the attach mode asked for; "" is ModeAuto.
	Mode Mode
	// Stats turns on the kernel's per-program run-time statistics
	// (kernel.bpf_stats_enabled) while the probes are loaded. They add two
	// clock reads to every run of every BPF program on the host, other
	// agents' included, so they are off unless asked for.
	Stats bool
	// Logger receives one line per program that fails to load or attach.
	Logger *slog.Logger

	// followSelf counts this process's own requests like a VM's. Only the
	// package's tests set it: they play the VM from the loading process.
	followSelf bool
	// shapeAll counts every request in the shape histograms instead of
	// a sample (SHAPE_SAMPLE in bpf/disk.h). Only the package's tests set
	// it: they check the buckets of single requests.
	shapeAll bool
	// perCPUCounters loads disk_stats as a per-CPU array (each CPU adds
	// to its own copy of a disk's counters, summed when read): an
	// experiment's layout, for BenchmarkCPUCost only (BENCHMARKS.md,
	// "Many CPUs"); the exporter's is the shared array.
	perCPUCounters bool
}

// Program is one BPF program and whether it runs.
type Program struct {
	Name string
	// Hook is where it attaches: the ELF section, e.g.
	// "fentry/ext4_file_read_iter" or "tracepoint/syscalls/sys_enter_pread64".
	Hook string
	// FS is the host file system whose module provides the hook, or "".
	FS       string
	Attached bool
	Err      error // why it is not attached
	// Pending: not needed now: no tracked image lives on a file system of
	// the hook's type (the program is attached when the first is tracked
	// and detached when the last goes, see useFS and releaseFS), or no
	// followed device needs it (host_rq_issue, see TrackDevice). It is
	// reported only while attached or tried.
	Pending bool

	prog    *ebpf.Program
	link    link.Link
	spec    *ebpf.CollectionSpec
	maps    map[string]*ebpf.Map
	primary string               // the name in the program table, whichever variant runs
	alt     *ebpf.CollectionSpec // nil, or the object of the alternative (same maps)
	altName string
}

// Probes owns the loaded maps and programs.
type Probes struct {
	maps      []*ebpf.Map // every map of every object, for Close
	objs      bpf.DiskMaps
	vars      bpf.DiskVariables
	host      bpf.HostMaps
	hostVars  bpf.HostVariables
	programs  []*Program
	stats     ioCloser
	maxDisks  int
	mode      Mode
	requested Mode
	kernel    [2]int
	deny      []string
	logger    *slog.Logger

	regMu sync.Mutex // one registration at a time: they share the registrations map
	reg   *link.Iter // the registration iterator

	mu     sync.Mutex        // programs' state and the super block and device filters
	sbOf   map[uint64]uint64 // registered inode -> its super block
	inoOf  map[uint64]uint64 // registered or tracked inode -> its inode number (the image table's hash)
	sbRefs map[uint64]int    // super block -> tracked images on it
	inodes map[uint64]uint64 // tracked inode -> its super block (for Untrack)
	slots  map[uint32]uint64 // tracked slot -> its inode (for SetVMM)
	images *imageTable       // the programs' table of tracked images (imagetable.go)
	devs   map[uint64]uint32 // followed block devices (dev_t) -> device slot, the block programs' first filter
	fsOfSb map[uint64]string // registered super block -> its file-system type (fsExt4 ...), "" for others; kept
	fsRefs map[string]int    // file-system type -> super blocks of that type holding tracked images
	// drains are the pending second halves of releaseFS, by file-system
	// type: the exit programs detached after drainGrace.
	drains     map[string]*time.Timer
	drainGrace time.Duration
	closed     bool
	// types, while a batch of programs is loaded (Load, useFS), is the
	// kernel's BTF decoded once for all of them; nil otherwise: each load
	// would decode it again (about 4 MiB, the most of a program's load
	// time in a TCG guest), and keeping it costs the exporter its memory.
	types *btf.Cache

	// readMu guards the buffers the counter reads copy the kernel's
	// values into, kept from one read to the next (see lookupInto).
	readMu    sync.Mutex
	diskBuf   bpf.DiskCounters
	counters  Counters
	imageBuf  bpf.HostImageDeviceCounters
	deviceBuf bpf.HostDeviceCounters
	// The batch reads' buffers (batch.go), under readMu too.
	diskBatch  slotBatch[bpf.DiskCounters]
	imageBatch slotBatch[bpf.HostImageDeviceCounters]
}

type ioCloser interface{ Close() error }

// filterSlots is FILTER_SLOTS in bpf/fspair.h: the super blocks the
// file-system hooks and host_dirty_folio compare a file's with, and the
// devices the block programs compare a bio's or request's with, before any
// map lookup.
const filterSlots = 16

// setFilter writes the keys of set into a first filter of the programs
// (list and its count): with more than fit, the count says so and the
// filter is off.
func setFilter[V any](list, count *ebpf.Variable, set map[uint64]V) error {
	var vals [filterSlots]uint64
	n := 0
	for v := range set {
		if n < len(vals) {
			vals[n] = v
		}
		n++
	}
	if err := list.Set(vals); err != nil {
		return err
	}
	return count.Set(uint32(n))
}

// Load creates the maps and loads and attaches every program of the mode it
// can. It fails when the maps cannot be created, or when fentry mode was
// asked for on a kernel without trampolines; a program that does not load
// or attach is reported in Programs and the rest keep working.
func Load(opts Options) (*Probes, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Mode == "" {
		opts.Mode = ModeAuto
	}
	if _, err := ParseMode(string(opts.Mode)); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
	}
	kernel, err := kernelVersion()
	if err != nil {
		return nil, err
	}
	spec, err := bpf.LoadDisk()
	if err != nil {
		return nil, fmt.Errorf("read BPF object: %w", err)
	}
	var specs bpf.DiskSpecs
	if err := spec.Assign(&specs); err != nil {
		return nil, fmt.Errorf("assign BPF specs: %w", err)
	}
	maxDisks := int(specs.DiskStats.MaxEntries)
	if opts.MaxDisks > 0 {
		maxDisks = opts.MaxDisks
		for _, m := range []*ebpf.MapSpec{specs.DiskStats, specs.DiskSeek, specs.DiskConfig, specs.VmmTgids} {
			m.MaxEntries = uint32(maxDisks)
		}
		specs.DiskByInode.MaxEntries = uint32(2 * maxDisks)
	}
	// The kernel functions whose addresses the programs compare pointers with.
	syms := kallsyms("aio_complete_rw", "io_complete_rw", "io_complete_rw_iopoll", "iomap_dio_bio_end_io", "bio_chain_endio")
	if err := setConstants(&specs, kernel, syms, opts.followSelf); err != nil {
		return nil, err
	}
	if opts.perCPUCounters {
		specs.DiskStats.Type, specs.DiskStats.Flags = ebpf.PerCPUArray, 0
	}
	if opts.shapeAll {
		if err := specs.ShapeSampleMask.Set(uint32(0)); err != nil {
			return nil, fmt.Errorf("set shape_sample_mask: %w", err)
		}
	}

	hostSpec, err := bpf.LoadHost()
	if err != nil {
		return nil, fmt.Errorf("read BPF object: %w", err)
	}
	var hostSpecs bpf.HostSpecs
	if err := hostSpec.Assign(&hostSpecs); err != nil {
		return nil, fmt.Errorf("assign BPF specs: %w", err)
	}
	// Direct I/O bios are attributed through iomap's request where the
	// addresses of its completion functions can be read.
	if syms["iomap_dio_bio_end_io"] != 0 && syms["bio_chain_endio"] != 0 {
		if err := hostSpecs.IomapDioEndIoFn.Set(syms["iomap_dio_bio_end_io"]); err != nil {
			return nil, fmt.Errorf("set iomap_dio_end_io_fn: %w", err)
		}
		if err := hostSpecs.BioChainEndIoFn.Set(syms["bio_chain_endio"]); err != nil {
			return nil, fmt.Errorf("set bio_chain_end_io_fn: %w", err)
		}
	}
	// The exporter's own reads of the images (identification, qcow2
	// tables) are not the VMs' device I/O either (excluded_tgid, as the
	// disk programs'; the host's tgid: the exporter shares the host's
	// PID namespace, where it finds the VMMs).
	if !opts.followSelf {
		if err := hostSpecs.ExcludedTgid.Set(uint32(os.Getpid())); err != nil {
			return nil, fmt.Errorf("set excluded_tgid: %w", err)
		}
	}
	if opts.MaxDisks > 0 {
		hostSpecs.ImageDeviceStats.MaxEntries = uint32(maxDisks)
		hostSpecs.DiskByInode.MaxEntries = uint32(2 * maxDisks)
	}

	p := &Probes{
		maxDisks: maxDisks, requested: opts.Mode, kernel: kernel, deny: opts.Deny, logger: opts.Logger,
		sbOf: map[uint64]uint64{}, inoOf: map[uint64]uint64{}, sbRefs: map[uint64]int{}, inodes: map[uint64]uint64{},
		slots: map[uint32]uint64{}, devs: map[uint64]uint32{},
		fsOfSb: map[uint64]string{}, fsRefs: map[string]int{}, drains: map[string]*time.Timer{},
		drainGrace: fsDrainGrace, types: btf.NewCache(),
	}
	// Each object gets its own maps, but for the ones named in shared,
	// which the later objects take from the first.
	var objs struct {
		bpf.DiskMaps
		bpf.DiskVariables
	}
	diskMaps, err := p.createMaps(spec, nil, &objs)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.objs, p.vars = objs.DiskMaps, objs.DiskVariables
	shared := map[string]*ebpf.Map{}
	for _, name := range []string{bpf.DiskMapImageTable, bpf.DiskMapDiskByInode, bpf.DiskMapIoTasks, bpf.DiskMapFlushWindows, bpf.DiskMapEventsDropped} {
		shared[name] = diskMaps[name]
	}
	var hostObjs struct {
		bpf.HostMaps
		bpf.HostVariables
	}
	hostMaps, err := p.createMaps(hostSpec, shared, &hostObjs)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.host, p.hostVars = hostObjs.HostMaps, hostObjs.HostVariables
	if p.images, err = newImageTable(p.objs.ImageTable); err != nil {
		p.Close()
		return nil, err
	}
	if opts.Stats {
		c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("turn on BPF run-time statistics (--probe.stats): %w", err)
		}
		p.stats = c
	}

	objects := map[string]struct {
		spec *ebpf.CollectionSpec
		maps map[string]*ebpf.Map
	}{}
	for name := range spec.Programs {
		objects[name] = struct {
			spec *ebpf.CollectionSpec
			maps map[string]*ebpf.Map
		}{spec, diskMaps}
	}
	for name := range hostSpec.Programs {
		objects[name] = struct {
			spec *ebpf.CollectionSpec
			maps map[string]*ebpf.Map
		}{hostSpec, hostMaps}
	}
	mk := func(d program) *Program {
		o := objects[d.name]
		pr := &Program{Name: d.name, FS: d.fs, spec: o.spec, maps: o.maps, primary: d.name}
		if ps := o.spec.Programs[d.name]; ps != nil {
			pr.Hook = ps.SectionName
		}
		if d.alt != "" {
			pr.alt, pr.altName = objects[d.alt].spec, d.alt
		}
		return pr
	}

	// The mode: fentry when asked for or, for auto, when the kernel
	// attaches a trampoline to iomap_dio_complete (core kernel, where
	// ext4, XFS and Btrfs do direct I/O), the fentry mode's own first
	// program (the check libbpf-tools call fentry_can_attach).
	p.mode = opts.Mode
	var first *Program
	if opts.Mode == ModeAuto || opts.Mode == ModeFentry {
		first = mk(program{name: bpf.DiskProgDioCompleteExit})
		first.Err = first.start(first.Name, first.spec, p.types)
		switch {
		case first.Err == nil:
			p.mode = ModeFentry
		case opts.Mode == ModeFentry:
			p.Close()
			return nil, fmt.Errorf("%w: %v; --probe.mode=tracepoint (or auto) uses tracepoints instead", ErrNoTrampolines, first.Err)
		default:
			opts.Logger.Info("BPF trampolines unavailable, using tracepoints", "err", first.Err)
			p.mode = ModeTracepoint
		}
	}
	if p.mode == ModeSyscall {
		opts.Logger.Warn("probe mode syscall: the syscall tracepoints slow every system call of every process on this host " +
			"(measured +64 ns per call, -27% on 4 KiB buffered writes; see BENCHMARKS.md); --probe.mode=auto avoids them")
	}
	for _, d := range programs {
		if !d.inMode(p.mode) {
			continue
		}
		if first != nil && d.name == first.Name && p.mode == ModeFentry {
			first.Attached = true
			p.programs = append(p.programs, first)
			continue
		}
		pr := mk(d)
		p.programs = append(p.programs, pr)
		switch {
		case slices.Contains(opts.Deny, d.name):
			pr.Err = ErrDenied
		case d.fs != "" && pr.perfEvent() && fsRegistered(d.fs):
			p.attach(pr) // for the exporter's life: see perfEvent
		case d.fs != "" && d.alt == "" && fsRegistered(d.fs):
			// A file system's hooks run for every file of that type on
			// the host, the root file system's included: they are
			// attached while an image lives on one (Track, releaseFS).
			// Loaded now, while the exporter has the capabilities to:
			// linking a loaded program later needs none on the kernels
			// fspair runs on once it drops them.
			if pr.Err = pr.load(pr.Name, pr.spec, p.types); pr.Err != nil {
				p.logger.Warn("BPF program not loaded", "program", pr.Name, "hook", pr.Hook, "mode", p.mode, "err", pr.Err)
				break
			}
			pr.Pending = true
		case d.lazy:
			// No followed device needs it yet (host_rq_issue,
			// TrackDevice): loaded now, while the exporter has the
			// capabilities to, and linked when one does.
			if pr.Err = pr.load(pr.Name, pr.spec, p.types); pr.Err != nil {
				p.logger.Warn("BPF program not loaded", "program", pr.Name, "hook", pr.Hook, "mode", p.mode, "err", pr.Err)
				break
			}
			pr.Pending = true
		case d.fs != "":
			// Its file system's module is not loaded yet: loaded and
			// attached when an image on it is tracked (which needs the
			// capabilities --privilege.drop gives up).
			pr.Pending = true
		default:
			p.attach(pr)
		}
	}
	p.types = nil
	if err := p.setURingRest(); err != nil {
		p.Close()
		return nil, err
	}
	if p.mode == ModeSyscall && p.allAttached(syscallAIOTiming) {
		if err := p.vars.AioDioTraced.Set(uint32(1)); err != nil {
			p.Close()
			return nil, fmt.Errorf("set aio_dio_traced: %w", err)
		}
	}
	if err := p.openRegistration(); err != nil {
		opts.Logger.Warn("image registration unavailable", "err", err)
	}
	return p, nil
}

// attach loads and attaches pr (or its alternative) and logs a failure.
// A program detached by releaseFS is still loaded: it is linked again,
// and its run-time statistics go on from where they were.
func (p *Probes) attach(pr *Program) {
	pr.Pending = false
	if pr.prog != nil {
		spec := pr.spec
		if pr.alt != nil && pr.Name == pr.altName {
			spec = pr.alt
		}
		pr.link, pr.Err = attach(spec.Programs[pr.Name], pr.prog)
	} else {
		pr.Err = pr.start(pr.Name, pr.spec, p.types)
		if pr.Err != nil && pr.alt != nil {
			if err := pr.start(pr.altName, pr.alt, p.types); err == nil {
				pr.Name, pr.Hook, pr.Err = pr.altName, pr.alt.Programs[pr.altName].SectionName, nil
			}
		}
	}
	pr.Attached = pr.Err == nil
	if pr.Err != nil {
		p.logger.Warn("BPF program not attached", "program", pr.Name, "hook", pr.Hook, "mode", p.mode, "err", pr.Err)
	}
}

// detach unlinks pr from its hook and makes it Pending again (not listed
// by Programs); the program stays loaded for the next attach. One that had
// failed to attach is tried again then.
func (p *Probes) detach(pr *Program) {
	if pr.link != nil {
		if err := pr.link.Close(); err != nil {
			p.logger.Warn("BPF program not detached", "program", pr.Name, "hook", pr.Hook, "err", err)
			return
		}
		pr.link = nil
	}
	pr.Attached, pr.Err, pr.Pending = false, nil, true
}

// fsRegistered reports whether the kernel knows the file system now
// (/proc/filesystems): built in, or its module loaded.
func fsRegistered(fs string) bool {
	f, err := os.Open("/proc/filesystems")
	if err != nil {
		return true // try, and let the load say what is wrong
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && fields[len(fields)-1] == fs {
			return true
		}
	}
	return false
}

// fsDrainGrace is how long a released file system's exit programs stay
// attached after its entry programs went (releaseFS): the requests in
// flight then complete through them, so that no entry's state outlives
// its exit to be taken by a later request of the same thread.
const fsDrainGrace = 5 * time.Second

// perfEvent reports whether pr attaches through a perf event (a classic
// tracepoint), which needs CAP_PERFMON to open, unlike a loaded tracing
// program's link: such a file-system program is attached at start and
// stays (releaseFS leaves it), as the exporter may have dropped the
// capability by the time an image comes or goes.
func (pr *Program) perfEvent() bool {
	ps := pr.spec.Programs[pr.primary]
	return ps != nil && ps.Type == ebpf.TracePoint
}

// isExit reports whether pr is the second half of an entry/exit pair.
func isExit(pr *Program) bool { return strings.HasSuffix(pr.primary, "_exit") }

// fsType names the file system a file is on by its magic number (the
// types of hookFS; "" for any other), as the hooks' modules see it: an
// ext2 or ext3 mount served by ext4 is ext4.
func fsType(f *os.File) (string, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return "", fmt.Errorf("statfs %s: %w", f.Name(), err)
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC:
		return fsExt4, nil
	case unix.XFS_SUPER_MAGIC:
		return fsXFS, nil
	case unix.BTRFS_SUPER_MAGIC:
		return fsBtrfs, nil
	}
	return "", nil
}

// useFS attaches the mode's programs for file-system type fs (its module
// is loaded by now: an image on it is open), when the first image on one
// is tracked, and stops a release under way. The exit programs go first:
// an entry attached before its exit could leave a state no exit takes.
// Called with p.mu held.
func (p *Probes) useFS(fs string) {
	p.types = btf.NewCache()
	defer func() { p.types = nil }()
	if t := p.drains[fs]; t != nil {
		t.Stop()
		delete(p.drains, fs)
	}
	for _, exits := range []bool{true, false} {
		for _, pr := range p.programs {
			if pr.Pending && pr.FS == fs && isExit(pr) == exits {
				p.attach(pr)
			}
		}
	}
	if err := p.setURingRest(); err != nil {
		p.logger.Warn("io_uring's submission hook not told of the programs just attached: it goes on taking their requests", "err", err)
	}
}

// releaseFS detaches the programs of file-system type fs once no tracked
// image lives on one: every file of that type on the host (the root file
// system's, say) otherwise pays their runs. The entry programs go now; the
// exits after p.drainGrace, unless an image on fs is tracked before.
// Called with p.mu held.
func (p *Probes) releaseFS(fs string) {
	if fs == "" {
		return
	}
	for _, pr := range p.programs {
		if pr.FS == fs && !pr.Pending && !errors.Is(pr.Err, ErrDenied) && !isExit(pr) && !pr.perfEvent() {
			p.detach(pr)
		}
	}
	if err := p.setURingRest(); err != nil {
		p.logger.Warn("io_uring's submission hook not told of the programs just detached", "err", err)
	}
	var t *time.Timer
	t = time.AfterFunc(p.drainGrace, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed || p.drains[fs] != t {
			return
		}
		delete(p.drains, fs)
		for _, pr := range p.programs {
			if pr.FS == fs && !pr.Pending && !errors.Is(pr.Err, ErrDenied) && !pr.perfEvent() {
				p.detach(pr)
			}
		}
	})
	if old := p.drains[fs]; old != nil {
		old.Stop()
	}
	p.drains[fs] = t
}

// The bits of bpf/disk.bpf.c's uring_submit_rest.
const (
	uringRest            = 1 << iota // the tracepoint mode: take only what no file-system hook sees
	uringSeenDirect                  // iomap_dio_rw_begin
	uringSeenBtrfsDWrite             // Btrfs's direct writes reach iomap
	uringSeenXFSRead                 // xfs_file_buffered_read
	uringSeenXFSWrite                // xfs_file_buffered_write
)

// setURingRest tells io_uring's submission hook, in the tracepoint mode,
// which reads and writes the attached file-system programs see, so that
// it takes only the rest (bpf/disk.bpf.c uring_fs_sees). A request that
// both take counts once (they key it by the same io_kiocb), so a bit left
// off costs only the latency's start; a bit set for a program that is not
// attached would lose requests, and none is.
func (p *Probes) setURingRest() error {
	if p.mode != ModeTracepoint {
		return nil
	}
	v := uint32(uringRest)
	if p.attached(bpf.DiskProgDioRwBegin) {
		v |= uringSeenDirect
		// The same kernels as requirement's Btrfs direct writes.
		if k := p.kernel; k[0] < 6 || k[0] == 6 && k[1] < 12 {
			v |= uringSeenBtrfsDWrite
		}
	}
	if p.attached(bpf.DiskProgXfsBufferedRead) {
		v |= uringSeenXFSRead
	}
	if p.attached(bpf.DiskProgXfsBufferedWrite) {
		v |= uringSeenXFSWrite
	}
	if err := p.vars.UringSubmitRest.Set(v); err != nil {
		return fmt.Errorf("set uring_submit_rest: %w", err)
	}
	return nil
}

// Mode is the attach mode the probes run in, and the one asked for.
func (p *Probes) Mode() (running, requested Mode) { return p.mode, p.requested }

// StatsEnabled reports whether the per-program run-time statistics are on.
func (p *Probes) StatsEnabled() bool { return p.stats != nil }

// kernelVersion is the running kernel's major and minor version.
func kernelVersion() ([2]int, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return [2]int{}, fmt.Errorf("uname: %w", err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var v [2]int
	parts := strings.SplitN(rel, ".", 3)
	for i := 0; i < 2 && i < len(parts); i++ {
		n := strings.IndexFunc(parts[i], func(r rune) bool { return r < '0' || r > '9' })
		if n < 0 {
			n = len(parts[i])
		}
		x, err := strconv.Atoi(parts[i][:n])
		if err != nil {
			return v, fmt.Errorf("kernel release %q: %w", rel, err)
		}
		v[i] = x
	}
	return v, nil
}

// setConstants gives the programs what differs between kernels: the
// kiocb flag values, the completion callbacks' addresses and the
// io_uring_complete prototype.
func setConstants(specs *bpf.DiskSpecs, kernel [2]int, syms map[string]uint64, followSelf bool) error {
	set := func(v *ebpf.VariableSpec, x any, name string) error {
		if err := v.Set(x); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
		return nil
	}
	if err := set(specs.SelfTgid, uint32(os.Getpid()), "self_tgid"); err != nil {
		return err
	}
	if !followSelf {
		if err := set(specs.ExcludedTgid, uint32(os.Getpid()), "excluded_tgid"); err != nil {
			return err
		}
	}
	// Before v5.19 (commit ce71bfea207b) IOCB_DSYNC, IOCB_SYNC and
	// IOCB_NOWAIT were bits 4, 5 and 7.
	if kernel[0] < 5 || kernel[0] == 5 && kernel[1] < 19 {
		if err := set(specs.IocbDsync, uint32(1<<4|1<<5), "iocb_dsync"); err != nil {
			return err
		}
		if err := set(specs.IocbNowait, uint32(1<<7), "iocb_nowait"); err != nil {
			return err
		}
	}
	for name, v := range map[string]*ebpf.VariableSpec{
		"aio_complete_rw": specs.AioCompleteFn, "io_complete_rw": specs.IoUringCompleteFn, "io_complete_rw_iopoll": specs.IoUringIopollFn,
	} {
		if err := set(v, syms[name], name); err != nil {
			return err
		}
	}
	if hasCQE, ok := ioURingCompleteHasCQE(); ok && !hasCQE {
		if err := set(specs.IoUringCompleteHasCqe, uint32(0), "io_uring_complete_has_cqe"); err != nil {
			return err
		}
	}
	return nil
}

// kallsyms reads the addresses of core kernel text symbols; a symbol the
// kernel hides (kptr_restrict) or lacks is 0.
func kallsyms(names ...string) map[string]uint64 {
	out := make(map[string]uint64, len(names))
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return out
	}
	defer f.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	r := bufio.NewReaderSize(f, 1<<16)
	for len(want) > 0 {
		line, err := r.ReadString('\n')
		fields := strings.Fields(line)
		if len(fields) == 3 && want[fields[2]] && (fields[1] == "t" || fields[1] == "T") {
			if a, perr := strconv.ParseUint(fields[0], 16, 64); perr == nil {
				out[fields[2]] = a
			}
			delete(want, fields[2])
		}
		if err != nil {
			break
		}
	}
	return out
}

// ioURingCompleteHasCQE reads the io_uring_complete tracepoint's prototype
// from the kernel's BTF: (ctx, req, cqe) since v6.14, seven arguments before.
func ioURingCompleteHasCQE() (hasCQE, ok bool) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false, false
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_io_uring_complete", &td); err != nil {
		return false, false
	}
	ptr, isPtr := td.Type.(*btf.Pointer)
	if !isPtr {
		return false, false
	}
	fp, isProto := ptr.Target.(*btf.FuncProto)
	if !isProto {
		return false, false
	}
	// The first parameter is the tracepoint's data pointer.
	return len(fp.Params) == 4, true
}

// createMaps creates an object's maps, taking the ones in shared as they
// are, and fills the generated struct to with them.
func (p *Probes) createMaps(spec *ebpf.CollectionSpec, shared map[string]*ebpf.Map, to any) (map[string]*ebpf.Map, error) {
	mapSpec := spec.Copy()
	mapSpec.Programs = nil
	coll, err := ebpf.NewCollectionWithOptions(mapSpec, ebpf.CollectionOptions{MapReplacements: shared})
	if err != nil {
		return nil, fmt.Errorf("create BPF maps: %w", err)
	}
	// Assign takes objects out of the collection: keep every map first, as
	// the replacements each program is loaded against (and closed by Close).
	out := maps.Clone(coll.Maps)
	for _, m := range out {
		p.maps = append(p.maps, m)
	}
	if err := coll.Assign(to); err != nil {
		return nil, fmt.Errorf("assign BPF maps: %w", err)
	}
	return out, nil
}

// start loads the program name of spec against pr's maps and attaches it
// where its section says.
func (pr *Program) start(name string, spec *ebpf.CollectionSpec, types *btf.Cache) error {
	if err := pr.load(name, spec, types); err != nil {
		return err
	}
	l, err := attach(spec.Programs[name], pr.prog)
	if err != nil {
		pr.prog.Close()
		pr.prog = nil
		return fmt.Errorf("attach: %w", err)
	}
	pr.link = l
	return nil
}

// load loads the program name of spec against pr's maps, unattached.
func (pr *Program) load(name string, spec *ebpf.CollectionSpec, types *btf.Cache) error {
	one := spec.Copy()
	ps := one.Programs[name]
	if ps == nil {
		return fmt.Errorf("no program %s in the BPF object", name)
	}
	one.Programs = map[string]*ebpf.ProgramSpec{name: ps}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: pr.maps, Cache: types})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	pr.prog = coll.DetachProgram(name)
	coll.Close()
	return nil
}

func attach(ps *ebpf.ProgramSpec, prog *ebpf.Program) (link.Link, error) {
	switch ps.Type {
	case ebpf.TracePoint:
		parts := strings.Split(ps.SectionName, "/")
		if len(parts) != 3 {
			return nil, fmt.Errorf("section %q is not tracepoint/<group>/<name>", ps.SectionName)
		}
		return link.Tracepoint(parts[1], parts[2], prog, nil)
	case ebpf.Tracing:
		if ps.AttachType == ebpf.AttachTraceIter {
			return link.AttachIter(link.IterOptions{Program: prog})
		}
		return link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ps.AttachType})
	}
	return nil, fmt.Errorf("program type %s not supported", ps.Type)
}

// Programs lists the running mode's programs with their state, but for
// those still waiting for their file system (Pending), which no disk needs.
func (p *Probes) Programs() []*Program {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Program, 0, len(p.programs))
	for _, pr := range p.programs {
		if !pr.Pending {
			out = append(out, pr)
		}
	}
	return out
}

// attached reports whether the named program (or its alternative) runs.
func (p *Probes) attached(name string) bool {
	for _, pr := range p.programs {
		if pr.Attached && pr.primary == name {
			return true
		}
	}
	return false
}

// Unfollowed lists what the running programs leave out of a disk's
// requests: for each op and each path QEMU takes for it given the disk's
// cache and aio modes (see DiskPaths), whether the requests or only their
// latency go unseen, on an image whose host file system is of type fs.
// Nothing listed means every request of the disk is counted and timed.
func (p *Probes) Unfollowed(fs, cache, aio string) []Gap {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gaps []Gap
	for _, op := range Ops {
		for _, path := range DiskPaths(op, cache, aio) {
			n, ok := requirement(p.mode, fs, op, path, cache, p.kernel)
			missing := ""
			switch {
			case !ok:
				missing = MissingRequests
			case !p.allAttached(n.all) && (n.fallback == nil || !p.allAttached(n.fallback)):
				missing = MissingRequests
			case n.untimed, !p.allAttached(n.timing):
				missing = MissingLatency
			}
			if missing != "" {
				gaps = append(gaps, Gap{Op: op, Path: path, Missing: missing})
			}
			if op == "flush" && missing != MissingRequests {
				if hooks := flushCostHooks(p.mode, fs, path); hooks == nil || !p.allAttached(hooks) {
					gaps = append(gaps, Gap{Op: op, Path: path, Missing: MissingFlushCost})
				}
			}
		}
	}
	return gaps
}

func (p *Probes) allAttached(names []string) bool {
	for _, n := range names {
		if !p.attached(n) {
			return false
		}
	}
	return true
}

// ProgramStats is a program's cumulative cost from bpf_stats (zero while
// they are off) and the runs the kernel skipped because the program was
// already running on the CPU (counted always).
type ProgramStats struct {
	Runs            uint64
	Runtime         time.Duration
	RecursionMisses uint64
}

// Stats reads the program's bpf_stats; zero when it is not attached.
func (pr *Program) Stats() (ProgramStats, error) {
	if pr.prog == nil {
		return ProgramStats{}, nil
	}
	s, err := pr.prog.Stats()
	if err != nil {
		return ProgramStats{}, fmt.Errorf("read stats of %s: %w", pr.Name, err)
	}
	return ProgramStats{Runs: s.RunCount, Runtime: s.Runtime, RecursionMisses: s.RecursionMisses}, nil
}

// MaxDisks is the number of disk slots, 0 .. MaxDisks-1.
func (p *Probes) MaxDisks() int { return p.maxDisks }

// openRegistration attaches the registration iterator, which the exporter
// runs to learn the inode behind its own fds.
func (p *Probes) openRegistration() error {
	for _, pr := range p.programs {
		if pr.Name == bpf.DiskProgRegisterImage {
			if !pr.Attached {
				return fmt.Errorf("program %s not attached: %w", pr.Name, pr.Err)
			}
			it, ok := pr.link.(*link.Iter)
			if !ok {
				return fmt.Errorf("program %s is not an iterator", pr.Name)
			}
			p.reg = it
			return nil
		}
	}
	return fmt.Errorf("program %s not loaded", bpf.DiskProgRegisterImage)
}

// Inode asks the kernel which inode f refers to: the key images are
// registered under. f must stay open as long as the image is tracked, which
// keeps the inode, and so the key, alive.
func (p *Probes) Inode(f *os.File) (uint64, error) {
	inodes, err := p.Inodes([]*os.File{f})
	if err != nil {
		return 0, err
	}
	return inodes[0], nil
}

// Inodes asks the kernel for the inodes behind several files at once: one
// pass of the registration iterator over the host's open files.
func (p *Probes) Inodes(files []*os.File) ([]uint64, error) {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	if p.reg == nil {
		return nil, fmt.Errorf("register images: the registration program %s is not attached", bpf.DiskProgRegisterImage)
	}
	if len(files) > int(p.objs.Registrations.MaxEntries()) {
		return nil, fmt.Errorf("register %d images at once: at most %d", len(files), p.objs.Registrations.MaxEntries())
	}
	fds := make([]uint32, len(files))
	for i, f := range files {
		fds[i] = uint32(f.Fd())
		if err := p.objs.Registrations.Put(fds[i], bpf.DiskRegistration{}); err != nil {
			return nil, fmt.Errorf("request registration of %s: %w", f.Name(), err)
		}
	}
	defer func() {
		for _, fd := range fds {
			_ = p.objs.Registrations.Delete(fd)
		}
	}()
	r, err := p.reg.Open()
	if err != nil {
		return nil, fmt.Errorf("run the registration iterator: %w", err)
	}
	_, err = io.Copy(io.Discard, r)
	r.Close()
	if err != nil {
		return nil, fmt.Errorf("run the registration iterator: %w", err)
	}
	out := make([]uint64, len(files))
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, fd := range fds {
		var reg bpf.DiskRegistration
		if err := p.objs.Registrations.Lookup(fd, &reg); err != nil {
			return nil, fmt.Errorf("read registration of %s: %w", files[i].Name(), err)
		}
		if reg.Inode == 0 {
			return nil, fmt.Errorf("register %s: the kernel did not report its inode", files[i].Name())
		}
		fs, err := fsType(files[i])
		if err != nil {
			return nil, err
		}
		out[i] = reg.Inode
		p.sbOf[reg.Inode] = reg.Sb
		p.inoOf[reg.Inode] = reg.Ino
		p.fsOfSb[reg.Sb] = fs
	}
	return out, nil
}

// ImageConfig is what the programs need to know of a disk.
type ImageConfig struct {
	QCOW2       bool
	ClusterBits uint32
}

// Track starts following the image with the given inode (from Inode) as
// disk slot, for every process but the exporter and kernel threads until
// SetVMM names the one that runs it. The slot's counters are zeroed first.
// The first image on a file system of a hooked type attaches that type's
// programs; Untrack of the last detaches them.
func (p *Probes) Track(inode uint64, slot uint32, cfg ImageConfig) error {
	if int(slot) >= p.maxDisks {
		return fmt.Errorf("track slot %d: beyond %d slots", slot, p.maxDisks)
	}
	if err := p.reset(slot); err != nil {
		return err
	}
	if err := p.Configure(slot, cfg); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, had := p.inodes[inode]; !had {
		sb, ok := p.sbOf[inode]
		if !ok {
			return fmt.Errorf("track slot %d: inode %#x was not registered (Inode first)", slot, inode)
		}
		delete(p.sbOf, inode)
		p.inodes[inode] = sb
		if p.sbRefs[sb]++; p.sbRefs[sb] == 1 {
			fs := p.fsOfSb[sb]
			if p.fsRefs[fs]++; p.fsRefs[fs] == 1 && fs != "" {
				p.useFS(fs)
			}
		}
		if err := p.writeSuperBlocks(); err != nil {
			return err
		}
	}
	// The map first: an image that finds no place in the table is looked up there.
	if err := p.objs.DiskByInode.Put(inode, bpf.DiskImageRef{Slot: slot}); err != nil {
		return fmt.Errorf("track slot %d: %w", slot, err)
	}
	if err := p.images.put(inode, p.inoOf[inode], slot, 0); err != nil {
		return fmt.Errorf("track slot %d: %w", slot, err)
	}
	p.slots[slot] = inode
	return nil
}

// SetVMM names the process (tgid) that runs the disk in slot: only its
// threads' requests on the image are followed. 0 follows every process
// but the exporter and kernel threads (a disk without a known VMM). The
// file-system hooks find it with the disk, in the one lookup they make.
func (p *Probes) SetVMM(slot, tgid uint32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	inode, ok := p.slots[slot]
	if !ok {
		return fmt.Errorf("set the VMM of slot %d: not tracked", slot)
	}
	if err := p.objs.DiskByInode.Put(inode, bpf.DiskImageRef{Slot: slot, Vmm: tgid}); err != nil {
		return fmt.Errorf("set the VMM of slot %d: %w", slot, err)
	}
	if err := p.images.put(inode, p.inoOf[inode], slot, tgid); err != nil {
		return fmt.Errorf("set the VMM of slot %d: %w", slot, err)
	}
	return nil
}

// writeSuperBlocks gives the file-system hooks and host_dirty_folio the
// super blocks that hold tracked images, their first filter (each object
// has its own copy); with more than fit, the filter is off.
func (p *Probes) writeSuperBlocks() error {
	for _, v := range []struct{ sbs, count *ebpf.Variable }{
		{p.vars.TrackedSbs, p.vars.TrackedSbCount}, {p.hostVars.TrackedSbs, p.hostVars.TrackedSbCount},
	} {
		if err := setFilter(v.sbs, v.count, p.sbRefs); err != nil {
			return fmt.Errorf("set the super block filter: %w", err)
		}
	}
	return nil
}

// Configure updates what the programs know of a tracked disk, keeping its counters.
func (p *Probes) Configure(slot uint32, cfg ImageConfig) error {
	c := bpf.DiskImageConfig{Flags: 1, ClusterBits: cfg.ClusterBits}
	if cfg.QCOW2 {
		c.Flags |= 2
	}
	if err := p.objs.DiskConfig.Put(slot, c); err != nil {
		return fmt.Errorf("configure slot %d: %w", slot, err)
	}
	return nil
}

// Untrack stops following an image. The slot's counters stay readable until
// the slot is tracked again. Its qcow2 metadata clusters are the caller's to
// remove (SetFormatClusters with no new ones): only the caller knows them.
func (p *Probes) Untrack(inode uint64, slot uint32) error {
	if err := p.objs.DiskByInode.Delete(inode); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("untrack slot %d: %w", slot, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.images.remove(inode); err != nil {
		return fmt.Errorf("untrack slot %d: %w", slot, err)
	}
	if p.slots[slot] == inode {
		delete(p.slots, slot)
	}
	if sb, ok := p.inodes[inode]; ok {
		delete(p.inodes, inode)
		delete(p.inoOf, inode)
		if p.sbRefs[sb]--; p.sbRefs[sb] <= 0 {
			delete(p.sbRefs, sb)
			fs := p.fsOfSb[sb]
			if p.fsRefs[fs]--; p.fsRefs[fs] <= 0 {
				delete(p.fsRefs, fs)
				p.releaseFS(fs)
			}
		}
		return p.writeSuperBlocks()
	}
	return nil
}

func (p *Probes) reset(slot uint32) error {
	var zero any = bpf.DiskCounters{}
	if p.objs.DiskStats.Type() == ebpf.PerCPUArray {
		zero = make([]bpf.DiskCounters, ebpf.MustPossibleCPU())
	}
	if err := p.objs.DiskStats.Put(slot, zero); err != nil {
		return fmt.Errorf("reset counters of slot %d: %w", slot, err)
	}
	if err := p.objs.DiskSeek.Put(slot, bpf.DiskSeekState{}); err != nil {
		return fmt.Errorf("reset seek state of slot %d: %w", slot, err)
	}
	if err := p.host.ImageDeviceStats.Put(slot, bpf.HostImageDeviceCounters{}); err != nil {
		return fmt.Errorf("reset device counters of slot %d: %w", slot, err)
	}
	return nil
}

// SetFormatClusters replaces the qcow2 metadata clusters of a slot: the
// clusters in old that are not in new are removed, new ones added.
func (p *Probes) SetFormatClusters(slot uint32, old, clusters []uint64) error {
	keep := make(map[uint64]bool, len(clusters))
	for _, c := range clusters {
		keep[c] = true
	}
	for _, c := range old {
		if keep[c] {
			continue
		}
		k := bpf.DiskFormatCluster{Slot: slot, Cluster: c}
		if err := p.objs.FormatClusters.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove format cluster of slot %d: %w", slot, err)
		}
	}
	had := make(map[uint64]bool, len(old))
	for _, c := range old {
		had[c] = true
	}
	for _, c := range clusters {
		if had[c] {
			continue
		}
		if err := p.objs.FormatClusters.Put(bpf.DiskFormatCluster{Slot: slot, Cluster: c}, uint8(1)); err != nil {
			return fmt.Errorf("add format cluster of slot %d: %w", slot, err)
		}
	}
	return nil
}

// SetProcesses replaces the set of processes that run tracked disks, the
// first filter of the hooks that see no file before walking the fd table
// (the syscall mode, io_uring's submission); each image's own VMM is
// SetVMM's. With all set, every process passes it (a tracked disk without a
// known VMM).
func (p *Probes) SetProcesses(tgids []uint32, all bool) error {
	want := make(map[uint32]bool, len(tgids))
	for _, t := range tgids {
		want[t] = true
	}
	var (
		key  uint32
		val  uint8
		have []uint32
	)
	it := p.objs.VmmTgids.Iterate()
	for it.Next(&key, &val) {
		have = append(have, key)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list followed processes: %w", err)
	}
	for _, t := range have {
		if !want[t] {
			if err := p.objs.VmmTgids.Delete(t); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("stop following process %d: %w", t, err)
			}
		}
		delete(want, t)
	}
	for t := range want {
		if err := p.objs.VmmTgids.Put(t, uint8(1)); err != nil {
			return fmt.Errorf("follow process %d: %w", t, err)
		}
	}
	v := uint32(0)
	if all {
		v = 1
	}
	if err := p.vars.TrackAllTasks.Set(v); err != nil {
		return fmt.Errorf("set track_all_tasks: %w", err)
	}
	return nil
}

// Counters reads one disk's counters.
func (p *Probes) Counters(slot uint32) (Counters, error) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	if p.objs.DiskStats.Type() == ebpf.PerCPUArray {
		if err := p.sumPerCPU(slot); err != nil {
			return Counters{}, fmt.Errorf("read counters of slot %d: %w", slot, err)
		}
	} else if err := lookupInto(p.objs.DiskStats, slot, &p.diskBuf); err != nil {
		return Counters{}, fmt.Errorf("read counters of slot %d: %w", slot, err)
	}
	p.counters.from(&p.diskBuf)
	return p.counters, nil
}

// sumPerCPU reads a disk's counters of the per-CPU layout (perCPUCounters)
// into diskBuf, the CPUs' copies summed word by word (every field is a u64).
func (p *Probes) sumPerCPU(slot uint32) error {
	var per []bpf.DiskCounters
	if err := p.objs.DiskStats.Lookup(slot, &per); err != nil {
		return err
	}
	const words = unsafe.Sizeof(bpf.DiskCounters{}) / 8
	sum := (*[words]uint64)(unsafe.Pointer(&p.diskBuf))
	*sum = [words]uint64{}
	for i := range per {
		for w, v := range (*[words]uint64)(unsafe.Pointer(&per[i])) {
			sum[w] += v
		}
	}
	return nil
}

// lookupInto copies the value at key of m straight into *dst, which lives
// on from one read to the next: given a pointer to a value, the map read
// allocated a buffer the size of the value on every call (at 10,000 disks,
// 36 MB of garbage a scrape, which set the exporter's memory). T must have
// the map's value size exactly: the kernel writes that many bytes.
func lookupInto[T any](m *ebpf.Map, key uint32, dst *T) error {
	if err := valueSizeIs[T](m); err != nil {
		return err
	}
	return m.Lookup(key, unsafe.Pointer(dst))
}

// valueSizeIs checks that m's values are exactly T's size, as the reads
// straight into a T need.
func valueSizeIs[T any](m *ebpf.Map) error {
	var zero T
	if size := unsafe.Sizeof(zero); uintptr(m.ValueSize()) != size {
		return fmt.Errorf("map %s holds values of %d bytes, not the %d of %T", m, m.ValueSize(), size, zero)
	}
	return nil
}

// Dropped sums the per-CPU drop counters, indexed by reason.
func (p *Probes) Dropped() ([]uint64, error) {
	n := int(p.objs.EventsDropped.MaxEntries())
	out := make([]uint64, n)
	for i := 0; i < n; i++ {
		var per []uint64
		if err := p.objs.EventsDropped.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read dropped events: %w", err)
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out, nil
}

// Close detaches every program and frees the maps.
func (p *Probes) Close() error {
	p.mu.Lock()
	p.closed = true
	for _, t := range p.drains {
		t.Stop()
	}
	p.mu.Unlock()
	var errs []error
	for _, pr := range p.programs {
		if pr.link != nil {
			errs = append(errs, pr.link.Close())
		}
		if pr.prog != nil {
			errs = append(errs, pr.prog.Close())
		}
	}
	if p.stats != nil {
		errs = append(errs, p.stats.Close())
	}
	for _, m := range p.maps {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// TrackDevice starts following a block device (kernel dev_t) as device
// slot. When the device's queue does not keep each request's issue time
// (the block layer does while a statistics user such as writeback
// throttling is set up on it), or keeps a plug's cached time
// (blockCachesPlugTime), host_rq_issue is attached to note it.
func (p *Probes) TrackDevice(dev, slot uint32) error {
	if !queueKeepsIssueTime(dev) || blockCachesPlugTime() {
		if err := p.noteIssues(); err != nil {
			return err
		}
	}
	if err := p.host.DeviceStats.Put(slot, bpf.HostDeviceCounters{}); err != nil {
		return fmt.Errorf("reset device slot %d: %w", slot, err)
	}
	if err := p.host.HostDevices.Put(dev, slot); err != nil {
		return fmt.Errorf("follow device %d:%d: %w", dev>>20, dev&0xfffff, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devs[uint64(dev)] = slot
	return p.writeDevices()
}

// noteIssues attaches host_rq_issue, if it is not yet, and then tells
// host_rq_complete to look the issue times it notes up (rq_issue_noted in
// bpf/host.bpf.c): until then the completion reads the block layer's own.
func (p *Probes) noteIssues() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.programs {
		if pr.Name != bpf.HostProgHostRqIssue {
			continue
		}
		if pr.Pending {
			p.attach(pr)
		}
		if !pr.Attached {
			return nil // logged by attach; the completion goes on without it
		}
		if err := p.hostVars.RqIssueNoted.Set(uint32(1)); err != nil {
			return fmt.Errorf("set rq_issue_noted: %w", err)
		}
	}
	return nil
}

// writeDevices gives the block programs the followed devices, their first
// filter, each with its slot above its dev_t (bpf/host.bpf.c followed_devs);
// with more than fit, the filter is off and host_devices decides.
func (p *Probes) writeDevices() error {
	entries := make(map[uint64]bool, len(p.devs))
	for dev, slot := range p.devs {
		entries[uint64(slot)<<32|dev] = true
	}
	if err := setFilter(p.hostVars.FollowedDevs, p.hostVars.FollowedDevCount, entries); err != nil {
		return fmt.Errorf("set the device filter: %w", err)
	}
	return nil
}

// TrackBtrfs maps a Btrfs file system id to the device slot of its device:
// Btrfs transaction commits name the file system, not a device.
func (p *Probes) TrackBtrfs(fsid [16]byte, slot uint32) error {
	if err := p.host.BtrfsDevices.Put(fsid, slot); err != nil {
		return fmt.Errorf("follow btrfs %x: %w", fsid, err)
	}
	return nil
}

// UntrackBtrfs forgets a Btrfs file system id.
func (p *Probes) UntrackBtrfs(fsid [16]byte) error {
	if err := p.host.BtrfsDevices.Delete(fsid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("stop following btrfs %x: %w", fsid, err)
	}
	return nil
}

// UntrackDevice stops following a block device and drops the flush window
// its images' flushes kept (keyed by the same dev_t for a file system on
// one device), so that devices coming and going do not fill the window map.
func (p *Probes) UntrackDevice(dev uint32) error {
	if err := p.host.HostDevices.Delete(dev); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("stop following device %d:%d: %w", dev>>20, dev&0xfffff, err)
	}
	if err := p.objs.FlushWindows.Delete(dev); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("drop flush window of device %d:%d: %w", dev>>20, dev&0xfffff, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.devs, uint64(dev))
	return p.writeDevices()
}

// MaxDevices is the number of host device slots.
func (p *Probes) MaxDevices() int { return int(p.host.DeviceStats.MaxEntries()) }

// DeviceCounters reads one host device's counters.
func (p *Probes) DeviceCounters(slot uint32) (bpf.HostDeviceCounters, error) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	if err := lookupInto(p.host.DeviceStats, slot, &p.deviceBuf); err != nil {
		return bpf.HostDeviceCounters{}, fmt.Errorf("read device slot %d: %w", slot, err)
	}
	return p.deviceBuf, nil
}

// ImageDeviceCounters reads one disk's data requests on its host device.
func (p *Probes) ImageDeviceCounters(slot uint32) (bpf.HostImageDeviceCounters, error) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	if err := lookupInto(p.host.ImageDeviceStats, slot, &p.imageBuf); err != nil {
		return bpf.HostImageDeviceCounters{}, fmt.Errorf("read image device counters of slot %d: %w", slot, err)
	}
	return p.imageBuf, nil
}

// blockCachesPlugTime reports whether the kernel's block layer reads the
// time once per plug (struct blk_plug's cur_ktime, 6.9 on): requests then
// carry the plug's first time as their allocation and issue time, so a
// batch submitted under one plug (linux-aio, io_uring) has every request
// issued "when the first was allocated", and its service time would hold
// the batch's submission. Without the kernel's BTF, false (the older
// kernels fspair supports have no such cache).
var blockCachesPlugTime = sync.OnceValue(func() bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	var plug *btf.Struct
	if err := spec.TypeByName("blk_plug", &plug); err != nil {
		return false
	}
	for _, m := range plug.Members {
		if m.Name == "cur_ktime" {
			return true
		}
	}
	return false
})

// queueKeepsIssueTime reports whether the block layer stamps each request
// of the device with its issue time (rq->io_start_time_ns): it does while
// its queue collects statistics, which writeback throttling, set up on
// blk-mq queues by default, makes it do. Its sysfs attribute reads only
// where it is set up (for a partition, on the whole disk's queue).
func queueKeepsIssueTime(dev uint32) bool {
	base := fmt.Sprintf("/sys/dev/block/%d:%d", dev>>20, dev&0xfffff)
	for _, q := range []string{base + "/queue/wbt_lat_usec", base + "/../queue/wbt_lat_usec"} {
		if _, err := os.ReadFile(q); err == nil {
			return true
		}
	}
	return false
}
