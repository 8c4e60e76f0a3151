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
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "host_device", name), help,
		append(append([]string{}, deviceLabels...), extra...), nil)
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
	diskImageExtents = diskDesc("image_extents",
		"Extents of the image file on the host file system (FIEMAP), refreshed on the image refresh interval.")
	diskImageAllocated = diskDesc("image_allocated_bytes",
		"Space the image file takes on the host file system (st_blocks).")
	diskImageApparent = diskDesc("image_apparent_bytes",
		"Size of the image file.")
	hostDeviceCommits = deviceDesc("commits_total",
		"Journal commits of the host file system: jbd2 commits (ext4), log forces (XFS), transaction commits (Btrfs).")
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
		if !d.Tracked {
			continue
		}
		s, err := c.src.ImageDeviceCounters(d.Slot)
		if err != nil {
			return err
		}
		k := []string{d.Domain, d.UUID, d.TargetDevice, d.SourceFile}
		if d.Layout.Extents >= 0 {
			ch <- prometheus.MustNewConstMetric(diskImageExtents, prometheus.GaugeValue, float64(d.Layout.Extents), k...)
		}
		ch <- prometheus.MustNewConstMetric(diskImageAllocated, prometheus.GaugeValue, float64(d.Layout.Allocated), k...)
		ch <- prometheus.MustNewConstMetric(diskImageApparent, prometheus.GaugeValue, float64(d.Layout.Apparent), k...)
		if d.HostFS.FSType == "btrfs" {
			ch <- prometheus.MustNewConstMetric(diskBtrfsExtents, prometheus.CounterValue, float64(s.CowExtents), with(k, "cow")...)
			ch <- prometheus.MustNewConstMetric(diskBtrfsExtents, prometheus.CounterValue, float64(s.NocowExtents), with(k, "nocow")...)
			ch <- prometheus.MustNewConstMetric(diskBtrfsExtentBytes, prometheus.CounterValue, float64(s.CowBytes), with(k, "cow")...)
			ch <- prometheus.MustNewConstMetric(diskBtrfsExtentBytes, prometheus.CounterValue, float64(s.NocowBytes), with(k, "nocow")...)
		}
		for i, op := range dirNames {
			l := with(k, op)
			ch <- prometheus.MustNewConstMetric(diskDeviceRequests, prometheus.CounterValue, float64(s.Requests[i]), l...)
			ch <- prometheus.MustNewConstMetric(diskDeviceBytes, prometheus.CounterValue, float64(s.Bytes[i]), l...)
			for _, h := range []struct {
				stage string
				slots []uint64
				sum   uint64
			}{
				// stage=file comes from the disk collector, which holds those counters.
				{"host_queue", s.Queue[i][:], s.QueueSumNs[i]},
				{"device", s.Service[i][:], s.ServiceSumNs[i]},
			} {
				m, err := histogram(diskStage, latencyBounds, h.slots, float64(h.sum)/1e9, with(k, h.stage, op)...)
				if err != nil {
					return err
				}
				ch <- m
			}
		}
	}
	for _, dev := range c.inv.Devices() {
		s, err := c.src.DeviceCounters(dev.Slot)
		if err != nil {
			return err
		}
		k := []string{dev.Name, dev.FSType, dev.MountPoint}
		for ki, kind := range kindNames {
			for i, op := range dirNames {
				ch <- prometheus.MustNewConstMetric(hostDeviceRequests, prometheus.CounterValue, float64(s.Requests[ki][i]), with(k, kind, op)...)
				ch <- prometheus.MustNewConstMetric(hostDeviceBytes, prometheus.CounterValue, float64(s.Bytes[ki][i]), with(k, kind, op)...)
			}
		}
		ch <- prometheus.MustNewConstMetric(hostDeviceCommits, prometheus.CounterValue, float64(s.Commits), k...)
		ch <- prometheus.MustNewConstMetric(hostDeviceFlushes, prometheus.CounterValue, float64(s.Flushes), k...)
		ch <- prometheus.MustNewConstMetric(hostDeviceDiscards, prometheus.CounterValue, float64(s.Discards), k...)
		ch <- prometheus.MustNewConstMetric(hostDeviceDiscardBytes, prometheus.CounterValue, float64(s.DiscardBytes), k...)
		ch <- prometheus.MustNewConstMetric(hostDeviceDisks, prometheus.GaugeValue, float64(dev.Disks), k...)
		for i, op := range dirNames {
			for _, h := range []struct {
				desc  *prometheus.Desc
				slots []uint64
				sum   uint64
			}{{hostDeviceService, s.Service[i][:], s.ServiceSumNs[i]}, {hostDeviceQueue, s.Queue[i][:], s.QueueSumNs[i]}} {
				m, err := histogram(h.desc, latencyBounds, h.slots, float64(h.sum)/1e9, with(k, op)...)
				if err != nil {
					return err
				}
				ch <- m
			}
		}
	}
	return nil
}
