package hostfs

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParseMountinfo checks that arbitrary input never panics and that every
// accepted entry is usable by Find. Seeds live in testdata/fuzz/FuzzParseMountinfo.
func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte("36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		mounts, err := ParseMountinfo(bytes.NewReader(data))
		if err != nil {
			if mounts != nil {
				t.Fatalf("error %v with non-nil result", err)
			}
			return
		}
		for _, m := range mounts {
			if m.MountPoint == "" || m.Root == "" || m.FSType == "" {
				t.Fatalf("accepted entry with empty field: %+v", m)
			}
		}
		tab := &Table{Mounts: mounts}
		for _, m := range mounts {
			if strings.HasPrefix(m.MountPoint, "/") {
				if _, ok := tab.Find(m.MountPoint); !ok {
					t.Fatalf("Find(%q) found nothing although it is a mount point", m.MountPoint)
				}
			}
		}
	})
}
