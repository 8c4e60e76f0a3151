package main

import "fmt"

// The guest path (exporter/guest, the fspair_disk_guest_* families): what
// the guest asked of its virtio disk against what QEMU did on the image
// file (merge ratio, flushes elided, request sizes before and after
// merging), and latency by layer from the guest to the device.
//
// Latency layers are means per request as the guest sees them, so that
// guest = vmm + image_file holds for every operation:
//
//   - guest: the guest's request time per guest request (QEMU's
//     *_total_time_ns per *_operations).
//   - image_file: the image-file time each guest request waited for. A
//     read or write waits for the whole image-file request that carries it,
//     merged or not: the mean image-file request time. A flush waits for an
//     image-file flush only when QEMU did not skip it: the image-file flush
//     time per guest flush.
//   - vmm: guest minus image_file, what QEMU's own handling adds (esxtop's
//     GAVG - DAVG for the VM).
//   - host_queue, device: mean time of the host block layer's requests for
//     the image in the I/O scheduler and at the device (reads and writes).
//     With direct I/O they sit inside the image-file request; with the host
//     page cache, writes complete before their writeback.
//
// Without a guest side (no QMP socket, libvirt down) only the image_file,
// host_queue and device layers exist, and image_file of flushes is then the
// mean image-file flush time.

const (
	guestPathName = "domain_disk:fspair_disk_guest_path_latency_seconds:mean${w}"
	pairModeBy    = "guest_fs, host_fs, aio, cache"
)

func layer(l string) [2]string { return [2]string{"layer", l} }

func guestRules(w window, t *Thresholds) []Rule {
	minReq := num(t.Efficiency.MinStageRequestsRate.V())
	rate := func(name, metric, sel, comment string) Rule {
		return rec(w, name, fmt.Sprintf("sum by (${disk}, op) (rate(%s{${job}, %s}[${w}]))", metric, sel), comment)
	}
	return []Rule{
		rate("domain_disk:fspair_disk_guest_requests:rate${w}", "fspair_disk_guest_requests_total", `op=~"read|write|flush"`,
			"Guest requests per second, by operation: what the guest's virtio device asked, before QEMU merged adjacent ones and skipped empty flushes."),
		rate("domain_disk:fspair_disk_guest_bytes:rate${w}", "fspair_disk_guest_bytes_total", `op=~"read|write"`,
			"Bytes per second the guest read and wrote."),
		rate("domain_disk:fspair_disk_guest_merged_requests:rate${w}", "fspair_disk_guest_merged_requests_total", `op=~"read|write"`,
			"Guest requests per second QEMU merged into an adjacent one (QMP sources only)."),
		rate("domain_disk:fspair_disk_guest_request_duration_seconds:rate${w}", "fspair_disk_guest_request_duration_seconds_total", `op=~"read|write|flush"`,
			"Guest request time per second, by operation, as the guest sees it."),
		rec(w, "domain_disk:fspair_disk_guest_merge:ratio_rate${w}", `
  domain_disk:fspair_disk_guest_requests:rate${w}{op=~"read|write"}
/
  (domain_disk:fspair_disk_requests:rate${w}{op=~"read|write"} > 0)`,
			"Merge ratio: guest requests per image-file request, reads and writes (1: QEMU merged none)."),
		rec(w, "domain_disk:fspair_disk_guest_flushes_elided:rate${w}", `
clamp_min(
    domain_disk:fspair_disk_guest_requests:rate${w}{op="flush"}
  - domain_disk:fspair_disk_requests:rate${w}{op="flush"},
  0
)`,
			"Guest flushes per second that QEMU answered without an image-file flush (nothing written since the last). "+
				"qcow2 may flush the file for its own metadata too; the difference is then floored at 0."),
		rec(w, "domain_disk:fspair_disk_guest_flushes_elided:ratio_rate${w}", `
  domain_disk:fspair_disk_guest_flushes_elided:rate${w}
/
  (domain_disk:fspair_disk_guest_requests:rate${w}{op="flush"} > 0)`,
			"Share of the guest's flushes that QEMU elided."),
		rec(w, "domain_disk:fspair_disk_guest_request_size_bytes:mean${w}", `
  domain_disk:fspair_disk_guest_bytes:rate${w}
/
  (domain_disk:fspair_disk_guest_requests:rate${w}{op=~"read|write"} > 0)`,
			"Mean guest read and write size, before QEMU merged requests (domain_disk:fspair_disk_request_size_bytes: after)."),

		rec(w, guestPathName, `
  domain_disk:fspair_disk_guest_request_duration_seconds:rate${w}
/
  (domain_disk:fspair_disk_guest_requests:rate${w} >= `+minReq+`)`,
			"Latency by layer, guest: the guest's mean request time, by operation, over at least efficiency.min_stage_requests_per_second requests.",
			layer("guest")),
		rec(w, guestPathName, `
  sum without (stage) (domain_disk:fspair_disk_stage_seconds:mean${w}{stage="file", op=~"read|write"})
or
    domain_disk:fspair_disk_request_duration_seconds_sum:rate${w}{op="flush"}
  /
    (domain_disk:fspair_disk_guest_requests:rate${w}{op="flush"} >= `+minReq+`)
or
  domain_disk:fspair_disk_request_duration_seconds:mean${w}{op="flush"}`,
			"Latency by layer, image_file: the image-file time a guest request waited for. Reads and writes: the mean "+
				"image-file request time (a merged request carries several guest requests, each waiting for all of it). "+
				"Flushes: image-file flush time per guest flush, as skipped flushes wait for none; without a guest side, "+
				"the mean image-file flush time.",
			layer("image_file")),
		rec(w, guestPathName, `
  `+x(w, guestPathName)+`{layer="guest"}
- ignoring (layer)
  `+x(w, guestPathName)+`{layer="image_file"}`,
			"Latency by layer, vmm: guest minus image_file, the time QEMU itself adds to a guest request.",
			layer("vmm")),
		rec(w, guestPathName, `
  sum by (${disk}, op) (`+counterRate("fspair_disk_stage_seconds_sum", `${job}, stage="host_queue"`)+`)
/
  (sum by (${disk}, op) (`+counterRate("fspair_disk_stage_seconds_count", `${job}, stage="host_queue"`)+`) >= `+minReq+`)`,
			"Latency by layer, host_queue: mean time the image's host block requests waited in the I/O scheduler, reads and writes.",
			layer("host_queue")),
		rec(w, guestPathName, `
sum without (stage) (domain_disk:fspair_disk_stage_seconds:mean${w}{stage="device"})`,
			"Latency by layer, device: mean device service time of the image's host block requests, reads and writes.",
			layer("device")),

		rec(w, "pair_mode:fspair_disk_guest_merge:median_ratio_rate${w}", `
quantile by (`+pairModeBy+`, op) (0.5,
    domain_disk:fspair_disk_guest_merge:ratio_rate${w}
  * on (${disk}) group_left (`+pairModeBy+`)
    fspair_disk_info{${job}}
)`,
			"Fleet: median merge ratio of the disks of each guest/host pair, aio and cache mode."),
		rec(w, "pair_mode:fspair_disk_guest_flushes_elided:median_ratio_rate${w}", `
quantile by (`+pairModeBy+`) (0.5,
    domain_disk:fspair_disk_guest_flushes_elided:ratio_rate${w}
  * on (${disk}) group_left (`+pairModeBy+`)
    fspair_disk_info{${job}}
)`,
			"Fleet: median share of guest flushes elided, by pair, aio and cache mode."),
		rec(w, "pair_mode:fspair_disk_guest_vmm_latency_seconds:median_mean${w}", `
quantile by (`+pairModeBy+`, op) (0.5,
    sum without (layer) (`+x(w, guestPathName)+`{layer="vmm"})
  * on (${disk}) group_left (`+pairModeBy+`)
    fspair_disk_info{${job}}
)`,
			"Fleet: median VMM share of the guest's request latency, by pair, aio and cache mode, and operation."),
		rec(w, "pair_mode:fspair_disk_guest_disks:count", `
count by (`+pairModeBy+`) (
    max by (${disk}) (fspair_disk_guest_info{${job}, status="ok"})
  * on (${disk}) group_left (`+pairModeBy+`)
    fspair_disk_info{${job}}
)`,
			"Fleet: disks whose guest side is read, by pair, aio and cache mode."),
	}
}
