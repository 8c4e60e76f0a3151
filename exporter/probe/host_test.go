package probe

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// sysBlockStat reads sectors read and written from /sys/block/<dev>/stat.
func sysBlockStat(t *testing.T, dev string) (rd, wr uint64) {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + dev + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	rd, _ = strconv.ParseUint(f[2], 10, 64)
	wr, _ = strconv.ParseUint(f[6], 10, 64)
	return rd * 512, wr * 512
}

// TestHostDeviceAttribution: on a loop-backed ext4, an image's buffered
// (writeback) and direct writes are charged to its disk, the journal to
// metadata, another file to other; the device totals equal the device's
// own /sys/block stat.
func TestHostDeviceAttribution(t *testing.T) {
	loop, mnt := loopFS(t, "mkfs.ext4", 512)
	var st unix.Stat_t
	if err := unix.Stat(loop, &st); err != nil {
		t.Fatal(err)
	}
	dev := uint32(unix.Major(st.Rdev))<<20 | uint32(unix.Minor(st.Rdev))

	p, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, pr := range p.Programs() {
		if !pr.Attached {
			t.Errorf("program %s not attached: %v", pr.Name, pr.Err)
		}
	}
	img := filepath.Join(mnt, "disk.img")
	f := trackFile(t, p, img, 2)
	if err := p.TrackDevice(dev, 0); err != nil {
		t.Fatal(err)
	}
	sh(t, "sync")
	name := filepath.Base(loop)
	rd0, wr0 := sysBlockStat(t, name)

	buf := make([]byte, 1<<20)
	for i := 0; i < 8; i++ { // 8 MiB buffered, written back by fsync
		unix.Pwrite(int(f.Fd()), buf, int64(i)<<20)
	}
	if err := unix.Fsync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	d, err := unix.Open(img, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	for i := 8; i < 12; i++ { // 4 MiB direct
		if _, err := unix.Pwrite(d, mem, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ { // 4 MiB direct reads
		if _, err := unix.Pread(d, mem, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
	}
	unix.Close(d)
	other := filepath.Join(mnt, "other")
	os.WriteFile(other, make([]byte, 2<<20), 0o600)
	sh(t, "sync")
	rd1, wr1 := sysBlockStat(t, name)

	ic, err := p.ImageDeviceCounters(2)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := p.DeviceCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image: %d/%d requests, %d/%d bytes (read/write)", ic.Requests[0], ic.Requests[1], ic.Bytes[0], ic.Bytes[1])
	t.Logf("device: data %v metadata %v other %v bytes; flushes %d; /sys/block: read %d written %d",
		dc.Bytes[0], dc.Bytes[1], dc.Bytes[2], dc.Flushes, rd1-rd0, wr1-wr0)
	if ic.Bytes[1] != 12<<20 {
		t.Errorf("image data written to the device: %d bytes, want %d (8 MiB writeback + 4 MiB direct)", ic.Bytes[1], 12<<20)
	}
	if ic.Bytes[0] != 4<<20 {
		t.Errorf("image data read from the device: %d bytes, want %d", ic.Bytes[0], 4<<20)
	}
	if dc.Bytes[1][1] == 0 {
		t.Errorf("no journal/metadata writes on the device")
	}
	if dc.Bytes[2][1] < 2<<20 {
		t.Errorf("other writes %d, want >= 2 MiB (the other file)", dc.Bytes[2][1])
	}
	var wr, rd uint64
	for k := 0; k < 3; k++ {
		rd += dc.Bytes[k][0]
		wr += dc.Bytes[k][1]
	}
	// Journal commits may complete between the two readings: 2%, as the
	// acceptance allows.
	near := func(a, b uint64) bool { return float64(a) >= 0.98*float64(b) && float64(a) <= 1.02*float64(b) }
	if !near(wr, wr1-wr0) || !near(rd, rd1-rd0) {
		t.Errorf("device totals read %d written %d; /sys/block says %d, %d", rd, wr, rd1-rd0, wr1-wr0)
	}
}
