package main

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fspair/fspair/tests/lab"
)

// The data disk: a read-only ext4 image, made on the host with mke2fs -d,
// that the guests mount at guestRoot. It carries what the runs execute
// (the static exporter and probe test binary, host tools with their
// libraries) and what they read (exporter configurations, fio jobs).
const (
	guestRoot = "/opt/fspair"
	// dataSerial is the data disk's virtio serial, by which the guest
	// finds it.
	dataSerial = "fspair-data"
)

// Paths inside the data disk (relative to guestRoot).
const (
	exporterBin  = "bin/fspair_exporter"
	probeTestBin = "bin/probe.test"
	getppidBin   = "bin/getppid"
	floorBin     = "bin/floor"      // bench/floor, which holds the bench's empty pair attached
	pairObject   = "bin/pair.bpf.o" // bench/floor/bpf/pair.bpf.c compiled
	toolsDir     = "tools"
	envFile      = "env.sh"
)

// probeTools are the host programs exporter/probe's tests run (they make
// file systems on loop devices); busybox has losetup, but not --show.
var probeTools = []string{"mkfs.ext4", "mkfs.xfs", "mkfs.btrfs", "btrfs", "losetup"}

// benchTools are libbpf-tools' programs the overhead bench runs beside the
// workloads (Debian's libbpf-tools package).
var benchTools = []string{"biolatency", "biopattern", "bitesize"}

// Payload is a data disk being assembled in Dir and then written to Image.
type Payload struct {
	Dir   string // staging directory, the disk's root
	Image string // the ext4 image, once Make ran
}

// NewPayload builds the static exporter and probe test binary into a new
// staging directory under workDir, checks that both are static, and bundles
// the probe tests' tools. extraTools are more host programs to bundle.
func NewPayload(ctx context.Context, workDir string, extraTools []string, logf func(string, ...any)) (*Payload, error) {
	dir := filepath.Join(workDir, "data")
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, fmt.Errorf("create data disk staging dir: %w", err)
	}
	p := &Payload{Dir: dir, Image: filepath.Join(workDir, "data.img")}
	logf("build the static exporter and probe test binary (CGO_ENABLED=0)")
	builds := [][]string{
		{"build", "-o", p.Path(exporterBin), "github.com/fspair/fspair/exporter"},
		{"test", "-c", "-o", p.Path(probeTestBin), "github.com/fspair/fspair/exporter/probe"},
	}
	for _, args := range builds {
		if err := goTool(ctx, args...); err != nil {
			return nil, err
		}
	}
	for _, bin := range []string{exporterBin, probeTestBin} {
		if err := checkStatic(p.Path(bin)); err != nil {
			return nil, err
		}
	}
	tools := append(append([]string{}, probeTools...), extraTools...)
	logf("bundle %s with their libraries", strings.Join(tools, ", "))
	if err := lab.Bundle(ctx, p.Path(toolsDir), tools...); err != nil {
		return nil, err
	}
	// mke2fs reads its defaults from /etc/mke2fs.conf, which the guest
	// lacks; MKE2FS_CONFIG points it at the host's.
	if err := copyFile("/etc/mke2fs.conf", p.Path(toolsDir, "etc", "mke2fs.conf")); err != nil {
		return nil, fmt.Errorf("bundle mke2fs.conf (apt-get install e2fsprogs): %w", err)
	}
	libs, err := lab.BundleLibraryPath(p.Path(toolsDir), guestPath(toolsDir))
	if err != nil {
		return nil, err
	}
	env := fmt.Sprintf("# Sourced by the runs: the bundled tools and their libraries.\n"+
		"export PATH=%s:%s:/usr/bin:/usr/sbin\nexport LD_LIBRARY_PATH=%s\nexport MKE2FS_CONFIG=%s\n",
		guestPath("bin"), guestPath(toolsDir, "usr", "bin"), libs, guestPath(toolsDir, "etc", "mke2fs.conf"))
	if err := os.WriteFile(p.Path(envFile), []byte(env), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", envFile, err)
	}
	return p, nil
}

// Path returns the host path of a file on the data disk.
func (p *Payload) Path(rel ...string) string {
	return filepath.Join(append([]string{p.Dir}, rel...)...)
}

// guestPath returns where the guest sees a file of the data disk.
func guestPath(rel ...string) string {
	return filepath.Join(append([]string{guestRoot}, rel...)...)
}

// WriteFile adds a file to the data disk.
func (p *Payload) WriteFile(rel string, data []byte) error {
	path := p.Path(rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("add %s to the data disk: %w", rel, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("add %s to the data disk: %w", rel, err)
	}
	return nil
}

// Make writes the staging directory into an ext4 image and returns its
// disk for the guest (read-only).
func (p *Payload) Make(ctx context.Context) (lab.DiskConfig, error) {
	return lab.DataDisk(ctx, p.Dir, p.Image, dataSerial)
}

// goTool runs the go tool for a static (CGO_ENABLED=0) build.
func goTool(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// errNotStatic is wrapped by checkStatic's error for a dynamically linked
// binary: the guest has only the C library of the kit's fio.
var errNotStatic = errors.New("not a static executable")

// checkStatic fails unless path is an ELF executable with no program
// interpreter and no shared libraries (what CGO_ENABLED=0 should give).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("check %s is static: %w", path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: %w (it has a program interpreter)", path, errNotStatic)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("check %s is static: %w", path, err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s: %w (needs %s)", path, errNotStatic, strings.Join(libs, ", "))
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// buildGetppid compiles the getppid timing loop (getppid.c, embedded) with
// gcc -static into the data disk.
func (p *Payload) buildGetppid(ctx context.Context) error {
	src := p.Path("src", "getppid.c")
	if err := p.WriteFile("src/getppid.c", getppidSource); err != nil {
		return err
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		return fmt.Errorf("build getppid: gcc not found (apt-get install gcc libc6-dev): %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "gcc", "-static", "-O2", "-Wall", "-o", p.Path(getppidBin), src)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("gcc -static getppid.c: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return checkStatic(p.Path(getppidBin))
}

// buildFloor builds bench/floor (static) and compiles the empty
// fentry+fexit pair it holds for the bench's empty-pair variant
// (bench/floor/bpf/pair.bpf.c, with clang as make generate uses it).
func (p *Payload) buildFloor(ctx context.Context) error {
	if err := goTool(ctx, "build", "-o", p.Path(floorBin), "github.com/fspair/fspair/bench/floor"); err != nil {
		return err
	}
	if err := checkStatic(p.Path(floorBin)); err != nil {
		return err
	}
	src, err := repoFile("bench/floor/bpf/pair.bpf.c")
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "clang", "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-mcpu=v3", "-c", src, "-o", p.Path(pairObject))
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("clang pair.bpf.c (apt-get install clang libbpf-dev): %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// repoFile finds a file of the repository from the working directory (the
// repository's root under make, tests/matrix under go test).
func repoFile(rel string) (string, error) {
	for _, dir := range []string{".", "../.."} {
		path := filepath.Join(dir, rel)
		if _, err := os.Stat(path); err == nil {
			return filepath.Abs(path)
		}
	}
	return "", fmt.Errorf("%s not found from the working directory: run from the repository's root", rel)
}
