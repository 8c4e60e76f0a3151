package discovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func readXML(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "libvirt", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func web01Disks(pid int) []Disk {
	b := Disk{Domain: "web01", UUID: "8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b", Source: SourceLibvirt, PID: pid}
	vda, vdb, vde := b, b, b
	vda.TargetDevice, vda.SourceFile, vda.Format, vda.Cache, vda.AIO, vda.Discard, vda.GuestFS =
		"vda", "/var/lib/libvirt/images/web01.qcow2", "qcow2", "none", "native", "unmap", "xfs"
	// cache='default' is no setting; discard='on' is unmap; guest_fs by source.
	vdb.TargetDevice, vdb.SourceFile, vdb.Format, vdb.AIO, vdb.Discard, vdb.GuestFS =
		"vdb", "/srv/data/web01-data.raw", "raw", "io_uring", "unmap", "ext4"
	// No device attribute means device='disk'.
	vde.TargetDevice, vde.SourceFile, vde.Format, vde.ReadOnly = "vde", "/srv/data/shared-ro.raw", "raw", true
	return []Disk{vda, vdb, vde}
}

func TestParseDomainXML(t *testing.T) {
	disks, err := ParseDomainXML([]byte(readXML(t, "web01.xml")))
	if err == nil || !strings.Contains(err.Error(), `guest_fs "Not Valid"`) {
		t.Errorf("want an error about the invalid metadata, got %v", err)
	}
	diffDisks(t, disks, web01Disks(0))
}

func TestParseDomainXMLHostile(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":      "",
		"not xml":    "\x00\x01garbage",
		"truncated":  readXML(t, "web01.xml")[:500],
		"wrong root": `<network><name>x</name></network>`,
		"deep":       "<domain>" + strings.Repeat("<a>", 20000) + strings.Repeat("</a>", 20000) + "</domain>",
		"huge":       "<domain><name>" + strings.Repeat("x", maxDomainXML) + "</name></domain>",
		"entity":     `<!DOCTYPE d [<!ENTITY x "/etc/shadow">]><domain><devices><disk type='file'><source file='&x;'/></disk></devices></domain>`,
	} {
		disks, err := ParseDomainXML([]byte(doc))
		if name == "deep" {
			// Deep but well-formed: parses, no disks.
			if len(disks) != 0 {
				t.Errorf("%s: got disks %+v", name, disks)
			}
			continue
		}
		if err == nil || len(disks) != 0 {
			t.Errorf("%s: got %+v, %v; want an error and no disks", name, disks, err)
		}
	}
}

func TestLibvirtSourceFake(t *testing.T) {
	f := startFakeLibvirtd(t,
		fakeDomain{name: "web01", xml: readXML(t, "web01.xml")},
		fakeDomain{name: "gone"}, // shut down between listing and XML
		fakeDomain{name: "db01", xml: readXML(t, "db01.xml")},
	)
	pidDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pidDir, "web01.pid"), []byte("4242"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newLibvirtSource(f.socket, "", pidDir, 5*time.Second)
	defer s.close()
	disks, warn, err := s.discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if warn == nil || !strings.Contains(warn.Error(), "Not Valid") {
		t.Errorf("warning about web01's metadata missing: %v", warn)
	}
	want := append(web01Disks(4242), Disk{Domain: "db01", UUID: "0b5d1c64-2f8e-4a1b-9c3d-5e6f7a8b9c0d",
		TargetDevice: "sda", SourceFile: "/var/lib/libvirt/images/db01.qcow2", Source: SourceLibvirt,
		Format: "qcow2", Cache: "writethrough"})
	diffDisks(t, disks, want)

	// The connection is reused.
	if _, _, err := s.discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.accepts.Load(); n != 1 {
		t.Errorf("%d connections for two discoveries, want 1", n)
	}
}

// TestLibvirtSourceHung checks that a libvirtd that stops answering cannot
// stall discovery beyond the timeout, during a call or while connecting,
// and that discovery reconnects once it answers again.
func TestLibvirtSourceHung(t *testing.T) {
	f := startFakeLibvirtd(t, fakeDomain{name: "db01", xml: readXML(t, "db01.xml")})
	const timeout = 300 * time.Millisecond
	s := newLibvirtSource(f.socket, "", t.TempDir(), timeout)
	defer s.close()
	if _, _, err := s.discover(context.Background()); err != nil {
		t.Fatal(err)
	}

	f.hang.Store(true)
	for _, phase := range []string{"established connection", "new connection"} {
		start := time.Now()
		_, _, err := s.discover(context.Background())
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
			t.Errorf("%s: got %v, want a timeout error", phase, err)
		}
		if took > timeout+time.Second {
			t.Errorf("%s: discovery took %s with a %s timeout", phase, took, timeout)
		}
	}

	// The caller's context bounds the query too, whatever the per-call
	// deadline.
	slow := newLibvirtSource(f.socket, "", t.TempDir(), time.Minute)
	defer slow.close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if _, _, err := slow.discover(ctx); err == nil || time.Since(start) > timeout+time.Second {
		t.Errorf("context deadline: got %v after %s", err, time.Since(start))
	}

	f.hang.Store(false)
	disks, _, err := s.discover(context.Background())
	if err != nil || len(disks) != 1 {
		t.Fatalf("after libvirtd recovered: %+v, %v", disks, err)
	}
	if n := f.accepts.Load(); n != 4 {
		t.Errorf("%d connections, want 4 (initial, retry while hung, the slow client, reconnect)", n)
	}
}

func TestLibvirtSourceNoDaemon(t *testing.T) {
	s := newLibvirtSource(filepath.Join(t.TempDir(), "no-such-socket"), "", "", time.Second)
	_, _, err := s.discover(context.Background())
	if err == nil || !strings.Contains(err.Error(), "connect to libvirt at") {
		t.Errorf("got %v, want a connect error", err)
	}
}

func TestReadPIDRejectsPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok.pid"), []byte("77\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newLibvirtSource("", "", dir, time.Second)
	if got := s.readPID("ok"); got != 77 {
		t.Errorf("readPID(ok) = %d", got)
	}
	for _, name := range []string{"../ok", "..", "", "a/b", "missing"} {
		if got := s.readPID(name); got != 0 {
			t.Errorf("readPID(%q) = %d, want 0", name, got)
		}
	}
}

// TestLibvirtBlockStats: the block statistics come over the discovery
// connection (one connection for both), decoded as go-libvirt decodes
// them, and a hung libvirtd bounds the call like discovery's.
func TestLibvirtBlockStats(t *testing.T) {
	f := startFakeLibvirtd(t, fakeDomain{name: "db01", uuid: [16]byte{1, 2, 3}, xml: readXML(t, "db01.xml"), stats: []fakeParam{
		{field: "block.count", u: 1}, {field: "block.0.name", s: "vda"}, {field: "block.0.path", s: "/img/db01.qcow2"},
		{field: "block.0.wr.reqs", u: 1<<40 + 7}, {field: "block.0.fl.times", u: 19865032883},
	}})
	const timeout = 300 * time.Millisecond
	d, err := New(Options{Libvirt: true, LibvirtSocket: f.socket, LibvirtPIDDir: t.TempDir(), LibvirtTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, err := d.LibvirtBlockStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Dom.Name != "db01" || len(recs[0].Params) != 5 {
		t.Fatalf("records %+v", recs)
	}
	got := map[string]any{}
	for _, p := range recs[0].Params {
		got[p.Field] = p.Value.I
	}
	if got["block.0.name"] != "vda" || got["block.0.wr.reqs"] != uint64(1<<40+7) || got["block.0.fl.times"] != uint64(19865032883) {
		t.Errorf("params %v", got)
	}
	if n := f.accepts.Load(); n != 1 {
		t.Errorf("%d connections for discovery and statistics, want 1", n)
	}
	// A libvirtd that does not answer virConnectGetLibVersion: unknown,
	// the statistics still read, the connection kept.
	if v := d.LibvirtVersion(); v != 0 {
		t.Errorf("version %d from a libvirtd that refused it", v)
	}
	f.version.Store(9_000_000)
	if _, err := d.LibvirtBlockStats(context.Background()); err != nil || d.LibvirtVersion() != 9_000_000 {
		t.Errorf("version %d (%v), want 9000000", d.LibvirtVersion(), err)
	}
	if n := f.accepts.Load(); n != 1 {
		t.Errorf("%d connections after the version call, want 1", n)
	}

	f.hang.Store(true)
	start := time.Now()
	if _, err := d.LibvirtBlockStats(context.Background()); err == nil || time.Since(start) > timeout+time.Second {
		t.Errorf("hung libvirtd: %v after %s", err, time.Since(start))
	}

	off, err := New(Options{Proc: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.LibvirtBlockStats(context.Background()); !errors.Is(err, ErrNoLibvirt) {
		t.Errorf("without the libvirt source: %v", err)
	}
}

// TestLibvirtMonitorCommand: the pass-through goes over its own
// connection (the read-write socket), to the domain looked up by UUID, and
// returns QEMU's reply as libvirt gives it; off unless its socket is set;
// an unknown domain is an error.
func TestLibvirtMonitorCommand(t *testing.T) {
	ro := startFakeLibvirtd(t, fakeDomain{name: "db01", uuid: [16]byte{1, 2, 3}})
	rw := startFakeLibvirtd(t, fakeDomain{name: "db01", uuid: [16]byte{1, 2, 3}})
	rw.monitorReply = `{"return":{},"id":"libvirt-12"}`
	d, err := New(Options{Libvirt: true, LibvirtSocket: ro.socket, LibvirtMonitorSocket: rw.socket, LibvirtPIDDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const cmd = `{"execute":"query-blockstats"}`
	out, err := d.LibvirtMonitorCommand(context.Background(), "01020300-0000-0000-0000-000000000000", cmd)
	if err != nil || out != rw.monitorReply {
		t.Fatalf("reply %q, %v; want %q", out, err, rw.monitorReply)
	}
	rw.mu.Lock()
	got := slices.Clone(rw.monitorCmds)
	rw.mu.Unlock()
	if len(got) != 1 || got[0] != "db01 "+cmd {
		t.Errorf("commands %q, want [db01 %s]", got, cmd)
	}
	if ro.calls.Load() != 0 {
		t.Errorf("%d calls on the read-only socket, want none", ro.calls.Load())
	}
	if _, err := d.LibvirtMonitorCommand(context.Background(), "09090900-0000-0000-0000-000000000000", cmd); err == nil {
		t.Error("no error for an unknown domain")
	}
	if _, err := d.LibvirtMonitorCommand(context.Background(), "not-a-uuid", cmd); err == nil {
		t.Error("no error for a malformed uuid")
	}
	off, err := New(Options{Libvirt: true, LibvirtSocket: ro.socket, LibvirtPIDDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if _, err := off.LibvirtMonitorCommand(context.Background(), "01020300-0000-0000-0000-000000000000", cmd); !errors.Is(err, ErrNoLibvirtMonitor) {
		t.Errorf("without the monitor socket: %v", err)
	}
}
