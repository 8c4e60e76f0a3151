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
// says so once through logf and waits in flock(2) itself, queued with the
// `flock` commands waiting too (polling would lose every race to them),
// until it gets the lock or ctx ends. An empty path takes no lock. A
// process that runs under `flock` on the same file must not take it again:
// it would wait for itself.
func Lock(ctx context.Context, path string, logf func(string, ...any)) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("open lab lock %s: %w", path, err)
	}
	release := func() { f.Close() } // closing the last descriptor releases the lock
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return release, nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, fmt.Errorf("take lab lock %s: %w", path, err)
	}
	logf("waiting for the lab lock %s (another lab run holds it)", path)
	start := time.Now()
	got := make(chan error, 1)
	go func() {
		// A blocking flock(2) cannot be interrupted; when the wait is
		// given up, the lock, once had, is let go at once below.
		for {
			err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				got <- err
				return
			}
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("take lab lock %s: %w", path, err)
		}
		logf("got the lab lock after %s", time.Since(start).Round(time.Second))
		return release, nil
	case <-ctx.Done():
		go func() {
			<-got
			f.Close()
		}()
		return nil, fmt.Errorf("wait for lab lock %s: %w", path, ctx.Err())
	}
}
