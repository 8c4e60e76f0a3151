package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The flushes a VMM makes on each image file, counted without fspair: the
// fdatasync/fsync system calls with strace (aio=threads and aio=native: QEMU
// 7.2 hands flushes to its thread pool, block/file-posix.c
// raw_co_flush_to_disk), and IORING_OP_FSYNC submissions from the kernel's
// io_uring trace events (aio=io_uring: luring_co_submit with QEMU_AIO_FLUSH).

// FlushCount is what a count saw on one file.
type FlushCount struct {
	Calls  int           // flushes that completed without error
	Failed int           // flushes that returned an error
	Time   time.Duration // their total duration as strace measured it (strace -T; 0 for io_uring)
}

// FlushTrace counts a process's fdatasync and fsync calls per file with
// strace, attached to all its threads (-f). strace stops the process at
// each system call it makes: QEMU runs slower meanwhile, which changes no
// count.
type FlushTrace struct {
	pid  int
	out  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  LogBuffer
}

var straceAttached = regexp.MustCompile(`Process \d+ attached`)

// TraceFlushes attaches strace to process pid and returns once it is
// attached to every thread.
func TraceFlushes(ctx context.Context, pid int, dir string) (*FlushTrace, error) {
	if _, err := exec.LookPath("strace"); err != nil {
		return nil, fmt.Errorf("strace not found (apt-get install strace): %w", err)
	}
	f := &FlushTrace{pid: pid, out: filepath.Join(dir, fmt.Sprintf("strace-%d-%d.txt", pid, time.Now().UnixNano())), done: make(chan struct{})}
	// -y names each descriptor's file; -T times each call; -e signal=none
	// leaves out the signals QEMU's threads exchange.
	f.cmd = exec.Command("strace", "-f", "-y", "-T", "-e", "trace=fsync,fdatasync", "-e", "signal=none",
		"-o", f.out, "-p", strconv.Itoa(pid))
	f.cmd.Stderr = &f.log
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := f.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start strace on pid %d: %w", pid, err)
	}
	go func() { f.err = f.cmd.Wait(); close(f.done) }()
	// strace says "Process N attached with M threads" once all are.
	for !straceAttached.MatchString(f.log.String()) {
		select {
		case <-f.done:
			return nil, fmt.Errorf("strace on pid %d exited: %v: %s", pid, f.err, f.log.String())
		case <-ctx.Done():
			f.kill()
			return nil, fmt.Errorf("strace on pid %d: not attached: %w", pid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return f, nil
}

func (f *FlushTrace) kill() {
	f.cmd.Process.Kill()
	<-f.done
	os.Remove(f.out)
}

// Stop detaches strace (SIGINT) and returns the flushes per file path as
// strace names them.
func (f *FlushTrace) Stop() (map[string]FlushCount, error) {
	f.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		f.kill()
		return nil, fmt.Errorf("strace on pid %d did not detach within 30s", f.pid)
	}
	defer os.Remove(f.out)
	b, err := os.ReadFile(f.out)
	if err != nil {
		return nil, fmt.Errorf("read strace output: %w", err)
	}
	return ParseStraceFlushes(b)
}

var (
	// 1234  fdatasync(12</img/a.raw>) = 0 <0.001234>
	straceDone = regexp.MustCompile(`^(\d+)\s+(?:fsync|fdatasync)\((\d+)<(.*)>\)\s+=\s+(-?\d+)(.*)$`)
	// 1234  fdatasync(12</img/a.raw> <unfinished ...>
	straceStart = regexp.MustCompile(`^(\d+)\s+(?:fsync|fdatasync)\((\d+)<(.*)> <unfinished \.\.\.>$`)
	// 1234  <... fdatasync resumed>) = 0 <0.001234>
	straceResumed = regexp.MustCompile(`^(\d+)\s+<\.\.\. (?:fsync|fdatasync) resumed>\)\s+=\s+(-?\d+)(.*)$`)
	// the -T duration that ends a finished call's line: <0.001234>
	straceTime = regexp.MustCompile(`<([0-9.]+)>$`)
)

// ParseStraceFlushes reads strace -f -y -T output of fsync/fdatasync calls.
// A call strace shows in two parts (another thread ran in between) is put
// together by thread id; a call that had started before strace attached,
// and one still running when it detached, are not counted.
func ParseStraceFlushes(out []byte) (map[string]FlushCount, error) {
	counts := map[string]FlushCount{}
	pending := map[string]string{} // thread -> file of its unfinished call
	add := func(file, ret, rest string) {
		c := counts[file]
		if strings.HasPrefix(ret, "-") {
			c.Failed++
		} else {
			c.Calls++
		}
		if m := straceTime.FindStringSubmatch(rest); m != nil {
			if v, err := strconv.ParseFloat(m[1], 64); err == nil {
				c.Time += time.Duration(v * float64(time.Second))
			}
		}
		counts[file] = c
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case straceDone.MatchString(line):
			m := straceDone.FindStringSubmatch(line)
			add(m[3], m[4], m[5])
		case straceStart.MatchString(line):
			m := straceStart.FindStringSubmatch(line)
			pending[m[1]] = m[3]
		case straceResumed.MatchString(line):
			m := straceResumed.FindStringSubmatch(line)
			if file, ok := pending[m[1]]; ok {
				delete(pending, m[1])
				add(file, m[2], m[3])
			}
		}
	}
	return counts, sc.Err()
}

// IOUringFsyncs counts the IORING_OP_FSYNC requests submitted on each file
// of a process, from the io_uring_submit_req and io_uring_file_get trace
// events (include/trace/events/io_uring.h) in a tracefs instance of its
// own: the first gives each request's opcode, the second its descriptor.
type IOUringFsyncs struct {
	pid  int
	dir  string // the tracefs instance
	mu   sync.Mutex
	done bool
}

// tracefs is where the kernel's tracing file system is mounted.
const tracefs = "/sys/kernel/tracing"

// TraceIOUringFsyncs starts counting for process pid; the descriptors
// followed are those it has open on files now (a VMM opens its images at
// start).
func TraceIOUringFsyncs(pid int) (*IOUringFsyncs, error) {
	if _, err := os.Stat(filepath.Join(tracefs, "events", "io_uring", "io_uring_submit_req")); err != nil {
		return nil, fmt.Errorf("io_uring trace events not found under %s (mount tracefs there; a kernel with CONFIG_IO_URING): %w", tracefs, err)
	}
	fds, err := fileDescriptors(pid)
	if err != nil {
		return nil, err
	}
	if len(fds) == 0 {
		return nil, fmt.Errorf("process %d has no files open", pid)
	}
	var filter []string
	for fd := range fds {
		filter = append(filter, "fd == "+strconv.Itoa(fd))
	}
	dir := filepath.Join(tracefs, "instances", fmt.Sprintf("fspair-lab-%d-%d", pid, time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create tracefs instance: %w", err)
	}
	u := &IOUringFsyncs{pid: pid, dir: dir}
	for _, w := range []struct{ file, value string }{
		// Room for every request of a test window: each takes about
		// 100 bytes per event.
		{"buffer_size_kb", "16384"},
		{"events/io_uring/io_uring_submit_req/filter", "opcode == 3"}, // IORING_OP_FSYNC
		{"events/io_uring/io_uring_file_get/filter", strings.Join(filter, " || ")},
		{"events/io_uring/io_uring_submit_req/enable", "1"},
		{"events/io_uring/io_uring_file_get/enable", "1"},
		{"tracing_on", "1"},
	} {
		if err := os.WriteFile(filepath.Join(dir, w.file), []byte(w.value), 0o644); err != nil {
			u.remove()
			return nil, fmt.Errorf("tracefs %s: %w", w.file, err)
		}
	}
	return u, nil
}

// fileDescriptors maps a process's descriptors on files to their paths.
func fileDescriptors(pid int) (map[int]string, error) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("list descriptors of %d: %w", pid, err)
	}
	out := map[int]string{}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err == nil && strings.HasPrefix(target, "/") {
			out[fd] = target
		}
	}
	return out, nil
}

func (u *IOUringFsyncs) remove() error {
	// The events must be off before the instance can go.
	for _, ev := range []string{"io_uring_submit_req", "io_uring_file_get"} {
		os.WriteFile(filepath.Join(u.dir, "events", "io_uring", ev, "enable"), []byte("0"), 0o644)
	}
	if err := syscall.Rmdir(u.dir); err != nil {
		return fmt.Errorf("remove tracefs instance %s: %w", u.dir, err)
	}
	return nil
}

var (
	// ... io_uring_submit_req: ring 00000000abcd, req 00000000ef01, user_data 0x..., opcode FSYNC, flags ...
	uringSubmit = regexp.MustCompile(`io_uring_submit_req: ring [^,]+, req ([^,]+), user_data [^,]+, opcode ([^,]+),`)
	// ... io_uring_file_get: ring 00000000abcd, req 00000000ef01, user_data 0x..., fd 13
	uringFile = regexp.MustCompile(`io_uring_file_get: ring [^,]+, req ([^,]+), user_data [^,]+, fd (-?\d+)`)
)

// Stop ends the count and returns the FSYNC requests per file path. An
// overrun of the trace buffer (events lost) is an error.
func (u *IOUringFsyncs) Stop() (map[string]FlushCount, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return nil, errors.New("io_uring fsync count already stopped")
	}
	u.done = true
	os.WriteFile(filepath.Join(u.dir, "tracing_on"), []byte("0"), 0o644)
	trace, err := os.ReadFile(filepath.Join(u.dir, "trace"))
	var lost int
	if err == nil {
		cpus, _ := filepath.Glob(filepath.Join(u.dir, "per_cpu", "cpu*", "stats"))
		for _, st := range cpus {
			b, _ := os.ReadFile(st)
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "overrun: "); ok {
					n, _ := strconv.Atoi(strings.TrimSpace(v))
					lost += n
				}
			}
		}
	}
	fds, ferr := fileDescriptors(u.pid)
	if rerr := u.remove(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("read io_uring trace: %w", err)
	}
	if ferr != nil {
		return nil, ferr
	}
	if lost > 0 {
		return nil, fmt.Errorf("io_uring trace lost %d events (buffer overrun)", lost)
	}
	return parseIOUringFsyncs(trace, fds), nil
}

// parseIOUringFsyncs joins each request's opcode (the latest submit_req
// of its req pointer; the kernel reuses them) to its descriptor.
func parseIOUringFsyncs(trace []byte, fds map[int]string) map[string]FlushCount {
	// The printed pointers are hashed (trace option hash-ptr), the same
	// pointer always alike, so they still join.
	opcode := map[string]string{}
	counts := map[string]FlushCount{}
	for _, line := range strings.Split(string(trace), "\n") {
		if m := uringSubmit.FindStringSubmatch(line); m != nil {
			opcode[m[1]] = m[2]
			continue
		}
		if m := uringFile.FindStringSubmatch(line); m != nil && opcode[m[1]] == "FSYNC" {
			fd, _ := strconv.Atoi(m[2])
			file := fds[fd]
			if file == "" {
				file = "fd " + m[2]
			}
			c := counts[file]
			c.Calls++
			counts[file] = c
			delete(opcode, m[1])
		}
	}
	return counts
}
