package lab

import (
	"os"
	"slices"
	"strings"
)

// ProbeMode is the --probe.mode the lab runs fspair_exporter with:
// FSPAIR_LAB_PROBE_MODE when set, else syscall. The development host's
// kernel has no BPF trampolines, so auto would choose the tracepoint mode,
// which does not see buffered reads and writes on ext4 and Btrfs; the lab
// tests drive every path QEMU has and compare the exporter's counts with
// fio's and QEMU's, which only the syscall mode follows completely here.
// TestModesAgree runs the tracepoint mode beside it on the same guests, and
// the kernel matrix (tests/matrix) the fentry mode in guests whose kernels
// have trampolines.
func ProbeMode() string {
	if m := os.Getenv("FSPAIR_LAB_PROBE_MODE"); m != "" {
		return m
	}
	return "syscall"
}

// WithProbeMode adds --probe.mode=ProbeMode() to an exporter's arguments
// unless they name a mode already.
func WithProbeMode(args []string) []string {
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--probe.mode") }) {
		return args
	}
	return append([]string{"--probe.mode=" + ProbeMode()}, args...)
}
