package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Filebench is the workload generator the knowledge base's studies ran
// (shared/vendor/filebench/README.md). No package registry reachable here
// ships it, so the lab builds it from a source snapshot that lives beside
// the repository, never in it (CDDL; a lab tool, never shipped).

// FilebenchTarballName is the source snapshot the lab builds: Filebench
// 1.5 at commit 22620e6.
const FilebenchTarballName = "filebench-22620e6.tar.gz"

// FilebenchBinary is where the guest finds Filebench: it is built with
// prefix /usr/local because it loads its random-variable plugins from
// /usr/local/lib/filebench at run time.
const FilebenchBinary = "/usr/local/bin/filebench"

// FilebenchSetup is the guest command to run once before Filebench:
// Filebench 1.5's worker processes attach its shared memory and follow
// pointers into the master's binary at the master's addresses, and it
// turns address-space randomization off (personality(2)) only for the
// processes it execs, after the master was itself placed at random. With
// randomization on, the workers crash (a SIGSEGV at an address of the
// master's text) and the master waits for them for ever, after "Starting 1
// filereader instances": measured here. Lab guests only, so it is turned
// off for the whole guest.
const FilebenchSetup = "echo 0 >/proc/sys/kernel/randomize_va_space"

// ErrNoFilebenchTarball is returned by FindFilebenchTarball when the
// snapshot is not where it should be.
var ErrNoFilebenchTarball = errors.New("no Filebench source snapshot")

// FindFilebenchTarball returns the path of the Filebench snapshot:
// $FSPAIR_FILEBENCH_TARBALL if set, else shared/vendor/filebench/
// FilebenchTarballName beside the repository (../shared from its root,
// where CI's clone sees the shared directory), the root being the first
// directory at or above dir that holds go.mod.
func FindFilebenchTarball(dir string) (string, error) {
	if p := os.Getenv("FSPAIR_FILEBENCH_TARBALL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: FSPAIR_FILEBENCH_TARBALL=%s: %v", ErrNoFilebenchTarball, p, err)
		}
		return p, nil
	}
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("find the Filebench snapshot: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("%w: no go.mod at or above %s to find ../shared from", ErrNoFilebenchTarball, dir)
		}
		d = up
	}
	p := filepath.Join(filepath.Dir(d), "shared", "vendor", "filebench", FilebenchTarballName)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w at %s (the shared directory beside the repository), or set FSPAIR_FILEBENCH_TARBALL: %v", ErrNoFilebenchTarball, p, err)
	}
	return p, nil
}

// FilebenchBuild is a built Filebench (filebench.sh): an install tree
// with prefix /usr/local and the libraries it loads, packed as an
// initramfs archive to append to the kit's (VMConfig.Initramfs).
type FilebenchBuild struct {
	Dir           string // the build directory inside the cache
	Root          string // the install tree (Root/usr/local/bin/filebench ...)
	Initramfs     string // Root/usr as a gzip-compressed cpio archive
	Version       string // Filebench's own, e.g. 1.5-alpha3
	TarballSHA256 string // of the source snapshot it was built from
}

// BuildFilebench builds Filebench from tarball into cacheDir, or reuses a
// complete build of the same tarball and recipe (keyed by the tarball's
// sha256 and the build scripts' hash). A cold build took 58-89 s
// on 2 cores; a reused one is returned at once. Stage names go to
// progress (which may be nil); a failed step's log tail goes there too,
// and the error names the step.
func BuildFilebench(ctx context.Context, cacheDir, tarball string, progress io.Writer) (*FilebenchBuild, error) {
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	dir, err := runCacheScript(ctx, cacheDir, progress, nil, "filebench.sh", cacheDir, tarball)
	if err != nil {
		return nil, fmt.Errorf("build Filebench with filebench.sh (its messages are above on the progress writer): %w", err)
	}
	b, err := loadFilebench(dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "lab: [%6.1fs] Filebench %s in %s\n", time.Since(start).Seconds(), b.Version, b.Dir)
	return b, nil
}

// loadFilebench reads a complete build directory written by filebench.sh.
func loadFilebench(dir string) (*FilebenchBuild, error) {
	env, err := readBuildEnv(dir, "filebench.env", "Filebench build")
	if err != nil {
		return nil, err
	}
	b := &FilebenchBuild{
		Dir:           dir,
		Root:          filepath.Join(dir, "root"),
		Initramfs:     filepath.Join(dir, "filebench.cpio.gz"),
		Version:       env["VERSION"],
		TarballSHA256: env["TARBALL_SHA256"],
	}
	for _, p := range []string{b.Initramfs, filepath.Join(b.Root, FilebenchBinary)} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("the Filebench build lacks a file: %w", err)
		}
	}
	return b, nil
}

// joinInitramfs writes the kit's initramfs followed by the archives of
// extra into out. The kernel unpacks a concatenation of (compressed) cpio
// archives in order, a later file replacing an earlier one of the same
// name (Documentation/driver-api/early-userspace/buffer-format.rst).
func joinInitramfs(kit string, extra []string, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("join initramfs: %w", err)
	}
	for _, p := range append([]string{kit}, extra...) {
		in, err := os.Open(p)
		if err != nil {
			f.Close()
			return fmt.Errorf("join initramfs: %w", err)
		}
		_, err = io.Copy(f, in)
		in.Close()
		if err != nil {
			f.Close()
			return fmt.Errorf("join initramfs %s: %w", p, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("join initramfs: %w", err)
	}
	return nil
}
