package probe

import (
	"fmt"
	"slices"

	bpf "github.com/fspair/fspair/bpf/obj"
)

// Mode is how the programs reach the requests: which kernel hooks they
// attach to. The maps and counters are the same in every mode; a mode
// changes what the host pays, and what it can see.
type Mode string

// The attach modes (--probe.mode).
const (
	// ModeAuto picks ModeFentry when the kernel attaches BPF trampolines,
	// else ModeTracepoint. It never picks ModeSyscall.
	ModeAuto Mode = "auto"
	// ModeFentry follows requests on fentry/fexit at the host file
	// systems' read, write, fsync and fallocate functions: only calls
	// into them pay. The production path (x86-64 since Linux 5.5).
	ModeFentry Mode = "fentry"
	// ModeTracepoint uses only tracepoints the file systems, iomap and
	// io_uring have (no system call tracepoint): direct I/O, io_uring and
	// most flushes, but not the threads' buffered I/O on ext4 and Btrfs.
	ModeTracepoint Mode = "tracepoint"
	// ModeSyscall follows QEMU's system calls on syscall tracepoints:
	// complete on any file system, but enabling one slows every system
	// call of every process on the host.
	ModeSyscall Mode = "syscall"
)

// Modes lists the modes an operator can ask for.
var Modes = []Mode{ModeAuto, ModeFentry, ModeTracepoint, ModeSyscall}

// ParseMode checks a --probe.mode value.
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	if !slices.Contains(Modes, m) {
		return "", fmt.Errorf("unknown probe mode %q (want auto, fentry, tracepoint or syscall)", s)
	}
	return m, nil
}

// The host file systems with hooks of their own.
const (
	fsExt4  = "ext4"
	fsXFS   = "xfs"
	fsBtrfs = "btrfs"
)

// hookFS are the file systems whose functions and tracepoints fspair knows.
var hookFS = []string{fsExt4, fsXFS, fsBtrfs}

// program describes one BPF program: the modes that load it, the file
// system module that provides its hook ("" for the core kernel), and
// alternatives: programs for the same hook under another kernel's name, of
// which the first that attaches is kept.
type program struct {
	name  string
	modes []Mode // nil: every mode
	fs    string
	alt   string // tried when this one does not attach
	// lazy: attached only once a followed device needs it (see TrackDevice).
	lazy bool
}

var (
	fentryOnly     = []Mode{ModeFentry}
	tracepointOnly = []Mode{ModeTracepoint}
	syscallOnly    = []Mode{ModeSyscall}
	// uringSubmitModes load io_uring's submission hook.
	uringSubmitModes = []Mode{ModeTracepoint, ModeSyscall}
)

// programs is every program of the disk and host objects. A program that
// is not here is a build error caught by TestProgramTable.
var programs = []program{
	// Every mode: io_uring's completion and punts, registration, and the
	// host block layer. io_uring's submission in the syscall mode, for
	// every request, and in the tracepoint mode for the reads and writes
	// no file-system tracepoint sees (buffered I/O on ext4 and Btrfs: see
	// Probes.setURingRest); the fentry mode sees them all at the kiocb
	// (bpf/disk.h uring_enter), which needs no walk of the fd table.
	{name: bpf.DiskProgIoUringSubmit, modes: uringSubmitModes, alt: bpf.DiskProgIoUringSubmitSqe},
	{name: bpf.DiskProgIoUringDone},
	{name: bpf.DiskProgIoUringPunt},
	{name: bpf.DiskProgRegisterImage},
	{name: bpf.HostProgHostBioQueue},
	{name: bpf.HostProgHostBioSplit},
	{name: bpf.HostProgHostRqIssue, lazy: true},
	{name: bpf.HostProgHostRqComplete},
	{name: bpf.HostProgHostDirtyFolio},
	{name: bpf.HostProgHostJbd2Commit},
	{name: bpf.HostProgHostXfsLogWrite, fs: fsXFS},
	{name: bpf.HostProgHostBtrfsCommit, fs: fsBtrfs},
	{name: bpf.HostProgHostBtrfsOrdered, fs: fsBtrfs},

	// fentry: the file systems' functions.
	{name: bpf.DiskProgExt4ReadEnter, modes: fentryOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4ReadExit, modes: fentryOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4WriteEnter, modes: fentryOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4WriteExit, modes: fentryOnly, fs: fsExt4},
	{name: bpf.DiskProgXfsReadEnter, modes: fentryOnly, fs: fsXFS},
	{name: bpf.DiskProgXfsReadExit, modes: fentryOnly, fs: fsXFS},
	{name: bpf.DiskProgXfsWriteEnter, modes: fentryOnly, fs: fsXFS},
	{name: bpf.DiskProgXfsWriteExit, modes: fentryOnly, fs: fsXFS},
	{name: bpf.DiskProgBtrfsReadEnter, modes: fentryOnly, fs: fsBtrfs},
	{name: bpf.DiskProgBtrfsReadExit, modes: fentryOnly, fs: fsBtrfs},
	{name: bpf.DiskProgBtrfsWriteEnter, modes: fentryOnly, fs: fsBtrfs},
	{name: bpf.DiskProgBtrfsWriteExit, modes: fentryOnly, fs: fsBtrfs},
	{name: bpf.DiskProgExt4FsyncEnter, modes: fentryOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4FsyncExit, modes: fentryOnly, fs: fsExt4},
	{name: bpf.DiskProgXfsFsyncEnter, modes: fentryOnly, fs: fsXFS},
	{name: bpf.DiskProgXfsFsyncExit, modes: fentryOnly, fs: fsXFS},
	{name: bpf.DiskProgBtrfsFsyncEnter, modes: fentryOnly, fs: fsBtrfs},
	{name: bpf.DiskProgBtrfsFsyncExit, modes: fentryOnly, fs: fsBtrfs},
	{name: bpf.DiskProgExt4FallocateEnter, modes: fentryOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4FallocateExit, modes: fentryOnly, fs: fsExt4},
	{name: bpf.DiskProgXfsFallocateEnter, modes: fentryOnly, fs: fsXFS},
	{name: bpf.DiskProgXfsFallocateExit, modes: fentryOnly, fs: fsXFS},
	{name: bpf.DiskProgBtrfsFallocateEnter, modes: fentryOnly, fs: fsBtrfs},
	{name: bpf.DiskProgBtrfsFallocateExit, modes: fentryOnly, fs: fsBtrfs},
	{name: bpf.DiskProgDioCompleteExit, modes: fentryOnly},
	{name: bpf.DiskProgDioCompleteNested, modes: fentryOnly},

	// tracepoint: iomap's and the file systems' tracepoints.
	{name: bpf.DiskProgDioRwBegin, modes: tracepointOnly},
	{name: bpf.DiskProgDioComplete, modes: tracepointOnly},
	{name: bpf.DiskProgDioRwQueued, modes: tracepointOnly},
	{name: bpf.DiskProgDioDoneNested, modes: tracepointOnly},
	{name: bpf.DiskProgXfsBufferedRead, modes: tracepointOnly, fs: fsXFS},
	{name: bpf.DiskProgXfsBufferedWrite, modes: tracepointOnly, fs: fsXFS},
	{name: bpf.DiskProgXfsFsync, modes: tracepointOnly, fs: fsXFS},
	{name: bpf.DiskProgExt4SyncEnter, modes: tracepointOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4SyncExit, modes: tracepointOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4Discard, modes: tracepointOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4WriteZeroes, modes: tracepointOnly, fs: fsExt4},
	{name: bpf.DiskProgExt4Allocate, modes: tracepointOnly, fs: fsExt4},
	{name: bpf.DiskProgBtrfsSync, modes: tracepointOnly, fs: fsBtrfs},

	// syscall: QEMU's system calls, and iomap for linux-aio.
	{name: bpf.DiskProgPread64Enter, modes: syscallOnly},
	{name: bpf.DiskProgPread64Exit, modes: syscallOnly},
	{name: bpf.DiskProgPwrite64Enter, modes: syscallOnly},
	{name: bpf.DiskProgPwrite64Exit, modes: syscallOnly},
	{name: bpf.DiskProgPreadvEnter, modes: syscallOnly},
	{name: bpf.DiskProgPreadvExit, modes: syscallOnly},
	{name: bpf.DiskProgPwritevEnter, modes: syscallOnly},
	{name: bpf.DiskProgPwritevExit, modes: syscallOnly},
	{name: bpf.DiskProgPreadv2Enter, modes: syscallOnly},
	{name: bpf.DiskProgPreadv2Exit, modes: syscallOnly},
	{name: bpf.DiskProgPwritev2Enter, modes: syscallOnly},
	{name: bpf.DiskProgPwritev2Exit, modes: syscallOnly},
	{name: bpf.DiskProgFdatasyncEnter, modes: syscallOnly},
	{name: bpf.DiskProgFdatasyncExit, modes: syscallOnly},
	{name: bpf.DiskProgFsyncEnter, modes: syscallOnly},
	{name: bpf.DiskProgFsyncExit, modes: syscallOnly},
	{name: bpf.DiskProgFallocateEnter, modes: syscallOnly},
	{name: bpf.DiskProgFallocateExit, modes: syscallOnly},
	{name: bpf.DiskProgIoSubmitEnter, modes: syscallOnly},
	{name: bpf.DiskProgIoSubmitExit, modes: syscallOnly},
	{name: bpf.DiskProgIomapDioBegin, modes: syscallOnly},
	{name: bpf.DiskProgIomapDioQueued, modes: syscallOnly},
	{name: bpf.DiskProgIomapDioDone, modes: syscallOnly},
	{name: bpf.DiskProgIomapDoneNested, modes: syscallOnly},
}

// inMode reports whether the program is loaded in mode m.
func (p program) inMode(m Mode) bool { return p.modes == nil || slices.Contains(p.modes, m) }

// isAlt reports whether name is only an alternative of another program.
func isAlt(name string) bool {
	for _, p := range programs {
		if p.alt == name {
			return true
		}
	}
	return false
}

// How QEMU reaches an image file for a request, the `path` label of
// fspair_disk_unfollowed.
const (
	PathSyscallBuffered = "syscall_buffered" // aio=threads, host page cache (pread/pwrite)
	PathSyscallDirect   = "syscall_direct"   // aio=threads, cache=none/directsync (O_DIRECT)
	PathLinuxAIO        = "linux_aio"        // aio=native (io_submit, direct I/O)
	PathIOURing         = "io_uring"         // aio=io_uring
	PathSyscall         = "syscall"          // flushes and fallocate from QEMU's threads
)

// What a gap leaves out, the `measure` label of fspair_disk_unfollowed.
const (
	MissingRequests = "requests" // the requests are not seen: their counters stay at 0
	MissingLatency  = "latency"  // counted at submission, untimed
	// MissingFlushCost: the flushes are counted, but the device writes
	// they cause (fspair_disk_flush_device_*) are not charged to the disk.
	MissingFlushCost = "flush_cost"
)

// Gap is one request path of a disk that the running programs do not
// follow fully.
type Gap struct {
	Op, Path, Missing string
}

// Ops are the operations of the op label, in the order of enum op in bpf/call.h.
var Ops = []string{"read", "write", "flush", "discard", "write_zeroes", "allocate"}

// DiskPaths are the paths QEMU uses for op on a disk with the given cache
// and aio modes (QEMU's -drive cache= and aio= values); an unknown mode
// gives every path it could be.
func DiskPaths(op, cache, aio string) []string {
	switch op {
	case "read", "write":
		switch aio {
		case "native":
			return []string{PathLinuxAIO}
		case "io_uring":
			return []string{PathIOURing}
		case "threads":
			return cachePaths(cache)
		}
		return append(cachePaths(cache), PathLinuxAIO, PathIOURing)
	case "flush":
		switch aio {
		case "io_uring":
			return []string{PathIOURing}
		case "threads", "native":
			return []string{PathSyscall}
		}
		return []string{PathSyscall, PathIOURing}
	}
	// QEMU issues discards and write-zeroes with fallocate from its
	// thread pool whatever the aio mode.
	return []string{PathSyscall}
}

func cachePaths(cache string) []string {
	switch cache {
	case "none", "directsync":
		return []string{PathSyscallDirect}
	case "writeback", "writethrough", "unsafe":
		return []string{PathSyscallBuffered}
	}
	return []string{PathSyscallBuffered, PathSyscallDirect}
}

// dsyncCache: QEMU opens the image O_DSYNC, and every write syncs itself.
func dsyncCache(cache string) bool { return cache == "writethrough" || cache == "directsync" }

// need is what following op on path takes in a mode: every program in
// all attached; untimed when the hooks see only the submission, or when a
// program in timing is not attached.
type need struct {
	all     []string
	timing  []string
	untimed bool
	// fallback, when every one of them is attached, follows the
	// requests where a program in all is not (io_uring's submission
	// hook in the tracepoint mode: see Probes.setURingRest).
	fallback []string
}

// syscallAIOTiming are the syscall mode's iomap programs (Linux 6.3+) that
// time a linux-aio request to its completion; without them the request is
// counted when io_submit returns.
// The queued one tells a request that completes later from one done
// inside its call (a buffered fallback).
var syscallAIOTiming = []string{bpf.DiskProgIomapDioBegin, bpf.DiskProgIomapDioQueued, bpf.DiskProgIomapDioDone}

// fentryFS gives each file system's fentry/fexit program pairs.
var fentryFS = map[string]struct{ read, write, fsync, fallocate []string }{
	fsExt4: {
		[]string{bpf.DiskProgExt4ReadEnter, bpf.DiskProgExt4ReadExit}, []string{bpf.DiskProgExt4WriteEnter, bpf.DiskProgExt4WriteExit},
		[]string{bpf.DiskProgExt4FsyncEnter, bpf.DiskProgExt4FsyncExit}, []string{bpf.DiskProgExt4FallocateEnter, bpf.DiskProgExt4FallocateExit},
	},
	fsXFS: {
		[]string{bpf.DiskProgXfsReadEnter, bpf.DiskProgXfsReadExit}, []string{bpf.DiskProgXfsWriteEnter, bpf.DiskProgXfsWriteExit},
		[]string{bpf.DiskProgXfsFsyncEnter, bpf.DiskProgXfsFsyncExit}, []string{bpf.DiskProgXfsFallocateEnter, bpf.DiskProgXfsFallocateExit},
	},
	fsBtrfs: {
		[]string{bpf.DiskProgBtrfsReadEnter, bpf.DiskProgBtrfsReadExit}, []string{bpf.DiskProgBtrfsWriteEnter, bpf.DiskProgBtrfsWriteExit},
		[]string{bpf.DiskProgBtrfsFsyncEnter, bpf.DiskProgBtrfsFsyncExit}, []string{bpf.DiskProgBtrfsFallocateEnter, bpf.DiskProgBtrfsFallocateExit},
	},
}

var ioURing = []string{bpf.DiskProgIoUringSubmit, bpf.DiskProgIoUringDone}

// requirement says what following op on path on a host file system fs
// takes in mode m, or ok=false when no program of the mode can see it.
// kernel is the running kernel's version (major, minor).
func requirement(m Mode, fs, op, path string, cache string, kernel [2]int) (need, bool) {
	rw := op == "read" || op == "write"
	if path == PathIOURing {
		if m == ModeSyscall {
			return need{all: ioURing}, true
		}
		// The fentry and tracepoint modes see io_uring's reads and writes
		// where they see the threads' of the same cache mode, done at
		// io_uring's completion, and so timed even where the threads'
		// are not; its flushes and fallocates run in its workers through
		// the same hooks as the threads'. What the tracepoint mode's
		// file-system hooks miss (buffered I/O on ext4 and Btrfs, Btrfs's
		// direct writes from 6.12) its submission hook takes, timed from
		// the submission (bpf/disk.bpf.c uring_fs_sees).
		if !rw {
			return requirement(m, fs, op, PathSyscall, cache, kernel)
		}
		var all []string
		for _, p := range cachePaths(cache) {
			n, ok := requirement(m, fs, op, p, cache, kernel)
			switch {
			case ok:
				all = append(all, n.all...)
			case m == ModeTracepoint && slices.Contains(hookFS, fs):
				all = append(all, bpf.DiskProgIoUringSubmit)
			default:
				return need{}, false
			}
		}
		slices.Sort(all)
		n := need{all: append(slices.Compact(all), bpf.DiskProgIoUringDone)}
		if m == ModeTracepoint {
			n.fallback = ioURing
		}
		return n, true
	}
	switch m {
	case ModeFentry:
		progs, ok := fentryFS[fs]
		switch {
		case !ok:
			return need{}, false
		case rw:
			all := progs.read
			if op == "write" {
				all = progs.write
			}
			if path == PathLinuxAIO {
				all = append(slices.Clone(all), bpf.DiskProgDioCompleteExit)
			}
			return need{all: all}, true
		case op == "flush":
			return need{all: progs.fsync}, true
		default:
			return need{all: progs.fallocate}, true
		}
	case ModeTracepoint:
		if !slices.Contains(hookFS, fs) {
			return need{}, false
		}
		switch {
		case rw && path == PathSyscallBuffered:
			if fs != fsXFS {
				return need{}, false
			}
			if op == "read" {
				return need{all: []string{bpf.DiskProgXfsBufferedRead}, untimed: true}, true
			}
			return need{all: []string{bpf.DiskProgXfsBufferedWrite}, untimed: true}, true
		case rw:
			// Btrfs writes direct I/O to files with checksums as
			// buffered I/O since v6.15, out of iomap's sight, and so
			// does Debian's 6.12 (the kernel matrix: 6.12.117 counted
			// none at iomap): from 6.12 on, say so.
			if fs == fsBtrfs && op == "write" && (kernel[0] > 6 || kernel[0] == 6 && kernel[1] >= 12) {
				return need{}, false
			}
			n := need{all: []string{bpf.DiskProgDioRwBegin, bpf.DiskProgDioComplete}}
			if path == PathLinuxAIO {
				// Without it a linux-aio request cannot be told from
				// one done inside its call: counted, untimed.
				n.timing = []string{bpf.DiskProgDioRwQueued}
			}
			return n, true
		case op == "flush":
			// The sync an O_DSYNC write does for itself looks like a flush here.
			if dsyncCache(cache) {
				return need{}, false
			}
			switch fs {
			case fsExt4:
				return need{all: []string{bpf.DiskProgExt4SyncEnter, bpf.DiskProgExt4SyncExit}}, true
			case fsXFS:
				return need{all: []string{bpf.DiskProgXfsFsync}, untimed: true}, true
			}
			return need{all: []string{bpf.DiskProgBtrfsSync}, untimed: true}, true
		default:
			if fs != fsExt4 {
				return need{}, false
			}
			p := map[string]string{"discard": bpf.DiskProgExt4Discard, "write_zeroes": bpf.DiskProgExt4WriteZeroes, "allocate": bpf.DiskProgExt4Allocate}[op]
			return need{all: []string{p}, untimed: true}, true
		}
	case ModeSyscall:
		switch {
		case rw && path == PathLinuxAIO:
			return need{all: []string{bpf.DiskProgIoSubmitEnter, bpf.DiskProgIoSubmitExit}, timing: syscallAIOTiming}, true
		case op == "read":
			return need{all: []string{bpf.DiskProgPread64Enter, bpf.DiskProgPread64Exit, bpf.DiskProgPreadvEnter, bpf.DiskProgPreadvExit, bpf.DiskProgPreadv2Enter, bpf.DiskProgPreadv2Exit}}, true
		case op == "write":
			return need{all: []string{bpf.DiskProgPwrite64Enter, bpf.DiskProgPwrite64Exit, bpf.DiskProgPwritevEnter, bpf.DiskProgPwritevExit, bpf.DiskProgPwritev2Enter, bpf.DiskProgPwritev2Exit}}, true
		case op == "flush":
			return need{all: []string{bpf.DiskProgFdatasyncEnter, bpf.DiskProgFdatasyncExit, bpf.DiskProgFsyncEnter, bpf.DiskProgFsyncExit}}, true
		}
		return need{all: []string{bpf.DiskProgFallocateEnter, bpf.DiskProgFallocateExit}}, true
	}
	return need{}, false
}

// flushCostHooks are the programs that follow a flush as a call in its
// thread, which is how its device writes are charged to the disk; nil
// when the mode cannot.
func flushCostHooks(m Mode, fs, path string) []string {
	switch m {
	case ModeFentry:
		if progs, ok := fentryFS[fs]; ok {
			return progs.fsync
		}
	case ModeTracepoint:
		if fs == fsExt4 {
			return []string{bpf.DiskProgExt4SyncEnter, bpf.DiskProgExt4SyncExit}
		}
	case ModeSyscall:
		if path != PathIOURing {
			return []string{bpf.DiskProgFdatasyncEnter, bpf.DiskProgFdatasyncExit, bpf.DiskProgFsyncEnter, bpf.DiskProgFsyncExit}
		}
	}
	return nil
}
