package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/fspair/fspair/exporter/collector"
	"github.com/fspair/fspair/exporter/inventory"
	"github.com/fspair/fspair/exporter/probe"
)

// check prints the probes and disks found and says whether all is well.
// The disks are found first: a file system's programs are attached only
// once an image on it is tracked, and listed from then on.
func check(ctx context.Context, inv *inventory.Inventory, probes *probe.Probes) int {
	refreshErr := inv.Refresh(ctx)
	ok := true
	for _, pr := range probes.Programs() {
		if pr.Err != nil && !errors.Is(pr.Err, probe.ErrDenied) {
			ok = false
		}
	}
	running, requested := probes.Mode()
	fmt.Printf("probe mode: %s (asked for: %s)\n\n", running, requested)
	writePrograms(os.Stdout, probes.Programs())
	if err := refreshErr; err != nil {
		fmt.Printf("discovery failed: %s\n", field(err.Error()))
		return 1
	}
	st := inv.Stats()
	fmt.Println()
	for src, err := range st.SourceErrors {
		if err != nil {
			fmt.Printf("discovery source %s: %s\n", src, field(err.Error()))
			ok = false
		}
	}
	writeDisks(os.Stdout, inv.Disks())
	writeUnfollowed(os.Stdout, inv.Disks(), probes)
	if len(st.ImageProblems) > 0 {
		fmt.Println()
		writeImageProblems(os.Stdout, st.ImageProblems)
		ok = false
	}
	fmt.Printf("\n%d disks tracked, %d programs attached of %d\n", st.TrackedDisks, attached(probes), len(probes.Programs()))
	if n := len(st.ImageProblems); n > 0 {
		fmt.Printf("%d image files could not be opened or identified (listed above with the reason)\n", n)
	}
	if !ok {
		return 1
	}
	return 0
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// row writes one table row; every cell goes through field.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		cells[i] = field(c)
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// writePrograms writes the table of BPF programs.
func writePrograms(out io.Writer, programs []*probe.Program) {
	w := newTable(out)
	fmt.Fprintln(w, "PROGRAM\tHOOK\tATTACHED\tERROR")
	for _, pr := range programs {
		msg := ""
		if pr.Err != nil {
			msg = pr.Err.Error()
		}
		row(w, pr.Name, pr.Hook, strconv.FormatBool(pr.Attached), msg)
	}
	w.Flush()
}

// writeUnfollowed lists, for each tracked disk, the request paths the
// probe mode's programs do not follow (fspair_disk_unfollowed).
func writeUnfollowed(out io.Writer, disks []inventory.Disk, probes collector.CoverageReader) {
	var w *tabwriter.Writer
	for _, d := range disks {
		if !d.Tracked {
			continue
		}
		for _, g := range probes.Unfollowed(d.HostFS.FSType, d.Cache, d.AIO) {
			if w == nil {
				fmt.Fprintln(out, "\nRequest paths this probe mode does not follow (fspair_disk_unfollowed):")
				w = newTable(out)
				fmt.Fprintln(w, "DOMAIN\tTARGET\tOP\tPATH\tMISSING")
			}
			row(w, d.Domain, d.TargetDevice, g.Op, g.Path, g.Missing)
		}
	}
	if w != nil {
		w.Flush()
	}
}

// writeDisks writes the table of tracked disks.
func writeDisks(out io.Writer, disks []inventory.Disk) {
	w := newTable(out)
	fmt.Fprintln(w, "DOMAIN\tTARGET\tFORMAT\tGUEST_FS\tHOST_FS\tHOST_DEVICE\tCACHE\tAIO\tSOURCE\tFILE")
	for _, d := range disks {
		row(w, d.Domain, d.TargetDevice, d.ImageFormat, d.GuestFS, d.HostFS.FSType, d.HostFS.Device,
			d.Cache, d.AIO, d.Source, d.SourceFile)
	}
	w.Flush()
}

// writeImageProblems writes the table of image files that could not be
// opened or identified, each with the reason.
func writeImageProblems(out io.Writer, problems []inventory.ImageProblem) {
	fmt.Fprintln(out, "Image files that could not be opened or identified:")
	w := newTable(out)
	fmt.Fprintln(w, "DOMAIN\tTARGET\tSOURCE\tFILE\tREASON")
	for _, p := range problems {
		row(w, p.Domain, p.TargetDevice, p.Source, p.SourceFile, p.Err.Error())
	}
	w.Flush()
}

// field makes a string safe for one cell of a --check table. Domains and
// paths come from the operator's configuration, libvirt or a VM's command
// line, and errors quote them: one holding a newline, tab or terminal escape
// would break the table or the terminal. Such a string (any rune
// strconv.IsPrint rejects, invalid UTF-8, or a leading quote that would make
// it look quoted) is printed Go-quoted; any other prints as it is, so that
// ordinary names stay readable.
func field(s string) string {
	if strings.HasPrefix(s, `"`) || !utf8.ValidString(s) ||
		strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
