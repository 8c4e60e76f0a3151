package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DiskConfig is one virtio-blk disk. The zero values of Cache, AIO and
// Discard are QEMU's defaults (writeback, threads, ignore).
type DiskConfig struct {
	ID      string // device id, e.g. "vd1"; the drive (block backend) is "drive-<ID>"
	File    string // image path
	Format  string // raw or qcow2
	Cache   string // none, writeback, writethrough, directsync or unsafe
	AIO     string // threads, native (needs a cache mode with direct I/O) or io_uring
	Discard string // unmap passes guest discards to the image; ignore drops them
	Serial  string // virtio-blk serial (at most 20 bytes); defaults to ID
	// ReadOnly opens the image read-only in QEMU; the guest sees a
	// read-only disk (virtio-blk VIRTIO_BLK_F_RO).
	ReadOnly bool
}

// Forward forwards a host TCP port on 127.0.0.1 to a guest port through
// QEMU's user-mode network.
type Forward struct {
	HostPort  int
	GuestPort int
}

// VMConfig describes a guest.
type VMConfig struct {
	Name        string        // -name guest=<Name>; default "fspairlab"
	Dir         string        // directory for the QMP socket and logs (created); required
	MemMiB      int           // default 512
	CPUs        int           // default 1
	Disks       []DiskConfig  // attached at start with -drive/-device
	Network     bool          // add a virtio-net NIC on user-mode networking
	HostFwd     []Forward     // implies Network
	KernelArgs  string        // appended to the kernel command line
	BootTimeout time.Duration // until the control shell answers; default 3 minutes
	Progress    io.Writer     // stage lines; may be nil

	// FspairQMP gives the exporter a QMP monitor of its own, declared on
	// the command line before the lab's (QEMU serves one client per
	// monitor, and the lab holds its own for the VM's life): VM.FspairQMP.
	FspairQMP bool

	// Initramfs are more initramfs archives, appended to the kit's for
	// this guest only (a tool only some runs need, such as
	// FilebenchBuild.Initramfs); their files land in the guest's root.
	Initramfs []string

	// HostCPUs, when set, pins QEMU (every thread: vCPUs, main loop, I/O
	// workers) to these host CPUs, a taskset(1) list such as "1" or
	// "0-1", for measurements that must not move between cores.
	HostCPUs string

	// ICount, when set, ties the guest's clock to the instructions it
	// executes instead of the host's wall clock (QEMU's -icount); nil
	// boots the guest as every lab user always has.
	ICount *ICount
}

// ICount is QEMU's -icount: guest time advances 2^Shift ns per guest
// instruction executed, so what a CPU-bound guest measures with its own
// clock depends on the instructions it runs, not on what else the host
// runs meanwhile (QEMU's documentation of -icount, "TCG Instruction
// Counting"). TCG models no caches: a cache miss costs the guest nothing,
// and neither does a cache line moving between CPUs.
type ICount struct {
	// Shift is 0 to MaxICountShift: 0 is 1 ns per instruction (a guest
	// second is a billion instructions, many seconds of the host's).
	Shift int
	// Sleep keeps the guest's clock running at real time while its CPU
	// idles (QEMU's sleep=on). Off, the clock jumps to the next timer
	// deadline as soon as the CPU idles: what the guest waits for (a
	// device's reply) then costs it no time it can measure.
	Sleep bool
}

// MaxICountShift is QEMU's MAX_ICOUNT_SHIFT (softmmu/icount.c): it
// refuses a larger shift.
const MaxICountShift = 10

// Arg is the -icount option, as QEMU gets it.
func (ic ICount) Arg() string {
	sleep := "off"
	if ic.Sleep {
		sleep = "on"
	}
	return fmt.Sprintf("shift=%d,sleep=%s", ic.Shift, sleep)
}

// VM is a running QEMU guest.
type VM struct {
	Name    string
	Dir     string
	Console string // kernel console (ttyS0) log
	Log     string // QEMU's own stderr
	// FspairQMP is the exporter's QMP socket (VMConfig.FspairQMP), "" if none.
	FspairQMP string

	cfg      VMConfig
	progress io.Writer
	started  time.Time
	cmd      *exec.Cmd
	con      *console
	qmp      *qmpClient
	ctlW     *os.File
	exited   chan struct{}
	exitErr  error

	mu    sync.Mutex
	disks map[string]*diskState

	stopOnce sync.Once
	stopErr  error
}

type diskState struct {
	cfg     DiskConfig
	node    string // blockdev node name of hot-plugged disks; "" for -drive disks
	plugged bool
}

// ErrVMExited is returned when QEMU exits while the lab waits for the guest.
var ErrVMExited = errors.New("qemu exited")

// qemuBinary is the emulator the lab runs; the guests are x86-64.
const qemuBinary = "qemu-system-x86_64"

func (d *DiskConfig) normalize() error {
	if d.ID == "" || strings.ContainsAny(d.ID, ",= /") {
		return fmt.Errorf("disk id %q: must be non-empty without ',', '=', ' ' or '/'", d.ID)
	}
	if d.File == "" || strings.Contains(d.File, ",") {
		return fmt.Errorf("disk %s: file %q must be non-empty without ','", d.ID, d.File)
	}
	switch d.Format {
	case "raw", "qcow2":
	default:
		return fmt.Errorf("disk %s: format %q: want raw or qcow2", d.ID, d.Format)
	}
	if d.Cache == "" {
		d.Cache = "writeback"
	}
	if _, ok := cacheModes[d.Cache]; !ok {
		return fmt.Errorf("disk %s: cache %q: want none, writeback, writethrough, directsync or unsafe", d.ID, d.Cache)
	}
	if d.AIO == "" {
		d.AIO = "threads"
	}
	switch d.AIO {
	case "threads", "io_uring":
	case "native":
		// QEMU refuses aio=native without O_DIRECT (block/file-posix.c).
		if !cacheModes[d.Cache].direct {
			return fmt.Errorf("disk %s: aio=native needs cache=none or directsync, not %s", d.ID, d.Cache)
		}
	default:
		return fmt.Errorf("disk %s: aio %q: want threads, native or io_uring", d.ID, d.AIO)
	}
	if d.Discard == "" {
		d.Discard = "ignore"
	}
	if d.Discard != "unmap" && d.Discard != "ignore" {
		return fmt.Errorf("disk %s: discard %q: want unmap or ignore", d.ID, d.Discard)
	}
	if d.Serial == "" {
		d.Serial = d.ID
	}
	// VIRTIO_BLK_ID_BYTES in the virtio specification (5.2.6).
	if len(d.Serial) > 20 || strings.ContainsAny(d.Serial, ", ") {
		return fmt.Errorf("disk %s: serial %q: at most 20 bytes without ',' or ' '", d.ID, d.Serial)
	}
	return nil
}

// cacheModes spells out what each -drive cache= mode means, as QEMU's
// documentation of -drive tabulates it: O_DIRECT on the image, flushes
// ignored, and the write cache the guest is shown.
var cacheModes = map[string]struct{ direct, noFlush, writeCache bool }{
	"none":         {direct: true, writeCache: true},
	"writeback":    {writeCache: true},
	"writethrough": {},
	"directsync":   {direct: true},
	"unsafe":       {noFlush: true, writeCache: true},
}

// driveArg is the -drive option for a disk, in the spelling a hand-started
// QEMU uses, which the exporter's /proc scanner parses.
func (d DiskConfig) driveArg() string {
	arg := fmt.Sprintf("file=%s,if=none,id=drive-%s,format=%s,cache=%s,aio=%s,discard=%s",
		d.File, d.ID, d.Format, d.Cache, d.AIO, d.Discard)
	if d.ReadOnly {
		arg += ",readonly=on"
	}
	return arg
}

func (d DiskConfig) deviceArg() string {
	return fmt.Sprintf("virtio-blk-pci,drive=drive-%s,id=%s,serial=%s", d.ID, d.ID, d.Serial)
}

// fspairQMPPath is where a VM's exporter monitor listens.
func fspairQMPPath(dir string) string { return filepath.Join(dir, "fspair.qmp") }

// qemuArgs builds the QEMU command line.
func qemuArgs(kit *Kit, cfg VMConfig, qmpPath, consolePath string) []string {
	appendArgs := "console=ttyS0 panic=-1 quiet"
	if cfg.KernelArgs != "" {
		appendArgs += " " + cfg.KernelArgs
	}
	// TCG: the lab must run where KVM is missing or unusable.
	accel := "tcg,thread=multi"
	if cfg.ICount != nil {
		// QEMU refuses -icount with a thread per vCPU: one thread runs
		// every vCPU in turn.
		accel = "tcg,thread=single"
	}
	args := []string{
		"-name", "guest=" + cfg.Name + ",debug-threads=on",
		"-machine", "pc",
		"-accel", accel,
		"-smp", fmt.Sprint(cfg.CPUs),
		"-m", fmt.Sprint(cfg.MemMiB),
		"-nodefaults", "-nographic", "-no-reboot",
		"-kernel", kit.Kernel,
		"-initrd", kit.Initramfs,
		"-append", appendArgs,
		// ttyS0: kernel console, logged to a file.
		"-chardev", "file,id=console,path=" + consolePath,
		"-serial", "chardev:console",
		// ttyS1: the control channel on QEMU's stdin/stdout, so nothing
		// the guest writes can be lost before the host connects.
		"-chardev", "stdio,id=control,signal=off",
		"-serial", "chardev:control",
	}
	if cfg.ICount != nil {
		args = append(args, "-icount", cfg.ICount.Arg())
	}
	if cfg.FspairQMP {
		args = append(args, "-chardev", "socket,id=fspair-qmp,path="+fspairQMPPath(cfg.Dir)+",server=on,wait=off",
			"-mon", "chardev=fspair-qmp,mode=control")
	}
	args = append(args, "-qmp", "unix:"+qmpPath+",server=on,wait=off")
	for _, d := range cfg.Disks {
		args = append(args, "-drive", d.driveArg(), "-device", d.deviceArg())
	}
	if cfg.Network || len(cfg.HostFwd) > 0 {
		netdev := "user,id=net0"
		for _, f := range cfg.HostFwd {
			netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", f.HostPort, f.GuestPort)
		}
		args = append(args, "-netdev", netdev, "-device", "virtio-net-pci,netdev=net0,id=nic0")
	}
	return args
}

// StartVM boots a guest and returns once its control shell answers. If the
// guest does not come up within cfg.BootTimeout the error carries the tail
// of the kernel console and QEMU's log, and QEMU is killed.
func StartVM(ctx context.Context, kit *Kit, cfg VMConfig) (*VM, error) {
	if kit == nil {
		return nil, errors.New("start vm: no kit (call BuildKit)")
	}
	if cfg.Dir == "" {
		return nil, errors.New("start vm: VMConfig.Dir is required")
	}
	if cfg.Name == "" {
		cfg.Name = "fspairlab"
	}
	if cfg.MemMiB == 0 {
		cfg.MemMiB = 512
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 3 * time.Minute
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	disks := map[string]*diskState{}
	cfg.Disks = append([]DiskConfig(nil), cfg.Disks...)
	for i := range cfg.Disks {
		if err := cfg.Disks[i].normalize(); err != nil {
			return nil, fmt.Errorf("start vm %s: %w", cfg.Name, err)
		}
		if disks[cfg.Disks[i].ID] != nil {
			return nil, fmt.Errorf("start vm %s: duplicate disk id %s", cfg.Name, cfg.Disks[i].ID)
		}
		disks[cfg.Disks[i].ID] = &diskState{cfg: cfg.Disks[i], plugged: true}
	}
	if _, err := exec.LookPath(qemuBinary); err != nil {
		return nil, fmt.Errorf("start vm %s: %s not found (apt-get install qemu-system-x86): %w", cfg.Name, qemuBinary, err)
	}
	if ic := cfg.ICount; ic != nil && (ic.Shift < 0 || ic.Shift > MaxICountShift) {
		return nil, fmt.Errorf("start vm %s: icount shift %d: want 0 to %d", cfg.Name, ic.Shift, MaxICountShift)
	}
	if cfg.HostCPUs != "" {
		if _, err := exec.LookPath("taskset"); err != nil {
			return nil, fmt.Errorf("start vm %s: taskset not found (apt-get install util-linux): %w", cfg.Name, err)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("start vm %s: create dir: %w", cfg.Name, err)
	}
	if len(cfg.Initramfs) > 0 {
		joined := filepath.Join(cfg.Dir, "initramfs.img")
		if err := joinInitramfs(kit.Initramfs, cfg.Initramfs, joined); err != nil {
			return nil, fmt.Errorf("start vm %s: %w", cfg.Name, err)
		}
		k := *kit
		k.Initramfs = joined
		kit = &k
	}
	qmpPath := filepath.Join(cfg.Dir, "qmp.sock")
	// sun_path is 108 bytes on Linux (unix(7)).
	if len(qmpPath) >= 108 {
		return nil, fmt.Errorf("start vm %s: qmp socket path %s too long for a unix socket; use a shorter work dir", cfg.Name, qmpPath)
	}
	_ = os.Remove(qmpPath)
	fspairQMP := ""
	if cfg.FspairQMP {
		fspairQMP = fspairQMPPath(cfg.Dir)
		_ = os.Remove(fspairQMP)
	}
	vm := &VM{
		FspairQMP: fspairQMP,
		Name:      cfg.Name,
		Dir:       cfg.Dir,
		Console:   filepath.Join(cfg.Dir, "console.log"),
		Log:       filepath.Join(cfg.Dir, "qemu.log"),
		cfg:       cfg,
		progress:  progress,
		disks:     disks,
		exited:    make(chan struct{}),
		started:   time.Now(),
	}
	if err := vm.launch(kit, qmpPath); err != nil {
		return nil, fmt.Errorf("start vm %s: %w", cfg.Name, err)
	}
	vm.stage("qemu pid %d started", vm.PID())

	bootCtx, cancel := context.WithTimeout(ctx, cfg.BootTimeout)
	defer cancel()
	err := vm.waitBoot(bootCtx, qmpPath)
	if err != nil {
		err = fmt.Errorf("start vm %s: %w\n%s", cfg.Name, err, vm.diagnostics())
		return nil, errors.Join(err, vm.Stop())
	}
	vm.stage("guest up")
	return vm, nil
}

func (vm *VM) launch(kit *Kit, qmpPath string) error {
	logf, err := os.Create(vm.Log)
	if err != nil {
		return fmt.Errorf("create qemu log: %w", err)
	}
	defer logf.Close()
	// Two pipes for the control channel; keeping the host ends as *os.File
	// gives write deadlines.
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("create control pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return fmt.Errorf("create control pipe: %w", err)
	}
	name, args := qemuBinary, qemuArgs(kit, vm.cfg, qmpPath, vm.Console)
	if vm.cfg.HostCPUs != "" {
		// taskset execs QEMU, so the process (and its pid) is QEMU's, and
		// every thread QEMU starts inherits the affinity.
		name, args = "taskset", append([]string{"-c", vm.cfg.HostCPUs, qemuBinary}, args...)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdin = ctlR
	cmd.Stdout = outW
	cmd.Stderr = logf
	cmd.Dir = vm.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a terminal's Ctrl-C reaches the test, whose
		// cleanup stops the guest, not QEMU directly. If the test process
		// dies without cleaning up, the kernel kills QEMU (prctl(2)
		// PR_SET_PDEATHSIG).
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		ctlR.Close()
		ctlW.Close()
		outR.Close()
		outW.Close()
		return fmt.Errorf("run %s: %w", qemuBinary, err)
	}
	ctlR.Close()
	outW.Close()
	vm.cmd = cmd
	vm.ctlW = ctlW
	vm.con = newConsole(ctlW, outR)
	go func() {
		vm.exitErr = cmd.Wait()
		close(vm.exited)
	}()
	return nil
}

func (vm *VM) alive() error {
	select {
	case <-vm.exited:
		return fmt.Errorf("%w: %v", ErrVMExited, vm.exitErr)
	default:
		return nil
	}
}

func (vm *VM) waitBoot(ctx context.Context, qmpPath string) error {
	q, err := dialQMP(ctx, qmpPath, vm.alive)
	if err != nil {
		return err
	}
	vm.qmp = q
	select {
	case <-vm.con.ready:
	case <-vm.exited:
		return fmt.Errorf("guest did not boot: %w: %v", ErrVMExited, vm.exitErr)
	case <-ctx.Done():
		return fmt.Errorf("guest control shell did not answer: %w", ctx.Err())
	}
	// A round trip proves the channel works both ways.
	out, rc, err := vm.Run(ctx, "echo ok")
	if err != nil || rc != 0 || strings.TrimSpace(out) != "ok" {
		return fmt.Errorf("guest control shell check: rc %d, output %q: %v", rc, out, err)
	}
	return nil
}

// diagnostics returns the tails of the kernel console and QEMU's log.
func (vm *VM) diagnostics() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- kernel console (%s), last lines:\n%s", vm.Console, tailFile(vm.Console, 30))
	fmt.Fprintf(&b, "--- qemu log (%s):\n%s", vm.Log, tailFile(vm.Log, 20))
	if vm.con != nil {
		fmt.Fprintf(&b, "--- control channel, last lines:\n%s\n", strings.Join(vm.con.Tail(), "\n"))
	}
	return b.String()
}

// ConsoleTail returns the last n lines of the guest's kernel console.
func (vm *VM) ConsoleTail(n int) string { return tailFile(vm.Console, n) }

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)\n", err)
	}
	return Tail(string(b), n) + "\n"
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stage prints a progress line with the time since the guest was started.
func (vm *VM) stage(format string, args ...any) {
	fmt.Fprintf(vm.progress, "lab: [%6.1fs] vm %s: %s\n", time.Since(vm.started).Seconds(), vm.Name, fmt.Sprintf(format, args...))
}

// PID returns QEMU's process id.
func (vm *VM) PID() int { return vm.cmd.Process.Pid }

// Run runs cmd with sh in the guest and returns its combined stdout and
// stderr and its exit status. err reports only failures to run it (channel
// closed, ctx done); a non-zero exit status is not an error. When ctx has a
// deadline the guest kills the command at about the same time.
func (vm *VM) Run(ctx context.Context, cmd string) (out string, exitCode int, err error) {
	out, exitCode, err = vm.con.run(ctx, cmd)
	if err != nil {
		if aerr := vm.alive(); aerr != nil {
			err = fmt.Errorf("%w (%v)\n%s", err, aerr, vm.diagnostics())
		}
		return out, exitCode, fmt.Errorf("run in guest %s: %w", vm.Name, err)
	}
	return out, exitCode, nil
}

// RunOK is Run for commands that must succeed: a non-zero exit status is an
// error carrying the output.
func (vm *VM) RunOK(ctx context.Context, cmd string) (string, error) {
	out, rc, err := vm.Run(ctx, cmd)
	return out, mustSucceed(vm.Name, cmd, out, rc, err)
}

// mustSucceed turns a non-zero exit status of cmd in guest into an error
// carrying its output.
func mustSucceed(guest, cmd, out string, rc int, err error) error {
	if err == nil && rc != 0 {
		err = fmt.Errorf("run in guest %s: %q exited %d: %s", guest, cmd, rc, strings.TrimSpace(out))
	}
	return err
}

// QMP runs a QMP command and returns its result.
func (vm *VM) QMP(ctx context.Context, command string, args any) (json.RawMessage, error) {
	return vm.qmp.Execute(ctx, command, args)
}

// QMPEvents returns the asynchronous QMP events received so far.
func (vm *VM) QMPEvents() []QMPEvent { return vm.qmp.Events() }

// Stop quits QEMU through QMP, kills it if it has not exited after 15
// seconds, and waits for it. It is safe to call more than once.
func (vm *VM) Stop() error {
	vm.stopOnce.Do(func() { vm.stopErr = vm.stop() })
	return vm.stopErr
}

func (vm *VM) stop() error {
	var errs []error
	if vm.alive() == nil && vm.qmp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// "quit" may lose the reply race with the socket closing; the exit
		// below is what counts.
		_, _ = vm.qmp.Execute(ctx, "quit", nil)
		cancel()
	}
	select {
	case <-vm.exited:
	case <-time.After(15 * time.Second):
		vm.stage("qemu did not quit, killing pid %d", vm.PID())
		if err := vm.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("kill qemu pid %d: %w", vm.PID(), err))
		}
		select {
		case <-vm.exited:
		case <-time.After(15 * time.Second):
			errs = append(errs, fmt.Errorf("qemu pid %d did not exit after SIGKILL", vm.PID()))
		}
	}
	if vm.qmp != nil {
		vm.qmp.Close()
	}
	vm.ctlW.Close()
	select {
	case <-vm.exited:
		<-vm.con.readerOK // QEMU's stdout is closed; the reader ends
	default:
	}
	vm.stage("stopped")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop vm %s: %w", vm.Name, err)
	}
	return nil
}

// Wait blocks until QEMU exits (for example after the guest powers off) or
// ctx ends, and returns QEMU's exit error.
func (vm *VM) Wait(ctx context.Context) error {
	select {
	case <-vm.exited:
		return vm.exitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}
