package discovery

import (
	"context"
	"strings"
	"testing"
)

// Strings that discovery reads from QEMU command lines and libvirt domain
// XML become label values of every per-disk series. Neither source is the
// guest, but a QEMU command line holds whatever bytes its starter put
// there (client_golang panics in MustNewConstMetric on a label value that
// is not valid UTF-8) and libvirt XML may be arbitrarily long. Discover
// bounds them; these are the exact results.
func TestDiscoverBoundsLabels(t *testing.T) {
	long := "/" + strings.Repeat("d/", 2100) + "x.raw" // 4206 bytes: longer than PATH_MAX
	for _, tc := range []struct {
		name    string
		source  string
		disks   func(t *testing.T) []Disk
		want    []Disk
		wantErr string
	}{{
		name:   "qemu-invalid-utf8-name",
		source: SourceQEMU,
		disks:  qemuDisks("-name", "guest=vm\xff\xfe,debug-threads=on", "-drive", "file=/img/a.raw,if=virtio,aio=bogus\xff"),
		want: []Disk{{Domain: "vm\ufffd", TargetDevice: "virtio0", SourceFile: "/img/a.raw", Source: SourceQEMU,
			Cache: "writeback", Discard: "ignore"}},
	}, {
		name:   "qemu-long-name",
		source: SourceQEMU,
		disks:  qemuDisks("-name", "guest="+strings.Repeat("é", 200), "-drive", "file=/img/a.raw,if=virtio"),
		// 127 two-byte runes fit in 255 bytes; the name is not cut
		// inside a rune.
		want: []Disk{{Domain: strings.Repeat("é", 127), TargetDevice: "virtio0", SourceFile: "/img/a.raw", Source: SourceQEMU,
			Cache: "writeback", AIO: "threads", Discard: "ignore"}},
	}, {
		name:    "qemu-invalid-utf8-path",
		source:  SourceQEMU,
		disks:   qemuDisks("-name", "guest=vm", "-drive", "file=/img/\xff.raw,if=virtio", "-drive", "file=/img/b.raw,if=virtio"),
		want:    []Disk{{Domain: "vm", TargetDevice: "virtio1", SourceFile: "/img/b.raw", Source: SourceQEMU, Cache: "writeback", AIO: "threads", Discard: "ignore"}},
		wantErr: `qemu: disk virtio0 of vm: image path "/img/\xff.raw" cannot be a label value (not valid UTF-8 or longer than 4095 bytes)`,
	}, {
		name:    "qemu-path-too-long",
		source:  SourceQEMU,
		disks:   qemuDisks("-name", "guest=vm", "-drive", "file="+long+",if=virtio"),
		wantErr: `cannot be a label value`,
	}, {
		name:   "libvirt-junk-attributes",
		source: SourceLibvirt,
		disks: func(t *testing.T) []Disk {
			xml := `<domain><name>` + strings.Repeat("n", 300) + `</name><devices><disk type='file' device='disk'>` +
				`<driver name='qemu' type='raw' cache='none&#10;"x"' io='` + strings.Repeat("a", 5000) + `'/>` +
				`<source file='/img/c.raw'/><target dev='` + strings.Repeat("v", 1000) + `'/></disk></devices></domain>`
			disks, err := ParseDomainXML([]byte(xml))
			if err != nil {
				t.Fatal(err)
			}
			return disks
		},
		want: []Disk{{Domain: strings.Repeat("n", 255), TargetDevice: strings.Repeat("v", 255), SourceFile: "/img/c.raw",
			Source: SourceLibvirt, Format: "raw"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(Options{Proc: true, ProcRoot: "/nonexistent", StaleTimeout: -1})
			if err != nil {
				t.Fatal(err)
			}
			disks := tc.disks(t)
			d.sources = map[string]*sourceState{tc.source: {}}
			d.runSource = func(context.Context, string) sourceResult {
				f := make([]found, len(disks))
				for i := range disks {
					f[i].Disk = disks[i]
				}
				return sourceResult{disks: f}
			}
			res, err := d.Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			diffDisks(t, res.Disks, tc.want)
			for _, disk := range res.Disks {
				checkLabelValues(t, disk)
			}
			got := ""
			if err := res.Errors[tc.source]; err != nil {
				got = err.Error()
			}
			if tc.wantErr == "" && got != "" || !strings.Contains(got, tc.wantErr) {
				t.Errorf("error %q, want %q", got, tc.wantErr)
			}
		})
	}
}

func qemuDisks(args ...string) func(t *testing.T) []Disk {
	return func(t *testing.T) []Disk {
		vm, err := ParseQEMUArgs(append([]string{"qemu-system-x86_64"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		return vm.Disks
	}
}
