// Package e2e checks fspair_exporter against real QEMU guests in the lab:
// what the exporter counts on each image file is compared with fio's own
// accounting inside the guest and with QEMU's query-blockstats.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fspair/fspair/tests/lab"
)

// exporter is a running fspair_exporter.
type exporter struct {
	url string
	cmd *exec.Cmd
	log *logBuffer
}

type logBuffer = lab.LogBuffer

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// binary builds the exporter once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fspair-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fspair_exporter")
		out, err := exec.Command("go", "build", "-o", binPath, "../../exporter").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startExporter runs the exporter with /proc discovery (plus args) until the test ends.
func startExporter(t *testing.T, args ...string) *exporter {
	t.Helper()
	return startExporterWith(t, append([]string{"--no-discovery.libvirt"}, args...)...)
}

// startExporterWith runs the exporter with only the given discovery flags.
func startExporterWith(t *testing.T, args ...string) *exporter {
	t.Helper()
	port := freePort(t)
	e := &exporter{url: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), log: &logBuffer{}}
	all := append([]string{
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--discovery.interval=1s",
		"--log.level=debug",
	}, lab.WithProbeMode(args)...)
	e.cmd = exec.Command(binary(t), all...)
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { e.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			e.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			keepLog(t, "exporter", e.log.String())
		}
	})
	c := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := c.Get(e.url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return e
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("exporter did not serve within 60s; log:\n%s", e.log.String())
	return nil
}

// failedLogs is where a failed test's process logs are kept whole.
const failedLogs = "/var/tmp/fspair-e2e-logs"

// keepLog writes a failed test's log of what to failedLogs and shows only
// its last lines, so that the test's own failure messages stay next to its
// result in a long CI output.
func keepLog(t *testing.T, what, log string) {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	path := filepath.Join(failedLogs, fmt.Sprintf("%s-%s-%s.log", name, what, time.Now().UTC().Format("20060102T150405.000")))
	err := os.MkdirAll(failedLogs, 0o755)
	if err == nil {
		err = os.WriteFile(path, []byte(log), 0o644)
	}
	if err != nil {
		t.Logf("%s log (tail; keeping it whole failed: %v):\n%s", what, err, tail(log, 40))
		return
	}
	t.Logf("%s log kept whole in %s; its tail:\n%s", what, path, tail(log, 8))
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// scrape is one parsed scrape.
type scrape map[string]*dto.MetricFamily

func (e *exporter) scrape(t *testing.T) scrape {
	t.Helper()
	resp, err := http.Get(e.url)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func matches(m *dto.Metric, want map[string]string) bool {
	l := labelsOf(m)
	for k, v := range want {
		if l[k] != v {
			return false
		}
	}
	return true
}

// series returns the metrics of a family matching the labels.
func (s scrape) series(name string, want map[string]string) []*dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range f.GetMetric() {
		if matches(m, want) {
			out = append(out, m)
		}
	}
	return out
}

// value is the counter or gauge value of the one series matching; 0 if none.
func (s scrape) value(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	ms := s.series(name, want)
	if len(ms) > 1 {
		t.Fatalf("%s%v: %d series match, want one", name, want, len(ms))
	}
	if len(ms) == 0 {
		return 0
	}
	m := ms[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// waitFor scrapes until cond holds or the timeout passes.
func (e *exporter) waitFor(t *testing.T, timeout time.Duration, what string, cond func(scrape) bool) (scrape, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		s := e.scrape(t)
		if cond(s) {
			return s, time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// grep returns the lines of the exporter log containing s.
func (e *exporter) grep(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(e.log.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

func within(got, want, tol float64) bool {
	if want == 0 {
		return got == 0
	}
	d := (got - want) / want
	return d <= tol && d >= -tol
}

var _ = context.Background
