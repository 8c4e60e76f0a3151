package hostfs

import (
	"reflect"
	"strings"
	"testing"
)

// hostileMountinfo has mount points, types and sources as a user who may
// create directories or FUSE mounts can shape them: invalid UTF-8, escaped
// newlines and quotes, a FUSE subtype of junk, a 4 KiB path. The same text
// is the seed testdata/fuzz/FuzzParseMountinfo/hostile.
var hostileMountinfo = "40 1 8:1 / /srv/vm\xff\xfe rw - ext4 /dev/sda1 rw\n" +
	"41 1 8:2 / /srv/a\\012b\"c rw shared:1 - xfs /dev/sda2 rw\n" +
	"42 1 0:50 / /mnt/f rw - fuse.a\"b\\012 src\\134x rw,user_id=0\n" +
	"43 1 8:3 / /" + strings.Repeat("p", 4096) + " rw - btrfs /dev/sda3 rw\n"

// TestParseMountinfoHostile asserts the exact parse: the strings come back
// as the kernel names them, undecoded bytes and all. They are paths and
// names, not label values; whoever turns them into labels must make them
// valid UTF-8 and bounded.
func TestParseMountinfoHostile(t *testing.T) {
	mounts, err := ParseMountinfo(strings.NewReader(hostileMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{ID: 40, ParentID: 1, Major: 8, Minor: 1, Root: "/", MountPoint: "/srv/vm\xff\xfe", Options: "rw", FSType: "ext4", Source: "/dev/sda1", SuperOptions: "rw"},
		{ID: 41, ParentID: 1, Major: 8, Minor: 2, Root: "/", MountPoint: "/srv/a\nb\"c", Options: "rw", Optional: []string{"shared:1"}, FSType: "xfs", Source: "/dev/sda2", SuperOptions: "rw"},
		{ID: 42, ParentID: 1, Major: 0, Minor: 50, Root: "/", MountPoint: "/mnt/f", Options: "rw", FSType: "fuse.a\"b\n", Source: "src\\x", SuperOptions: "rw,user_id=0"},
		{ID: 43, ParentID: 1, Major: 8, Minor: 3, Root: "/", MountPoint: "/" + strings.Repeat("p", 4096), Options: "rw", FSType: "btrfs", Source: "/dev/sda3", SuperOptions: "rw"},
	}
	if !reflect.DeepEqual(mounts, want) {
		t.Errorf("got  %#v\nwant %#v", mounts, want)
	}
	tab := &Table{Mounts: mounts}
	if m, ok := tab.Find("/srv/vm\xff\xfe/disk.qcow2"); !ok || m.ID != 40 {
		t.Errorf("Find under the invalid UTF-8 mount point: %+v, %v", m, ok)
	}
}
