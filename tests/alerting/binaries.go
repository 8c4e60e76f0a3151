package alerting

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The pinned Prometheus, Alertmanager and Thanos: the versions in
// deploy/versions.env, built by scripts/promstack.sh into a cache outside
// the repository. Every test that runs a Prometheus, an Alertmanager,
// promtool, amtool or Thanos takes it from here, so the one setting decides
// what fspair is tested on.

// Debian 12's Prometheus 2.42 (package prometheus), the 2.x that the rule
// unit tests and the dashboards' query walk also run on.
const (
	DebianPrometheus = "/usr/bin/prometheus"
	DebianPromtool   = "/usr/bin/promtool"
)

var (
	pinnedMu   sync.Mutex
	pinnedPath = map[string]string{}
)

// PinnedBinary returns the path of the pinned prometheus, promtool,
// alertmanager, amtool or thanos, building it first if the cache lacks it
// (scripts/promstack.sh build; minutes cold). The
// environment variable FSPAIR_<NAME> (e.g. FSPAIR_PROMETHEUS) names
// another binary instead.
func PinnedBinary(name string) (string, error) {
	if p := os.Getenv("FSPAIR_" + strings.ToUpper(name)); p != "" {
		return p, nil
	}
	pinnedMu.Lock()
	defer pinnedMu.Unlock()
	if p, ok := pinnedPath[name]; ok {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "promstack.sh"), "path", name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("find the pinned %s (scripts/promstack.sh path %s): %w\n%s", name, name, err, stderr.String())
	}
	p := strings.TrimSpace(string(out))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("find the pinned %s: %w", name, err)
	}
	pinnedPath[name] = p
	return p, nil
}

// PinnedVersions reads deploy/versions.env: KEY=VALUE lines, # comments.
func PinnedVersions() (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, "deploy", "versions.env"))
	if err != nil {
		return nil, fmt.Errorf("read pinned versions: %w", err)
	}
	defer f.Close()
	v := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || key == "" || value == "" {
			return nil, fmt.Errorf("deploy/versions.env:%d: want KEY=VALUE, got %q", n, line)
		}
		v[key] = value
	}
	return v, sc.Err()
}

// PromRelease is one Prometheus the version-dependent tests run on.
type PromRelease struct {
	Name       string // "3.16.0" or "2.42-debian"
	Major      int
	Prometheus string
	Promtool   string
}

// PromReleases returns the pinned Prometheus 3 first, then Debian's 2.42.
func PromReleases() ([]PromRelease, error) {
	v, err := PinnedVersions()
	if err != nil {
		return nil, err
	}
	prom, err := PinnedBinary("prometheus")
	if err != nil {
		return nil, err
	}
	tool, err := PinnedBinary("promtool")
	if err != nil {
		return nil, err
	}
	for _, p := range []string{DebianPrometheus, DebianPromtool} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("find Debian's Prometheus 2.42 (package prometheus; make deps): %w", err)
		}
	}
	name := v["PROMETHEUS_VERSION"]
	major, err := strconv.Atoi(strings.SplitN(name, ".", 2)[0])
	if err != nil {
		return nil, fmt.Errorf("deploy/versions.env: PROMETHEUS_VERSION %q: %w", name, err)
	}
	return []PromRelease{
		{Name: name, Major: major, Prometheus: prom, Promtool: tool},
		{Name: "2.42-debian", Major: 2, Prometheus: DebianPrometheus, Promtool: DebianPromtool},
	}, nil
}

// Releases is PromReleases for a test, which fails on an error.
func Releases(t testing.TB) []PromRelease {
	t.Helper()
	r, err := PromReleases()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
