// Package hostfs finds the host file system that holds a file: its type, its
// mount point and the block device (and, for loop devices, the backing file)
// underneath it.
package hostfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Bounds for ParseMountinfo. mountinfo is written by the kernel, but the
// parser is also fed files from fixtures and, through the fuzzer, arbitrary
// bytes, so it must not grow without limit.
const (
	// maxLineBytes bounds one mountinfo line. A line holds two escaped paths
	// (each at most PATH_MAX = 4096 bytes, up to 4x longer once escaped) plus
	// the mount options; overlayfs lowerdir= lists of many layers are the
	// longest seen in practice, well below this.
	maxLineBytes = 1 << 20
	// maxMounts bounds the number of entries; hosts running many containers
	// have tens of thousands of mounts, not millions.
	maxMounts = 1 << 20
)

// ErrMalformed is wrapped by the errors ParseMountinfo returns for input that
// does not follow the mountinfo format of proc(5).
var ErrMalformed = errors.New("malformed mountinfo")

// Mount is one entry of /proc/PID/mountinfo, the format documented in proc(5)
// ("/proc/pid/mountinfo") and produced by show_mountinfo() in the kernel's
// fs/proc_namespace.c. Lookup additionally fills the Device fields.
type Mount struct {
	ID       int // unique mount ID
	ParentID int // mount ID of the parent mount (self for the namespace root)
	// Major and Minor are the st_dev of files on this mount as the kernel
	// reports it. For file systems without a single backing block device
	// (btrfs, overlayfs, NFS, tmpfs) it is an anonymous device with major 0.
	Major, Minor uint32
	Root         string   // path within the file system that forms the root of this mount
	MountPoint   string   // mount point relative to the reading process's root
	Options      string   // per-mount options (rw,nosuid,relatime,...)
	Optional     []string // optional fields such as shared:N, master:N
	FSType       string   // file system type, "type.subtype" for FUSE
	Source       string   // file system specific source ("/dev/vda1", "none", ...)
	SuperOptions string   // per-super-block options

	// Device is the block device node holding the file system (e.g.
	// /dev/loop3), "" when the file system is not on a block device or the
	// device could not be resolved. Filled by Lookup only.
	Device string
	// DeviceMajor and DeviceMinor identify Device; valid when Device != "".
	DeviceMajor, DeviceMinor uint32
	// BackingFile is the file behind Device when Device is a loop device
	// (or a partition of one), as the kernel reports it in
	// /sys/block/loopN/loop/backing_file. Filled by Lookup only.
	BackingFile string
}

// ParseMountinfo parses the mountinfo format of proc(5). Paths and sources
// have their octal escapes (\040 for space, \011, \012, \134) decoded.
// It returns an error wrapping ErrMalformed naming the first bad line.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var mounts []Mount
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if err == io.EOF {
			return mounts, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read mountinfo line %d: %w", lineNo, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(mounts) >= maxMounts {
			return nil, fmt.Errorf("%w: more than %d mounts", ErrMalformed, maxMounts)
		}
		m, err := parseLine(string(line))
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrMalformed, lineNo, err)
		}
		mounts = append(mounts, m)
	}
}

// readLine returns the next line without its newline, refusing lines longer
// than maxLineBytes. It returns io.EOF only when no bytes are left.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			if err == io.EOF && line != nil {
				return line, nil
			}
			return nil, err
		}
		if len(line)+len(chunk) > maxLineBytes {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrMalformed, maxLineBytes)
		}
		line = append(line, chunk...)
		if !isPrefix {
			if line == nil {
				line = []byte{}
			}
			return line, nil
		}
	}
}

// parseLine parses one mountinfo line:
//
//	36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)         (6)        (7)     (8)(9)  (10)      (11)
//
// Fields are separated by single spaces; (7) is zero or more optional fields
// ended by the "-" separator (8).
func parseLine(line string) (Mount, error) {
	fields := strings.Split(line, " ")
	if len(fields) < 9 {
		return Mount{}, fmt.Errorf("want at least 9 fields, got %d", len(fields))
	}
	var m Mount
	var err error
	if m.ID, err = parseID(fields[0]); err != nil {
		return Mount{}, fmt.Errorf("mount ID: %v", err)
	}
	if m.ParentID, err = parseID(fields[1]); err != nil {
		return Mount{}, fmt.Errorf("parent ID: %v", err)
	}
	if m.Major, m.Minor, err = parseDev(fields[2]); err != nil {
		return Mount{}, err
	}
	m.Root = Unescape(fields[3])
	m.MountPoint = Unescape(fields[4])
	m.Options = fields[5]
	if m.Root == "" || m.MountPoint == "" {
		return Mount{}, errors.New("empty root or mount point")
	}
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 {
		return Mount{}, errors.New(`no "-" separator`)
	}
	for _, f := range fields[6:sep] {
		if f != "" {
			m.Optional = append(m.Optional, f)
		}
	}
	rest := fields[sep+1:]
	// The kernel always prints file system type, source and super options;
	// a source of "none" stands for an empty one.
	if len(rest) < 2 {
		return Mount{}, fmt.Errorf("want file system type and source after \"-\", got %d fields", len(rest))
	}
	m.FSType = Unescape(rest[0])
	m.Source = Unescape(rest[1])
	if len(rest) > 2 {
		m.SuperOptions = strings.Join(rest[2:], " ")
	}
	if m.FSType == "" {
		return Mount{}, errors.New("empty file system type")
	}
	return m, nil
}

func parseID(s string) (int, error) {
	v, err := strconv.ParseUint(s, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("bad number %q", truncate(s))
	}
	return int(v), nil
}

// parseDev parses "major:minor".
func parseDev(s string) (major, minor uint32, err error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("bad major:minor %q", truncate(s))
	}
	ma, err1 := strconv.ParseUint(a, 10, 32)
	mi, err2 := strconv.ParseUint(b, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("bad major:minor %q", truncate(s))
	}
	return uint32(ma), uint32(mi), nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Unescape decodes the octal escapes the kernel writes into mountinfo paths:
// seq_path()/mangle() replace space, tab, newline and backslash by \ooo
// (fs/proc_namespace.c). A backslash not followed by three octal digits
// encoding a byte is kept as is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			// \4xx and above overflow a byte; the kernel never writes them.
			if s[i+1] <= '3' {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
