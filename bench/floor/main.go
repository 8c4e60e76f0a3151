// Command floor loads a compiled BPF object (bench/floor/bpf), attaches its
// programs and either runs a command while bpf_stats is on and prints each
// program's ns/event (the cost floor of a program on this machine, see
// scripts/bench.sh), or, with -hold, keeps them attached without statistics
// until SIGINT or SIGTERM: the empty fentry+fexit pair the guest overhead
// bench (tests/matrix bench) measures beside fspair, the cost of the hooks
// alone.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

func main() { os.Exit(run()) }

func run() int {
	hold := flag.Bool("hold", false, "attach, print the programs attached, and wait for SIGINT or SIGTERM (no bpf_stats, no command)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: floor OBJECT COMMAND [ARG...]\n       floor -hold OBJECT")
	}
	flag.Parse()
	args := flag.Args()
	if (*hold && len(args) != 1) || (!*hold && len(args) < 2) {
		flag.Usage()
		return 2
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}
	coll, err := ebpf.LoadCollection(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor: load:", err)
		return 1
	}
	defer coll.Close()
	// Statistics add two clock reads to every run: on for the ns/event
	// figures, off while holding a floor that is timed against fspair.
	if !*hold {
		stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor: enable bpf_stats:", err)
			return 1
		}
		defer stats.Close()
	}
	names := make([]string, 0, len(coll.Programs))
	for name, p := range coll.Programs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			fmt.Fprintf(os.Stderr, "floor: attach %s: %v\n", name, err)
			return 1
		}
		defer l.Close()
		names = append(names, name)
	}
	sort.Strings(names)
	if *hold {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		fmt.Printf("attached: %s\n", strings.Join(names, " "))
		<-sig
		return 0
	}
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "floor: run:", err)
		return 1
	}
	for _, name := range names {
		s, err := coll.Programs[name].Stats()
		if err != nil || s.RunCount == 0 {
			continue
		}
		fmt.Printf("%-18s %8d runs  %6.1f ns\n", name, s.RunCount, float64(s.Runtime.Nanoseconds())/float64(s.RunCount))
	}
	return 0
}
