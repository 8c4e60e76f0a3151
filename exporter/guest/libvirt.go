package guest

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/digitalocean/go-libvirt"
)

// libvirtFields names, for each counter of Stats and operation, the
// VIR_DOMAIN_STATS_BLOCK field after "block.<n>." (libvirt's
// virConnectGetAllDomainStats documentation); "" where libvirt has none:
// no failed or merged counts, no discards.
var libvirtFields = [numFields][NumOps]string{
	{"rd.reqs", "wr.reqs", "fl.reqs", ""},
	{"rd.bytes", "wr.bytes", "", ""},
	{"", "", "", ""},
	{"", "", "", ""},
	{"rd.times", "wr.times", "fl.times", ""},
}

// libvirtDisk is one disk in libvirt's block statistics.
type libvirtDisk struct {
	name, path string
	stats      Stats
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
			for f := range libvirtFields {
				for op, name := range libvirtFields[f] {
					if name != "" && name == field {
						d.stats.field(f)[op] = set(v)
					}
				}
			}
		}
		for _, i := range order {
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

// find returns the statistics of the disk with this target, else of the
// one with this image path.
func (d *libvirtDomain) find(target, file string) (Stats, bool) {
	for _, x := range d.disks {
		if target != "" && x.name == target {
			return x.stats, true
		}
	}
	clean := filepath.Clean(file)
	for _, x := range d.disks {
		if x.path != "" && filepath.Clean(x.path) == clean {
			return x.stats, true
		}
	}
	return Stats{}, false
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
