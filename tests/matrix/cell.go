package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/fspair/fspair/tests/lab"
)

// modeCurrent is the pseudo-mode that passes no --probe.mode flag: the
// exporter as it is on main before the flag exists.
const modeCurrent = "current"

// Engine is one of fio's I/O engines as the matrix runs it, with the disk
// configuration a VMM issuing I/O that way would have and the exporter's
// name for the I/O path (the path label of fspair_disk_unfollowed).
type Engine struct {
	Name    string // fio's ioengine
	Direct  bool   // O_DIRECT
	IODepth int
	Cache   string // the static configuration's cache mode
	AIO     string // ... and aio
}

// Engines are the matrix's three: buffered system calls through the page
// cache, linux-aio and io_uring with O_DIRECT, as QEMU does with
// cache=writeback aio=threads, cache=none aio=native and cache=none
// aio=io_uring.
var Engines = []Engine{
	{Name: "psync", Direct: false, IODepth: 1, Cache: "writeback", AIO: "threads"},
	{Name: "libaio", Direct: true, IODepth: 8, Cache: "none", AIO: "native"},
	{Name: "io_uring", Direct: true, IODepth: 8, Cache: "none", AIO: "io_uring"},
}

// Path is the exporter's name for the engine's I/O path.
func (e Engine) Path() string {
	switch {
	case e.Name == "libaio":
		return "linux_aio"
	case e.Name == "io_uring":
		return "io_uring"
	case e.Direct:
		return "syscall_direct"
	default:
		return "syscall_buffered"
	}
}

// engineByName finds one of Engines.
func engineByName(name string) (Engine, error) {
	for _, e := range Engines {
		if e.Name == name {
			return e, nil
		}
	}
	return Engine{}, fmt.Errorf("engine %q: want psync, libaio or io_uring", name)
}

// Ops are the operations compared, in report order.
var Ops = []string{"read", "write", "flush"}

// Status is a cell's outcome.
type Status string

const (
	StatusOK       Status = "ok"
	StatusSaidSo   Status = "said-so" // some op not followed, and the exporter says so
	StatusDiff     Status = "diff"    // a count differs from fio's
	StatusSilent   Status = "silent"  // a zero count with no word from the exporter
	StatusError    Status = "error"   // the cell could not be measured
	StatusNotBuilt Status = ""        // not run
)

// Failed reports whether s fails the matrix.
func (s Status) Failed() bool { return s == StatusDiff || s == StatusSilent || s == StatusError }

// OpCount is one operation of one cell: fio's accounting and the
// exporter's deltas over the fio run.
type OpCount struct {
	Op                   string
	FioRequests          uint64
	FioBytes             uint64
	Requests             uint64 // delta of fspair_disk_requests_total
	Bytes                uint64 // delta of fspair_disk_bytes_total
	Unfollowed           bool   // fspair_disk_unfollowed{op, path} was 1
	NegativeOrFractional bool   `json:",omitempty"` // a delta that is not a count: a counter reset
}

// Cell is one kernel x mode x FS x engine measurement.
type Cell struct {
	FS      string
	Engine  string
	Ops     []OpCount `json:",omitempty"`
	Status  Status
	Text    string // the report's words for it
	Error   string `json:",omitempty"`
	Seconds float64
}

// fioCounts is fio's accounting per op: requests and bytes; flushes are
// fsync plus fdatasync calls (FioSync's rule for fio 3.33).
func fioCounts(r *lab.FioResult) map[string][2]uint64 {
	t := r.Total()
	return map[string][2]uint64{
		"read":  {t.Read.TotalIOs, t.Read.IOBytes},
		"write": {t.Write.TotalIOs, t.Write.IOBytes},
		"flush": {t.Sync.TotalIOs, 0},
	}
}

// compare builds a cell's ops from fio's accounting and the readings
// before and after the fio run of file on engine's path.
func compare(fio map[string][2]uint64, before, after Reading, file string, e Engine) []OpCount {
	var ops []OpCount
	for _, op := range Ops {
		k := fileOp{file, op}
		req, badReq := delta(before.Requests[k], after.Requests[k])
		b, badBytes := delta(before.Bytes[k], after.Bytes[k])
		ops = append(ops, OpCount{
			Op: op, FioRequests: fio[op][0], FioBytes: fio[op][1], Requests: req, Bytes: b,
			Unfollowed:           after.unfollowed(file, op),
			NegativeOrFractional: badReq || badBytes,
		})
	}
	return ops
}

// delta is after-before as a count, and whether it is not one.
func delta(before, after float64) (uint64, bool) {
	d := after - before
	if d < 0 || d != math.Trunc(d) {
		return 0, true
	}
	return uint64(d), false
}

// verdict decides a cell from its ops. The relation is exact equality of
// requests per op, and of bytes for reads and writes (a flush moves none).
// An op the exporter says it does not follow on this path is "not followed
// (said so)" whatever it counted; a zero count where fio did I/O, without
// that word, is a silent zero; anything else unequal is a DIFF, written
// exporter/fio.
func verdict(ops []OpCount) (Status, string) {
	var diffs, silent, saidSo []string
	for _, o := range ops {
		switch {
		case o.Unfollowed:
			saidSo = append(saidSo, o.Op)
		case o.NegativeOrFractional:
			diffs = append(diffs, fmt.Sprintf("%s counter went back or is not whole", o.Op))
		case o.FioRequests > 0 && o.Requests == 0 && o.Bytes == 0:
			silent = append(silent, o.Op)
		default:
			if o.Requests != o.FioRequests {
				diffs = append(diffs, fmt.Sprintf("%s %d/%d", o.Op, o.Requests, o.FioRequests))
			}
			if o.Op != "flush" && o.Bytes != o.FioBytes {
				diffs = append(diffs, fmt.Sprintf("%s bytes %d/%d", o.Op, o.Bytes, o.FioBytes))
			}
		}
	}
	var parts []string
	status := StatusOK
	if len(saidSo) > 0 {
		status = StatusSaidSo
		parts = append(parts, "not followed (said so): "+strings.Join(saidSo, ", "))
	}
	if len(silent) > 0 {
		status = StatusSilent
		parts = append([]string{"silent 0: " + strings.Join(silent, ", ")}, parts...)
	}
	if len(diffs) > 0 {
		status = StatusDiff
		parts = append([]string{"DIFF " + strings.Join(diffs, ", ")}, parts...)
	}
	if len(parts) == 0 {
		return StatusOK, "ok"
	}
	return status, strings.Join(parts, "; ")
}

// cellFile is the fio data file of a cell in the guest.
func cellFile(fs string, e Engine) string {
	return fmt.Sprintf("%s/matrix-%s.dat", mountPoint(fs), e.Name)
}

// cellConfig is the exporter's static configuration path (on the data
// disk) for one cell, or for all cells of a guest ("all").
func cellConfig(name string) string { return guestPath("cells", name+".yml") }

// trackedFile is one file the exporter is told to follow, as a VM disk.
type trackedFile struct {
	Domain, File, Cache, AIO string
}

// configYAML is a static discovery configuration (exporter/discovery's
// format) tracking files without a pid: the exporter follows every process
// that does I/O on them.
func configYAML(files []trackedFile) string {
	var b strings.Builder
	b.WriteString("# Files of tests/matrix, followed in every process (no pid).\ndisks:\n")
	for i, f := range files {
		fmt.Fprintf(&b, "  - domain: %s\n    uuid: 00000000-0000-4000-8000-%012d\n    target_device: vd%c\n", f.Domain, i+1, 'b'+i)
		fmt.Fprintf(&b, "    source_file: %s\n    format: raw\n    cache: %s\n    aio: %s\n", f.File, f.Cache, f.AIO)
	}
	return b.String()
}

// tracked is the cells' files as configYAML takes them.
func tracked(cells []cellSpec) []trackedFile {
	var out []trackedFile
	for _, c := range cells {
		out = append(out, trackedFile{Domain: "matrix-" + c.name(), File: cellFile(c.FS, c.Engine), Cache: c.Engine.Cache, AIO: c.Engine.AIO})
	}
	return out
}

// cellSpec is a cell to run.
type cellSpec struct {
	FS     string
	Engine Engine
}

func (c cellSpec) name() string { return c.FS + "-" + c.Engine.Name }

// fioEnv fills the job's variables for a cell.
func fioEnv(c cellSpec) map[string]string {
	direct := "0"
	if c.Engine.Direct {
		direct = "1"
	}
	return map[string]string{
		"FILE": cellFile(c.FS, c.Engine), "ENGINE": c.Engine.Name, "DIRECT": direct,
		"IODEPTH": fmt.Sprint(c.Engine.IODepth),
	}
}
