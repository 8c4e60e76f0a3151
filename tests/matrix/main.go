// Command matrix is fspair's kernel matrix: it proves the exporter's data
// path on the kernels operations teams run, inside TCG guests that boot
// Debian's cloud kernels (tests/lab), where this host's own kernel cannot
// load what the exporter needs.
//
// For each kernel it boots one guest with ext4, XFS and Btrfs disks and a
// read-only data disk (the static exporter, the probe test binary, tools),
// and for each probe mode, file system and fio engine (psync buffered,
// libaio and io_uring direct) compares the exporter's per-operation counts
// with fio's, exactly; it also records which BPF programs did not attach
// and why, and runs exporter/probe's tests in the guest.
//
//	go run ./tests/matrix run -kernels "linux-image-6.1.0-56-cloud-amd64 ..."   # make matrix
//	go run ./tests/matrix bench -kernel linux-image-6.1.0-56-cloud-amd64        # make bench PARTS=kernel
//	go run ./tests/matrix cpucost -kernel linux-image-6.1.0-56-cloud-amd64
//
// bench measures the tracers' overhead in a one-vCPU guest; cpucost the
// counter layouts with two vCPUs (cpucost.go). README.md has the rest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run dispatches the subcommand and returns the exit status: 0 when all is
// well, 1 when the matrix found a failure or could not run, 2 for usage.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: matrix run|bench|cpucost [flags] (see -h of each)")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr)
	case "cpucost":
		return cpuCostCmd(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "matrix: unknown subcommand %q: want run, bench or cpucost\n", args[0])
		return 2
	}
}

// list splits a flag value on commas and spaces.
func list(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
}

// kernelsFromEnv is the kernel list make passes down (MATRIX_KERNELS in the
// Makefile is the one place it is pinned).
func kernelsFromEnv() []string { return list(os.Getenv("FSPAIR_MATRIX_KERNELS")) }

// parseOptions reads the run subcommand's flags.
func parseOptions(args []string, stderr io.Writer) (Options, error) {
	fs := flag.NewFlagSet("matrix run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o                                          Options
		kernels, modes, fsList, engines, probeList string
	)
	fs.StringVar(&kernels, "kernels", strings.Join(kernelsFromEnv(), " "), "Debian kernel packages, space or comma separated (default: $FSPAIR_MATRIX_KERNELS, which make sets from MATRIX_KERNELS)")
	fs.StringVar(&modes, "modes", strings.Join(DefaultModes, ","), `probe modes passed as --probe.mode; "current" passes none`)
	fs.StringVar(&fsList, "fs", strings.Join(FileSystems, ","), "guest file systems")
	fs.StringVar(&engines, "engines", "psync,libaio,io_uring", "fio engines")
	fs.StringVar(&probeList, "probe-fs", strings.Join(FileSystems, ","), `file systems the probe test binary runs on ("" for none)`)
	fs.StringVar(&o.ProbeRun, "probe-run", "", "the probe test binary's -test.run (default: every test)")
	fs.IntVar(&o.ProbeCPUs, "probe-cpus", 1, "guest CPUs left online while the probe test binary runs (0: all; see Options.ProbeCPUs)")
	fs.StringVar(&o.ExporterPer, "exporter-per", "mode", "cell: start the exporter for each cell; mode: once per kernel and mode, tracking every cell's file")
	fs.IntVar(&o.FileMiB, "file-mib", 64, "fio data file size")
	fs.IntVar(&o.FSMiB, "fs-mib", 2048, "size of each guest file system")
	fs.IntVar(&o.CPUs, "cpus", 2, "guest vCPUs")
	fs.IntVar(&o.MemMiB, "mem-mib", 2048, "guest memory")
	fs.StringVar(&o.State, "state", "/var/tmp/fspair-matrix/last", "directory for report.md and results.json")
	fs.StringVar(&o.Out, "out", "", "also write the Markdown report to this file")
	fs.StringVar(&o.Lock, "lock", lab.LockPath, "lab lock, taken for each kernel's guest (empty: none; do not run under flock on the same file)")
	fs.StringVar(&o.CacheDir, "cache", lab.DefaultCacheDir(), "kit cache (kernel packages and kits, per kernel)")
	fs.DurationVar(&o.ProbeTimeout, "probe-timeout", 20*time.Minute, "bound on one run of the probe test binary (a full run takes 4.5-9 min in a TCG guest, longer on a busy host)")
	fs.DurationVar(&o.ExporterTimeout, "exporter-timeout", 3*time.Minute, "bound on the exporter's start until it lists the disks")
	if err := fs.Parse(args); err != nil {
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Kernels, o.Modes, o.FS, o.ProbeFS = list(kernels), list(modes), list(fsList), list(probeList)
	for _, name := range list(engines) {
		e, err := engineByName(name)
		if err != nil {
			return Options{}, err
		}
		o.Engines = append(o.Engines, e)
	}
	o.Command = "go run ./tests/matrix run " + strings.Join(quoteArgs(args), " ")
	return o, o.validate()
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t\"'$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return out
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if code, done := flagExit(err, stderr, "matrix"); done {
		return code
	}
	res, err := RunMatrix(ctx, o, stderr)
	if res != nil {
		fmt.Fprint(stdout, res.Markdown())
		fmt.Fprintf(stderr, "matrix: report in %s", filepath.Join(o.State, "report.md"))
		if o.Out != "" {
			fmt.Fprintf(stderr, " and %s", o.Out)
		}
		fmt.Fprintln(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "matrix: %v\n", err)
		return 1
	}
	if failed := res.Failed(); len(failed) > 0 {
		fmt.Fprintf(stderr, "matrix: %d failure(s):\n", len(failed))
		for _, f := range failed {
			fmt.Fprintf(stderr, "  %s\n", f)
		}
		return 1
	}
	return 0
}

// flagExit turns a flag parse's error into the exit status to end with:
// 0 after -h, 2 with the message for bad flags; done is false when the
// flags are good.
func flagExit(err error, stderr io.Writer, prefix string) (code int, done bool) {
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	default:
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return 2, true
	}
}
