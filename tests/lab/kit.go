package lab

import (
	"bufio"
	"context"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// kitFiles are the scripts that build the kit and run inside the guest,
// and the one that builds Filebench (filebench.go). They are embedded so
// BuildKit works from any working directory and from binaries built out of
// this package.
//
//go:embed kit.sh bundle.sh guest-init.sh lab-ctl.sh filebench.sh
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
// takes a few seconds; a cached kit is returned at once. The kernel is
// kit.sh's pinned one, or FSPAIR_LAB_KERNEL_PKG's.
func BuildKit(ctx context.Context, cacheDir string, progress io.Writer) (*Kit, error) {
	return BuildKitFor(ctx, cacheDir, "", progress)
}

// BuildKitFor is BuildKit for the Debian kernel package kernelPkg (e.g.
// linux-image-6.12.117+deb12-cloud-amd64); empty means BuildKit's kernel.
// Each kernel gets its own kit, and its package is cached beside the kits.
func BuildKitFor(ctx context.Context, cacheDir, kernelPkg string, progress io.Writer) (*Kit, error) {
	if progress == nil {
		progress = io.Discard
	}
	var env []string
	if kernelPkg != "" {
		env = []string{"FSPAIR_LAB_KERNEL_PKG=" + kernelPkg}
	}
	start := time.Now()
	dir, err := runCacheScript(ctx, cacheDir, progress, env, "kit.sh", cacheDir)
	if err != nil {
		return nil, fmt.Errorf("build kit with kit.sh (output above on the progress writer): %w", err)
	}
	kit, err := loadKit(dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "lab: [%6.1fs] kit %s (kernel %s)\n", time.Since(start).Seconds(), kit.Dir, kit.KernelVer)
	return kit, nil
}

// runCacheScript runs one of the embedded build scripts with args (and
// env added to the environment), its stderr going to progress, and
// returns the last line it printed on stdout: the directory it built or
// reused in cacheDir.
func runCacheScript(ctx context.Context, cacheDir string, progress io.Writer, env []string, script string, args ...string) (string, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create kit cache %s: %w", cacheDir, err)
	}
	scripts, err := writeScripts(cacheDir)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scripts)
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(scripts, script)}, args...)...)
	cmd.Stderr = progress
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// loadKit reads a complete kit directory written by kit.sh.
func loadKit(dir string) (*Kit, error) {
	env, err := readBuildEnv(dir, "kit.env", "kit")
	if err != nil {
		return nil, err
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

// readBuildEnv reads the KEY=VALUE description file name of a build
// directory that its script completed (it writes COMPLETE last); what
// names the build in errors.
func readBuildEnv(dir, name, what string) (map[string]string, error) {
	if _, err := os.Stat(filepath.Join(dir, "COMPLETE")); err != nil {
		return nil, fmt.Errorf("%s %s is incomplete: %w", what, dir, err)
	}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("open %s description: %w", what, err)
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
		return nil, fmt.Errorf("read %s description: %w", what, err)
	}
	return env, nil
}

// writeScripts writes the embedded scripts into a new directory under dir
// (kit.sh runs its siblings from its own directory).
func writeScripts(dir string) (string, error) {
	scripts, err := os.MkdirTemp(dir, "scripts.")
	if err != nil {
		return "", fmt.Errorf("create kit script dir: %w", err)
	}
	for _, name := range []string{"kit.sh", "bundle.sh", "guest-init.sh", "lab-ctl.sh", "filebench.sh"} {
		b, err := kitFiles.ReadFile(name)
		if err == nil {
			err = os.WriteFile(filepath.Join(scripts, name), b, 0o755)
		}
		if err != nil {
			os.RemoveAll(scripts)
			return "", fmt.Errorf("write %s: %w", name, err)
		}
	}
	return scripts, nil
}

// Bundle copies host programs (names on PATH or paths), each with every
// shared library it loads, into root the way the kit holds fio: programs in
// root/usr/bin, libraries at their host paths under root (bundle.sh). A
// guest runs them with LD_LIBRARY_PATH set to BundleLibraryPath's answer.
func Bundle(ctx context.Context, root string, programs ...string) error {
	tmp, err := os.MkdirTemp("", "fspair-bundle.")
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	defer os.RemoveAll(tmp)
	scripts, err := writeScripts(tmp)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	out, err := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(scripts, "bundle.sh"), root}, programs...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bundle %s into %s: %w: %s", strings.Join(programs, " "), root, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// BundleLibraryPath returns the LD_LIBRARY_PATH for a bundle made in root
// and seen by the guest at guestRoot: every directory under it that holds
// a shared library, in a fixed order.
func BundleLibraryPath(root, guestRoot string) (string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(d.Name(), ".so") {
			return err
		}
		dir, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		if dir = filepath.Join(guestRoot, dir); !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("list bundle libraries in %s: %w", root, err)
	}
	slices.Sort(dirs)
	return strings.Join(dirs, ":"), nil
}
