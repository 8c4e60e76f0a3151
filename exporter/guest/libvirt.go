package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/digitalocean/go-libvirt"
)

// libvirtFields names, for each counter of Stats and operation, the
// VIR_DOMAIN_STATS_BLOCK field after "block.<n>." (libvirt's
// virConnectGetAllDomainStats documentation); "" where libvirt has none:
// no failed counts, no discards.
var libvirtFields = [numFields][NumOps]string{
	{"rd.reqs", "wr.reqs", "fl.reqs", ""},
	{"rd.bytes", "wr.bytes", "", ""},
	{"", "", "", ""},
	{"rd.times", "wr.times", "fl.times", ""},
}

// libvirtHistograms names each operation's latency histogram in libvirt's
// block statistics (12.1 and later, when the domain's XML asks for one:
// <driver><statistics><latency-histogram>): block.<n>.latency_histogram.
// <name>.bin.count, then .bin.<i>.start (the bin's lower bound, ns) and
// .bin.<i>.value. "read" is the name libvirt's patch shows; write and
// flush are taken to follow it (not checked against a libvirt 12.1 here).
var libvirtHistograms = [NumOps]string{"read", "write", "flush", ""}

// libvirtMinHistograms is the first libvirt version whose statistics carry
// latency histograms (12.1.0, virConnectGetLibVersion's encoding).
const libvirtMinHistograms = 12_001_000

// libvirtBins gathers one histogram's bins as libvirt lists them, as far
// as fspair can read one: LatencySlots bins (a bin past them belongs to a
// histogram on other bounds, which count tells).
type libvirtBins struct {
	count         uint64
	start, values [LatencySlots]uint64
	has           [LatencySlots]uint8 // hasStart | hasValue
}

const (
	hasStart = 1 << iota
	hasValue
)

// libvirtDisk is one disk in libvirt's block statistics.
type libvirtDisk struct {
	name, path string
	stats      Stats
	kinds      [NumOps]histKind
	bins       [NumOps]*libvirtBins
}

// histogramLabel is the disk's histogram label: as over QMP when libvirt
// gave any histogram; else libvirt too old, or the domain asking for none
// (not_set; also while libvirt's version is unknown).
func (d *libvirtDisk) histogramLabel(version uint64) string {
	for _, op := range HistogramOps {
		if d.kinds[op] != histAbsent {
			return histogramLabel(&d.kinds)
		}
	}
	if version != 0 && version < libvirtMinHistograms {
		return HistogramLibvirtTooOld
	}
	return HistogramNotSet
}

// histogram reads a latency_histogram.<op> field ("bin.count",
// "bin.<i>.start", "bin.<i>.value") into d; false if field is not one.
func (d *libvirtDisk) histogram(field string, v uint64) bool {
	rest, ok := strings.CutPrefix(field, "latency_histogram.")
	if !ok {
		return false
	}
	name, rest, _ := strings.Cut(rest, ".bin.")
	op := slices.Index(libvirtHistograms[:], name)
	if op < 0 || name == "" {
		return true
	}
	b := d.bins[op]
	if b == nil {
		b = &libvirtBins{}
		d.bins[op] = b
	}
	if rest == "count" {
		b.count = v
		return true
	}
	idx, what, _ := strings.Cut(rest, ".")
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= LatencySlots {
		return true
	}
	switch what {
	case "start":
		b.start[i], b.has[i] = v, b.has[i]|hasStart
	case "value":
		b.values[i], b.has[i] = v, b.has[i]|hasValue
	}
	return true
}

// histograms turns the bins gathered into Stats.Latency: libvirt's bin i
// starts where QEMU's boundary i-1 is, the first at 0. Only LatencySlots
// bins, each with its start and value, can be fspair's.
func (d *libvirtDisk) histograms() {
	for _, op := range HistogramOps {
		b := d.bins[op]
		if b == nil {
			continue
		}
		d.kinds[op] = histOther
		if b.count != LatencySlots {
			continue
		}
		ok := true
		for i, h := range b.has {
			ok = ok && h == hasStart|hasValue && (i == 0) == (b.start[i] == 0)
		}
		if ok {
			d.stats.Latency[op], d.kinds[op] = ourHistogram(b.start[1:], b.values[:])
		}
	}
	d.bins = [NumOps]*libvirtBins{}
}

// libvirtDomain is a domain's disks in libvirt's block statistics.
type libvirtDomain struct {
	name, uuid string
	disks      []libvirtDisk
}

// parseLibvirtStats reads the block group of each domain's statistics
// record: block.count, then block.<n>.name (the target), .path and the
// counters.
func parseLibvirtStats(recs []libvirt.DomainStatsRecord) []libvirtDomain {
	out := make([]libvirtDomain, 0, len(recs))
	for _, r := range recs {
		dom := libvirtDomain{name: r.Dom.Name, uuid: formatUUID(r.Dom.UUID)}
		byIndex := map[int]*libvirtDisk{}
		var order []int
		disk := func(i int) *libvirtDisk {
			d := byIndex[i]
			if d == nil {
				d = &libvirtDisk{}
				byIndex[i] = d
				order = append(order, i)
			}
			return d
		}
		for _, p := range r.Params {
			rest, ok := strings.CutPrefix(p.Field, "block.")
			if !ok {
				continue
			}
			idx, field, ok := strings.Cut(rest, ".")
			i, err := strconv.Atoi(idx)
			if !ok || err != nil || i < 0 {
				continue // block.count
			}
			switch field {
			case "name":
				disk(i).name, _ = p.Value.I.(string)
				continue
			case "path":
				disk(i).path, _ = p.Value.I.(string)
				continue
			}
			v, ok := unsigned(p.Value.I)
			if !ok {
				continue
			}
			d := disk(i)
			if d.histogram(field, v) {
				continue
			}
			for f := range libvirtFields {
				for op, name := range libvirtFields[f] {
					if name != "" && name == field {
						d.stats.field(f)[op] = set(v)
					}
				}
			}
		}
		for _, i := range order {
			byIndex[i].histograms()
			dom.disks = append(dom.disks, *byIndex[i])
		}
		out = append(out, dom)
	}
	return out
}

// unsigned reads a typed parameter's value as a counter: libvirt sends
// them as unsigned long long, older versions some as long long.
func unsigned(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint64:
		return x, true
	case int64:
		return uint64(x), x >= 0
	case uint32:
		return uint64(x), true
	case int32:
		return uint64(x), x >= 0
	}
	return 0, false
}

// find returns the disk with this target, else the one with this image
// path; nil if none.
func (d *libvirtDomain) find(target, file string) *libvirtDisk {
	for i := range d.disks {
		if target != "" && d.disks[i].name == target {
			return &d.disks[i]
		}
	}
	clean := filepath.Clean(file)
	for i := range d.disks {
		if d.disks[i].path != "" && filepath.Clean(d.disks[i].path) == clean {
			return &d.disks[i]
		}
	}
	return nil
}

func formatUUID(b libvirt.UUID) string {
	const hex = "0123456789abcdef"
	var out []byte
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

// LibvirtMonitor runs a QMP command on a libvirt domain's QEMU through
// libvirt's monitor pass-through (virDomainQemuMonitorCommand, what virsh
// qemu-monitor-command does) and returns QEMU's reply as libvirt passes it
// on (discovery.Discoverer.LibvirtMonitorCommand). libvirt marks a domain
// so used as tainted (custom-monitor): fspair uses it only when the
// operator asks (--guest.libvirt-monitor-histograms).
type LibvirtMonitor func(ctx context.Context, uuid, command string) (string, error)

// libvirtMonitor is the monitor of one domain through LibvirtMonitor.
type libvirtMonitor struct {
	ctx  context.Context
	uuid string
	run  LibvirtMonitor
}

func (m *libvirtMonitor) executeArgs(command string, args, out any) error {
	req, err := json.Marshal(qmpRequest{Execute: command, Arguments: args})
	if err != nil {
		return fmt.Errorf("encode %s: %w", command, err)
	}
	reply, err := m.run(m.ctx, m.uuid, string(req))
	if err != nil {
		return fmt.Errorf("%s through libvirt: %w", command, err)
	}
	var r qmpReply
	if err := r.decode(command, []byte(reply), out); err != nil {
		return fmt.Errorf("through libvirt: %w", err)
	}
	return nil
}
