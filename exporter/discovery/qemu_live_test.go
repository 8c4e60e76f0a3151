package discovery

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run a real qemu-system-x86_64 (TCG, paused with -S, no guest
// code runs) and scan the real /proc. CI installs qemu-system-x86 and
// qemu-utils; a missing binary fails the test.

// imageDir returns a temporary directory that supports O_DIRECT, which
// cache=none needs: tmpfs does not, so fall back to /var/tmp there.
func imageDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	const tmpfsMagic = 0x01021994 // include/uapi/linux/magic.h TMPFS_MAGIC
	if st.Type == tmpfsMagic {
		d, err := os.MkdirTemp("/var/tmp", "fspair-discovery-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (install qemu-system-x86 and qemu-utils): %v", name, err)
	}
	return p
}

// startQEMU starts QEMU with args plus a QMP socket and kills it at the end.
func startQEMU(t *testing.T, dir string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	qmp := filepath.Join(dir, "qmp.sock")
	all := append([]string{"-accel", "tcg", "-nographic", "-S", "-nodefaults",
		"-monitor", "none", "-serial", "none", "-qmp", "unix:" + qmp + ",server=on,wait=off"}, args...)
	cmd := exec.Command(lookPath(t, "qemu-system-x86_64"), all...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(qmp); err == nil {
			return cmd, qmp
		}
		select {
		case err := <-exited:
			t.Fatalf("qemu exited: %v\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu did not create %s in time\n%s", qmp, stderr.String())
		}
	}
}

// qmpClient is the smallest QMP client the test needs (QEMU docs,
// interop/qmp-spec).
type qmpClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialQMP(t *testing.T, sock string) *qmpClient {
	t.Helper()
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &qmpClient{conn: conn, r: bufio.NewReader(conn)}
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.r.ReadBytes('\n'); err != nil { // greeting
		t.Fatal(err)
	}
	c.do(t, "qmp_capabilities", nil)
	return c
}

func (c *qmpClient) do(t *testing.T, cmd string, args any) {
	t.Helper()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	if err := json.NewEncoder(c.conn).Encode(req); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := c.r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("qmp %s: %v", cmd, err)
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct{ Desc string }
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatalf("qmp %s: %v", cmd, err)
		}
		if resp.Error != nil {
			t.Fatalf("qmp %s: %s", cmd, resp.Error.Desc)
		}
		if resp.Return != nil {
			return
		}
		// an event: keep reading
	}
}

func findVM(t *testing.T, pid int) VM {
	t.Helper()
	vms, stats, err := ScanProc("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if vm.PID == pid {
			return vm
		}
	}
	t.Fatalf("QEMU pid %d not found in /proc scan (stats %+v)", pid, stats)
	return VM{}
}

func TestScanProcLiveQEMU(t *testing.T) {
	dir := imageDir(t)
	img := filepath.Join(dir, "t1.img")
	writeSized(t, img, 4<<20)
	cmd, sock := startQEMU(t, dir,
		"-name", "guest=t1,debug-threads=on",
		"-drive", "file="+img+",if=virtio,format=raw,cache=none,aio=native")
	pid := cmd.Process.Pid

	vm := findVM(t, pid)
	// ScanProc notes the -qmp socket without allowing it.
	want := Disk{Domain: "t1", TargetDevice: "virtio0", SourceFile: img, Source: SourceQEMU, PID: pid,
		Format: "raw", Cache: "none", AIO: "native", Discard: "ignore", QMPNote: QMPNoteNotAllowed}
	diffDisks(t, vm.Disks, []Disk{want})
	if len(vm.Monitors) != 1 || vm.Monitors[0] != sock || vm.Libvirt {
		t.Errorf("monitors %q (libvirt %v), want [%s]", vm.Monitors, vm.Libvirt, sock)
	}

	// Allowed, the socket is the disk's.
	allowed, err := New(Options{Proc: true, ProcQMP: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := allowed.Discover(context.Background())
	if err != nil || len(res.Errors) != 0 {
		t.Fatalf("Discover: %v, %v", err, res.Errors)
	}
	for _, d := range res.Disks {
		if d.PID == pid && (len(d.QMP) != 1 || d.QMP[0] != sock || d.QMPNote != "") {
			t.Errorf("with ProcQMP: disk %s QMP %q note %q, want [%s]", d.SourceFile, d.QMP, d.QMPNote, sock)
		}
	}

	// A static entry for the same image, named through a symlink, merges
	// with what the command line says.
	link := filepath.Join(dir, "t1-link.img")
	if err := os.Symlink(img, link); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "discovery.yml")
	if err := os.WriteFile(cfg, []byte("disks:\n  - domain: t1\n    target_device: vda\n    guest_fs: xfs\n    source_file: "+link+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	disc, err := New(Options{Proc: true, ConfigFile: cfg})
	if err != nil {
		t.Fatal(err)
	}
	res, err = disc.Discover(context.Background())
	if err != nil || len(res.Errors) != 0 {
		t.Fatalf("Discover: %v, %v", err, res.Errors)
	}
	merged := want
	merged.Source, merged.TargetDevice, merged.SourceFile, merged.GuestFS = SourceStatic, "vda", link, "xfs"
	var mine []Disk
	for _, d := range res.Disks {
		if d.PID == pid || d.Domain == "t1" {
			// Opened where the QEMU process holds it (Disk.OpenPath).
			if !strings.HasPrefix(d.OpenPath, fmt.Sprintf("/proc/%d/fd/", pid)) || !sameFile(t, d.OpenPath, img) {
				t.Errorf("OpenPath %q: not a descriptor of QEMU (pid %d) open on %s", d.OpenPath, pid, img)
			}
			d.OpenPath = ""
			mine = append(mine, d)
		}
	}
	diffDisks(t, mine, []Disk{merged})

	// Hot-plug a raw image and a qcow2 overlay with a backing file the
	// way a management tool would, through QMP blockdev-add: only the
	// open files tell about them.
	hot := filepath.Join(dir, "hot.raw")
	writeSized(t, hot, 2<<20)
	base := filepath.Join(dir, "base.qcow2")
	overlay := filepath.Join(dir, "overlay.qcow2")
	qemuImg := lookPath(t, "qemu-img")
	for _, args := range [][]string{
		{"create", "-q", "-f", "qcow2", base, "8M"},
		{"create", "-q", "-f", "qcow2", "-b", "base.qcow2", "-F", "qcow2", overlay},
	} {
		if out, err := exec.Command(qemuImg, args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v\n%s", args, err, out)
		}
	}
	q := dialQMP(t, sock)
	q.do(t, "blockdev-add", map[string]any{
		"driver": "raw", "node-name": "hot0",
		"file": map[string]any{"driver": "file", "filename": hot, "cache": map[string]any{"direct": true}},
	})
	q.do(t, "blockdev-add", map[string]any{
		"driver": "qcow2", "node-name": "ovl0",
		"file": map[string]any{"driver": "file", "filename": overlay},
	})

	vm = findVM(t, pid)
	hotDisk := Disk{Domain: "t1", SourceFile: hot, Source: SourceQEMU, PID: pid, Cache: CacheDirect, QMPNote: QMPNoteNotAllowed}
	ovlDisk := Disk{Domain: "t1", SourceFile: overlay, Source: SourceQEMU, PID: pid, Format: "qcow2", QMPNote: QMPNoteNotAllowed}
	if len(vm.Disks) != 3 {
		t.Fatalf("after hot-plug got %d disks, want 3 (base.qcow2 is a backing file): %+v", len(vm.Disks), vm.Disks)
	}
	got := map[string]Disk{}
	for _, d := range vm.Disks[1:] {
		got[d.SourceFile] = d
	}
	diffDisks(t, []Disk{vm.Disks[0], got[hot], got[overlay]}, []Disk{want, hotDisk, ovlDisk})
}

// sameFile reports whether two paths reach the same file.
func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}
