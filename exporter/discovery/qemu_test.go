package discovery

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// readArgs reads a command line fixture, one argument per line.
func readArgs(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "cmdline", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

func mustParse(t *testing.T, args []string) *VM {
	t.Helper()
	vm, err := ParseQEMUArgs(args)
	if err != nil {
		t.Fatalf("ParseQEMUArgs: %v", err)
	}
	return vm
}

func diffDisks(t *testing.T, got, want []Disk) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d disks, want %d:\n got %+v\nwant %+v", len(got), len(want), got, want)
		return
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("disk %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestParseQEMUArgsLibvirtBlockdev(t *testing.T) {
	vm := mustParse(t, readArgs(t, "libvirt-blockdev.args"))
	if vm.Name != "web01" || vm.UUID != "8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b" {
		t.Errorf("name %q uuid %q", vm.Name, vm.UUID)
	}
	base := Disk{Domain: "web01", UUID: "8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b", Source: SourceQEMU}
	d0, d1 := base, base
	d0.TargetDevice, d0.SourceFile, d0.Format, d0.Cache, d0.AIO, d0.Discard =
		"virtio-disk0", "/var/lib/libvirt/images/web01.qcow2", "qcow2", "none", "native", "unmap"
	// Attached to the storage node directly: raw, and no format layer
	// to drop discards.
	d1.TargetDevice, d1.SourceFile, d1.Format, d1.Cache, d1.AIO, d1.Discard =
		"virtio-disk1", "/srv/data/web01-data.raw", "raw", "writeback", "io_uring", "unmap"
	diffDisks(t, vm.Disks, []Disk{d0, d1})

	for _, f := range []string{
		"/usr/share/OVMF/OVMF_CODE_4M.fd",             // firmware, attached with -machine pflash0=
		"/var/lib/libvirt/qemu/nvram/web01_VARS.fd",   // firmware variables, read-write
		"/var/lib/libvirt/images/base/debian12.qcow2", // backing image
		"/var/lib/libvirt/images/seed,web01.iso",      // CD-ROM
		"/var/lib/libvirt/qemu/domain-3-web01/master-key.aes",
		"/var/log/libvirt/qemu/web01-console.log",
	} {
		if !slices.Contains(vm.OtherFiles, f) {
			t.Errorf("OtherFiles lacks %s: %q", f, vm.OtherFiles)
		}
	}
	for _, f := range vm.OtherFiles {
		if f == d0.SourceFile || f == d1.SourceFile {
			t.Errorf("disk image %s also listed in OtherFiles", f)
		}
	}
	wantIgnored := []string{"libvirt-4-format: protocol nbd", "libvirt-5-storage: host device /dev/mapper/vg0-web01--swap"}
	if !reflect.DeepEqual(vm.Ignored, wantIgnored) {
		t.Errorf("Ignored = %q, want %q", vm.Ignored, wantIgnored)
	}
}

func TestParseQEMUArgsLibvirtDrive(t *testing.T) {
	vm := mustParse(t, readArgs(t, "libvirt-drive.args"))
	base := Disk{Domain: "db01", UUID: "0b5d1c64-2f8e-4a1b-9c3d-5e6f7a8b9c0d", Source: SourceQEMU}
	d0, d1, d3 := base, base, base
	d0.TargetDevice, d0.SourceFile, d0.Format, d0.Cache, d0.AIO, d0.Discard =
		"virtio-disk0", "/var/lib/libvirt/images/db01.qcow2", "qcow2", "none", "native", "unmap"
	d1.TargetDevice, d1.SourceFile, d1.Format, d1.Cache, d1.AIO, d1.Discard =
		"scsi0-0-0-1", "/var/lib/libvirt/images/db01-logs.img", "raw", "directsync", "threads", "ignore"
	d3.TargetDevice, d3.SourceFile, d3.Format, d3.Cache, d3.AIO, d3.Discard, d3.ReadOnly =
		"virtio-disk3", "/var/lib/libvirt/images/a,b.img", "raw", "unsafe", "threads", "ignore", true
	diffDisks(t, vm.Disks, []Disk{d0, d1, d3})
	wantIgnored := []string{"drive-virtio-disk2: protocol rbd", "drive-virtio-disk4: host device /dev/sdc"}
	if !reflect.DeepEqual(vm.Ignored, wantIgnored) {
		t.Errorf("Ignored = %q, want %q", vm.Ignored, wantIgnored)
	}
	if !slices.Contains(vm.OtherFiles, "/var/lib/libvirt/qemu/domain-7-db01/monitor.sock") {
		t.Errorf("monitor socket path missing from OtherFiles %q", vm.OtherFiles)
	}
}

func TestParseQEMUArgsPlain(t *testing.T) {
	args := []string{
		"qemu-system-x86_64", "-accel", "tcg", "-nographic", "-S",
		"-name", "guest=t1,,x,debug-threads=on",
		"-kernel", "/boot/vmlinuz", "-initrd", "/boot/initrd.img", "-append", "-v console=ttyS0",
		"-pidfile", "/run/t1.pid", "-D", "/var/log/t1.log", "-serial", "file:/var/log/t1-serial.log",
		"-drive", "file=/img/a.img,if=virtio,format=raw,cache=none,aio=native",
		"-hdb", "/img/d,x.img",
		"-drive", "file=/img/e.img,format=raw,readonly=on,cache=writethrough",
		"-cdrom", "/img/install.iso",
		"-drive", "file=/img/f.qcow2,if=none,id=hd1,format=qcow2,discard=on",
		"-device", "scsi-hd,drive=hd1,id=scsi1,write-cache=off",
		"-drive", "file=/img/g.img,if=none,id=dangling",
		"-drive", "if=pflash,format=raw,file=/usr/share/OVMF/OVMF_CODE.fd,readonly=on",
		"-blockdev", "driver=file,node-name=f0,filename=/img/h,,1.raw,aio=io_uring,cache.direct=on",
		"-blockdev", "raw,node-name=r0,file=f0,discard=unmap",
		"-device", "virtio-blk-pci,drive=r0,id=vblk0,write-cache=off",
		"-blockdev", `{"driver":"qcow2","node-name":"n0","discard":"unmap","file":{"driver":"file","filename":"/img/i.qcow2","aio":"native","cache":{"direct":true}},"backing":{"driver":"raw","file":{"driver":"file","filename":"/img/i-base.raw"}}}`,
		"--device", `{"driver":"virtio-blk-pci","drive":"n0"}`,
		"-blockdev", "driver=qcow2,node-name=n1,file.driver=file,file.filename=/img/j.qcow2,cache.no-flush=on",
		"-device", "virtio-blk-pci,drive=n1,id=vblk1",
		"-blockdev", "driver=throttle,node-name=t0,throttle-group=tg0,file=n2",
		"-blockdev", "driver=raw,node-name=n2,file.driver=file,file.filename=/img/k.raw,file.cache.direct=on",
		"-device", "virtio-blk-pci,drive=t0,id=vblk2",
		"-snapshot",
	}
	vm := mustParse(t, args)
	if vm.Name != "t1,x" {
		t.Errorf("name %q, want %q (\",,\" is an escaped comma)", vm.Name, "t1,x")
	}
	b := Disk{Domain: "t1,x", Source: SourceQEMU, Discard: "ignore", AIO: "threads", Cache: "writeback", ReadOnly: true} // -snapshot
	d := func(target, file, format string, f func(*Disk)) Disk {
		x := b
		x.TargetDevice, x.SourceFile, x.Format = target, file, format
		if f != nil {
			f(&x)
		}
		return x
	}
	want := []Disk{
		d("virtio0", "/img/a.img", "raw", func(x *Disk) { x.Cache, x.AIO = "none", "native" }),
		d("ide0-hd1", "/img/d,x.img", "", nil),
		// The first free IDE slot, as QEMU's drive_new() picks it.
		d("ide0-hd0", "/img/e.img", "raw", func(x *Disk) { x.Cache = "writethrough" }),
		// discard=on on the top node; the inline file child defaults to unmap.
		d("scsi1", "/img/f.qcow2", "qcow2", func(x *Disk) { x.Cache, x.Discard = "writethrough", "unmap" }),
		// f0 is referenced by name: it does not inherit r0's discard=unmap.
		d("vblk0", "/img/h,1.raw", "raw", func(x *Disk) { x.Cache, x.AIO = "directsync", "io_uring" }),
		d("n0", "/img/i.qcow2", "qcow2", func(x *Disk) { x.Cache, x.AIO, x.Discard = "none", "native", "unmap" }),
		d("vblk1", "/img/j.qcow2", "qcow2", func(x *Disk) { x.Cache = "unsafe" }),
		d("vblk2", "/img/k.raw", "raw", func(x *Disk) { x.Cache = "none" }),
	}
	diffDisks(t, vm.Disks, want)
	for _, f := range []string{"/boot/vmlinuz", "/boot/initrd.img", "/run/t1.pid", "/var/log/t1.log",
		"/var/log/t1-serial.log", "/img/install.iso", "/img/g.img", "/usr/share/OVMF/OVMF_CODE.fd", "/img/i-base.raw"} {
		if !slices.Contains(vm.OtherFiles, f) {
			t.Errorf("OtherFiles lacks %s: %q", f, vm.OtherFiles)
		}
	}
}

func TestParseQEMUArgsPositional(t *testing.T) {
	vm := mustParse(t, []string{"qemu-system-x86_64", "-m", "512", "/img/p.img", "-fda", "/img/floppy.img"})
	want := []Disk{
		{TargetDevice: "ide0-hd0", SourceFile: "/img/p.img", Source: SourceQEMU, Cache: "writeback", AIO: "threads", Discard: "ignore"},
		{TargetDevice: "floppy0", SourceFile: "/img/floppy.img", Source: SourceQEMU, Cache: "writeback", AIO: "threads", Discard: "ignore"},
	}
	diffDisks(t, vm.Disks, want)
	// Other machines default to other interfaces.
	vm = mustParse(t, []string{"/usr/bin/qemu-system-aarch64", "-drive", "file=/img/a.img"})
	if len(vm.Disks) != 1 || vm.Disks[0].TargetDevice != "virtio0" {
		t.Errorf("aarch64 default interface: %+v", vm.Disks)
	}
}

func TestParseQEMUArgsNameForms(t *testing.T) {
	for arg, want := range map[string]string{
		"foo":                         "foo",
		"foo,process=qemu-foo":        "foo",
		"guest=bar,debug-threads=on":  "bar",
		"debug-threads=on,guest=baz":  "baz",
		"a,,b":                        "a,b",
		"guest=with space,,and comma": "with space,and comma",
	} {
		vm := mustParse(t, []string{"qemu-kvm", "-name", arg})
		if vm.Name != want {
			t.Errorf("-name %q: got %q, want %q", arg, vm.Name, want)
		}
	}
}

func TestParseQEMUArgsErrors(t *testing.T) {
	if _, err := ParseQEMUArgs(nil); !errors.Is(err, ErrEmptyCommandLine) {
		t.Errorf("nil args: %v", err)
	}
	if _, err := ParseQEMUArgs(make([]string, maxArgs+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too many args: %v", err)
	}
	// A malformed option is reported, the rest still parsed.
	vm, err := ParseQEMUArgs([]string{"qemu-system-x86_64",
		"-blockdev", `{"driver":"file",`,
		"-drive", "file=/img/ok.img,if=virtio,format=raw",
		"-drive", "file=/img/bad.img,cache=sometimes",
		"-blockdev", "driver=file,node-name=x,filename=/a,filename.y=1",
	})
	if err == nil || !strings.Contains(err.Error(), "-blockdev") || !strings.Contains(err.Error(), "invalid cache mode") {
		t.Errorf("want errors naming the bad options, got %v", err)
	}
	if vm == nil || len(vm.Disks) != 1 || vm.Disks[0].SourceFile != "/img/ok.img" {
		t.Errorf("good drive lost: %+v", vm)
	}
}

func TestParseQEMUArgsCycles(t *testing.T) {
	vm, _ := ParseQEMUArgs([]string{"qemu-system-x86_64",
		"-blockdev", `{"driver":"qcow2","node-name":"a","file":"b","backing":"a"}`,
		"-blockdev", `{"driver":"raw","node-name":"b","file":"a"}`,
		"-blockdev", `{"driver":"qcow2","node-name":"c","file":"c","data-file":"c"}`,
		"-device", "virtio-blk-pci,drive=a,id=d0",
		"-device", "virtio-blk-pci,drive=c,id=d1",
		"-device", "virtio-blk-pci,drive=nosuch,id=d2",
	})
	if len(vm.Disks) != 0 {
		t.Errorf("cyclic nodes produced disks: %+v", vm.Disks)
	}
	if len(vm.Ignored) != 3 {
		t.Errorf("want 3 ignored drives, got %q", vm.Ignored)
	}
}

func TestParseQEMUArgsJSONFilename(t *testing.T) {
	vm := mustParse(t, []string{"qemu-system-x86_64",
		"-drive", `if=virtio,file=json:{"driver":"qcow2",,"file":{"driver":"file",,"filename":"/img/j.qcow2"}}`,
		"-drive", `if=virtio,file=nbd:localhost:10809`,
		"-drive", `if=virtio,file=file:/img/colon:name.raw,format=raw`,
		"-drive", `if=virtio,file=/img/dir:with/colon.raw,format=raw`,
	})
	var files []string
	for _, d := range vm.Disks {
		files = append(files, d.TargetDevice+"="+d.SourceFile+"("+d.Format+")")
	}
	want := []string{"virtio0=/img/j.qcow2(qcow2)", "virtio2=/img/colon:name.raw(raw)", "virtio3=/img/dir:with/colon.raw(raw)"}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("got %q, want %q", files, want)
	}
	if !reflect.DeepEqual(vm.Ignored, []string{"virtio1: protocol nbd"}) {
		t.Errorf("Ignored = %q", vm.Ignored)
	}
}

func TestParseOpts(t *testing.T) {
	for _, tc := range []struct {
		in, implied string
		want        []opt
		err         bool
	}{
		{"a=1,b=2", "", []opt{{"a", "1"}, {"b", "2"}}, false},
		{"x,a=1", "driver", []opt{{"driver", "x"}, {"a", "1"}}, false},
		{"readonly,nosnapshot", "", []opt{{"readonly", "on"}, {"snapshot", "off"}}, false},
		{"file=/a,,b,,,c=d", "", []opt{{"file", "/a,b,"}, {"c", "d"}}, false},
		{"a=1,", "", []opt{{"a", "1"}}, false},
		{"a=", "", []opt{{"a", ""}}, false},
		{",a=1", "", nil, true},
		{"=1", "", nil, true},
	} {
		got, err := parseOpts(tc.in, tc.implied)
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseOpts(%q) = %q, %v; want %q, err=%v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
