package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// WorkDirPrefix starts the name of every lab work directory. cleanup.sh
// sweeps loop devices, mounts and QEMU processes that refer to paths with
// this prefix.
const WorkDirPrefix = "fspair-lab-"

// Lab owns a work directory and every host file system and guest made
// through it, and tears them all down in Close: guests first (they hold
// image files open), then the rest in reverse order of creation.
type Lab struct {
	Dir      string // work directory
	Kit      *Kit
	Progress io.Writer

	start  time.Time
	mu     sync.Mutex
	n      int
	vms    []*VM
	undo   []func() error
	closed bool
}

// New creates a lab with a fresh work directory under base (os.TempDir()
// when empty) and builds or reuses the kit in cacheDir (DefaultCacheDir()
// when empty). progress receives stage lines; it may be nil.
func New(ctx context.Context, base, cacheDir string, progress io.Writer) (*Lab, error) {
	return NewFor(ctx, base, cacheDir, "", progress)
}

// NewFor is New with the guests booting the Debian kernel package kernelPkg
// (BuildKitFor); empty means the lab's pinned kernel.
func NewFor(ctx context.Context, base, cacheDir, kernelPkg string, progress io.Writer) (*Lab, error) {
	if progress == nil {
		progress = io.Discard
	}
	if base == "" {
		base = os.TempDir()
	}
	if cacheDir == "" {
		cacheDir = DefaultCacheDir()
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("lab needs root (loop devices, mount, QEMU); run the tests as root")
	}
	kit, err := BuildKitFor(ctx, cacheDir, kernelPkg, progress)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, WorkDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("create lab work dir: %w", err)
	}
	l := &Lab{Dir: dir, Kit: kit, Progress: progress, start: time.Now()}
	l.Stage("work dir %s", dir)
	return l, nil
}

// Stage prints a progress line with the time since the lab started.
func (l *Lab) Stage(format string, args ...any) {
	fmt.Fprintf(l.Progress, "lab: [%6.1fs] %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
}

// Defer registers fn to run in Close, before the steps registered earlier.
func (l *Lab) Defer(fn func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.undo = append(l.undo, fn)
}

// NewHostFS makes a loop-backed host file system in the lab's work
// directory; Close tears it down.
func (l *Lab) NewHostFS(ctx context.Context, fsType string, sizeMiB int) (*HostFS, error) {
	l.Stage("host fs %s (%d MiB)", fsType, sizeMiB)
	h, err := NewHostFS(ctx, fsType, sizeMiB, l.Dir)
	if err != nil {
		return nil, err
	}
	l.Defer(h.Close)
	l.Stage("host fs %s on %s at %s", fsType, h.Loop, h.Dir)
	return h, nil
}

// StartVM boots a guest with the lab's kit. An empty cfg.Name becomes
// "fspairlab-<n>"; cfg.Dir defaults to a directory in the work dir and
// cfg.Progress to the lab's. Close stops the guest.
func (l *Lab) StartVM(ctx context.Context, cfg VMConfig) (*VM, error) {
	l.mu.Lock()
	l.n++
	n := l.n
	l.mu.Unlock()
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("fspairlab-%d", n)
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(l.Dir, fmt.Sprintf("vm%d", n))
	}
	if cfg.Progress == nil {
		cfg.Progress = l.Progress
	}
	l.Stage("boot vm %s (%d disks)", cfg.Name, len(cfg.Disks))
	vm, err := StartVM(ctx, l.Kit, cfg)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.vms = append(l.vms, vm)
	l.mu.Unlock()
	return vm, nil
}

// Close stops every guest, runs the deferred steps in reverse order
// (unmounting and detaching host file systems), and removes the work
// directory. It keeps going after errors and returns them all. Safe to call
// more than once; meant for t.Cleanup.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	vms, undo := l.vms, l.undo
	l.mu.Unlock()

	var errs []error
	for i := len(vms) - 1; i >= 0; i-- {
		if err := vms[i].Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(undo) - 1; i >= 0; i-- {
		if err := undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	// Remove the work directory only when nothing may still be mounted in
	// it: RemoveAll would otherwise delete a host file system's contents.
	if len(errs) == 0 {
		if err := os.RemoveAll(l.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove lab work dir: %w", err))
		}
	} else {
		errs = append(errs, fmt.Errorf("left lab work dir %s in place; run tests/lab/cleanup.sh", l.Dir))
	}
	l.Stage("torn down")
	return errors.Join(errs...)
}

// Leaks lists what the lab left behind: loop devices whose backing file is
// in the work directory, mounts inside it, processes whose command line
// names it, and the directory itself. Call it after Close; it should
// return nothing.
func (l *Lab) Leaks() ([]string, error) {
	return findLeaks(l.Dir)
}

func findLeaks(dir string) ([]string, error) {
	var leaks []string
	loops, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	for _, p := range loops {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // detached meanwhile
		}
		if backing := strings.TrimSpace(string(b)); within(backing, dir) {
			dev := filepath.Base(filepath.Dir(filepath.Dir(p)))
			leaks = append(leaks, fmt.Sprintf("loop device /dev/%s backed by %s", dev, backing))
		}
	}

	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Field 5 is the mount point (proc(5)), octal-escaped.
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && within(unescapeMountinfo(fields[4]), dir) {
			leaks = append(leaks, "mount at "+fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}

	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return nil, err
	}
	self := fmt.Sprintf("/proc/%d/", os.Getpid())
	for _, p := range procs {
		if strings.HasPrefix(p, self) {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		if cmdline := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cmdline, dir+"/") {
			leaks = append(leaks, fmt.Sprintf("process %s: %s", filepath.Base(filepath.Dir(p)), truncate(cmdline, 160)))
		}
	}

	if _, err := os.Stat(dir); err == nil {
		leaks = append(leaks, "work dir "+dir)
	}
	return leaks, nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// unescapeMountinfo undoes the octal escapes (\040 for space etc.) of
// mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
