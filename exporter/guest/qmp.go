package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// maxQMPLine bounds one QMP message. query-blockstats is about 2 KiB per
// device and query-block a little more; a VM with a thousand disks stays
// far below.
const maxQMPLine = 8 << 20

// maxSunPath is the room for a path in sockaddr_un (108 bytes with its NUL,
// unix(7)).
const maxSunPath = 107

// qmpSession is one connection to a QMP monitor (QEMU's
// docs/interop/qmp-spec.rst): the greeting, qmp_capabilities to leave
// negotiation mode, then commands, each answered by a line with its id.
// Events may come in between and are skipped. Every read and write is
// bounded by the deadline set at dial.
type qmpSession struct {
	conn net.Conn
	r    *bufio.Reader
	id   int
}

// dialQMP connects to the monitor at path and negotiates, all before
// deadline; ctx ending closes the connection.
func dialQMP(ctx context.Context, path string, deadline time.Time) (*qmpSession, error) {
	if len(path) > maxSunPath {
		return nil, fmt.Errorf("qmp socket %s: path longer than %d bytes", path, maxSunPath)
	}
	d := net.Dialer{Deadline: deadline}
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to qmp %s: %w", path, err)
	}
	_ = conn.SetDeadline(deadline)
	s := &qmpSession{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	ok := false
	defer func() {
		if !ok {
			stop()
			conn.Close()
		}
	}()
	line, err := s.readLine()
	if err != nil {
		return nil, fmt.Errorf("qmp %s: read greeting: %w", path, timeoutHint(err))
	}
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if json.Unmarshal(line, &greeting) != nil || greeting.QMP == nil {
		return nil, fmt.Errorf("qmp %s: not a QMP greeting: %.80q", path, line)
	}
	if _, err := s.execute("qmp_capabilities"); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", path, err)
	}
	ok = true
	return s, nil
}

func (s *qmpSession) close() { s.conn.Close() }

// timeoutHint names a deadline that passed as what it means here.
func timeoutHint(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("no answer in time (another client may hold the monitor: QEMU serves one at a time): %w", err)
	}
	return err
}

// readLine reads one message, at most maxQMPLine bytes.
func (s *qmpSession) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxQMPLine {
			return nil, fmt.Errorf("message longer than %d bytes", maxQMPLine)
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// execute runs a command without arguments and returns its "return" value.
func (s *qmpSession) execute(command string) (json.RawMessage, error) {
	s.id++
	id := "fspair-" + strconv.Itoa(s.id)
	req, _ := json.Marshal(map[string]string{"execute": command, "id": id})
	if _, err := s.conn.Write(append(req, '\n')); err != nil {
		return nil, fmt.Errorf("send %s: %w", command, timeoutHint(err))
	}
	for {
		line, err := s.readLine()
		if err != nil {
			return nil, fmt.Errorf("read reply to %s: %w", command, timeoutHint(err))
		}
		var reply struct {
			ID     *string         `json:"id"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if json.Unmarshal(line, &reply) != nil || reply.ID == nil || *reply.ID != id {
			continue // an event, or not ours
		}
		if reply.Error != nil {
			return nil, fmt.Errorf("%s: %s: %s", command, reply.Error.Class, reply.Error.Desc)
		}
		return reply.Return, nil
	}
}

// blockstatsEntry is one device of query-blockstats (QAPI BlockStats).
type blockstatsEntry struct {
	Device   string                     `json:"device"`
	QDev     string                     `json:"qdev"`
	NodeName string                     `json:"node-name"`
	Stats    map[string]json.RawMessage `json:"stats"`
}

// qmpFields names, for each counter of Stats (in statFields order) and
// operation, its field of QAPI BlockDeviceStats; "" where QEMU keeps none.
var qmpFields = [numFields][NumOps]string{
	{"rd_operations", "wr_operations", "flush_operations", "unmap_operations"},
	{"rd_bytes", "wr_bytes", "", "unmap_bytes"},
	{"failed_rd_operations", "failed_wr_operations", "failed_flush_operations", "failed_unmap_operations"},
	{"rd_merged", "wr_merged", "", "unmap_merged"},
	{"rd_total_time_ns", "wr_total_time_ns", "flush_total_time_ns", "unmap_total_time_ns"},
}

// stats converts the entry's counters; a field QEMU did not send, or not
// as an unsigned integer, is left absent.
func (e *blockstatsEntry) stats() Stats {
	var st Stats
	for f := range qmpFields {
		dst := st.field(f)
		for op, name := range qmpFields[f] {
			raw, ok := e.Stats[name]
			if name == "" || !ok {
				continue
			}
			var v uint64
			if json.Unmarshal(raw, &v) == nil {
				dst[op] = set(v)
			}
		}
	}
	return st
}

// blockEntry is one device of query-block (QAPI BlockInfo): what it has
// inserted, to match a disk by its image file.
type blockEntry struct {
	Device   string `json:"device"`
	QDev     string `json:"qdev"`
	Inserted *struct {
		File     string `json:"file"`
		NodeName string `json:"node-name"`
		Image    struct {
			Filename string `json:"filename"`
		} `json:"image"`
	} `json:"inserted"`
}

// qdevID is the id of the device at a qdev path: devices given an id live
// at /machine/peripheral/<id> (virtio devices report their backend child
// below it); older QEMU reported the id itself.
func qdevID(path string) string {
	const prefix = "/machine/peripheral/"
	if rest, ok := strings.CutPrefix(path, prefix); ok {
		id, _, _ := strings.Cut(rest, "/")
		return id
	}
	if !strings.HasPrefix(path, "/") {
		return path
	}
	return ""
}

// vmDisk is a disk of the VM a QMP session reads, with where its reading
// goes.
type vmDisk struct {
	target, file string
	out          *Stats
	found        bool
}

// readQMP reads the guest statistics of a VM's disks over the monitor at
// path: query-blockstats, matched to each disk by its target device (the
// -device id, drive id or node name discovery gave it), and, for disks so
// not found, query-block to match by image file.
func readQMP(ctx context.Context, path string, deadline time.Time, disks []*vmDisk, procRoot string, pid int) error {
	s, err := dialQMP(ctx, reachable(path, procRoot, pid), deadline)
	if err != nil {
		return err
	}
	defer s.close()
	raw, err := s.execute("query-blockstats")
	if err != nil {
		return fmt.Errorf("qmp %s: %w", path, err)
	}
	var entries []blockstatsEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return fmt.Errorf("qmp %s: decode query-blockstats: %w", path, err)
	}
	byID := map[string]*blockstatsEntry{}
	for i := range entries {
		e := &entries[i]
		// A disk's target is its -device id, else its drive (block
		// backend) or node name, whichever discovery found.
		for _, id := range []string{e.NodeName, e.Device, qdevID(e.QDev)} {
			if id != "" {
				byID[id] = e
			}
		}
	}
	missing := false
	for _, d := range disks {
		if e := byID[d.target]; e != nil && d.target != "" {
			*d.out, d.found = e.stats(), true
		} else {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	raw, err = s.execute("query-block")
	if err != nil {
		return fmt.Errorf("qmp %s: %w", path, err)
	}
	var block []blockEntry
	if err := json.Unmarshal(raw, &block); err != nil {
		return fmt.Errorf("qmp %s: decode query-block: %w", path, err)
	}
	for _, d := range disks {
		if d.found {
			continue
		}
		for _, b := range block {
			if b.Inserted == nil || !sameImage(d.file, b.Inserted.File, b.Inserted.Image.Filename, procRoot, pid) {
				continue
			}
			for _, id := range []string{qdevID(b.QDev), b.Device, b.Inserted.NodeName} {
				if e := byID[id]; e != nil && id != "" {
					*d.out, d.found = e.stats(), true
					break
				}
			}
			if d.found {
				break
			}
		}
	}
	return nil
}

// reachable is where to connect to a socket the VMM names: the path as it
// is when it exists here, else through the VMM's root (its mount namespace).
func reachable(path, procRoot string, pid int) string {
	if _, err := os.Stat(path); err == nil || pid <= 0 {
		return path
	}
	return filepath.Join(procRoot, strconv.Itoa(pid), "root", path)
}

// sameImage reports whether the disk's image file is the one QEMU names
// (file of the top node, or its image's filename): the same path, or the
// same file reached through other names.
func sameImage(file, qemuFile, qemuImage, procRoot string, pid int) bool {
	clean := filepath.Clean(file)
	for _, q := range []string{qemuFile, qemuImage} {
		if q != "" && filepath.Clean(q) == clean {
			return true
		}
	}
	a, err := os.Stat(file)
	if err != nil {
		return false
	}
	for _, q := range []string{qemuFile, qemuImage} {
		if !filepath.IsAbs(q) {
			continue
		}
		if b, err := os.Stat(reachable(q, procRoot, pid)); err == nil && os.SameFile(a, b) {
			return true
		}
	}
	return false
}
