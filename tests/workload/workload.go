package workload

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// Workload names one of the modelled Filebench personalities, spelt as the
// knowledge base (shared/kdb/published-findings.yaml, `workloads`) spells
// it.
type Workload string

// The four personalities of the knowledge base.
const (
	Web        Workload = "web"        // webserver.f
	Mail       Workload = "mail"       // varmail.f
	Fileserver Workload = "fileserver" // fileserver.f
	RFA        Workload = "rfa"        // randomfileaccess.f
)

// Workloads lists the personalities in the knowledge base's order.
var Workloads = []Workload{Web, Mail, Fileserver, RFA}

// ErrUnknownWorkload is wrapped by the errors for a name that is not one
// of Workloads.
var ErrUnknownWorkload = errors.New("unknown workload")

// ParseWorkload returns the workload named s: one of Workloads, or a
// variant of one, CLASS-NAME, that has a job file jobs/CLASS-NAME.fio (the
// held-out validation set of the classifier, see Variants), or one of Apps.
func ParseWorkload(s string) (Workload, error) {
	for _, w := range Workloads {
		if string(w) == s {
			return w, nil
		}
	}
	for _, v := range Variants() {
		if string(v) == s {
			return v, nil
		}
	}
	if a, ok := FindApp(Workload(s)); ok {
		return a.Workload, nil
	}
	return "", fmt.Errorf("%w %q: want web, mail, fileserver, rfa, a variant (%s) or an app (%s)",
		ErrUnknownWorkload, s, joinWorkloads(Variants(), ", "), joinWorkloads(AppWorkloads(), ", "))
}

// Class returns the workload class w belongs to: w itself for one of
// Workloads, CLASS for a variant or an app CLASS-NAME.
func (w Workload) Class() Workload {
	c, _, _ := strings.Cut(string(w), "-")
	return Workload(c)
}

// Variants lists the variants of the four workloads, the job files
// jobs/CLASS-NAME.fio, sorted. Each varies what deployments of its class
// vary (threads, file sizes, fsync frequency, read/write mix, cache hit
// rate) and none was used to set the classifier's thresholds: they are its
// held-out set.
func Variants() []Workload {
	entries, _ := jobFiles.ReadDir("jobs")
	var out []Workload
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".fio")
		if w := Workload(name); w.Class() != w {
			for _, c := range Workloads {
				if w.Class() == c {
					out = append(out, w)
				}
			}
		}
	}
	return out
}

func joinWorkloads(ws []Workload, sep string) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = string(w)
	}
	return strings.Join(s, sep)
}

//go:embed jobs/*.fio
var jobFiles embed.FS

// Job returns the text of jobs/<w>.fio. The job takes DIR (the directory
// of its files) and RUNTIME (seconds) from the environment.
func Job(w Workload) (string, error) {
	b, err := jobFiles.ReadFile("jobs/" + string(w) + ".fio")
	if err != nil {
		return "", fmt.Errorf("fio job for %s: %w: %v", w, ErrUnknownWorkload, err)
	}
	return string(b), nil
}

// MountPoint is where Mount mounts the guest file system in the guest;
// each workload keeps its files in a directory named after it below.
const MountPoint = "/mnt/workload"

// Dir returns the guest directory of w's files.
func Dir(w Workload) string { return path.Join(MountPoint, string(w)) }

// Pair is a guest file system on a host file system with an image format
// and cache mode: what the knowledge base rates per workload (guest/host).
type Pair struct {
	GuestFS string // ext4, xfs or btrfs, made in the image on the host
	HostFS  string // ext4, xfs or btrfs under the image file
	Format  string // raw or qcow2
	Cache   string // QEMU cache mode; "" is none (with aio=native)
}

// String spells the pair guest/host/format, with the cache mode appended
// when it is not none: "ext4/xfs/raw", "xfs/ext4/qcow2/writeback".
func (p Pair) String() string {
	s := p.GuestFS + "/" + p.HostFS + "/" + p.Format
	if p.Cache != "" && p.Cache != "none" {
		s += "/" + p.Cache
	}
	return s
}

// ParsePair parses what String prints.
func ParsePair(s string) (Pair, error) {
	f := strings.Split(s, "/")
	if len(f) != 3 && len(f) != 4 {
		return Pair{}, fmt.Errorf("parse pair %q: want guest/host/format[/cache]", s)
	}
	p := Pair{GuestFS: f[0], HostFS: f[1], Format: f[2], Cache: "none"}
	if len(f) == 4 {
		p.Cache = f[3]
	}
	for _, fs := range []string{p.GuestFS, p.HostFS} {
		if fs != "ext4" && fs != "xfs" && fs != "btrfs" {
			return Pair{}, fmt.Errorf("parse pair %q: file system %q: want ext4, xfs or btrfs", s, fs)
		}
	}
	if p.Format != "raw" && p.Format != "qcow2" {
		return Pair{}, fmt.Errorf("parse pair %q: format %q: want raw or qcow2", s, p.Format)
	}
	return p, nil
}

// aio is the QEMU aio mode used with the pair's cache mode: native needs
// O_DIRECT (cache=none or directsync); the others use the thread pool.
func (p Pair) aio() string {
	if p.Cache == "" || p.Cache == "none" || p.Cache == "directsync" {
		return "native"
	}
	return "threads"
}

// MakeDisk makes the image of pair p as id.<format> on h (with p.GuestFS
// made on the host, since the guest has no mkfs) and returns the disk to
// boot with. sizeMiB should be at least 1024: smaller btrfs file systems
// switch to mixed block groups and behave unlike production ones.
func MakeDisk(ctx context.Context, h *lab.HostFS, p Pair, id string, sizeMiB int) (lab.DiskConfig, error) {
	if h.Type != p.HostFS {
		return lab.DiskConfig{}, fmt.Errorf("make disk %s: pair %s wants host fs %s, got %s", id, p, p.HostFS, h.Type)
	}
	file := h.Path(id + "." + p.Format)
	if err := lab.MakeImage(ctx, file, p.Format, p.GuestFS, sizeMiB); err != nil {
		return lab.DiskConfig{}, fmt.Errorf("make disk %s: %w", id, err)
	}
	cache := p.Cache
	if cache == "" {
		cache = "none"
	}
	return lab.DiskConfig{ID: id, File: file, Format: p.Format, Cache: cache, AIO: p.aio()}, nil
}

// Mount mounts the guest file system on /dev/<guestDev> at MountPoint,
// with the file system's default options (relatime), as the studies ran.
func Mount(ctx context.Context, vm *lab.VM, guestDev, guestFS string) error {
	return MountWith(ctx, vm, guestDev, guestFS, "")
}

// CheckMountOptions refuses mount options the guest's shell would not
// pass to mount as one word.
func CheckMountOptions(options string) error {
	if strings.ContainsAny(options, " \t\n'\"\\;&|$`<>(){}*?[]#~") {
		return fmt.Errorf("mount options %q: want a comma-separated list (mount -o) without blanks or shell characters", options)
	}
	return nil
}

// MountWith is Mount with mount options (mount -o; "" for the defaults).
func MountWith(ctx context.Context, vm *lab.VM, guestDev, guestFS, options string) error {
	if err := CheckMountOptions(options); err != nil {
		return err
	}
	opt := ""
	if options != "" {
		opt = " -o " + options
	}
	if _, err := vm.RunOK(ctx, fmt.Sprintf("mkdir -p %s && mount -t %s%s /dev/%s %s", MountPoint, guestFS, opt, guestDev, MountPoint)); err != nil {
		return fmt.Errorf("mount %s (options %q) on /dev/%s: %w", guestFS, options, guestDev, err)
	}
	return nil
}

// Unmount unmounts MountPoint, writing everything back first.
func Unmount(ctx context.Context, vm *lab.VM) error {
	if _, err := vm.RunOK(ctx, "umount "+MountPoint); err != nil {
		return fmt.Errorf("unmount %s: %w", MountPoint, err)
	}
	return nil
}

// Prepare lays out w's files in Dir(w) (fio --create_only, Filebench's
// preallocation), removing what an earlier run left, then writes
// everything back and drops the guest's caches, so that the run starts
// from the disk with nothing pending.
func Prepare(ctx context.Context, vm *lab.VM, w Workload) error {
	job, err := Job(w)
	if err != nil {
		return err
	}
	dir := Dir(w)
	if _, err := vm.RunOK(ctx, fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s", dir)); err != nil {
		return fmt.Errorf("prepare %s: %w", w, err)
	}
	if _, err := vm.Fio(ctx, lab.FioJob{File: job, Args: []string{"--create_only=1"},
		Env: map[string]string{"DIR": dir, "RUNTIME": "1"}}); err != nil {
		return fmt.Errorf("prepare %s: lay out files: %w", w, err)
	}
	return settle(ctx, vm)
}

// settle writes back dirty data (sync(2) commits every file system's
// journal or transaction) and drops the page, dentry and inode caches
// (Documentation/admin-guide/sysctl/vm.rst, drop_caches).
func settle(ctx context.Context, vm *lab.VM) error {
	if _, err := vm.RunOK(ctx, "sync && echo 3 >/proc/sys/vm/drop_caches"); err != nil {
		return fmt.Errorf("sync and drop caches: %w", err)
	}
	return nil
}

// Run runs w for runtime (whole seconds, at least 1) on the files
// Prepare laid out, and returns fio's result. It blocks for the run; scrape
// the exporter from another goroutine meanwhile.
func Run(ctx context.Context, vm *lab.VM, w Workload, runtime time.Duration) (*lab.FioResult, error) {
	job, err := Job(w)
	if err != nil {
		return nil, err
	}
	secs := int(runtime.Round(time.Second) / time.Second)
	if secs < 1 {
		return nil, fmt.Errorf("run %s: runtime %s: want at least 1s", w, runtime)
	}
	// fio needs a few seconds to start and to stop under TCG.
	ctx, cancel := context.WithTimeout(ctx, runtime+2*time.Minute)
	defer cancel()
	res, err := vm.Fio(ctx, lab.FioJob{File: job, Env: map[string]string{"DIR": Dir(w), "RUNTIME": fmt.Sprint(secs)}})
	if err != nil {
		return res, fmt.Errorf("run %s: %w", w, err)
	}
	return res, nil
}

// Clean removes w's files and writes the removal back.
func Clean(ctx context.Context, vm *lab.VM, w Workload) error {
	if _, err := vm.RunOK(ctx, fmt.Sprintf("rm -rf %s && sync", Dir(w))); err != nil {
		return fmt.Errorf("clean %s: %w", w, err)
	}
	return nil
}
