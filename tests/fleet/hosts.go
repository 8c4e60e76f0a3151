package fleet

import "github.com/fspair/fspair/tests/alerting"

// Host is one simulated KVM host of the lab fleet: its name (the host
// external label) and the VM disks its exporter serves.
type Host struct {
	Name  string
	Disks []alerting.SyntheticDisk
}

// SharedImage is the image path every host of the lab has a disk at, and
// SharedInstance what every host's exporter is called when its Prometheus
// scrapes it locally: in a real fleet both repeat across hosts, and only
// the host label keeps their series apart.
const (
	SharedImage    = "/var/lib/libvirt/images/mail.raw"
	SharedInstance = "localhost:9477"
)

// The mail VM of kvm-1 and kvm-3 is one libvirt definition copied between
// hosts, UUID and all: the two disks have the same identity labels.
const clonedUUID = "6f1d0c2e-0000-4000-8000-00000000a001"

// Hosts is the lab fleet: three hosts, each with a mail VM whose image is
// SharedImage, and one more VM of another workload. Mail runs on ext4 in
// ext4 on kvm-1 and kvm-3 and on xfs in btrfs on kvm-2, where the host
// writes about 2.5 times as much per guest byte (tests/alerting
// HostAmplification): kvm-2's disk is worse than the fleet's best mail pair
// (FspairWriteAmplificationHigh), which only the fleet can tell, since on
// kvm-2 alone its pair is the best one seen.
func Hosts() []Host {
	mail := func(uuid, guestFS, hostFS, dev string) alerting.SyntheticDisk {
		return alerting.SyntheticDisk{
			Domain: "mail", UUID: uuid, TargetDevice: "vda", SourceFile: SharedImage, Format: "raw",
			GuestFS: guestFS, HostFS: hostFS, HostDevice: dev, HostMountpoint: "/var/lib/libvirt/images",
			Workload: alerting.WorkloadMail,
		}
	}
	other := func(domain, uuid, guestFS, hostFS, dev, mount string, w alerting.Workload) alerting.SyntheticDisk {
		return alerting.SyntheticDisk{
			Domain: domain, UUID: uuid, TargetDevice: "vda", SourceFile: mount + "/" + domain + ".qcow2", Format: "qcow2",
			GuestFS: guestFS, HostFS: hostFS, HostDevice: dev, HostMountpoint: mount, Workload: w,
		}
	}
	return []Host{
		{Name: "kvm-1", Disks: []alerting.SyntheticDisk{
			mail(clonedUUID, "ext4", "ext4", "/dev/sdb"),
			other("web", "6f1d0c2e-0000-4000-8000-00000000b001", "xfs", "xfs", "/dev/sdc", "/srv/xfs", alerting.WorkloadWeb),
		}},
		{Name: "kvm-2", Disks: []alerting.SyntheticDisk{
			mail("6f1d0c2e-0000-4000-8000-00000000a002", "xfs", "btrfs", "/dev/sdb"),
			other("files", "6f1d0c2e-0000-4000-8000-00000000b002", "ext4", "xfs", "/dev/sdc", "/srv/xfs", alerting.WorkloadFileserver),
		}},
		{Name: "kvm-3", Disks: []alerting.SyntheticDisk{
			mail(clonedUUID, "ext4", "ext4", "/dev/sdb"),
			other("rfa", "6f1d0c2e-0000-4000-8000-00000000b003", "xfs", "ext4", "/dev/sdc", "/srv/ext4", alerting.WorkloadRFA),
		}},
	}
}
