package discovery

import (
	"path/filepath"
	"strings"
)

// QMP monitors on a QEMU command line. The guest side of a disk (what the
// guest asked of its virtio device, before QEMU merged requests and skipped
// flushes) is in QEMU's query-blockstats, which fspair reads over a QMP
// monitor socket. The operator names one (Config.QMPMonitors) or allows the
// ones QEMU's command line declares (Options.ProcQMP); libvirt's own
// monitor is never used: libvirt keeps it open for itself and a second
// client would wait behind it, and a domain's statistics come through
// libvirt anyway.

// Values of Disk.QMPNote: why a disk has no QMP socket fspair may use.
const (
	// QMPNoteLibvirt: the VMM is libvirt's (its monitor is libvirt's
	// charmonitor or lives under a libvirt directory); fspair never
	// connects to it.
	QMPNoteLibvirt = "libvirt"
	// QMPNoteNotAllowed: the command line declares QMP sockets, but
	// --discovery.proc.qmp is off.
	QMPNoteNotAllowed = "not_allowed"
)

// maxMonitors bounds the monitors kept per VM.
const maxMonitors = 16

// monitorParser collects what -qmp, -qmp-pretty, -chardev and -mon say
// about QMP monitors, in command line order.
type monitorParser struct {
	chardevs map[string]chardev // socket chardevs by id
	mons     []string           // chardev ids of -mon mode=control, in order
	order    []monitorRef       // -qmp paths and -mon references in command line order
	libvirt  bool
}

type chardev struct {
	path   string // "" for fd= sockets (libvirt passes its monitor as a descriptor)
	server bool
}

// monitorRef is one monitor: a path (-qmp unix:...) or a chardev id (-mon).
type monitorRef struct{ path, chardev string }

func (m *monitorParser) qmp(arg string) {
	// The legacy chardev spelling (qemu_chr_parse_compat() in
	// chardev/char.c): "unix:PATH[,server=on|server][,wait=off|nowait]".
	rest, ok := strings.CutPrefix(arg, "unix:")
	if !ok {
		return // stdio, tcp:, telnet:, ...: not a UNIX socket fspair can reach
	}
	opts, err := parseOpts(rest, "path")
	if err != nil {
		return
	}
	om := optMap(opts)
	if om["path"] == "" || parseBool(om["server"]) != yes {
		return // a client socket: QEMU connects out, nothing listens
	}
	m.add(monitorRef{path: om["path"]})
}

func (m *monitorParser) chardev(arg string) {
	opts, err := parseOpts(arg, "backend")
	if err != nil {
		return
	}
	om := optMap(opts)
	id := om["id"]
	if id == "charmonitor" || strings.Contains(om["path"], "/libvirt/") {
		// libvirt names its monitor charmonitor and keeps it under
		// /var/lib/libvirt/qemu (src/qemu/qemu_command.c,
		// qemuBuildMonitorCommandLine).
		m.libvirt = true
	}
	if om["backend"] != "socket" || id == "" {
		return
	}
	if m.chardevs == nil {
		m.chardevs = map[string]chardev{}
	}
	m.chardevs[id] = chardev{path: om["path"], server: parseBool(om["server"]) == yes}
}

func (m *monitorParser) mon(arg string) {
	opts, err := parseOpts(arg, "chardev")
	if err != nil {
		return
	}
	om := optMap(opts)
	if om["mode"] != "control" || om["chardev"] == "" {
		return // readline (HMP) is the default mode
	}
	m.add(monitorRef{chardev: om["chardev"]})
}

func (m *monitorParser) add(r monitorRef) {
	if len(m.order) < maxMonitors {
		m.order = append(m.order, r)
	}
}

// sockets returns the QMP server socket paths in command line order.
// Chardevs are resolved at the end, as -mon may come before its -chardev.
func (m *monitorParser) sockets() []string {
	var out []string
	for _, r := range m.order {
		p := r.path
		if r.chardev != "" {
			c, ok := m.chardevs[r.chardev]
			if !ok || !c.server {
				continue
			}
			p = c.path
		}
		if p == "" || strings.Contains(p, "/libvirt/") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// monitorsFor sets the QMP fields of a VM's disks: the sockets when allowed,
// otherwise why not. Relative socket paths are resolved against cwd.
func monitorsFor(vm *VM, allowed bool, cwd string) {
	for i := range vm.Disks {
		d := &vm.Disks[i]
		switch {
		case vm.Libvirt:
			d.QMPNote = QMPNoteLibvirt
		case len(vm.Monitors) == 0:
		case !allowed:
			d.QMPNote = QMPNoteNotAllowed
		default:
			d.QMP = make([]string, 0, len(vm.Monitors))
			for _, p := range vm.Monitors {
				if !filepath.IsAbs(p) {
					if cwd == "" {
						continue
					}
					p = filepath.Join(cwd, p)
				}
				d.QMP = append(d.QMP, p)
			}
		}
	}
}
