package main

// What the demo prints of the guest's latency: per VM disk and operation,
// the 99th percentile of what the guest's requests took over 5m and the
// layer below that holds most of the guest's time (vmm, host_fs or device,
// with its share), read back from the rules: the p99 from the
// fspair.guest.quantiles group, the layer from fspair.guest (rules/README.md); for a disk without a guest histogram, why not, as
// fspair_disk_guest_info's histogram label says.

import (
	"fmt"
	"math"
	"strings"
)

// The series the guest latency table comes from.
const (
	seriesGuestInfo = `fspair_disk_guest_info`
	// The quantiles of each layer per operation; the table reads the
	// guest layer's p99.
	seriesGuestQuantile = `domain_disk:fspair_disk_guest_path_latency_seconds:quantile5m`
	seriesGuestP99      = seriesGuestQuantile + `{layer="guest", quantile="0.99"}`
	// The layer holding most of the guest's mean time per operation; the
	// value is its share.
	seriesTopLayer = `domain_disk:fspair_disk_guest_path_top_layer:info`
)

// guestOps are the operations QEMU keeps a latency histogram for, in the
// table's order.
var guestOps = []string{"read", "write", "flush"}

// histogramReasons say what fspair_disk_guest_info's histogram label means
// where it is not ok (exporter/collector/guest.go).
var histogramReasons = map[string]string{
	"not_set":         "none set yet; from libvirt, the domain's XML asks for none",
	"refused":         "QEMU refused block-latency-histogram-set",
	"other_bounds":    "set by someone else on other bounds",
	"libvirt_too_old": "libvirt before 12.1 has none",
	"none":            "no guest values",
}

// guestLatency is one disk's guest latency as the rules give it.
type guestLatency struct {
	// histogram is fspair_disk_guest_info's histogram label: ok, or why
	// the disk has no guest histogram; "" where the disk has no
	// fspair_disk_guest_info (no guest side at all).
	histogram string
	p99       map[string]float64 // seconds, by operation
	top       map[string]layerShare
}

// layerShare is the layer holding most of the guest's time for one
// operation, and its share of it.
type layerShare struct {
	layer string
	share float64
}

// cell is one operation's cell: "4.10 ms, device 62%", the p99
// alone where the rules have no layer for it, or why there is no p99 (too
// few requests of the operation for the rules to take one).
func (g guestLatency) cell(op string) string {
	p, ok := g.p99[op]
	if !ok || math.IsNaN(p) {
		return "too few requests"
	}
	s := fmt.Sprintf("%.2f ms", p*1000)
	if t, ok := g.top[op]; ok && t.layer != "" && !math.IsNaN(t.share) {
		s += fmt.Sprintf(", %s %.0f%%", t.layer, 100*t.share)
	}
	return s
}

// whyNone is the row's text for a disk without a guest histogram, "" for
// one with.
func (g guestLatency) whyNone() string {
	switch g.histogram {
	case "ok":
		return ""
	case "":
		return "no guest side (no fspair_disk_guest_info)"
	}
	why := histogramReasons[g.histogram]
	if why == "" {
		return "no guest histogram: " + g.histogram
	}
	return fmt.Sprintf("no guest histogram: %s (%s)", g.histogram, why)
}

// guestLatencyTable is the per-disk table of the guest's p99 and the layer
// holding its time, indented under the conclusions, none of its lines wider
// than width. A disk without a guest histogram has, in place of its cells,
// the reason.
func guestLatencyTable(disks []diskState, width int) []string {
	const indent = "  "
	head := []string{"DISK"}
	for _, op := range guestOps {
		head = append(head, "GUEST_P99_"+strings.ToUpper(op)+" (layer)")
	}
	rows := make([][]string, len(disks))
	for i, d := range disks {
		rows[i] = []string{d.disk}
		for _, op := range guestOps {
			if d.guest.whyNone() != "" {
				rows[i] = append(rows[i], "")
				continue
			}
			rows[i] = append(rows[i], d.guest.cell(op))
		}
	}
	widths := columnWidths(head, rows, nil)
	const gap = 2
	rest := len(indent)
	for _, w := range widths[1:] {
		rest += w + gap
	}
	widths[0] = min(widths[0], max(minDiskWidth, width-rest))
	lines := []string{indent + joinCells(head, widths, gap)}
	for i, d := range disks {
		disk := cutDisk(d.disk, widths[0])
		if why := d.guest.whyNone(); why != "" {
			cell := indent + disk + strings.Repeat(" ", widths[0]-runes(disk)+gap)
			lines = append(lines, cell+cut(why, width-runes(cell)))
			continue
		}
		cells := cutCells(rows[i], widths)
		cells[0] = disk
		lines = append(lines, indent+joinCells(cells, widths, gap))
	}
	return lines
}

// guestSteps read each disk's guest latency from Prometheus.
var guestSteps = []seriesStep{
	{seriesGuestInfo, func(d *diskState, s sample) { d.guest.histogram = s.Metric["histogram"] }},
	{seriesGuestP99, func(d *diskState, s sample) { d.guest.p99[s.Metric["op"]] = s.value() }},
	{seriesTopLayer, func(d *diskState, s sample) {
		d.guest.top[s.Metric["op"]] = layerShare{layer: s.Metric["layer"], share: s.value()}
	}},
}
