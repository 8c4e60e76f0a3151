package hostfs

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseMountinfo checks that arbitrary input never panics, that the
// parser's bounds hold and that every accepted entry is usable by Find.
// Seeds live in testdata/fuzz/FuzzParseMountinfo.
func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte("36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		mounts, err := ParseMountinfo(bytes.NewReader(data))
		if err != nil {
			if mounts != nil {
				t.Fatalf("error %v with non-nil result", err)
			}
			// The error quotes at most a field truncated to 64 bytes,
			// which %q may make four times longer.
			if len(err.Error()) > 512 {
				t.Fatalf("error of %d bytes: %.100q...", len(err.Error()), err.Error())
			}
			return
		}
		if len(mounts) > maxMounts || len(mounts) > bytes.Count(data, []byte("\n"))+1 {
			t.Fatalf("%d mounts from %d lines", len(mounts), bytes.Count(data, []byte("\n"))+1)
		}
		for _, m := range mounts {
			if m.MountPoint == "" || m.Root == "" || m.FSType == "" {
				t.Fatalf("accepted entry with empty field: %+v", m)
			}
			// Decoding escapes only shrinks a field, and no field
			// outgrows the line it came from.
			for _, s := range []string{m.Root, m.MountPoint, m.FSType, m.Source, m.Options, m.SuperOptions} {
				if len(s) > maxLineBytes {
					t.Fatalf("field of %d bytes", len(s))
				}
			}
			if m.ID < 0 || m.ParentID < 0 || m.Device != "" || m.BackingFile != "" {
				t.Fatalf("accepted entry %+v", m)
			}
			for _, o := range m.Optional {
				if o == "" || strings.Contains(o, " ") {
					t.Fatalf("optional field %q", o)
				}
			}
		}
		tab := &Table{Mounts: mounts}
		for _, m := range mounts {
			if strings.HasPrefix(m.MountPoint, "/") {
				got, ok := tab.Find(m.MountPoint)
				if !ok {
					t.Fatalf("Find(%q) found nothing although it is a mount point", m.MountPoint)
				}
				if filepath.Clean(got.MountPoint) != filepath.Clean(m.MountPoint) {
					t.Fatalf("Find(%q) = mount on %q", m.MountPoint, got.MountPoint)
				}
			}
		}
	})
}

// FuzzUnescape checks the decoder of mountinfo's octal escapes.
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{`/a\040b`, `\134\134`, `\777`, `\0`, `\1234`, `/x\012y`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u := Unescape(s)
		if len(u) > len(s) || !strings.Contains(s, `\`) && u != s {
			t.Fatalf("Unescape(%q) = %q", s, u)
		}
		// Every escape the kernel writes (fs/proc_namespace.c mangle():
		// space, tab, newline, backslash as \ooo) decodes back.
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			switch c := s[i]; c {
			case ' ', '\t', '\n', '\\':
				b.WriteString(`\` + string('0'+c>>6) + string('0'+c>>3&7) + string('0'+c&7))
			default:
				b.WriteByte(c)
			}
		}
		if got := Unescape(b.String()); got != s {
			t.Fatalf("Unescape(mangle(%q)) = %q", s, got)
		}
	})
}
