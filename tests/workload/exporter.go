package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fspair/fspair/tests/lab"
)

// BuildExporter builds fspair_exporter into dir and returns its path.
// It runs the go tool, so it must be called from inside the module.
func BuildExporter(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "fspair_exporter")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/fspair/fspair/exporter")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build exporter: %w\n%s", err, out)
	}
	return bin, nil
}

// Exporter is a running fspair_exporter on a loopback port.
type Exporter struct {
	URL string // the /metrics URL

	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
	err  error
	once sync.Once
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartExporter runs the exporter binary bin with /proc discovery every
// second (the lab's guests are plain QEMU processes; libvirt is off), the
// guest side read over the QMP monitors they declare, and extra flags, and
// returns once it serves /metrics.
func StartExporter(ctx context.Context, bin string, extra ...string) (*Exporter, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start exporter: %w", err)
	}
	args := append([]string{
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--no-discovery.libvirt",
		"--discovery.interval=1s",
		// The guests declare a QMP monitor for the exporter
		// (BootPair): the guest side of their disks, every second.
		"--discovery.proc.qmp",
		"--guest.interval=1s",
	}, lab.WithProbeMode(extra)...)
	e := &Exporter{
		URL:  fmt.Sprintf("http://127.0.0.1:%d/metrics", port),
		cmd:  exec.Command(bin, args...),
		log:  &syncBuffer{},
		done: make(chan struct{}),
	}
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	// The kernel kills the exporter (and detaches its probes) if the test
	// process dies without stopping it (prctl(2) PR_SET_PDEATHSIG).
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start exporter %s: %w", bin, err)
	}
	go func() { e.err = e.cmd.Wait(); close(e.done) }()

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if _, err := e.Scrape(ctx); err == nil {
			return e, nil
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("start exporter: exited (%v); log:\n%s", e.err, e.log.String())
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("start exporter: not serving %s after a minute; log:\n%s", e.URL, e.log.String()), e.Close())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Log returns what the exporter printed so far.
func (e *Exporter) Log() string { return e.log.String() }

// Close stops the exporter (SIGINT, then SIGKILL after 10 seconds).
func (e *Exporter) Close() error {
	e.once.Do(func() {
		_ = e.cmd.Process.Signal(os.Interrupt)
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			_ = e.cmd.Process.Kill()
			<-e.done
		}
	})
	return nil
}

// Scrape fetches and parses the exporter's metrics.
func (e *Exporter) Scrape(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", e.URL, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", e.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", e.URL, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", e.URL, err)
	}
	return ParseMetrics(body)
}

// ParseMetrics parses the Prometheus text exposition format.
func ParseMetrics(text []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(text)))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

// EachSeries calls fn with the labels and sample of every series of the
// family name in fams (parsed with ParseMetrics); a missing family calls
// nothing.
func EachSeries(fams map[string]*dto.MetricFamily, name string, fn func(labels map[string]string, m *dto.Metric)) {
	f := fams[name]
	if f == nil {
		return
	}
	for _, m := range f.GetMetric() {
		labels := make(map[string]string, len(m.GetLabel()))
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		fn(labels, m)
	}
}

// Snapshot scrapes and returns the counters of the disk whose image is
// sourceFile.
func (e *Exporter) Snapshot(ctx context.Context, sourceFile string) (Snapshot, error) {
	fams, err := e.Scrape(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	return ReadDisk(fams, sourceFile, time.Now())
}

// WaitDisk scrapes until the exporter tracks the disk whose image is
// sourceFile and has identified its guest file system, and returns that
// snapshot.
func (e *Exporter) WaitDisk(ctx context.Context, sourceFile string, timeout time.Duration) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		s, err := e.Snapshot(ctx, sourceFile)
		if err == nil && s.Info["guest_fs"] != "" && s.Info["guest_fs"] != "unknown" {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return Snapshot{}, fmt.Errorf("wait for exporter to track %s (last: %v, info %v): %w", sourceFile, err, s.Info, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
