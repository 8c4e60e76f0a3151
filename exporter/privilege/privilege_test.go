package privilege

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSetString(t *testing.T) {
	for _, c := range []struct {
		s    Set
		want string
	}{
		{0, "none"},
		{Runtime(true), "CAP_DAC_READ_SEARCH,CAP_SYS_PTRACE"},
		{Runtime(false), "CAP_DAC_READ_SEARCH"},
		{Attach, "CAP_PERFMON,CAP_BPF"},
		{Of(unix.CAP_CHOWN, 50), "CAP_CHOWN,CAP_50"},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("%#x: %q, want %q", uint64(c.s), got, c.want)
		}
	}
}

// The table of names covers every capability the running kernel knows.
func TestNamesCoverKernel(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Fatal(err)
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c <= last; c++ {
		if names[c] == "" {
			t.Errorf("capability %d has no name", c)
		}
	}
}

func TestCheck(t *testing.T) {
	all := Set(1<<(unix.CAP_LAST_CAP+1) - 1)
	keep := Runtime(true)
	for _, c := range []struct {
		name    string
		st      State
		missing string // "" when it may start
	}{
		{"root", State{Effective: all, Permitted: all, Bounding: all}, ""},
		{"the systemd unit's set", State{Effective: Startup(keep), Permitted: Startup(keep), Bounding: Startup(keep), Ambient: Startup(keep)}, ""},
		{"no CAP_SYS_ADMIN", State{Effective: Startup(keep) &^ Stats, Permitted: Startup(keep) &^ Stats, Bounding: Startup(keep) &^ Stats}, ""},
		{"no CAP_PERFMON", State{Effective: all &^ Of(unix.CAP_PERFMON), Permitted: all, Bounding: all}, "CAP_PERFMON"},
		{"kept set not permitted", State{Effective: Attach | bounding, Permitted: Attach | bounding, Bounding: all}, "CAP_DAC_READ_SEARCH,CAP_SYS_PTRACE"},
		{"no CAP_SETPCAP", State{Effective: Attach | keep, Permitted: Attach | keep, Bounding: all}, "CAP_SETPCAP"},
		// Nothing to drop from the bounding set: CAP_SETPCAP not needed.
		{"bounding set already small", State{Effective: Attach | keep, Permitted: Attach | keep, Bounding: keep}, ""},
		{"nothing", State{Bounding: all}, "CAP_DAC_READ_SEARCH,CAP_SETPCAP,CAP_SYS_PTRACE,CAP_PERFMON,CAP_BPF"},
	} {
		err := c.st.check(keep)
		switch {
		case c.missing == "" && err != nil:
			t.Errorf("%s: %v, want nil", c.name, err)
		case c.missing != "" && (!errors.Is(err, ErrMissing) || !strings.HasSuffix(err.Error(), ": "+c.missing)):
			t.Errorf("%s: %v, want ErrMissing naming %s", c.name, err, c.missing)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	st, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 || st.Effective&Startup(Runtime(true)) != Startup(Runtime(true)) {
		t.Fatalf("needs root with %s (CI runs as root); have uid %d and %s", Startup(Runtime(true)), os.Geteuid(), st.Effective)
	}
}

// WithEffective lowers the calling thread's effective set for op only.
func TestWithEffective(t *testing.T) {
	needRoot(t)
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(img, 64055, 64055); err != nil {
		t.Fatal(err)
	}
	before, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	open := func() error {
		f, err := os.Open(img)
		if err == nil {
			f.Close()
		}
		return err
	}
	if err := WithEffective(Of(unix.CAP_SYS_PTRACE), open); !errors.Is(err, os.ErrPermission) {
		t.Errorf("open a 0600 file of another user without CAP_DAC_READ_SEARCH: %v, want permission denied", err)
	}
	if err := WithEffective(Runtime(false), open); err != nil {
		t.Errorf("open with CAP_DAC_READ_SEARCH: %v", err)
	}
	runtime.LockOSThread() // read this goroutine's thread again, whichever it is
	after, err := Current()
	runtime.UnlockOSThread()
	if err != nil || after != before {
		t.Errorf("after WithEffective: %+v, %v; want %+v", after, err, before)
	}
}

// helperEnv makes the test binary the helper process of TestDrop.
const helperEnv = "FSPAIR_PRIVILEGE_HELPER"

// TestDrop drops capabilities in a helper process (the test binary run
// again) that has many threads, some started before the drop and some
// after, and reads every thread's /proc status from outside; a program the
// helper then executes does not get any capability back.
func TestDrop(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		dropHelper()
		return
	}
	needRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDrop$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "dropped") {
		t.Fatalf("helper: %q, %v", line, err)
	}
	keep := Runtime(true)
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", cmd.Process.Pid))
	if err != nil || len(tasks) < 10 {
		t.Fatalf("helper threads: %d, %v; want at least 10", len(tasks), err)
	}
	for _, p := range tasks {
		st, err := readStatus(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := (State{Effective: keep, Permitted: keep, Bounding: keep, NoNewPrivs: true}); st != want {
			t.Errorf("thread %s: %+v, want %+v", filepath.Base(filepath.Dir(p)), st, want)
		}
	}
	// The child the helper executed: root's execve grants no more than the
	// bounding set, and no_new_privs no more than the parent held.
	child, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	eff, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(child, "CapEff:")), 16, 64)
	if err != nil {
		t.Fatalf("child: %q: %v", child, err)
	}
	if Set(eff)&^keep != 0 {
		t.Errorf("a program executed after the drop has %s", Set(eff))
	}
}

// dropHelper runs in the helper process: threads before, the drop, threads
// after, then a child program, and waits for the parent to look.
func dropHelper() {
	hold := make(chan struct{})
	spawn := func(n int) {
		started := make(chan struct{})
		for range n {
			go func() {
				runtime.LockOSThread() // a thread of its own
				started <- struct{}{}
				<-hold
			}()
			<-started
		}
	}
	spawn(6)
	if err := Drop(Runtime(true)); err != nil {
		fmt.Println("drop:", err)
		os.Exit(1)
	}
	spawn(6)
	fmt.Println("dropped")
	out, err := exec.Command("/bin/sh", "-c", "grep CapEff /proc/self/status").Output()
	if err != nil {
		fmt.Println("child:", err)
		os.Exit(1)
	}
	fmt.Print(string(out))
	// Wait for the parent to close stdin, or give up.
	done := make(chan struct{})
	go func() { bufio.NewReader(os.Stdin).ReadString('\n'); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	close(hold)
	os.Exit(0)
}
