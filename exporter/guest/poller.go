package guest

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/inventory"
)

// Defaults of Options.
const (
	DefaultInterval    = 5 * time.Second
	DefaultTimeout     = 2 * time.Second
	DefaultMaxSessions = 16
)

// DiskLister lists the disks to read the guest side of.
type DiskLister interface {
	Disks() []inventory.Disk
}

// LibvirtStats returns libvirt's block statistics of every running domain
// (discovery.Discoverer.LibvirtBlockStats).
type LibvirtStats func(ctx context.Context) ([]libvirt.DomainStatsRecord, error)

// Options configure a Poller.
type Options struct {
	// Interval between reads (DefaultInterval if zero).
	Interval time.Duration
	// Timeout bounds each QMP session (connect, greeting, commands) and
	// the libvirt call (DefaultTimeout if zero).
	Timeout time.Duration
	// Libvirt reads libvirt's statistics; nil when the libvirt source is
	// off, and then libvirt domains have no guest side.
	Libvirt LibvirtStats
	// SetHistograms sets guest latency histograms over QMP on the devices
	// that lack them (block-latency-histogram-set); false only reads those
	// someone else set on fspair's bounds.
	SetHistograms bool
	// LibvirtMonitor, when set, sets and reads the latency histograms of
	// libvirt domains' disks through libvirt's monitor pass-through,
	// which taints the domains: nil (the default) never does.
	LibvirtMonitor LibvirtMonitor
	// LibvirtVersion gives libvirt's version (major*1,000,000 +
	// minor*1,000 + release), 0 while unknown; nil: never known.
	LibvirtVersion func() uint64
	// MaxSessions bounds the QMP sessions open at once
	// (DefaultMaxSessions if zero).
	MaxSessions int
	// ProcRoot is where to reach a VMM's root for sockets in its mount
	// namespace ("/proc" if empty).
	ProcRoot string
	Logger   *slog.Logger
	// Gate, when set, is held by the scrapes: a round starts no QMP
	// session while it is, for at most 1/yieldShare of Interval a round
	// (Gate).
	Gate *Gate
}

// yieldShare: a round gives way to scrapes for at most this share of the
// interval (a fifth: 1 s of the default 5 s).
const yieldShare = 5

// PollStats count the reads, for the exporter's own metrics.
type PollStats struct {
	Polls, Errors map[string]uint64 // by source
	LastDuration  time.Duration
	Rounds        uint64
}

// Poller reads the guest side of every disk in the background and keeps
// the result for scrapes.
type Poller struct {
	inv  DiskLister
	opts Options
	log  *slog.Logger

	round sync.Mutex // one round at a time
	// vms remembers, per VM read over QMP, which of its sockets to try
	// next and whether it was failing; touched by rounds only.
	vms         map[string]*vmState
	libvirtFail bool
	// lvHist remembers, per libvirt domain (uuid) whose histograms go
	// through LibvirtMonitor, the devices that refused them.
	lvHist map[string]*histSetter

	mu     sync.RWMutex
	status map[diskKey]Status
	stats  PollStats
}

type vmState struct {
	next    int // index in the disk's QMP sockets
	failing bool
	hist    *histSetter // nil unless Options.SetHistograms
}

// diskKey identifies a disk across rounds: its labels and its VMM.
type diskKey struct {
	domain, uuid, target, file string
	pid                        int
}

func keyOf(d *inventory.Disk) diskKey {
	return diskKey{d.Domain, d.UUID, d.TargetDevice, d.SourceFile, d.PID}
}

// New returns a Poller over the disks of inv.
func New(inv DiskLister, opts Options) *Poller {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Poller{inv: inv, opts: opts, log: log, vms: map[string]*vmState{}, lvHist: map[string]*histSetter{}, status: map[diskKey]Status{},
		stats: PollStats{Polls: map[string]uint64{}, Errors: map[string]uint64{}}}
}

// Status returns what is known of a disk's guest side; it only reads what
// the last round left.
func (p *Poller) Status(d *inventory.Disk) Status {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if s, ok := p.status[keyOf(d)]; ok {
		return s
	}
	// Not yet seen by a round (discovered since): no values yet.
	if src := sourceOf(d); src != SourceNone {
		return Status{Source: src, Status: StatusUnreachable, Histogram: HistogramNone}
	}
	return Status{Source: SourceNone, Status: noneStatus(d), Histogram: HistogramNone}
}

// Stats returns the counts of reads so far.
func (p *Poller) Stats() PollStats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	s := p.stats
	s.Polls, s.Errors = clone(p.stats.Polls), clone(p.stats.Errors)
	return s
}

func clone(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Run reads every Interval until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sourceOf is where a disk's guest side comes from.
func sourceOf(d *inventory.Disk) string {
	switch {
	case d.Source == discovery.SourceLibvirt:
		return SourceLibvirt
	case len(d.QMP) > 0:
		return SourceQMP
	}
	return SourceNone
}

// noneStatus says why a disk has no source.
func noneStatus(d *inventory.Disk) string {
	switch d.QMPNote {
	case discovery.QMPNoteLibvirt:
		return StatusLibvirtMonitor
	case discovery.QMPNoteNotAllowed:
		return StatusNotAllowed
	}
	return StatusNoMonitor
}

// vmKey groups the disks one QMP session reads: one VMM process, or for
// disks without one, one domain and socket list.
func vmKey(d *inventory.Disk) string {
	if d.PID > 0 {
		return "pid:" + strconv.Itoa(d.PID)
	}
	return "domain:" + d.Domain + "\x00" + strings.Join(d.QMP, "\x00")
}

// result is what a round learnt of one disk. Its values are packed into a
// Reading as soon as its source has given them all: a round holds every
// disk's result until it publishes, and dense Stats were 11 MB of live heap
// a round at 10,000 VMs.
type result struct {
	source  string
	err     bool // its source failed this round
	found   bool
	reading *Reading // when found
	lv      *Stats   // libvirt's values until its histograms are in
	hist    string   // histogram label, when found
	at      time.Time
}

// Poll runs one round: libvirt's statistics in one call, each QMP VM in a
// session of its own (MaxSessions at once), all bounded by Timeout; then it
// publishes the results. Values a failed read would have replaced are kept.
func (p *Poller) Poll(ctx context.Context) {
	p.round.Lock()
	defer p.round.Unlock()
	start := time.Now()
	disks := p.inv.Disks()
	results := make([]result, len(disks))

	var lvDisks []int
	vms := map[string][]int{}
	var vmOrder []string
	for i := range disks {
		d := &disks[i]
		results[i].source = sourceOf(d)
		switch results[i].source {
		case SourceLibvirt:
			lvDisks = append(lvDisks, i)
		case SourceQMP:
			k := vmKey(d)
			if _, ok := vms[k]; !ok {
				vmOrder = append(vmOrder, k)
			}
			vms[k] = append(vms[k], i)
		}
	}

	var polls, errs = map[string]uint64{}, map[string]uint64{}
	var cmu sync.Mutex
	count := func(source string, failed bool) {
		cmu.Lock()
		polls[source]++
		if failed {
			errs[source]++
		}
		cmu.Unlock()
	}

	var wg sync.WaitGroup
	if len(lvDisks) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed := p.readLibvirt(ctx, disks, lvDisks, results)
			count(SourceLibvirt, failed)
		}()
	}
	states := make([]*vmState, len(vmOrder))
	for j, k := range vmOrder {
		st := p.vms[k]
		if st == nil {
			st = &vmState{}
			if p.opts.SetHistograms {
				st.hist = newHistSetter(p.log.Warn)
			}
			p.vms[k] = st
		}
		states[j] = st
	}
	// MaxSessions workers take the VMs in turn: a goroutine a VM waiting
	// for its turn (10,000 of them at 10,000 VMs) cost the garbage
	// collector a scan of each stack every cycle.
	var next atomic.Int64
	yield := p.opts.Gate.round(p.opts.Interval / yieldShare)
	for range min(p.opts.MaxSessions, len(vmOrder)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var scratch []Stats // what a VM's session decodes into
			for {
				j := int(next.Add(1) - 1)
				if j >= len(vmOrder) {
					return
				}
				idx := vms[vmOrder[j]]
				yield.wait(ctx)
				if ctx.Err() != nil {
					for _, i := range idx {
						results[i].err = true
					}
					continue
				}
				failed := p.readVM(ctx, states[j], disks, idx, results, &scratch)
				count(SourceQMP, failed)
			}
		}()
	}
	wg.Wait()
	for k := range p.vms {
		if _, ok := vms[k]; !ok {
			delete(p.vms, k)
		}
	}
	p.publish(disks, results, polls, errs, time.Since(start))
}

// readLibvirt fills the results of libvirt's disks from one call; true
// when it failed.
func (p *Poller) readLibvirt(ctx context.Context, disks []inventory.Disk, idx []int, results []result) bool {
	if p.opts.Libvirt == nil {
		for _, i := range idx {
			results[i].err = true
		}
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	recs, err := p.opts.Libvirt(cctx)
	at := time.Now()
	if err != nil {
		for _, i := range idx {
			results[i].err = true
		}
		if !p.libvirtFail {
			p.log.Warn("guest statistics from libvirt failing", "err", err)
		}
		p.libvirtFail = true
		return true
	}
	if p.libvirtFail {
		p.log.Info("guest statistics from libvirt recovered")
	}
	p.libvirtFail = false
	doms := parseLibvirtStats(recs)
	var version uint64
	if p.opts.LibvirtVersion != nil {
		version = p.opts.LibvirtVersion()
	}
	for _, i := range idx {
		d := &disks[i]
		for j := range doms {
			dom := &doms[j]
			if (d.UUID != "" && dom.uuid != d.UUID) || (d.UUID == "" && dom.name != d.Domain) {
				continue
			}
			if x := dom.find(d.TargetDevice, d.SourceFile); x != nil {
				st := x.stats // a copy: the monitor's histograms go into it
				results[i].lv, results[i].found, results[i].at = &st, true, at
				results[i].hist = x.histogramLabel(version)
			}
			break
		}
	}
	if p.opts.LibvirtMonitor != nil {
		p.libvirtHistograms(ctx, disks, idx, results)
	}
	for _, i := range idx {
		if r := &results[i]; r.lv != nil {
			r.reading, r.lv = NewReading(r.lv, r.at), nil
		}
	}
	return false
}

// libvirtHistograms reads, through libvirt's monitor pass-through, the
// latency histograms libvirt's statistics did not give (libvirt before
// 12.1, or a domain whose XML asks for none), setting the absent ones as
// readQMP does: one query-blockstats per such domain and round, matched
// by image file. A domain the pass-through fails for keeps what libvirt's
// statistics gave.
func (p *Poller) libvirtHistograms(ctx context.Context, disks []inventory.Disk, idx []int, results []result) {
	byDomain := map[string][]int{}
	var order []string
	for _, i := range idx {
		r := &results[i]
		if !r.found || r.hist == HistogramOK || r.hist == HistogramOtherBounds || disks[i].UUID == "" {
			continue
		}
		u := disks[i].UUID
		if _, ok := byDomain[u]; !ok {
			order = append(order, u)
		}
		byDomain[u] = append(byDomain[u], i)
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	for _, u := range order {
		hs := p.lvHist[u]
		if hs == nil {
			hs = newHistSetter(p.log.Warn)
			p.lvHist[u] = hs
		}
		ids := byDomain[u]
		got := make([]Stats, len(ids))
		labels := make([]string, len(ids))
		vd := make([]*vmDisk, len(ids))
		for j, i := range ids {
			vd[j] = &vmDisk{file: disks[i].SourceFile, out: &got[j], hist: &labels[j]}
		}
		first := &disks[ids[0]]
		m := &libvirtMonitor{ctx: cctx, uuid: u, run: p.opts.LibvirtMonitor}
		if err := readMonitor(m, "libvirt domain "+first.Domain, vd, p.opts.ProcRoot, first.PID, hs); err != nil {
			p.log.Debug("guest histograms through libvirt's monitor failing", "domain", first.Domain, "err", err)
			continue
		}
		for j, i := range ids {
			if vd[j].entry != nil {
				results[i].lv.Latency, results[i].hist = got[j].Latency, labels[j]
			}
		}
	}
	for u := range p.lvHist {
		if _, ok := byDomain[u]; !ok {
			delete(p.lvHist, u)
		}
	}
}

// readVM reads one VM over QMP, trying its next socket; on failure the
// socket after it is tried next round. True when it failed.
// scratch is the caller's, reused from one VM to the next.
func (p *Poller) readVM(ctx context.Context, st *vmState, disks []inventory.Disk, idx []int, results []result, scratch *[]Stats) bool {
	first := &disks[idx[0]]
	socks := first.QMP
	if st.next >= len(socks) {
		st.next = 0
	}
	sock := socks[st.next]
	if cap(*scratch) < len(idx) {
		*scratch = make([]Stats, len(idx))
	}
	out := (*scratch)[:len(idx)]
	vd := make([]*vmDisk, len(idx))
	for j, i := range idx {
		out[j] = Stats{}
		vd[j] = &vmDisk{target: disks[i].TargetDevice, file: disks[i].SourceFile, out: &out[j], hist: &results[i].hist}
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	deadline, _ := cctx.Deadline()
	err := readQMP(cctx, sock, deadline, vd, p.opts.ProcRoot, first.PID, st.hist)
	at := time.Now()
	if err != nil {
		for _, i := range idx {
			results[i].err = true
		}
		if !st.failing {
			p.log.Warn("guest statistics over QMP failing", "domain", first.Domain, "pid", first.PID, "socket", sock, "err", err)
		}
		st.failing = true
		st.next = (st.next + 1) % len(socks)
		return true
	}
	if st.failing {
		p.log.Info("guest statistics over QMP recovered", "domain", first.Domain, "socket", sock)
	}
	st.failing = false
	for j, i := range idx {
		if vd[j].entry != nil {
			results[i].found, results[i].at, results[i].reading = true, at, NewReading(&out[j], at)
		}
	}
	return false
}

// publish turns a round's results into the statuses scrapes read. The
// statuses are built before the lock is taken (rounds alone write
// p.status, one at a time, so reading it here needs none): scrapes wait
// only for the swap.
func (p *Poller) publish(disks []inventory.Disk, results []result, polls, errs map[string]uint64, took time.Duration) {
	next := make(map[diskKey]Status, len(disks))
	for i := range disks {
		d := &disks[i]
		k := keyOf(d)
		r := results[i]
		prev, had := p.status[k]
		s := Status{Source: r.source}
		switch {
		case r.source == SourceNone:
			s.Status = noneStatus(d)
		case r.source == SourceLibvirt && p.opts.Libvirt == nil:
			s.Status = StatusLibvirtMonitor
		case r.err:
			// A failed read leaves the last values, from the same
			// source.
			if had && prev.Reading != nil && prev.Source == r.source {
				s.Reading, s.Status, s.Histogram = prev.Reading, StatusStale, prev.Histogram
			} else {
				s.Status = StatusUnreachable
			}
		case r.found:
			s.Reading, s.Status, s.Histogram = r.reading, StatusOK, r.hist
		default:
			s.Status = StatusNoDevice
		}
		if s.Histogram == "" {
			s.Histogram = HistogramNone
		}
		next[k] = s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = next
	for k, v := range polls {
		p.stats.Polls[k] += v
	}
	for k, v := range errs {
		p.stats.Errors[k] += v
	}
	p.stats.LastDuration = took
	p.stats.Rounds++
}

// Sources returns the source names counted in PollStats, sorted.
func Sources() []string {
	s := []string{SourceLibvirt, SourceQMP}
	slices.Sort(s)
	return s
}
