package discovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestDiscoverMerge runs all three sources over the same image files: the
// fixture proc tree, a fake libvirtd describing the fixture's web01 and a
// static configuration.
func TestDiscoverMerge(t *testing.T) {
	procRoot, img := buildProc(t)
	fixtureImages(t, img)
	writeSized(t, filepath.Join(img, "static-only.raw"), 1<<20)

	xml := strings.ReplaceAll(`<domain type='kvm' id='3'>
  <name>web01</name>
  <uuid>8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b</uuid>
  <metadata><x:disks xmlns:x="https://fspair.dev/xmlns/libvirt/1"><x:disk target="vda" guest_fs="xfs"/></x:disks></metadata>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none'/>
      <source file='@TMP@/web01.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='@TMP@/hot.raw'/>
      <target dev='vdb' bus='virtio'/>
    </disk>
  </devices>
</domain>`, "@TMP@", img)
	lv := startFakeLibvirtd(t, fakeDomain{name: "web01", xml: xml})
	pidDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pidDir, "web01.pid"), []byte("4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "discovery.yml")
	cfg := strings.ReplaceAll(`disks:
  - domain: vm-two
    target_device: vdz
    source_file: @TMP@/vm2/disk.raw
    guest_fs: ext4
  - domain: bare
    source_file: @TMP@/static-only.raw
  - domain: bare
    source_file: @TMP@/not-there.raw
exclude_source_files: ["@TMP@/hot-ro.*"]
guest_fs_overrides:
  - domain: web01
    target_device: vdb
    guest_fs: btrfs
`, "@TMP@", img)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	d, err := New(Options{
		Libvirt: true, LibvirtSocket: lv.socket, LibvirtPIDDir: pidDir,
		Proc: true, ProcRoot: procRoot,
		ConfigFile: cfgFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	res, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	uuid := "8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b"
	// Disks of a known process are opened through its descriptors.
	fd := func(pid, n int) string { return filepath.Join(procRoot, strconv.Itoa(pid), "fd", strconv.Itoa(n)) }
	want := []Disk{
		{Domain: "bare", SourceFile: filepath.Join(img, "static-only.raw"), Source: SourceStatic},
		// Static names the VM differently; same file, so the same disk:
		// the static entry's fields win, QEMU fills the rest.
		{Domain: "vm-two", TargetDevice: "vdz", SourceFile: filepath.Join(img, "vm2", "disk.raw"), Source: SourceStatic,
			PID: 4243, Format: "raw", Cache: "writethrough", AIO: "threads", Discard: "ignore", GuestFS: "ext4",
			OpenPath: fd(4243, 7)},
		{Domain: "web01", UUID: uuid, SourceFile: filepath.Join(img, "hotplug.qcow2"), Source: SourceQEMU,
			PID: 4242, Format: "qcow2", Cache: CacheDirect, OpenPath: fd(4242, 12)},
		// libvirt's path, libvirt's metadata; AIO and discard from the
		// command line (the QEMU side named it through a symlink).
		{Domain: "web01", UUID: uuid, TargetDevice: "vda", SourceFile: filepath.Join(img, "web01.qcow2"), Source: SourceLibvirt,
			PID: 4242, Format: "qcow2", Cache: "none", AIO: "native", Discard: "unmap", GuestFS: "xfs", OpenPath: fd(4242, 10)},
		// Found by QEMU only through its open file; libvirt names it.
		{Domain: "web01", UUID: uuid, TargetDevice: "vdb", SourceFile: filepath.Join(img, "hot.raw"), Source: SourceLibvirt,
			PID: 4242, Format: "raw", GuestFS: "btrfs", OpenPath: fd(4242, 14)},
	}
	diffDisks(t, res.Disks, want)
	if len(res.Errors) != 1 || res.Errors[SourceStatic] == nil || !strings.Contains(res.Errors[SourceStatic].Error(), "not-there.raw") {
		t.Errorf("errors = %v, want only the static source's missing file", res.Errors)
	}
	if res.ProcStats.QEMU != 2 || res.ProcStats.Vanished != 1 {
		t.Errorf("proc stats %+v", res.ProcStats)
	}
	if got := d.Sources(); !slices.Equal(got, []string{SourceLibvirt, SourceQEMU, SourceStatic}) {
		t.Errorf("Sources() = %q", got)
	}
	if got := res.SourceDisks; got[SourceLibvirt] != 2 || got[SourceQEMU] != 5 || got[SourceStatic] != 2 {
		t.Errorf("SourceDisks = %v, want libvirt 2, qemu 5, static 2", got)
	}
	for _, s := range []string{SourceLibvirt, SourceQEMU, SourceStatic} {
		if _, ok := res.Durations[s]; !ok {
			t.Errorf("no duration for %s", s)
		}
	}

	// A configuration edit is picked up; a broken one is reported and the
	// last good one kept.
	if err := os.WriteFile(cfgFile, []byte("disks: []\nexclude_domains: [web01]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, _ = d.Discover(context.Background())
	for _, disk := range res.Disks {
		if disk.Domain == "web01" || disk.Source == SourceStatic {
			t.Errorf("after reload still got %+v", disk)
		}
	}
	if err := os.WriteFile(cfgFile, []byte("disks: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, _ = d.Discover(context.Background())
	if err := res.Errors[SourceStatic]; err == nil || !strings.Contains(err.Error(), "keeping the previous configuration") {
		t.Errorf("broken config: error %v", err)
	}
	if len(res.Disks) != 1 || res.Disks[0].Domain != "vm2" {
		t.Errorf("broken config: previous configuration not kept: %+v", res.Disks)
	}
}

// TestDiscoverStuckSource simulates a source blocked in a system call that
// ignores its context (a hung NFS mount): Discover must return in time, use
// the last good result, and not start the source again while it is stuck.
func TestDiscoverStuckSource(t *testing.T) {
	d, err := New(Options{Proc: true, ProcRoot: t.TempDir(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	var block atomic.Bool
	var calls atomic.Int32
	d.runSource = func(ctx context.Context, name string) sourceResult {
		calls.Add(1)
		if block.Load() {
			<-release // deliberately ignores ctx
		}
		return sourceResult{disks: []found{
			{Disk: Disk{Domain: "a", SourceFile: "/img/a", Source: SourceQEMU}},
			// Its process is not in the (empty) proc root: left out
			// of fresh and stale results alike (a source may list a
			// VM whose VMM has just exited).
			{Disk: Disk{Domain: "b", SourceFile: "/img/b", Source: SourceQEMU, PID: 999999}},
		}}
	}
	if res, err := d.Discover(context.Background()); err != nil || len(res.Disks) != 1 || res.Disks[0].Domain != "a" || len(res.Errors) != 0 {
		t.Fatalf("first run: %+v, %v", res, err)
	}

	block.Store(true)
	for i, want := range []string{"no result within", "previous run still in progress"} {
		start := time.Now()
		res, err := d.Discover(context.Background())
		if took := time.Since(start); took > time.Second {
			t.Errorf("run %d took %s with a 200ms timeout", i, took)
		}
		if err != nil {
			t.Fatal(err)
		}
		if e := res.Errors[SourceQEMU]; e == nil || !strings.Contains(e.Error(), want) {
			t.Errorf("run %d: error %v, want %q", i, e, want)
		}
		if !slices.Equal(res.Stale, []string{SourceQEMU}) || len(res.Disks) != 1 || res.Disks[0].Domain != "a" {
			t.Errorf("run %d: stale %v disks %+v: want the last good result", i, res.Stale, res.Disks)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("source started %d times, want 2 (not again while stuck)", n)
	}
}

func TestDiscoverContextCanceled(t *testing.T) {
	d, err := New(Options{Proc: true, ProcRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Discover(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Options{}); !errors.Is(err, ErrNoSource) {
		t.Errorf("no source: %v", err)
	}
	if _, err := New(Options{ConfigFile: filepath.Join("testdata", "config", "unknown-key.yml")}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("invalid config: %v", err)
	}
}

func TestMergeSharedImage(t *testing.T) {
	// One read-only image used by two VMs stays two disks; the libvirt
	// disk merges with the QEMU disk of the same process.
	d := &Discoverer{}
	id := fileID{1, 2}
	lv := found{Disk: Disk{Domain: "a", TargetDevice: "vda", SourceFile: "/img/shared", Source: SourceLibvirt, PID: 10}, id: id, hasID: true}
	q1 := found{Disk: Disk{Domain: "b", TargetDevice: "virtio-disk0", SourceFile: "/img/shared", Source: SourceQEMU, PID: 11, AIO: "native"}, id: id, hasID: true}
	q2 := found{Disk: Disk{Domain: "a", TargetDevice: "virtio-disk0", SourceFile: "/img/shared", Source: SourceQEMU, PID: 10, AIO: "threads", ReadOnly: true}, id: id, hasID: true}
	got := d.merge([][]found{{lv}, {q1, q2}})
	want := []Disk{
		{Domain: "a", TargetDevice: "vda", SourceFile: "/img/shared", Source: SourceLibvirt, PID: 10, AIO: "threads", ReadOnly: true},
		{Domain: "b", TargetDevice: "virtio-disk0", SourceFile: "/img/shared", Source: SourceQEMU, PID: 11, AIO: "native"},
	}
	diffDisks(t, got, want)
}

// TestStillRunning: a disk whose VMM process is gone from /proc or is a
// zombie is left out; a running one, or one whose state cannot be read,
// stays. The command name may hold ") " (it is between parentheses).
func TestStillRunning(t *testing.T) {
	root := t.TempDir()
	stat := map[int]string{
		10: "10 (qemu-system-x86) S 1 10 10 0 -1",
		11: "11 (qemu-system-x86) Z 1 11 11 0 -1",
		12: "12 (odd) Z name) R 1 12 12 0 -1",
		13: "13 (qemu) X 1 13 13 0 -1",
	}
	for pid, line := range stat {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "14"), 0o755); err != nil { // no stat: unknown
		t.Fatal(err)
	}
	d := &Discoverer{opts: Options{ProcRoot: root}}
	var in []found
	for _, pid := range []int{0, 10, 11, 12, 13, 14, 15, 10} {
		in = append(in, found{Disk: Disk{Domain: fmt.Sprintf("vm%d", pid), PID: pid}})
	}
	var got []string
	for _, f := range d.stillRunning(in) {
		got = append(got, f.Domain)
	}
	want := []string{"vm0", "vm10", "vm12", "vm14", "vm10"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("kept %v, want %v", got, want)
	}
	// The input is left as it was (a source's last good result is
	// filtered again next round), and returned itself when every disk
	// stays.
	for i, pid := range []int{0, 10, 11, 12, 13, 14, 15, 10} {
		if in[i].PID != pid {
			t.Fatalf("input disk %d has pid %d after the filter, want %d", i, in[i].PID, pid)
		}
	}
	running := []found{in[0], in[1], in[3], in[5], in[7]}
	if out := d.stillRunning(running); len(out) != len(running) || &out[0] != &running[0] {
		t.Errorf("every disk running: got %d disks in a copy, want the input itself", len(out))
	}
}
