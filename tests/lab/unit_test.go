package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestControlChannel runs the guest's lab-ctl.sh on the host, over pipes,
// against the host end of the protocol. stty fails on a pipe, which the
// script tolerates; the protocol is the same as on the serial port.
func TestControlChannel(t *testing.T) {
	script, err := kitFiles.ReadFile("lab-ctl.sh")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lab-ctl.sh")
	if err := os.WriteFile(path, script, 0o755); err != nil {
		t.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("busybox", "sh", path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, outW
	if err := cmd.Start(); err != nil {
		t.Fatalf("run lab-ctl.sh with busybox (apt-get install busybox-static): %v", err)
	}
	inR.Close()
	outW.Close()
	c := newConsole(inW, outR)
	t.Cleanup(func() {
		inW.Close()
		_ = cmd.Wait()
		<-c.readerOK
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-c.ready:
	case <-ctx.Done():
		t.Fatalf("no ready marker; channel tail: %q", c.Tail())
	}

	for _, tc := range []struct {
		script string
		out    string
		rc     int
	}{
		{"echo hello", "hello\n", 0},
		{"echo out; echo err >&2; exit 7", "out\nerr\n", 7},
		{`printf 'no newline\r\n\001@@LAB-END x 0@@'`, "no newline\r\n\x01@@LAB-END x 0@@", 0},
		{"read x; echo \"stdin gave ${x:-nothing}\"", "stdin gave nothing\n", 0},
		{"seq 1 20000 | wc -l", "20000\n", 0},
		{"echo " + strings.Repeat("x", 6000) + " | wc -c", "6001\n", 0},
	} {
		out, rc, err := c.run(ctx, tc.script)
		if err != nil {
			t.Fatalf("run %q: %v", tc.script, err)
		}
		if strings.TrimLeft(out, " ") != tc.out || rc != tc.rc {
			t.Errorf("run %q = %q, %d; want %q, %d", tc.script, out, rc, tc.out, tc.rc)
		}
	}

	// A command abandoned by its caller (no deadline, so the guest lets it
	// finish) does not confuse the next one.
	abandon, cancelAbandon := context.WithCancel(ctx)
	time.AfterFunc(300*time.Millisecond, cancelAbandon)
	_, _, err = c.run(abandon, "sleep 1; echo late")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned command: err %v, want canceled", err)
	}
	out, rc, err := c.run(ctx, "echo next")
	if err != nil || rc != 0 || out != "next\n" {
		t.Fatalf("after abandoned command: %q, %d, %v", out, rc, err)
	}
	// The deadline travels to the guest, which kills the command.
	start := time.Now()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, _, err = c.run(short, "sleep 20")
	cancelShort()
	if err == nil {
		t.Fatal("sleep 20 with a 2s deadline succeeded")
	}
	if out, _, err := c.run(ctx, "echo alive"); err != nil || out != "alive\n" {
		t.Fatalf("after killed command: %q, %v", out, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("guest did not kill the timed-out command: next answer after %s", took)
	}

	// Garbled requests are answered, not hung on.
	if _, err := fmt.Fprintf(inW, "LAB-RUN bad 0 !!!notbase64\n"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := c.run(ctx, "echo fine"); err != nil || out != "fine\n" {
		t.Fatalf("after garbled request: %q, %v", out, err)
	}

	inW.Close()
	select {
	case <-c.readerOK:
	case <-ctx.Done():
		t.Fatal("reader did not stop at EOF")
	}
	if _, _, err := c.run(ctx, "true"); !errors.Is(err, ErrConsoleClosed) {
		t.Errorf("run after EOF: %v, want ErrConsoleClosed", err)
	}
}

// TestQMPClient drives the client against a scripted QMP server: greeting,
// capability negotiation, events interleaved with replies, error replies.
func TestQMPClient(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		send := func(s string) { fmt.Fprintln(conn, s) }
		send(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": []}}`)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				serverErr <- nil
				return
			}
			var req struct {
				Execute   string          `json:"execute"`
				Arguments json.RawMessage `json:"arguments"`
				ID        string          `json:"id"`
			}
			if err := json.Unmarshal(line, &req); err != nil {
				serverErr <- err
				return
			}
			switch req.Execute {
			case "qmp_capabilities":
				send(fmt.Sprintf(`{"return": {}, "id": %q}`, req.ID))
			case "device_del":
				send(fmt.Sprintf(`{"return": {}, "id": %q}`, req.ID))
				send(`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "DEVICE_DELETED", "data": {"path": "/machine/peripheral/vd9/virtio-backend"}}`)
				send(`{"timestamp": {"seconds": 1, "microseconds": 3}, "event": "DEVICE_DELETED", "data": {"device": "vd9", "path": "/machine/peripheral/vd9"}}`)
			case "echo":
				send(`{"timestamp": {"seconds": 1, "microseconds": 1}, "event": "RESUME"}`)
				send(fmt.Sprintf(`{"return": %s, "id": %q}`, req.Arguments, req.ID))
			default:
				send(fmt.Sprintf(`{"error": {"class": "CommandNotFound", "desc": "The command %s has not been found"}, "id": %q}`, req.Execute, req.ID))
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialQMP(ctx, sock, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Execute(ctx, "echo", map[string]int{"n": 42})
	if err != nil || string(got) != `{"n":42}` {
		t.Fatalf("echo = %s, %v", got, err)
	}
	var qerr *QMPError
	if _, err := c.Execute(ctx, "nope", nil); !errors.As(err, &qerr) || qerr.Class != "CommandNotFound" {
		t.Fatalf("unknown command: %v, want a QMPError of class CommandNotFound", err)
	}
	mark := c.EventMark()
	if _, err := c.Execute(ctx, "device_del", map[string]string{"id": "vd9"}); err != nil {
		t.Fatal(err)
	}
	ev, err := c.WaitEvent(ctx, mark, func(ev QMPEvent) bool {
		return ev.Event == "DEVICE_DELETED" && strings.Contains(string(ev.Data), `"device": "vd9"`)
	})
	if err != nil || ev.Timestamp.Microseconds != 3 {
		t.Fatalf("WaitEvent = %+v, %v", ev, err)
	}
	// Events before the mark do not count.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.WaitEvent(short, c.EventMark(), func(ev QMPEvent) bool { return ev.Event == "RESUME" })
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitEvent for an old event: %v, want deadline exceeded", err)
	}
	if n := len(c.Events()); n != 3 {
		t.Errorf("kept %d events, want 3", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Execute(ctx, "echo", nil); !errors.Is(err, ErrQMPClosed) {
		t.Errorf("after Close: %v, want ErrQMPClosed", err)
	}
	if err := <-serverErr; err != nil {
		t.Fatal(err)
	}
}

// TestParseBlockStats decodes a query-blockstats reply shaped like QEMU
// 7.2's: a -drive disk, a hot-plugged disk and a drive without a device.
func TestParseBlockStats(t *testing.T) {
	raw := json.RawMessage(`[
	 {"device": "drive-vd1", "qdev": "/machine/peripheral/vd1/virtio-backend", "node-name": "#block133",
	  "stats": {"rd_bytes": 4608, "wr_bytes": 67108864, "rd_operations": 2, "wr_operations": 64, "flush_operations": 3,
	            "unmap_operations": 1, "unmap_bytes": 4096, "rd_merged": 1, "wr_merged": 5, "wr_highest_offset": 67108864,
	            "timed_stats": [], "account_invalid": true},
	  "parent": {"node-name": "#block059", "stats": {"wr_highest_offset": 67108864, "wr_bytes": 0},
	             "driver-specific": {"driver": "file", "discard-nb-ok": 65, "discard-nb-failed": 1, "discard-bytes-ok": 603979776}}},
	 {"device": "", "qdev": "/machine/peripheral/hot1/virtio-backend", "node-name": "node-hot1",
	  "stats": {"wr_operations": 9}, "parent": {"node-name": "node-hot1-file", "stats": {}}},
	 {"device": "drive-spare", "node-name": "#block200", "stats": {"rd_operations": 0}}
	]`)
	got, err := parseBlockStats(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d entries: %v", len(got), got)
	}
	vd1 := got["vd1"]
	if vd1.Device != "drive-vd1" || vd1.Node.NodeName != "#block133" ||
		vd1.Node.Stats.WrBytes != 67108864 || vd1.Node.Stats.RdMerged != 1 || vd1.Node.Stats.WrMerged != 5 ||
		vd1.Node.Stats.FlushOperations != 3 || vd1.Node.Stats.UnmapBytes != 4096 {
		t.Errorf("vd1 = %+v", vd1)
	}
	if vd1.Parent == nil || vd1.Parent.NodeName != "#block059" || vd1.Parent.DriverSpecific == nil ||
		vd1.Parent.DriverSpecific.DiscardNbOK != 65 || vd1.Parent.DriverSpecific.DiscardBytesOK != 603979776 ||
		vd1.Parent.DriverSpecific.DiscardNbFailed != 1 || vd1.Parent.Stats.WrHighestOffset != 67108864 {
		t.Errorf("vd1 parent = %+v", vd1.Parent)
	}
	if hot := got["hot1"]; hot.Device != "" || hot.Node.Stats.WrOperations != 9 || hot.Parent.NodeName != "node-hot1-file" {
		t.Errorf("hot1 = %+v", hot)
	}
	if spare, ok := got["drive-spare"]; !ok || spare.Parent != nil {
		t.Errorf("drive without device: %+v, %v", spare, ok)
	}
}

// TestParseFio parses real fio output from the host's fio: one job that
// fsyncs and one that fdatasyncs every write (see FioSync), with a note
// before the JSON like fio prints for some option combinations.
func TestParseFio(t *testing.T) {
	dir := t.TempDir()
	job := fmt.Sprintf("[global]\nfilename=%s/f\nsize=1m\nbs=4k\nrw=write\n[fsync]\nfsync=1\n[fdatasync]\nstonewall\nfdatasync=1\n", dir)
	if err := os.WriteFile(filepath.Join(dir, "job.fio"), []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(context.Background(), "fio", "--output-format=json", filepath.Join(dir, "job.fio"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := ParseFio([]byte("note: both iodepth >= 1 and synchronous I/O engine are selected\n" + out))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2 || res.Version == "" || !json.Valid(res.Raw) {
		t.Fatalf("parsed %d jobs, version %q, raw valid %v", len(res.Jobs), res.Version, json.Valid(res.Raw))
	}
	for _, j := range res.Jobs {
		if j.Error != 0 || j.Write.IOBytes != 1<<20 || j.Write.TotalIOs != 256 || j.Read.IOBytes != 0 {
			t.Errorf("job %s: %+v", j.Name, j)
		}
		if j.Sync.TotalIOs != 255 {
			t.Errorf("job %s: %d syncs, want 255 (one per write but the last)", j.Name, j.Sync.TotalIOs)
		}
	}
	tot := res.Total()
	if tot.Write.IOBytes != 2<<20 || tot.Write.TotalIOs != 512 || tot.Sync.TotalIOs != 510 {
		t.Errorf("total = %+v", tot)
	}
	if _, err := ParseFio([]byte("fio: no JSON here\n")); err == nil {
		t.Error("ParseFio accepted output without JSON")
	}
}

// TestJobFiles checks every embedded job targets ${DEV} and bounds itself.
func TestJobFiles(t *testing.T) {
	names := Jobs()
	want := []string{"discard", "flush", "rand-read", "rand-write", "seq-read", "seq-write"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("jobs = %v, want %v", names, want)
	}
	for _, n := range names {
		job, err := Job(n)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(job, "filename=${DEV}") || !strings.Contains(job, "runtime=") || !strings.Contains(job, "size=") {
			t.Errorf("job %s must use filename=${DEV} and set size and runtime", n)
		}
	}
}

func TestDiskConfigNormalize(t *testing.T) {
	d := DiskConfig{ID: "vd1", File: "/x.raw", Format: "raw"}
	if err := d.normalize(); err != nil {
		t.Fatal(err)
	}
	if d.driveArg() != "file=/x.raw,if=none,id=drive-vd1,format=raw,cache=writeback,aio=threads,discard=ignore" ||
		d.deviceArg() != "virtio-blk-pci,drive=drive-vd1,id=vd1,serial=vd1" {
		t.Errorf("args: -drive %s -device %s", d.driveArg(), d.deviceArg())
	}
	ro := DiskConfig{ID: "vd2", File: "/data.img", Format: "raw", ReadOnly: true}
	if err := ro.normalize(); err != nil {
		t.Fatal(err)
	}
	if got := ro.driveArg(); got != "file=/data.img,if=none,id=drive-vd2,format=raw,cache=writeback,aio=threads,discard=ignore,readonly=on" {
		t.Errorf("read-only disk: -drive %s", got)
	}
	for _, bad := range []DiskConfig{
		{ID: "vd1", File: "/x", Format: "raw", AIO: "native"}, // native without O_DIRECT
		{ID: "vd1", File: "/x", Format: "vmdk"},
		{ID: "v,d", File: "/x", Format: "raw"},
		{ID: "vd1", File: "/x,y", Format: "raw"},
		{ID: "vd1", File: "/x", Format: "raw", Serial: strings.Repeat("s", 21)},
		{ID: "vd1", File: "/x", Format: "raw", Discard: "on"},
	} {
		if err := bad.normalize(); err == nil {
			t.Errorf("normalize accepted %+v", bad)
		}
	}
}

// TestQEMUArgs checks the command line: without ICount exactly what every
// lab guest has always booted with; with it, single-threaded TCG and the
// -icount option; and that StartVM refuses a shift QEMU would refuse,
// before it starts anything.
func TestQEMUArgs(t *testing.T) {
	kit := &Kit{Kernel: "/k/bzImage", Initramfs: "/k/initramfs.gz"}
	cfg := VMConfig{Name: "g", Dir: "/d", CPUs: 1, MemMiB: 512}
	want := "-name guest=g,debug-threads=on -machine pc -accel tcg,thread=multi -smp 1 -m 512 -nodefaults -nographic -no-reboot " +
		"-kernel /k/bzImage -initrd /k/initramfs.gz -append console=ttyS0 panic=-1 quiet " +
		"-chardev file,id=console,path=/d/console.log -serial chardev:console -chardev stdio,id=control,signal=off -serial chardev:control " +
		"-qmp unix:/d/qmp.sock,server=on,wait=off"
	if got := strings.Join(qemuArgs(kit, cfg, "/d/qmp.sock", "/d/console.log"), " "); got != want {
		t.Errorf("default command line:\n got %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		ic   ICount
		want string
	}{
		{ICount{Shift: 2}, "shift=2,sleep=off"},
		{ICount{Shift: 0, Sleep: true}, "shift=0,sleep=on"},
	} {
		cfg.ICount = &c.ic
		args := qemuArgs(kit, cfg, "/d/qmp.sock", "/d/console.log")
		got := strings.Join(args, " ")
		if !strings.Contains(got, " -accel tcg,thread=single ") || strings.Contains(got, "thread=multi") ||
			!strings.Contains(got, " -icount "+c.want+" ") || strings.Count(got, "-icount") != 1 {
			t.Errorf("%+v: command line %s", c.ic, got)
		}
		// The rest is the default command line's.
		rest := strings.Replace(strings.Replace(got, "thread=single", "thread=multi", 1), " -icount "+c.want, "", 1)
		if rest != want {
			t.Errorf("%+v: besides -accel and -icount:\n got %s\nwant %s", c.ic, rest, want)
		}
	}
	for _, shift := range []int{-1, MaxICountShift + 1} {
		dir := t.TempDir()
		_, err := StartVM(context.Background(), kit, VMConfig{Dir: dir, ICount: &ICount{Shift: shift}})
		if err == nil || !strings.Contains(err.Error(), "icount shift") {
			t.Errorf("shift %d: StartVM returned %v, want the shift refused", shift, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "qemu.log")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("shift %d: QEMU was started (qemu.log: %v)", shift, err)
		}
	}
}

// TestDomainGuest runs lab-ctl.sh on the host behind a UNIX socket, as a
// domain's second serial port serves it, and talks to it through a Guest:
// the ready wait (no-op requests), output, exit status.
func TestDomainGuest(t *testing.T) {
	script, err := kitFiles.ReadFile("lab-ctl.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "lab-ctl.sh")
	if err := os.WriteFile(path, script, 0o755); err != nil {
		t.Fatal(err)
	}
	d := &Domain{Name: "unit", Control: filepath.Join(dir, "control.sock"), Console: filepath.Join(dir, "console.log")}
	ln, err := net.Listen("unix", d.Control)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		f, err := c.(*net.UnixConn).File()
		if err != nil {
			served <- err
			return
		}
		defer f.Close()
		cmd := exec.Command("busybox", "sh", path)
		cmd.Stdin, cmd.Stdout = f, f
		served <- cmd.Run()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := d.Guest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := g.RunOK(ctx, "echo hello"); err != nil || out != "hello\n" {
		t.Errorf("RunOK(echo hello) = %q, %v", out, err)
	}
	if _, err := g.RunOK(ctx, "exit 3"); err == nil || !strings.Contains(err.Error(), "exited 3") {
		t.Errorf("RunOK(exit 3): %v, want an error naming status 3", err)
	}
	g.Close()
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("lab-ctl.sh did not end when the host disconnected")
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lab.lock")
	var logged []string
	logf := func(f string, a ...any) { logged = append(logged, f) }
	unlock, err := Lock(context.Background(), path, logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path, logf); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second lock while held: %v, want a deadline", err)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "waiting for the lab lock") {
		t.Errorf("logged %q", logged)
	}
	// A waiter gets the lock when the holder lets go, without polling.
	type result struct {
		unlock func()
		err    error
	}
	waiter := make(chan result, 1)
	go func() {
		u, err := Lock(context.Background(), path, func(string, ...any) {})
		waiter <- result{u, err}
	}()
	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	unlock()
	w := <-waiter
	if w.err != nil {
		t.Fatalf("waiter: %v", w.err)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("waiter got the lock %s after its release", d)
	}
	// The waiter given up above must have let go of the lock too.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := Lock(ctx2, path, logf); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lock while the waiter holds it: %v", err)
	}
	w.unlock()
	unlock2, err := Lock(context.Background(), path, logf)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
	none, err := Lock(context.Background(), "", logf)
	if err != nil {
		t.Fatal(err)
	}
	none()
}
