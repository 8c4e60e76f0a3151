package main

import (
	"fmt"
	"strings"
)

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
	// guestTimeOps are the operations whose guest request time the rules read.
	guestTimeOps = `op=~"read|write|flush"`
)

func layer(l string) [2]string { return [2]string{"layer", l} }

func guestRules(w window, t *Thresholds) []Rule {
	minReq := num(t.Efficiency.MinStageRequestsRate.V())
	rate := func(name, metric, sel, comment string) Rule {
		return rec(w, name, fmt.Sprintf("sum by (${disk}, op) (rate(%s{${job}, %s}[${w}]))", metric, sel), comment)
	}
	rules := []Rule{
		rate("domain_disk:fspair_disk_guest_requests:rate${w}", "fspair_disk_guest_requests_total", `op=~"read|write|flush"`,
			"Guest requests per second, by operation: what the guest's virtio device asked, before QEMU merged adjacent ones and skipped empty flushes."),
		rate("domain_disk:fspair_disk_guest_bytes:rate${w}", "fspair_disk_guest_bytes_total", `op=~"read|write"`,
			"Bytes per second the guest read and wrote."),
		rec(w, "domain_disk:fspair_disk_guest_request_duration_seconds:rate${w}", `
sum by (${disk}, op) (
    rate(fspair_disk_guest_request_duration_seconds_total{${job}, `+guestTimeOps+`}[${w}])
  or
    `+strings.ReplaceAll(counterRate("fspair_disk_guest_request_duration_seconds_sum", "${job}, "+guestTimeOps), " or ", "\n  or\n    ")+`
)`,
			"Guest request time per second, by operation, as the guest sees it: QEMU's total time (the _total counter) "+
				"where the exporter writes it, else the sum of the operation's latency histogram, which carries the same "+
				"time (the exporter writes one of the two for an operation): its classic _sum, or the native histogram's sum."),
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
	}
	rules = append(rules, guestShareRules(w)...)
	return append(rules,
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
	)
}

// Latency by layer as distributions and shares (issue 38): the quantiles of
// each layer's histogram, the share of the guest's mean request time each
// layer below the guest holds, and the layer holding the most.
const (
	guestQuantileName = "domain_disk:fspair_disk_guest_path_latency_seconds:quantile${w}"
	guestShareName    = "domain_disk:fspair_disk_guest_path_latency:ratio${w}"
	guestTopLayerName = "domain_disk:fspair_disk_guest_path_top_layer:info"
)

// guestQuantiles are the quantiles recorded for every layer, as PromQL
// numbers and quantile label values.
var guestQuantiles = []string{"0.5", "0.99"}

// guestQuantileLayers are the layers with a latency histogram: the
// histogram, its selector, and the request rate (recorded by an earlier
// rule, one series per disk and operation) that must reach
// efficiency.min_stage_requests_per_second for the layer's quantiles to be
// recorded, as for its mean.
var guestQuantileLayers = []struct {
	layer, metric, sel, requests, comment string
}{
	{"guest", "fspair_disk_guest_request_duration_seconds", `${job}, op=~"read|write|flush"`,
		"domain_disk:fspair_disk_guest_requests:rate${w}",
		"guest: QEMU's latency histogram of the guest's requests (read, write, flush), as the guest sees them; " +
			"only where fspair_disk_guest_info{histogram=\"ok\"}."},
	{"image_file", "fspair_disk_request_duration_seconds", `${job}, op=~"read|write|flush"`,
		"domain_disk:fspair_disk_requests:rate${w}",
		"image_file: the image file's requests (read, write, flush). Unlike the layer's mean, a quantile of " +
			"image-file requests: a merged request counts once, a flush QEMU skipped not at all."},
	{"device", "fspair_disk_stage_seconds", `${job}, stage="device", op=~"read|write"`,
		`sum without (stage) (domain_disk:fspair_disk_stage_seconds_count:rate${w}{stage="device"})`,
		"device: device service time of the image's host block requests (read, write)."},
}

// guestQuantileRules record each layer's median and 99th percentile. Each
// rule reads its raw histogram once (its classic and its native form, one of
// which is empty); the two quantiles of a layer read it once each. Recording
// the buckets' rates once and taking both quantiles from them would read it
// once, but in the classic layouts store a series per bucket again (13 for
// the guest and image-file histograms, 9 for the device's, per operation:
// 96 series a disk, 960,000 at 10,000 disks) where these rules store 16.
func guestQuantileRules(w window, t *Thresholds) []Rule {
	minReq := num(t.Efficiency.MinStageRequestsRate.V())
	var out []Rule
	for _, l := range guestQuantileLayers {
		for _, q := range guestQuantiles {
			out = append(out, rec(w, guestQuantileName, `
(
`+histogramQuantile(q, l.metric, l.sel)+`
)
and
  `+l.requests+` >= `+minReq,
				"Latency by layer, quantile "+q+" over ${w}, "+l.comment+
					" Only where the layer had at least efficiency.min_stage_requests_per_second requests, as its mean.",
				layer(l.layer), [2]string{"quantile", q}))
		}
	}
	return windowComments(w, out)
}

// guestShareRules split the guest's mean request time among the layers below
// it, then name the layer holding the most. In the order they read each
// other: vmm, device, host_fs, the top layer.
func guestShareRules(w window) []Rule {
	mean := x(w, guestPathName)
	share := x(w, guestShareName)
	return []Rule{
		rec(w, guestShareName, `
  clamp_min(`+mean+`{layer="vmm"}, 0)
/ ignoring (layer)
  (`+mean+`{layer="guest"} > 0)`,
			"Share of the guest's mean request time, vmm: (guest - image_file) / guest, what QEMU adds above the "+
				"image file (its queueing, the virtio ring, the host scheduler's delay of its threads). Floored at 0 where "+
				"the image file's mean exceeds the guest's (noise between the two sources), so that image_file counts at "+
				"most the guest's time and the three shares add up to 1. Only where both means exist: no split without "+
				"the image-file layer.",
			layer("vmm")),
		rec(w, guestShareName, `
(
    (1 - `+share+`{layer="vmm", op=~"read|write"})
  - ignoring (layer)
    clamp_min(
        (1 - `+share+`{layer="vmm", op=~"read|write"})
      - ignoring (layer)
          sum without (layer) (`+mean+`{layer=~"host_queue|device", op=~"read|write"})
        / ignoring (layer)
          (`+mean+`{layer="guest", op=~"read|write"} > 0),
      0
    )
)
or on (${disk}, op)
  0 * `+share+`{layer="vmm", op=~"read|write"}`,
			"Share of the guest's mean request time, device: min(host_queue + device, image_file) / guest, reads and "+
				"writes, written min(a, b) = b - clamp_min(b - a, 0) with b = 1 - vmm, the image file's share. "+
				"host_queue + device is the mean time of the image's host block requests, in the I/O scheduler and "+
				"at the device. With direct I/O (cache=none, directsync) the image-file request waits for them; with "+
				"the host page cache (cache=writeback, unsafe) a write completes in the cache and its device time comes "+
				"later, at writeback, outside the guest's wait, and a cached read waits for none: the device means "+
				"then time requests the guest did not wait for, and min() bounds their share by the image file's. "+
				"0 where the layer had too few host block requests for a mean (reads served from the host page "+
				"cache). Flushes have no device layer: their device time is in host_fs.",
			layer("device")),
		rec(w, guestShareName, `
clamp_min(1 - sum without (layer) (`+share+`{layer=~"vmm|device"}), 0)`,
			"Share of the guest's mean request time, host_fs: (image_file - device) / guest, the host file "+
				"system's own time on the image file (its locking, allocation, journal, the image format's "+
				"metadata), written 1 - vmm - device so that the shares add up to 1; flushes: all of the image "+
				"file's share (no device layer).",
			layer("host_fs")),
		rec(w, guestTopLayerName, `
topk by (${disk}, op) (1, `+share+`)`,
			"The layer (vmm, host_fs or device) holding the largest share of the guest's mean request time, one "+
				"series per disk and operation, valued that share. On an exact tie topk keeps one of the tied layers. "+
				"FspairGuestLatencyHigh names it in its description; it is not the alert's label, so that a change of "+
				"layer does not restart the alert."),
	}
}

// guestFleetRules are the fleet's view of the guest path over the short
// window: the 20 slowest disks and operations at the guest's p99, and how
// many disks each layer holds most of the guest's time for.
func guestFleetRules(w window) []Rule {
	p99 := x(w, guestQuantileName) + `{layer="guest", quantile="0.99"}`
	out := []Rule{
		rec(w, "fleet:fspair_disk_guest_path_latency_seconds:top20_p99_${w}", `
(
    topk(20, `+p99+`)
  * on (${disk}, op) group_left (top_layer)
    (0 * label_replace(`+guestTopLayerName+`, "top_layer", "$1", "layer", "(.*)") + 1)
)
or on (${disk}, op)
  topk(20, `+p99+`)`,
			"Fleet: the 20 disk and operation series with the highest guest p99 over ${w}, with the layer "+
				"holding most of the guest's mean time as top_layer. A disk without a split of its time (its image "+
				"file had too few requests for a mean) is kept, without top_layer."),
		rec(w, "layer_op:fspair_disks_guest_path_top_layer:count${w}", `
count by (layer, op) (`+guestTopLayerName+`)`,
			"Fleet: how many disks each layer (vmm, host_fs, device) holds most of the guest's mean time for, by operation."),
	}
	return windowComments(w, out)
}

// windowComments expands ${w} in the rules' comments.
func windowComments(w window, rules []Rule) []Rule {
	for i := range rules {
		rules[i].Comment = x(w, rules[i].Comment)
	}
	return rules
}
