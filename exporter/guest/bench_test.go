package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/fspair/fspair/exporter/discovery"
)

// blockstatsReply is a query-blockstats answer for n devices as QEMU 7.2
// sends it, with each device's read, write and flush histograms on
// fspair's bounds (bins of 9-digit counts) or without any.
func blockstatsReply(b testing.TB, n int, hist bool) []byte {
	b.Helper()
	entries := make([]map[string]any, n)
	for i := range entries {
		st := qemuStats(uint64(i) << 32)
		if hist {
			bins := make([]uint64, LatencySlots)
			for k := range bins {
				bins[k] = 100_000_000 + uint64(k)
			}
			for _, op := range HistogramOps {
				st[qmpHistograms[op]] = map[string]any{"boundaries": LatencyBoundsNs[:], "bins": bins}
			}
		}
		entries[i] = map[string]any{"device": "drive-vd" + strconv.Itoa(i), "qdev": "/machine/peripheral/vd" + strconv.Itoa(i) + "/virtio-backend",
			"node-name": "#block" + strconv.Itoa(i), "stats": st}
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkBlockstatsParse is the exporter's share of a guest poll per
// disk: decoding one device's query-blockstats entry and converting its
// counters, with its three latency histograms and without (the issue's
// bound: 1 ms per disk per poll). go test ./exporter/guest -bench
// BlockstatsParse -benchmem
func BenchmarkBlockstatsParse(b *testing.B) {
	for _, hist := range []bool{false, true} {
		b.Run("histograms="+strconv.FormatBool(hist), func(b *testing.B) {
			const disks = 16
			raw := blockstatsReply(b, disks, hist)
			b.ReportAllocs()
			for b.Loop() {
				var entries []blockstatsEntry
				if err := parseBlockstats(raw, &entries); err != nil {
					b.Fatal(err)
				}
				for i := range entries {
					st, kinds := entries[i].stats()
					if hist && (!st.Latency[OpFlush].OK || histogramLabel(&kinds) != HistogramOK) {
						b.Fatal("histograms not read")
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*disks), "ns/disk")
			b.ReportMetric(float64(len(raw))/disks, "reply-bytes/disk")
		})
	}
}

// BenchmarkPollQMP is a whole poll of one VM of 16 disks over a QMP
// socket (the fake monitor of the tests, in this process): dial,
// greeting, capabilities, query-blockstats, publish; with the histograms
// there and without. Per disk, it bounds what the exporter adds to the
// poll; QEMU's own time to answer is not in it.
func BenchmarkPollQMP(b *testing.B) {
	for _, hist := range []bool{false, true} {
		b.Run("histograms="+strconv.FormatBool(hist), func(b *testing.B) {
			const disks = 16
			q := startFakeQMP(b, b.TempDir(), "bench.qmp")
			var entries []map[string]any
			if err := json.Unmarshal(blockstatsReply(b, disks, false), &entries); err != nil {
				b.Fatal(err)
			}
			q.set(entries, nil)
			inv := &fakeInv{}
			for i := range disks {
				inv.disks = append(inv.disks, disk("vm", "vd"+strconv.Itoa(i), "/img/"+strconv.Itoa(i), 0, discovery.SourceQEMU, q.path))
			}
			p := New(inv, Options{Timeout: 5 * time.Second, SetHistograms: hist})
			p.Poll(context.Background()) // sets them, when asked to
			for b.Loop() {
				p.Poll(context.Background())
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*disks), "ns/disk")
			if s := p.Status(&inv.disks[0]); s.Status != StatusOK || (hist != (s.Histogram == HistogramOK)) {
				b.Fatalf("after the polls: %+v", s)
			}
		})
	}
}

// BenchmarkLibvirtParse is the exporter's share of a libvirt poll per
// disk: reading one domain's statistics records (the counters, and with
// histograms libvirt 12.1's three latency histograms on fspair's bounds).
// go test ./exporter/guest -bench LibvirtParse -benchmem
func BenchmarkLibvirtParse(b *testing.B) {
	for _, hist := range []bool{false, true} {
		b.Run("histograms="+strconv.FormatBool(hist), func(b *testing.B) {
			const disks = 16
			params := []libvirt.TypedParam{typed("block.count", uint64(disks))}
			starts := append([]uint64{0}, LatencyBoundsNs[:]...)
			values := make([]uint64, LatencySlots)
			for i := range disks {
				n := "block." + strconv.Itoa(i) + "."
				params = append(params, typed(n+"name", "vd"+strconv.Itoa(i)), typed(n+"path", "/img/"+strconv.Itoa(i)))
				for _, f := range []string{"rd.reqs", "rd.bytes", "rd.times", "wr.reqs", "wr.bytes", "wr.times", "fl.reqs", "fl.times"} {
					params = append(params, typed(n+f, uint64(1000+i)))
				}
				if hist {
					for _, op := range []string{"read", "write", "flush"} {
						params = append(params, libvirtHistogram(i, op, starts, values)...)
					}
				}
			}
			recs := []libvirt.DomainStatsRecord{{Dom: libvirt.Domain{Name: "db"}, Params: params}}
			b.ReportAllocs()
			for b.Loop() {
				doms := parseLibvirtStats(recs)
				if hist && doms[0].disks[disks-1].kinds[OpFlush] != histOurs {
					b.Fatal("histograms not read")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*disks), "ns/disk")
		})
	}
}

// cannedQMP serves n QMP sockets dir/vm<i>.qmp, each a VM of one disk, vda,
// whose query-blockstats reply is fixed bytes: QEMU 7.2's fields and the
// three histograms on fspair's bounds. Its replies cost little, so that a
// profile of a poll over many VMs is mostly the exporter's side.
func cannedQMP(b *testing.B, dir string, n int) []string {
	b.Helper()
	st := qemuStats(1 << 32)
	bins := make([]uint64, LatencySlots)
	for k := range bins {
		bins[k] = 100_000_000 + uint64(k)
	}
	for _, op := range HistogramOps {
		st[qmpHistograms[op]] = map[string]any{"boundaries": LatencyBoundsNs[:], "bins": bins}
	}
	ret, err := json.Marshal([]map[string]any{{"device": "", "qdev": "/machine/peripheral/vda/virtio-backend", "node-name": "#block1", "stats": st}})
	if err != nil {
		b.Fatal(err)
	}
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(dir, "vm"+strconv.Itoa(i)+".qmp")
		ln, err := net.Listen("unix", paths[i])
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go serveCanned(c, ret)
			}
		}()
	}
	return paths
}

// serveCanned answers a session: the greeting, {} to anything but
// query-blockstats, the reply's id echoed.
func serveCanned(c net.Conn, blockstats []byte) {
	defer c.Close()
	if _, err := c.Write([]byte(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": ""}, "capabilities": ["oob"]}}` + "\n")); err != nil {
		return
	}
	r := bufio.NewReader(c)
	var out []byte
	for {
		var req struct {
			Execute string          `json:"execute"`
			ID      json.RawMessage `json:"id"`
		}
		if !nextRequest(r, &req) {
			return
		}
		out = append(out[:0], `{"return": `...)
		if req.Execute == "query-blockstats" {
			out = append(out, blockstats...)
		} else {
			out = append(out, "{}"...)
		}
		out = append(append(append(out, `, "id": `...), req.ID...), "}\n"...)
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// BenchmarkPollQMPVMs is a whole round over many VMs of one disk each, a
// session each (MaxSessions at once), as at 10,000 plain-QEMU VMs: the
// exporter's share per VM, its time and allocations (the canned
// monitors' own are in the process too, and small). For a profile:
// go test ./exporter/guest -run X -bench PollQMPVMs -benchmem -cpuprofile cpu.out
func BenchmarkPollQMPVMs(b *testing.B) {
	const vms = 1000
	paths := cannedQMP(b, b.TempDir(), vms)
	inv := &fakeInv{}
	for i, p := range paths {
		inv.disks = append(inv.disks, disk("vm"+strconv.Itoa(i), "vda", "/img/"+strconv.Itoa(i), 0, discovery.SourceQEMU, p))
	}
	p := New(inv, Options{Timeout: 5 * time.Second, SetHistograms: true})
	p.Poll(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		p.Poll(context.Background())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*vms), "ns/vm")
	if s := p.Status(&inv.disks[vms-1]); s.Status != StatusOK || s.Histogram != HistogramOK {
		b.Fatalf("after the polls: %+v", s)
	}
	if st := p.Stats(); st.Errors[SourceQMP] != 0 {
		b.Fatalf("failed reads: %+v", st)
	}
}
