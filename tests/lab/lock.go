package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// LockPath is the lab lock: everything that boots guests on a shared
// machine takes it, so that one lab run at a time has the CPUs
// (`flock /var/tmp/fspair-lab.lock <command>` from a shell).
const LockPath = "/var/tmp/fspair-lab.lock"

// Lock takes the lab lock at path (flock(2), as `flock path cmd` does) and
// returns the function that releases it. While another holder has it, Lock
// says so once through logf and waits, polling, until ctx ends. An empty
// path takes no lock. A process that runs under `flock` on the same file
// must not take it again: it would wait for itself.
func Lock(ctx context.Context, path string, logf func(string, ...any)) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("open lab lock %s: %w", path, err)
	}
	waiting := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("take lab lock %s: %w", path, err)
		}
		if !waiting {
			logf("waiting for the lab lock %s (another lab run holds it)", path)
			waiting = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for lab lock %s: %w", path, ctx.Err())
		case <-time.After(5 * time.Second):
		}
	}
	return func() { f.Close() }, nil // closing the last descriptor releases the lock
}
