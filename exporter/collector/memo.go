package collector

import (
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
)

// labelMemo keeps the label runs a reading built, for the next reading of
// the same snapshot: escaping and encoding each disk's label sets anew at
// every scrape was a tenth of the exporter's CPU at 10,000 disks with the
// guest poll running (a perf profile of the scrape bench's qmp row,
// BENCHMARKS.md), and the values they are built from seldom change. A
// run is reused only where every value it was built from is the same
// (compared, never assumed), so what is written is what building it
// afresh would write.
type labelMemo struct {
	// disks[i] is the runs of the inventory's i-th disk at the last
	// reading: a disk keeps its position while the inventory does not
	// change.
	disks []diskMemo
	// The runs of the guest's statuses and of the paths the probes do
	// not follow, by their values: a few constants each
	// (guest.Status*, probe.Gap), bounded all the same.
	guest map[[3]string]lbl
	gaps  map[probe.Gap]lbl
	// seen is the label sets taken in the reading under way (read).
	seen map[string]bool
}

// maxMemoRuns bounds each map of labelMemo: values from a fixed set stay
// far below it; should they not, the map starts over.
const maxMemoRuns = 256

// diskMemo is a disk's label set and fspair_disk_info's pairs, with the
// values they were built from.
type diskMemo struct {
	set        bool
	key        [4]string
	labels     lbl
	infoValues [9]string
	info       lbl
}

// start readies the memo for a reading of n disks.
func (m *labelMemo) start(n int) {
	if len(m.disks) < n {
		m.disks = append(m.disks, make([]diskMemo, n-len(m.disks))...)
	}
	// Disks gone from the end of the list: their runs go with them.
	clear(m.disks[n:])
	m.disks = m.disks[:n]
	if m.seen == nil {
		m.seen = make(map[string]bool, n)
	}
	clear(m.seen)
}

// disk returns the label set of the i-th disk d of the inventory and its
// fspair_disk_info pairs.
func (m *labelMemo) disk(i int, d *inventory.Disk) (labels, info lbl) {
	e := &m.disks[i]
	key := [4]string{d.Domain, d.UUID, d.TargetDevice, d.SourceFile}
	if !e.set || e.key != key {
		e.key = key
		e.labels = pairs("domain", d.Domain, "uuid", d.UUID, "target_device", d.TargetDevice, "source_file", d.SourceFile)
	}
	iv := [9]string{d.ImageFormat, d.GuestFS, d.GuestFSSource, d.HostFS.FSType, d.HostFS.MountPoint, d.HostFS.Device,
		d.Cache, d.AIO, d.Source}
	if !e.set || e.infoValues != iv {
		e.infoValues = iv
		e.info = extra(
			"format", orUnknown(d.ImageFormat), "guest_fs", orUnknown(d.GuestFS), "guest_fs_source", d.GuestFSSource,
			"host_fs", orUnknown(hostLabel(d.HostFS.FSType)), "host_mountpoint", hostLabel(d.HostFS.MountPoint),
			"host_device", hostLabel(d.HostFS.Device), "cache", orUnknown(d.Cache), "aio", orUnknown(d.AIO),
			"discovery", d.Source)
	}
	e.set = true
	return e.labels, e.info
}

// guestInfo is fspair_disk_guest_info's pairs after a disk's label set.
func (m *labelMemo) guestInfo(source, status, histogram string) lbl {
	k := [3]string{source, status, histogram}
	if l, ok := m.guest[k]; ok {
		return l
	}
	if m.guest == nil || len(m.guest) >= maxMemoRuns {
		m.guest = map[[3]string]lbl{}
	}
	l := extra("source", source, "status", status, "histogram", histogram)
	m.guest[k] = l
	return l
}

// unfollowed is the pairs of fspair_disk_unfollowed's series of a disk,
// one a path the probes do not follow; the probes are asked once per
// reading for each host file system, cache and aio mode (byMode): disks
// that share them share the answer.
func (m *labelMemo) unfollowed(counters CounterReader, d *inventory.Disk, byMode map[[3]string][]lbl) []lbl {
	if !d.Tracked {
		return nil
	}
	k := [3]string{d.HostFS.FSType, d.Cache, d.AIO}
	if runs, ok := byMode[k]; ok {
		return runs
	}
	var runs []lbl
	for _, g := range unfollowed(counters, d) {
		l, ok := m.gaps[g]
		if !ok {
			if m.gaps == nil || len(m.gaps) >= maxMemoRuns {
				m.gaps = map[probe.Gap]lbl{}
			}
			l = extra("op", g.Op, "path", g.Path, "measure", g.Missing)
			m.gaps[g] = l
		}
		runs = append(runs, l)
	}
	byMode[k] = runs
	return runs
}
