package discovery

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// Defaults of the libvirt source.
const (
	// DefaultLibvirtSocket is libvirtd's read-only socket; read-only
	// connections may list domains and read their XML, which is all
	// discovery needs.
	DefaultLibvirtSocket = "/var/run/libvirt/libvirt-sock-ro"
	// DefaultLibvirtURI is the driver URI opened on the socket.
	DefaultLibvirtURI = "qemu:///system"
	// DefaultLibvirtPIDDir is where the QEMU driver writes <domain>.pid.
	DefaultLibvirtPIDDir = "/run/libvirt/qemu"
)

// MetadataNamespace is the XML namespace of fspair's libvirt domain metadata:
//
//	<metadata>
//	  <fspair:disks xmlns:fspair="https://fspair.dev/xmlns/libvirt/1">
//	    <fspair:disk target="vda" guest_fs="xfs"/>
//	  </fspair:disks>
//	</metadata>
//
// A disk element selects a disk by target (its <target dev=>) or by source
// (its image path) and sets the guest file system.
const MetadataNamespace = "https://fspair.dev/xmlns/libvirt/1"

// maxDomainXML bounds one domain XML document; libvirt's RPC limits strings
// to REMOTE_STRING_MAX (4 MiB, src/remote/remote_protocol.x).
const maxDomainXML = 4 << 20

// domainXML is the part of libvirt's domain XML format
// (https://libvirt.org/formatdomain.html) discovery reads.
type domainXML struct {
	XMLName  xml.Name `xml:"domain"`
	Name     string   `xml:"name"`
	UUID     string   `xml:"uuid"`
	Metadata struct {
		FSPair struct {
			Disks []struct {
				Target  string `xml:"target,attr"`
				Source  string `xml:"source,attr"`
				GuestFS string `xml:"guest_fs,attr"`
			} `xml:"https://fspair.dev/xmlns/libvirt/1 disk"`
		} `xml:"https://fspair.dev/xmlns/libvirt/1 disks"`
	} `xml:"metadata"`
	Devices struct {
		Disks []struct {
			Type   string `xml:"type,attr"`
			Device string `xml:"device,attr"`
			Driver struct {
				Type    string `xml:"type,attr"`
				Cache   string `xml:"cache,attr"`
				IO      string `xml:"io,attr"`
				Discard string `xml:"discard,attr"`
			} `xml:"driver"`
			Source struct {
				File string `xml:"file,attr"`
			} `xml:"source"`
			Target struct {
				Dev string `xml:"dev,attr"`
			} `xml:"target"`
			ReadOnly *struct{} `xml:"readonly"`
		} `xml:"disk"`
	} `xml:"devices"`
}

// ParseDomainXML returns the file-backed disks (type='file' device='disk')
// of a libvirt domain XML document, with guest file system overrides from
// fspair metadata applied. Other disk types (block, network, volume) and
// devices (cdrom, floppy, lun) are left out. Invalid metadata is reported in
// the error while the disks are still returned.
func ParseDomainXML(doc []byte) ([]Disk, error) {
	if len(doc) > maxDomainXML {
		return nil, fmt.Errorf("parse domain XML: larger than %d bytes", maxDomainXML)
	}
	var dom domainXML
	if err := xml.NewDecoder(bytes.NewReader(doc)).Decode(&dom); err != nil {
		return nil, fmt.Errorf("parse domain XML: %w", err)
	}
	uuid := normalizeUUID(strings.TrimSpace(dom.UUID))
	name := strings.TrimSpace(dom.Name)
	var errs []error
	byTarget, bySource := map[string]string{}, map[string]string{}
	for _, m := range dom.Metadata.FSPair.Disks {
		if !guestFSRe.MatchString(m.GuestFS) {
			errs = append(errs, fmt.Errorf("domain %s: metadata guest_fs %q is not a file system type name", truncate(name), truncate(m.GuestFS)))
			continue
		}
		switch {
		case m.Target != "":
			byTarget[m.Target] = m.GuestFS
		case m.Source != "":
			bySource[filepath.Clean(m.Source)] = m.GuestFS
		default:
			errs = append(errs, fmt.Errorf("domain %s: metadata disk element needs a target or source attribute", truncate(name)))
		}
	}
	var disks []Disk
	for _, d := range dom.Devices.Disks {
		device := d.Device
		if device == "" {
			device = "disk" // libvirt's default
		}
		if d.Type != "file" || device != "disk" || d.Source.File == "" {
			continue
		}
		disk := Disk{
			Domain:       name,
			UUID:         uuid,
			TargetDevice: d.Target.Dev,
			SourceFile:   d.Source.File,
			Source:       SourceLibvirt,
			Format:       d.Driver.Type,
			Cache:        d.Driver.Cache,
			AIO:          d.Driver.IO,
			Discard:      normalizeDiscard(d.Driver.Discard),
			ReadOnly:     d.ReadOnly != nil,
		}
		if disk.Cache == "default" {
			disk.Cache = ""
		}
		if fs, ok := byTarget[disk.TargetDevice]; ok {
			disk.GuestFS = fs
		} else if fs, ok := bySource[filepath.Clean(disk.SourceFile)]; ok {
			disk.GuestFS = fs
		}
		disks = append(disks, disk)
	}
	return disks, errors.Join(errs...)
}

// libvirtSource discovers disks of running libvirt domains.
//
// Every libvirt call is bounded by callTimeout and the whole query by the
// context. go-libvirt's calls take neither a context nor a deadline, so a
// watchdog closes the connection when a limit passes, which makes the
// pending call return: go-libvirt's reader stops on the closed socket and
// releases every waiting caller with ErrInterrupted. Read deadlines on the
// socket would not do: go-libvirt treats a timeout as a temporary error and
// keeps reading.
type libvirtSource struct {
	socket      string
	uri         string
	pidDir      string
	callTimeout time.Duration

	sem  chan struct{} // one query at a time
	conn *libvirtConn  // nil when disconnected; guarded by sem
	// version is libvirt's (virConnectGetLibVersion), 0 until known.
	version atomic.Uint64
}

type libvirtConn struct {
	l *libvirt.Libvirt
	d *ctxDialer
}

func newLibvirtSource(socket, uri, pidDir string, callTimeout time.Duration) *libvirtSource {
	if socket == "" {
		socket = DefaultLibvirtSocket
	}
	if uri == "" {
		uri = DefaultLibvirtURI
	}
	if pidDir == "" {
		pidDir = DefaultLibvirtPIDDir
	}
	if callTimeout <= 0 {
		callTimeout = DefaultTimeout
	}
	return &libvirtSource{socket: socket, uri: uri, pidDir: pidDir, callTimeout: callTimeout, sem: make(chan struct{}, 1)}
}

// ctxDialer dials the libvirt socket within a context and lets a watchdog
// close the connection, even one still being dialed.
type ctxDialer struct {
	ctx     context.Context
	timeout time.Duration
	socket  string
	mu      sync.Mutex
	conn    net.Conn
	closed  bool
}

func (d *ctxDialer) Dial() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(d.ctx, d.timeout)
	defer cancel()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "unix", d.socket)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	d.conn = c
	return c, nil
}

func (d *ctxDialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.conn != nil {
		d.conn.Close()
	}
}

// watchdog closes a libvirt connection when the current call runs past its
// deadline or the context ends.
type watchdog struct {
	timer   *time.Timer
	stopCtx func() bool
	fired   atomic.Bool
}

func newWatchdog(ctx context.Context, d *ctxDialer) *watchdog {
	w := &watchdog{}
	fire := func() {
		w.fired.Store(true)
		d.close()
	}
	w.timer = time.AfterFunc(time.Hour, fire)
	w.timer.Stop()
	w.stopCtx = context.AfterFunc(ctx, fire)
	return w
}

// arm starts the deadline of the next call.
func (w *watchdog) arm(d time.Duration) { w.timer.Reset(d) }

// stop disarms the watchdog and reports whether it closed the connection.
func (w *watchdog) stop() bool {
	w.timer.Stop()
	w.stopCtx()
	return w.fired.Load()
}

// discover lists the disks of all running domains. err means the query
// failed and disks are to be ignored; warn reports problems with single
// domains (such as invalid metadata) whose disks are still returned.
func (s *libvirtSource) discover(ctx context.Context) (disks []Disk, warn, err error) {
	err = s.do(ctx, func(l *libvirt.Libvirt, arm func()) error {
		var lerr error
		disks, warn, lerr = s.list(ctx, l, arm)
		return lerr
	})
	if err != nil {
		return nil, nil, err
	}
	return disks, warn, nil
}

// do runs fn on the connection, connecting first if need be. fn calls arm
// before each libvirt call it makes, which starts that call's deadline.
// Calls are serialised: one query (discovery's or the guest statistics')
// at a time on the one connection.
func (s *libvirtSource) do(ctx context.Context, fn func(l *libvirt.Libvirt, arm func()) error) (err error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for previous libvirt query: %w", ctx.Err())
	}
	defer func() { <-s.sem }()

	if s.conn != nil {
		select {
		case <-s.conn.l.Disconnected():
			s.conn = nil // libvirtd restarted or closed on us: reconnect
		default:
		}
	}
	c, connected := s.conn, true
	if c == nil {
		d := &ctxDialer{ctx: ctx, timeout: s.callTimeout, socket: s.socket}
		c = &libvirtConn{l: libvirt.NewWithDialer(d), d: d}
		connected = false
	}
	w := newWatchdog(ctx, c.d)
	if !connected {
		// Connecting is two calls (auth-list, connect-open); one
		// deadline covers both.
		w.arm(s.callTimeout)
		err = c.l.ConnectToURI(libvirt.ConnectURI(s.uri))
		connected = err == nil
	}
	if connected {
		err = fn(c.l, func() { w.arm(s.callTimeout) })
	}
	if w.stop() || err != nil {
		// After a timeout or a failed call the connection state is
		// unknown: drop it and reconnect next time.
		c.d.close()
		s.conn = nil
		what := "query"
		if !connected {
			what = "connect to"
		}
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("%s libvirt at %s: %w", what, s.socket, ctx.Err())
		case w.fired.Load():
			err = fmt.Errorf("%s libvirt at %s: no answer within %s: %w", what, s.socket, s.callTimeout, context.DeadlineExceeded)
		default:
			err = fmt.Errorf("%s libvirt at %s: %w", what, s.socket, err)
		}
		return err
	}
	s.conn = c
	return nil
}

// blockStats returns libvirt's block statistics of every running domain
// (virConnectGetAllDomainStats with VIR_DOMAIN_STATS_BLOCK), which the
// read-only connection may read.
func (s *libvirtSource) blockStats(ctx context.Context) (recs []libvirt.DomainStatsRecord, err error) {
	err = s.do(ctx, func(l *libvirt.Libvirt, arm func()) error {
		arm()
		var lerr error
		recs, lerr = l.ConnectGetAllDomainStats(nil, uint32(libvirt.DomainStatsBlock), uint32(libvirt.ConnectGetAllDomainsStatsActive))
		if lerr != nil {
			return fmt.Errorf("get domain block statistics: %w", lerr)
		}
		// Which statistics libvirt can give (latency histograms from
		// 12.1) follows its version: asked until known. A libvirtd
		// that does not answer it leaves the version unknown; the
		// statistics stand.
		if s.version.Load() == 0 {
			arm()
			if v, err := l.ConnectGetLibVersion(); err == nil {
				s.version.Store(v)
			}
		}
		return nil
	})
	return recs, err
}

// monitorCommand runs a QMP command on a domain's QEMU through libvirt's
// pass-through: the domain looked up by UUID, then
// virDomainQemuMonitorCommand.
func (s *libvirtSource) monitorCommand(ctx context.Context, uuid, command string) (out string, err error) {
	u, err := parseUUID(uuid)
	if err != nil {
		return "", err
	}
	err = s.do(ctx, func(l *libvirt.Libvirt, arm func()) error {
		arm()
		dom, err := l.DomainLookupByUUID(u)
		if err != nil {
			return fmt.Errorf("look up domain %s: %w", uuid, err)
		}
		arm()
		if out, err = l.QEMUDomainMonitorCommand(dom, command, 0); err != nil {
			return fmt.Errorf("monitor command on domain %s: %w", uuid, err)
		}
		return nil
	})
	return out, err
}

// parseUUID reads a UUID written as libvirt writes it (8-4-4-4-12 hex).
func parseUUID(s string) (libvirt.UUID, error) {
	var u libvirt.UUID
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(u) {
		return u, fmt.Errorf("domain uuid %q: not a UUID", s)
	}
	copy(u[:], b)
	return u, nil
}

// list fetches the XML of every running domain, calling arm before each
// libvirt call.
func (s *libvirtSource) list(ctx context.Context, l *libvirt.Libvirt, arm func()) (disks []Disk, warn, err error) {
	arm()
	doms, _, err := l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive)
	if err != nil {
		return nil, nil, fmt.Errorf("list domains: %w", err)
	}
	var warns []error
	for _, dom := range doms {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		arm()
		doc, err := l.DomainGetXMLDesc(dom, 0)
		if err != nil {
			if libvirt.IsNotFound(err) {
				continue // shut down since it was listed
			}
			return nil, nil, fmt.Errorf("get XML of domain %s: %w", truncate(dom.Name), err)
		}
		ds, err := ParseDomainXML([]byte(doc))
		if err != nil {
			warns = append(warns, err)
		}
		pid := s.readPID(dom.Name)
		for i := range ds {
			ds[i].PID = pid
		}
		disks = append(disks, ds...)
	}
	if disks == nil {
		disks = []Disk{}
	}
	return disks, errors.Join(warns...), nil
}

// readPID reads the QEMU process id the libvirt QEMU driver records in
// <pidDir>/<domain>.pid (0 if unavailable: the file is root-only).
func (s *libvirtSource) readPID(name string) int {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return 0
	}
	b, err := readBounded(filepath.Join(s.pidDir, name+".pid"), 32)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// close disconnects, giving libvirtd a moment to acknowledge.
func (s *libvirtSource) close() {
	select {
	case s.sem <- struct{}{}:
	case <-time.After(s.callTimeout):
		return // a query is under way; its watchdog bounds it
	}
	defer func() { <-s.sem }()
	if s.conn == nil {
		return
	}
	c := s.conn
	s.conn = nil
	t := time.AfterFunc(s.callTimeout, c.d.close)
	defer t.Stop()
	c.l.Disconnect()
	c.d.close()
}
