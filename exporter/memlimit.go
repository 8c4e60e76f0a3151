package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The Go runtime's soft memory limit (--memory-limit). Most of what a scrape
// allocates is garbage by its end, and without a limit the collector lets
// the heap grow to twice what stays live before it runs (GOGC=100): at
// 10,000 disks about 70 MB live at its peaks and 150-200 MiB resident. Under a limit the
// collector runs more often as the heap nears it, trading CPU for memory
// (BENCHMARKS.md, A fleet's scale). A limit is soft: below the live heap
// it cannot hold, and the runtime then caps the collector's CPU instead of
// failing. That is why the default follows the live heap (memoryGovernor,
// memgov.go) rather than being one size for every fleet.

// memoryLimitRatio is the share of a cgroup's memory limit auto may take: the
// rest is headroom for what the runtime does not count (the BPF map pages
// the exporter reads, thread stacks), so that the kernel's hard limit is
// not the one reached.
const memoryLimitRatio = 0.9

// minMemoryLimit is the lowest limit taken: the exporter's own series and
// one scrape of a few disks need about 30 MiB; below that the collector
// would run all the time.
const minMemoryLimit = 32 << 20

// errMemoryLimit is wrapped by the errors for a --memory-limit value the
// exporter does not take.
var errMemoryLimit = errors.New("--memory-limit: want auto, off, or a size of at least 32MiB in B, KiB, MiB or GiB")

// memoryLimit is the limit --memory-limit asks for: limit in bytes, or
// keep (the runtime's own setting stays: GOMEMLIMIT), or adaptive (the
// limit follows the live heap, at most bytes), and where it came from, for
// the start-up log line.
type memoryLimit struct {
	bytes    int64
	keep     bool
	adaptive bool
	from     string
}

// resolveMemoryLimit turns the flag's value into a limit. auto keeps
// GOMEMLIMIT when it is set (env is its value), else follows the live heap
// (memoryGovernor), at most memoryLimitRatio of the memory limit of the
// exporter's cgroup, read under root ("/" but in tests), where it has one.
func resolveMemoryLimit(value, env, root string) (memoryLimit, error) {
	switch value {
	case "off":
		return memoryLimit{bytes: math.MaxInt64, from: "--memory-limit=off"}, nil
	case "auto":
		if env != "" {
			return memoryLimit{keep: true, from: "GOMEMLIMIT=" + env}, nil
		}
		follow := fmt.Sprintf("auto: %.2fx the highest live heap of the last %s plus %d MiB, at least %d MiB",
			governorRatio, governorWindow, governorSlack>>20, governorFloor>>20)
		max, path, err := cgroupMemoryMax(root)
		if err != nil {
			return memoryLimit{adaptive: true, bytes: math.MaxInt64, from: fmt.Sprintf("%s (cgroup memory limit unreadable: %v)", follow, err)}, nil
		}
		if max <= 0 {
			return memoryLimit{adaptive: true, bytes: math.MaxInt64, from: follow + " (no cgroup memory limit)"}, nil
		}
		return memoryLimit{adaptive: true, bytes: int64(float64(max) * memoryLimitRatio),
			from: fmt.Sprintf("%s, at most %.0f%% of the cgroup's %d bytes (%s)", follow, memoryLimitRatio*100, max, path)}, nil
	}
	n, err := parseSize(value)
	if err != nil {
		return memoryLimit{}, fmt.Errorf("%w: %q: %v", errMemoryLimit, value, err)
	}
	if n < minMemoryLimit {
		return memoryLimit{}, fmt.Errorf("%w: %q is below 32MiB", errMemoryLimit, value)
	}
	return memoryLimit{bytes: n, from: "--memory-limit=" + value}, nil
}

// parseSize reads a whole number of bytes with an optional binary unit:
// 1073741824, 1024MiB, 1GiB.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}}
	num, shift := s, uint(0)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, shift = strings.TrimSuffix(s, u.suffix), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("not a whole number of bytes with a unit")
	}
	if n > math.MaxInt64>>shift {
		return 0, errors.New("too large")
	}
	return n << shift, nil
}

// cgroupMemoryMax returns the memory limit of the process's cgroup (0 when
// it has none) and the file it read: cgroup v2's memory.max, else cgroup
// v1's memory.limit_in_bytes (whose "no limit" is a number near 2^63).
func cgroupMemoryMax(root string) (int64, string, error) {
	b, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join(root, "sys/fs/cgroup", parts[2], "memory.max")
		case hasController(parts[1], "memory"):
			file = filepath.Join(root, "sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
		default:
			continue
		}
		v, err := os.ReadFile(file)
		if err != nil {
			return 0, file, err
		}
		s := strings.TrimSpace(string(v))
		if s == "max" {
			return 0, file, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, file, fmt.Errorf("%s: %q is not a number of bytes", file, s)
		}
		if n >= math.MaxInt64/2 { // cgroup v1's "unlimited", rounded to a page
			return 0, file, nil
		}
		return n, file, nil
	}
	return 0, "", errors.New("no memory cgroup in /proc/self/cgroup")
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
