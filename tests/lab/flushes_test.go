package lab

import (
	"testing"
	"time"
)

func TestParseStraceFlushes(t *testing.T) {
	out := `4242  fdatasync(12</img/a.raw>) = 0 <0.001000>
4243  fdatasync(13</img/b.qcow2> <unfinished ...>
4242  fsync(12</img/a.raw>) = 0 <0.002000>
4243  <... fdatasync resumed>) = 0 <0.004000>
4244  <... fdatasync resumed>) = 0 <0.500000>
4245  fdatasync(12</img/a.raw>) = -1 EIO (Input/output error) <0.000100>
4246  fdatasync(12</img/a.raw> <unfinished ...>
`
	got, err := ParseStraceFlushes([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]FlushCount{
		"/img/a.raw":   {Calls: 2, Failed: 1, Time: 3100 * time.Microsecond},
		"/img/b.qcow2": {Calls: 1, Time: 4 * time.Millisecond},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for f, w := range want {
		g := got[f]
		if g.Calls != w.Calls || g.Failed != w.Failed || (g.Time-w.Time).Abs() > time.Microsecond {
			t.Errorf("%s: %+v, want %+v", f, g, w)
		}
	}
}

func TestParseIOUringFsyncs(t *testing.T) {
	trace := `# tracer: nop
 qemu-system-x86-4242 [001] ..... 10.000001: io_uring_submit_req: ring 000000001111aaaa, req 00000000beef0001, user_data 0x55, opcode FSYNC, flags 0x0, sq_thread 0
 qemu-system-x86-4242 [001] ..... 10.000002: io_uring_file_get: ring 000000001111aaaa, req 00000000beef0001, user_data 0x55, fd 12
 qemu-system-x86-4242 [001] ..... 10.000003: io_uring_file_get: ring 000000001111aaaa, req 00000000beef0002, user_data 0x56, fd 12
 qemu-system-x86-4242 [001] ..... 10.000004: io_uring_submit_req: ring 000000001111aaaa, req 00000000beef0002, user_data 0x57, opcode FSYNC, flags 0x0, sq_thread 0
 qemu-system-x86-4242 [001] ..... 10.000005: io_uring_file_get: ring 000000001111aaaa, req 00000000beef0002, user_data 0x57, fd 13
 qemu-system-x86-4242 [001] ..... 10.000006: io_uring_file_get: ring 000000001111aaaa, req 00000000beef0001, user_data 0x58, fd 12
`
	got := parseIOUringFsyncs([]byte(trace), map[int]string{12: "/img/a.raw", 13: "/img/b.raw"})
	if got["/img/a.raw"].Calls != 1 || got["/img/b.raw"].Calls != 1 || len(got) != 2 {
		t.Errorf("got %+v, want one FSYNC on each (the req reused for a write is not one)", got)
	}
}

// TestFspairQMPArgs: the exporter's monitor is declared before the lab's
// own, so that an exporter trying a VM's monitors in command line order
// tries its own first; it parses as the exporter's discovery reads it.
func TestFspairQMPArgs(t *testing.T) {
	kit := &Kit{Kernel: "/k", Initramfs: "/i"}
	args := qemuArgs(kit, VMConfig{Name: "x", Dir: "/d", FspairQMP: true}, "/d/qmp.sock", "/d/console.log")
	mine, lab := -1, -1
	for i, a := range args {
		switch a {
		case "socket,id=fspair-qmp,path=/d/fspair.qmp,server=on,wait=off":
			mine = i
		case "unix:/d/qmp.sock,server=on,wait=off":
			lab = i
		}
	}
	if mine < 0 || lab < 0 || mine > lab || args[mine+1] != "-mon" || args[mine+2] != "chardev=fspair-qmp,mode=control" {
		t.Errorf("args %q: want the fspair monitor (at %d) declared before the lab's -qmp (at %d)", args, mine, lab)
	}
	for _, a := range qemuArgs(kit, VMConfig{Name: "x", Dir: "/d"}, "/d/qmp.sock", "/d/console.log") {
		if a == "chardev=fspair-qmp,mode=control" {
			t.Error("fspair monitor declared without FspairQMP")
		}
	}
}
