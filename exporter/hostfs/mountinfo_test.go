package hostfs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func loadFixture(t *testing.T, name string) []Mount {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "mountinfo", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mounts, err := ParseMountinfo(f)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return mounts
}

func TestParseMountinfo(t *testing.T) {
	mounts := loadFixture(t, "kvmhost.txt")
	if len(mounts) != 14 {
		t.Fatalf("got %d mounts, want 14", len(mounts))
	}
	want := Mount{
		ID: 31, ParentID: 28, Major: 0, Minor: 40,
		Root: "/@vms", MountPoint: "/srv/vms", Options: "rw,noatime",
		Optional: []string{"shared:21"}, FSType: "btrfs", Source: "/dev/sdb",
		SuperOptions: "rw,space_cache=v2,subvolid=256,subvol=/@vms",
	}
	if got := mounts[7]; !reflect.DeepEqual(got, want) {
		t.Errorf("btrfs line:\n got %+v\nwant %+v", got, want)
	}
	if got := mounts[9].MountPoint; got != "/mnt/bind with space" {
		t.Errorf("\\040 not decoded: %q", got)
	}
	if got := mounts[13].MountPoint; got != "/mnt/tab\tand\\backslash" {
		t.Errorf("\\011 or \\134 not decoded: %q", got)
	}
	if got := mounts[13].Optional; got != nil {
		t.Errorf("no optional fields expected, got %q", got)
	}
	if got := mounts[12]; got.FSType != "nfs4" || got.Source != "server:/export" || got.Major != 0 || got.Minor != 51 {
		t.Errorf("nfs line parsed as %+v", got)
	}
}

func TestParseMountinfoMalformed(t *testing.T) {
	for _, name := range []string{"malformed-short.txt", "malformed-nosep.txt", "malformed-dev.txt"} {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "mountinfo", name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = ParseMountinfo(f)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got error %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), "line 1") {
				t.Errorf("error %q does not name the line", err)
			}
		})
	}
}

func TestParseMountinfoLineTooLong(t *testing.T) {
	long := "1 1 0:1 / /" + strings.Repeat("a", maxLineBytes) + " rw - tmpfs none rw\n"
	_, err := ParseMountinfo(strings.NewReader(long))
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("got %v, want ErrMalformed for an over-long line", err)
	}
}

func TestParseMountinfoNoTrailingNewlineAndBlank(t *testing.T) {
	in := "\n1 0 0:1 / / rw - rootfs rootfs rw\n\n2 1 8:1 / /boot rw - ext4 /dev/sda1 rw"
	mounts, err := ParseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 2 || mounts[1].MountPoint != "/boot" || mounts[1].SuperOptions != "rw" {
		t.Fatalf("got %+v", mounts)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:    "/a b",
		`/a\134`:     `/a\`,
		`\012`:       "\n",
		`/x\04`:      `/x\04`,  // too short: kept
		`/x\400`:     `/x\400`, // does not fit a byte: kept
		`/x\9aa`:     `/x\9aa`,
		`/plain`:     "/plain",
		`\134\040\0`: `\ \0`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestParseRealMountinfo parses this machine's own mount table: whatever the
// kernel writes must be accepted, and "/" must be in it.
func TestParseRealMountinfo(t *testing.T) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mounts, err := ParseMountinfo(f)
	if err != nil {
		t.Fatal(err)
	}
	tab := &Table{Mounts: mounts}
	m, ok := tab.Find("/")
	if !ok || m.MountPoint != "/" {
		t.Fatalf("no root mount in /proc/self/mountinfo: %+v", m)
	}
}
