package main

import (
	"testing"
	"time"

	"github.com/fspair/fspair/tests/workload"
)

func TestReadFlush(t *testing.T) {
	fams, err := workload.ParseMetrics([]byte(`# TYPE fspair_disk_flush_device_write_bytes_total counter
fspair_disk_flush_device_write_bytes_total{source_file="/a.raw",source="call",kind="data"} 4096
fspair_disk_flush_device_write_bytes_total{source_file="/a.raw",source="journal",kind="metadata"} 8192
fspair_disk_flush_device_write_bytes_total{source_file="/b.raw",source="call",kind="data"} 1e9
# TYPE fspair_disk_flush_device_writes_total counter
fspair_disk_flush_device_writes_total{source_file="/a.raw",source="call",kind="data"} 1
fspair_disk_flush_device_writes_total{source_file="/a.raw",source="journal",kind="metadata"} 2
# TYPE fspair_disk_flush_device_cache_flushes_total counter
fspair_disk_flush_device_cache_flushes_total{source_file="/a.raw"} 7
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := readFlush(fams, "/a.raw"); got != (Flush{DeviceWrites: 3, DeviceWriteBytes: 12288, CacheFlushes: 7}) {
		t.Errorf("readFlush = %+v", got)
	}
	if got := readFlush(fams, "/c.raw"); got != (Flush{}) {
		t.Errorf("readFlush of another disk = %+v", got)
	}
}

func TestSamples(t *testing.T) {
	ss := []sample{
		{Scrape: Scrape{Snapshot: workload.Snapshot{Time: t0}, Flush: Flush{CacheFlushes: 1}}, Phase: "mail"},
		{Scrape: Scrape{Snapshot: workload.Snapshot{Time: t0.Add(time.Second)}, Flush: Flush{CacheFlushes: 2}}, Phase: "after:mail"},
	}
	pts := points(ss)
	if len(pts) != 2 || pts[1].Phase != "after:mail" || !pts[1].Time.Equal(t0.Add(time.Second)) {
		t.Errorf("points %+v", pts)
	}
	if s, ok := at(ss, t0.Add(time.Second)); !ok || s.Flush.CacheFlushes != 2 {
		t.Errorf("at: %+v %v", s, ok)
	}
	if _, ok := at(ss, t0.Add(time.Hour)); ok {
		t.Error("at found a scrape that was not taken")
	}
}

func TestMountOf(t *testing.T) {
	m, err := mountOf("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	if m.fsType != "proc" || m.point != "/proc" {
		t.Errorf("mount of /proc/self: %+v", m)
	}
	if got := unescapeOctal(`/mnt/my\040disk\134x`); got != `/mnt/my disk\x` {
		t.Errorf("unescapeOctal: %q", got)
	}
	if !within("/a/b", "/a") || within("/ab", "/a") || !within("/x", "/") {
		t.Error("within")
	}
}
