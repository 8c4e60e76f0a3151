package discovery

import (
	"errors"
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func loadTestConfig(t *testing.T, name string) (*Config, error) {
	t.Helper()
	return LoadConfig(filepath.Join("testdata", "config", name))
}

func TestLoadConfigGood(t *testing.T) {
	cfg, err := loadTestConfig(t, "good.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := []Disk{
		{Domain: "web01", UUID: "8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b", TargetDevice: "vda", SourceFile: "/srv/vms/web01.img",
			Source: SourceStatic, PID: 4242, Format: "raw", Cache: "none", AIO: "native", Discard: "unmap", GuestFS: "xfs"},
		{Domain: "web02", SourceFile: "/srv/vms/web02.qcow2", Source: SourceStatic, ReadOnly: true},
	}
	if got := cfg.disks(); !reflect.DeepEqual(got, want) {
		t.Errorf("disks:\n got %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct {
		d    Disk
		fs   string
		ok   bool
		excl bool
	}{
		{Disk{Domain: "db7", TargetDevice: "vdb"}, "ext4", true, false},
		{Disk{Domain: "db7", TargetDevice: "vda"}, "", false, false},
		{Disk{Domain: "x", SourceFile: "/srv/vms/win-1.img"}, "ntfs", true, false},
		{Disk{Domain: "test-1", SourceFile: "/srv/a.img"}, "", false, true},
		{Disk{Domain: "x", SourceFile: "/var/lib/libvirt/images/x-seed.iso"}, "", false, true},
	} {
		fs, ok := cfg.guestFS(tc.d)
		if fs != tc.fs || ok != tc.ok {
			t.Errorf("guestFS(%+v) = %q, %v; want %q, %v", tc.d, fs, ok, tc.fs, tc.ok)
		}
		if got := cfg.excluded(tc.d); got != tc.excl {
			t.Errorf("excluded(%+v) = %v, want %v", tc.d, got, tc.excl)
		}
	}
	sockets := cfg.qmpSockets()
	if s, ok := sockets["web01"]; !ok || s != "/run/qemu/web01.qmp" {
		t.Errorf("socket of web01 = %q, %v; want the cleaned path", s, ok)
	}
	if s, ok := sockets["web0"]; ok {
		t.Errorf("socket of web0 = %q: domains match exactly", s)
	}
}

// TestQMPSocketsFirstWins: a configuration not validated (built in
// code) that names a domain twice gets its first socket, as the lookup
// entry by entry gave it.
func TestQMPSocketsFirstWins(t *testing.T) {
	cfg := &Config{QMPMonitors: []QMPMonitor{{"a", "/run/a1.qmp"}, {"b", "/run/b.qmp"}, {"a", "/run/a2.qmp"}}}
	got := cfg.qmpSockets()
	if want := map[string]string{"a": "/run/a1.qmp", "b": "/run/b.qmp"}; !maps.Equal(got, want) {
		t.Errorf("qmpSockets() = %v, want %v", got, want)
	}
}

func TestLoadConfigEmpty(t *testing.T) {
	cfg, err := loadTestConfig(t, "empty.yml")
	if err != nil || cfg == nil || len(cfg.Disks) != 0 {
		t.Fatalf("empty config: %+v, %v", cfg, err)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string // substrings, in order
	}{
		{"unknown-key.yml", []string{
			`line 4: disks[0]: unknown key "guestfs" (known keys: aio, cache, discard, domain, format, guest_fs, pid, read_only, source_file, target_device, uuid)`,
			`line 5: top level: unknown key "guest_fs_override"`,
		}},
		{"invalid-values.yml", []string{
			`line 2: disks[0]: source_file "relative/web01.img" must be an absolute path`,
			`line 2: disks[0]: cache: "sometimes" is not one of none, writeback, writethrough, directsync, unsafe`,
			`line 5: disks[1]: domain is required`,
			`line 5: disks[1]: uuid "not-a-uuid" is not a UUID`,
			`line 5: disks[1]: format: "vmdk" is not one of raw, qcow2`,
			`line 5: disks[1]: pid -3 is negative`,
			`line 9: disks[2]: source_file /srv/a.img is already configured at line 5`,
			`line 9: disks[2]: guest_fs "XFS!" is not a file system type name`,
			`line 13: guest_fs_overrides[0]: needs at least one of`,
			`line 14: guest_fs_overrides[1]: pattern "[a-": syntax error in pattern`,
			`line 16: exclude_domains[0]: pattern "": empty pattern`,
			`line 18: qmp_monitors[0]: domain is required`,
			`line 18: qmp_monitors[0]: socket "run/x.qmp" must be an absolute path`,
			`line 21: qmp_monitors[2]: domain web01 already has a monitor at line 19`,
		}},
		{"wrong-kind.yml", []string{"line 2: disks: want a list", "line 3: exclude_domains: want a list"}},
		{"two-docs.yml", []string{"line 2: only one YAML document is allowed"}},
		{"bad-type.yml", []string{"line 4: cannot unmarshal !!str `twelve` into int"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := loadTestConfig(t, tc.file)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, filepath.Join("testdata", "config", tc.file)) {
				t.Errorf("error does not name the file: %s", msg)
			}
			pos := 0
			for _, w := range tc.want {
				i := strings.Index(msg[pos:], w)
				if i < 0 {
					t.Errorf("error lacks (or misorders) %q:\n%s", w, msg)
					continue
				}
				pos += i + len(w)
			}
		})
	}
	if _, err := loadTestConfig(t, "missing.yml"); err == nil || errors.Is(err, ErrInvalidConfig) {
		t.Errorf("missing file: got %v, want a read error", err)
	}
}
