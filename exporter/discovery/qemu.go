package discovery

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Bounds for ParseQEMUArgs, whose input comes from other processes.
const (
	// maxArgs bounds the argument count. Linux limits the whole command
	// line to ARG_MAX (a quarter of the stack limit, 2 MiB by default);
	// QEMU command lines of large VMs have a few hundred arguments.
	maxArgs = 1 << 16
	// maxArgLen is MAX_ARG_STRLEN (include/uapi/linux/binfmts.h): no single
	// argument of a real process is longer.
	maxArgLen = 128 << 10
	// maxNodes bounds drives, block nodes and devices together.
	maxNodes = 1 << 12
	// maxChainDepth bounds walks through node references (which may loop
	// in hostile input); real chains are format -> filter(s) -> protocol.
	maxChainDepth = 64
	// maxOtherFiles bounds VM.OtherFiles.
	maxOtherFiles = 1 << 12
	// maxReportedErrors bounds the malformed options an error describes.
	maxReportedErrors = 16
)

// Sentinel errors of ParseQEMUArgs.
var (
	// ErrEmptyCommandLine is returned for an empty argument list (the
	// cmdline of a kernel thread or a zombie is empty).
	ErrEmptyCommandLine = errors.New("empty command line")
	// ErrTooLarge is returned for a command line beyond what Linux allows a
	// process, which therefore is not a real one.
	ErrTooLarge = errors.New("command line too large")
)

// VM is what a QEMU command line says about a virtual machine.
type VM struct {
	Name  string // -name guest=
	UUID  string // -uuid, normalised to lower case
	PID   int    // set by ScanProc
	Disks []Disk
	// OtherFiles are absolute paths the command line names that are not
	// disk images: firmware, kernel, initrd, backing images, pid and log
	// files, character device paths, CD-ROM images, unattached drives.
	// ScanProc never reports these as disks.
	OtherFiles []string
	// Ignored lists drives that are not backed by an image file, each with
	// the reason ("drive-virtio-disk1: protocol nbd").
	Ignored []string
	// Monitors are the QMP server sockets the command line declares
	// (-qmp unix:..., -chardev socket + -mon mode=control), in order,
	// libvirt's left out; relative paths as given.
	Monitors []string
	// Libvirt is set when the command line is libvirt's (its monitor
	// chardev): fspair never talks to that QEMU's monitor.
	Libvirt bool
}

// flagOptions are the QEMU options that take no argument
// (qemu-options.hx entries without HAS_ARG, current and removed ones).
var flagOptions = map[string]bool{
	"h": true, "help": true, "version": true, "S": true, "s": true,
	"snapshot": true, "nographic": true, "portrait": true, "full-screen": true,
	"win2k-hack": true, "no-fd-bootchk": true, "no-acpi": true, "no-hpet": true,
	"enable-kvm": true, "no-kvm": true, "xen-attach": true, "xen-domid-restrict": true,
	"no-reboot": true, "no-shutdown": true, "daemonize": true,
	"only-migratable": true, "nodefaults": true, "no-user-config": true,
	"nodefconfig": true, "enable-sync-profile": true, "singlestep": true,
	"preconfig": true, "async-teardown": true, "mem-prealloc": true, "usb": true,
	"audio-help": true, "no-quit": true, "ctrl-grab": true, "alt-grab": true,
	"no-frame": true, "sdl": true, "curses": true, "enable-fips": true,
	"no-kvm-irqchip": true, "no-kvm-pit": true, "no-kvm-pit-reinjection": true,
	"tdf": true, "rtc-td-hack": true, "semihosting": true, "old-param": true,
	"show-cursor": true, "no-graphic": true, "enable-nesting": true,
}

// argOptions are options known to take an argument even when it starts
// with "-". Options in neither table take the next argument unless it looks
// like an option.
var argOptions = map[string]bool{
	"append": true, "name": true, "uuid": true, "drive": true, "blockdev": true,
	"device": true, "kernel": true, "initrd": true, "bios": true, "pidfile": true,
	"D": true, "L": true, "machine": true, "M": true, "cpu": true, "accel": true,
	"smp": true, "m": true, "object": true, "chardev": true, "netdev": true,
	"serial": true, "monitor": true, "qmp": true, "qmp-pretty": true, "mon": true, "global": true,
	"hda": true, "hdb": true, "hdc": true, "hdd": true, "cdrom": true,
	"fda": true, "fdb": true, "sd": true, "pflash": true, "mtdblock": true,
}

// parser accumulates a command line.
type parser struct {
	binary   string
	snapshot bool // -snapshot
	vm       VM
	drives   []*drive
	nodes    map[string]map[string]any // -blockdev nodes (and inline children) by node-name
	tops     []map[string]any          // -blockdev arguments in order
	devices  []*device
	other    map[string]bool
	count    int
	mon      monitorParser
}

// drive is one -drive (or -hda, -cdrom, ...) option.
type drive struct {
	id          string
	ifType      string
	bus, unit   int // -1 when not given
	index       int // -1 when not given
	media       string
	snapshot    bool
	writeback   tristate       // from cache= / cache.writeback
	top         map[string]any // the block node tree the drive defines
	noMedium    bool           // no file= (or an empty one) and no file.*
	parseFailed string         // why the file name could not be used
}

// device is one -device with a drive= property.
type device struct {
	driver, id, drive string
	writeCache        tristate
}

// ParseQEMUArgs reads the argument vector of a QEMU process (argv[0]
// included) and returns the VM it describes. Disks are the drives and block
// nodes attached to a guest device whose image is a file; nodes using other
// protocols (nbd, iscsi, rbd, ...) or host block devices are left out and
// listed in VM.Ignored. Relative image paths are returned as given (QEMU
// resolves them against its working directory; ScanProc does that).
//
// Options that cannot be parsed are skipped: the VM built from the rest is
// returned together with an error describing them. Only ErrEmptyCommandLine
// and ErrTooLarge come with a nil VM.
func ParseQEMUArgs(args []string) (*VM, error) {
	if len(args) == 0 {
		return nil, ErrEmptyCommandLine
	}
	if len(args) > maxArgs {
		return nil, fmt.Errorf("%d arguments: %w", len(args), ErrTooLarge)
	}
	p := &parser{
		binary: args[0],
		nodes:  map[string]map[string]any{},
		other:  map[string]bool{},
	}
	var errs []error
	dropped := 0
	report := func(err error) {
		if len(errs) < maxReportedErrors {
			errs = append(errs, err)
		} else {
			dropped++
		}
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if len(a) > maxArgLen {
			report(fmt.Errorf("argument %d: %w", i, ErrTooLarge))
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			// A bare argument is the first hard disk (QEMU's vl.c:
			// drive_add(IF_DEFAULT, 0, optarg, HD_OPTS)).
			p.addLegacyDrive("", 0, a, "disk")
			continue
		}
		name := strings.TrimPrefix(a[1:], "-") // "--drive" is "-drive"
		if flagOptions[name] {
			if name == "snapshot" {
				p.snapshot = true
			}
			continue
		}
		if i+1 >= len(args) {
			if argOptions[name] {
				report(fmt.Errorf("option -%s: missing argument", truncate(name)))
			}
			break
		}
		if !argOptions[name] && strings.HasPrefix(args[i+1], "-") {
			continue // an unknown flag
		}
		i++
		if len(args[i]) > maxArgLen {
			report(fmt.Errorf("option -%s: %w", truncate(name), ErrTooLarge))
			continue
		}
		if err := p.option(name, args[i]); err != nil {
			report(fmt.Errorf("option -%s %s: %w", truncate(name), truncate(args[i]), err))
		}
	}
	if dropped > 0 {
		errs = append(errs, fmt.Errorf("%d more malformed options", dropped))
	}
	p.finish()
	return &p.vm, errors.Join(errs...)
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func (p *parser) option(name, arg string) error {
	switch name {
	case "name":
		opts, err := parseOpts(arg, "guest")
		if err != nil {
			return err
		}
		p.vm.Name = optMap(opts)["guest"]
	case "uuid":
		p.vm.UUID = normalizeUUID(strings.TrimSpace(arg))
	case "drive":
		return p.addDrive(arg)
	case "hda", "hdb", "hdc", "hdd":
		p.addLegacyDrive("", int(name[2]-'a'), arg, "disk")
	case "cdrom":
		p.addLegacyDrive("", 2, arg, "cdrom")
	case "fda", "fdb":
		p.addLegacyDrive("floppy", int(name[2]-'a'), arg, "disk")
	case "sd":
		p.addLegacyDrive("sd", -1, arg, "disk")
	case "pflash":
		p.addLegacyDrive("pflash", -1, arg, "disk")
	case "mtdblock":
		p.addLegacyDrive("mtd", -1, arg, "disk")
	case "blockdev":
		return p.addBlockdev(arg)
	case "device":
		return p.addDevice(arg)
	case "append":
		// The guest kernel's command line names guest paths, not host
		// files.
	case "qmp", "qmp-pretty":
		p.mon.qmp(arg)
		p.collectPaths(arg)
	case "chardev":
		p.mon.chardev(arg)
		p.collectPaths(arg)
	case "mon":
		p.mon.mon(arg)
	default:
		p.collectPaths(arg)
	}
	return nil
}

// collectPaths remembers every absolute path in an option argument, whether
// the whole argument, a "file:"-style character device, a key=value value or
// a string in a JSON object.
func (p *parser) collectPaths(arg string) {
	if strings.HasPrefix(arg, "{") {
		if m, err := parseJSONObject(arg); err == nil {
			walkStrings(m, 0, p.addOther)
		}
		return
	}
	p.addOther(arg)
	if opts, err := parseOpts(arg, ""); err == nil {
		for _, o := range opts {
			p.addOther(o.value)
		}
	}
}

func walkStrings(v any, depth int, fn func(string)) {
	if depth > maxChainDepth {
		return
	}
	switch v := v.(type) {
	case string:
		fn(v)
	case map[string]any:
		for _, c := range v {
			walkStrings(c, depth+1, fn)
		}
	case []any:
		for _, c := range v {
			walkStrings(c, depth+1, fn)
		}
	}
}

func (p *parser) addOther(s string) {
	for _, prefix := range []string{"file:", "pipe:", "unix:"} {
		s = strings.TrimPrefix(s, prefix)
	}
	if !strings.HasPrefix(s, "/") || len(p.other) >= maxOtherFiles {
		return
	}
	p.other[filepath.Clean(s)] = true
}

func (p *parser) reserve() error {
	p.count++
	if p.count > maxNodes {
		return fmt.Errorf("more than %d drives, nodes and devices: %w", maxNodes, ErrTooLarge)
	}
	return nil
}

// driveLevelKeys are -drive options that belong to the drive and the guest
// device rather than to the block node tree (QEMU's blockdev.c
// qemu_legacy_drive_opts and qemu_common_drive_opts, plus the throttling
// group).
var driveLevelKeys = map[string]bool{
	"if": true, "index": true, "bus": true, "unit": true, "media": true,
	"id": true, "snapshot": true, "cache": true, "format": true, "file": true,
	"readonly": true, "serial": true, "werror": true, "rerror": true,
	"addr": true, "copy-on-read": true, "boot": true, "trans": true,
	"cyls": true, "heads": true, "secs": true, "aio": true, "discard": true,
	"stats-account-invalid": true, "stats-account-failed": true,
	"stats-intervals": true, "group": true,
}

func (p *parser) addDrive(arg string) error {
	if err := p.reserve(); err != nil {
		return err
	}
	opts, err := parseOpts(arg, "")
	if err != nil {
		return err
	}
	m := optMap(opts)
	var nodeOpts []opt
	for _, o := range opts {
		k := o.key
		if driveLevelKeys[k] || strings.HasPrefix(k, "throttling.") ||
			strings.HasPrefix(k, "bps") || strings.HasPrefix(k, "iops") {
			continue
		}
		nodeOpts = append(nodeOpts, o)
	}
	top, err := nest(nodeOpts)
	if err != nil {
		return err
	}
	d := &drive{
		id:     m["id"],
		ifType: m["if"],
		media:  m["media"],
		bus:    -1, unit: -1, index: -1,
		top: top,
	}
	if v, ok := intOpt(m, "bus"); ok {
		d.bus = v
	}
	if v, ok := intOpt(m, "unit"); ok {
		d.unit = v
	}
	if v, ok := intOpt(m, "index"); ok {
		d.index = v
	}
	d.snapshot = parseBool(m["snapshot"]) == yes
	if f, ok := m["format"]; ok {
		top["driver"] = f
	}
	if mode, ok := m["cache"]; ok {
		direct, noFlush, wb, ok := cacheModeFlags(mode)
		if !ok {
			return fmt.Errorf("invalid cache mode %q", truncate(mode))
		}
		cache, _ := top["cache"].(map[string]any)
		if cache == nil {
			cache = map[string]any{}
			top["cache"] = cache
		}
		// Explicit cache.direct / cache.no-flush override the mode.
		if _, set := cache["direct"]; !set {
			cache["direct"] = direct
		}
		if _, set := cache["no-flush"]; !set {
			cache["no-flush"] = noFlush
		}
		d.writeback = no
		if wb {
			d.writeback = yes
		}
	}
	if cache, ok := top["cache"].(map[string]any); ok {
		if wb := boolOpt(cache, "writeback"); wb != unset {
			d.writeback = wb
		}
	}
	if v, ok := m["aio"]; ok {
		top["aio"] = v
	}
	if v, ok := m["discard"]; ok {
		top["discard"] = v
	}
	if parseBool(m["readonly"]) == yes {
		top["read-only"] = true
	}
	if f, ok := m["file"]; ok && f != "" {
		if err := p.setDriveFile(d, f); err != nil {
			return err
		}
	} else if _, ok := top["file"].(map[string]any); !ok {
		d.noMedium = true
	}
	p.drives = append(p.drives, d)
	return nil
}

// addLegacyDrive handles -hda, -cdrom, -fda, ... and bare file arguments:
// QEMU turns them into a -drive with the file name taken literally, without
// comma escaping (vl.c drive_add()).
func (p *parser) addLegacyDrive(ifType string, index int, file, media string) {
	if p.reserve() != nil {
		return
	}
	d := &drive{ifType: ifType, index: index, bus: -1, unit: -1, media: media, top: map[string]any{}}
	if err := p.setDriveFile(d, file); err != nil {
		d.parseFailed = err.Error()
	}
	p.drives = append(p.drives, d)
}

// setDriveFile attaches the protocol node a -drive file= names to the
// drive's top node, merging file.* options given separately.
func (p *parser) setDriveFile(d *drive, name string) error {
	if rest, ok := strings.CutPrefix(name, "json:"); ok {
		// The "json:" pseudo-protocol carries the options of the whole
		// node tree (block.c parse_json_filename()); -drive options win.
		m, err := parseJSONObject(rest)
		if err != nil {
			return err
		}
		for k, v := range m {
			if _, set := d.top[k]; !set {
				d.top[k] = v
			}
		}
		return nil
	}
	child, _ := d.top["file"].(map[string]any)
	if child == nil {
		child = map[string]any{}
		d.top["file"] = child
	}
	proto, filename := splitProtocol(name)
	if _, set := child["driver"]; !set {
		child["driver"] = proto
	}
	if _, set := child["filename"]; !set {
		child["filename"] = filename
	}
	return nil
}

// splitProtocol finds the protocol of a QEMU file name: "proto:..." when a
// colon comes before any slash (block.c path_has_protocol()), else a plain
// file. "file:" is the explicit plain file protocol.
func splitProtocol(name string) (proto, filename string) {
	i := strings.IndexAny(name, ":/")
	if i < 0 || name[i] != ':' {
		return "file", name
	}
	if name[:i] == "file" {
		return "file", name[i+1:]
	}
	return name[:i], name
}

func (p *parser) addBlockdev(arg string) error {
	if err := p.reserve(); err != nil {
		return err
	}
	m, err := parseObject(arg, "driver")
	if err != nil {
		return err
	}
	p.tops = append(p.tops, m)
	return p.register(m, 0)
}

// childKeys are the properties through which a block node refers to its
// children, by node name or inline (QAPI BlockdevOptions* in
// qapi/block-core.json).
var childKeys = []string{"file", "backing", "data-file", "image", "test", "raw", "log", "target", "children"}

// register records a node and its inline children under their node names.
func (p *parser) register(m map[string]any, depth int) error {
	if depth > maxChainDepth {
		return errors.New("block nodes nested too deeply")
	}
	if name := str(m, "node-name"); name != "" {
		if _, dup := p.nodes[name]; dup {
			return fmt.Errorf("duplicate node-name %q", truncate(name))
		}
		if len(p.nodes) >= maxNodes {
			return fmt.Errorf("more than %d block nodes: %w", maxNodes, ErrTooLarge)
		}
		p.nodes[name] = m
	}
	for _, k := range childKeys {
		switch c := m[k].(type) {
		case map[string]any:
			if err := p.register(c, depth+1); err != nil {
				return err
			}
		case []any:
			for _, e := range c {
				if cm, ok := e.(map[string]any); ok {
					if err := p.register(cm, depth+1); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func (p *parser) addDevice(arg string) error {
	if err := p.reserve(); err != nil {
		return err
	}
	m, err := parseObject(arg, "driver")
	if err != nil {
		return err
	}
	if d := str(m, "drive"); d != "" {
		p.devices = append(p.devices, &device{
			driver:     str(m, "driver"),
			id:         str(m, "id"),
			drive:      d,
			writeCache: boolOpt(m, "write-cache"), // "auto" stays unset
		})
	}
	walkStrings(m, 0, p.addOther)
	return nil
}

// formatDrivers are QEMU's image format drivers: the first one met on the
// way down from the device is the disk's format.
var formatDrivers = map[string]bool{
	"raw": true, "qcow2": true, "qcow": true, "qed": true, "vmdk": true,
	"vpc": true, "vdi": true, "vhdx": true, "luks": true, "parallels": true,
	"bochs": true, "cloop": true, "dmg": true,
}

// filterDrivers pass I/O through to one child, named by the value.
var filterDrivers = map[string]string{
	"throttle": "file", "copy-on-read": "file", "preallocate": "file",
	"compress": "file", "blklogwrites": "file", "copy-before-write": "file",
	"snapshot-access": "file", "blkdebug": "image", "blkreplay": "image",
}

// chain is what resolving a node tree from the device down to the protocol
// node yields.
type chain struct {
	file     string // the image file, "" if none
	notFile  string // why there is no image file
	format   string
	direct   bool
	noFlush  bool
	readOnly bool
	aio      string
	discard  bool // guest discards reach the file
}

// nodeState is what an inline child inherits from its parent
// (bdrv_inherited_options() in QEMU's block.c: cache.direct,
// cache.no-flush and read-only are copied, and the AIO flags travel with
// the open flags). Children referenced by node name inherit nothing.
type nodeState struct {
	direct, noFlush, readOnly tristate
	aio                       string
}

// walker resolves one node tree. Named nodes are visited at most once,
// which stops reference cycles; inline children form a tree and cannot loop.
type walker struct {
	p       *parser
	visited map[string]bool
}

// resolve walks from top (a node object or a node name) down to the
// protocol node, following at most maxChainDepth nodes. Backing and data
// files are not followed: every file name in a node tree is recorded as a
// non-disk file anyway (see finish).
func (p *parser) resolve(top any) chain {
	w := &walker{p: p, visited: map[string]bool{}}
	return w.walk(top)
}

func (w *walker) walk(top any) chain {
	var c chain
	c.discard = true
	var st nodeState
	cur, inline := top, false
	for depth := 0; ; depth++ {
		if depth >= maxChainDepth {
			c.notFile = "node chain too long"
			return c
		}
		var m map[string]any
		switch v := cur.(type) {
		case string:
			if w.visited[v] {
				c.notFile = fmt.Sprintf("node chain loops through %q", truncate(v))
				return c
			}
			w.visited[v] = true
			m = w.p.nodes[v]
			if m == nil {
				c.notFile = fmt.Sprintf("unknown node %q", truncate(v))
				return c
			}
			inline = false
		case map[string]any:
			m = v
			if n := str(m, "node-name"); n != "" {
				w.visited[n] = true
			}
		default:
			c.notFile = "no file child"
			return c
		}
		if !inline {
			st = nodeState{}
		}
		if cache, ok := m["cache"].(map[string]any); ok {
			if v := boolOpt(cache, "direct"); v != unset {
				st.direct = v
			}
			if v := boolOpt(cache, "no-flush"); v != unset {
				st.noFlush = v
			}
		}
		if v := boolOpt(m, "read-only"); v != unset {
			st.readOnly = v
		}
		if v := str(m, "aio"); v != "" {
			st.aio = v
		}
		if st.readOnly == yes {
			c.readOnly = true
		}
		// Discards reach the file only if every layer passes them on.
		// Lower layers defined inline default to unmap, the top layer and
		// separately defined nodes to ignore (block.c
		// bdrv_inherited_options() and bdrv_open_common()).
		switch normalizeDiscard(str(m, "discard")) {
		case "unmap":
		case "ignore":
			c.discard = false
		default:
			if !inline {
				c.discard = false
			}
		}

		driver := str(m, "driver")
		switch {
		case driver == "file":
			fn := str(m, "filename")
			switch {
			case fn == "":
				c.notFile = "file node without filename"
			case strings.HasPrefix(path.Clean(fn), "/dev/"):
				c.notFile = "host device " + truncate(fn)
			default:
				c.file = fn
				c.direct = st.direct == yes
				c.noFlush = st.noFlush == yes
				c.aio = st.aio
				if c.aio == "" {
					c.aio = "threads" // file-posix default
				}
				if depth == 0 {
					// A device attached straight to the protocol
					// node reads the file raw.
					c.format = "raw"
				}
			}
			return c
		case driver == "" || formatDrivers[driver]:
			// "" is a -drive without format=: QEMU probes the format.
			if c.format == "" {
				c.format = driver
			}
			cur = m["file"]
		case filterDrivers[driver] != "":
			cur = m[filterDrivers[driver]]
		case driver == "host_device" || driver == "host_cdrom":
			c.notFile = "host device " + truncate(str(m, "filename"))
			return c
		default:
			c.notFile = "protocol " + truncate(driver)
			return c
		}
		if cur == nil {
			c.notFile = fmt.Sprintf("%s node without file child", truncate(driver))
			return c
		}
		_, isRef := cur.(string)
		inline = !isRef
	}
}

// defaultInterface is the interface type a -drive without if= (and -hda,
// -cdrom) gets: the machine's block_default_type. IDE for the x86 pc and
// q35 machines, virtio for s390x and the Arm and RISC-V virt machines,
// SCSI for ppc64 pseries.
func (p *parser) defaultInterface() string {
	b := path.Base(p.binary)
	switch {
	case strings.Contains(b, "s390x"), strings.Contains(b, "aarch64"),
		strings.Contains(b, "arm"), strings.Contains(b, "riscv"):
		return "virtio"
	case strings.Contains(b, "ppc"):
		return "scsi"
	}
	return "ide"
}

// maxDevs is the number of units per bus for the interface types that
// have buses (blockdev.c if_max_devs).
func maxDevs(ifType string) int {
	switch ifType {
	case "ide":
		return 2
	case "scsi":
		return 7
	}
	return 0
}

// assignIDs gives drives without id= the name QEMU generates in
// drive_new(): "ide0-hd0", "scsi0-cd1", "virtio0", "none1", ...
func (p *parser) assignIDs() {
	type slot struct {
		ifType    string
		bus, unit int
	}
	taken := map[slot]bool{}
	// resume remembers, per interface and starting bus, where the last
	// search for a free unit ended: every slot before it is taken, so the
	// next search can start there, which keeps many drives linear.
	type start struct {
		ifType string
		bus    int
	}
	resume := map[start]slot{}
	for _, d := range p.drives {
		if d.ifType == "" {
			d.ifType = p.defaultInterface()
		}
		if d.media == "" {
			d.media = "disk"
		}
		perBus := maxDevs(d.ifType)
		bus, unit := d.bus, d.unit
		if bus < 0 {
			bus = 0
		}
		if d.index >= 0 {
			if perBus > 0 {
				bus, unit = d.index/perBus, d.index%perBus
			} else {
				bus, unit = 0, d.index
			}
		}
		if unit < 0 {
			from := start{d.ifType, bus}
			unit = 0
			if r, ok := resume[from]; ok {
				bus, unit = r.bus, r.unit
			}
			for taken[slot{d.ifType, bus, unit}] && unit < maxNodes {
				unit++
				if perBus > 0 && unit >= perBus {
					unit -= perBus
					bus++
				}
			}
			resume[from] = slot{d.ifType, bus, unit}
		}
		taken[slot{d.ifType, bus, unit}] = true
		if d.id != "" {
			continue
		}
		media := ""
		if d.ifType == "ide" || d.ifType == "scsi" {
			media = "-hd"
			if d.media == "cdrom" {
				media = "-cd"
			}
		}
		if perBus > 0 {
			d.id = fmt.Sprintf("%s%d%s%d", d.ifType, bus, media, unit)
		} else {
			d.id = fmt.Sprintf("%s%s%d", d.ifType, media, unit)
		}
	}
}

// isCDROMDevice reports whether a -device driver is a CD-ROM drive
// (ide-cd, scsi-cd).
func isCDROMDevice(driver string) bool {
	return strings.HasSuffix(driver, "-cd")
}

// finish builds the VM's disks from the drives, nodes and devices.
func (p *parser) finish() {
	p.assignIDs()
	devByDrive := map[string]*device{}
	for _, dv := range p.devices {
		if _, dup := devByDrive[dv.drive]; !dup {
			devByDrive[dv.drive] = dv
		}
	}

	// Every file a node tree names is known to the VM: backing and data
	// files, firmware attached with -machine pflashN=, CD-ROM images,
	// nodes no device uses (block job targets, exports). Disk images are
	// taken out again below.
	for _, d := range p.drives {
		walkStrings(d.top, 0, p.addOther)
	}
	for _, m := range p.tops {
		walkStrings(m, 0, p.addOther)
	}

	for _, d := range p.drives {
		if d.noMedium {
			continue
		}
		if d.parseFailed != "" {
			p.vm.Ignored = append(p.vm.Ignored, d.id+": "+d.parseFailed)
			continue
		}
		dv := devByDrive[d.id]
		// Firmware flash, CD-ROMs and drives no device uses are no disks.
		if d.media == "cdrom" || (dv != nil && isCDROMDevice(dv.driver)) ||
			d.ifType == "pflash" || d.ifType == "mtd" || (d.ifType == "none" && dv == nil) {
			continue
		}
		c := p.resolve(d.top)
		if c.file == "" {
			p.vm.Ignored = append(p.vm.Ignored, d.id+": "+c.notFile)
			continue
		}
		target := d.id
		if dv != nil && dv.id != "" {
			target = dv.id
		}
		wb := d.writeback
		if dv != nil && dv.writeCache != unset {
			wb = dv.writeCache
		}
		p.addDisk(target, c, wb, d.snapshot || p.snapshot)
	}

	driveIDs := map[string]bool{}
	for _, d := range p.drives {
		driveIDs[d.id] = true
	}
	for _, dv := range p.devices {
		if driveIDs[dv.drive] || isCDROMDevice(dv.driver) {
			continue
		}
		if _, ok := p.nodes[dv.drive]; !ok {
			p.vm.Ignored = append(p.vm.Ignored, fmt.Sprintf("%s: device %s refers to an unknown drive", truncate(dv.drive), truncate(dv.driver)))
			continue
		}
		c := p.resolve(dv.drive)
		if c.file == "" {
			p.vm.Ignored = append(p.vm.Ignored, truncate(dv.drive)+": "+c.notFile)
			continue
		}
		target := dv.id
		if target == "" {
			target = dv.drive
		}
		p.addDisk(target, c, dv.writeCache, p.snapshot)
	}

	for _, d := range p.vm.Disks {
		delete(p.other, filepath.Clean(d.SourceFile))
	}
	p.vm.OtherFiles = make([]string, 0, len(p.other))
	for f := range p.other {
		p.vm.OtherFiles = append(p.vm.OtherFiles, f)
	}
	sort.Strings(p.vm.OtherFiles)
	for i := range p.vm.Disks {
		p.vm.Disks[i].Domain = p.vm.Name
		p.vm.Disks[i].UUID = p.vm.UUID
	}
	p.vm.Monitors = p.mon.sockets()
	p.vm.Libvirt = p.mon.libvirt
}

func (p *parser) addDisk(target string, c chain, writeback tristate, snapshot bool) {
	// The device's write cache setting decides between none and
	// directsync, writeback and writethrough (QEMU docs, "-drive cache=").
	discard := "ignore"
	if c.discard {
		discard = "unmap"
	}
	p.vm.Disks = append(p.vm.Disks, Disk{
		TargetDevice: target,
		SourceFile:   c.file,
		Source:       SourceQEMU,
		Format:       c.format,
		Cache:        cacheMode(c.direct, c.noFlush, writeback.or(true)),
		AIO:          c.aio,
		Discard:      discard,
		// With snapshot=on QEMU opens the image read-only and sends guest
		// writes to a temporary overlay, so the file itself is only read.
		ReadOnly: c.readOnly || snapshot,
	})
}
