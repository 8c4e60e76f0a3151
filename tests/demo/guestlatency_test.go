package main

import (
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The guest latency rows demo-smoke checks (scripts/demo-smoke.sh greps
// the same patterns): demo-web's last row has a guest p99 and the layer
// holding its time, demo-mail's the reason it has no guest histogram (the
// demo runs it through Debian 12's libvirt 9.0). smokeGuestRow finds the
// table's rows among the indented ones (the rates table's too).
var (
	smokeGuestRow  = regexp.MustCompile(`^  demo-(web|mail)/vda +([0-9.]+ ms|too few requests|no guest)`)
	smokeGuestWeb  = regexp.MustCompile(`^  demo-web/vda .*[0-9.]+ ms, (vmm|host_fs|device) [0-9]+%`)
	smokeGuestMail = regexp.MustCompile(`^  demo-mail/vda +no guest histogram: libvirt_too_old \(libvirt before 12\.1 has none\)$`)
)

// demoGuest gives the demo's disks their guest latency as a run would:
// demo-web over QMP with histograms, its writes too few for a p99;
// demo-mail through libvirt 9.0, without.
func demoGuest(disks []diskState) []diskState {
	for i := range disks {
		switch disks[i].domain {
		case "demo-web":
			disks[i].guest = guestLatency{histogram: "ok",
				p99: map[string]float64{"read": 0.01234, "flush": 0.0417},
				top: map[string]layerShare{"read": {"host_fs", 0.553}, "write": {"device", 0.7}, "flush": {"vmm", 0.904}}}
		case "demo-mail":
			disks[i].guest = guestLatency{histogram: "libvirt_too_old"}
		}
	}
	return disks
}

func TestGuestLatencyTableDemo(t *testing.T) {
	lines := guestLatencyTable(demoGuest(demoDisks()), lineWidth)
	checkWidth(t, "guest latency", lines)
	want := []string{
		"  DISK           GUEST_P99_READ (layer)  GUEST_P99_WRITE (layer)  GUEST_P99_FLUSH (layer)",
		"  demo-mail/vda  no guest histogram: libvirt_too_old (libvirt before 12.1 has none)",
		"  demo-web/vda   12.34 ms, host_fs 55%   too few requests         41.70 ms, vmm 90%",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if !smokeGuestMail.MatchString(lines[1]) || !smokeGuestRow.MatchString(lines[1]) {
		t.Errorf("demo-smoke's pattern for demo-mail's guest row does not match %q", lines[1])
	}
	if !smokeGuestWeb.MatchString(lines[2]) || !smokeGuestRow.MatchString(lines[2]) {
		t.Errorf("demo-smoke's pattern for demo-web's guest row does not match %q", lines[2])
	}
	// demo-web before the rules have a p99 of any operation: no number,
	// which the smoke's pattern refuses.
	early := demoGuest(demoDisks())
	early[1].guest.p99 = nil
	row := guestLatencyTable(early, lineWidth)[2]
	if !strings.HasPrefix(row, "  demo-web/vda   too few requests  ") || smokeGuestWeb.MatchString(row) || !smokeGuestRow.MatchString(row) {
		t.Errorf("demo-web without a p99: %q", row)
	}
	// A p99 without the layer (the ratio rules have none yet) shows alone,
	// and the smoke wants the layer.
	bare := demoGuest(demoDisks())
	bare[1].guest.top = nil
	row = guestLatencyTable(bare, lineWidth)[2]
	if !strings.Contains(row, "  12.34 ms  ") || smokeGuestWeb.MatchString(row) {
		t.Errorf("demo-web without a layer: %q", row)
	}
	// demo-mail as plain QEMU (libvirt unusable) would have histograms:
	// the smoke's pattern wants the reason.
	if smokeGuestMail.MatchString("  demo-mail/vda  1.00 ms, device 50%") {
		t.Error("demo-smoke's pattern for demo-mail takes a row with a p99")
	}
	// The rates table's rows are no guest rows.
	rates := ratesTable(demoDisks(), []string{"READ/s", "WRITE/s"}, map[string]map[string]string{
		"demo-web/vda": {"READ/s": "316.0", "WRITE/s": "3.0"}}, lineWidth)
	for _, l := range rates {
		if smokeGuestRow.MatchString(l) {
			t.Errorf("demo-smoke's guest row pattern takes the rates row %q", l)
		}
	}
}

// Every reason the exporter gives, and none at all, is said in words; a
// long domain is cut and the reason cut to the line.
func TestGuestLatencyTableReasons(t *testing.T) {
	var disks []diskState
	for _, h := range []string{"not_set", "refused", "other_bounds", "none", "new_reason", ""} {
		disks = append(disks, diskState{disk: "vm-" + h + "/vda", guest: guestLatency{histogram: h}})
	}
	lines := guestLatencyTable(disks, lineWidth)
	checkWidth(t, "guest latency", lines)
	t.Logf("\n%s", strings.Join(lines, "\n"))
	for i, want := range []string{
		"no guest histogram: not_set (none set yet; from libvirt, the domain's XML asks for none)",
		"no guest histogram: refused (QEMU refused block-latency-histogram-set)",
		"no guest histogram: other_bounds (set by someone else on other bounds)",
		"no guest histogram: none (no guest values)",
		"no guest histogram: new_reason",
		"no guest side (no fspair_disk_guest_info)",
	} {
		if !strings.HasSuffix(lines[1+i], "  "+want) {
			t.Errorf("row %q, want it to end %q", lines[1+i], want)
		}
	}
	// Beside a long domain (cut, keeping its target) a long reason is cut
	// to the line.
	long := strings.Repeat("x", 200) + "/vdb"
	disks = append(disks, diskState{disk: long, guest: guestLatency{histogram: "ok",
		p99: map[string]float64{"read": 1.5, "write": 0.000123, "flush": math.NaN()},
		top: map[string]layerShare{"read": {"device", 1}, "write": {"host_fs", math.NaN()}}}})
	lines = guestLatencyTable(disks, lineWidth)
	checkWidth(t, "guest latency", lines)
	t.Logf("\n%s", strings.Join(lines, "\n"))
	if !strings.HasSuffix(lines[1], "~") || !strings.Contains(lines[1], "  no guest histogram: not_set (none set yet") {
		t.Errorf("row %q, want the reason cut to the line", lines[1])
	}
	last := lines[len(lines)-1]
	for _, w := range []string{"~/vdb  ", "1500.00 ms, device 100%", "  0.12 ms  ", "  too few requests"} {
		if !strings.Contains(last, w) {
			t.Errorf("row %q lacks %q", last, w)
		}
	}
	// The cells line up under their heads.
	col := strings.Index(lines[0], "GUEST_P99_WRITE")
	if !strings.HasPrefix(last[col:], "0.12 ms") {
		t.Errorf("write cell not in its column %d: %q", col, last)
	}
}

// scripts/demo-smoke.sh greps the guest rows with the patterns above, as
// written there.
func TestGuestLatencySmokePatterns(t *testing.T) {
	b, err := os.ReadFile("../../scripts/demo-smoke.sh")
	if err != nil {
		t.Fatal(err)
	}
	for name, re := range map[string]*regexp.Regexp{"guest_row_re": smokeGuestRow, "guest_web_re": smokeGuestWeb, "guest_mail_re": smokeGuestMail} {
		if want := name + "='" + re.String() + "'\n"; !strings.Contains(string(b), want) {
			t.Errorf("scripts/demo-smoke.sh has no line %q: keep it and the test in step", strings.TrimSpace(want))
		}
	}
}
