package discovery

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/fspair/fspair/exporter/diskimage"
)

// Bounds for reading other processes' /proc files.
const (
	// maxCmdline bounds a cmdline read. ARG_MAX is a quarter of the stack
	// rlimit (2 MiB with the default 8 MiB stack, fs/exec.c); argument
	// vectors bigger than this are not QEMU's.
	maxCmdline = 8 << 20
	// maxFDs bounds the descriptors looked at per process; QEMU has a few
	// hundred even with many disks and queues.
	maxFDs = 1 << 16
	// maxWarnings bounds ScanStats.Warnings.
	maxWarnings = 16
	// minRawImage is the smallest read-write file the fd scan takes for a
	// raw disk image: smaller ones are firmware variable stores, logs and
	// state files.
	minRawImage = 1 << 20
)

// qcow2Magic starts every qcow2 image ("QFI\xfb", QEMU docs/interop/qcow2.txt).
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// ScanStats counts what a /proc scan saw.
type ScanStats struct {
	Processes int // process directories looked at
	QEMU      int // QEMU processes whose command line was read
	// Vanished counts processes that exited while being scanned; that is
	// normal and not an error.
	Vanished int
	// Skipped counts QEMU processes left out for other reasons (permission
	// denied, a command line that is not QEMU's).
	Skipped int
	// HotPlugged counts disks found only through open file descriptors.
	HotPlugged int
	// Warnings holds the first few problems (parse errors, unreadable
	// files), for logging.
	Warnings []string
}

func (s *ScanStats) warn(format string, args ...any) {
	if len(s.Warnings) < maxWarnings {
		s.Warnings = append(s.Warnings, fmt.Sprintf(format, args...))
	}
}

// ProcScanner finds QEMU processes in a proc file system.
type ProcScanner struct {
	// Root is where proc is mounted, "/proc" unless testing or running
	// in a container with the host's proc mounted elsewhere.
	Root string
	// FDScan enables looking through each QEMU process's open files for
	// disk images its command line does not name (added at run time with
	// QMP blockdev-add).
	FDScan bool
	// QMP allows the QMP monitor sockets a QEMU command line declares to
	// be used for the guest side of its disks (Disk.QMP); without it they
	// are only noted (Disk.QMPNote).
	QMP bool
}

// ScanProc scans procRoot for QEMU processes, including the open file scan.
func ScanProc(procRoot string) ([]VM, ScanStats, error) {
	return (&ProcScanner{Root: procRoot, FDScan: true}).Scan(context.Background())
}

// Scan returns the VMs of all QEMU processes. Processes that vanish or
// cannot be read are counted in the stats and skipped; only failing to list
// the proc root, or ctx ending, is an error.
func (s *ProcScanner) Scan(ctx context.Context) ([]VM, ScanStats, error) {
	var stats ScanStats
	root := s.Root
	if root == "" {
		root = "/proc"
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, stats, fmt.Errorf("list processes in %s: %w", root, err)
	}
	var vms []VM
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return vms, stats, err
		}
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || !e.IsDir() {
			continue
		}
		stats.Processes++
		vm, err := s.scanPID(root, pid, &stats)
		switch {
		case err == nil && vm != nil:
			vms = append(vms, *vm)
		case err == nil:
			// not QEMU
		case vanished(err):
			stats.Vanished++
		default:
			stats.Skipped++
			stats.warn("pid %d: %v", pid, err)
		}
	}
	return vms, stats, nil
}

// vanished reports whether err means the process is gone: its /proc
// directory entries disappear (ENOENT) or reads fail with ESRCH.
func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// scanPID returns the VM of a QEMU process, nil for other processes.
func (s *ProcScanner) scanPID(root string, pid int, stats *ScanStats) (*VM, error) {
	dir := filepath.Join(root, strconv.Itoa(pid))
	comm, err := readBounded(filepath.Join(dir, "comm"), 64)
	if err != nil {
		return nil, err
	}
	isQEMU := qemuName(strings.TrimSpace(string(comm)))
	if !isQEMU {
		// -name process= renames the main thread, so also look at the
		// executable. Reading the link needs ptrace access; without it
		// the command line's argv[0] is the fallback.
		exe, err := os.Readlink(filepath.Join(dir, "exe"))
		switch {
		case err == nil:
			isQEMU = qemuName(path.Base(strings.TrimSuffix(exe, " (deleted)")))
			if !isQEMU {
				return nil, nil
			}
		case errors.Is(err, fs.ErrPermission):
		default:
			return nil, nil // kernel threads have no exe
		}
	}
	raw, err := readBounded(filepath.Join(dir, "cmdline"), maxCmdline)
	if err != nil {
		return nil, err
	}
	args := splitCmdline(raw)
	if len(args) == 0 {
		// Zombies and exiting processes have an empty command line.
		if _, err := os.Stat(dir); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("read cmdline: %w", fs.ErrNotExist)
	}
	if !isQEMU && !qemuName(path.Base(args[0])) {
		return nil, nil
	}
	stats.QEMU++
	vm, err := ParseQEMUArgs(args)
	if vm == nil {
		return nil, fmt.Errorf("parse command line: %w", err)
	}
	if err != nil {
		stats.warn("pid %d: parse command line: %v", pid, err)
	}
	vm.PID = pid
	if vm.Name == "" {
		// Every disk needs a domain label; a nameless VM is known by its
		// process.
		vm.Name = "qemu-" + strconv.Itoa(pid)
	}
	var cwd string
	disks := vm.Disks[:0]
	for _, d := range vm.Disks {
		d.PID = pid
		d.Domain = vm.Name
		if !filepath.IsAbs(d.SourceFile) {
			if cwd == "" {
				if cwd, err = os.Readlink(filepath.Join(dir, "cwd")); err != nil {
					if vanished(err) {
						return nil, err
					}
					vm.Ignored = append(vm.Ignored, fmt.Sprintf("%s: relative path %s and unknown working directory", d.TargetDevice, d.SourceFile))
					continue
				}
			}
			d.SourceFile = filepath.Join(cwd, d.SourceFile)
		}
		disks = append(disks, d)
	}
	vm.Disks = disks
	if s.FDScan {
		if err := s.scanFDs(dir, vm, stats); err != nil {
			return nil, err
		}
	}
	if s.QMP && cwd == "" && slices.ContainsFunc(vm.Monitors, func(p string) bool { return !filepath.IsAbs(p) }) {
		cwd, _ = os.Readlink(filepath.Join(dir, "cwd"))
	}
	monitorsFor(vm, s.QMP, cwd)
	return vm, nil
}

// qemuName reports whether a command or executable name is a QEMU system
// emulator: qemu-system-<arch>, or qemu-kvm as RHEL and SUSE name it. comm
// is cut to 15 bytes (TASK_COMM_LEN), which still keeps "qemu-system-".
func qemuName(name string) bool {
	return strings.HasPrefix(name, "qemu-system-") || name == "qemu-kvm"
}

// splitCmdline splits /proc/PID/cmdline at its NUL separators.
func splitCmdline(raw []byte) []string {
	raw = bytes.TrimRight(raw, "\x00")
	if len(raw) == 0 {
		return nil
	}
	parts := bytes.Split(raw, []byte{0})
	args := make([]string, len(parts))
	for i, p := range parts {
		args[i] = string(p)
	}
	return args
}

// readBounded reads at most limit bytes of a file.
func readBounded(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// fileID identifies a file by device and inode.
type fileID struct{ dev, ino uint64 }

func statID(p string) (fileID, os.FileInfo, bool) {
	fi, err := os.Stat(p)
	if err != nil {
		return fileID{}, nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, nil, false
	}
	return fileID{uint64(st.Dev), st.Ino}, fi, true
}

// openFile is one regular file a process holds open.
type openFile struct {
	path  string // as the fd link names it
	link  string // /proc/PID/fd/N
	id    fileID
	size  int64
	flags uint64 // open flags from fdinfo
	known bool   // named on the command line
	qcow2 bool
}

// scanFDs adds to vm the disk images the process has open that its command
// line does not name. It is deliberately conservative: a file counts only if
// it is a regular, not deleted file outside /dev, /proc and /sys that starts
// with the qcow2 magic, or is opened read-write with a size that is a whole
// number of 512-byte sectors and at least minRawImage; and not if it is the
// backing file of another qcow2 image the process has open. O_DIRECT in the
// open flags is reported as Cache CacheDirect.
func (s *ProcScanner) scanFDs(dir string, vm *VM, stats *ScanStats) error {
	fdDir := filepath.Join(dir, "fd")
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		if vanished(err) {
			return err
		}
		stats.warn("pid %d: list open files: %v", vm.PID, err)
		return nil
	}
	if len(entries) > maxFDs {
		entries = entries[:maxFDs]
	}

	// Files the command line names, by identity (the fd link shows the
	// resolved path, the command line may use a symlink) and by path.
	known := map[fileID]bool{}
	knownPath := map[string]bool{}
	for _, p := range append(diskFiles(vm), vm.OtherFiles...) {
		knownPath[p] = true
		// Resolve in the process's mount namespace first.
		if id, _, ok := statID(filepath.Join(dir, "root", p)); ok {
			known[id] = true
		} else if id, _, ok := statID(p); ok {
			known[id] = true
		}
	}

	var files []*openFile
	byID := map[fileID]*openFile{}
	for _, e := range entries {
		link := filepath.Join(fdDir, e.Name())
		target, err := os.Readlink(link)
		if err != nil {
			continue // closed meanwhile
		}
		// Sockets, pipes and anonymous inodes have no path; a deleted
		// file ends in " (deleted)" (fs/d_path.c d_path()).
		if !strings.HasPrefix(target, "/") || strings.HasSuffix(target, " (deleted)") {
			continue
		}
		if under(target, "/dev") || under(target, "/proc") || under(target, "/sys") {
			continue
		}
		id, fi, ok := statID(link) // follows the link to the open file
		if !ok || !fi.Mode().IsRegular() {
			continue
		}
		flags, _ := fdFlags(filepath.Join(dir, "fdinfo", e.Name()))
		f := &openFile{path: target, link: link, id: id, size: fi.Size(), flags: flags,
			known: known[id] || knownPath[target]}
		if prev, dup := byID[id]; dup {
			// QEMU opens an image once per node that uses it and
			// reopens it on permission changes; the read-write
			// descriptor tells what the disk is.
			if prev.flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
				prev.flags = flags
			}
			prev.known = prev.known || f.known
			continue
		}
		byID[id] = f
		files = append(files, f)
	}

	// qcow2 images name their backing file in the header; QEMU opens the
	// backing chain read-only. Those are not disks of their own.
	backing := map[fileID]bool{}
	for _, f := range files {
		name, isQcow2 := readQcow2Backing(f.link, f.flags&syscall.O_DIRECT != 0)
		f.qcow2 = isQcow2
		if name == "" {
			continue
		}
		if !filepath.IsAbs(name) {
			// Relative backing names are relative to the image's
			// directory (QEMU's bdrv_get_full_backing_filename()).
			name = filepath.Join(filepath.Dir(f.path), name)
		}
		if id, _, ok := statID(filepath.Join(dir, "root", name)); ok {
			backing[id] = true
		} else if id, _, ok := statID(name); ok {
			backing[id] = true
		}
	}

	for _, f := range files {
		if f.known || backing[f.id] {
			continue
		}
		rw := f.flags&syscall.O_ACCMODE != syscall.O_RDONLY
		if !f.qcow2 && !(rw && f.size%512 == 0 && f.size >= minRawImage) {
			continue
		}
		d := Disk{
			Domain:     vm.Name,
			UUID:       vm.UUID,
			SourceFile: f.path,
			Source:     SourceQEMU,
			PID:        vm.PID,
			ReadOnly:   !rw,
		}
		if f.qcow2 {
			d.Format = "qcow2"
		}
		if f.flags&syscall.O_DIRECT != 0 {
			d.Cache = CacheDirect
		}
		vm.Disks = append(vm.Disks, d)
		stats.HotPlugged++
	}
	return nil
}

// fdLink is an open file of a process, by descriptor.
type fdLink struct {
	link   string // /proc/PID/fd/N
	target string // the file's path, " (deleted)" at the end once unlinked
	id     fileID
	stated bool // id was looked up
	ok     bool // and found
}

// stat returns the identity of the open file (following the link reaches
// the file itself, unlinked or not), looked up once.
func (l *fdLink) stat() (fileID, bool) {
	if !l.stated {
		l.stated = true
		var fi os.FileInfo
		l.id, fi, l.ok = statID(l.link)
		l.ok = l.ok && fi.Mode().IsRegular()
	}
	return l.id, l.ok
}

// openFiles lists the descriptors of a process that name files by path
// (not sockets, pipes or anonymous inodes). It returns nil when fdDir
// cannot be read: the process is gone, or looking at its descriptors needs
// ptrace access (proc(5), /proc/pid/fd) that the exporter lacks.
func openFiles(fdDir string) []fdLink {
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return nil
	}
	if len(entries) > maxFDs {
		entries = entries[:maxFDs]
	}
	var out []fdLink
	for _, e := range entries {
		link := filepath.Join(fdDir, e.Name())
		target, err := os.Readlink(link)
		if err != nil || !strings.HasPrefix(target, "/") {
			continue
		}
		out = append(out, fdLink{link: link, target: target})
	}
	return out
}

// heldOpen picks, among a process's open files, the one that is the disk
// image named path, whose current file (if any) has identity pathID. It
// prefers the file now at path; failing that, a file unlinked from path,
// which the kernel shows as "path (deleted)" (fs/d_path.c d_path()): that
// is what a VM holds after its image was replaced by a rename over it, or
// removed, while it ran. A file moved elsewhere while the VM runs is not
// found (nothing ties it to the disk) and path is used as it is.
func heldOpen(links []fdLink, path string, pathID fileID, pathOK bool) (fdLink, bool) {
	clean := filepath.Clean(path)
	var unlinked *fdLink
	for i := range links {
		l := &links[i]
		switch l.target {
		case clean:
			if id, ok := l.stat(); ok && pathOK && id == pathID {
				return *l, true
			}
		case clean + " (deleted)":
			if _, ok := l.stat(); ok && unlinked == nil {
				unlinked = l
			}
		}
	}
	if pathOK {
		// The command line may reach the file through a symbolic link
		// or a mount of its own namespace: match by identity.
		for i := range links {
			if id, ok := links[i].stat(); ok && id == pathID {
				return links[i], true
			}
		}
	}
	if unlinked != nil {
		return *unlinked, true
	}
	return fdLink{}, false
}

func diskFiles(vm *VM) []string {
	out := make([]string, 0, len(vm.Disks))
	for _, d := range vm.Disks {
		out = append(out, d.SourceFile)
	}
	return out
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// fdFlags reads the "flags:" line of /proc/PID/fdinfo/N: the file's open
// flags in octal (Documentation/filesystems/proc.rst, "fdinfo").
func fdFlags(p string) (uint64, error) {
	b, err := readBounded(p, 4096)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 8, 64)
		}
	}
	return 0, errors.New("no flags line")
}

// readQcow2Backing reads a file's first bytes and returns whether it is a
// qcow2 image and the backing file name its header records ("" for none).
// Header layout from QEMU's docs/interop/qcow2.txt: magic (4 bytes),
// version (4), backing_file_offset (8), backing_file_size (4, at most 1023),
// all big-endian. direct: the VMM has the file open with O_DIRECT, and so
// is it read (diskimage.DirectReader says why).
func readQcow2Backing(p string, direct bool) (backing string, isQcow2 bool) {
	f, err := os.Open(p)
	if err != nil {
		return "", false
	}
	defer f.Close()
	var r io.ReaderAt = f
	if direct {
		if d, err := diskimage.OpenDirect(f); err == nil {
			defer d.Close()
			r = d
		}
	}
	var hdr [20]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return "", false
	}
	if !bytes.Equal(hdr[:4], qcow2Magic) {
		return "", false
	}
	off := binary.BigEndian.Uint64(hdr[8:16])
	size := binary.BigEndian.Uint32(hdr[16:20])
	if off == 0 || size == 0 || size > 1023 || off > 2<<20 {
		return "", true
	}
	name := make([]byte, size)
	if _, err := r.ReadAt(name, int64(off)); err != nil {
		return "", true
	}
	return string(name), true
}
