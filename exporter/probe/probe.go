// Package probe loads fspair's BPF programs, attaches each on its own so a
// missing tracepoint disables only that program, and gives the exporter typed
// access to the maps: image registration, the followed processes, and the
// per-disk counters read at scrape time.
package probe

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// ErrDenied marks a program the operator asked not to load (--probe.deny).
var ErrDenied = errors.New("denied by configuration")

// Options tune the loaded objects.
type Options struct {
	// MaxDisks sizes the per-disk maps; 0 keeps the compiled default.
	MaxDisks int
	// Deny lists programs not to load, by program name.
	Deny []string
	// Logger receives one line per program that fails to load or attach.
	Logger *slog.Logger
}

// Program is one BPF program and whether it runs.
type Program struct {
	Name     string
	Attached bool
	Err      error // why it is not attached

	prog *ebpf.Program
	link link.Link
}

// Probes owns the loaded maps and programs.
type Probes struct {
	maps     []*ebpf.Map // every map of every object, for Close
	objs     bpf.DiskMaps
	vars     bpf.DiskVariables
	host     bpf.HostMaps
	programs []*Program
	stats    ioCloser
	maxDisks int

	regMu sync.Mutex // one registration at a time: they share the registration map entry
}

type ioCloser interface{ Close() error }

// Load creates the maps and loads and attaches every program it can. It
// fails only when the maps themselves cannot be created; a program that does
// not load or attach is reported in Programs and the rest keep working.
func Load(opts Options) (*Probes, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
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
	if err := specs.SelfTgid.Set(uint32(os.Getpid())); err != nil {
		return nil, fmt.Errorf("set self_tgid: %w", err)
	}

	hostSpec, err := bpf.LoadHost()
	if err != nil {
		return nil, fmt.Errorf("read BPF object: %w", err)
	}
	var hostSpecs bpf.HostSpecs
	if err := hostSpec.Assign(&hostSpecs); err != nil {
		return nil, fmt.Errorf("assign BPF specs: %w", err)
	}
	if opts.MaxDisks > 0 {
		hostSpecs.ImageDeviceStats.MaxEntries = uint32(maxDisks)
		hostSpecs.DiskByInode.MaxEntries = uint32(2 * maxDisks)
	}

	p := &Probes{maxDisks: maxDisks}
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
	for _, name := range []string{bpf.DiskMapDiskByInode, bpf.DiskMapIoTasks, bpf.DiskMapFlushWindows, bpf.DiskMapEventsDropped} {
		shared[name] = diskMaps[name]
	}
	hostMaps, err := p.createMaps(hostSpec, shared, &p.host)
	if err != nil {
		p.Close()
		return nil, err
	}
	// Run time and run count per program (bpf_stats); without it the
	// programs still run and those two metrics stay at zero.
	if c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err == nil {
		p.stats = c
	} else {
		opts.Logger.Warn("BPF run-time statistics unavailable", "err", err)
	}
	for _, o := range []struct {
		spec *ebpf.CollectionSpec
		maps map[string]*ebpf.Map
	}{{spec, diskMaps}, {hostSpec, hostMaps}} {
		names := make([]string, 0, len(o.spec.Programs))
		for name := range o.spec.Programs {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			pr := &Program{Name: name}
			p.programs = append(p.programs, pr)
			if slices.Contains(opts.Deny, name) {
				pr.Err = ErrDenied
				continue
			}
			pr.Err = start(o.spec, o.maps, name, pr)
			pr.Attached = pr.Err == nil
			if pr.Err != nil {
				opts.Logger.Warn("BPF program not attached", "program", name, "err", pr.Err)
			}
		}
	}
	return p, nil
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

// start loads one program against its object's maps and attaches it where
// its section says.
func start(spec *ebpf.CollectionSpec, objMaps map[string]*ebpf.Map, name string, pr *Program) error {
	one := spec.Copy()
	ps := one.Programs[name]
	one.Programs = map[string]*ebpf.ProgramSpec{name: ps}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: objMaps})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	prog := coll.DetachProgram(name)
	coll.Close()
	l, err := attach(ps, prog)
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach: %w", err)
	}
	pr.prog, pr.link = prog, l
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
		return link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ps.AttachType})
	}
	return nil, fmt.Errorf("program type %s not supported", ps.Type)
}

// Programs lists every program with its state.
func (p *Probes) Programs() []*Program { return p.programs }

// ProgramStats is a program's cumulative cost from bpf_stats.
type ProgramStats struct {
	Runs    uint64
	Runtime time.Duration
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
	return ProgramStats{Runs: s.RunCount, Runtime: s.Runtime}, nil
}

// MaxDisks is the number of disk slots, 0 .. MaxDisks-1.
func (p *Probes) MaxDisks() int { return p.maxDisks }

// Inode asks the kernel which inode f refers to: the key images are
// registered under. f must stay open as long as the image is tracked, which
// keeps the inode, and so the key, alive.
func (p *Probes) Inode(f *os.File) (uint64, error) {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	zero := uint32(0)
	if err := p.objs.Registration.Put(zero, bpf.DiskRegistrationReq{Pending: 1}); err != nil {
		return 0, fmt.Errorf("request registration: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("fstatfs %s: %w", f.Name(), err)
	}
	var r bpf.DiskRegistrationReq
	if err := p.objs.Registration.Lookup(zero, &r); err != nil {
		return 0, fmt.Errorf("read registration: %w", err)
	}
	if r.Pending != 0 || r.Inode == 0 {
		return 0, fmt.Errorf("register %s: the registration program did not run (is it attached?)", f.Name())
	}
	return r.Inode, nil
}

// ImageConfig is what the programs need to know of a disk.
type ImageConfig struct {
	QCOW2       bool
	ClusterBits uint32
}

// Track starts following the image with the given inode as disk slot. The
// slot's counters are zeroed first.
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
	if err := p.objs.DiskByInode.Put(inode, slot); err != nil {
		return fmt.Errorf("track slot %d: %w", slot, err)
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
	return nil
}

func (p *Probes) reset(slot uint32) error {
	if err := p.objs.DiskStats.Put(slot, bpf.DiskCounters{}); err != nil {
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

// SetProcesses replaces the set of followed VMM processes. With all set,
// every process is followed (a tracked disk without a known VMM).
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
func (p *Probes) Counters(slot uint32) (bpf.DiskCounters, error) {
	var c bpf.DiskCounters
	if err := p.objs.DiskStats.Lookup(slot, &c); err != nil {
		return c, fmt.Errorf("read counters of slot %d: %w", slot, err)
	}
	return c, nil
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

// TrackDevice starts following a block device (kernel dev_t) as device slot.
func (p *Probes) TrackDevice(dev, slot uint32) error {
	if err := p.host.DeviceStats.Put(slot, bpf.HostDeviceCounters{}); err != nil {
		return fmt.Errorf("reset device slot %d: %w", slot, err)
	}
	if err := p.host.HostDevices.Put(dev, slot); err != nil {
		return fmt.Errorf("follow device %d:%d: %w", dev>>20, dev&0xfffff, err)
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
	return nil
}

// MaxDevices is the number of host device slots.
func (p *Probes) MaxDevices() int { return int(p.host.DeviceStats.MaxEntries()) }

// DeviceCounters reads one host device's counters.
func (p *Probes) DeviceCounters(slot uint32) (bpf.HostDeviceCounters, error) {
	var c bpf.HostDeviceCounters
	if err := p.host.DeviceStats.Lookup(slot, &c); err != nil {
		return c, fmt.Errorf("read device slot %d: %w", slot, err)
	}
	return c, nil
}

// ImageDeviceCounters reads one disk's data requests on its host device.
func (p *Probes) ImageDeviceCounters(slot uint32) (bpf.HostImageDeviceCounters, error) {
	var c bpf.HostImageDeviceCounters
	if err := p.host.ImageDeviceStats.Lookup(slot, &c); err != nil {
		return c, fmt.Errorf("read image device counters of slot %d: %w", slot, err)
	}
	return c, nil
}
