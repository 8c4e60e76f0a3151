package collector

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	bpf "github.com/fspair/fspair/bpf/obj"
	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/diskimage"
	"github.com/fspair/fspair/exporter/guest"
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
)

// The per-disk and per-host-device families, written directly (text.go).
// They carry the same names, help, types, labels and values as the
// DiskCollector and HostCollector send through client_golang
// (TestDirectMatchesCollectors checks it on random counters); the
// exporter serves these and leaves the collectors to that test.

// descInfo is what the direct writer needs of a Desc.
type descInfo struct{ name, help string }

// descs holds the name and help of every per-disk and per-device Desc, so
// that both ways of exposing them share one text.
var descs = map[*prometheus.Desc]descInfo{}

func describe(fqName, help string, labels []string) *prometheus.Desc {
	d := prometheus.NewDesc(fqName, help, labels, nil)
	descs[d] = descInfo{fqName, help}
	return d
}

func familyOf(d *prometheus.Desc, typ string) *family {
	i := descs[d]
	return newFamily(i.name, i.help, typ)
}

func histFamilyOf(d *prometheus.Desc, sh shape) *histFamily {
	i := descs[d]
	return newHistFamily(i.name, i.help, sh)
}

// sink is what the family writers below write to: the text format
// (textWriter) or protobuf (protoWriter). Both are written by the same walk
// over one snapshot, so that they cannot disagree on which series exist.
type sink interface {
	// family starts a family; one without samples is left out.
	family(f *family)
	// uint, int and float write one sample of f: the labels of a disk or
	// device, then extra.
	uint(f *family, labels, extra lbl, v uint64)
	int(f *family, labels, extra lbl, v int64)
	float(f *family, labels, extra lbl, v float64)
	// histogram writes one histogram from per-slot counts (not
	// cumulative) whose last slot is +Inf, and the sum of its
	// observations in the family's unit.
	histogram(h *histFamily, labels, extra lbl, slots []uint64, sum float64)
}

// Label pairs that follow a disk's or device's label set.
var (
	opExtra        = extraLabels("op", opNames)
	dirExtra       = opExtra[:len(dirNames)]
	ifaceExtra     = extraLabels("interface", ifaceNames)
	syncExtra      = extraLabels("mode", syncModes)
	cacheReadExtra = extraLabels("result", cacheReadResults)
	cacheWrExtra   = extraLabels("result", cacheWriteResults)
	seekExtra      = extraLabels("reference", []string{"previous", "nearest16"})
	btrfsExtra     = extraLabels("mode", []string{"cow", "nocow"})
	flushJournal   = extra("source", "journal", "kind", "metadata")
	kindExtra      = extraLabels("kind", kindNames)
	// Pairs of extra labels, joined once rather than per series.
	stageFile   = joined(extraLabels("stage", []string{"file"}), dirExtra)[0]
	stageQueue  = joined(extraLabels("stage", []string{"host_queue"}), dirExtra)[0]
	stageDevice = joined(extraLabels("stage", []string{"device"}), dirExtra)[0]
	flushCall   = joined(extraLabels("source", []string{"call"}), kindExtra)[0]
	kindOp      = joined(kindExtra, dirExtra)
)

// joined is each of a followed by each of b.
func joined(a, b []lbl) [][]lbl {
	out := make([][]lbl, len(a))
	for i, x := range a {
		for _, y := range b {
			out[i] = append(out[i], x.and(y))
		}
	}
	return out
}

// diskRow is one disk in a scrape: its labels, escaped once, and its
// kernel counters, read once.
type diskRow struct {
	d      *inventory.Disk
	labels lbl    // domain, uuid, target_device, source_file
	info   lbl    // fspair_disk_info's pairs after labels
	disk   bool   // c holds the disk's counters
	host   bool   // h holds its host-side counters
	c      packed // probe.Counters, read when disk is
	h      packed // bpf.HostImageDeviceCounters, read when host is
	// The request paths the probes do not follow, for
	// fspair_disk_unfollowed: each one's op, path and measure pairs.
	gaps []lbl

	// The guest side (guest.go), when the exporter reads it, and
	// fspair_disk_guest_info's pairs after labels.
	hasGuest  bool
	guest     guest.Status
	guestInfo lbl
}

type deviceRow struct {
	labels lbl
	disks  int
	c      bpf.HostDeviceCounters
}

// snapshot is what one scrape writes: every family is written disk after
// disk, as the format wants each family's series together, so the
// counters are read first.
type snapshot struct {
	disks   []diskRow
	devices []deviceRow
	// Outcome of reading each side, for fspair_scrape_collector_*.
	diskErr, hostErr error
	diskDur, hostDur time.Duration

	// Kept from one reading to the next (the snapshot is reused:
	// Handler.snapshots), so that a label set is escaped and encoded
	// when it changes, not at every scrape (memo.go).
	memo labelMemo
	// The slots read in one batch and the rows they go to.
	slots []uint32
	rows  []int
	// What the rows' packed counters are kept in (packed.go).
	arena wordArena
}

// read fills s from the inventory and the kernel. A disk whose counters
// cannot be read keeps its info series and loses the rest; the error marks
// the scrape of that side failed. Two disks (or devices) with the same
// label set cannot both be exposed: the first one is, the others are
// reported as an error.
func (s *snapshot) read(inv HostLister, counters CounterReader, host HostSource) {
	disks := inv.Disks()
	if cap(s.disks) < len(disks) {
		s.disks = make([]diskRow, 0, len(disks))
	}
	s.disks = s.disks[:0]
	s.devices = s.devices[:0]
	s.diskErr, s.hostErr = nil, nil
	s.arena.reset()

	start := time.Now()
	batch, _ := counters.(BatchCounterReader)
	s.slots, s.rows = s.slots[:0], s.rows[:0]
	m := &s.memo
	m.start(len(disks))
	seen := m.seen
	gapMemo := map[[3]string][]lbl{}
	var errs []error
	for i := range disks {
		d := &disks[i]
		labels, info := m.disk(i, d)
		if seen[labels.text] {
			errs = append(errs, fmt.Errorf("disk %s: label set %s already taken by another disk", d.SourceFile, labels.text))
			continue
		}
		seen[labels.text] = true
		s.disks = append(s.disks, diskRow{d: d, labels: labels, info: info})
		r := &s.disks[len(s.disks)-1]
		if counters != nil {
			r.gaps = m.unfollowed(counters, d, gapMemo)
		}
		if !d.Tracked || counters == nil || batch != nil {
			continue // a batch reader takes them all below
		}
		c, err := counters.Counters(d.Slot)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.c.set(countersWords(&c), &s.arena)
		r.disk = true
	}
	// The tracked disks' slots, for the readers that take them at once.
	for i := range s.disks {
		if r := &s.disks[i]; r.d.Tracked {
			s.slots = append(s.slots, r.d.Slot)
			s.rows = append(s.rows, i)
		}
	}
	failed := func(_ int, err error) { errs = append(errs, err) }
	if batch != nil {
		batch.CountersInto(s.slots, func(i int, c *probe.Counters) {
			r := &s.disks[s.rows[i]]
			r.c.set(countersWords(c), &s.arena)
			r.disk = true
		}, failed)
	}
	s.diskErr = joinErrs(errs)
	s.diskDur = time.Since(start)

	if host == nil {
		return
	}
	start = time.Now()
	errs = errs[:0]
	if hb, ok := host.(BatchHostSource); ok {
		hb.ImageDeviceCountersInto(s.slots, func(i int, h *bpf.HostImageDeviceCounters) {
			r := &s.disks[s.rows[i]]
			r.h.set(hostWordsOf(h), &s.arena)
			r.host = true
		}, failed)
	} else {
		for _, i := range s.rows {
			r := &s.disks[i]
			h, err := host.ImageDeviceCounters(r.d.Slot)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r.h.set(hostWordsOf(&h), &s.arena)
			r.host = true
		}
	}
	clear(seen)
	for _, dev := range inv.Devices() {
		labels := pairs("host_device", hostLabel(dev.Name), "host_fs", hostLabel(dev.FSType),
			"host_mountpoint", hostLabel(dev.MountPoint))
		if seen[labels.text] {
			errs = append(errs, fmt.Errorf("host device %s: label set %s already taken by another device", dev.Name, labels.text))
			continue
		}
		seen[labels.text] = true
		c, err := host.DeviceCounters(dev.Slot)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.devices = append(s.devices, deviceRow{labels: labels, disks: dev.Disks, c: c})
	}
	s.hostErr = joinErrs(errs)
	s.hostDur = time.Since(start)
}

// drop lets go of what the rows point to outside the snapshot (the
// inventory's disks, the guest's readings) when a scrape is done with
// them, keeping the rows' memory and the arena for the next reading: a
// kept snapshot otherwise held the inventory's and the guest poll's
// earlier rounds (at 10,000 disks 5 MB and 4 MB) until the next scrape.
func (s *snapshot) drop() {
	clear(s.disks[:cap(s.disks)])
	s.disks = s.disks[:0]
	clear(s.devices[:cap(s.devices)])
	s.devices = s.devices[:0]
}

// joinErrs keeps the first few errors: one bad map read per disk would
// otherwise make a log line a thousand errors long.
func joinErrs(errs []error) error {
	const keep = 3
	if len(errs) <= keep {
		return errors.Join(errs...)
	}
	return fmt.Errorf("%w (and %d more)", errors.Join(errs[:keep]...), len(errs)-keep)
}

// directFamily writes one family's series for every disk or device.
type directFamily struct {
	name  string
	write func(t sink, s *snapshot)
}

// The writers of the families, one per family, in name order.
var directFamilies = newDirectFamilies()

func newDirectFamilies() []directFamily {
	fams := []directFamily{
		// Per disk, from the disk's counters.
		diskVec(diskRequests, opExtra, opSeen, cRequests),
		diskVec(diskBytes, opExtra, opMovesBytes, cBytes),
		diskVec(diskErrors, opExtra, noneExpected, cErrors),
		diskVec(diskSequential, dirExtra, nil, cSequential),
		diskVec(diskRandom, dirExtra, nil, cRandom),
		diskVec(diskFormatRequests, dirExtra, formatCounted, cFormatRequests),
		diskVec(diskFormatBytes, dirExtra, formatCounted, cFormatBytes),
		diskVec(diskSyncWrites, syncExtra, nil, cSyncWrites),
		diskVec(diskSubmissions, ifaceExtra, ifaceUsed, cSubmissions),
		diskVec(diskPunted, []lbl{{}}, uringUsed, cPunted),
		diskVec(diskCacheReads, cacheReadExtra, cacheClassified, cCacheReads),
		diskVec(diskCacheReadBytes, cacheReadExtra, cacheClassified, cCacheReadBytes),
		diskVec(diskCacheWriteBytes, cacheWrExtra, cacheClassified, cCacheWriteBytes),
		diskHist(diskLatency, latencyShape, func(t sink, h *histFamily, r *diskRow, buf []uint64) {
			for i, e := range opExtra {
				t.histogram(h, r.labels, e, r.c.get(cLatency.at(i, latencyRow), buf), float64(r.c.word(cLatencySum.w(i)))/1e9)
			}
		}),
		diskHist(diskSize, sizeShape, func(t sink, h *histFamily, r *diskRow, buf []uint64) {
			for i, e := range dirExtra {
				t.histogram(h, r.labels, e, r.c.get(cSize.at(i, sizeRow), buf), float64(r.c.word(cSizeSum.w(i))))
			}
		}),
		diskHist(diskSeek, seekShape, func(t sink, h *histFamily, r *diskRow, buf []uint64) {
			// The sums are signed (int64 in the kernel's layout).
			t.histogram(h, r.labels, seekExtra[0], r.c.get(cSeekPrev, buf), float64(int64(r.c.word(cSeekPrevSum.off))))
			t.histogram(h, r.labels, seekExtra[1], r.c.get(cSeekNear, buf), float64(int64(r.c.word(cSeekNearSum.off))))
		}),
		diskHist(diskOutstanding, outstandingShape, func(t sink, h *histFamily, r *diskRow, buf []uint64) {
			t.histogram(h, r.labels, lbl{}, r.c.get(cOutstanding, buf), float64(r.c.word(cOutstandingSum.off)))
		}),
		diskHist(diskInterarrival, interarrivalShape, func(t sink, h *histFamily, r *diskRow, buf []uint64) {
			t.histogram(h, r.labels, lbl{}, r.c.get(cInterarrival, buf), float64(r.c.word(cInterarrivalSum.off))/1e9)
		}),
		stages(),

		// Per disk, from the inventory.
		info(),
		unfollowedFamily(),
		diskGauge(diskVirtualSize, false, func(r *diskRow) (int64, bool) { return r.d.VirtualSize, r.d.VirtualSize > 0 }),

		// Per disk, from the host side.
		diskGauge(diskImageExtents, true, func(r *diskRow) (int64, bool) { return r.d.Layout.Extents, r.d.Layout.Extents >= 0 }),
		diskGauge(diskImageAllocated, true, func(r *diskRow) (int64, bool) { return r.d.Layout.Allocated, true }),
		diskGauge(diskImageApparent, true, func(r *diskRow) (int64, bool) { return r.d.Layout.Apparent, true }),
		btrfsVec(diskBtrfsExtents, hCowExtents, hNocowExtents),
		btrfsVec(diskBtrfsExtentBytes, hCowBytes, hNocowBytes),
		flushVec(diskFlushWrites, hFlushWrites, hFlushJournal),
		flushVec(diskFlushWriteBytes, hFlushWriteBytes, hFlushJournalBytes),
		hostVec(diskFlushCacheFlushes, []lbl{{}}, hFlushCacheFlushes),
		hostVec(diskDeviceRequests, dirExtra, hRequests),
		hostVec(diskDeviceBytes, dirExtra, hBytes),

		// Per host device.
		deviceKindOp(hostDeviceRequests, func(r *deviceRow) *[3][2]uint64 { return &r.c.Requests }),
		deviceKindOp(hostDeviceBytes, func(r *deviceRow) *[3][2]uint64 { return &r.c.Bytes }),
		deviceScalar(hostDeviceCommits, "counter", func(r *deviceRow) uint64 { return r.c.Commits }),
		deviceScalar(hostDeviceFlushes, "counter", func(r *deviceRow) uint64 { return r.c.Flushes }),
		deviceScalar(hostDeviceDiscards, "counter", func(r *deviceRow) uint64 { return r.c.Discards }),
		deviceScalar(hostDeviceDiscardBytes, "counter", func(r *deviceRow) uint64 { return r.c.DiscardBytes }),
		deviceScalar(hostDeviceDisks, "gauge", func(r *deviceRow) uint64 { return uint64(r.disks) }),
		deviceHist(hostDeviceService, func(r *deviceRow) (*[2][25]uint64, *[2]uint64) { return &r.c.Service, &r.c.ServiceSumNs }),
		deviceHist(hostDeviceQueue, func(r *deviceRow) (*[2][25]uint64, *[2]uint64) { return &r.c.Queue, &r.c.QueueSumNs }),
	}
	// Per disk, from the guest side's source.
	fams = append(fams, guestFamilies()...)
	slices.SortFunc(fams, func(a, b directFamily) int { return strings.Compare(a.name, b.name) })
	return fams
}

// directNames are the families written directly; the registry must not
// have any of them.
var directNames = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range directFamilies {
		m[f.name] = true
	}
	return m
}()

// writeDirect writes every direct family of s.
func writeDirect(t sink, s *snapshot) {
	for _, f := range directFamilies {
		f.write(t, s)
	}
}

// diskVec is a counter family with one series per extra label value, for
// each disk whose counters were read. A series is left out while it is
// zero and exp says the disk's configuration cannot count it (nil: every
// value is expected): such structural zeros were 22 of the 75 series of a
// typical disk in native mode (TestSeriesPerDisk), each one a series
// Prometheus stores, 10,000 times over on a large host. The
// value comes first, so that nothing the kernel counted is ever hidden,
// even where the configuration said it could not happen.
func diskVec(d *prometheus.Desc, extra []lbl, exp expect, of field) directFamily {
	f := familyOf(d, "counter")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		buf := make([]uint64, of.n)
		for i := range s.disks {
			r := &s.disks[i]
			if !r.disk {
				continue
			}
			v := r.c.get(of, buf)
			for j, e := range extra {
				if v[j] != 0 || exp == nil || exp(r, j) {
					t.uint(f, r.labels, e, v[j])
				}
			}
		}
	}}
}

// expect says whether the disk's configuration lets the kernel count the
// series of its j-th extra label value. A configuration field that is
// empty (unknown) expects every value, as the exporter cannot rule any out.
type expect func(r *diskRow, j int) bool

// opSeen: read, write and flush are what every guest does; discard,
// write_zeroes and allocate only where the guest and the disk's discard
// setting let them, so their series start once the disk has done one
// (completed or failed).
func opSeen(r *diskRow, j int) bool {
	return everyGuestDoes(opNames[j]) || r.c.word(cRequests.w(j)) != 0 || r.c.word(cErrors.w(j)) != 0
}

// noneExpected: series that start with their first count, whatever the
// configuration. fspair_disk_request_errors_total: a healthy disk has no
// failed request, and its three series at 0 (read, write, flush) were
// series a typical disk had to spare for its guest side (BENCHMARKS.md,
// "Guest latency histograms"). Absent, no request of the operation has
// failed since fspair started following the disk.
func noneExpected(*diskRow, int) bool { return false }

// everyGuestDoes says whether an operation is one every guest does (read,
// write, flush), whose series every disk has from its start; the others'
// start with the disk's first such request, on the image file (opSeen)
// and on the guest side (guestOpSeen) alike.
func everyGuestDoes(op string) bool {
	switch op {
	case "read", "write", "flush":
		return true
	}
	return false
}

// opMovesBytes is opSeen but for flushes, which move no bytes: complete()
// in bpf/disk.h counts 0 bytes for them.
func opMovesBytes(r *diskRow, j int) bool {
	return opNames[j] != "flush" && opSeen(r, j)
}

// formatCounted: the probes tell the format's metadata from the guest's
// data only on images the inventory read as qcow2 (it hands the kernel
// their metadata clusters; format_metadata() in bpf/disk.h checks the
// disk's DISK_QCOW2 flag). An image not yet read, or unreadable, is kept.
func formatCounted(r *diskRow, _ int) bool {
	switch r.d.ImageFormat {
	case diskimage.FormatQcow2, diskimage.FormatUnknown, "":
		return true
	}
	return false
}

// ifaceUsed: QEMU submits reads and writes through the interface of its
// aio mode (threads: plain system calls from its thread pool). syscall is
// expected in every mode: QEMU's thread pool also runs discard and
// write_zeroes (fallocate) in every mode, and the flushes of aio=native
// (fdatasync; QEMU 9.0 added a linux-aio fdsync where the kernel has it),
// and the probes count those as syscall (task_iface() in bpf/disk.h).
func ifaceUsed(r *diskRow, j int) bool {
	var own string
	switch r.d.AIO {
	case "threads":
		own = "syscall"
	case "native":
		own = "linux_aio"
	case "io_uring":
		own = "io_uring"
	default:
		return true
	}
	return ifaceNames[j] == "syscall" || ifaceNames[j] == own
}

// uringUsed: only io_uring requests are punted to io-wq workers.
func uringUsed(r *diskRow, _ int) bool {
	return r.d.AIO == "io_uring" || r.d.AIO == ""
}

// cacheClassified: the host page cache results the probes give a disk's
// reads and writes. The cache modes that open the image with O_DIRECT
// (none, directsync, and direct, which discovery reports for an O_DIRECT
// descriptor whose mode is not known) bypass the cache: direct only. The
// buffered ones never do: every result but direct. io_uring requests are
// not classified at all (rw_enter() in bpf/disk.h leaves them to the
// io_uring tracepoints).
func cacheClassified(r *diskRow, j int) bool {
	if r.d.AIO == "io_uring" {
		return false
	}
	direct := cacheReadResults[j] == "direct" // the same slot in cacheWriteResults
	switch r.d.Cache {
	case "none", "directsync", discovery.CacheDirect:
		return direct
	case "writeback", "writethrough", "unsafe":
		return !direct
	}
	return true
}

// hostVec is diskVec for the host-side counters.
func hostVec(d *prometheus.Desc, extra []lbl, of field) directFamily {
	f := familyOf(d, "counter")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		buf := make([]uint64, of.n)
		for i := range s.disks {
			r := &s.disks[i]
			if !r.host {
				continue
			}
			v := r.h.get(of, buf)
			for j, e := range extra {
				t.uint(f, r.labels, e, v[j])
			}
		}
	}}
}

func diskHist(d *prometheus.Desc, sh shape, each func(t sink, h *histFamily, r *diskRow, buf []uint64)) directFamily {
	h := histFamilyOf(d, sh)
	return directFamily{h.name, func(t sink, s *snapshot) {
		t.family(&h.family)
		buf := make([]uint64, maxField)
		for i := range s.disks {
			if r := &s.disks[i]; r.disk {
				each(t, h, r, buf)
			}
		}
	}}
}

// stages is fspair_disk_stage_seconds: stage=file from the disk's counters
// (the slots of fspair_disk_request_duration_seconds), host_queue and
// device from the host side.
func stages() directFamily {
	h := histFamilyOf(diskStage, stageShape)
	file := histFamilyOf(diskStage, unbucketedLatencyShape) // the same family, no classic bucket
	return directFamily{h.name, func(t sink, s *snapshot) {
		t.family(&h.family)
		buf := make([]uint64, maxField)
		for i := range s.disks {
			r := &s.disks[i]
			for j := range dirExtra {
				if r.disk {
					t.histogram(file, r.labels, stageFile[j], r.c.get(cLatency.at(j, latencyRow), buf), float64(r.c.word(cLatencySum.w(j)))/1e9)
				}
				if r.host {
					t.histogram(h, r.labels, stageQueue[j], r.h.get(hQueue.at(j, hostRow), buf), float64(r.h.word(hQueueSum.w(j)))/1e9)
					t.histogram(h, r.labels, stageDevice[j], r.h.get(hService.at(j, hostRow), buf), float64(r.h.word(hServiceSum.w(j)))/1e9)
				}
			}
		}
	}}
}

// info is fspair_disk_info, for every disk discovered, tracked or not.
func info() directFamily {
	f := familyOf(diskInfo, "gauge")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.disks {
			r := &s.disks[i]
			t.uint(f, r.labels, r.info, 1)
		}
	}}
}

// unfollowedFamily is fspair_disk_unfollowed: one series per request path
// of a disk that the probes do not follow.
func unfollowedFamily() directFamily {
	f := familyOf(diskUnfollowed, "gauge")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.disks {
			r := &s.disks[i]
			for _, g := range r.gaps {
				t.uint(f, r.labels, g, 1)
			}
		}
	}}
}

// diskGauge is a gauge from the inventory, for every disk (host false) or
// for the disks whose host-side counters were read (host true), as the
// collectors sent them.
func diskGauge(d *prometheus.Desc, host bool, get func(r *diskRow) (int64, bool)) directFamily {
	f := familyOf(d, "gauge")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.disks {
			r := &s.disks[i]
			if host && !r.host {
				continue
			}
			if v, ok := get(r); ok {
				t.int(f, r.labels, lbl{}, v)
			}
		}
	}}
}

// btrfsVec is a family counted for images on Btrfs only (the host file
// system as mountinfo names it).
func btrfsVec(d *prometheus.Desc, cow, nocow field) directFamily {
	f := familyOf(d, "counter")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.disks {
			r := &s.disks[i]
			if !r.host || r.d.HostFS.FSType != "btrfs" {
				continue
			}
			v := [2]uint64{r.h.word(cow.off), r.h.word(nocow.off)}
			for j, e := range btrfsExtra {
				t.uint(f, r.labels, e, v[j])
			}
		}
	}}
}

// flushVec is source=call by kind, then source=journal (kind=metadata).
func flushVec(d *prometheus.Desc, calls, journals field) directFamily {
	f := familyOf(d, "counter")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		buf := make([]uint64, calls.n)
		for i := range s.disks {
			r := &s.disks[i]
			if !r.host {
				continue
			}
			call, journal := r.h.get(calls, buf), r.h.word(journals.off)
			for j := range kindExtra {
				t.uint(f, r.labels, flushCall[j], call[j])
			}
			t.uint(f, r.labels, flushJournal, journal)
		}
	}}
}

func deviceKindOp(d *prometheus.Desc, get func(r *deviceRow) *[3][2]uint64) directFamily {
	f := familyOf(d, "counter")
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.devices {
			r := &s.devices[i]
			v := get(r)
			for ki := range kindExtra {
				for oi := range dirExtra {
					t.uint(f, r.labels, kindOp[ki][oi], v[ki][oi])
				}
			}
		}
	}}
}

func deviceScalar(d *prometheus.Desc, typ string, get func(r *deviceRow) uint64) directFamily {
	f := familyOf(d, typ)
	return directFamily{f.name, func(t sink, s *snapshot) {
		t.family(f)
		for i := range s.devices {
			t.uint(f, s.devices[i].labels, lbl{}, get(&s.devices[i]))
		}
	}}
}

func deviceHist(d *prometheus.Desc, get func(r *deviceRow) (*[2][25]uint64, *[2]uint64)) directFamily {
	h := histFamilyOf(d, latencyShape)
	return directFamily{h.name, func(t sink, s *snapshot) {
		t.family(&h.family)
		for i := range s.devices {
			r := &s.devices[i]
			slots, sums := get(r)
			for j, op := range dirExtra {
				t.histogram(h, r.labels, op, slots[j][:], float64(sums[j])/1e9)
			}
		}
	}}
}
