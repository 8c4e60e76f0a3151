package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/fspair/fspair/exporter/discovery"
	"github.com/fspair/fspair/exporter/inventory"
)

func TestField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"web01", "web01"},
		{"/srv/vms/my disk.img", "/srv/vms/my disk.img"}, // an ASCII space is printable
		{"vm-é-ü", "vm-é-ü"},
		{"", ""},
		{"evil\nvm", `"evil\nvm"`},
		{"tab\tvm", `"tab\tvm"`},
		{"\x1b[2Jvm", `"\x1b[2Jvm"`},
		{"nbsp\u00a0vm", `"nbsp\u00a0vm"`},
		{"rtl\u202evm", `"rtl\u202evm"`},
		{"bad\xffutf8", `"bad\xffutf8"`},
		{`"quoted"`, `"\"quoted\""`},
	} {
		if got := field(tc.in); got != tc.want {
			t.Errorf("field(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestCheckTables: the tables --check prints keep one row per disk and per
// image problem whatever the names hold, and give each problem's reason.
func TestCheckTables(t *testing.T) {
	disk := func(domain, file string) discovery.Disk {
		return discovery.Disk{Domain: domain, TargetDevice: "vda", SourceFile: file, Source: discovery.SourceStatic}
	}
	var out strings.Builder
	writeDisks(&out, []inventory.Disk{
		{Disk: disk("plain", "/srv/plain.img"), ImageFormat: "raw"},
		{Disk: disk("evil\nvm", "/srv/new\nline.img"), ImageFormat: "qcow2"},
		{Disk: disk("tab\tvm", "/srv/tab.img"), ImageFormat: "raw"},
	})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("disk table of %d lines, want a header and 3 rows:\n%s", len(lines), out.String())
	}
	for i, want := range []string{"plain ", `"evil\nvm"`, `"tab\tvm"`} {
		if !strings.HasPrefix(lines[i+1], want) {
			t.Errorf("row %d %q does not start with %s", i+1, lines[i+1], want)
		}
	}
	if !strings.HasSuffix(lines[2], `"/srv/new\nline.img"`) || !strings.HasSuffix(lines[1], " /srv/plain.img") {
		t.Errorf("files not printed as wanted:\n%s", out.String())
	}
	// Every row's columns line up with the header's: no tab from a name
	// made a cell of its own.
	col := strings.Index(lines[0], "FORMAT")
	for _, l := range lines[1:] {
		if f := strings.Fields(l[col:])[0]; f != "raw" && f != "qcow2" {
			t.Errorf("row %q has %q under FORMAT", l, f)
		}
	}

	out.Reset()
	writeImageProblems(&out, []inventory.ImageProblem{
		{Disk: disk("pipe\x1bvm", "/srv/pipe.img"), Err: errors.New("/srv/pipe.img: a named pipe, not a regular file")},
		{Disk: disk("gone", "/srv/gone\n.img"), Err: errors.New("stat image /srv/gone\n.img: no such file or directory")},
	})
	lines = strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "REASON") {
		t.Fatalf("problem table of %d lines, want a caption, a header and 2 rows:\n%s", len(lines), out.String())
	}
	if !strings.HasPrefix(lines[2], `"pipe\x1bvm"`) || !strings.HasSuffix(lines[2], "a named pipe, not a regular file") {
		t.Errorf("row %q", lines[2])
	}
	if !strings.HasSuffix(lines[3], `"stat image /srv/gone\n.img: no such file or directory"`) {
		t.Errorf("row %q", lines[3])
	}
}
