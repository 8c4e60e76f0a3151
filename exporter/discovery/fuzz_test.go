package discovery

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
)

// FuzzParseQEMUArgs feeds NUL-separated argument vectors, as read from
// /proc/PID/cmdline, to the parser. Seeds live in
// testdata/fuzz/FuzzParseQEMUArgs.
func FuzzParseQEMUArgs(f *testing.F) {
	f.Add([]byte("qemu-system-x86_64\x00-drive\x00file=/a,,b,if=virtio"))
	f.Fuzz(func(t *testing.T, data []byte) {
		args := splitCmdline(data)
		vm, err := ParseQEMUArgs(args)
		if vm == nil {
			if !errors.Is(err, ErrEmptyCommandLine) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("nil VM with error %v", err)
			}
			return
		}
		for _, d := range vm.Disks {
			if d.SourceFile == "" || strings.HasPrefix(path.Clean(d.SourceFile), "/dev/") {
				t.Fatalf("disk with bad source file: %+v", d)
			}
			if d.Source != SourceQEMU || (d.Discard != "unmap" && d.Discard != "ignore") {
				t.Fatalf("disk with bad fields: %+v", d)
			}
			if !slices.Contains(validCaches[1:], d.Cache) {
				t.Fatalf("disk with cache mode %q", d.Cache)
			}
		}
		if len(vm.OtherFiles) > maxOtherFiles {
			t.Fatalf("%d other files", len(vm.OtherFiles))
		}
	})
}

// FuzzParseDomainXML checks that domain XML from libvirt cannot crash the
// parser and yields only file disks with a source.
func FuzzParseDomainXML(f *testing.F) {
	f.Add([]byte(`<domain><name>a</name><devices><disk type='file' device='disk'><source file='/x'/><target dev='vda'/></disk></devices></domain>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		disks, _ := ParseDomainXML(data)
		for _, d := range disks {
			if d.SourceFile == "" || d.Source != SourceLibvirt {
				t.Fatalf("bad disk %+v", d)
			}
		}
	})
}
