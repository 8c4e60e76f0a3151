package discovery

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeLibvirtd speaks just enough of libvirt's RPC protocol
// (src/rpc/virnetprotocol.x, src/remote/remote_protocol.x: a 4-byte length,
// a 24-byte header, an XDR body) to serve the calls discovery makes.
type fakeLibvirtd struct {
	socket  string
	ln      net.Listener
	domains []fakeDomain
	// hang makes the server read calls but never answer, like a libvirtd
	// stuck on a lock.
	hang atomic.Bool
	// version answers virConnectGetLibVersion; 0 refuses it, as a
	// procedure the server does not know.
	version atomic.Uint64
	// monitorReply answers virDomainQemuMonitorCommand; monitorCmds
	// are the commands it got, as "<domain> <command>".
	monitorReply string
	monitorCmds  []string
	accepts      atomic.Int32
	calls        atomic.Int32
	mu           sync.Mutex
	conns        []net.Conn
}

type fakeDomain struct {
	name string
	uuid [16]byte
	xml  string // "" makes DomainGetXMLDesc fail with VIR_ERR_NO_DOMAIN
	// stats are the domain's block statistics, as typed parameters of
	// unsigned long long value (strings for *.name and *.path).
	stats []fakeParam
}

type fakeParam struct {
	field string
	u     uint64
	s     string
}

// Procedure numbers from remote_protocol.x.
const (
	procConnectOpen           = 1
	procConnectClose          = 2
	procDomainGetXMLDesc      = 14
	procAuthList              = 66
	procConnectListAllDomains = 273
	procConnectGetAllDomStats = 344
	procConnectGetLibVersion  = 157
	procDomainLookupByUUID    = 24
	qemuProgram               = 0x20008087
	procQEMUMonitorCommand    = 1 // of qemuProgram
	remoteProgram             = 0x20008086
	virErrNoDomain            = 42
)

func startFakeLibvirtd(t *testing.T, domains ...fakeDomain) *fakeLibvirtd {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "libvirt-sock-ro")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLibvirtd{socket: sock, ln: ln, domains: domains}
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepts.Add(1)
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			go f.handle(c)
		}
	}()
	return f
}

type xdrBuf []byte

func (b xdrBuf) u32(v uint32) xdrBuf { return binary.BigEndian.AppendUint32(b, v) }

func (b xdrBuf) str(s string) xdrBuf {
	b = b.u32(uint32(len(s)))
	b = append(b, s...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func (f *fakeLibvirtd) handle(c net.Conn) {
	defer c.Close()
	for {
		var hdr [28]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[0:4])
		if n < 28 || n > 1<<20 {
			return
		}
		body := make([]byte, n-28)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		f.calls.Add(1)
		if f.hang.Load() {
			continue
		}
		prog := binary.BigEndian.Uint32(hdr[4:8])
		proc := binary.BigEndian.Uint32(hdr[12:16])
		serial := binary.BigEndian.Uint32(hdr[20:24])
		var out xdrBuf
		status := uint32(0)
		if prog == qemuProgram {
			proc = 1<<31 | proc // apart from the remote program's numbers
		}
		switch proc {
		case 1<<31 | procQEMUMonitorCommand:
			// remote_nonnull_domain (name, uuid, id), the command, flags.
			l := binary.BigEndian.Uint32(body[0:4])
			name := string(body[4 : 4+l])
			off := 4 + (l+3)/4*4 + 16 + 4
			cl := binary.BigEndian.Uint32(body[off : off+4])
			f.mu.Lock()
			f.monitorCmds = append(f.monitorCmds, name+" "+string(body[off+4:off+4+cl]))
			f.mu.Unlock()
			out = out.str(f.monitorReply)
		case procDomainLookupByUUID:
			status = 1
			for i, d := range f.domains {
				if string(d.uuid[:]) == string(body[:16]) {
					out, status = out.str(d.name), 0
					out = append(out, d.uuid[:]...)
					out = out.u32(uint32(i + 1))
				}
			}
			if status == 1 {
				out = remoteError(virErrNoDomain, "Domain not found: no domain with matching uuid")
			}
		case procAuthList:
			out = out.u32(1).u32(0) // [REMOTE_AUTH_NONE]
		case procConnectOpen, procConnectClose:
		case procConnectListAllDomains:
			out = out.u32(uint32(len(f.domains)))
			for i, d := range f.domains {
				out = out.str(d.name)
				out = append(out, d.uuid[:]...)
				out = out.u32(uint32(i + 1))
			}
			out = out.u32(uint32(len(f.domains)))
		case procConnectGetAllDomStats:
			out = out.u32(uint32(len(f.domains)))
			for i, d := range f.domains {
				out = out.str(d.name)
				out = append(out, d.uuid[:]...)
				out = out.u32(uint32(i + 1))
				out = out.u32(uint32(len(d.stats)))
				for _, p := range d.stats {
					out = out.str(p.field)
					if p.s != "" {
						out = out.u32(7).str(p.s) // VIR_TYPED_PARAM_STRING
					} else {
						out = out.u32(4).u32(uint32(p.u >> 32)).u32(uint32(p.u)) // VIR_TYPED_PARAM_ULLONG
					}
				}
			}
		case procConnectGetLibVersion:
			if f.version.Load() == 0 {
				status, out = 1, remoteError(1, "unknown procedure")
				break
			}
			v := f.version.Load()
			out = out.u32(uint32(v >> 32)).u32(uint32(v))
		case procDomainGetXMLDesc:
			l := binary.BigEndian.Uint32(body[0:4])
			name := string(body[4 : 4+l])
			status = 1
			for _, d := range f.domains {
				if d.name == name && d.xml != "" {
					out, status = out.str(d.xml), 0
				}
			}
			if status == 1 {
				out = remoteError(virErrNoDomain, "Domain not found: no domain with matching name '"+name+"'")
			}
		default:
			status = 1
			out = remoteError(1, "unknown procedure")
		}
		var reply xdrBuf
		reply = reply.u32(uint32(28 + len(out))).u32(prog).u32(1).u32(proc &^ (1 << 31)).u32(1).u32(serial).u32(status)
		if _, err := c.Write(append(reply, out...)); err != nil {
			return
		}
	}
}

// remoteError encodes a remote_error: code, domain, an optional message,
// level, then optional and scalar fields the client does not read.
func remoteError(code uint32, msg string) xdrBuf {
	var b xdrBuf
	b = b.u32(code).u32(10).u32(1).str(msg).u32(2)
	return b.u32(0).u32(0).u32(0).u32(0).u32(0).u32(0).u32(0)
}
