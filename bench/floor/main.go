// Command floor loads bpf/floor.bpf.c compiled, runs the command given while bpf_stats
// is on, and prints each program's ns/event: the cost floor of a
// block-layer program on this machine (see scripts/bench.sh).
package main

import (
	"fmt"
	"os"
	"os/exec"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

func main() { os.Exit(run()) }

func run() int {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: floor OBJECT COMMAND [ARG...]")
		return 2
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}
	coll, err := ebpf.LoadCollection(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor: load:", err)
		return 1
	}
	defer coll.Close()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor: enable bpf_stats:", err)
		return 1
	}
	defer stats.Close()
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
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "floor: run:", err)
		return 1
	}
	sort.Strings(names)
	for _, name := range names {
		s, err := coll.Programs[name].Stats()
		if err != nil || s.RunCount == 0 {
			continue
		}
		fmt.Printf("%-18s %8d runs  %6.1f ns\n", name, s.RunCount, float64(s.Runtime.Nanoseconds())/float64(s.RunCount))
	}
	return 0
}
