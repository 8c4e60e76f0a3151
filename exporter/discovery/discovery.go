package discovery

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// Defaults of Options.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultLibvirtTimeout = 3 * time.Second
	DefaultStaleTimeout   = 5 * time.Minute
)

// ErrNoSource is returned by New when Options enables no source.
var ErrNoSource = errors.New("no discovery source enabled")

// Options configures a Discoverer.
type Options struct {
	// Libvirt enables the libvirt source, connecting to LibvirtSocket
	// (DefaultLibvirtSocket if empty) and opening LibvirtURI
	// (DefaultLibvirtURI). LibvirtPIDDir (DefaultLibvirtPIDDir) holds the
	// QEMU pid files.
	Libvirt       bool
	LibvirtSocket string
	LibvirtURI    string
	LibvirtPIDDir string
	// LibvirtMonitorSocket, with Libvirt, is libvirt's read-write socket
	// for LibvirtMonitorCommand; empty leaves it off (the default: the
	// pass-through taints the domains it is used on).
	LibvirtMonitorSocket string

	// LibvirtTimeout bounds each libvirt call (DefaultLibvirtTimeout if
	// zero); Timeout bounds the whole query.
	LibvirtTimeout time.Duration

	// Proc enables scanning ProcRoot ("/proc" if empty) for QEMU
	// processes, including their open image files that the command line
	// does not name (disks hot-plugged with QMP blockdev-add) unless
	// NoFDScan is set. ProcQMP lets the QMP monitor sockets their command
	// lines declare be used for the guest side (Disk.QMP).
	Proc     bool
	ProcRoot string
	NoFDScan bool
	ProcQMP  bool

	// ConfigFile enables the static source. The file is loaded by New
	// (an invalid file fails New) and reloaded by Discover when it
	// changes; its guest_fs_overrides and exclude_* apply to the disks of
	// all sources.
	ConfigFile string

	// Timeout bounds each source in each Discover call (DefaultTimeout
	// if zero). A source that does not finish in time is reported as
	// failed; it is not started again until the stuck run returns.
	Timeout time.Duration
	// StaleTimeout is how long the last good result of a failing source
	// is used instead (DefaultStaleTimeout if zero, negative to never),
	// so that a restarting libvirtd does not make disks and their labels
	// flap. Disks whose VMM process is known to have exited are dropped.
	StaleTimeout time.Duration

	// Logger receives debug messages about left-out drives and skipped
	// processes; nil discards them.
	Logger *slog.Logger
}

// Result is the outcome of one Discover call.
type Result struct {
	// Disks are all disks found, one per image file and VM, sorted by
	// domain, target device and file.
	Disks []Disk
	// Errors holds an error for every enabled source that failed or
	// reported problems in this run, keyed by source name (SourceLibvirt,
	// SourceStatic, SourceQEMU). Sources absent from the map succeeded.
	Errors map[string]error
	// Stale lists the sources whose disks come from an earlier successful
	// run because this one failed.
	Stale []string
	// SourceDisks counts the disks each source contributed before
	// merging (stale ones included).
	SourceDisks map[string]int
	// Durations holds how long each source ran (or was waited for).
	Durations map[string]time.Duration
	// ProcStats are the counts of the /proc scan.
	ProcStats ScanStats
}

// Discoverer finds disks from the enabled sources and merges them.
type Discoverer struct {
	opts   Options
	logger *slog.Logger
	sem    chan struct{} // serialises Discover

	libvirt *libvirtSource
	// libvirtRW is the read-write connection of LibvirtMonitorCommand,
	// nil when off.
	libvirtRW *libvirtSource
	proc      *ProcScanner

	cfgMu   sync.Mutex
	cfg     *Config
	cfgStat os.FileInfo

	sources map[string]*sourceState
	// runSource runs one source; tests replace it to simulate sources
	// that hang.
	runSource func(ctx context.Context, name string) sourceResult
}

// sourceState is what a Discoverer remembers about one source.
type sourceState struct {
	busy     atomic.Bool // a run is in progress (possibly abandoned)
	lastGood []found
	lastTime time.Time
	failing  bool // the last run failed: log the change of state only
}

// found is a disk with the identity of its image file.
type found struct {
	Disk
	id    fileID
	hasID bool
}

// sourceResult is what one source run yields. A non-nil err means the run
// failed; warn reports problems that did not stop it.
type sourceResult struct {
	disks []found
	warn  error
	err   error
	stats ScanStats
}

// New returns a Discoverer for the enabled sources.
func New(opts Options) (*Discoverer, error) {
	if !opts.Libvirt && !opts.Proc && opts.ConfigFile == "" {
		return nil, ErrNoSource
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.LibvirtTimeout <= 0 {
		opts.LibvirtTimeout = DefaultLibvirtTimeout
	}
	if opts.StaleTimeout == 0 {
		opts.StaleTimeout = DefaultStaleTimeout
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Discoverer{opts: opts, logger: logger, sem: make(chan struct{}, 1), sources: map[string]*sourceState{}}
	d.runSource = d.run
	if opts.Libvirt {
		d.libvirt = newLibvirtSource(opts.LibvirtSocket, opts.LibvirtURI, opts.LibvirtPIDDir, opts.LibvirtTimeout)
		d.sources[SourceLibvirt] = &sourceState{}
		if opts.LibvirtMonitorSocket != "" {
			d.libvirtRW = newLibvirtSource(opts.LibvirtMonitorSocket, opts.LibvirtURI, opts.LibvirtPIDDir, opts.LibvirtTimeout)
		}
	}
	if opts.Proc {
		d.proc = &ProcScanner{Root: opts.ProcRoot, FDScan: !opts.NoFDScan, QMP: opts.ProcQMP}
		d.sources[SourceQEMU] = &sourceState{}
	}
	if opts.ConfigFile != "" {
		cfg, err := LoadConfig(opts.ConfigFile)
		if err != nil {
			return nil, err
		}
		d.cfg = cfg
		d.cfgStat, _ = os.Stat(opts.ConfigFile)
		d.sources[SourceStatic] = &sourceState{}
	}
	return d, nil
}

// Sources returns the names of the enabled sources, sorted.
func (d *Discoverer) Sources() []string {
	names := make([]string, 0, len(d.sources))
	for name := range d.sources {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// ErrNoLibvirt is returned by LibvirtBlockStats when the libvirt source is
// not enabled.
var ErrNoLibvirt = errors.New("libvirt discovery not enabled")

// LibvirtBlockStats returns libvirt's block statistics of every running
// domain, over the libvirt source's connection and under its deadlines
// (Options.LibvirtTimeout per call, ctx for the whole).
func (d *Discoverer) LibvirtBlockStats(ctx context.Context) ([]libvirt.DomainStatsRecord, error) {
	if d.libvirt == nil {
		return nil, ErrNoLibvirt
	}
	return d.libvirt.blockStats(ctx)
}

// ErrNoLibvirtMonitor is returned by LibvirtMonitorCommand when
// Options.LibvirtMonitorSocket is not set.
var ErrNoLibvirtMonitor = errors.New("libvirt monitor pass-through not enabled")

// LibvirtMonitorCommand runs a QMP command (a JSON object) on the QEMU of
// the running domain with this UUID through libvirt's monitor pass-through
// (virDomainQemuMonitorCommand, on the read-write connection) and returns
// QEMU's reply as libvirt passes it on. libvirt marks the domain tainted
// (custom-monitor).
func (d *Discoverer) LibvirtMonitorCommand(ctx context.Context, uuid, command string) (string, error) {
	if d.libvirtRW == nil {
		return "", ErrNoLibvirtMonitor
	}
	return d.libvirtRW.monitorCommand(ctx, uuid, command)
}

// LibvirtVersion is the version of libvirt the libvirt source talks to
// (major*1,000,000 + minor*1,000 + release), 0 while unknown: it is asked
// with the block statistics.
func (d *Discoverer) LibvirtVersion() uint64 {
	if d.libvirt == nil {
		return 0
	}
	return d.libvirt.version.Load()
}

// Close releases the libvirt connections.
func (d *Discoverer) Close() error {
	if d.libvirt != nil {
		d.libvirt.close()
	}
	if d.libvirtRW != nil {
		d.libvirtRW.close()
	}
	return nil
}

// Discover runs all enabled sources concurrently, each bounded by
// Options.Timeout, and merges their disks. It returns an error only when ctx
// ends first; failures of single sources are in Result.Errors.
func (d *Discoverer) Discover(ctx context.Context) (*Result, error) {
	select {
	case d.sem <- struct{}{}:
	case <-ctx.Done():
		return &Result{}, ctx.Err()
	}
	defer func() { <-d.sem }()

	res := &Result{Errors: map[string]error{}, Durations: map[string]time.Duration{}, SourceDisks: map[string]int{}}
	type done struct {
		name string
		r    sourceResult
		took time.Duration
	}
	names := d.Sources()
	ch := make(chan done, len(names))
	waiting := 0
	for _, name := range names {
		st := d.sources[name]
		if !st.busy.CompareAndSwap(false, true) {
			res.Errors[name] = fmt.Errorf("%s: previous run still in progress", name)
			continue
		}
		waiting++
		sctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
		go func() {
			defer st.busy.Store(false)
			defer cancel()
			start := time.Now()
			r := d.runSource(sctx, name)
			ch <- done{name, r, time.Since(start)}
		}()
	}

	// Sources react to their context; a source stuck in a system call
	// (a hung NFS mount, a process in D state) does not, and is
	// abandoned a little after its deadline.
	timer := time.NewTimer(d.opts.Timeout + d.opts.Timeout/10 + 100*time.Millisecond)
	defer timer.Stop()
	results := map[string]sourceResult{}
	start := time.Now()
collect:
	for waiting > 0 {
		select {
		case x := <-ch:
			waiting--
			results[x.name] = x.r
			res.Durations[x.name] = x.took
		case <-timer.C:
			break collect
		case <-ctx.Done():
			break collect
		}
	}
	for _, name := range names {
		if _, ok := results[name]; !ok && res.Errors[name] == nil {
			err := fmt.Errorf("%s: no result within %s", name, d.opts.Timeout)
			if ctx.Err() != nil {
				err = fmt.Errorf("%s: %w", name, ctx.Err())
			}
			results[name] = sourceResult{err: err}
			res.Durations[name] = time.Since(start)
		}
	}

	var all [][]found
	for _, name := range []string{SourceLibvirt, SourceStatic, SourceQEMU} { // merge priority
		st, enabled := d.sources[name]
		if !enabled {
			continue
		}
		r, ran := results[name]
		if name == SourceQEMU {
			res.ProcStats = r.stats
		}
		if ran && r.err == nil {
			r.disks, r.warn = checkLabels(name, r.disks, r.warn)
			// A source may still list a VM whose VMM has just exited
			// (libvirt while it tears a domain down): tracked again
			// with fresh counters, its disk would show counters that
			// went back for a round.
			r.disks = d.stillRunning(r.disks)
			st.lastGood, st.lastTime = r.disks, time.Now()
			all = append(all, r.disks)
			res.SourceDisks[name] = len(r.disks)
			if r.warn != nil {
				res.Errors[name] = r.warn
			}
			continue
		}
		if ran {
			res.Errors[name] = r.err
		}
		if d.opts.StaleTimeout > 0 && st.lastGood != nil && time.Since(st.lastTime) <= d.opts.StaleTimeout {
			stale := d.stillRunning(st.lastGood)
			all = append(all, stale)
			res.SourceDisks[name] = len(stale)
			res.Stale = append(res.Stale, name)
		}
	}
	res.Disks = d.merge(all)
	for name, st := range d.sources {
		err := res.Errors[name]
		switch {
		case err != nil && !st.failing:
			d.logger.Warn("discovery source failing", "discovery_source", name, "err", err)
		case err != nil:
			d.logger.Debug("discovery source still failing", "discovery_source", name, "err", err)
		case st.failing:
			d.logger.Info("discovery source recovered", "discovery_source", name)
		}
		st.failing = err != nil
	}
	return res, ctx.Err()
}

// checkLabels bounds the label strings of a source's disks (boundLabels)
// and leaves out, with a warning, the disks that cannot be labelled.
func checkLabels(name string, disks []found, warn error) ([]found, error) {
	ok := disks[:0]
	var errs []error
	for _, f := range disks {
		if err := boundLabels(&f.Disk); err != nil {
			errs = append(errs, err)
			continue
		}
		ok = append(ok, f)
	}
	if len(errs) > 0 {
		warn = errors.Join(warn, wrap(name, errors.Join(errs...)))
	}
	return ok, warn
}

// run runs one source.
func (d *Discoverer) run(ctx context.Context, name string) sourceResult {
	switch name {
	case SourceLibvirt:
		disks, warn, err := d.libvirt.discover(ctx)
		if err != nil {
			return sourceResult{err: fmt.Errorf("%s: %w", name, err)}
		}
		return sourceResult{disks: d.identify(ctx, disks), warn: wrap(name, warn)}
	case SourceQEMU:
		vms, stats, err := d.proc.Scan(ctx)
		if err != nil {
			return sourceResult{err: fmt.Errorf("%s: %w", name, err), stats: stats}
		}
		var disks []Disk
		for _, vm := range vms {
			disks = append(disks, vm.Disks...)
			for _, ig := range vm.Ignored {
				d.logger.Debug("drive left out", "domain", vm.Name, "pid", vm.PID, "drive", ig)
			}
		}
		for _, w := range stats.Warnings {
			d.logger.Debug("process skipped", "reason", w)
		}
		return sourceResult{disks: d.identify(ctx, disks), stats: stats}
	case SourceStatic:
		cfg, reloadErr := d.reloadConfig()
		var warns []error
		if reloadErr != nil {
			warns = append(warns, fmt.Errorf("keeping the previous configuration: %w", reloadErr))
		}
		disks := d.identify(ctx, cfg.disks())
		ok := disks[:0]
		for _, f := range disks {
			if !f.hasID {
				warns = append(warns, fmt.Errorf("disk %s of %s: image file not accessible", f.SourceFile, f.Domain))
				continue
			}
			ok = append(ok, f)
		}
		return sourceResult{disks: ok, warn: wrap(name, errors.Join(warns...))}
	}
	return sourceResult{err: fmt.Errorf("unknown source %q", name)}
}

func wrap(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// reloadConfig reloads the configuration file if it changed and returns the
// configuration in force.
func (d *Discoverer) reloadConfig() (*Config, error) {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	fi, err := os.Stat(d.opts.ConfigFile)
	if err != nil {
		return d.cfg, fmt.Errorf("stat config: %w", err)
	}
	if d.cfgStat != nil && fi.ModTime().Equal(d.cfgStat.ModTime()) && fi.Size() == d.cfgStat.Size() && os.SameFile(fi, d.cfgStat) {
		return d.cfg, nil
	}
	cfg, err := LoadConfig(d.opts.ConfigFile)
	if err != nil {
		return d.cfg, err
	}
	d.cfg, d.cfgStat = cfg, fi
	return cfg, nil
}

func (d *Discoverer) config() *Config {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	return d.cfg
}

// identify stats every disk's image file, in the VMM's mount namespace when
// its process is known, and finds the file among the process's open files
// (Disk.OpenPath).
func (d *Discoverer) identify(ctx context.Context, disks []Disk) []found {
	out := make([]found, 0, len(disks))
	fds := map[int][]fdLink{} // open files by process, read once per call
	for _, disk := range disks {
		f := found{Disk: disk}
		if ctx.Err() == nil {
			f.id, f.hasID = d.fileID(&f.Disk, fds)
		}
		out = append(out, f)
	}
	return out
}

// fileID returns the identity of the image file the disk's VM uses. With
// the VMM process known, that is the file the process holds open under the
// disk's path, and disk.OpenPath is set to its descriptor: the path alone
// names whatever file is there now, which after an image was replaced
// under a running VM is not the one the VM reads and writes.
func (d *Discoverer) fileID(disk *Disk, fds map[int][]fdLink) (fileID, bool) {
	var (
		pathID fileID
		pathOK bool
	)
	if disk.PID > 0 {
		p := filepath.Join(d.opts.ProcRoot, strconv.Itoa(disk.PID), "root", disk.SourceFile)
		pathID, _, pathOK = statID(p)
	}
	if !pathOK {
		pathID, _, pathOK = statID(disk.SourceFile)
	}
	if disk.PID > 0 {
		links, ok := fds[disk.PID]
		if !ok {
			links = openFiles(filepath.Join(d.opts.ProcRoot, strconv.Itoa(disk.PID), "fd"))
			fds[disk.PID] = links
		}
		if l, ok := heldOpen(links, disk.SourceFile, pathID, pathOK); ok {
			disk.OpenPath = l.link
			return l.id, true
		}
	}
	return pathID, pathOK
}

// stillRunning drops the disks whose VMM process is known to be gone: no
// longer in /proc, or a zombie (exited, not yet reaped by its parent).
// disks is left as it is (a source's last good result is kept and
// filtered again); when no disk is dropped it is returned itself rather
// than copied (at 10,000 disks a copy is 6 MB a round).
func (d *Discoverer) stillRunning(disks []found) []found {
	gone := map[int]bool{}
	running := func(pid int) bool {
		if pid <= 0 {
			return true
		}
		g, seen := gone[pid]
		if !seen {
			g = d.exited(pid)
			gone[pid] = g
		}
		return !g
	}
	for i := range disks {
		if running(disks[i].PID) {
			continue
		}
		out := make([]found, i, len(disks)-1)
		copy(out, disks[:i])
		for _, f := range disks[i+1:] {
			if running(f.PID) {
				out = append(out, f)
			}
		}
		return out
	}
	return disks
}

// exited tells whether process pid has exited: /proc/<pid> is gone, or its
// stat says Z (zombie) or X (dead). The state is the field after the
// command name, which is in parentheses and may itself hold ") ".
func (d *Discoverer) exited(pid int) bool {
	dir := filepath.Join(d.opts.ProcRoot, strconv.Itoa(pid))
	if _, err := os.Stat(dir); errors.Is(err, syscall.ENOENT) {
		return true
	}
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return false // unknown: kept, as a process that still runs
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state == 'Z' || state == 'X'
}

// entry is a merged disk and the sources that contributed to it.
type entry struct {
	Disk
	from sources
}

// sources is a set of the sources a merged disk came from.
type sources uint8

// sourceBit is a source's bit in sources: one each for libvirt, static and
// qemu, the sources there are (any other would share the last bit).
func sourceBit(name string) sources {
	switch name {
	case SourceLibvirt:
		return 1
	case SourceStatic:
		return 2
	case SourceQEMU:
		return 4
	}
	return 128
}

func (s *sources) add(name string)     { *s |= sourceBit(name) }
func (s sources) has(name string) bool { return s&sourceBit(name) != 0 }

// merge combines the disks of all sources, given in priority order
// (libvirt, static, qemu). Disks are the same when they have the same image
// file (device and inode; the path if the file could not be stat'ed) and
// belong to the same VM: same process, else same UUID, else same name. When
// a file has one disk so far and a lower-priority source reports it for a
// VM it cannot match by name (a static entry naming the VM differently), it
// is still taken as the same disk unless process ids or UUIDs differ. The higher-priority source's metadata wins;
// empty fields are filled from the others.
func (d *Discoverer) merge(sources [][]found) []Disk {
	cfg := d.config()
	groups := map[string][]*entry{}
	var order []*entry
	for _, src := range sources {
		// Exact matches first, so that a loose match cannot take the
		// entry another disk of the same source matches exactly. (The
		// others by index: a copy of each was 14 MB at 10,000 disks.)
		var loose []int
		for i := range src {
			f := &src[i]
			if cfg != nil && cfg.excluded(f.Disk) {
				continue
			}
			key := f.key()
			if e := pick(groups[key], f, sameVM); e != nil {
				fill(&e.Disk, f.Disk)
				e.from.add(f.Source)
				continue
			}
			loose = append(loose, i)
		}
		for _, i := range loose {
			f := &src[i]
			key := f.key()
			g := groups[key]
			if len(g) == 1 {
				if e := pick(g, f, noConflict); e != nil {
					fill(&e.Disk, f.Disk)
					e.from.add(f.Source)
					continue
				}
			}
			e := &entry{Disk: f.Disk}
			e.from.add(f.Source)
			groups[key] = append(g, e)
			order = append(order, e)
		}
	}
	out := make([]Disk, 0, len(order))
	var sockets map[string]string
	if cfg != nil {
		sockets = cfg.qmpSockets()
	}
	for _, e := range order {
		if cfg != nil {
			if fs, ok := cfg.guestFS(e.Disk); ok {
				e.GuestFS = fs
			}
			// A socket the operator names wins over those on the
			// command line, except for libvirt's VMs: their guest side
			// comes through libvirt, never from its monitor.
			if sock, ok := sockets[e.Domain]; ok && !e.from.has(SourceLibvirt) && e.QMPNote != QMPNoteLibvirt {
				e.QMP, e.QMPNote = []string{sock}, ""
			}
		}
		if e.from.has(SourceLibvirt) {
			e.QMP = nil
		}
		out = append(out, e.Disk)
	}
	slices.SortStableFunc(out, func(a, b Disk) int {
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.TargetDevice, b.TargetDevice),
			cmp.Compare(a.SourceFile, b.SourceFile), cmp.Compare(a.PID, b.PID))
	})
	return out
}

// key groups disks by image file: device and inode, or the path if the file
// could not be stat'ed.
func (f found) key() string {
	if f.hasID {
		return fmt.Sprintf("id:%d:%d", f.id.dev, f.id.ino)
	}
	return "path:" + filepath.Clean(f.SourceFile)
}

// pick returns the first entry of g that f's source has not contributed to
// yet and that matches f.
func pick(g []*entry, f *found, match func(a, b Disk) bool) *entry {
	for _, e := range g {
		if !e.from.has(f.Source) && match(e.Disk, f.Disk) {
			return e
		}
	}
	return nil
}

// noConflict reports whether nothing says two disks belong to different
// VMs: no differing process ids or UUIDs.
func noConflict(a, b Disk) bool {
	return (a.PID == 0 || b.PID == 0 || a.PID == b.PID) && (a.UUID == "" || b.UUID == "" || a.UUID == b.UUID)
}

// sameVM reports whether two disks of one image file belong to the same VM.
func sameVM(a, b Disk) bool {
	if a.PID != 0 && b.PID != 0 {
		return a.PID == b.PID
	}
	if a.UUID != "" && b.UUID != "" {
		return a.UUID == b.UUID
	}
	return a.Domain == b.Domain
}

// fill sets the empty fields of dst from src.
func fill(dst *Disk, src Disk) {
	for _, f := range []struct{ d, s *string }{
		{&dst.Domain, &src.Domain}, {&dst.UUID, &src.UUID}, {&dst.TargetDevice, &src.TargetDevice},
		{&dst.Format, &src.Format}, {&dst.Cache, &src.Cache}, {&dst.AIO, &src.AIO},
		{&dst.Discard, &src.Discard}, {&dst.GuestFS, &src.GuestFS}, {&dst.OpenPath, &src.OpenPath},
	} {
		if *f.d == "" {
			*f.d = *f.s
		}
	}
	if dst.PID == 0 {
		dst.PID = src.PID
	}
	if len(dst.QMP) == 0 {
		dst.QMP = src.QMP
	}
	// libvirt's VMM stays libvirt's whoever else reports it.
	if dst.QMPNote == "" || src.QMPNote == QMPNoteLibvirt {
		dst.QMPNote = src.QMPNote
	}
	if dst.QMPNote == QMPNoteLibvirt {
		dst.QMP = nil
	}
	// Any source seeing the image read-only (libvirt <readonly/>, QEMU
	// read-only=on or snapshot=on) means guest writes do not reach it.
	dst.ReadOnly = dst.ReadOnly || src.ReadOnly
}
