package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// QMPError is an error QEMU returned for a QMP command
// (docs/interop/qmp-spec: {"error": {"class": ..., "desc": ...}}).
type QMPError struct {
	Command string
	Class   string
	Desc    string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// ErrQMPClosed is returned by commands issued on, or pending when, the QMP
// connection closed (usually because QEMU exited).
var ErrQMPClosed = errors.New("qmp connection closed")

// QMPEvent is an asynchronous QMP event such as DEVICE_DELETED.
type QMPEvent struct {
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// qmpClient speaks QMP over a unix socket: it reads the greeting, leaves
// capabilities negotiation mode, then matches replies to commands by id.
// Events are kept (bounded) so callers can wait for them after the fact.
type qmpClient struct {
	conn net.Conn
	wmu  sync.Mutex // serialises writes

	mu      sync.Mutex
	nextID  uint64
	pending map[string]chan qmpReply
	events  []QMPEvent    // the newest maxQMPEvents events
	dropped int           // events trimmed from the front of events
	evWake  chan struct{} // closed and replaced on every new event
	err     error         // set when the reader stops
	done    chan struct{}
}

type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	ID    *string `json:"id"`
	Event string  `json:"event"`
}

// maxQMPEvents bounds the kept events; the lab's guests emit a handful
// (device removal, shutdown), so this is generous.
const maxQMPEvents = 1024

// dialQMP connects to the QMP socket at path, retrying until ctx ends
// because QEMU creates the socket shortly after it starts.
func dialQMP(ctx context.Context, path string, alive func() error) (*qmpClient, error) {
	var conn net.Conn
	for {
		var err error
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", path)
		if err == nil {
			break
		}
		if aerr := alive(); aerr != nil {
			return nil, fmt.Errorf("connect qmp %s: %w", path, aerr)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect qmp %s: %w (last error: %v)", path, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	c := &qmpClient{
		conn:    conn,
		pending: map[string]chan qmpReply{},
		evWake:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	r := bufio.NewReader(conn)
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	greeting, err := r.ReadBytes('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("read qmp greeting: %w", err)
	}
	var g struct {
		QMP *json.RawMessage `json:"QMP"`
	}
	if err := json.Unmarshal(greeting, &g); err != nil || g.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("read qmp greeting: unexpected %q", greeting)
	}
	_ = conn.SetReadDeadline(time.Time{})
	go c.read(r)
	if _, err := c.Execute(ctx, "qmp_capabilities", nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("negotiate qmp capabilities: %w", err)
	}
	return c, nil
}

// read dispatches replies to their commands and keeps events.
func (c *qmpClient) read(r *bufio.Reader) {
	var err error
	for {
		var line []byte
		line, err = r.ReadBytes('\n')
		if err != nil {
			break
		}
		var msg qmpReply
		if jerr := json.Unmarshal(line, &msg); jerr != nil {
			continue // not ours to judge; QMP sends one JSON object per line
		}
		if msg.Event != "" {
			var ev QMPEvent
			if json.Unmarshal(line, &ev) == nil {
				c.mu.Lock()
				c.events = append(c.events, ev)
				if n := len(c.events) - maxQMPEvents; n > 0 {
					c.events = append([]QMPEvent(nil), c.events[n:]...)
					c.dropped += n
				}
				close(c.evWake)
				c.evWake = make(chan struct{})
				c.mu.Unlock()
			}
			continue
		}
		if msg.ID == nil {
			continue
		}
		c.mu.Lock()
		ch := c.pending[*msg.ID]
		delete(c.pending, *msg.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- msg
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %v", ErrQMPClosed, err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

// Execute runs one QMP command and returns its "return" value.
func (c *qmpClient) Execute(ctx context.Context, command string, args any) (json.RawMessage, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	c.nextID++
	id := fmt.Sprintf("lab-%d", c.nextID)
	ch := make(chan qmpReply, 1)
	c.pending[id] = ch
	c.mu.Unlock()

	req := map[string]any{"execute": command, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		c.forget(id)
		return nil, fmt.Errorf("encode qmp %s: %w", command, err)
	}
	c.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetWriteDeadline(dl)
	}
	_, err = c.conn.Write(append(b, '\n'))
	_ = c.conn.SetWriteDeadline(time.Time{})
	c.wmu.Unlock()
	if err != nil {
		c.forget(id)
		return nil, fmt.Errorf("send qmp %s: %w", command, err)
	}

	select {
	case <-ctx.Done():
		c.forget(id)
		return nil, fmt.Errorf("qmp %s: %w", command, ctx.Err())
	case msg, ok := <-ch:
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return nil, fmt.Errorf("qmp %s: %w", command, err)
		}
		if msg.Error != nil {
			return nil, &QMPError{Command: command, Class: msg.Error.Class, Desc: msg.Error.Desc}
		}
		return msg.Return, nil
	}
}

func (c *qmpClient) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// EventMark returns a position in the event stream; pass it to WaitEvent
// to consider only events that arrive after this call.
func (c *qmpClient) EventMark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped + len(c.events)
}

// Events returns the events received so far (the newest maxQMPEvents).
func (c *qmpClient) Events() []QMPEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]QMPEvent(nil), c.events...)
}

// WaitEvent waits for an event at or after mark (see EventMark) for which
// match returns true. Taking the mark before issuing the command that causes
// the event means an event that races ahead of WaitEvent is not missed.
func (c *qmpClient) WaitEvent(ctx context.Context, mark int, match func(QMPEvent) bool) (QMPEvent, error) {
	next := mark
	for {
		c.mu.Lock()
		start := next - c.dropped
		if start < 0 {
			start = 0
		}
		var evs []QMPEvent
		if start < len(c.events) {
			evs = append(evs, c.events[start:]...)
		}
		next = c.dropped + len(c.events)
		wake, cerr := c.evWake, c.err
		c.mu.Unlock()
		for _, ev := range evs {
			if match(ev) {
				return ev, nil
			}
		}
		if cerr != nil {
			return QMPEvent{}, cerr
		}
		select {
		case <-ctx.Done():
			return QMPEvent{}, ctx.Err()
		case <-wake:
		case <-c.done:
		}
	}
}

// Close closes the connection and waits for the reader to stop.
func (c *qmpClient) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}
