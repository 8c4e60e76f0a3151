package lab

import (
	"bufio"
	"context"
	"embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// kitFiles are the scripts that build the kit and run inside the guest.
// They are embedded so BuildKit works from any working directory and from
// binaries built out of this package.
//
//go:embed kit.sh guest-init.sh lab-ctl.sh
var kitFiles embed.FS

// Kit is a kernel and initramfs ready to boot.
type Kit struct {
	Dir       string // the kit directory inside the cache
	Kernel    string // bzImage path
	Initramfs string // gzip-compressed cpio path
	KernelVer string // uname -r of the guest kernel, e.g. 6.1.0-50-cloud-amd64
	KernelPkg string // Debian package the kernel came from
}

// DefaultCacheDir is where kits are cached unless FSPAIR_LAB_CACHE says
// otherwise. It lives under /var/tmp so it survives reboots and is easy to
// keep between CI runs.
func DefaultCacheDir() string {
	if d := os.Getenv("FSPAIR_LAB_CACHE"); d != "" {
		return d
	}
	return "/var/tmp/fspair-lab-cache"
}

// BuildKit builds the guest kit in cacheDir, or reuses a complete one built
// from the same inputs. Stage names and elapsed times go to progress (which
// may be nil). The first build downloads the kernel package with apt-get and
// takes a few seconds; a cached kit is returned at once.
func BuildKit(ctx context.Context, cacheDir string, progress io.Writer) (*Kit, error) {
	if progress == nil {
		progress = io.Discard
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("create kit cache %s: %w", cacheDir, err)
	}
	scripts, err := os.MkdirTemp(cacheDir, "scripts.")
	if err != nil {
		return nil, fmt.Errorf("create kit script dir: %w", err)
	}
	defer os.RemoveAll(scripts)
	for _, name := range []string{"kit.sh", "guest-init.sh", "lab-ctl.sh"} {
		b, err := kitFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read embedded %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(scripts, name), b, 0o755); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}

	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(scripts, "kit.sh"), cacheDir)
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("build kit with kit.sh (output above on the progress writer): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	kit, err := loadKit(dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "lab: [%6.1fs] kit %s (kernel %s)\n", time.Since(start).Seconds(), kit.Dir, kit.KernelVer)
	return kit, nil
}

// loadKit reads a complete kit directory written by kit.sh.
func loadKit(dir string) (*Kit, error) {
	if _, err := os.Stat(filepath.Join(dir, "COMPLETE")); err != nil {
		return nil, fmt.Errorf("kit %s is incomplete: %w", dir, err)
	}
	f, err := os.Open(filepath.Join(dir, "kit.env"))
	if err != nil {
		return nil, fmt.Errorf("open kit description: %w", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kit description: %w", err)
	}
	kit := &Kit{
		Dir:       dir,
		Kernel:    filepath.Join(dir, "vmlinuz"),
		Initramfs: filepath.Join(dir, "initramfs.img"),
		KernelVer: env["KVER"],
		KernelPkg: env["KERNEL_PKG"],
	}
	for _, p := range []string{kit.Kernel, kit.Initramfs} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("kit file missing: %w", err)
		}
	}
	if kit.KernelVer == "" {
		return nil, fmt.Errorf("kit %s names no kernel version", dir)
	}
	return kit, nil
}
