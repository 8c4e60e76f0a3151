package main

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"

	"github.com/fspair/fspair/tests/workload"
)

// TestMailVMRunsThePairLabsJob: the mail VM runs, unchanged, the job the
// pair lab measured its verdicts with (tests/workload/jobs/mail.fio), on
// the conditions docs/kdb/site.yaml names (raw image, cache=none) and a
// btrfs guest in an image of the pair lab's size.
func TestMailVMRunsThePairLabsJob(t *testing.T) {
	var mail vmSpec
	for _, v := range vms {
		if v.name == "demo-mail" {
			mail = v
		}
	}
	if mail.guestFS != "btrfs" || mail.hostFS != "ext4" || mail.format != "raw" || mail.cache != "none" || mail.imageMiB != workload.ImageMiB {
		t.Errorf("demo-mail: %s/%s %s cache=%s, %d MiB; want btrfs/ext4 raw cache=none, %d MiB",
			mail.guestFS, mail.hostFS, mail.format, mail.cache, mail.imageMiB, workload.ImageMiB)
	}
	jobWritten(t, mail, "/dev/vda", "btrfs", "mail")
	// The web VM runs the pair lab's web job, which the classifier is
	// fitted on beside Filebench's webserver.
	jobWritten(t, vms[0], "/dev/vdb", "xfs", "web")
}

// jobWritten checks that v's workload script mounts dev as guestFS and
// writes into the guest, unchanged, the lab job name (with its DIR).
func jobWritten(t *testing.T, v vmSpec, dev, guestFS string, name workload.Workload) {
	t.Helper()
	script, err := workloadScript(v, dev)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^mount -t ` + guestFS + ` ` + regexp.QuoteMeta(dev) + ` /mnt && printf %s ([A-Za-z0-9+/=]+) \| base64 -d >/tmp/demo.fio && ` +
		`\(DIR=/mnt RUNTIME=86400 fio /tmp/demo.fio >/dev/null 2>&1 &\)$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("%s script: %s", v.name, script)
	}
	got, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil {
		t.Fatal(err)
	}
	want, err := workload.Job(name)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want || !strings.Contains(want, "directory=${DIR}") {
		t.Errorf("the job written into %s is not tests/workload/jobs/%s.fio (or no longer takes DIR):\n%s", v.name, name, got)
	}
}

// TestAllClassed: the demo's first summary waits for a class on every VM's
// disk, not on the first one the rules class.
func TestAllClassed(t *testing.T) {
	for _, c := range []struct {
		disks []diskState
		n     int
		want  bool
	}{
		{nil, 2, false},
		{[]diskState{{class: "web"}, {}}, 2, false},
		{[]diskState{{class: "web"}}, 2, false},
		{[]diskState{{class: "web"}, {class: "mail"}}, 2, true},
		{[]diskState{{class: "mixed"}, {class: "idle"}}, 2, true},
	} {
		if got := allClassed(c.disks, c.n); got != c.want {
			t.Errorf("allClassed(%v, %d) = %v, want %v", c.disks, c.n, got, c.want)
		}
	}
}
