package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/alerting"
)

// repoRoot is the directory holding go.mod, found upwards from the test's
// working directory (deploy/).
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// requireRoot fails the test unless it runs as root, as CI does.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("needs root (BPF programs, the native stack); CI runs as root")
	}
}

// requireBinary returns the path of a program, failing the test, with the
// Debian package to install, when it is missing.
func requireBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: install the Debian package %s (make deps)", name, pkg)
	}
	return p
}

// pinnedBinary is the pinned prometheus, promtool, alertmanager or amtool
// (deploy/versions.env), built by scripts/promstack.sh if missing.
func pinnedBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := alerting.PinnedBinary(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a command and returns its combined output; a non-zero exit
// fails the test with that output.
func run(t testing.TB, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// buildExporter builds fspair_exporter into a temporary directory with the
// given environment (e.g. CGO_ENABLED=0, as the image builds it).
func buildExporter(t testing.TB, env ...string) string {
	t.Helper()
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "fspair_exporter")
	run(t, root, append([]string{"GOFLAGS=-mod=mod"}, env...), "go", "build", "-trimpath", "-o", bin, "./exporter")
	return bin
}

// freeAddr returns a loopback address with a port free at the time of the
// call.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitHTTP polls url until it answers 200 or the time is up.
func waitHTTP(t testing.TB, url string, within time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answering 200 after %s: %v", url, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitServing polls url until it answers 200, exited is closed (the
// process serving it ended), or the time is up.
func waitServing(url string, within time.Duration, exited <-chan struct{}) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before serving %s", url)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering 200 after %s: %v", url, within, err)
		}
	}
}

// getJSON decodes the "data" member of a Prometheus API answer.
func getJSON(ctx context.Context, u string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("decode %s: %w", u, err)
	}
	if out.Status != "success" {
		return fmt.Errorf("%s: %s", u, out.Error)
	}
	return json.Unmarshal(out.Data, data)
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query against the Prometheus at base.
func query(ctx context.Context, base, q string) ([]sample, error) {
	var d struct {
		Result []sample `json:"result"`
	}
	err := getJSON(ctx, base+"/api/v1/query?query="+url.QueryEscape(q), &d)
	return d.Result, err
}

// scrape returns the exposition text of url.
func scrape(t testing.TB, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return b.String()
}
