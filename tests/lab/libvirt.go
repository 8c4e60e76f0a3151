package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Paths and names of the Debian 12 libvirt 9.0 packages (libvirt-daemon,
// libvirt-daemon-driver-qemu, libvirt-clients).
const (
	LibvirtSocketRW = "/var/run/libvirt/libvirt-sock"
	LibvirtSocketRO = "/var/run/libvirt/libvirt-sock-ro"
	virtlogdSocket  = "/var/run/libvirt/virtlogd-sock"
	libvirtURI      = "qemu:///system"
	// libvirtQEMUConf is read by libvirtd's QEMU driver once, at start.
	libvirtQEMUConf = "/etc/libvirt/qemu.conf"
	// libvirtQEMUUser is the QEMU user Debian builds libvirt with
	// (--with-qemu-user). The privileged QEMU driver resolves it when it
	// starts, before it reads qemu.conf, and refuses to start without it;
	// the user is made by libvirt-daemon-system, which CI does not install
	// (it pulls in systemd).
	libvirtQEMUUser = "libvirt-qemu"
	// libvirtPIDDir is where the QEMU driver writes <domain>.pid.
	libvirtPIDDir = "/run/libvirt/qemu"
	// libvirtQEMULogDir is where the QEMU driver logs each domain's QEMU.
	libvirtQEMULogDir = "/var/log/libvirt/qemu"
)

// LibvirtPackages is what to install when a libvirt binary is missing.
const LibvirtPackages = "apt-get install -y --no-install-recommends libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients"

// LibvirtTools returns an error naming the first libvirt program (or the
// emulator) that is missing, with what to install.
func LibvirtTools() error {
	for _, bin := range []string{"libvirtd", "virtlogd", "virsh", qemuBinary} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is missing (%v); install libvirt: %s", bin, err, LibvirtPackages)
		}
	}
	return nil
}

// Libvirt is the libvirtd the lab's domains run under.
type Libvirt struct {
	// Libvirtd is the libvirtd StartLibvirt started; nil when one ran
	// before.
	Libvirtd *Daemon
	undo     []func() error
}

// StartLibvirt makes sure libvirtd answers on its system sockets. If it
// does not, it starts virtlogd (QEMU's logs go through it) and libvirtd as
// children of this process, in the foreground: the caller then owns their
// process ids and reaps them, where daemonised copies would be orphans of
// PID 1. Close stops what it started and undoes what it changed; on error
// that is already done.
func StartLibvirt(progress io.Writer) (lv *Libvirt, err error) {
	if progress == nil {
		progress = io.Discard
	}
	if err := LibvirtTools(); err != nil {
		return nil, err
	}
	lv = &Libvirt{}
	defer func() {
		if err != nil {
			err = errors.Join(err, lv.Close())
			lv = nil
		}
	}()
	if socketAnswers(LibvirtSocketRW) {
		fmt.Fprintf(progress, "lab: using the libvirtd already running on %s\n", LibvirtSocketRW)
		if _, err := Virsh(context.Background(), "uri"); err != nil {
			return lv, fmt.Errorf("libvirtd on %s does not open %s: %w", LibvirtSocketRW, libvirtURI, err)
		}
		// A libvirtd whose virtlogd is gone (killed with the process
		// that started them) creates no domain: "Failed to connect
		// socket to '/run/libvirt/virtlogd-sock'".
		if !socketAnswers(virtlogdSocket) {
			d, err := startDaemon("virtlogd", virtlogdSocket, progress)
			if err != nil {
				return lv, err
			}
			lv.undo = append(lv.undo, d.Stop)
		}
		return lv, nil
	}

	if _, err := user.Lookup(libvirtQEMUUser); err != nil {
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/var/lib/libvirt", "--shell", "/usr/sbin/nologin", libvirtQEMUUser).CombinedOutput()
		if err != nil {
			return lv, fmt.Errorf("create user %s for libvirt's QEMU driver: %w: %s", libvirtQEMUUser, err, out)
		}
		fmt.Fprintf(progress, "lab: created user %s (libvirt's QEMU driver needs it to exist)\n", libvirtQEMUUser)
		lv.undo = append(lv.undo, func() error {
			if out, err := exec.Command("userdel", libvirtQEMUUser).CombinedOutput(); err != nil {
				return fmt.Errorf("remove user %s: %w: %s", libvirtQEMUUser, err, out)
			}
			return nil
		})
	}

	if !socketAnswers(virtlogdSocket) {
		d, err := startDaemon("virtlogd", virtlogdSocket, progress)
		if err != nil {
			return lv, err
		}
		lv.undo = append(lv.undo, d.Stop)
	}

	d, err := StartLibvirtd(progress)
	if err != nil {
		return lv, err
	}
	lv.Libvirtd = d
	lv.undo = append(lv.undo, d.Stop)
	if !socketAnswers(LibvirtSocketRO) {
		return lv, fmt.Errorf("libvirtd serves %s but not the read-only socket %s", LibvirtSocketRW, LibvirtSocketRO)
	}
	return lv, nil
}

// Close stops the daemons StartLibvirt started, last started first, and
// removes the user it created. It keeps going after errors and returns
// them all; calls after the first do nothing.
func (lv *Libvirt) Close() error {
	var errs []error
	for i := len(lv.undo) - 1; i >= 0; i-- {
		if err := lv.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	lv.undo = nil
	return errors.Join(errs...)
}

// StartLibvirtd starts libvirtd with QEMU running as root and returns once
// its QEMU driver is up; the caller stops it.
//
// QEMU runs as root: /dev/kvm is root-only on these hosts, and when the
// QEMU user cannot open it libvirt 9.0 finds its capability cache invalid
// on every lookup ("KVM was enabled when probing ..., but it is not
// available now", virQEMUCapsIsValid in src/qemu/qemu_capabilities.c) and
// probes QEMU again each time, which makes one domain start take a minute
// or more. The QEMU driver reads qemu.conf once, while libvirtd initialises
// its drivers, which it does after its socket already accepts connections
// (clients are served once the drivers are up). So qemu.conf is restored
// only after a call through the QEMU driver has been answered: restored at
// the first answer of the socket, a loaded machine let the driver read the
// stock file and run QEMU as libvirt-qemu, which then could not open the
// lab's images.
func StartLibvirtd(progress io.Writer) (d *Daemon, err error) {
	restore, err := swapFile(libvirtQEMUConf, "# fspair lab: written while libvirtd starts, then restored\nuser = \"root\"\ngroup = \"root\"\n")
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := restore(); rerr != nil {
			if d != nil {
				rerr = errors.Join(rerr, d.Stop())
				d = nil
			}
			err = errors.Join(err, rerr)
		}
	}()
	d, err = startDaemon("libvirtd", LibvirtSocketRW, progress)
	if err != nil {
		return nil, err
	}
	if _, err := Virsh(context.Background(), "uri"); err != nil {
		return nil, errors.Join(fmt.Errorf("libvirtd does not open %s: %w\nlibvirtd log:\n%s", libvirtURI, err, Tail(d.Log(), 30)), d.Stop())
	}
	return d, nil
}

// swapFile replaces path with content and returns a function that puts the
// old file back (or removes path if there was none); calls after the first
// do nothing.
func swapFile(path, content string) (func() error, error) {
	old, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	var once sync.Once
	var rerr error
	return func() error {
		once.Do(func() {
			if existed {
				rerr = os.WriteFile(path, old, mode)
			} else {
				rerr = os.Remove(path)
			}
			if rerr != nil {
				rerr = fmt.Errorf("restore %s: %w", path, rerr)
			}
		})
		return rerr
	}, nil
}

// socketAnswers reports whether something accepts connections on a UNIX
// socket. A socket file alone proves nothing: a killed daemon leaves it.
func socketAnswers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Daemon is a libvirt daemon the lab started in the foreground.
type Daemon struct {
	Name string
	cmd  *exec.Cmd
	log  LogBuffer
	done chan struct{} // closed when the process has been reaped
	err  error         // its exit status, once done
}

// LogBuffer collects a process's output; it may be written and read at
// once.
type LogBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Log returns what the daemon wrote to stdout and stderr.
func (d *Daemon) Log() string { return d.log.String() }

// startDaemon starts name in the foreground and waits until it accepts
// connections on socket.
func startDaemon(name, socket string, progress io.Writer) (*Daemon, error) {
	d := &Daemon{Name: name, done: make(chan struct{})}
	d.cmd = exec.Command(name)
	d.cmd.Stdout, d.cmd.Stderr = &d.log, &d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a terminal's Ctrl-C reaches the lab's user,
		// whose teardown destroys the domains first and then stops the
		// daemon, not the daemon directly.
		Setpgid: true,
		// Should this process die (go test -timeout), the daemon goes
		// with it. The signal follows the exit of the thread that forked,
		// and the Go runtime ends threads only when a goroutine locked to
		// one exits, which nothing in the lab's users does.
		Pdeathsig: syscall.SIGTERM,
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	start := time.Now()
	for !socketAnswers(socket) {
		select {
		case <-d.done:
			return nil, fmt.Errorf("%s exited at start (%v); its log:\n%s", name, d.err, d.Log())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > 30*time.Second {
			return nil, errors.Join(fmt.Errorf("%s did not listen on %s within 30s; its log:\n%s", name, socket, d.Log()), d.Stop())
		}
	}
	fmt.Fprintf(progress, "lab: started %s (pid %d), listening after %.1fs\n", name, d.cmd.Process.Pid, time.Since(start).Seconds())
	return d, nil
}

// Stop ends the daemon with SIGTERM (SIGKILL after 15s) and waits for it.
// Stopping a stopped daemon does nothing.
func (d *Daemon) Stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	d.cmd.Process.Kill()
	<-d.done
	return fmt.Errorf("%s did not exit within 15s of SIGTERM; killed; log:\n%s", d.Name, Tail(d.Log(), 20))
}

// Virsh runs virsh on the system URI. The first domain a fresh libvirtd
// starts waits for it to probe QEMU's capabilities whenever its cache is
// stale, which runs QEMU under TCG: over 60 s on this 2-core machine with
// two guests running beside it. 3 minutes covers that.
func Virsh(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-c", libvirtURI}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// DomainDisk is one file-backed virtio disk of a domain. Its guest serial
// is "fspair-<Target>".
type DomainDisk struct {
	Target, File, Format, Cache, IO, Discard string
}

// Domain is a running transient libvirt domain.
type Domain struct {
	Name, UUID string
	Console    string // ttyS0, the kernel console, logged to a file
	Control    string // ttyS1, the lab control channel, on a UNIX socket
	QEMULog    string // the QEMU driver's log of the domain's QEMU

	mu        sync.Mutex
	destroyed bool
}

// CreateDomain starts a transient domain (virsh create) with the lab's
// kit: TCG, 512 MiB, one vCPU, direct kernel boot, no network, no graphics,
// the disks given, and guestFS overrides by target in fspair metadata. It
// returns once libvirt has started QEMU; Guest waits for the guest. Close
// destroys the domain, before it tears down what was made earlier (the
// host file systems its images live on).
func (l *Lab) CreateDomain(ctx context.Context, name string, disks []DomainDisk, guestFS map[string]string) (*Domain, error) {
	dir := filepath.Join(l.Dir, "libvirt-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create domain %s: %w", name, err)
	}
	// libvirt's DAC security driver hands the kernel and initramfs to the
	// QEMU user while the domain runs (libvirt 9.0 chowns them when QEMU
	// runs as libvirt-qemu, as with a stock qemu.conf); copies keep the
	// shared kit cache out of that.
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.img")
	for src, dst := range map[string]string{l.Kit.Kernel: kernel, l.Kit.Initramfs: initrd} {
		if err := copyFile(src, dst); err != nil {
			return nil, fmt.Errorf("create domain %s: %w", name, err)
		}
	}
	d := &Domain{Name: name, Console: filepath.Join(dir, "console.log"), Control: filepath.Join(dir, "control.sock"),
		QEMULog: filepath.Join(libvirtQEMULogDir, name+".log")}
	xml := domainXML(d, kernel, initrd, disks, guestFS)
	xmlPath := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(xmlPath, []byte(xml), 0o644); err != nil {
		return nil, fmt.Errorf("create domain %s: %w", name, err)
	}
	l.Stage("create libvirt domain %s (%d disks)", name, len(disks))
	// Registered before the create: a create that timed out on our side
	// may still start the domain in libvirtd, and its QEMU must not
	// outlive the lab.
	l.Defer(d.Destroy)
	if _, err := Virsh(ctx, "create", xmlPath); err != nil {
		return nil, fmt.Errorf("create domain %s: %w\ndomain XML:\n%s", name, err, xml)
	}
	out, err := Virsh(ctx, "domuuid", name)
	if err != nil {
		return nil, fmt.Errorf("create domain %s: %w", name, err)
	}
	d.UUID = strings.TrimSpace(out)
	return d, nil
}

// domainXML is the definition of a lab domain
// (https://libvirt.org/formatdomain.html).
func domainXML(d *Domain, kernel, initrd string, disks []DomainDisk, guestFS map[string]string) string {
	var b strings.Builder
	x := xmlEscape
	fmt.Fprintf(&b, "<domain type='qemu'>\n  <name>%s</name>\n", x(d.Name))
	b.WriteString("  <memory unit='MiB'>512</memory>\n  <vcpu>1</vcpu>\n")
	// Operator metadata (https://libvirt.org/formatdomain.html#general-metadata).
	b.WriteString("  <metadata>\n    <fspair:disks xmlns:fspair='https://fspair.dev/xmlns/libvirt/1'>\n")
	for target, gfs := range guestFS {
		fmt.Fprintf(&b, "      <fspair:disk target='%s' guest_fs='%s'/>\n", x(target), x(gfs))
	}
	b.WriteString("    </fspair:disks>\n  </metadata>\n")
	fmt.Fprintf(&b, "  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n    <kernel>%s</kernel>\n    <initrd>%s</initrd>\n",
		x(kernel), x(initrd))
	b.WriteString("    <cmdline>console=ttyS0 panic=-1 quiet</cmdline>\n  </os>\n")
	// ACPI, as the plain QEMU guests have it by default: without it libvirt
	// starts QEMU with -no-acpi, the guest finds no HPET or ACPI PM timer to
	// trust its TSC by and keeps time in jiffies (4 ms steps), too coarse
	// for the latencies fio measures in it.
	b.WriteString("  <features>\n    <acpi/>\n  </features>\n")
	b.WriteString("  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>destroy</on_reboot>\n  <on_crash>destroy</on_crash>\n")
	b.WriteString("  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n")
	for _, dk := range disks {
		fmt.Fprintf(&b, "    <disk type='file' device='disk'>\n      <driver name='qemu' type='%s' cache='%s' io='%s'", x(dk.Format), x(dk.Cache), x(dk.IO))
		if dk.Discard != "" {
			fmt.Fprintf(&b, " discard='%s'", x(dk.Discard))
		}
		fmt.Fprintf(&b, "/>\n      <source file='%s'/>\n      <target dev='%s' bus='virtio'/>\n      <serial>fspair-%s</serial>\n    </disk>\n",
			x(dk.File), x(dk.Target), x(dk.Target))
	}
	b.WriteString("    <controller type='usb' model='none'/>\n")
	fmt.Fprintf(&b, "    <serial type='file'>\n      <source path='%s'/>\n      <target port='0'/>\n    </serial>\n", x(d.Console))
	fmt.Fprintf(&b, "    <serial type='unix'>\n      <source mode='bind' path='%s'/>\n      <target port='1'/>\n    </serial>\n", x(d.Control))
	b.WriteString("    <memballoon model='none'/>\n  </devices>\n</domain>\n")
	return b.String()
}

// Destroy stops the domain's QEMU and removes its QEMU log. If libvirtd is
// gone it kills the QEMU process named in the driver's pid file, so that
// the lab can unmount the host file system, and says so in the error.
// Calls after the first do nothing.
func (d *Domain) Destroy() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.destroyed {
		return nil
	}
	d.destroyed = true
	pid := readPIDFile(filepath.Join(libvirtPIDDir, d.Name+".pid"))
	_, err := Virsh(context.Background(), "destroy", d.Name)
	if err == nil {
		os.Remove(d.QEMULog)
		return nil
	}
	if pid > 0 && processNamed(pid, "guest="+d.Name) {
		syscall.Kill(pid, syscall.SIGKILL)
		return fmt.Errorf("%w; killed its QEMU (pid %d)", err, pid)
	}
	return err
}

func readPIDFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// processNamed reports whether process pid has s in its command line.
func processNamed(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

func xmlEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '\'':
			b.WriteString("&apos;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Guest is the lab control channel (lab-ctl.sh) of a domain's guest, on
// its second serial port, which the domain wires to a UNIX socket.
type Guest struct {
	Name string
	conn net.Conn
	con  *console
}

// Guest connects to the domain's control channel and waits up to 90s for
// the guest to answer on it; the error carries the console's tail.
func (d *Domain) Guest(ctx context.Context) (*Guest, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", d.Control)
	if err != nil {
		return nil, fmt.Errorf("connect to guest control channel of %s: %w", d.Name, err)
	}
	g := &Guest{Name: d.Name, conn: c, con: newConsole(c, c)}
	readyCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := g.waitReady(readyCtx); err != nil {
		g.Close()
		return nil, fmt.Errorf("guest control channel of %s: %w\nguest console (tail):\n%s", d.Name, err, tailFile(d.Console, 20))
	}
	return g, nil
}

// waitReady runs a no-op every few seconds until one is answered: the
// guest's READY line may have gone out before the host connected (QEMU
// drops what a UNIX socket chardev's guest writes with no client), and
// requests sent before the control shell ran are lost or run late, which
// is harmless for a no-op.
func (g *Guest) waitReady(ctx context.Context) error {
	for {
		try, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, _, err := g.con.run(try, "true")
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrConsoleClosed):
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("guest control shell did not answer: %w", ctx.Err())
		}
	}
}

// Run runs a shell script in the guest and returns its output and exit
// status, as VM.Run does.
func (g *Guest) Run(ctx context.Context, script string) (string, int, error) {
	out, rc, err := g.con.run(ctx, script)
	if err != nil {
		return out, rc, fmt.Errorf("run in guest %s: %w", g.Name, err)
	}
	return out, rc, nil
}

// RunOK is Run for scripts that must succeed, as VM.RunOK is.
func (g *Guest) RunOK(ctx context.Context, script string) (string, error) {
	out, rc, err := g.Run(ctx, script)
	return out, mustSucceed(g.Name, script, out, rc, err)
}

// Close disconnects from the control channel; the guest runs on.
func (g *Guest) Close() error { return g.conn.Close() }
