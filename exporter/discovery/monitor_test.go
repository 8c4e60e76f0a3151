package discovery

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseQEMUArgsMonitors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    string // space separated, after argv[0]
		want    []string
		libvirt bool
	}{
		{"qmp legacy flags", "-qmp unix:/run/a.qmp,server,nowait", []string{"/run/a.qmp"}, false},
		{"qmp server=on", "-qmp unix:/run/a.qmp,server=on,wait=off", []string{"/run/a.qmp"}, false},
		{"qmp-pretty", "-qmp-pretty unix:/run/p.qmp,server=on", []string{"/run/p.qmp"}, false},
		{"qmp client socket", "-qmp unix:/run/b.qmp", nil, false},
		{"qmp tcp", "-qmp tcp:127.0.0.1:4444,server=on,wait=off", nil, false},
		{"qmp stdio", "-qmp stdio", nil, false},
		{"chardev and mon", "-chardev socket,id=m1,path=/run/c.sock,server=on,wait=off -mon chardev=m1,mode=control",
			[]string{"/run/c.sock"}, false},
		{"mon before chardev, relative path", "-mon chardev=m2,mode=control -chardev socket,id=m2,path=rel.sock,server=on",
			[]string{"rel.sock"}, false},
		{"readline monitor", "-chardev socket,id=h,path=/run/h.sock,server=on -mon chardev=h", nil, false},
		{"mon of a client chardev", "-chardev socket,id=c,path=/run/c.sock -mon chardev=c,mode=control", nil, false},
		{"mon of an unknown chardev", "-mon chardev=nope,mode=control", nil, false},
		{"order kept", "-qmp unix:/run/1.qmp,server=on -chardev socket,id=x,path=/run/2.qmp,server=on -mon chardev=x,mode=control -qmp unix:/run/3.qmp,server=on",
			[]string{"/run/1.qmp", "/run/2.qmp", "/run/3.qmp"}, false},
		{"libvirt 9 fd monitor", "-chardev socket,id=charmonitor,fd=32,server=on,wait=off -mon chardev=charmonitor,id=monitor,mode=control",
			nil, true},
		{"libvirt path monitor beside another", "-chardev socket,id=charmonitor,path=/var/lib/libvirt/qemu/domain-7-db01/monitor.sock,server=on -mon chardev=charmonitor,mode=control -qmp unix:/run/mine.qmp,server=on",
			[]string{"/run/mine.qmp"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm, err := ParseQEMUArgs(append([]string{"qemu-system-x86_64"}, strings.Fields(tc.args)...))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(vm.Monitors, tc.want) || vm.Libvirt != tc.libvirt {
				t.Errorf("monitors %q libvirt %v, want %q %v", vm.Monitors, vm.Libvirt, tc.want, tc.libvirt)
			}
		})
	}
	vm := mustParse(t, readArgs(t, "libvirt-drive.args"))
	if !vm.Libvirt || len(vm.Monitors) != 0 {
		t.Errorf("libvirt-drive.args: libvirt %v monitors %q, want libvirt's own and no usable monitor", vm.Libvirt, vm.Monitors)
	}
}

func TestMonitorsFor(t *testing.T) {
	disk := Disk{Domain: "vm", SourceFile: "/img/a"}
	for _, tc := range []struct {
		name     string
		vm       VM
		allowed  bool
		wantQMP  []string
		wantNote string
	}{
		{"none", VM{}, true, nil, ""},
		{"not allowed", VM{Monitors: []string{"/run/a"}}, false, nil, QMPNoteNotAllowed},
		{"allowed, relative resolved", VM{Monitors: []string{"/run/a", "b.sock"}}, true, []string{"/run/a", "/cwd/b.sock"}, ""},
		{"libvirt", VM{Monitors: []string{"/run/a"}, Libvirt: true}, true, nil, QMPNoteLibvirt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := tc.vm
			vm.Disks = []Disk{disk}
			monitorsFor(&vm, tc.allowed, "/cwd")
			if d := vm.Disks[0]; !reflect.DeepEqual(d.QMP, tc.wantQMP) || d.QMPNote != tc.wantNote {
				t.Errorf("QMP %q note %q, want %q %q", d.QMP, d.QMPNote, tc.wantQMP, tc.wantNote)
			}
		})
	}
}

// TestMergeQMP: an operator-named socket wins over the command line's, but
// never for a libvirt domain or libvirt's QEMU; a disk libvirt reports has
// no QMP socket whatever other sources say.
func TestMergeQMP(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "d.yml")
	if err := os.WriteFile(cfgFile, []byte("qmp_monitors:\n  - domain: plain\n    socket: /run/named.qmp\n  - domain: lv\n    socket: /run/lv.qmp\n  - domain: lvproc\n    socket: /run/lvproc.qmp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	d := &Discoverer{cfg: cfg}
	id := func(n uint64) fileID { return fileID{1, n} }
	got := d.merge([][]found{
		{{Disk: Disk{Domain: "lv", SourceFile: "/img/lv", Source: SourceLibvirt, PID: 10}, id: id(1), hasID: true}},
		nil,
		{
			{Disk: Disk{Domain: "lv", SourceFile: "/img/lv", Source: SourceQEMU, PID: 10, QMPNote: QMPNoteLibvirt}, id: id(1), hasID: true},
			{Disk: Disk{Domain: "plain", SourceFile: "/img/plain", Source: SourceQEMU, PID: 11, QMP: []string{"/run/cmdline.qmp"}}, id: id(2), hasID: true},
			{Disk: Disk{Domain: "other", SourceFile: "/img/other", Source: SourceQEMU, PID: 12, QMP: []string{"/run/other.qmp"}}, id: id(3), hasID: true},
			{Disk: Disk{Domain: "lvproc", SourceFile: "/img/lvproc", Source: SourceQEMU, PID: 13, QMPNote: QMPNoteLibvirt}, id: id(4), hasID: true},
		},
	})
	want := map[string]struct {
		qmp  []string
		note string
	}{
		"lv":     {nil, QMPNoteLibvirt},
		"plain":  {[]string{"/run/named.qmp"}, ""},
		"other":  {[]string{"/run/other.qmp"}, ""},
		"lvproc": {nil, QMPNoteLibvirt},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d disks, want %d: %+v", len(got), len(want), got)
	}
	for _, g := range got {
		w := want[g.Domain]
		if !reflect.DeepEqual(g.QMP, w.qmp) || g.QMPNote != w.note {
			t.Errorf("%s: QMP %q note %q, want %q %q", g.Domain, g.QMP, g.QMPNote, w.qmp, w.note)
		}
	}
}
