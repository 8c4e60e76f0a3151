package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	bpf "github.com/fspair/fspair/bpf/obj"
	"github.com/fspair/fspair/exporter/inventory"
)

// kindNames are the label values of enum kind in bpf/host.bpf.c, in order.
var kindNames = []string{"data", "metadata", "other"}

var deviceLabels = []string{"host_device", "host_fs", "host_mountpoint"}

func deviceDesc(name, help string, extra ...string) *prometheus.Desc {
	return describe(prometheus.BuildFQName(namespace, "host_device", name), help,
		append(append([]string{}, deviceLabels...), extra...))
}

var (
	diskDeviceRequests = diskDesc("device_requests_total",
		"Requests the host block device completed for this disk's image data (buffered writeback and direct I/O).", "op")
	diskDeviceBytes = diskDesc("device_bytes_total",
		"Bytes the host block device moved for this disk's image data.", "op")
	// The stages of a request, as esxtop's GAVG = KAVG + DAVG: stage=file is
	// the request on the image file as the VMM waits for it (the same data
	// as fspair_disk_request_duration_seconds), host_queue the image's data
	// requests in the host I/O scheduler, device their service on the host
	// device. file minus the other two is the host file system's share.
	diskStage = diskDesc("stage_seconds",
		"Latency by stage: file (the image file request the VMM waits for), host_queue (host I/O scheduler), device (host device service).", "stage", "op")

	diskBtrfsExtents = diskDesc("btrfs_extents_total",
		"Btrfs ordered extents written for the image: mode=cow allocates new space, mode=nocow writes in place (NOCOW file or preallocated).", "mode")
	diskBtrfsExtentBytes = diskDesc("btrfs_extent_bytes_total",
		"Bytes of Btrfs ordered extents written for the image, by mode.", "mode")
	// The cost of the disk's flushes on the device: source=call is what
	// the flushing thread itself queued (the writeback the flush forces,
	// the file system's log writes done in its context), by kind;
	// source=journal the journal threads' writes while its flush waited
	// (jbd2, XFS log workers), charged to the disk whose flush started last.
	diskFlushWrites = diskDesc("flush_device_writes_total",
		"Device writes caused by the disk's flushes (fdatasync/fsync on the image): source=call queued by the flushing thread, by kind; source=journal by journal threads while the flush waited.", "source", "kind")
	diskFlushWriteBytes = diskDesc("flush_device_write_bytes_total",
		"Bytes of device writes caused by the disk's flushes, by source and kind.", "source", "kind")
	diskFlushCacheFlushes = diskDesc("flush_device_cache_flushes_total",
		"Device cache flushes (flush requests or preflush writes) the disk's flushes caused, in the flushing thread or the journal threads.")
	diskImageExtents = diskDesc("image_extents",
		"Extents of the image file on the host file system (FIEMAP), refreshed on the image refresh interval.")
	diskImageAllocated = diskDesc("image_allocated_bytes",
		"Space the image file takes on the host file system (st_blocks).")
	diskImageApparent = diskDesc("image_apparent_bytes",
		"Size of the image file.")
	hostDeviceCommits = deviceDesc("commits_total",
		"Journal commits of the host file system: jbd2 commits (ext4), log buffer writes (XFS), transaction commits (Btrfs).")
	hostDeviceRequests = deviceDesc("requests_total",
		"Requests the host block device completed, by kind: data (a tracked image's), metadata (journal and file system metadata), other.", "kind", "op")
	hostDeviceBytes = deviceDesc("bytes_total",
		"Bytes the host block device moved, by kind and operation.", "kind", "op")
	hostDeviceFlushes = deviceDesc("flushes_total",
		"Flush requests (cache flushes without data) the host block device completed.")
	hostDeviceDiscards = deviceDesc("discards_total",
		"Discard requests the host block device completed.")
	hostDeviceDiscardBytes = deviceDesc("discard_bytes_total",
		"Bytes the host block device discarded.")
	hostDeviceService = deviceDesc("service_seconds",
		"Device service time (issue to completion) of all read and write requests on the host device.", "op")
	hostDeviceQueue = deviceDesc("queue_seconds",
		"Time requests waited in the host I/O scheduler (insert to issue).", "op")
	hostDeviceDisks = deviceDesc("vm_disks",
		"Tracked VM disks whose image lives on this host block device.")
)

// HostSource reads the host-side kernel counters.
type HostSource interface {
	DeviceCounters(slot uint32) (bpf.HostDeviceCounters, error)
	ImageDeviceCounters(slot uint32) (bpf.HostImageDeviceCounters, error)
}

// BatchHostSource reads many disks' host-side counters at once, as
// BatchCounterReader.
type BatchHostSource interface {
	ImageDeviceCountersInto(slots []uint32, got func(i int, h *bpf.HostImageDeviceCounters), failed func(i int, err error))
}

// HostLister lists disks and their host devices.
type HostLister interface {
	DiskLister
	Devices() []inventory.Device
}

// HostCollector exports what the host block layer does under each disk.
type HostCollector struct {
	inv HostLister
	src HostSource
}

// NewHostCollector returns the host collector.
func NewHostCollector(inv HostLister, src HostSource) *HostCollector {
	return &HostCollector{inv: inv, src: src}
}

// Update implements Collector.
func (c *HostCollector) Update(ch chan<- prometheus.Metric) error {
	for _, d := range c.inv.Disks() {
		if d.Tracked {
			if err := c.updateDisk(ch, d); err != nil {
				return err
			}
		}
	}
	for _, dev := range c.inv.Devices() {
		if err := c.updateDevice(ch, dev); err != nil {
			return err
		}
	}
	return nil
}

// latency sends a latency histogram whose sum the kernel keeps in ns.
func latency(ch chan<- prometheus.Metric, desc *prometheus.Desc, sh shape, slots []uint64, sumNs uint64, labels ...string) error {
	m, err := histogram(desc, sh, slots, float64(sumNs)/1e9, labels...)
	if err == nil {
		ch <- m
	}
	return err
}

func (c *HostCollector) updateDisk(ch chan<- prometheus.Metric, d inventory.Disk) error {
	s, err := c.src.ImageDeviceCounters(d.Slot)
	if err != nil {
		return err
	}
	k := []string{d.Domain, d.UUID, d.TargetDevice, d.SourceFile}
	gauge := func(desc *prometheus.Desc, v int64, l ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), with(k, l...)...)
	}
	counter := func(desc *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), with(k, l...)...)
	}
	if d.Layout.Extents >= 0 {
		gauge(diskImageExtents, d.Layout.Extents)
	}
	gauge(diskImageAllocated, d.Layout.Allocated)
	gauge(diskImageApparent, d.Layout.Apparent)
	if d.HostFS.FSType == "btrfs" {
		counter(diskBtrfsExtents, s.CowExtents, "cow")
		counter(diskBtrfsExtents, s.NocowExtents, "nocow")
		counter(diskBtrfsExtentBytes, s.CowBytes, "cow")
		counter(diskBtrfsExtentBytes, s.NocowBytes, "nocow")
	}
	for i, kind := range kindNames {
		counter(diskFlushWrites, s.FlushWrites[i], "call", kind)
		counter(diskFlushWriteBytes, s.FlushWriteBytes[i], "call", kind)
	}
	counter(diskFlushWrites, s.FlushJournalWrites, "journal", "metadata")
	counter(diskFlushWriteBytes, s.FlushJournalBytes, "journal", "metadata")
	counter(diskFlushCacheFlushes, s.FlushCacheFlushes)
	for i, op := range dirNames {
		counter(diskDeviceRequests, s.Requests[i], op)
		counter(diskDeviceBytes, s.Bytes[i], op)
		// stage=file comes from the disk collector, which holds those counters.
		if err := latency(ch, diskStage, stageShape, s.Queue[i][:], s.QueueSumNs[i], with(k, "host_queue", op)...); err != nil {
			return err
		}
		if err := latency(ch, diskStage, stageShape, s.Service[i][:], s.ServiceSumNs[i], with(k, "device", op)...); err != nil {
			return err
		}
	}
	return nil
}

func (c *HostCollector) updateDevice(ch chan<- prometheus.Metric, dev inventory.Device) error {
	s, err := c.src.DeviceCounters(dev.Slot)
	if err != nil {
		return err
	}
	k := []string{hostLabel(dev.Name), hostLabel(dev.FSType), hostLabel(dev.MountPoint)}
	counter := func(desc *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), with(k, l...)...)
	}
	for ki, kind := range kindNames {
		for i, op := range dirNames {
			counter(hostDeviceRequests, s.Requests[ki][i], kind, op)
			counter(hostDeviceBytes, s.Bytes[ki][i], kind, op)
		}
	}
	counter(hostDeviceCommits, s.Commits)
	counter(hostDeviceFlushes, s.Flushes)
	counter(hostDeviceDiscards, s.Discards)
	counter(hostDeviceDiscardBytes, s.DiscardBytes)
	ch <- prometheus.MustNewConstMetric(hostDeviceDisks, prometheus.GaugeValue, float64(dev.Disks), k...)
	for i, op := range dirNames {
		if err := latency(ch, hostDeviceService, latencyShape, s.Service[i][:], s.ServiceSumNs[i], with(k, op)...); err != nil {
			return err
		}
		if err := latency(ch, hostDeviceQueue, latencyShape, s.Queue[i][:], s.QueueSumNs[i], with(k, op)...); err != nil {
			return err
		}
	}
	return nil
}
