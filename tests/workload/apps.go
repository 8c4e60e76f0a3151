package workload

import (
	"context"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// An App is a workload of real programs rather than a fio model: a web
// server, a mail delivery agent, a file-server load generator. It is named
// like a variant, CLASS-NAME, and is held out like one (no app set the
// classifier's thresholds). Its script apps/NAME.sh runs in the guest as
// `sh NAME.sh prepare|run|clean` with DIR, RUNTIME and FILES in the
// environment; the programs the kit lacks come from the tools disk
// (AppsDisk), mounted read-only at AppsMount.
type App struct {
	Workload Workload
	// Script names apps/<Script>.sh; "" is the workload's name.
	Script string
	// Env is more environment for the script.
	Env map[string]string
	// Programs are host programs the script runs, bundled onto the tools
	// disk with every library they load (their Debian packages are in
	// tests/lab/packages.txt).
	Programs []string
	// Files are host data files the script reads, at data/<base name> on
	// the tools disk.
	Files []string
	// WebFiles, when above 0, is the size in files of the site the guest
	// serves on port 80; the requests come from the host (TestMeasure
	// runs k6 through a port forward).
	WebFiles int
}

// Apps are the real-program workloads, for each class where Debian has a
// program that does the class's I/O (random file access has none: its
// variants are fio models).
var Apps = []App{
	{Workload: "fileserver-dbench", Programs: []string{"dbench"}, Files: []string{"/usr/share/dbench/client.txt"}},
	// The same with 160 MiB of the guest's memory taken (BALLAST_MIB, a
	// tmpfs file, as the server's other programs' memory would be): of
	// the ~210 MiB the booted guest has available, ~50 MiB are left for
	// the page cache, too little for dbench's trees, so its reads reach
	// the disk: a file server whose documents outgrow its memory.
	{Workload: "fileserver-dbench-tight", Script: "fileserver-dbench", Programs: []string{"dbench"},
		Files: []string{"/usr/share/dbench/client.txt"}, Env: map[string]string{"BALLAST_MIB": "160"}},
	{Workload: "mail-safecat", Programs: []string{"safecat"}},
	{Workload: "web-httpd", WebFiles: 30000},
}

// AppWorkloads lists the Apps' workloads.
func AppWorkloads() []Workload {
	out := make([]Workload, len(Apps))
	for i, a := range Apps {
		out[i] = a.Workload
	}
	return out
}

// AppGuestMemMiB is the memory of a guest that runs Apps: less than the fio
// runs' 512 MiB, so that the stores the apps lay out (about 420 MB, du in
// the guest) are about twice what its page cache holds (the kit's
// initramfs keeps ~100 MB of its memory) and the apps read the disk, as
// servers whose data outgrows their memory do. The fio models get there by dropping their files from the
// cache instead. (256 MiB is too little to unpack the kit.)
const AppGuestMemMiB = 384

// AppsMount is where the guest mounts the tools disk; AppsSerial is the
// disk's virtio serial, by which the guest finds it.
const (
	AppsMount  = "/opt/apps"
	AppsSerial = "fspair-apps"
)

//go:embed apps/*.sh
var appScripts embed.FS

// FindApp returns the App of w, and false if w is not one.
func FindApp(w Workload) (App, bool) {
	for _, a := range Apps {
		if a.Workload == w {
			return a, true
		}
	}
	return App{}, false
}

// AppsDisk stages every App's programs, data files and scripts and an
// env.sh (PATH and LD_LIBRARY_PATH for the bundle) under workDir, and
// writes them into a read-only ext4 disk for the guest.
func AppsDisk(ctx context.Context, workDir string) (lab.DiskConfig, error) {
	stage := filepath.Join(workDir, "apps-disk")
	tools := filepath.Join(stage, "tools")
	var programs []string
	for _, a := range Apps {
		programs = append(programs, a.Programs...)
		for _, f := range a.Files {
			if err := copyTo(f, filepath.Join(stage, "data", filepath.Base(f))); err != nil {
				return lab.DiskConfig{}, fmt.Errorf("apps disk: data of %s (install its package, tests/lab/packages.txt): %w", a.Workload, err)
			}
		}
	}
	if err := lab.Bundle(ctx, tools, programs...); err != nil {
		return lab.DiskConfig{}, fmt.Errorf("apps disk (install the programs' packages, tests/lab/packages.txt): %w", err)
	}
	libs, err := lab.BundleLibraryPath(tools, filepath.Join(AppsMount, "tools"))
	if err != nil {
		return lab.DiskConfig{}, err
	}
	env := fmt.Sprintf("# Sourced by the app scripts: the bundled programs and their libraries.\n"+
		"export PATH=%s:/usr/bin:/usr/sbin\nexport LD_LIBRARY_PATH=%s\n", filepath.Join(AppsMount, "tools", "usr", "bin"), libs)
	if err := os.WriteFile(filepath.Join(stage, "env.sh"), []byte(env), 0o644); err != nil {
		return lab.DiskConfig{}, fmt.Errorf("apps disk: %w", err)
	}
	for _, a := range Apps {
		b, err := appScripts.ReadFile("apps/" + a.script() + ".sh")
		if err != nil {
			return lab.DiskConfig{}, fmt.Errorf("apps disk: script of %s: %w", a.Workload, err)
		}
		if err := writeFile(filepath.Join(stage, "apps", a.script()+".sh"), b); err != nil {
			return lab.DiskConfig{}, fmt.Errorf("apps disk: %w", err)
		}
	}
	return lab.DataDisk(ctx, stage, filepath.Join(workDir, "apps.img"), AppsSerial)
}

func copyTo(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeFile(dst, b)
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// MountApps mounts the tools disk read-only at AppsMount in the guest.
func MountApps(ctx context.Context, vm *lab.VM) error {
	dev, err := vm.GuestDevice(ctx, AppsSerial)
	if err != nil {
		return fmt.Errorf("mount the tools disk: %w", err)
	}
	if _, err := vm.RunOK(ctx, fmt.Sprintf("mkdir -p %[1]s && mount -o ro -t ext4 /dev/%[2]s %[1]s", AppsMount, dev)); err != nil {
		return fmt.Errorf("mount the tools disk /dev/%s at %s: %w", dev, AppsMount, err)
	}
	return nil
}

func (a App) script() string {
	if a.Script != "" {
		return a.Script
	}
	return string(a.Workload)
}

// step runs the app's script with verb in the guest.
func (a App) step(ctx context.Context, vm *lab.VM, verb string, runtime time.Duration) error {
	env := ""
	for _, k := range sortedKeys(a.Env) {
		env += fmt.Sprintf("%s=%s ", k, a.Env[k])
	}
	cmd := fmt.Sprintf("%sDIR=%s RUNTIME=%d FILES=%d sh %s/apps/%s.sh %s",
		env, Dir(a.Workload), int(runtime.Round(time.Second)/time.Second), a.WebFiles, AppsMount, a.script(), verb)
	if out, err := vm.RunOK(ctx, cmd); err != nil {
		return fmt.Errorf("%s %s: %w: %s", a.Workload, verb, err, strings.TrimSpace(out))
	}
	return nil
}

// RunAppPhase prepares a (from an empty directory, then written back with
// the guest's caches dropped) and runs it for runtime while rec records,
// tagging the scrapes as RunPhase does; load, if not nil, is the host's
// side of the run (the requests of a server app), started with the guest's
// and given the same runtime. The phase has no fio summary and no guest
// write amplification (the app's own bytes are not counted).
func RunAppPhase(ctx context.Context, vm *lab.VM, rec *Recorder, a App, runtime time.Duration,
	load func(context.Context, time.Duration) error) (*Phase, error) {
	w := a.Workload
	prepare := func() error {
		if _, err := vm.RunOK(ctx, fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s", Dir(w))); err != nil {
			return fmt.Errorf("prepare %s: %w", w, err)
		}
		if err := a.step(ctx, vm, "prepare", runtime); err != nil {
			return err
		}
		if err := settle(ctx, vm); err != nil {
			return fmt.Errorf("prepare %s: %w", w, err)
		}
		return nil
	}
	run := func() error {
		ctx, cancel := context.WithTimeout(ctx, runtime+3*time.Minute)
		defer cancel()
		loadErr := make(chan error, 1)
		if load != nil {
			go func() { loadErr <- load(ctx, runtime) }()
		} else {
			loadErr <- nil
		}
		err := a.step(ctx, vm, "run", runtime)
		if lerr := <-loadErr; err == nil && lerr != nil {
			err = fmt.Errorf("%s: the host's load: %w", w, lerr)
		}
		return err
	}
	return recordPhase(ctx, vm, rec, w, runtime, prepare, run)
}

// CleanApp stops what the app left running and removes its files.
func CleanApp(ctx context.Context, vm *lab.VM, a App) error {
	if err := a.step(ctx, vm, "clean", 0); err != nil {
		return err
	}
	return Clean(ctx, vm, a.Workload)
}
