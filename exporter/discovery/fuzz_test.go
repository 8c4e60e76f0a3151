package discovery

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// FuzzParseQEMUArgs feeds NUL-separated argument vectors, as read from
// /proc/PID/cmdline, to the parser, and the disks it finds through Discover
// to the labels of a metric. Seeds live in testdata/fuzz/FuzzParseQEMUArgs.
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
		checkDiscovered(t, SourceQEMU, vm.Disks)
	})
}

// FuzzParseDomainXML checks that domain XML from libvirt cannot crash the
// parser and yields only file disks with a source, whose strings are safe
// label values once discovered.
func FuzzParseDomainXML(f *testing.F) {
	f.Add([]byte(`<domain><name>a</name><devices><disk type='file' device='disk'><source file='/x'/><target dev='vda'/></disk></devices></domain>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		disks, _ := ParseDomainXML(data)
		for _, d := range disks {
			if d.SourceFile == "" || d.Source != SourceLibvirt {
				t.Fatalf("bad disk %+v", d)
			}
		}
		checkDiscovered(t, SourceLibvirt, disks)
	})
}

// diskInfo has the label names of fspair_disk_info that come from
// discovery (exporter/collector/disk.go).
var diskInfo = prometheus.NewDesc("fspair_disk_info", "test",
	[]string{"domain", "uuid", "target_device", "source_file", "cache", "aio", "discovery", "guest_fs"}, nil)

// checkDiscovered hands disks to Discover as the result of source and
// checks that every disk it reports makes valid, bounded label values: the
// collector builds metrics from them with prometheus.MustNewConstMetric,
// which panics on a label value that is not valid UTF-8.
func checkDiscovered(t *testing.T, source string, disks []Disk) {
	t.Helper()
	d, err := New(Options{Proc: true, ProcRoot: "/nonexistent", StaleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	d.sources = map[string]*sourceState{source: {}}
	d.runSource = func(context.Context, string) sourceResult {
		found := make([]found, len(disks))
		for i, disk := range disks {
			found[i].Disk = disk
		}
		return sourceResult{disks: found}
	}
	res, err := d.Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	for _, disk := range res.Disks {
		checkLabelValues(t, disk)
	}
	if len(res.Disks) < len(disks) && res.Errors[source] == nil {
		t.Fatalf("%d of %d disks left out without an error", len(disks)-len(res.Disks), len(disks))
	}
}

func checkLabelValues(t *testing.T, disk Disk) {
	t.Helper()
	for _, v := range []struct {
		name string
		s    string
		max  int
	}{
		{"domain", disk.Domain, maxNameLen}, {"target_device", disk.TargetDevice, maxNameLen},
		{"source_file", disk.SourceFile, maxPathLen}, {"uuid", disk.UUID, 36},
	} {
		if len(v.s) > v.max || !utf8.ValidString(v.s) {
			t.Fatalf("%s label of %d bytes (max %d), valid UTF-8 %v: %q", v.name, len(v.s), v.max, utf8.ValidString(v.s), v.s)
		}
	}
	if !slices.Contains(validCaches, disk.Cache) && disk.Cache != CacheDirect {
		t.Fatalf("cache %q", disk.Cache)
	}
	if !slices.Contains(validAIOs, disk.AIO) {
		t.Fatalf("aio %q", disk.AIO)
	}
	if disk.GuestFS != "" && !guestFSRe.MatchString(disk.GuestFS) {
		t.Fatalf("guest_fs %q", disk.GuestFS)
	}
	if _, err := prometheus.NewConstMetric(diskInfo, prometheus.GaugeValue, 1,
		disk.Domain, disk.UUID, disk.TargetDevice, disk.SourceFile, disk.Cache, disk.AIO, disk.Source, disk.GuestFS); err != nil {
		t.Fatalf("disk %+v: %v", disk, err)
	}
}
