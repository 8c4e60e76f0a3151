package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRoot writes files (path under root: content) into a temporary root.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestResolveMemoryLimit: sizes in bytes and binary units; off lifts the
// limit; auto keeps GOMEMLIMIT, else follows the live heap, at most 90% of
// the cgroup's limit (v2, or v1's memory controller) where there is one.
func TestResolveMemoryLimit(t *testing.T) {
	v2 := fakeRoot(t, map[string]string{
		"proc/self/cgroup": "0::/system.slice/fspair_exporter.service\n",
		"sys/fs/cgroup/system.slice/fspair_exporter.service/memory.max": "1073741824\n",
	})
	v2max := fakeRoot(t, map[string]string{
		"proc/self/cgroup":                    "0::/user.slice\n",
		"sys/fs/cgroup/user.slice/memory.max": "max\n",
	})
	v1 := fakeRoot(t, map[string]string{
		"proc/self/cgroup": "12:cpu,cpuacct:/x\n5:memory:/system.slice/x.service\n0::/system.slice/x.service\n",
		"sys/fs/cgroup/memory/system.slice/x.service/memory.limit_in_bytes": "536870912\n",
	})
	v1none := fakeRoot(t, map[string]string{
		"proc/self/cgroup":                           "5:memory:/\n",
		"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
	})
	missing := fakeRoot(t, map[string]string{"proc/self/cgroup": "0::/gone\n"})
	for _, c := range []struct {
		value, env, root string
		bytes            int64
		keep, adaptive   bool
		from             string
	}{
		{"110MiB", "", v2, 110 << 20, false, false, "--memory-limit=110MiB"},
		{"1GiB", "", v2, 1 << 30, false, false, "--memory-limit=1GiB"},
		{"67108864", "", v2, 64 << 20, false, false, "--memory-limit=67108864"},
		{"65536KiB", "", v2, 64 << 20, false, false, "--memory-limit=65536KiB"},
		{"off", "", v2, math.MaxInt64, false, false, "off"},
		{"auto", "200MiB", v2, 0, true, false, "GOMEMLIMIT=200MiB"},
		{"auto", "", v2, 966367641, false, true, "fspair_exporter.service/memory.max"},
		{"auto", "", v1, 483183820, false, true, "memory.limit_in_bytes"},
		{"auto", "", v2max, math.MaxInt64, false, true, "no cgroup memory limit"},
		{"auto", "", v1none, math.MaxInt64, false, true, "no cgroup memory limit"},
		{"auto", "", missing, math.MaxInt64, false, true, "unreadable"},
	} {
		got, err := resolveMemoryLimit(c.value, c.env, c.root)
		if err != nil {
			t.Errorf("%s (GOMEMLIMIT %q): %v", c.value, c.env, err)
			continue
		}
		if got.keep != c.keep || got.adaptive != c.adaptive || (!c.keep && got.bytes != c.bytes) || !strings.Contains(got.from, c.from) {
			t.Errorf("%s (GOMEMLIMIT %q): got %+v, want bytes %d keep %v adaptive %v from ~%q", c.value, c.env, got, c.bytes, c.keep, c.adaptive, c.from)
		}
	}
	for _, bad := range []string{"", "110MB", "1.5GiB", "-1GiB", "16MiB", "lots", "99999999999TiB", "MiB"} {
		if _, err := resolveMemoryLimit(bad, "", v2); !errors.Is(err, errMemoryLimit) {
			t.Errorf("%q: error %v, want one wrapping errMemoryLimit", bad, err)
		}
	}
}

// TestMemoryLimitFlag: a --memory-limit the exporter does not take stops it
// at start-up, naming the flag, what it takes and the value given.
func TestMemoryLimitFlag(t *testing.T) {
	usageError(t, "--memory-limit=128MB", "--memory-limit", "auto, off, or a size", "128MB")
}
