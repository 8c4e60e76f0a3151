// Command fakeqmp serves one QMP monitor per VM of the scrape bench
// (scripts/bench.sh, part scrape, SCRAPE_GUEST=qmp), so that the
// exporter's disks have guest values without a QEMU per disk: for VM i
// (1..n) a unix socket DIR/vm<i>.qmp whose query-blockstats has one
// device, vda (qdev /machine/peripheral/vda/virtio-backend, the target the
// bench's static config gives every disk), with QEMU 7.2's
// BlockDeviceStats fields. The device is a typical guest's: reads,
// writes and flushes, never a discard (QEMU's unmap counters at 0), its
// counters growing with each read; once the exporter sets the read, write
// and flush latency histograms (block-latency-histogram-set), the replies
// carry them on the bounds it asked for, with observations in a few bins.
// With -histograms they are there from the start, on fspair's bounds, as
// in a QEMU whose histograms an exporter before this one set: the
// exporter's first read has them.
// It serves until it is killed, and writes "ready" to stdout once every
// socket listens, and "served N" on SIGUSR1: the query-blockstats
// answered so far, all VMs (the exporter's polls, counted as they are
// answered, for the bench's CPU per poll).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/fspair/fspair/exporter/guest"
)

func main() { os.Exit(run()) }

func run() int {
	dir := flag.String("dir", "", "directory for the sockets vm1.qmp .. vmN.qmp")
	n := flag.Int("n", 0, "number of VMs, one disk each")
	preset := flag.Bool("histograms", false, "start with the latency histograms set on fspair's bounds")
	flag.Parse()
	if *dir == "" || *n <= 0 {
		fmt.Fprintln(os.Stderr, "fakeqmp: -dir and -n are required")
		return 2
	}
	// A listener a VM, and the exporter's sessions: more descriptors than
	// the usual soft limit of 1024.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	for i := 1; i <= *n; i++ {
		path := filepath.Join(*dir, "vm"+strconv.Itoa(i)+".qmp")
		_ = os.Remove(path)
		l, err := net.Listen("unix", path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fakeqmp: listen on %s: %v (raise ulimit -n?)\n", path, err)
			return 1
		}
		vm := &vm{seed: uint64(i)}
		if *preset {
			for op := range vm.bounds {
				vm.bounds[op] = guest.LatencyBoundsNs[:]
			}
		}
		go vm.serve(l)
	}
	fmt.Println("ready")
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	for range usr1 {
		fmt.Println("served", served.Load())
	}
	return 0
}

// served counts the query-blockstats answered, all VMs.
var served atomic.Uint64

// vm is one VM's monitor: its device's counters and histograms.
type vm struct {
	mu     sync.Mutex
	seed   uint64
	reads  uint64      // query-blockstats answered: the counters grow with it
	bounds [3][]uint64 // read, write, flush histogram bounds set; nil: none
}

func (v *vm) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go v.session(c)
	}
}

const greeting = `{"QMP": {"version": {"qemu": {"micro": 19, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7"}, "capabilities": ["oob"]}}` + "\n"

// qdev is the device's QOM path, as virtio-blk's backend reports it.
const qdev = "/machine/peripheral/vda/virtio-backend"

// request is a QMP command; id is echoed as it came.
type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

func (v *vm) session(c net.Conn) {
	defer c.Close()
	w := bufio.NewWriter(c)
	if _, err := w.WriteString(greeting); err != nil || w.Flush() != nil {
		return
	}
	dec := json.NewDecoder(bufio.NewReader(c))
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			return
		}
		var ret []byte
		switch req.Execute {
		case "qmp_capabilities":
			ret = []byte("{}")
		case "query-blockstats":
			ret = v.blockstats()
		case "query-block":
			ret = []byte("[]")
		case "block-latency-histogram-set":
			if v.setHistograms(req.Arguments) {
				ret = []byte("{}")
			}
		}
		b := []byte(`{"return": `)
		if ret == nil {
			b = []byte(`{"error": {"class": "GenericError", "desc": "fakeqmp: command not served"}`)
		} else {
			b = append(b, ret...)
		}
		if len(req.ID) > 0 {
			b = append(append(b, `, "id": `...), req.ID...)
		}
		b = append(b, "}\n"...)
		if _, err := w.Write(b); err != nil || w.Flush() != nil {
			return
		}
	}
}

// histOps are the boundaries arguments of block-latency-histogram-set and
// the stats fields of their histograms, read, write and flush.
var histOps = [3][2]string{
	{"boundaries-read", "rd_latency_histogram"},
	{"boundaries-write", "wr_latency_histogram"},
	{"boundaries-flush", "flush_latency_histogram"},
}

func (v *vm) setHistograms(raw json.RawMessage) bool {
	var args map[string]json.RawMessage
	// The device by its id or QOM path, as QEMU's qmp_get_blk() takes it.
	if json.Unmarshal(raw, &args) != nil || string(args["id"]) != `"vda"` && string(args["id"]) != `"`+qdev+`"` {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for op, names := range histOps {
		var b []uint64
		if a, ok := args[names[0]]; ok && json.Unmarshal(a, &b) == nil {
			v.bounds[op] = b
		}
	}
	return true
}

// blockstats is the query-blockstats return value: one device.
func (v *vm) blockstats() []byte {
	served.Add(1)
	v.mu.Lock()
	v.reads++
	k, seed, bounds := v.reads, v.seed, v.bounds
	v.mu.Unlock()
	ops := [3]uint64{1000*seed + 40*k, 500*seed + 30*k, 100*seed + 5*k} // read, write, flush requests
	fields := []struct {
		name string
		v    uint64
	}{
		{"rd_bytes", ops[0] * 4096}, {"wr_bytes", ops[1] * 8192}, {"unmap_bytes", 0}, {"zone_append_bytes", 0},
		{"rd_operations", ops[0]}, {"wr_operations", ops[1]}, {"flush_operations", ops[2]}, {"unmap_operations", 0},
		{"zone_append_operations", 0}, {"rd_total_time_ns", ops[0] * 180_000}, {"wr_total_time_ns", ops[1] * 350_000},
		{"flush_total_time_ns", ops[2] * 900_000}, {"unmap_total_time_ns", 0}, {"zone_append_total_time_ns", 0},
		{"wr_highest_offset", 1 << 30}, {"rd_merged", ops[0] / 8}, {"wr_merged", ops[1] / 5}, {"unmap_merged", 0},
		{"zone_append_merged", 0}, {"failed_rd_operations", 0}, {"failed_wr_operations", 0}, {"failed_flush_operations", 0},
		{"failed_unmap_operations", 0}, {"failed_zone_append_operations", 0}, {"invalid_rd_operations", 0},
		{"invalid_wr_operations", 0}, {"invalid_flush_operations", 0}, {"invalid_unmap_operations", 0},
		{"invalid_zone_append_operations", 0}, {"idle_time_ns", 1_000_000},
	}
	b := []byte(`[{"device": "", "qdev": "` + qdev + `", "node-name": "#block113", "stats": {`)
	for _, f := range fields {
		b = append(b, '"')
		b = append(b, f.name...)
		b = append(b, `": `...)
		b = strconv.AppendUint(b, f.v, 10)
		b = append(b, ", "...)
	}
	for op, bd := range bounds {
		if bd == nil {
			continue
		}
		b = append(b, '"')
		b = append(b, histOps[op][1]...)
		b = append(b, `": {"boundaries": [`...)
		for j, x := range bd {
			if j > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendUint(b, x, 10)
		}
		b = append(b, `], "bins": [`...)
		// The requests spread over four bins around the mean latency's.
		for j := 0; j <= len(bd); j++ {
			if j > 0 {
				b = append(b, ", "...)
			}
			var c uint64
			if mid := 7 + 2*op; j >= mid-1 && j <= mid+2 {
				c = ops[op] / 4
			}
			b = strconv.AppendUint(b, c, 10)
		}
		b = append(b, "]}, "...)
	}
	b = append(b, `"account_invalid": true, "account_failed": true, "timed_stats": []}}]`...)
	return b
}
