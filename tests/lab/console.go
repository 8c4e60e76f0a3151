package lab

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The host end of the control channel spoken by lab-ctl.sh on the guest's
// second serial port; see that script for the protocol.
const (
	readyMarker  = "@@LAB-READY@@"
	beginPrefix  = "@@LAB-BEGIN "
	endPrefix    = "@@LAB-END "
	badReqPrefix = "@@LAB-BADREQ "
	markerSuffix = "@@"
)

// ErrConsoleClosed is returned when the guest's control channel ends,
// usually because QEMU exited.
var ErrConsoleClosed = errors.New("guest control channel closed")

// ErrGuestRestarted is returned for a command that was running when the
// guest's control shell started anew (it crashed and init respawned it).
var ErrGuestRestarted = errors.New("guest control shell restarted")

// consoleTailLines is how much of the channel's traffic is kept for error
// messages.
const consoleTailLines = 40

type request struct {
	id     string
	inBody bool
	body   strings.Builder
	rc     int
	err    error
	done   chan struct{}
}

// console runs commands over the control channel. One command runs at a
// time; the reader goroutine hands the active request the lines between its
// markers and drops everything else (output of a command whose caller gave
// up carries another id and is skipped).
type console struct {
	w    deadlineWriter // host -> guest: QEMU's stdin, or a domain's serial socket
	sem  chan struct{}  // one command at a time
	seq  uint64
	salt string

	mu       sync.Mutex
	active   *request
	ready    chan struct{} // closed at the first ready marker
	isReady  bool
	closed   error
	tail     []string
	readerOK chan struct{} // closed when the reader stops
}

// deadlineWriter is the host end of the channel: a pipe (*os.File) or a
// UNIX socket (net.Conn); write deadlines keep a stuck guest from hanging
// the caller.
type deadlineWriter interface {
	io.Writer
	SetWriteDeadline(time.Time) error
}

func newConsole(w deadlineWriter, r io.Reader) *console {
	salt := make([]byte, 4)
	_, _ = rand.Read(salt)
	c := &console{
		w:        w,
		sem:      make(chan struct{}, 1),
		salt:     hex.EncodeToString(salt),
		ready:    make(chan struct{}),
		readerOK: make(chan struct{}),
	}
	go c.read(r)
	return c
}

func (c *console) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var line string
		line, err = br.ReadString('\n')
		if line != "" {
			c.handle(strings.TrimRight(line, "\r\n"))
		}
		if err != nil {
			break
		}
	}
	c.mu.Lock()
	c.closed = fmt.Errorf("%w: %v", ErrConsoleClosed, err)
	if req := c.active; req != nil {
		req.err = c.closed
		close(req.done)
		c.active = nil
	}
	c.mu.Unlock()
	close(c.readerOK)
}

func (c *console) handle(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Command output is base64 and not worth keeping; markers and anything
	// unexpected are.
	if strings.HasPrefix(line, "@@") || c.active == nil || !c.active.inBody {
		c.tail = append(c.tail, line)
		if len(c.tail) > consoleTailLines {
			c.tail = c.tail[len(c.tail)-consoleTailLines:]
		}
	}
	req := c.active
	switch {
	case line == readyMarker:
		if !c.isReady {
			c.isReady = true
			close(c.ready)
		}
		if req != nil {
			req.err = ErrGuestRestarted
			close(req.done)
			c.active = nil
		}
	case req == nil:
	case line == beginPrefix+req.id+markerSuffix:
		req.inBody = true
	case line == badReqPrefix+req.id+markerSuffix:
		req.err = fmt.Errorf("guest could not decode request %s", req.id)
		close(req.done)
		c.active = nil
	case strings.HasPrefix(line, endPrefix+req.id+" ") && strings.HasSuffix(line, markerSuffix):
		f := strings.TrimSuffix(strings.TrimPrefix(line, endPrefix+req.id+" "), markerSuffix)
		rc, err := strconv.Atoi(f)
		if err != nil {
			req.err = fmt.Errorf("guest sent a bad exit status %q", f)
		}
		req.rc = rc
		close(req.done)
		c.active = nil
	case req.inBody:
		req.body.WriteString(line)
	}
}

// Tail returns the last lines seen on the control channel.
func (c *console) Tail() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.tail...)
}

// run runs script with sh in the guest and returns its output (stdout and
// stderr together, as a terminal would show them) and exit status. When ctx
// has a deadline the guest kills the script at about that time too.
func (c *console) run(ctx context.Context, script string) (string, int, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return "", -1, ctx.Err()
	}
	defer func() { <-c.sem }()

	c.seq++
	req := &request{id: fmt.Sprintf("%s-%d", c.salt, c.seq), done: make(chan struct{})}
	limit := 0
	if dl, ok := ctx.Deadline(); ok {
		limit = int(math.Ceil(time.Until(dl).Seconds()))
		if limit < 1 {
			return "", -1, context.DeadlineExceeded
		}
	}
	c.mu.Lock()
	if c.closed != nil {
		err := c.closed
		c.mu.Unlock()
		return "", -1, err
	}
	c.active = req
	c.mu.Unlock()

	msg := fmt.Sprintf("LAB-RUN %s %d %s\n", req.id, limit, base64.StdEncoding.EncodeToString([]byte(script)))
	if dl, ok := ctx.Deadline(); ok {
		_ = c.w.SetWriteDeadline(dl)
	}
	_, err := io.WriteString(c.w, msg)
	_ = c.w.SetWriteDeadline(time.Time{})
	if err != nil {
		c.abandon(req)
		return "", -1, fmt.Errorf("send command to guest: %w", err)
	}

	select {
	case <-ctx.Done():
		c.abandon(req)
		return "", -1, ctx.Err()
	case <-req.done:
	}
	if req.err != nil {
		return "", -1, req.err
	}
	out, err := base64.StdEncoding.DecodeString(req.body.String())
	if err != nil {
		return "", -1, fmt.Errorf("decode guest output: %w", err)
	}
	return string(out), req.rc, nil
}

func (c *console) abandon(req *request) {
	c.mu.Lock()
	if c.active == req {
		c.active = nil
	}
	c.mu.Unlock()
}
