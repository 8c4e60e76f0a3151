// Package privilege checks at start that fspair_exporter holds the
// capabilities it needs, and once the BPF programs are loaded and attached
// drops every other one from every thread: from the effective, permitted,
// inheritable and ambient sets and from the bounding set, and sets
// no_new_privs so that no later execve can gain any back.
//
// Starting needs (Attach, plus CAP_SETPCAP to shrink the bounding set):
//
//   - CAP_BPF: BPF_MAP_CREATE, BPF_BTF_LOAD and BPF_PROG_LOAD of tracing
//     program types (kernel/bpf/syscall.c, bpf_capable()).
//   - CAP_PERFMON: tracepoint and tp_btf programs are perfmon program types
//     (is_perfmon_prog_type() in bpf_prog_load), and attaching a
//     tracepoint program opens a system-wide perf event.
//   - CAP_SETPCAP: PR_CAPBSET_DROP (cap_prctl_drop in security/commoncap.c).
//   - CAP_SYS_ADMIN, optional: BPF_ENABLE_STATS (bpf_enable_stats checks
//     CAP_SYS_ADMIN) for fspair_probe_run_seconds_total, and mounting
//     tracefs when it is not mounted. Without it those metrics stay zero.
//
// Kept while running (Runtime):
//
//   - CAP_DAC_READ_SEARCH: the exporter opens every image file read-only
//     and walks the directories above it; libvirt hands images to the
//     libvirt-qemu user, often with mode 0600, under directories that may be
//     0700 or 0711. It also lists /proc/PID/fd of QEMU processes of other
//     users (mode 0500, owned by the process's uid), and reads libvirt's
//     root-only pid files when run as a user other than root.
//   - CAP_SYS_PTRACE, with /proc discovery only: /proc/PID/fd/N, fdinfo/N,
//     exe, cwd and root are guarded by ptrace_may_access with
//     PTRACE_MODE_READ_FSCREDS (fs/proc/base.c, fs/proc/fd.c). It fails for
//     a process of another uid (QEMU run by libvirt) and, by the rule in
//     cap_ptrace_access_check (security/commoncap.c), for a root process
//     whose permitted set is not a subset of ours: QEMU started by root keeps
//     all capabilities, so even a same-uid QEMU needs CAP_SYS_PTRACE once
//     ours are dropped. /proc/PID/cmdline and comm need nothing.
//
// Not needed while running, checked on Linux 6.18:
//
//   - BPF map lookups, updates and deletes, and BPF_OBJ_GET_INFO_BY_FD for
//     the run-time statistics, through the file descriptors already held:
//     since Linux 5.19 (commit c8644cd0efe7, "bpf: refine
//     kernel.unprivileged_bpf_disabled behaviour") only BPF_MAP_CREATE and
//     BPF_PROG_LOAD are refused without CAP_BPF; map access is checked
//     against the descriptor's mode. Older kernels with
//     kernel.unprivileged_bpf_disabled set refuse every bpf() command
//     without CAP_BPF: WithEffective lets the caller find that out before
//     dropping and keep CAP_BPF there. Global variables are written through
//     the map's mmap, which needs no capability.
//   - FS_IOC_FIEMAP on an image opened read-only (unlike FIBMAP, which needs
//     CAP_SYS_RAWIO).
//   - connecting to libvirt's read-only socket (mode 0777), reading
//     /proc/self/mountinfo and sysfs.
//   - listening on the default port 9477; ports below 1024 are bound before
//     dropping.
//
// The deploy/systemd README records the experiments behind these claims.
//
// Capability sets are per thread, and Go runs goroutines on many threads
// that it creates as it likes: every change here goes through psx, which
// makes the same system call on every thread of the process, with or
// without cgo (syscall.AllThreadsSyscall refuses to work in a binary that
// links cgo, as one that imports net does by default).
package privilege

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// ErrMissing is returned when the process lacks capabilities it needs; the
// message names them.
var ErrMissing = errors.New("missing capabilities")

// Set is a set of capabilities, bit n standing for capability n: the
// layout of the CapEff, CapPrm and CapBnd lines of /proc/PID/status.
type Set uint64

// Of returns the set of the given capabilities (unix.CAP_*).
func Of(caps ...int) Set {
	var s Set
	for _, c := range caps {
		s |= 1 << uint(c)
	}
	return s
}

// Has reports whether capability c is in s.
func (s Set) Has(c int) bool { return s&(1<<uint(c)) != 0 }

// String lists the capabilities by name, "none" for the empty set.
func (s Set) String() string {
	if s == 0 {
		return "none"
	}
	var out []string
	for c := range 64 {
		if s.Has(c) {
			if n, ok := names[c]; ok {
				out = append(out, n)
			} else {
				out = append(out, "CAP_"+strconv.Itoa(c))
			}
		}
	}
	return strings.Join(out, ",")
}

const (
	// Attach is what loading and attaching the BPF programs needs.
	Attach Set = 1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON
	// Stats is optional at start: BPF run-time statistics and mounting
	// tracefs.
	Stats Set = 1 << unix.CAP_SYS_ADMIN
	// bounding is what shrinking the bounding set needs.
	bounding Set = 1 << unix.CAP_SETPCAP
)

// Runtime is what the exporter keeps once attached: CAP_DAC_READ_SEARCH
// always, CAP_SYS_PTRACE when it scans /proc for QEMU processes.
func Runtime(procScan bool) Set {
	s := Of(unix.CAP_DAC_READ_SEARCH)
	if procScan {
		s |= Of(unix.CAP_SYS_PTRACE)
	}
	return s
}

// Startup is every capability starting with keep to keep uses: the set a
// service manager should grant (CapabilityBoundingSet=).
func Startup(keep Set) Set { return Attach | Stats | bounding | keep }

// State is the capability state of a thread.
type State struct {
	Effective, Permitted, Inheritable, Ambient, Bounding Set
	NoNewPrivs                                           bool
}

// Current reads the calling thread's capability state. Before Drop, and
// after it, every thread of the process has the same.
func Current() (State, error) {
	var st State
	eff, perm, inh, err := capget()
	if err != nil {
		return st, err
	}
	st.Effective, st.Permitted, st.Inheritable = eff, perm, inh
	for c := range 64 {
		// PR_CAPBSET_READ answers EINVAL past the kernel's last
		// capability (/proc/sys/kernel/cap_last_cap).
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("read bounding set: %w", err)
		}
		if in == 1 {
			st.Bounding |= Of(c)
		}
		amb, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0)
		if err != nil {
			return st, fmt.Errorf("read ambient set: %w", err)
		}
		if amb == 1 {
			st.Ambient |= Of(c)
		}
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return st, fmt.Errorf("read no_new_privs: %w", err)
	}
	st.NoNewPrivs = nnp == 1
	return st, nil
}

// Check reports, before anything is loaded, whether the process can start
// and then keep keep: Attach effective, keep permitted, and CAP_SETPCAP
// effective when the bounding set holds more than keep. The error wraps
// ErrMissing and names what is missing.
func Check(keep Set) error {
	st, err := Current()
	if err != nil {
		return err
	}
	return st.check(keep)
}

func (st State) check(keep Set) error {
	missing := Attach&^st.Effective | keep&^st.Permitted
	if st.Bounding&^keep != 0 && !st.Effective.Has(unix.CAP_SETPCAP) {
		missing |= bounding
	}
	if missing != 0 {
		return fmt.Errorf("%w: %s", ErrMissing, missing)
	}
	return nil
}

// WithEffective runs op on the calling thread with only eff (within the
// permitted set) effective, and restores the effective set afterwards:
// a way to learn, before Drop, whether an operation still works without the
// capabilities about to go. Other threads are not affected.
func WithEffective(eff Set, op func() error) error {
	runtime.LockOSThread()
	oldEff, perm, inh, err := capget()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	if err := capset(eff&perm, perm, inh); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lower effective capabilities: %w", err)
	}
	opErr := op()
	if err := capset(oldEff, perm, inh); err != nil {
		// The thread stays locked to this goroutine, so that Go never
		// runs anything else on a thread unlike the others.
		return fmt.Errorf("restore effective capabilities: %w", err)
	}
	runtime.UnlockOSThread()
	return opErr
}

// Drop reduces every thread of the process to keep: effective and
// permitted become keep, inheritable and ambient empty, the bounding set
// keep, and no_new_privs is set. It then reads /proc/self/task/*/status
// to confirm every thread is so. keep must be within the permitted set.
func Drop(keep Set) error {
	st, err := Current()
	if err != nil {
		return err
	}
	if missing := keep &^ st.Permitted; missing != 0 {
		return fmt.Errorf("keep %s: %w: %s", keep, ErrMissing, missing)
	}
	if extra := st.Bounding &^ keep; extra != 0 {
		if !st.Effective.Has(unix.CAP_SETPCAP) {
			return fmt.Errorf("drop %s from the bounding set: %w: CAP_SETPCAP", extra, ErrMissing)
		}
		for c := range 64 {
			if extra.Has(c) {
				if err := allThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
					return fmt.Errorf("drop %s from the bounding set: %w", Of(c), err)
				}
			}
		}
	}
	if st.Ambient != 0 {
		if err := allThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
			return fmt.Errorf("clear ambient capabilities: %w", err)
		}
	}
	if err := allThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := capData(keep, keep, 0)
	if _, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("set capabilities to %s: %w", keep, e)
	}
	return verifyThreads(keep)
}

func allThreadsPrctl(option, arg2, arg3 uintptr) error {
	if _, _, e := psx.Syscall6(unix.SYS_PRCTL, option, arg2, arg3, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// capget reads the calling thread's sets with the 64-bit interface
// (_LINUX_CAPABILITY_VERSION_3: two 32-bit halves).
func capget() (eff, perm, inh Set, err error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, 0, 0, fmt.Errorf("read capabilities: %w", err)
	}
	join := func(lo, hi uint32) Set { return Set(lo) | Set(hi)<<32 }
	return join(data[0].Effective, data[1].Effective), join(data[0].Permitted, data[1].Permitted),
		join(data[0].Inheritable, data[1].Inheritable), nil
}

// capset sets the calling thread's sets only.
func capset(eff, perm, inh Set) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := capData(eff, perm, inh)
	return unix.Capset(&hdr, &data[0])
}

func capData(eff, perm, inh Set) [2]unix.CapUserData {
	return [2]unix.CapUserData{
		{Effective: uint32(eff), Permitted: uint32(perm), Inheritable: uint32(inh)},
		{Effective: uint32(eff >> 32), Permitted: uint32(perm >> 32), Inheritable: uint32(inh >> 32)},
	}
}

// verifyThreads confirms from /proc that every thread of the process holds
// exactly keep and has no_new_privs: the proof that no thread escaped the
// change.
func verifyThreads(keep Set) error {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("list threads in /proc/self/task: %v", err)
	}
	for _, p := range tasks {
		st, err := readStatus(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			return err
		}
		want := State{Effective: keep, Permitted: keep, Bounding: keep, NoNewPrivs: true}
		if st != want {
			tid := filepath.Base(filepath.Dir(p))
			return fmt.Errorf("thread %s still holds effective %s, permitted %s, inheritable %s, ambient %s, bounding %s (no_new_privs %v)",
				tid, st.Effective, st.Permitted, st.Inheritable, st.Ambient, st.Bounding, st.NoNewPrivs)
		}
	}
	return nil
}

// readStatus reads the capability lines of a /proc/PID/status file
// (proc(5)).
func readStatus(p string) (State, error) {
	var st State
	b, err := os.ReadFile(p)
	if err != nil {
		return st, err
	}
	sets := map[string]*Set{"CapInh": &st.Inheritable, "CapPrm": &st.Permitted, "CapEff": &st.Effective,
		"CapBnd": &st.Bounding, "CapAmb": &st.Ambient}
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if k == "NoNewPrivs" {
			st.NoNewPrivs = v == "1"
			seen++
			continue
		}
		if s := sets[k]; s != nil {
			n, err := strconv.ParseUint(v, 16, 64)
			if err != nil {
				return st, fmt.Errorf("parse %s of %s: %w", k, p, err)
			}
			*s = Set(n)
			seen++
		}
	}
	if seen != len(sets)+1 {
		return st, fmt.Errorf("read %s: %d of the capability lines missing", p, len(sets)+1-seen)
	}
	return st, nil
}
