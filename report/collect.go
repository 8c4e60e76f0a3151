package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Classes in the order the report shows them.
var (
	workloads = []string{"web", "mail", "fileserver", "rfa"}
	classes   = []string{"web", "mail", "fileserver", "rfa", "mixed", "idle"}
)

// cell is one guest/host pair of one workload in the fleet matrix.
type cell struct {
	verdict       string  // the knowledge base's in force: best, worst, contested, or ""
	source        string  // djordjevic2022, site, ...: whose verdict is in force
	other         string  // the other source's verdict where both rated the pair, as otherVerdict says it
	disks         int     // disks of this class on this pair now
	amplification float64 // median write amplification of those disks; NaN: unknown
}

// matrix is the fleet view of one workload class.
type matrix struct {
	class       string
	guest, host []string // file systems, rows and columns
	cells       map[[2]string]*cell
	advice      string
}

// diskRef names one VM disk.
type diskRef struct {
	instance, domain, target, sourceFile string
	guestFS, hostFS, format, cache       string
}

func (d diskRef) selector() string {
	return fmt.Sprintf(`instance=%s, source_file=%s`, quote(d.instance), quote(d.sourceFile))
}

func (d diskRef) String() string {
	return fmt.Sprintf("%s/%s (%s) on %s", d.domain, d.target, d.sourceFile, d.instance)
}

// panel is one chart of the disk's section.
type panel struct {
	title, unit, help string
	series            []series
	legend            func(map[string]string) string
}

// reportData is everything the page shows.
type reportData struct {
	from, to time.Time
	step     time.Duration
	server   string
	matrices []matrix
	worst    []sample // disks on a pair the knowledge base lists as worst for their class
	disk     diskRef
	verdict  *sample  // the knowledge base's verdict on the disk's pair for its class
	class    []series // one series per class, 1 where chosen
	panels   []panel
}

// height is the page height the screenshot needs: the header, the worst
// pairs list, the matrices two per row, the disk header and its charts.
func (r *reportData) height(width int) int {
	h := 180 + 24*len(r.worst)
	for i := 0; i < len(r.matrices); i += 2 {
		rows := len(r.matrices[i].guest)
		if i+1 < len(r.matrices) {
			rows = max(rows, len(r.matrices[i+1].guest))
		}
		// A row as tall as its tallest cell: the verdict, the other
		// source's where both rated the pair, the disks and their
		// amplification, at about 16 px a line.
		h += 120 + 60*rows
	}
	return h + 260 + len(r.panels)*(chartHeight(width)+70)
}

// collect runs every query of the report.
func collect(ctx context.Context, c *client, o Options) (*reportData, error) {
	r := &reportData{from: o.From, to: o.To, step: o.Step, server: o.Prometheus}
	var err error
	if r.matrices, err = fleet(ctx, c, o.To); err != nil {
		return nil, err
	}
	if r.worst, err = c.instant(ctx, `domain_disk:fspair_pair_verdict:info{verdict="worst"}`, o.To); err != nil {
		return nil, err
	}
	if r.disk, err = pickDisk(ctx, c, o); err != nil {
		return nil, err
	}
	sel := r.disk.selector()
	v, err := c.instant(ctx, fmt.Sprintf(`domain_disk:fspair_pair_verdict:info{%s}`, sel), o.To)
	if err != nil {
		return nil, err
	}
	if len(v) > 0 {
		r.verdict = &v[0]
	}
	if r.class, err = c.rangeQuery(ctx, fmt.Sprintf(`domain_disk:fspair_workload_class:info{%s}`, sel), o.From, o.To, o.Step); err != nil {
		return nil, err
	}
	specs := []struct {
		title, unit, help, query string
		legend                   func(map[string]string) string
	}{
		{"Workload scores", "", "Score of each class (0..1); the chosen class is the highest, with hysteresis.",
			`domain_disk:fspair_workload_score:ratio{%s}`, func(l map[string]string) string { return l["class"] }},
		{"Latency by stage", "s", "Mean latency per request: file = what the VM waits for on the image file, device = the host block device's service time.",
			`domain_disk:fspair_disk_stage_seconds:mean5m{%s}`, func(l map[string]string) string { return l["stage"] + " " + l["op"] }},
		{"Write amplification", "x", "Host device bytes written (image data plus its share of the host file system's journal and metadata) per byte the guest wrote.",
			`domain_disk:fspair_write_amplification:ratio_rate5m{%s}`, func(map[string]string) string { return "write amplification" }},
		{"Flush cost", "B", "Host device bytes written per guest flush (data and journal).",
			`domain_disk:fspair_disk_flush_device_write_bytes:mean5m{%s}`, func(map[string]string) string { return "bytes per flush" }},
		{"Requests", "/s", "Reads, writes and flushes per second on the image file.",
			`domain_disk:fspair_disk_requests:rate5m{%s}`, func(l map[string]string) string { return l["op"] }},
	}
	for _, s := range specs {
		ss, err := c.rangeQuery(ctx, fmt.Sprintf(s.query, sel), o.From, o.To, o.Step)
		if err != nil {
			return nil, err
		}
		r.panels = append(r.panels, panel{title: s.title, unit: s.unit, help: s.help, series: ss, legend: s.legend})
	}
	return r, nil
}

// fleet builds the pair matrix of each workload class at t: the knowledge
// base's verdicts, and the disks the live classifier puts in the class.
// It reads the short-window rules, so that a report over a fresh
// Prometheus shows the disks too.
func fleet(ctx context.Context, c *client, t time.Time) ([]matrix, error) {
	verdicts, err := c.instant(ctx, `fspair_kdb_pair_verdict`, t)
	if err != nil {
		return nil, err
	}
	if len(verdicts) == 0 {
		return nil, fmt.Errorf("fspair_kdb_pair_verdict: %w: is rules/fspair-kdb.rules.yml loaded in this Prometheus?", ErrNoData)
	}
	counts, err := c.instant(ctx, `count by (class, guest_fs, host_fs) (domain_disk:fspair_class_pair:info{class!="idle"})`, t)
	if err != nil {
		return nil, err
	}
	wa, err := c.instant(ctx, `quantile by (class, guest_fs, host_fs) (0.5,
    domain_disk:fspair_write_amplification:ratio_rate5m
  * on (instance, domain, uuid, target_device, source_file) group_left (class, guest_fs, host_fs)
    domain_disk:fspair_class_pair:info)`, t)
	if err != nil {
		return nil, err
	}
	advice, err := c.instant(ctx, `fspair_kdb_workload_info`, t)
	if err != nil {
		return nil, err
	}
	byClass := map[string]*matrix{}
	get := func(class, g, h string) *cell {
		m, ok := byClass[class]
		if !ok {
			m = &matrix{class: class, cells: map[[2]string]*cell{}}
			byClass[class] = m
		}
		k := [2]string{g, h}
		if m.cells[k] == nil {
			m.cells[k] = &cell{amplification: nan}
		}
		return m.cells[k]
	}
	for _, s := range verdicts {
		c := get(s.labels["workload"], s.labels["guest_fs"], s.labels["host_fs"])
		c.verdict, c.source, c.other = s.labels["verdict"], s.labels["source"], otherVerdict(s.labels)
	}
	for _, s := range counts {
		get(s.labels["class"], s.labels["guest_fs"], s.labels["host_fs"]).disks = int(s.value)
	}
	for _, s := range wa {
		get(s.labels["class"], s.labels["guest_fs"], s.labels["host_fs"]).amplification = s.value
	}
	for _, s := range advice {
		if m, ok := byClass[s.labels["workload"]]; ok {
			m.advice = s.labels["advice"]
		}
	}
	var out []matrix
	for _, class := range classes {
		m, ok := byClass[class]
		if !ok {
			continue
		}
		gs, hs := map[string]bool{}, map[string]bool{}
		for k := range m.cells {
			gs[k[0]], hs[k[1]] = true, true
		}
		m.guest, m.host = fsOrder(gs), fsOrder(hs)
		out = append(out, *m)
	}
	return out, nil
}

// fsOrder sorts file systems: the three the knowledge base studies first.
func fsOrder(set map[string]bool) []string {
	rank := map[string]int{"ext4": 0, "xfs": 1, "btrfs": 2}
	var out []string
	for fs := range set {
		out = append(out, fs)
	}
	sort.Slice(out, func(i, j int) bool {
		ri, iok := rank[out[i]]
		rj, jok := rank[out[j]]
		switch {
		case iok && jok:
			return ri < rj
		case iok != jok:
			return iok
		}
		return out[i] < out[j]
	})
	return out
}

// pickDisk resolves -disk, or picks the disk with the most requests at the
// end of the range.
func pickDisk(ctx context.Context, c *client, o Options) (diskRef, error) {
	info, err := c.instant(ctx, `fspair_disk_info`, o.To)
	if err != nil {
		return diskRef{}, err
	}
	if len(info) == 0 {
		return diskRef{}, fmt.Errorf("fspair_disk_info: %w at %s: is fspair_exporter scraped by this Prometheus?", ErrNoData, o.To.Format(time.RFC3339))
	}
	refs := make([]diskRef, 0, len(info))
	for _, s := range info {
		l := s.labels
		refs = append(refs, diskRef{instance: l["instance"], domain: l["domain"], target: l["target_device"], sourceFile: l["source_file"],
			guestFS: l["guest_fs"], hostFS: l["host_fs"], format: l["format"], cache: l["cache"]})
	}
	if o.Disk != "" {
		for _, d := range refs {
			if d.sourceFile == o.Disk || d.domain+"/"+d.target == o.Disk {
				return d, nil
			}
		}
		var known []string
		for _, d := range refs {
			known = append(known, d.domain+"/"+d.target)
		}
		sort.Strings(known)
		return diskRef{}, fmt.Errorf("disk %q not found; known: %s", o.Disk, strings.Join(known, ", "))
	}
	busy, err := c.instant(ctx, `topk(1, domain_disk:fspair_disk_rw_requests:rate5m)`, o.To)
	if err != nil {
		return diskRef{}, err
	}
	if len(busy) > 0 {
		for _, d := range refs {
			if d.instance == busy[0].labels["instance"] && d.sourceFile == busy[0].labels["source_file"] {
				return d, nil
			}
		}
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs[0], nil
}

// otherVerdict is, for a verdict series (fspair_kdb_pair_verdict or
// domain_disk:fspair_pair_verdict:info), the verdict of the source not in
// force where the published studies and the site both rated the pair
// ("published: best", "site: not distinguishable"), "" where one did.
func otherVerdict(l map[string]string) string {
	switch {
	case l["published_verdict"] != "":
		return "published: " + l["published_verdict"]
	case l["site_verdict"] != "":
		return "site: " + strings.ReplaceAll(l["site_verdict"], "_", " ")
	}
	return ""
}
