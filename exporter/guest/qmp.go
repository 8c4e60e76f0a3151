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
	"slices"
	"strconv"
	"strings"
	"sync"
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
//
// qmp_capabilities goes out with the session's first command, in one
// write, and its reply is read before that command's: the server reads,
// executes and answers one command after the other, in the order they
// came (qmp-spec.rst, "Out-of-band execution": fspair asks for no OOB),
// so the second runs in command mode. That saves a round trip a session:
// a write, a read and a wake-up on each side.
type qmpSession struct {
	conn net.Conn
	r    *bufio.Reader
	id   int
	// out holds the commands not yet written; pending is the id of the
	// command written whose reply is still to read before the next's
	// (qmp_capabilities), and pendingCmd its name.
	out                 []byte
	pending, pendingCmd string
}

// qmpReaders are the sessions' read buffers, kept across sessions: a
// poll opens a session per VM each round (2,000 a second at 10,000 VMs),
// and a buffer each was most of what the poll allocated.
var qmpReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// dialQMP connects to the monitor at path and reads its greeting, all
// before deadline; ctx ending closes the connection. qmp_capabilities
// goes with the first command.
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
	r := qmpReaders.Get().(*bufio.Reader)
	r.Reset(conn)
	s := &qmpSession{conn: conn, r: r}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	ok := false
	defer func() {
		if !ok {
			stop()
			s.close()
		}
	}()
	line, err := s.readLine()
	if err != nil {
		return nil, fmt.Errorf("qmp %s: read greeting: %w", path, timeoutHint(err))
	}
	if !isGreeting(line) {
		return nil, fmt.Errorf("qmp %s: not a QMP greeting: %.80q", path, line)
	}
	if s.pending, err = s.queue("qmp_capabilities", nil); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", path, err)
	}
	s.pendingCmd = "qmp_capabilities"
	ok = true
	return s, nil
}

// isGreeting reports whether line is a QMP greeting: an object with a
// "QMP" member not null.
func isGreeting(line []byte) bool {
	s := jsonScanner{b: line}
	found := false
	err := s.object(func(key []byte) error {
		if string(key) != "QMP" {
			return s.skip()
		}
		v, err := s.value()
		found = string(v) != "null"
		return err
	})
	return err == nil && s.end() == nil && found
}

// close ends the session; its read buffer goes back to the pool.
func (s *qmpSession) close() {
	s.conn.Close()
	if s.r != nil {
		s.r.Reset(nil)
		qmpReaders.Put(s.r)
		s.r = nil
	}
}

// timeoutHint names a deadline that passed as what it means here.
func timeoutHint(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("no answer in time (another client may hold the monitor: QEMU serves one at a time): %w", err)
	}
	return err
}

// readLine reads one message, at most maxQMPLine bytes. The line is the
// reader's buffer when it fits (most do): valid until the next read.
func (s *qmpSession) readLine() ([]byte, error) {
	frag, err := s.r.ReadSlice('\n')
	if err == nil {
		return frag, nil
	}
	line := slices.Clone(frag)
	for {
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
		frag, err = s.r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxQMPLine {
			return nil, fmt.Errorf("message longer than %d bytes", maxQMPLine)
		}
		if err == nil {
			return line, nil
		}
	}
}

// qmpError is QEMU's error reply to a command (class and description, as
// qmp-spec.rst has them): the command was refused, the session is fine.
type qmpError struct {
	Command, Class, Desc string
}

func (e *qmpError) Error() string { return e.Command + ": " + e.Class + ": " + e.Desc }

// qmpRequest is a command as qmp-spec.rst has it; ID empty where the
// monitor's owner numbers the commands (libvirt's pass-through).
type qmpRequest struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        string `json:"id,omitempty"`
}

// qmpReply is a line from QEMU: a command's reply, with its id, or an
// event.
type qmpReply struct {
	ID    string
	hasID bool // an id that is a string
}

// decode reads a line whose "return" value, if any, goes into out (nil:
// dropped); QEMU's refusal is a *qmpError. query-blockstats' return value
// (out a *[]blockstatsEntry) is read with the line by jsonScanner, any
// other through encoding/json. A line that is not JSON is an error
// wrapping errJSON, whose id is not known.
func (r *qmpReply) decode(command string, line []byte, out any) error {
	s := jsonScanner{b: line}
	var ret, refusal []byte
	var shape error
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "id":
			if s.next() != '"' {
				return s.skip() // not an id fspair gives
			}
			raw, esc, err := s.str()
			r.ID, r.hasID = string(raw), err == nil && !esc
			return err
		case "return":
			if entries, ok := out.(*[]blockstatsEntry); ok {
				err := s.decodeBlockstats(entries)
				if errors.Is(err, errShape) {
					shape, err = err, nil
				}
				return err
			}
			var err error
			ret, err = s.value()
			return err
		case "error":
			var err error
			refusal, err = s.value()
			return err
		}
		return s.skip()
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return fmt.Errorf("decode reply to %s: %w", command, err)
	}
	if ret != nil && out != nil {
		if err := json.Unmarshal(ret, out); err != nil {
			shape = err
		}
	}
	var qe *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	}
	if refusal != nil {
		if err := json.Unmarshal(refusal, &qe); err != nil {
			shape = cmp(shape, err)
		}
	}
	switch {
	case shape != nil:
		return fmt.Errorf("decode reply to %s: %w", command, shape)
	case qe != nil:
		return &qmpError{command, qe.Class, qe.Desc}
	}
	return nil
}

// queue adds a command with arguments (nil for none) to those to write,
// and returns its id.
func (s *qmpSession) queue(command string, args any) (string, error) {
	s.id++
	id := "fspair-" + strconv.Itoa(s.id)
	if args == nil {
		// As json.Marshal would write it: fspair's command names and
		// ids need no escapes.
		s.out = append(s.out, `{"execute":"`...)
		s.out = append(s.out, command...)
		s.out = append(s.out, `","id":"`...)
		s.out = append(s.out, id...)
		s.out = append(s.out, "\"}\n"...)
		return id, nil
	}
	req, err := json.Marshal(qmpRequest{command, args, id})
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", command, err)
	}
	s.out = append(append(s.out, req...), '\n')
	return id, nil
}

// executeArgs runs a command with arguments (nil for none) and decodes its
// "return" value into out (nil: dropped); QEMU's refusal is a *qmpError.
// The reply to a command written before it (qmp_capabilities) is read
// first, and its failure is this call's.
func (s *qmpSession) executeArgs(command string, args, out any) error {
	id, err := s.queue(command, args)
	if err != nil {
		return err
	}
	if _, err := s.conn.Write(s.out); err != nil {
		return fmt.Errorf("send %s: %w", command, timeoutHint(err))
	}
	s.out = s.out[:0]
	if s.pending != "" {
		pending, cmd := s.pending, s.pendingCmd
		s.pending, s.pendingCmd = "", ""
		if err := s.await(cmd, pending, nil); err != nil {
			return err
		}
	}
	return s.await(command, id, out)
}

// await reads lines up to the reply with the id, decoding its "return"
// value into out.
func (s *qmpSession) await(command, id string, out any) error {
	for {
		line, err := s.readLine()
		if err != nil {
			return fmt.Errorf("read reply to %s: %w", command, timeoutHint(err))
		}
		// Commands go one at a time and a failed session is closed, so
		// the only lines before the reply are events: they have no
		// "return", and out is left alone. A line that is not JSON ends
		// the session at once: nothing after it can be trusted.
		var reply qmpReply
		err = reply.decode(command, line, out)
		if errors.Is(err, errJSON) {
			return err
		}
		if !reply.hasID || reply.ID != id {
			continue // an event, or not ours
		}
		return err
	}
}

// blockstatsEntry is one device of query-blockstats (QAPI BlockStats),
// as jsonScanner.decodeBlockstats reads it: its names, and its counters and
// latency histograms already converted.
type blockstatsEntry struct {
	Device, QDev, NodeName string
	// st holds the counters QEMU sent as unsigned integers and the
	// histograms on fspair's bounds; kinds what it sent of each
	// histogram.
	st    Stats
	kinds [NumOps]histKind
}

// statSlot is where a field of QAPI BlockDeviceStats goes in Stats: a
// counter (field, op) or, hist, the latency histogram of op.
type statSlot struct {
	field, op int
	hist      bool
}

// statSlots are the fields of BlockDeviceStats fspair reads, by name.
var statSlots = func() map[string]statSlot {
	m := map[string]statSlot{}
	for f := range qmpFields {
		for op, name := range qmpFields[f] {
			if name != "" {
				m[name] = statSlot{field: f, op: op}
			}
		}
	}
	for _, op := range HistogramOps {
		m[qmpHistograms[op]] = statSlot{op: op, hist: true}
	}
	return m
}()

// parseBlockstats reads query-blockstats' return value on its own; what
// follows it, if anything, makes it not JSON, whatever its shape.
func parseBlockstats(raw []byte, entries *[]blockstatsEntry) error {
	s := jsonScanner{b: raw}
	err := s.decodeBlockstats(entries)
	if err == nil || errors.Is(err, errShape) {
		if end := s.end(); end != nil {
			return end
		}
	}
	return err
}

// qmpFields names, for each counter of Stats (in statFields order) and
// operation, its field of QAPI BlockDeviceStats; "" where QEMU keeps none.
var qmpFields = [numFields][NumOps]string{
	{"rd_operations", "wr_operations", "flush_operations", "unmap_operations"},
	{"rd_bytes", "wr_bytes", "", "unmap_bytes"},
	{"failed_rd_operations", "failed_wr_operations", "failed_flush_operations", "failed_unmap_operations"},
	{"rd_total_time_ns", "wr_total_time_ns", "flush_total_time_ns", "unmap_total_time_ns"},
}

// qmpHistograms names, for each operation, its latency histogram in QAPI
// BlockDeviceStats (BlockLatencyHistogramInfo), and qmpBoundaries its
// argument of block-latency-histogram-set; "" where QEMU keeps none.
var (
	qmpHistograms = [NumOps]string{"rd_latency_histogram", "wr_latency_histogram", "flush_latency_histogram", ""}
	qmpBoundaries = [NumOps]string{"boundaries-read", "boundaries-write", "boundaries-flush", ""}
)

// histKind is what a source has of one operation's latency histogram.
type histKind uint8

const (
	histAbsent histKind = iota // none
	histOurs                   // on LatencyBoundsNs: mapped to Stats.Latency
	histOther                  // on other bounds: not exported
)

// ourHistogram reads a histogram given as boundaries and bins: ours when
// the boundaries are LatencyBoundsNs.
func ourHistogram(bounds, bins []uint64) (Histogram, histKind) {
	if len(bounds) != len(LatencyBoundsNs) || len(bins) != LatencySlots {
		return Histogram{}, histOther
	}
	for k, b := range bounds {
		if b != LatencyBoundsNs[k] {
			return Histogram{}, histOther
		}
	}
	h := Histogram{OK: true}
	copy(h.Bins[:], bins)
	return h, histOurs
}

// histogramLabel is a disk's histogram label from what its source has of
// each operation QEMU keeps a histogram of.
func histogramLabel(kinds *[NumOps]histKind) string {
	label := HistogramOK
	for _, op := range HistogramOps {
		switch kinds[op] {
		case histOther:
			return HistogramOtherBounds
		case histAbsent:
			label = HistogramNotSet
		}
	}
	return label
}

// stats returns the entry's counters and latency histograms (a field
// QEMU did not send, or not as an unsigned integer, absent), and what it
// has of each histogram.
func (e *blockstatsEntry) stats() (Stats, [NumOps]histKind) { return e.st, e.kinds }

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
	hist         *string // its histogram label
	entry        *blockstatsEntry
}

// histSetter sets the guest latency histograms of a VM's devices over QMP
// and remembers the devices that refused (per VM: a new QEMU process is a
// new VM to the poller, and is asked again). nil where fspair sets none.
type histSetter struct {
	refused map[string]time.Time // when, by device (qdev, else "drive:" and its names)
	log     func(msg string, args ...any)
}

func newHistSetter(log func(msg string, args ...any)) *histSetter {
	return &histSetter{refused: map[string]time.Time{}, log: log}
}

// RefusedRetry is how long a device that refused its histogram is left
// before fspair asks again.
const RefusedRetry = 10 * time.Minute

// readQMP reads the guest statistics of a VM's disks over the monitor at
// path: query-blockstats, matched to each disk by its target device (the
// -device id, drive id or node name discovery gave it), and, for disks so
// not found, query-block to match by image file. Then, for found disks
// whose latency histograms are absent, block-latency-histogram-set in the
// same session (hs nil: never).
func readQMP(ctx context.Context, path string, deadline time.Time, disks []*vmDisk, procRoot string, pid int, hs *histSetter) error {
	s, err := dialQMP(ctx, reachable(path, procRoot, pid), deadline)
	if err != nil {
		return err
	}
	defer s.close()
	return readMonitor(s, path, disks, procRoot, pid, hs)
}

// monitor runs QMP commands: a QMP session of fspair's own, or libvirt's
// pass-through to its monitor (libvirtMonitor).
type monitor interface {
	// executeArgs runs a command (args nil for none) and returns its
	// "return" value into out (nil: dropped); QEMU's refusal is a
	// *qmpError.
	executeArgs(command string, args, out any) error
}

// readMonitor is readQMP on a monitor already open; path names it in
// errors.
func readMonitor(s monitor, path string, disks []*vmDisk, procRoot string, pid int, hs *histSetter) error {
	var entries []blockstatsEntry
	if err := s.executeArgs("query-blockstats", nil, &entries); err != nil {
		return fmt.Errorf("qmp %s: %w", path, err)
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
			d.entry = e
		} else {
			missing = true
		}
	}
	if missing {
		if err := matchByImage(s, path, disks, byID, procRoot, pid); err != nil {
			return err
		}
	}
	for _, d := range disks {
		if d.entry == nil {
			continue
		}
		var kinds [NumOps]histKind
		*d.out, kinds = d.entry.stats()
		*d.hist = histogramLabel(&kinds)
		if *d.hist == HistogramNotSet && hs != nil {
			*d.hist = hs.set(s, d.entry, &kinds)
		}
	}
	return nil
}

// matchByImage finds the disks not matched by target through query-block,
// by their image file.
func matchByImage(s monitor, path string, disks []*vmDisk, byID map[string]*blockstatsEntry, procRoot string, pid int) error {
	var block []blockEntry
	if err := s.executeArgs("query-block", nil, &block); err != nil {
		return fmt.Errorf("qmp %s: %w", path, err)
	}
	for _, d := range disks {
		for _, b := range block {
			if d.entry != nil {
				break
			}
			if b.Inserted == nil || !sameImage(d.file, b.Inserted.File, b.Inserted.Image.Filename, procRoot, pid) {
				continue
			}
			for _, id := range []string{qdevID(b.QDev), b.Device, b.Inserted.NodeName} {
				if e := byID[id]; e != nil && id != "" {
					d.entry = e
					break
				}
			}
		}
	}
	return nil
}

// set asks QEMU for the histograms the device lacks, on fspair's bounds,
// and returns the disk's histogram label: not_set when QEMU took them (the
// next read has them), refused when it did not. Histograms already there
// are left as they are: setting one empties it.
func (hs *histSetter) set(s monitor, e *blockstatsEntry, kinds *[NumOps]histKind) string {
	// block-latency-histogram-set finds the device by its id or QOM path
	// (qmp_get_blk() in QEMU's block/qapi-sysemu.c): a drive without a
	// guest device has neither.
	dev, key := e.QDev, e.QDev
	if dev == "" {
		key = "drive:" + e.Device + "/" + e.NodeName
	}
	if at, ok := hs.refused[key]; ok && time.Since(at) < RefusedRetry {
		return HistogramRefused
	}
	if dev == "" {
		hs.refuse(key, "the drive has no guest device")
		return HistogramRefused
	}
	args := map[string]any{"id": dev}
	for _, op := range HistogramOps {
		if kinds[op] == histAbsent {
			args[qmpBoundaries[op]] = LatencyBoundsNs[:]
		}
	}
	err := s.executeArgs("block-latency-histogram-set", args, nil)
	var qe *qmpError
	switch {
	case err == nil:
		delete(hs.refused, dev)
		return HistogramNotSet
	case errors.As(err, &qe):
		hs.refuse(key, qe.Error())
		return HistogramRefused
	}
	// The session failed: the values read stand, the next round tries
	// again.
	return HistogramNotSet
}

func (hs *histSetter) refuse(key, reason string) {
	if _, seen := hs.refused[key]; !seen {
		hs.log("QEMU refused a guest latency histogram", "device", key, "reason", reason)
	}
	hs.refused[key] = time.Now()
}

// reachable is where to connect to a socket the VMM names: the path as it
// is when it exists here, else through the VMM's root (its mount namespace).
func reachable(path, procRoot string, pid int) string {
	if pid <= 0 {
		return path
	}
	if _, err := os.Stat(path); err == nil {
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
