package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/inventory"
)

// fakeQMP serves the QMP protocol as QEMU does (docs/interop/qmp-spec.rst):
// a greeting, then one reply line per command, with events sent between.
type fakeQMP struct {
	path  string
	ln    net.Listener
	hang  atomic.Bool // accept, never greet: a monitor another client holds
	conns atomic.Int32
	cmds  sync.Map // command -> *atomic.Int32

	mu         sync.Mutex
	blockstats []map[string]any
	block      []map[string]any
	// hists are the latency histograms set, by device (qdev) and
	// operation (QMP's histogram field name), as QEMU keeps them.
	hists map[string]map[string]*fakeHist
	// refuse makes block-latency-histogram-set fail with this error
	// class (CommandNotFound: a QEMU before 4.0).
	refuse string
	// setArgs are the arguments of each block-latency-histogram-set.
	setArgs []map[string]any
}

// fakeHist is one latency histogram as QEMU keeps it (block/accounting.c):
// bins[0] counts latencies below bounds[0], bins[i] those in
// [bounds[i-1], bounds[i]), the last those from the last bound up.
type fakeHist struct {
	bounds, bins []uint64
}

func (h *fakeHist) account(ns uint64) {
	i := sort.Search(len(h.bounds), func(i int) bool { return ns < h.bounds[i] })
	h.bins[i]++
}

// complete accounts one request of the device whose qdev is dev, as
// block_account_one_io() does: the counters, and the histogram whether it
// failed or not.
func (f *fakeQMP) complete(dev, op string, ns uint64, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prefix := map[string]string{"read": "rd", "write": "wr", "flush": "flush"}[op]
	for _, e := range f.blockstats {
		if e["qdev"] != dev {
			continue
		}
		st := e["stats"].(map[string]any)
		if failed {
			st["failed_"+prefix+"_operations"] = st["failed_"+prefix+"_operations"].(uint64) + 1
		} else {
			st[prefix+"_operations"] = st[prefix+"_operations"].(uint64) + 1
		}
		st[prefix+"_total_time_ns"] = st[prefix+"_total_time_ns"].(uint64) + ns
		if h := f.hists[dev][prefix+"_latency_histogram"]; h != nil {
			h.account(ns)
		}
	}
}

// restart forgets the histograms, as a new QEMU process would have none.
func (f *fakeQMP) restart() {
	f.mu.Lock()
	f.hists = nil
	f.mu.Unlock()
}

// setHistogram serves block-latency-histogram-set; nil or an error reply.
func (f *fakeQMP) setHistogram(args map[string]any) map[string]any {
	f.setArgs = append(f.setArgs, args)
	if f.refuse != "" {
		return map[string]any{"class": f.refuse, "desc": "The command block-latency-histogram-set has not been found"}
	}
	dev, _ := args["id"].(string)
	found := false
	for _, e := range f.blockstats {
		found = found || e["qdev"] == dev
	}
	if !found || dev == "" {
		return map[string]any{"class": "GenericError", "desc": "Device '" + dev + "' not found"}
	}
	if f.hists == nil {
		f.hists = map[string]map[string]*fakeHist{}
	}
	if f.hists[dev] == nil {
		f.hists[dev] = map[string]*fakeHist{}
	}
	for arg, field := range map[string]string{"boundaries-read": "rd_latency_histogram", "boundaries-write": "wr_latency_histogram",
		"boundaries-flush": "flush_latency_histogram"} {
		raw, ok := args[arg].([]any)
		if !ok {
			continue
		}
		h := &fakeHist{bins: make([]uint64, len(raw)+1)}
		for _, b := range raw {
			h.bounds = append(h.bounds, uint64(b.(float64)))
		}
		f.hists[dev][field] = h
	}
	return nil
}

// blockstatsReply is query-blockstats' answer: the entries, with the
// histograms set.
func (f *fakeQMP) blockstatsReply() []map[string]any {
	out := make([]map[string]any, len(f.blockstats))
	for i, e := range f.blockstats {
		c := maps.Clone(e)
		if hs := f.hists[e["qdev"].(string)]; hs != nil {
			st := maps.Clone(e["stats"].(map[string]any))
			for field, h := range hs {
				st[field] = map[string]any{"boundaries": slices.Clone(h.bounds), "bins": slices.Clone(h.bins)}
			}
			c["stats"] = st
		}
		out[i] = c
	}
	return out
}

func startFakeQMP(t testing.TB, dir, name string) *fakeQMP {
	t.Helper()
	f := &fakeQMP{path: filepath.Join(dir, name)}
	ln, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	f.ln = ln
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			cmu.Lock()
			conns = append(conns, c)
			cmu.Unlock()
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeQMP) count(cmd string) int {
	v, _ := f.cmds.LoadOrStore(cmd, &atomic.Int32{})
	return int(v.(*atomic.Int32).Load())
}

func (f *fakeQMP) set(blockstats, block []map[string]any) {
	f.mu.Lock()
	f.blockstats, f.block = blockstats, block
	f.mu.Unlock()
}

func (f *fakeQMP) serve(c net.Conn) {
	defer c.Close()
	if f.hang.Load() {
		_, _ = c.Read(make([]byte, 1)) // until the client gives up
		return
	}
	enc := json.NewEncoder(c)
	_ = enc.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{}, "capabilities": []string{"oob"}}})
	r := bufio.NewReader(c)
	for {
		var req struct {
			Execute   string         `json:"execute"`
			Arguments map[string]any `json:"arguments"`
			ID        any            `json:"id"`
		}
		if !nextRequest(r, &req) {
			return
		}
		v, _ := f.cmds.LoadOrStore(req.Execute, &atomic.Int32{})
		v.(*atomic.Int32).Add(1)
		// An event first: clients must skip it.
		_ = enc.Encode(map[string]any{"event": "BLOCK_IO_ERROR", "data": map[string]any{}, "timestamp": map[string]any{"seconds": 1, "microseconds": 2}})
		f.mu.Lock()
		var ret any
		switch req.Execute {
		case "qmp_capabilities":
			ret = map[string]any{}
		case "query-blockstats":
			ret = f.blockstatsReply()
		case "block-latency-histogram-set":
			if e := f.setHistogram(req.Arguments); e != nil {
				f.mu.Unlock()
				_ = enc.Encode(map[string]any{"error": e, "id": req.ID})
				continue
			}
			ret = map[string]any{}
		case "query-block":
			ret = f.block
		default:
			f.mu.Unlock()
			_ = enc.Encode(map[string]any{"error": map[string]any{"class": "CommandNotFound", "desc": "no " + req.Execute}, "id": req.ID})
			continue
		}
		f.mu.Unlock()
		_ = enc.Encode(map[string]any{"return": ret, "id": req.ID})
	}
}

// nextRequest reads a fake monitor's next command into req; false when
// the client is gone or sent something else.
func nextRequest(r *bufio.Reader, req any) bool {
	line, err := r.ReadBytes('\n')
	return err == nil && json.Unmarshal(line, req) == nil
}

// qemuStats is a BlockDeviceStats object as QEMU 7.2 sends it; base
// offsets every counter so that each one is told apart.
func qemuStats(base uint64) map[string]any {
	m := map[string]any{"account_invalid": true, "account_failed": true, "timed_stats": []any{}, "idle_time_ns": 5}
	for i, name := range []string{"rd_bytes", "wr_bytes", "unmap_bytes", "zone_append_bytes", "rd_operations", "wr_operations",
		"flush_operations", "unmap_operations", "zone_append_operations", "rd_total_time_ns", "wr_total_time_ns",
		"flush_total_time_ns", "unmap_total_time_ns", "zone_append_total_time_ns", "wr_highest_offset", "rd_merged",
		"wr_merged", "unmap_merged", "zone_append_merged", "failed_rd_operations", "failed_wr_operations",
		"failed_flush_operations", "failed_unmap_operations", "failed_zone_append_operations", "invalid_rd_operations",
		"invalid_wr_operations", "invalid_flush_operations", "invalid_unmap_operations", "invalid_zone_append_operations"} {
		m[name] = base + uint64(i)
	}
	return m
}

// wantQMPStats is what Stats must hold for qemuStats(base).
func wantQMPStats(base uint64) Stats {
	c := func(i uint64) Counter { return set(base + i) }
	var s Stats
	s.Requests = [NumOps]Counter{c(4), c(5), c(6), c(7)}
	s.Bytes = [NumOps]Counter{c(0), c(1), {}, c(2)}
	s.Failed = [NumOps]Counter{c(19), c(20), c(21), c(22)}
	s.TimeNs = [NumOps]Counter{c(9), c(10), c(11), c(12)}
	return s
}

type fakeInv struct {
	mu    sync.Mutex
	disks []inventory.Disk
}

func (f *fakeInv) Disks() []inventory.Disk {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.disks
}

func disk(domain, target, file string, pid int, source string, qmp ...string) inventory.Disk {
	return inventory.Disk{Disk: discovery.Disk{Domain: domain, TargetDevice: target, SourceFile: file, PID: pid, Source: source, QMP: qmp}}
}

func TestPollQMP(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "hot.raw")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	q := startFakeQMP(t, dir, "vm1.qmp")
	q.set([]map[string]any{
		// -drive if=none,id=drive-vd1 -device virtio-blk-pci,id=vd1
		{"device": "drive-vd1", "qdev": "/machine/peripheral/vd1/virtio-backend", "node-name": "#block123", "stats": qemuStats(100)},
		// hot-plugged: blockdev-add + device_add with no id
		{"device": "", "qdev": "/machine/peripheral-anon/device[1]/virtio-backend", "node-name": "hot0", "stats": qemuStats(200)},
		// drive if=virtio without id: the drive name
		{"device": "virtio0", "qdev": "/machine/peripheral-anon/device[0]/virtio-backend", "node-name": "#block9", "stats": qemuStats(300)},
	}, []map[string]any{
		{"device": "", "qdev": "/machine/peripheral-anon/device[1]/virtio-backend", "inserted": map[string]any{"file": img, "node-name": "hot0", "image": map[string]any{"filename": img}}},
	})
	inv := &fakeInv{disks: []inventory.Disk{
		disk("vm1", "vd1", "/img/a.raw", 0, discovery.SourceQEMU, q.path),
		disk("vm1", "", img, 0, discovery.SourceQEMU, q.path),
		disk("vm1", "virtio0", "/img/c.raw", 0, discovery.SourceQEMU, q.path),
		disk("vm1", "gone", "/img/d.raw", 0, discovery.SourceQEMU, q.path),
	}}
	p := New(inv, Options{Timeout: time.Second})
	before := time.Now()
	p.Poll(context.Background())
	for i, want := range []struct {
		status string
		base   uint64
	}{{StatusOK, 100}, {StatusOK, 200}, {StatusOK, 300}, {StatusNoDevice, 0}} {
		s := p.Status(&inv.disks[i])
		if s.Source != SourceQMP || s.Status != want.status {
			t.Errorf("disk %d: source %s status %s, want qmp %s", i, s.Source, s.Status, want.status)
			continue
		}
		if want.status != StatusOK {
			if s.Reading != nil {
				t.Errorf("disk %d: values without a device", i)
			}
			continue
		}
		if s.Reading == nil || s.Reading.Stats() != wantQMPStats(want.base) {
			t.Errorf("disk %d: stats %+v, want %+v", i, s.Reading, wantQMPStats(want.base))
		} else if s.Reading.At.Before(before) {
			t.Errorf("disk %d: reading time %v before the round", i, s.Reading.At)
		}
	}
	// One session for the VM's four disks: both queries once.
	if q.conns.Load() != 1 || q.count("query-blockstats") != 1 || q.count("query-block") != 1 {
		t.Errorf("sessions %d, query-blockstats %d, query-block %d; want 1 each",
			q.conns.Load(), q.count("query-blockstats"), q.count("query-block"))
	}
	if st := p.Stats(); st.Polls[SourceQMP] != 1 || st.Errors[SourceQMP] != 0 {
		t.Errorf("poll stats %+v", st)
	}
}

// TestPollQMPHangs: a monitor that accepts and never answers (another
// client holds it) costs one Timeout, leaves the last values marked stale
// and counts the failure; scrapes meanwhile are not held up; a VM whose
// first socket hangs is read through its second the next round.
func TestPollQMPHangs(t *testing.T) {
	dir := t.TempDir()
	q := startFakeQMP(t, dir, "a.qmp")
	q.set([]map[string]any{{"device": "drive-vd1", "qdev": "/machine/peripheral/vd1/virtio-backend", "stats": qemuStats(7)}}, nil)
	inv := &fakeInv{disks: []inventory.Disk{disk("vm", "vd1", "/img/a", 0, discovery.SourceQEMU, q.path)}}
	const timeout = 300 * time.Millisecond
	p := New(inv, Options{Timeout: timeout})
	p.Poll(context.Background())
	d := &inv.disks[0]
	if s := p.Status(d); s.Status != StatusOK {
		t.Fatalf("first round: %+v", s)
	}
	first := p.Status(d).Reading

	q.hang.Store(true)
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		p.Poll(context.Background())
		done <- time.Since(start)
	}()
	// While the round waits on the monitor, a scrape's lookup answers at once.
	time.Sleep(timeout / 3)
	start := time.Now()
	_ = p.Status(d)
	if took := time.Since(start); took > 20*time.Millisecond {
		t.Errorf("Status took %s during a hanging round", took)
	}
	took := <-done
	if took < timeout || took > timeout+time.Second {
		t.Errorf("round with a hanging monitor took %s, want about %s", took, timeout)
	}
	s := p.Status(d)
	if s.Status != StatusStale || s.Reading != first {
		t.Errorf("after a failed read: %+v, want stale with the first reading", s)
	}
	if st := p.Stats(); st.Polls[SourceQMP] != 2 || st.Errors[SourceQMP] != 1 {
		t.Errorf("poll stats %+v, want 2 polls 1 error", st)
	}

	// A disk never read that hangs: unreachable, no values.
	inv.mu.Lock()
	inv.disks = append(inv.disks, disk("vm2", "vd1", "/img/b", 0, discovery.SourceQEMU, q.path))
	inv.mu.Unlock()
	p.Poll(context.Background())
	if s := p.Status(&inv.disks[1]); s.Status != StatusUnreachable || s.Reading != nil {
		t.Errorf("never read: %+v", s)
	}

	// Two sockets, the first held: the next round uses the second.
	q2 := startFakeQMP(t, dir, "b.qmp")
	q2.set([]map[string]any{{"device": "drive-vd1", "qdev": "/machine/peripheral/vd1/virtio-backend", "stats": qemuStats(9)}}, nil)
	inv.mu.Lock()
	inv.disks = []inventory.Disk{disk("vm3", "vd1", "/img/c", 0, discovery.SourceQEMU, q.path, q2.path)}
	inv.mu.Unlock()
	p.Poll(context.Background())
	if s := p.Status(&inv.disks[0]); s.Status != StatusUnreachable {
		t.Errorf("round on the held socket: %+v", s)
	}
	p.Poll(context.Background())
	if s := p.Status(&inv.disks[0]); s.Status != StatusOK || s.Reading.Stats() != wantQMPStats(9) {
		t.Errorf("round on the second socket: %+v", s)
	}
}

func TestPollQMPErrors(t *testing.T) {
	dir := t.TempDir()
	// Not QMP: a socket that greets with something else.
	ln, err := net.Listen("unix", filepath.Join(dir, "other.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-OpenSSH\r\n"))
			c.Close()
		}
	}()
	inv := &fakeInv{disks: []inventory.Disk{
		disk("a", "vd1", "/img/a", 0, discovery.SourceQEMU, filepath.Join(dir, "other.sock")),
		disk("b", "vd1", "/img/b", 0, discovery.SourceQEMU, filepath.Join(dir, "missing.sock")),
		disk("c", "vd1", "/img/c", 0, discovery.SourceQEMU, "/"+string(make([]byte, 200))),
	}}
	p := New(inv, Options{Timeout: time.Second})
	p.Poll(context.Background())
	for i := range inv.disks {
		if s := p.Status(&inv.disks[i]); s.Status != StatusUnreachable || s.Reading != nil {
			t.Errorf("disk %d: %+v", i, s)
		}
	}
	if st := p.Stats(); st.Errors[SourceQMP] != 3 {
		t.Errorf("errors %+v, want 3", st.Errors)
	}
}

func typed(field string, v any) libvirt.TypedParam {
	d := map[string]uint32{"uint64": 4, "string": 7}
	switch v.(type) {
	case uint64:
		return libvirt.TypedParam{Field: field, Value: libvirt.TypedParamValue{D: d["uint64"], I: v}}
	default:
		return libvirt.TypedParam{Field: field, Value: libvirt.TypedParamValue{D: d["string"], I: v}}
	}
}

func TestPollLibvirt(t *testing.T) {
	uuid := libvirt.UUID{0x8f, 0x4b, 0x2c, 0x1e, 0x5d, 0x3a, 0x4e, 0x6f, 0x9a, 0x8b, 0x7c, 0x6d, 0x5e, 0x4f, 0x3a, 0x2b}
	recs := []libvirt.DomainStatsRecord{{
		Dom: libvirt.Domain{Name: "web01", UUID: uuid},
		Params: []libvirt.TypedParam{
			typed("block.count", uint64(2)),
			typed("block.0.name", "vda"), typed("block.0.path", "/img/web01.qcow2"),
			typed("block.0.rd.reqs", uint64(12485)), typed("block.0.rd.bytes", uint64(51136000)), typed("block.0.rd.times", uint64(2115621682)),
			typed("block.0.wr.reqs", uint64(13847)), typed("block.0.wr.bytes", uint64(94490624)), typed("block.0.wr.times", uint64(2724809085)),
			typed("block.0.fl.reqs", uint64(43502)), typed("block.0.fl.times", uint64(19865032883)),
			typed("block.0.allocation", uint64(7012352)), typed("block.0.capacity", uint64(536870912)),
			typed("block.1.name", "vdb"), typed("block.1.path", "/img/web01-data.raw"),
			typed("block.1.rd.reqs", uint64(1)),
		},
	}}
	var calls atomic.Int32
	var fail atomic.Bool
	lv := func(ctx context.Context) ([]libvirt.DomainStatsRecord, error) {
		calls.Add(1)
		if fail.Load() {
			return nil, errors.New("libvirt at /run/libvirt-sock-ro: no answer")
		}
		return recs, nil
	}
	web := func(target, file string) inventory.Disk {
		d := disk("web01", target, file, 4242, discovery.SourceLibvirt)
		d.UUID = "8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b"
		return d
	}
	inv := &fakeInv{disks: []inventory.Disk{
		web("vda", "/img/web01.qcow2"),
		web("sdz", "/img/web01-data.raw"), // matched by path
		web("vdq", "/img/none.raw"),
		disk("plain", "vd1", "/img/p", 1, discovery.SourceQEMU),
		func() inventory.Disk {
			d := disk("lvproc", "virtio-disk0", "/img/q", 2, discovery.SourceQEMU)
			d.QMPNote = discovery.QMPNoteLibvirt
			return d
		}(),
		func() inventory.Disk {
			d := disk("noflag", "vd1", "/img/r", 3, discovery.SourceQEMU)
			d.QMPNote = discovery.QMPNoteNotAllowed
			return d
		}(),
	}}
	p := New(inv, Options{Libvirt: lv})
	// Before the first round: no values, and the reason where there is no source.
	if s := p.Status(&inv.disks[0]); s.Source != SourceLibvirt || s.Status != StatusUnreachable || s.Reading != nil {
		t.Errorf("vda before a round: %+v", s)
	}
	if s := p.Status(&inv.disks[5]); s.Source != SourceNone || s.Status != StatusNotAllowed {
		t.Errorf("noflag before a round: %+v", s)
	}
	p.Poll(context.Background())
	if calls.Load() != 1 {
		t.Errorf("libvirt called %d times in a round, want once", calls.Load())
	}
	var want Stats
	want.Requests = [NumOps]Counter{set(12485), set(13847), set(43502), {}}
	want.Bytes = [NumOps]Counter{set(51136000), set(94490624), {}, {}}
	want.TimeNs = [NumOps]Counter{set(2115621682), set(2724809085), set(19865032883), {}}
	s := p.Status(&inv.disks[0])
	if s.Source != SourceLibvirt || s.Status != StatusOK || s.Reading.Stats() != want {
		t.Errorf("vda: %+v, want %+v", s, want)
	}
	var wantB Stats
	wantB.Requests[OpRead] = set(1)
	if s := p.Status(&inv.disks[1]); s.Status != StatusOK || s.Reading.Stats() != wantB {
		t.Errorf("by path: %+v", s)
	}
	for i, w := range []struct{ source, status string }{
		{SourceLibvirt, StatusNoDevice}, {SourceNone, StatusNoMonitor}, {SourceNone, StatusLibvirtMonitor}, {SourceNone, StatusNotAllowed},
	} {
		if s := p.Status(&inv.disks[2+i]); s.Source != w.source || s.Status != w.status || s.Reading != nil {
			t.Errorf("disk %d: %+v, want %s %s", 2+i, s, w.source, w.status)
		}
	}
	fail.Store(true)
	p.Poll(context.Background())
	if s := p.Status(&inv.disks[0]); s.Status != StatusStale || s.Reading.Stats() != want {
		t.Errorf("libvirt failing: %+v", s)
	}
	if st := p.Stats(); st.Polls[SourceLibvirt] != 2 || st.Errors[SourceLibvirt] != 1 {
		t.Errorf("poll stats %+v", st)
	}

	// Without the libvirt source, libvirt's disks have no guest side.
	p = New(inv, Options{})
	p.Poll(context.Background())
	if s := p.Status(&inv.disks[0]); s.Status != StatusLibvirtMonitor || s.Reading != nil {
		t.Errorf("no libvirt source: %+v", s)
	}
}

// kernelSlot is the slot of the image file's latency histogram that a
// latency of ns falls in, as ns_bucket() in bpf/fspair.h counts it: the
// first k with ns <= 1 us * 2^k, the last slot above 2^23 us.
func kernelSlot(ns uint64) int {
	k := 0
	for k < LatencySlots-1 && ns > 1000<<k {
		k++
	}
	return k
}

// opTotals are a device's requests and failed requests of an operation.
func opTotals(st *Stats, op int) uint64 { return st.Requests[op].V + st.Failed[op].V }

// TestPollQMPHistograms: fspair sets each device's histograms once, on
// its bounds, in the session that reads the statistics; QEMU's bins then
// land in the kernel's slots exactly (latencies on and next to every
// bound), and their count grows as requests and failed requests do; a
// QEMU that forgot them (restarted) gets them again; a drive without a
// guest device, and a QEMU without the command, are refused and not asked
// again each round; a histogram on other bounds is left alone.
func TestPollQMPHistograms(t *testing.T) {
	const dev = "/machine/peripheral/vd1/virtio-backend"
	dir := t.TempDir()
	q := startFakeQMP(t, dir, "vm.qmp")
	q.set([]map[string]any{
		{"device": "drive-vd1", "qdev": dev, "node-name": "#block1", "stats": qemuStats(0)},
		// -drive if=none with no -device: no guest device to set it on.
		{"device": "spare", "qdev": "", "node-name": "#block2", "stats": qemuStats(0)},
	}, nil)
	inv := &fakeInv{disks: []inventory.Disk{
		disk("vm", "vd1", "/img/a", 0, discovery.SourceQEMU, q.path),
		disk("vm", "spare", "/img/b", 0, discovery.SourceQEMU, q.path),
	}}
	p := New(inv, Options{Timeout: time.Second, SetHistograms: true})
	status := func(i int) Status { return p.Status(&inv.disks[i]) }

	p.Poll(context.Background())
	if s := status(0); s.Status != StatusOK || s.Histogram != HistogramNotSet || s.Reading.Stats().Latency != [NumOps]Histogram{} {
		t.Fatalf("round 1: %+v, want ok, histogram not_set, no bins", s)
	}
	if s := status(1); s.Status != StatusOK || s.Histogram != HistogramRefused {
		t.Errorf("drive without a device: %+v, want ok, histogram refused", s)
	}
	if n := q.count("block-latency-histogram-set"); n != 1 || q.conns.Load() != 1 {
		t.Fatalf("block-latency-histogram-set %d times in %d sessions, want once in one", n, q.conns.Load())
	}
	wantBounds := make([]any, len(LatencyBoundsNs))
	for k, b := range LatencyBoundsNs {
		wantBounds[k] = float64(b)
	}
	want := map[string]any{"id": dev, "boundaries-read": wantBounds, "boundaries-write": wantBounds, "boundaries-flush": wantBounds}
	if got := q.setArgs[0]; !reflect.DeepEqual(got, want) {
		t.Errorf("set arguments %v, want %v", got, want)
	}
	base := status(0).Reading.Stats()

	// Latencies on, below and above every bound, and past the last.
	var lat []uint64
	for k := range LatencySlots - 1 {
		b := uint64(1000) << k
		lat = append(lat, b-1, b, b+1)
	}
	lat = append(lat, 0, 60e9)
	var wantBins [NumOps][LatencySlots]uint64
	for i, ns := range lat {
		for _, op := range HistogramOps {
			failed := i%7 == op // some failed, in every operation
			q.complete(dev, OpNames[op], ns+uint64(op), failed)
			wantBins[op][kernelSlot(ns+uint64(op))]++
		}
	}
	p.Poll(context.Background())
	s := status(0)
	if s.Histogram != HistogramOK {
		t.Fatalf("round 2: histogram %s, want ok", s.Histogram)
	}
	for _, op := range HistogramOps {
		h := s.Reading.Stats().Latency[op]
		if !h.OK || h.Bins != wantBins[op] {
			t.Errorf("%s: bins %v, want the kernel's slots %v", OpNames[op], h.Bins, wantBins[op])
		}
		var count uint64
		for _, n := range h.Bins {
			count += n
		}
		now := s.Reading.Stats()
		if grew := opTotals(&now, op) - opTotals(&base, op); count != grew || count != uint64(len(lat)) {
			t.Errorf("%s: histogram count %d, requests and failures grew by %d, %d completed", OpNames[op], count, grew, len(lat))
		}
	}
	if s.Reading.Stats().Latency[OpDiscard].OK {
		t.Error("a discard histogram: QEMU keeps none")
	}
	if n := q.count("block-latency-histogram-set"); n != 1 {
		t.Errorf("set %d times once the histograms are there, want once", n)
	}

	// QEMU restarted (or someone removed them): set again, once.
	q.restart()
	p.Poll(context.Background())
	if s := status(0); s.Histogram != HistogramNotSet || q.count("block-latency-histogram-set") != 2 {
		t.Errorf("after a restart: histogram %s, set %d times; want not_set, 2", s.Histogram, q.count("block-latency-histogram-set"))
	}
	p.Poll(context.Background())
	if s := status(0); s.Histogram != HistogramOK || s.Reading.Stats().Latency[OpRead].Bins != [LatencySlots]uint64{} {
		t.Errorf("after the new set: %s %v, want ok and empty", s.Histogram, s.Reading.Stats().Latency[OpRead].Bins)
	}
	// The drive without a device was refused once, and not asked since.
	for _, a := range q.setArgs {
		if a["id"] == "" {
			t.Errorf("asked QEMU to set a histogram on no device: %v", a)
		}
	}
	if s := status(1); s.Histogram != HistogramRefused {
		t.Errorf("drive without a device, later rounds: %s", s.Histogram)
	}
}

// TestPollQMPHistogramRefused: a QEMU without block-latency-histogram-set
// (before 4.0) is asked once and reported refused; a histogram someone set
// on other bounds is reported and left alone; with SetHistograms off,
// fspair asks nothing and reads only histograms on its bounds.
func TestPollQMPHistogramRefused(t *testing.T) {
	const dev = "/machine/peripheral/vd1/virtio-backend"
	dir := t.TempDir()
	q := startFakeQMP(t, dir, "old.qmp")
	q.set([]map[string]any{{"device": "drive-vd1", "qdev": dev, "stats": qemuStats(0)}}, nil)
	q.mu.Lock()
	q.refuse = "CommandNotFound"
	q.mu.Unlock()
	inv := &fakeInv{disks: []inventory.Disk{disk("vm", "vd1", "/img/a", 0, discovery.SourceQEMU, q.path)}}
	p := New(inv, Options{Timeout: time.Second, SetHistograms: true})
	for range 3 {
		p.Poll(context.Background())
		if s := p.Status(&inv.disks[0]); s.Status != StatusOK || s.Histogram != HistogramRefused {
			t.Fatalf("old QEMU: %+v, want ok, histogram refused", s)
		}
	}
	if n := q.count("block-latency-histogram-set"); n != 1 {
		t.Errorf("old QEMU asked %d times in 3 rounds, want once", n)
	}

	q2 := startFakeQMP(t, dir, "other.qmp")
	q2.set([]map[string]any{{"device": "drive-vd1", "qdev": dev, "stats": qemuStats(0)}}, nil)
	q2.mu.Lock()
	q2.hists = map[string]map[string]*fakeHist{dev: {"rd_latency_histogram": {bounds: []uint64{10, 50, 100}, bins: []uint64{1, 2, 3, 4}}}}
	q2.mu.Unlock()
	inv2 := &fakeInv{disks: []inventory.Disk{disk("vm2", "vd1", "/img/a", 0, discovery.SourceQEMU, q2.path)}}
	p2 := New(inv2, Options{Timeout: time.Second, SetHistograms: true})
	p2.Poll(context.Background())
	if s := p2.Status(&inv2.disks[0]); s.Histogram != HistogramOtherBounds || s.Reading.Stats().Latency[OpRead].OK {
		t.Errorf("other bounds: %+v, want other_bounds and no bins", s)
	}
	if n := q2.count("block-latency-histogram-set"); n != 0 {
		t.Errorf("other bounds: set %d times, want never", n)
	}

	q3 := startFakeQMP(t, dir, "off.qmp")
	q3.set([]map[string]any{{"device": "drive-vd1", "qdev": dev, "stats": qemuStats(0)}}, nil)
	inv3 := &fakeInv{disks: []inventory.Disk{disk("vm3", "vd1", "/img/a", 0, discovery.SourceQEMU, q3.path)}}
	p3 := New(inv3, Options{Timeout: time.Second})
	p3.Poll(context.Background())
	if s := p3.Status(&inv3.disks[0]); s.Histogram != HistogramNotSet || q3.count("block-latency-histogram-set") != 0 {
		t.Errorf("SetHistograms off: %s, set %d times; want not_set, never", s.Histogram, q3.count("block-latency-histogram-set"))
	}
}

// libvirtHistogram is a latency histogram as libvirt 12.1's statistics
// list it: block.<n>.latency_histogram.<op>.bin.count, then each bin's
// start (its lower bound, ns) and value.
func libvirtHistogram(n int, op string, starts, values []uint64) []libvirt.TypedParam {
	prefix := "block." + strconv.Itoa(n) + ".latency_histogram." + op + ".bin."
	out := []libvirt.TypedParam{typed(prefix+"count", uint64(len(starts)))}
	for i := range starts {
		out = append(out, typed(prefix+strconv.Itoa(i)+".start", starts[i]), typed(prefix+strconv.Itoa(i)+".value", values[i]))
	}
	return out
}

// TestPollLibvirtHistograms: libvirt's histograms on fspair's bounds are
// read bin for bin; on other bounds reported and not exported; a disk
// without any says why by libvirt's version (too old before 12.1, the
// domain asking for none from 12.1, not_set while the version is unknown).
func TestPollLibvirtHistograms(t *testing.T) {
	ours := append([]uint64{0}, LatencyBoundsNs[:]...)
	bins := make([]uint64, LatencySlots)
	for i := range bins {
		bins[i] = uint64(3*i + 1)
	}
	params := []libvirt.TypedParam{typed("block.count", uint64(3)),
		typed("block.0.name", "vda"), typed("block.0.rd.reqs", uint64(5)),
		typed("block.1.name", "vdb"), typed("block.1.rd.reqs", uint64(6)),
		typed("block.2.name", "vdc"), typed("block.2.rd.reqs", uint64(7))}
	for _, op := range []string{"read", "write", "flush"} {
		params = append(params, libvirtHistogram(0, op, ours, bins)...)
	}
	params = append(params, libvirtHistogram(1, "read", []uint64{0, 10, 100}, []uint64{1, 2, 3})...)
	recs := []libvirt.DomainStatsRecord{{Dom: libvirt.Domain{Name: "db"}, Params: params}}
	var version atomic.Uint64
	inv := &fakeInv{disks: []inventory.Disk{
		disk("db", "vda", "/img/a", 1, discovery.SourceLibvirt),
		disk("db", "vdb", "/img/b", 1, discovery.SourceLibvirt),
		disk("db", "vdc", "/img/c", 1, discovery.SourceLibvirt),
	}}
	p := New(inv, Options{Libvirt: func(context.Context) ([]libvirt.DomainStatsRecord, error) { return recs, nil },
		LibvirtVersion: version.Load})
	for _, c := range []struct {
		version uint64
		vdc     string
	}{{0, HistogramNotSet}, {9_000_000, HistogramLibvirtTooOld}, {12_000_000, HistogramLibvirtTooOld}, {12_001_000, HistogramNotSet}} {
		version.Store(c.version)
		p.Poll(context.Background())
		a := p.Status(&inv.disks[0])
		if a.Status != StatusOK || a.Histogram != HistogramOK {
			t.Fatalf("vda: %+v", a)
		}
		for _, op := range HistogramOps {
			if h := a.Reading.Stats().Latency[op]; !h.OK || !slices.Equal(h.Bins[:], bins) {
				t.Errorf("vda %s: %v, want %v", OpNames[op], h, bins)
			}
		}
		if b := p.Status(&inv.disks[1]); b.Histogram != HistogramOtherBounds || b.Reading.Stats().Latency[OpRead].OK {
			t.Errorf("vdb (other bounds): %+v", b)
		}
		if s := p.Status(&inv.disks[2]); s.Status != StatusOK || s.Histogram != c.vdc {
			t.Errorf("vdc, libvirt %d: histogram %s, want %s", c.version, s.Histogram, c.vdc)
		}
	}
}

// passThrough is libvirt's monitor pass-through to a fake QEMU: the
// command as libvirt takes it (a QMP command object), QEMU's reply object
// as libvirt returns it.
func passThrough(t *testing.T, q *fakeQMP, calls *atomic.Int32, wantUUID string) LibvirtMonitor {
	return func(ctx context.Context, uuid, command string) (string, error) {
		calls.Add(1)
		if uuid != wantUUID {
			t.Errorf("pass-through to domain %s, want %s", uuid, wantUUID)
		}
		var req struct {
			Execute   string         `json:"execute"`
			Arguments map[string]any `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(command), &req); err != nil {
			return "", err
		}
		s, err := dialQMP(ctx, q.path, time.Now().Add(time.Second))
		if err != nil {
			return "", err
		}
		defer s.close()
		var args any
		if req.Arguments != nil {
			args = req.Arguments
		}
		var ret json.RawMessage
		err = s.executeArgs(req.Execute, args, &ret)
		var reply any = map[string]any{"return": ret, "id": "libvirt-7"}
		var qe *qmpError
		if errors.As(err, &qe) {
			reply = map[string]any{"error": map[string]any{"class": qe.Class, "desc": qe.Desc}, "id": "libvirt-7"}
		} else if err != nil {
			return "", err
		}
		b, _ := json.Marshal(reply)
		return string(b), nil
	}
}

// TestPollLibvirtMonitorHistograms: with LibvirtMonitor (the operator's
// --guest.libvirt-monitor-histograms), a libvirt domain whose statistics
// have no histograms (libvirt 9.0) gets them set and read through
// libvirt's pass-through, matched by image file, the counters still from
// libvirt's statistics; without it the pass-through is never used.
func TestPollLibvirtMonitorHistograms(t *testing.T) {
	const dev = "/machine/peripheral/virtio-disk0/virtio-backend"
	const uuid = "8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b"
	dir := t.TempDir()
	img := filepath.Join(dir, "web01.qcow2")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	q := startFakeQMP(t, dir, "libvirt-monitor.sock")
	q.set([]map[string]any{{"device": "", "qdev": dev, "node-name": "libvirt-1-format", "stats": qemuStats(0)}},
		[]map[string]any{{"device": "", "qdev": dev, "inserted": map[string]any{"file": img, "node-name": "libvirt-1-format", "image": map[string]any{"filename": img}}}})
	recs := []libvirt.DomainStatsRecord{{
		Dom: libvirt.Domain{Name: "web01", UUID: libvirt.UUID{0x8f, 0x4b, 0x2c, 0x1e, 0x5d, 0x3a, 0x4e, 0x6f, 0x9a, 0x8b, 0x7c, 0x6d, 0x5e, 0x4f, 0x3a, 0x2b}},
		Params: []libvirt.TypedParam{typed("block.count", uint64(1)), typed("block.0.name", "vda"), typed("block.0.path", img),
			typed("block.0.rd.reqs", uint64(12485))},
	}}
	d := disk("web01", "vda", img, 4242, discovery.SourceLibvirt)
	d.UUID = uuid
	inv := &fakeInv{disks: []inventory.Disk{d}}
	lv := func(context.Context) ([]libvirt.DomainStatsRecord, error) { return recs, nil }
	version := func() uint64 { return 9_000_000 }

	var calls atomic.Int32
	p := New(inv, Options{Timeout: time.Second, Libvirt: lv, LibvirtVersion: version, LibvirtMonitor: passThrough(t, q, &calls, uuid)})
	p.Poll(context.Background())
	if s := p.Status(&inv.disks[0]); s.Status != StatusOK || s.Histogram != HistogramNotSet {
		t.Fatalf("round 1: %+v, want ok, not_set", s)
	}
	if q.count("block-latency-histogram-set") != 1 || q.setArgs[0]["id"] != dev {
		t.Fatalf("set %d times, arguments %v; want once on %s", q.count("block-latency-histogram-set"), q.setArgs, dev)
	}
	q.complete(dev, "read", 1500, false)
	q.complete(dev, "read", 3000, true)
	p.Poll(context.Background())
	s := p.Status(&inv.disks[0])
	var want [LatencySlots]uint64
	want[1], want[2] = 1, 1 // 1.5 us in (1, 2] us, 3 us in (2, 4] us
	if s.Histogram != HistogramOK || s.Reading.Stats().Latency[OpRead].Bins != want || !s.Reading.Stats().Latency[OpRead].OK {
		t.Errorf("round 2: %s %v, want ok %v", s.Histogram, s.Reading.Stats().Latency[OpRead], want)
	}
	if r := s.Reading.Stats().Requests[OpRead]; r != set(12485) {
		t.Errorf("read requests %+v, want libvirt's 12485", r)
	}
	if n := q.count("block-latency-histogram-set"); n != 1 {
		t.Errorf("set %d times, want once", n)
	}

	calls.Store(0)
	p = New(inv, Options{Timeout: time.Second, Libvirt: lv, LibvirtVersion: version})
	p.Poll(context.Background())
	if s := p.Status(&inv.disks[0]); s.Histogram != HistogramLibvirtTooOld || calls.Load() != 0 {
		t.Errorf("without the pass-through: %s, %d calls; want libvirt_too_old, none", s.Histogram, calls.Load())
	}
}

// TestBlockstatsDecode: each field of a device's statistics is decoded
// once, with the reply: an unsigned integer is a counter; a negative,
// fractional, exponent, string, boolean or null value is left absent
// (never a zero); an object is a histogram, ours only on LatencyBoundsNs
// with LatencySlots bins, anything else (other bounds, a bin short or
// over, a malformed bin) another one.
func TestBlockstatsDecode(t *testing.T) {
	bounds, _ := json.Marshal(LatencyBoundsNs)
	bins := make([]uint64, LatencySlots)
	for k := range bins {
		bins[k] = uint64(k) * 3
	}
	ours, _ := json.Marshal(bins)
	short, _ := json.Marshal(bins[1:])
	over, _ := json.Marshal(append(slices.Clone(bins), 1))
	raw := `[{"device":"d","stats":{
		"rd_operations":18446744073709551615,"wr_operations":-1,"flush_operations":1.5,"unmap_operations":1e3,
		"rd_bytes":"5","wr_bytes":null,"unmap_bytes":true,"failed_rd_operations":0,
		"rd_latency_histogram":{"boundaries":` + string(bounds) + `,"bins":` + string(ours) + `},
		"wr_latency_histogram":{"boundaries":` + string(bounds) + `,"bins":` + string(short) + `},
		"flush_latency_histogram":{"boundaries":` + string(bounds) + `,"bins":` + string(over) + `},
		"timed_stats":[{"interval_length":60}]}},
		{"device":"e","stats":{"rd_latency_histogram":{"boundaries":[10,20],"bins":[1,2,3]},
		"wr_latency_histogram":{"boundaries":` + string(bounds) + `,"bins":["x"]},"flush_latency_histogram":7}}]`
	var entries []blockstatsEntry
	if err := parseBlockstats([]byte(raw), &entries); err != nil {
		t.Fatal(err)
	}
	st, kinds := entries[0].stats()
	if st.Requests[OpRead] != set(1<<64-1) || st.Failed[OpRead] != set(0) {
		t.Errorf("unsigned counters: %+v %+v", st.Requests[OpRead], st.Failed[OpRead])
	}
	for name, c := range map[string]Counter{"-1": st.Requests[OpWrite], "1.5": st.Requests[OpFlush], "1e3": st.Requests[OpDiscard],
		`"5"`: st.Bytes[OpRead], "null": st.Bytes[OpWrite], "true": st.Bytes[OpDiscard]} {
		if c.OK {
			t.Errorf("%s read as the counter %d, want absent", name, c.V)
		}
	}
	if !st.Latency[OpRead].OK || st.Latency[OpRead].Bins != [LatencySlots]uint64(bins) || kinds[OpRead] != histOurs {
		t.Errorf("read histogram on fspair's bounds: %v (%d)", st.Latency[OpRead], kinds[OpRead])
	}
	want := [NumOps]histKind{histOurs, histOther, histOther, histAbsent}
	if kinds != want || st.Latency[OpWrite].OK || st.Latency[OpFlush].OK {
		t.Errorf("kinds %v, want %v (a bin short, a bin over)", kinds, want)
	}
	st, kinds = entries[1].stats()
	if want := [NumOps]histKind{histOther, histOther, histOther, histAbsent}; kinds != want || st.Latency != [NumOps]Histogram{} {
		t.Errorf("other bounds, a malformed bin, a number: kinds %v, want %v; %v", kinds, want, st.Latency)
	}
}

// TestLibvirtBins: a libvirt histogram is fspair's only with its count at
// LatencySlots, every bin's start and value there, the first bin alone
// starting at 0, on LatencyBoundsNs; a bin past the count is not read.
func TestLibvirtBins(t *testing.T) {
	starts := append([]uint64{0}, LatencyBoundsNs[:]...)
	values := make([]uint64, LatencySlots)
	for i := range values {
		values[i] = uint64(i + 1)
	}
	for _, c := range []struct {
		name string
		edit func(p []libvirt.TypedParam) []libvirt.TypedParam
		want histKind
	}{
		{"ours", func(p []libvirt.TypedParam) []libvirt.TypedParam { return p }, histOurs},
		{"a bin past the count", func(p []libvirt.TypedParam) []libvirt.TypedParam {
			return append(p, typed("block.0.latency_histogram.read.bin.30.value", uint64(9)))
		}, histOurs},
		{"a value missing", func(p []libvirt.TypedParam) []libvirt.TypedParam {
			return slices.DeleteFunc(p, func(x libvirt.TypedParam) bool { return x.Field == "block.0.latency_histogram.read.bin.7.value" })
		}, histOther},
		{"a start missing", func(p []libvirt.TypedParam) []libvirt.TypedParam {
			return slices.DeleteFunc(p, func(x libvirt.TypedParam) bool { return x.Field == "block.0.latency_histogram.read.bin.24.start" })
		}, histOther},
		{"first bin not at 0", func(p []libvirt.TypedParam) []libvirt.TypedParam {
			return append(p, typed("block.0.latency_histogram.read.bin.0.start", uint64(5)))
		}, histOther},
		{"a bin more", func(p []libvirt.TypedParam) []libvirt.TypedParam {
			p = append(p, typed("block.0.latency_histogram.read.bin.25.start", uint64(1)<<40), typed("block.0.latency_histogram.read.bin.25.value", uint64(1)))
			return append(p, typed("block.0.latency_histogram.read.bin.count", uint64(LatencySlots+1)))
		}, histOther},
	} {
		params := []libvirt.TypedParam{typed("block.count", uint64(1)), typed("block.0.name", "vda")}
		params = c.edit(append(params, libvirtHistogram(0, "read", starts, values)...))
		doms := parseLibvirtStats([]libvirt.DomainStatsRecord{{Dom: libvirt.Domain{Name: "db"}, Params: params}})
		if len(doms) != 1 || len(doms[0].disks) != 1 {
			t.Fatalf("%s: %+v", c.name, doms)
		}
		d := &doms[0].disks[0]
		if got := d.kinds[OpRead]; got != c.want || d.stats.Latency[OpRead].OK != (c.want == histOurs) {
			t.Errorf("%s: kind %d (%v), want %d", c.name, got, d.stats.Latency[OpRead], c.want)
		}
		if c.want == histOurs && !slices.Equal(d.stats.Latency[OpRead].Bins[:], values) {
			t.Errorf("%s: bins %v, want %v", c.name, d.stats.Latency[OpRead].Bins, values)
		}
	}
}

// TestQMPReplyDecode: a command's "return" value is decoded with its reply
// into the caller's value; an event before it leaves that value alone; a
// reply of the wrong shape is an error at once (not a wait for the
// deadline), and QEMU's refusal a *qmpError.
func TestQMPReplyDecode(t *testing.T) {
	for _, c := range []struct {
		name, lines string
		want        []blockstatsEntry
		err         bool
		refused     bool
	}{
		{"event first", `{"event":"BLOCK_IO_ERROR","data":{"device":"x"},"return":null}` + "\n" +
			`{"return":[{"device":"d","stats":{"rd_operations":7}}],"id":"fspair-1"}` + "\n",
			[]blockstatsEntry{{Device: "d", st: Stats{Counters: Counters{Requests: [NumOps]Counter{OpRead: set(7)}}}}}, false, false},
		{"wrong shape", `{"return":{"device":"d"},"id":"fspair-1"}` + "\n", nil, true, false},
		{"refused", `{"error":{"class":"GenericError","desc":"no"},"id":"fspair-1"}` + "\n", nil, true, true},
	} {
		client, server := net.Pipe()
		go func() {
			bufio.NewReader(server).ReadBytes('\n') // the command
			server.Write([]byte(c.lines))
		}()
		_ = client.SetDeadline(time.Now().Add(5 * time.Second))
		s := &qmpSession{conn: client, r: bufio.NewReader(client)}
		var got []blockstatsEntry
		start := time.Now()
		err := s.executeArgs("query-blockstats", nil, &got)
		var qe *qmpError
		if (err != nil) != c.err || errors.As(err, &qe) != c.refused || time.Since(start) > 2*time.Second {
			t.Errorf("%s: error %v after %v", c.name, err, time.Since(start))
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: decoded %+v, want %+v", c.name, got, c.want)
		}
		client.Close()
		server.Close()
	}
}
