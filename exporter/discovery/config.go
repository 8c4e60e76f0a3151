package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxConfigBytes bounds the configuration file; a host with thousands of
// disks stays far below.
const maxConfigBytes = 4 << 20

// ErrInvalidConfig is wrapped by every error LoadConfig returns for a file
// that was read but is not a valid configuration.
var ErrInvalidConfig = errors.New("invalid discovery configuration")

// Config is the static discovery configuration, a YAML file:
//
//	disks:
//	  - domain: web01
//	    uuid: 8f4b2c1e-5d3a-4e6f-9a8b-7c6d5e4f3a2b
//	    target_device: vda
//	    source_file: /srv/vms/web01.img
//	    format: raw
//	    guest_fs: xfs
//	guest_fs_overrides:
//	  - domain: "db*"
//	    target_device: vdb
//	    guest_fs: ext4
//	exclude_source_files: ["/var/lib/libvirt/images/*-seed.iso"]
//	exclude_domains: ["test-*"]
//	qmp_monitors:
//	  - domain: web01
//	    socket: /run/qemu/web01.qmp
//
// Unknown keys are errors, so that a typo does not silently change what is
// watched.
type Config struct {
	// Disks are watched in addition to what libvirt and /proc show, or
	// describe disks those sources find (matched by file identity), in
	// which case they override libvirt's metadata only where libvirt
	// has none.
	Disks []ConfigDisk `yaml:"disks"`
	// GuestFSOverrides set the guest file system of disks from any source;
	// the first matching entry wins, and wins over libvirt metadata and
	// Disks[].guest_fs.
	GuestFSOverrides []GuestFSOverride `yaml:"guest_fs_overrides"`
	// ExcludeSourceFiles are path.Match patterns of image files to leave
	// out whatever source reports them.
	ExcludeSourceFiles []string `yaml:"exclude_source_files"`
	// ExcludeDomains are path.Match patterns of domain names to leave out.
	ExcludeDomains []string `yaml:"exclude_domains"`
	// QMPMonitors name the QMP monitor socket of plain QEMU VMs (any
	// source but libvirt), for the guest side of their disks.
	QMPMonitors []QMPMonitor `yaml:"qmp_monitors"`
}

// QMPMonitor names the QMP monitor socket of one VM, by its domain name
// (QEMU's -name guest=, or the static disks' domain). QEMU serves one QMP
// client per socket at a time: a socket another tool keeps open leaves
// fspair waiting until its deadline, so give fspair a monitor of its own
// (-chardev socket,id=fspair,path=...,server=on,wait=off -mon
// chardev=fspair,mode=control).
type QMPMonitor struct {
	Domain string `yaml:"domain"` // exact
	Socket string `yaml:"socket"` // absolute path, as the VMM's mount namespace sees it
}

// ConfigDisk is one statically configured disk.
type ConfigDisk struct {
	Domain       string `yaml:"domain"`
	UUID         string `yaml:"uuid"`
	TargetDevice string `yaml:"target_device"`
	SourceFile   string `yaml:"source_file"`
	GuestFS      string `yaml:"guest_fs"`
	Format       string `yaml:"format"`
	Cache        string `yaml:"cache"`
	AIO          string `yaml:"aio"`
	Discard      string `yaml:"discard"`
	ReadOnly     bool   `yaml:"read_only"`
	PID          int    `yaml:"pid"`
}

// GuestFSOverride sets GuestFS for the disks it matches. Every selector
// given must match; at least one is required.
type GuestFSOverride struct {
	Domain       string `yaml:"domain"`        // path.Match pattern
	UUID         string `yaml:"uuid"`          // exact
	TargetDevice string `yaml:"target_device"` // exact
	SourceFile   string `yaml:"source_file"`   // path.Match pattern
	GuestFS      string `yaml:"guest_fs"`
}

// LoadConfig reads and validates a configuration file. All problems are
// reported at once, each with its line number.
func LoadConfig(file string) (*Config, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", file, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("load config %s: %w: larger than %d bytes", file, ErrInvalidConfig, maxConfigBytes)
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", file, err)
	}
	return cfg, nil
}

func parseConfig(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return &Config{}, nil // an empty file configures nothing
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, fmt.Errorf("%w: line %d: only one YAML document is allowed", ErrInvalidConfig, extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return &Config{}, nil
	}
	var errs []error
	checkKeys(root, reflect.TypeOf(Config{}), "", &errs)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	var cfg Config
	if err := root.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if errs := cfg.validate(root); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return &cfg, nil
}

// checkKeys reports mapping keys that t (a struct, or a slice of structs)
// has no yaml field for, and nodes of the wrong kind.
func checkKeys(n *yaml.Node, t reflect.Type, where string, errs *[]error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			*errs = append(*errs, fmt.Errorf("line %d: %s: want a mapping of keys", n.Line, describe(where)))
			return
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = t.Field(i).Type
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				*errs = append(*errs, fmt.Errorf("line %d: %s: unknown key %q (known keys: %s)",
					k.Line, describe(where), k.Value, strings.Join(names, ", ")))
				continue
			}
			checkKeys(v, ft, join(where, k.Value), errs)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			*errs = append(*errs, fmt.Errorf("line %d: %s: want a list", n.Line, describe(where)))
			return
		}
		for i, e := range n.Content {
			checkKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", where, i), errs)
		}
	default:
		if n.Kind != yaml.ScalarNode {
			*errs = append(*errs, fmt.Errorf("line %d: %s: want a single value", n.Line, describe(where)))
		}
	}
}

func describe(where string) string {
	if where == "" {
		return "top level"
	}
	return where
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

// itemLine returns the line of the i-th element of the list under key.
func itemLine(root *yaml.Node, key string, i int) int {
	for j := 0; j+1 < len(root.Content); j += 2 {
		if root.Content[j].Value == key {
			if l := root.Content[j+1]; l.Kind == yaml.SequenceNode && i < len(l.Content) {
				return l.Content[i].Line
			}
		}
	}
	return root.Line
}

var (
	validFormats  = []string{"", "raw", "qcow2"}
	validCaches   = []string{"", "none", "writeback", "writethrough", "directsync", "unsafe"}
	validAIOs     = []string{"", "threads", "native", "io_uring"}
	validDiscards = []string{"", "unmap", "ignore"}
	// guestFSRe accepts file system type names as blkid and the kernel
	// spell them (ext4, xfs, btrfs, vfat, ntfs3, ...).
	guestFSRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,31}$`)
)

func oneOf(v string, valid []string) error {
	for _, x := range valid {
		if v == x {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %s", v, strings.Join(valid[1:], ", "))
}

func (c *Config) validate(root *yaml.Node) []error {
	type lineError struct {
		line int
		err  error
	}
	var found []lineError
	add := func(line int, where string, err error) {
		found = append(found, lineError{line, fmt.Errorf("line %d: %s: %w", line, where, err)})
	}
	seen := map[string]int{}
	for i := range c.Disks {
		d := &c.Disks[i]
		line := itemLine(root, "disks", i)
		where := fmt.Sprintf("disks[%d]", i)
		switch {
		case d.SourceFile == "":
			add(line, where, errors.New("source_file is required"))
		case !filepath.IsAbs(d.SourceFile):
			add(line, where, fmt.Errorf("source_file %q must be an absolute path", d.SourceFile))
		default:
			d.SourceFile = filepath.Clean(d.SourceFile)
			if prev, dup := seen[d.SourceFile]; dup {
				add(line, where, fmt.Errorf("source_file %s is already configured at line %d", d.SourceFile, prev))
			}
			seen[d.SourceFile] = line
		}
		if d.Domain == "" {
			add(line, where, errors.New("domain is required"))
		}
		if d.UUID != "" {
			if u := normalizeUUID(d.UUID); u == "" {
				add(line, where, fmt.Errorf("uuid %q is not a UUID", d.UUID))
			} else {
				d.UUID = u
			}
		}
		if d.GuestFS != "" && !guestFSRe.MatchString(d.GuestFS) {
			add(line, where, fmt.Errorf("guest_fs %q is not a file system type name", d.GuestFS))
		}
		for _, f := range []struct {
			name, v string
			valid   []string
		}{{"format", d.Format, validFormats}, {"cache", d.Cache, validCaches}, {"aio", d.AIO, validAIOs}, {"discard", d.Discard, validDiscards}} {
			if err := oneOf(f.v, f.valid); err != nil {
				add(line, where, fmt.Errorf("%s: %w", f.name, err))
			}
		}
		if d.PID < 0 {
			add(line, where, fmt.Errorf("pid %d is negative", d.PID))
		}
	}
	for i := range c.GuestFSOverrides {
		o := &c.GuestFSOverrides[i]
		line := itemLine(root, "guest_fs_overrides", i)
		where := fmt.Sprintf("guest_fs_overrides[%d]", i)
		if o.Domain == "" && o.UUID == "" && o.TargetDevice == "" && o.SourceFile == "" {
			add(line, where, errors.New("needs at least one of domain, uuid, target_device, source_file"))
		}
		if !guestFSRe.MatchString(o.GuestFS) {
			add(line, where, fmt.Errorf("guest_fs %q is not a file system type name", o.GuestFS))
		}
		if o.UUID != "" {
			if u := normalizeUUID(o.UUID); u == "" {
				add(line, where, fmt.Errorf("uuid %q is not a UUID", o.UUID))
			} else {
				o.UUID = u
			}
		}
		for _, p := range []string{o.Domain, o.SourceFile} {
			if _, err := path.Match(p, ""); err != nil {
				add(line, where, fmt.Errorf("pattern %q: %w", p, err))
			}
		}
	}
	domains := map[string]int{}
	for i := range c.QMPMonitors {
		m := &c.QMPMonitors[i]
		line := itemLine(root, "qmp_monitors", i)
		where := fmt.Sprintf("qmp_monitors[%d]", i)
		switch {
		case m.Domain == "":
			add(line, where, errors.New("domain is required"))
		case domains[m.Domain] != 0:
			add(line, where, fmt.Errorf("domain %s already has a monitor at line %d", m.Domain, domains[m.Domain]))
		default:
			domains[m.Domain] = line
		}
		if !filepath.IsAbs(m.Socket) {
			add(line, where, fmt.Errorf("socket %q must be an absolute path", m.Socket))
		} else {
			m.Socket = filepath.Clean(m.Socket)
		}
	}
	for key, pats := range map[string][]string{"exclude_source_files": c.ExcludeSourceFiles, "exclude_domains": c.ExcludeDomains} {
		for i, p := range pats {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				if err == nil {
					err = errors.New("empty pattern")
				}
				add(itemLine(root, key, i), fmt.Sprintf("%s[%d]", key, i), fmt.Errorf("pattern %q: %w", p, err))
			}
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].line < found[j].line })
	errs := make([]error, len(found))
	for i, f := range found {
		errs[i] = f.err
	}
	return errs
}

// match reports whether a pattern that passed validation matches s; an
// empty pattern matches everything.
func match(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	ok, _ := path.Match(pattern, s)
	return ok
}

// guestFS returns the guest file system override for d, if any.
func (c *Config) guestFS(d Disk) (string, bool) {
	for _, o := range c.GuestFSOverrides {
		if match(o.Domain, d.Domain) && match(o.SourceFile, d.SourceFile) &&
			(o.UUID == "" || o.UUID == d.UUID) && (o.TargetDevice == "" || o.TargetDevice == d.TargetDevice) {
			return o.GuestFS, true
		}
	}
	return "", false
}

// qmpSockets returns the QMP socket the operator names for each domain
// (the first entry's, should a configuration not validated name one
// twice), indexed once per merge: looked up entry by entry for each disk,
// a configuration naming the monitors of 10,000 VMs cost 50 million
// string comparisons every --discovery.interval.
func (c *Config) qmpSockets() map[string]string {
	m := make(map[string]string, len(c.QMPMonitors))
	for _, q := range c.QMPMonitors {
		if _, ok := m[q.Domain]; !ok {
			m[q.Domain] = q.Socket
		}
	}
	return m
}

// excluded reports whether d is to be left out.
func (c *Config) excluded(d Disk) bool {
	for _, p := range c.ExcludeSourceFiles {
		if match(p, d.SourceFile) {
			return true
		}
	}
	for _, p := range c.ExcludeDomains {
		if match(p, d.Domain) {
			return true
		}
	}
	return false
}

// disks returns the configured disks in Disk form.
func (c *Config) disks() []Disk {
	out := make([]Disk, 0, len(c.Disks))
	for _, d := range c.Disks {
		out = append(out, Disk{
			Domain: d.Domain, UUID: d.UUID, TargetDevice: d.TargetDevice, SourceFile: d.SourceFile,
			Source: SourceStatic, PID: d.PID, Format: d.Format, Cache: d.Cache, AIO: d.AIO,
			Discard: d.Discard, ReadOnly: d.ReadOnly, GuestFS: d.GuestFS,
		})
	}
	return out
}
