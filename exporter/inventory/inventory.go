// Package inventory keeps the set of VM disks fspair follows. A background
// loop takes what discovery found, opens each image file, identifies it (format,
// guest file system, host file system), and registers it with the probes; when
// a disk goes away or its file is replaced, it is unregistered. Collectors
// read a snapshot and never wait on any of this.
package inventory

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/diskimage"
	"github.com/fspair/fspair/exporter/hostfs"
	"github.com/fspair/fspair/exporter/probe"
)

// ErrLimit is returned in Stats when disks were left untracked because
// every slot was in use.
var ErrLimit = errors.New("disk limit reached")

// Reasons a refresh of a tracked image fails, the keys of
// Stats.RefreshFailures.
const (
	// RefreshQcow2Metadata: the qcow2 metadata layout could not be read
	// (the image truncated, or rewritten with a bad header).
	RefreshQcow2Metadata = "qcow2_metadata"
	// RefreshProbeUpdate: the probes did not take the new layout.
	RefreshProbeUpdate = "probe_update"
)

// Disk is one VM disk as the collectors see it.
type Disk struct {
	discovery.Disk

	// ImageFormat is the format read from the image header (raw, qcow2, unknown).
	ImageFormat string
	// GuestFS is the guest file system, from the image bytes or the
	// operator's override; GuestFSSource says which ("image", "override").
	GuestFS, GuestFSSource string
	// VirtualSize is the guest-visible size, 0 if unknown.
	VirtualSize int64
	// HostFS is the host file system holding the image.
	HostFS hostfs.Mount
	// Layout is the image file's extents and sizes on the host file system.
	Layout Layout

	// Tracked is set when the probes follow the disk under Slot.
	Tracked bool
	Slot    uint32
}

// Prober is what the inventory needs of the BPF side.
type Prober interface {
	Inode(f *os.File) (uint64, error)
	Track(inode uint64, slot uint32, cfg probe.ImageConfig) error
	Configure(slot uint32, cfg probe.ImageConfig) error
	Untrack(inode uint64, slot uint32) error
	SetFormatClusters(slot uint32, old, clusters []uint64) error
	SetProcesses(tgids []uint32, all bool) error
	SetVMM(slot, tgid uint32) error
	MaxDisks() int
	TrackDevice(dev, slot uint32) error
	UntrackDevice(dev uint32) error
	TrackBtrfs(fsid [16]byte, slot uint32) error
	UntrackBtrfs(fsid [16]byte) error
	MaxDevices() int
}

// Device is a host block device holding tracked images' host file system.
type Device struct {
	Name       string // /dev/loop3
	FSType     string
	MountPoint string
	Dev        uint32 // kernel dev_t: major << 20 | minor
	Slot       uint32
	Disks      int // tracked VM disks on it

	btrfsFSID *[16]byte
}

// ImageProblem is a discovered disk whose image file could not be opened,
// identified or tracked, and why.
type ImageProblem struct {
	discovery.Disk
	Err error
}

// Discoverer finds the disks.
type Discoverer interface {
	Discover(ctx context.Context) (*discovery.Result, error)
}

// Options tune the inventory.
type Options struct {
	// MaxFormatClusters bounds the qcow2 metadata clusters read per image.
	MaxFormatClusters int
	// ImageRefresh is how often a tracked image is identified again (guest
	// file system, qcow2 metadata layout).
	ImageRefresh time.Duration
	Logger       *slog.Logger
}

// fileID is an image file's identity on the host: a replaced file (same
// path, new inode) is a new disk.
type fileID struct {
	dev, ino uint64
}

type entry struct {
	Disk
	id        fileID
	file      *os.File
	inode     uint64
	vmm       uint32 // the VMM process the probes follow on the image (SetVMM), 0: any
	clusters  []uint64
	identAt   time.Time
	lastError error
	// layoutFailing is set while the qcow2 metadata layout cannot be
	// read, so that the change is logged once, not every round.
	layoutFailing bool
}

// Inventory is the current set of disks.
type Inventory struct {
	prober Prober
	disc   Discoverer
	opts   Options
	log    *slog.Logger

	mu       sync.RWMutex
	entries  map[fileID]*entry
	free     []uint32 // free slots, reused oldest-freed first
	stats    Stats
	snapshot []Disk

	devices     map[uint32]*Device
	freeDevices []uint32
	devSnapshot []Device
}

// Stats describes the last refresh, for the exporter's own metrics.
type Stats struct {
	Refreshes       uint64
	LastRefresh     time.Time
	LastDuration    time.Duration
	SourceErrors    map[string]error  // by discovery source, from the last refresh
	SourceDisks     map[string]int    // disks found, by source
	ErrorsTotal     map[string]uint64 // cumulative discovery errors, by source
	ImageErrors     uint64            // cumulative failures to open/identify/track an image
	ImageProblems   []ImageProblem    // those failures in the last refresh, in discovery order
	RefreshFailures map[string]uint64 // cumulative failed refreshes of tracked images, by reason (Refresh*)
	Untrackable     int               // disks beyond the slot limit in the last refresh
	LimitReached    uint64            // refreshes that hit the slot limit
	TrackedDisks    int
	MaxDisks        int
	FollowAllTasks  bool
}

// New returns an empty inventory.
func New(p Prober, d Discoverer, opts Options) *Inventory {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxFormatClusters == 0 {
		opts.MaxFormatClusters = 65536
	}
	if opts.ImageRefresh == 0 {
		opts.ImageRefresh = time.Minute
	}
	inv := &Inventory{prober: p, disc: d, opts: opts, log: opts.Logger, entries: map[fileID]*entry{},
		devices: map[uint32]*Device{}}
	for s := 0; s < p.MaxDisks(); s++ {
		inv.free = append(inv.free, uint32(s))
	}
	for s := 0; s < p.MaxDevices(); s++ {
		inv.freeDevices = append(inv.freeDevices, uint32(s))
	}
	inv.stats.ErrorsTotal = map[string]uint64{}
	inv.stats.RefreshFailures = map[string]uint64{RefreshQcow2Metadata: 0, RefreshProbeUpdate: 0}
	inv.stats.MaxDisks = p.MaxDisks()
	return inv
}

// Disks returns the current disks, sorted by domain and target.
func (inv *Inventory) Disks() []Disk {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return inv.snapshot
}

// Devices returns the host block devices followed.
func (inv *Inventory) Devices() []Device {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return inv.devSnapshot
}

// Stats returns the refresh statistics.
func (inv *Inventory) Stats() Stats {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	s := inv.stats
	s.ErrorsTotal = maps(inv.stats.ErrorsTotal)
	s.RefreshFailures = maps(inv.stats.RefreshFailures)
	return s
}

func maps[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Run refreshes every interval until ctx ends.
func (inv *Inventory) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := inv.Refresh(ctx); err != nil {
			inv.log.Warn("refresh disks", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh runs discovery once and brings the tracked set in line with it.
func (inv *Inventory) Refresh(ctx context.Context) error {
	start := time.Now()
	res, err := inv.disc.Discover(ctx)
	if err != nil {
		return fmt.Errorf("discover disks: %w", err)
	}
	seen := map[fileID]bool{}
	var problems []ImageProblem
	untrackable := 0
	for _, d := range res.Disks {
		id, err := statID(imagePath(d))
		if err != nil {
			// A VM that stops between discovery and here, or a path
			// the exporter cannot see: skip it this round. Logged at
			// debug only, as it recurs every round; --check lists it.
			inv.log.Debug("stat image", "file", d.SourceFile, "err", err)
			problems = append(problems, ImageProblem{d, err})
			continue
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		e := inv.entries[id]
		if e == nil {
			e, err = inv.add(id, d)
			if errors.Is(err, ErrLimit) {
				untrackable++
				continue
			}
			if err != nil {
				inv.log.Warn("track disk", "domain", d.Domain, "file", d.SourceFile, "err", err)
				problems = append(problems, ImageProblem{d, err})
				continue
			}
			if e.lastError != nil {
				// Tracked, but its bytes could not be read to identify it.
				problems = append(problems, ImageProblem{d, e.lastError})
			}
		}
		e.Disk.Disk = d
		if time.Since(e.identAt) >= inv.opts.ImageRefresh {
			if err := inv.identify(e); err != nil {
				problems = append(problems, ImageProblem{d, err})
			}
		} else {
			// qcow2 allocates metadata as the guest writes: re-read the
			// layout (L1 and refcount tables only) every round.
			inv.syncClusters(e)
		}
	}
	for id, e := range inv.entries {
		if !seen[id] {
			inv.remove(id, e)
		}
	}
	inv.followProcesses()

	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.stats.Refreshes++
	inv.stats.LastRefresh = time.Now()
	inv.stats.LastDuration = time.Since(start)
	inv.stats.SourceErrors = res.Errors
	inv.stats.SourceDisks = map[string]int{}
	for _, d := range res.Disks {
		inv.stats.SourceDisks[d.Source]++
	}
	for src, err := range res.Errors {
		if err != nil {
			inv.stats.ErrorsTotal[src]++
		}
	}
	inv.stats.ImageErrors += uint64(len(problems))
	inv.stats.ImageProblems = problems
	inv.stats.Untrackable = untrackable
	if untrackable > 0 {
		inv.stats.LimitReached++
	}
	inv.snapshot = inv.buildSnapshot()
	inv.stats.TrackedDisks = len(inv.snapshot)
	inv.devSnapshot = inv.devSnapshot[:0:0]
	for _, d := range inv.devices {
		inv.devSnapshot = append(inv.devSnapshot, *d)
	}
	sort.Slice(inv.devSnapshot, func(i, j int) bool { return inv.devSnapshot[i].Name < inv.devSnapshot[j].Name })
	return nil
}

// imagePath is where to open the image file the disk's VM uses: the VMM's
// own descriptor when discovery found one, so that an image replaced or
// removed under a running VM is still the file followed.
func imagePath(d discovery.Disk) string {
	if d.OpenPath != "" {
		return d.OpenPath
	}
	return d.SourceFile
}

func statID(path string) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("stat image %s: %w", path, err)
	}
	if t := st.Mode & syscall.S_IFMT; t != syscall.S_IFREG {
		return fileID{}, fmt.Errorf("%s: %s, not a regular file (fspair follows image files only)", path, fileType(t))
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

// fileType names a file type (the S_IFMT bits of st_mode).
func fileType(t uint32) string {
	switch t {
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFIFO:
		return "a named pipe"
	case syscall.S_IFCHR:
		return "a character device"
	case syscall.S_IFBLK:
		return "a block device"
	case syscall.S_IFSOCK:
		return "a socket"
	}
	return fmt.Sprintf("file type %#o", t)
}

// add opens, identifies and registers a new disk.
func (inv *Inventory) add(id fileID, d discovery.Disk) (*entry, error) {
	if len(inv.free) == 0 {
		return nil, ErrLimit
	}
	f, err := os.Open(imagePath(d))
	if err != nil {
		return nil, fmt.Errorf("open image %s: %w", d.SourceFile, err)
	}
	// The file may have been replaced between stat and open.
	if got, err := fdID(f); err != nil || got != id {
		f.Close()
		return nil, fmt.Errorf("open image %s: file changed while opening", d.SourceFile)
	}
	e := &entry{Disk: Disk{Disk: d}, id: id, file: f}
	if m, err := hostfs.Lookup(d.SourceFile); err == nil {
		e.HostFS = m
	} else {
		inv.log.Warn("host file system of image", "file", d.SourceFile, "err", err)
	}
	_ = inv.identify(e)
	inode, err := inv.prober.Inode(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	slot := inv.free[0]
	if err := inv.prober.Track(inode, slot, e.probeConfig()); err != nil {
		f.Close()
		return nil, err
	}
	inv.free = inv.free[1:]
	e.inode, e.Slot, e.Tracked = inode, slot, true
	inv.syncClusters(e)
	inv.holdDevice(e)
	inv.entries[id] = e
	inv.log.Info("tracking disk", "domain", d.Domain, "target", d.TargetDevice, "file", d.SourceFile,
		"format", e.ImageFormat, "guest_fs", e.GuestFS, "host_fs", e.HostFS.FSType, "slot", slot)
	return e, nil
}

func fdID(f *os.File) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

// identify reads the image's own bytes: format, guest file system, and for
// qcow2 the metadata layout. Bounded reads; a failure keeps the last result.
func (inv *Inventory) identify(e *entry) error {
	e.identAt = time.Now()
	if l, err := readLayout(e.file); err == nil {
		e.Layout = l
	} else {
		e.Layout = l
		inv.log.Debug("image layout", "file", e.SourceFile, "err", err)
	}
	// The format the VMM was told wins over the header: a guest can write a
	// qcow2 header into a raw disk (CVE-2008-2004).
	format := ""
	if e.Format == diskimage.FormatRaw || e.Format == diskimage.FormatQcow2 {
		format = e.Format
	}
	// Read through the descriptor held since the disk was tracked, not
	// the path: the path may name another file by now.
	r, done := e.imageReader()
	info, err := probeOpen(e.file, r, format)
	done()
	if err != nil {
		err = fmt.Errorf("probe image %s: %w", e.SourceFile, err)
		e.lastError = err
		if e.ImageFormat == "" {
			e.ImageFormat, e.GuestFS, e.GuestFSSource = "unknown", "unknown", "image"
		}
		inv.log.Warn("identify image", "file", e.SourceFile, "err", err)
		return err
	}
	e.lastError = nil
	e.ImageFormat = info.Format
	e.VirtualSize = info.VirtualSize
	e.GuestFS, e.GuestFSSource = info.GuestFS, "image"
	if e.Disk.Disk.GuestFS != "" {
		e.GuestFS, e.GuestFSSource = e.Disk.Disk.GuestFS, "override"
	}
	if e.Tracked {
		inv.syncClusters(e)
	}
	return nil
}

// probeOpen identifies the open image file f, read through r.
func probeOpen(f *os.File, r io.ReaderAt, format string) (*diskimage.Info, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return diskimage.ProbeAs(r, fi.Size(), format)
}

func (e *entry) probeConfig() probe.ImageConfig {
	return probe.ImageConfig{QCOW2: e.ImageFormat == diskimage.FormatQcow2}
}

// syncClusters hands the qcow2 metadata clusters of an image to the probes,
// so that the format's own I/O is told apart from the guest's.
func (inv *Inventory) syncClusters(e *entry) {
	if e.ImageFormat != diskimage.FormatQcow2 {
		// Read as another format since (re-identified): what was handed
		// as qcow2 metadata is not.
		if len(e.clusters) == 0 {
			return
		}
		if !inv.clearClusters(e) {
			inv.countRefreshFailure(RefreshProbeUpdate)
			return
		}
		if err := inv.prober.Configure(e.Slot, e.probeConfig()); err != nil {
			inv.log.Warn("configure disk", "file", e.SourceFile, "err", err)
			inv.countRefreshFailure(RefreshProbeUpdate)
		}
		return
	}
	fi, err := e.file.Stat()
	if err != nil {
		inv.layoutFailed(e, fmt.Errorf("stat image: %w", err))
		return
	}
	r, done := e.imageReader()
	layout, err := diskimage.Qcow2Metadata(r, fi.Size(), inv.opts.MaxFormatClusters)
	done()
	if err != nil {
		inv.layoutFailed(e, err)
		return
	}
	cs := uint64(layout.ClusterSize)
	var clusters []uint64
	for _, r := range layout.Ranges {
		for c := uint64(r.Start) / cs; c*cs < uint64(r.End); c++ {
			clusters = append(clusters, c)
		}
	}
	bits := uint32(0)
	for (uint64(1) << bits) < cs {
		bits++
	}
	if err := inv.prober.Configure(e.Slot, probe.ImageConfig{QCOW2: true, ClusterBits: bits}); err != nil {
		inv.log.Warn("configure qcow2 disk", "file", e.SourceFile, "err", err)
		inv.countRefreshFailure(RefreshProbeUpdate)
		return
	}
	if err := inv.prober.SetFormatClusters(e.Slot, e.clusters, clusters); err != nil {
		inv.log.Warn("set qcow2 metadata clusters", "file", e.SourceFile, "err", err)
		inv.countRefreshFailure(RefreshProbeUpdate)
		return
	}
	e.clusters = clusters
	if e.layoutFailing {
		e.layoutFailing = false
		inv.log.Info("qcow2 metadata layout readable again", "file", e.SourceFile, "clusters", len(clusters))
	}
}

// layoutFailed takes back the clusters handed to the probes for an image
// whose qcow2 metadata layout cannot be read: the file may have been
// truncated or rewritten, and left in place they would count the guest's
// requests at those offsets as the format's. A read that raced with QEMU
// moving a table (see diskimage.Qcow2Metadata) costs the same until the next
// round, when the clusters are handed back. The change is logged at warn
// once; while it lasts, each round is counted and logged at debug.
func (inv *Inventory) layoutFailed(e *entry, err error) {
	inv.countRefreshFailure(RefreshQcow2Metadata)
	cleared := len(e.clusters)
	if cleared > 0 && !inv.clearClusters(e) {
		inv.countRefreshFailure(RefreshProbeUpdate)
		cleared = 0
	}
	if e.layoutFailing {
		inv.log.Debug("qcow2 metadata layout still unreadable", "file", e.SourceFile, "err", err, "clusters_cleared", cleared)
		return
	}
	e.layoutFailing = true
	inv.log.Warn("qcow2 metadata layout unreadable: its metadata clusters are cleared until it reads again",
		"file", e.SourceFile, "err", err, "clusters_cleared", cleared)
}

// clearClusters takes every metadata cluster of the image back from the
// probes, and says whether that worked (if not, e.clusters still lists them).
func (inv *Inventory) clearClusters(e *entry) bool {
	if err := inv.prober.SetFormatClusters(e.Slot, e.clusters, nil); err != nil {
		inv.log.Warn("remove qcow2 metadata clusters", "file", e.SourceFile, "err", err)
		return false
	}
	e.clusters = nil
	return true
}

func (inv *Inventory) countRefreshFailure(reason string) {
	inv.mu.Lock()
	inv.stats.RefreshFailures[reason]++
	inv.mu.Unlock()
}

// devID is the kernel dev_t of the host file system's block device, 0 if none.
func (e *entry) devID() uint32 {
	if e.HostFS.Device == "" {
		return 0
	}
	return e.HostFS.DeviceMajor<<20 | e.HostFS.DeviceMinor
}

// holdDevice follows the image's host block device while a disk uses it.
func (inv *Inventory) holdDevice(e *entry) {
	dev := e.devID()
	if dev == 0 {
		return
	}
	if d := inv.devices[dev]; d != nil {
		d.Disks++
		return
	}
	if len(inv.freeDevices) == 0 {
		inv.log.Warn("host device limit reached", "device", e.HostFS.Device)
		return
	}
	slot := inv.freeDevices[0]
	if err := inv.prober.TrackDevice(dev, slot); err != nil {
		inv.log.Warn("follow host device", "device", e.HostFS.Device, "err", err)
		return
	}
	inv.freeDevices = inv.freeDevices[1:]
	d := &Device{Name: e.HostFS.Device, FSType: e.HostFS.FSType, MountPoint: e.HostFS.MountPoint,
		Dev: dev, Slot: slot, Disks: 1}
	if d.FSType == "btrfs" {
		if id, err := btrfsFSID("/sys/fs/btrfs", d.Name); err != nil {
			inv.log.Warn("btrfs file system id", "device", d.Name, "err", err)
		} else if err := inv.prober.TrackBtrfs(id, slot); err != nil {
			inv.log.Warn("follow btrfs commits", "device", d.Name, "err", err)
		} else {
			d.btrfsFSID = &id
		}
	}
	inv.devices[dev] = d
}

// btrfsFSID finds the Btrfs file system id of a device from sysfs, where
// each mounted Btrfs has a directory named by its id listing its devices.
func btrfsFSID(sysfs, device string) ([16]byte, error) {
	var id [16]byte
	matches, err := filepath.Glob(filepath.Join(sysfs, "*", "devices", filepath.Base(device)))
	if err != nil || len(matches) == 0 {
		return id, fmt.Errorf("no btrfs in %s lists %s", sysfs, device)
	}
	uuid := strings.ReplaceAll(filepath.Base(filepath.Dir(filepath.Dir(matches[0]))), "-", "")
	b, err := hex.DecodeString(uuid)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("btrfs id %q of %s is not a UUID", uuid, device)
	}
	copy(id[:], b)
	return id, nil
}

func (inv *Inventory) releaseDevice(e *entry) {
	d := inv.devices[e.devID()]
	if d == nil {
		return
	}
	if d.Disks--; d.Disks > 0 {
		return
	}
	if d.btrfsFSID != nil {
		if err := inv.prober.UntrackBtrfs(*d.btrfsFSID); err != nil {
			inv.log.Warn("stop following btrfs commits", "device", d.Name, "err", err)
		}
	}
	if err := inv.prober.UntrackDevice(d.Dev); err != nil {
		inv.log.Warn("stop following host device", "device", d.Name, "err", err)
	}
	inv.freeDevices = append(inv.freeDevices, d.Slot)
	delete(inv.devices, d.Dev)
}

func (inv *Inventory) remove(id fileID, e *entry) {
	inv.releaseDevice(e)
	if e.Tracked {
		// The qcow2 metadata clusters are keyed by slot: left behind,
		// they would pile up in the map and mark the requests of the
		// next qcow2 disk in this slot at those offsets as the format's.
		inv.clearClusters(e)
		if err := inv.prober.Untrack(e.inode, e.Slot); err != nil {
			inv.log.Warn("untrack disk", "file", e.SourceFile, "err", err)
		}
		inv.free = append(inv.free, e.Slot)
	}
	e.file.Close()
	delete(inv.entries, id)
	inv.log.Info("disk gone", "domain", e.Domain, "target", e.TargetDevice, "file", e.SourceFile)
}

// followProcesses tells the probes which VMM process to follow on each
// image, and which processes run images at all: all processes when a
// tracked disk has no known VMM (a static config entry without pid), and on
// that disk any process but the exporter and kernel threads.
func (inv *Inventory) followProcesses() {
	var tgids []uint32
	all := false
	for _, e := range inv.entries {
		if e.PID > 0 {
			tgids = append(tgids, uint32(e.PID))
		} else {
			all = true
		}
		if vmm := uint32(max(e.PID, 0)); e.Tracked && vmm != e.vmm {
			if err := inv.prober.SetVMM(e.Slot, vmm); err != nil {
				inv.log.Warn("follow the VMM of a disk", "file", e.SourceFile, "pid", e.PID, "err", err)
				continue
			}
			e.vmm = vmm
		}
	}
	slices.Sort(tgids)
	tgids = slices.Compact(tgids)
	if err := inv.prober.SetProcesses(tgids, all); err != nil {
		inv.log.Warn("follow VMM processes", "err", err)
	}
	inv.mu.Lock()
	inv.stats.FollowAllTasks = all
	inv.mu.Unlock()
}

func (inv *Inventory) buildSnapshot() []Disk {
	out := make([]Disk, 0, len(inv.entries))
	for _, e := range inv.entries {
		out = append(out, e.Disk)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		if a.TargetDevice != b.TargetDevice {
			return a.TargetDevice < b.TargetDevice
		}
		return a.SourceFile < b.SourceFile
	})
	return out
}

// Close stops following every disk.
func (inv *Inventory) Close() {
	for id, e := range inv.entries {
		inv.remove(id, e)
	}
}

// directCache reports whether the VMM reads and writes the disk's image
// with O_DIRECT.
func directCache(cache string) bool {
	return cache == "none" || cache == "directsync" || cache == discovery.CacheDirect
}

// imageReader is what the exporter reads e's image through: the held
// descriptor, or for a disk in direct I/O the same file opened again with
// O_DIRECT (diskimage.DirectReader says why). done closes what was opened.
func (e *entry) imageReader() (r io.ReaderAt, done func()) {
	if !directCache(e.Cache) {
		return e.file, func() {}
	}
	d, err := diskimage.OpenDirect(e.file)
	if err != nil {
		return e.file, func() {}
	}
	return d, func() { d.Close() }
}
