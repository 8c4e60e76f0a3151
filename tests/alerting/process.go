package alerting

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is a daemon the stack runs, with its output kept for failure
// reports.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{}
	err  error // of Wait, set before done closes
}

// logBuffer keeps the last part of a daemon's output.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const maxLog = 64 << 10

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > maxLog {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-maxLog:]...)
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func startProcess(name, bin string, args ...string) (*process, error) {
	return startCmd(name, exec.Command(bin, args...))
}

// startCmd starts cmd as process name, its output kept in the process's
// log.
func startCmd(name string, cmd *exec.Cmd) (*process, error) {
	p := &process{name: name, cmd: cmd, out: &logBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Its own process group, so that a Ctrl-C of `go test` reaches the
	// test first and Close still gets to stop the daemon cleanly.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls url until it answers 200, the process exits or ctx ends.
func (p *process) waitReady(ctx context.Context, url string) error {
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); its log:\n%s", p.name, p.err, p.out)
		case <-ctx.Done():
			return fmt.Errorf("wait for %s at %s: %w; its log:\n%s", p.name, url, ctx.Err(), p.out)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop asks the daemon to exit and kills it if it has not within 10 s.
func (p *process) stop() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s had exited already (%v)", p.name, p.err)
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s ignored SIGTERM for 10 s and was killed", p.name)
	}
}

// freeAddr picks a free loopback port. Another process may take it before
// the daemon binds it; the daemon then fails to start and says so.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Daemon is a process a test runs beside a Stack (e.g. Thanos in
// tests/fleet), with the same handling as the stack's own: its own process
// group, its output kept for a failure report, SIGTERM then SIGKILL.
type Daemon struct{ p *process }

// StartDaemon starts bin with args; name labels its errors and log.
func StartDaemon(name, bin string, args ...string) (*Daemon, error) {
	p, err := startProcess(name, bin, args...)
	if err != nil {
		return nil, err
	}
	return &Daemon{p}, nil
}

// StartDaemonCmd starts a command prepared by the caller (its environment,
// working directory); its output goes to the daemon's log.
func StartDaemonCmd(name string, cmd *exec.Cmd) (*Daemon, error) {
	p, err := startCmd(name, cmd)
	if err != nil {
		return nil, err
	}
	return &Daemon{p}, nil
}

// WaitReady polls url until it answers 200, the daemon exits or ctx ends.
func (d *Daemon) WaitReady(ctx context.Context, url string) error { return d.p.waitReady(ctx, url) }

// Stop asks the daemon to exit, killing it after 10 s.
func (d *Daemon) Stop() error { return d.p.stop() }

// Log is the last part of the daemon's output.
func (d *Daemon) Log() string { return d.p.out.String() }

// Name is the name the daemon was started with.
func (d *Daemon) Name() string { return d.p.name }

// FreeAddr picks a free loopback host:port (see freeAddr).
func FreeAddr() (string, error) { return freeAddr() }
