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
	if err := s.executeArgs("qmp_capabilities", nil, nil); err != nil {
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

// qmpReply is QEMU's answer to a command: its "return" value, decoded
// with the reply into where Return points (the reply is read once: a
// query-blockstats reply is the poll's largest), or its error.
type qmpReply struct {
	ID     *string `json:"id"`
	Return any     `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// decode reads a reply whose "return" value goes into out (nil: dropped);
// QEMU's refusal is a *qmpError.
func (r *qmpReply) decode(command string, line []byte, out any) error {
	if out == nil {
		out = &json.RawMessage{}
	}
	r.Return = out
	err := json.Unmarshal(line, r)
	if err == nil && r.Error != nil {
		err = &qmpError{command, r.Error.Class, r.Error.Desc}
	} else if err != nil {
		err = fmt.Errorf("decode reply to %s: %w", command, err)
	}
	return err
}

// executeArgs runs a command with arguments (nil for none) and decodes its
// "return" value into out (nil: dropped); QEMU's refusal is a *qmpError.
func (s *qmpSession) executeArgs(command string, args, out any) error {
	s.id++
	id := "fspair-" + strconv.Itoa(s.id)
	req, err := json.Marshal(qmpRequest{command, args, id})
	if err != nil {
		return fmt.Errorf("encode %s: %w", command, err)
	}
	if _, err := s.conn.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("send %s: %w", command, timeoutHint(err))
	}
	for {
		line, err := s.readLine()
		if err != nil {
			return fmt.Errorf("read reply to %s: %w", command, timeoutHint(err))
		}
		// Commands go one at a time and a failed session is closed, so
		// the only lines before the reply are events: they have no
		// "return", and out is left alone.
		var reply qmpReply
		err = reply.decode(command, line, out)
		if reply.ID == nil || *reply.ID != id {
			continue // an event, or not ours
		}
		return err
	}
}

// blockstatsEntry is one device of query-blockstats (QAPI BlockStats).
type blockstatsEntry struct {
	Device   string               `json:"device"`
	QDev     string               `json:"qdev"`
	NodeName string               `json:"node-name"`
	Stats    map[string]statValue `json:"stats"`
}

// statValue is one field of QAPI BlockDeviceStats, decoded with the reply
// and not again: an unsigned counter (n, when isUint), or an object, which
// BlockDeviceStats has only for latency histograms
// (BlockLatencyHistogramInfo): lat when on LatencyBoundsNs, else nil (a
// histogram on other bounds). Any other value is neither.
type statValue struct {
	n      uint64
	isUint bool
	lat    *Histogram
}

func (v *statValue) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '{' {
		// As json would decode it into a uint64, without a second pass;
		// null too is left absent, never a zero.
		n, err := strconv.ParseUint(string(b), 10, 64)
		v.n, v.isUint = n, err == nil
		return nil
	}
	// Sized for fspair's bounds, so that ours decode without growing.
	h := struct {
		Boundaries []uint64 `json:"boundaries"`
		Bins       []uint64 `json:"bins"`
	}{make([]uint64, 0, len(LatencyBoundsNs)), make([]uint64, 0, LatencySlots)}
	if json.Unmarshal(b, &h) != nil {
		return nil // not a histogram fspair can read: other bounds
	}
	if l, kind := ourHistogram(h.Boundaries, h.Bins); kind == histOurs {
		v.lat = &l
	}
	return nil
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

// stats converts the entry's counters and latency histograms; a field
// QEMU did not send, or not as an unsigned integer, is left absent. kinds
// says what it has of each histogram.
func (e *blockstatsEntry) stats() (st Stats, kinds [NumOps]histKind) {
	for f := range qmpFields {
		dst := st.field(f)
		for op, name := range qmpFields[f] {
			if v, ok := e.Stats[name]; name != "" && ok && v.isUint {
				dst[op] = set(v.n)
			}
		}
	}
	for _, op := range HistogramOps {
		v, ok := e.Stats[qmpHistograms[op]]
		switch {
		case !ok:
		case v.lat != nil:
			st.Latency[op], kinds[op] = *v.lat, histOurs
		default:
			kinds[op] = histOther
		}
	}
	return st, kinds
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
