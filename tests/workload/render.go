package workload

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// The generated part of FEATURES.md lies between these lines.
const (
	beginGenerated = "<!-- BEGIN GENERATED from testdata/features.json: go test -tags measure ./tests/workload/ -run TestRender -->"
	endGenerated   = "<!-- END GENERATED -->"
)

// MatrixPairs are the pairs of the measurement matrix (guest/host/format
// [/cache]): the lab brief's examples, covering every file system as guest
// and as host, both image formats, and one host-cached variant.
var MatrixPairs = []string{
	"ext4/xfs/raw", "xfs/ext4/qcow2", "btrfs/btrfs/raw", "ext4/btrfs/raw", "xfs/xfs/raw", "ext4/ext4/raw/writeback",
}

// ReproduceCommand returns the shell commands that measure the matrix into
// testdata/features.json (from the repository root; one guest at a time,
// the lab lock released between pairs) and render FEATURES.md. They take
// about 45 minutes.
func ReproduceCommand() string {
	return "for p in " + strings.Join(MatrixPairs, " ") + "; do\n" +
		"  flock /var/tmp/fspair-lab.lock go test -tags measure -count=1 -timeout 30m ./tests/workload/ -run 'TestMeasure$' -v -pairs $p || break\n" +
		"done\n" +
		"flock /var/tmp/fspair-lab.lock go test -tags measure -count=1 -timeout 30m ./tests/workload/ -run 'TestSwitch$' -v\n" +
		"go test -tags measure -count=1 ./tests/workload/ -run 'TestRender$'"
}

// SwitchWindow is the width of the sliding windows shown for a switch.
const SwitchWindow = 30 * time.Second

// ErrNoMarkers is returned by Splice for a document without the markers of
// the generated part.
var ErrNoMarkers = errors.New("document lacks the generated-part markers")

// Splice replaces the generated part of doc with Render(r).
func Splice(doc string, r *Results) (string, error) {
	i := strings.Index(doc, beginGenerated)
	j := strings.Index(doc, endGenerated)
	if i < 0 || j < i {
		return "", ErrNoMarkers
	}
	return doc[:i] + beginGenerated + "\n" + Render(r) + endGenerated + doc[j+len(endGenerated):], nil
}

// Render prints the measured features as Markdown: one table per workload
// (feature x pair), the range of each feature per workload, and the switch
// recordings with the class Classify gives each window.
func Render(r *Results) string {
	var b strings.Builder
	pairs := r.Pairs()
	byKey := map[string]RunResult{}
	for _, run := range r.Runs {
		byKey[string(run.Workload)+" "+run.Pair] = run
	}
	fmt.Fprintf(&b, "\nMeasured %s. Setup: fio runtime %g s per workload, warm-up %g s skipped, scrapes every %g s; guest %d MiB, %d vCPU (TCG); images %d MiB. %s.\n\n",
		r.Updated.Format("2006-01-02 15:04 UTC"), r.Setup.RuntimeSeconds, r.Setup.WarmupSeconds, r.Setup.IntervalSeconds,
		r.Setup.GuestMemMiB, r.Setup.GuestCPUs, r.Setup.ImageMiB, r.Setup.Notes)
	fmt.Fprintf(&b, "Reproduce (from the repository root, about 45 minutes):\n\n```sh\n%s\n```\n\n", ReproduceCommand())
	b.WriteString("Pairs are guest/host/format. Sizes in KiB, latencies in ms (mean per request), shares 0..1.\n")

	for _, w := range Workloads {
		fmt.Fprintf(&b, "\n### %s\n\n| feature |", w)
		for _, p := range pairs {
			fmt.Fprintf(&b, " %s |", p)
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(pairs)) + "\n")
		for _, n := range FeatureNames {
			fmt.Fprintf(&b, "| %s |", n)
			for _, p := range pairs {
				run, ok := byKey[string(w)+" "+p]
				v, has := run.Features[n]
				if !ok || !has {
					b.WriteString(" - |")
					continue
				}
				fmt.Fprintf(&b, " %s |", format(n, v))
			}
			b.WriteString("\n")
		}
		b.WriteString("| class (Classify) |")
		for _, p := range pairs {
			run, ok := byKey[string(w)+" "+p]
			if !ok {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %s |", Classify(run.Features))
		}
		b.WriteString("\n| fio reads/writes/syncs |")
		for _, p := range pairs {
			run, ok := byKey[string(w)+" "+p]
			if !ok {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %d/%d/%d |", run.Fio.ReadIOs, run.Fio.WriteIOs, run.Fio.Syncs)
		}
		b.WriteString("\n")
	}

	b.WriteString("\n### Range of each feature over the pairs\n\n| feature |")
	for _, w := range Workloads {
		fmt.Fprintf(&b, " %s |", w)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(Workloads)) + "\n")
	for _, n := range FeatureNames {
		fmt.Fprintf(&b, "| %s |", n)
		for _, w := range Workloads {
			lo, hi, ok := r.Span(w, n)
			if !ok {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %s .. %s |", format(n, lo), format(n, hi))
		}
		b.WriteString("\n")
	}

	for _, s := range r.Switches {
		samples := Windows(s.Points, SwitchWindow)
		fmt.Fprintf(&b, "\n### Switch %s -> %s in one running guest (%s)\n\n", s.From, s.To, s.Pair)
		fmt.Fprintf(&b, "Sliding %g s windows, one ending at each scrape; the %s prepare (laying out its files) starts at t=%.0f s. ",
			SwitchWindow.Seconds(), s.To, s.SwitchAt)
		if fr := FirstRight(samples, s.SwitchAt, Class(s.To)); fr >= 0 {
			fmt.Fprintf(&b, "Every window ending %.0f s or more after the switch is classified %s.", fr, s.To)
		} else {
			fmt.Fprintf(&b, "The class never settles on %s.", s.To)
		}
		b.WriteString(" With wider windows (same scrapes):")
		for _, span := range []time.Duration{30 * time.Second, 60 * time.Second, 90 * time.Second} {
			fr := FirstRight(Windows(s.Points, span), s.SwitchAt, Class(s.To))
			fmt.Fprintf(&b, " %.0f s wide: %.0f s;", span.Seconds(), fr)
		}
		b.WriteString(" (-1: not settled by the end of the recording).")
		b.WriteString("\n\n")
		b.WriteString("| t (s) | phase | class | read_share | sync_write_share | flushes_per_write | mean_read | iops |\n|---:|---|---|---:|---:|---:|---:|---:|\n")
		for _, x := range samples {
			fmt.Fprintf(&b, "| %.0f | %s | %s | %s | %s | %s | %s | %s |\n", x.At, x.Phase, Classify(x.Features),
				fv(x.Features, FeatReadShare), fv(x.Features, FeatSyncWriteShare), fv(x.Features, FeatFlushesPerWrite),
				fv(x.Features, FeatMeanReadSize), fv(x.Features, FeatIOPS))
		}
	}
	return b.String()
}

// fv formats feature n of f, or "-" when absent.
// Describe lists f one feature a line, in the units of FEATURES.md, for
// a test log.
func Describe(f Features) string {
	var b strings.Builder
	for _, n := range f.Names() {
		fmt.Fprintf(&b, "  %-30s %s\n", n, format(n, f[n]))
	}
	return b.String()
}

func fv(f Features, n string) string {
	v, ok := f[n]
	if !ok {
		return "-"
	}
	return format(n, v)
}

// Span returns the smallest and largest value of feature n over the pairs
// measured with workload w.
func (r *Results) Span(w Workload, n string) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, run := range r.Runs {
		v, has := run.Features[n]
		if run.Workload != w || !has {
			continue
		}
		lo, hi, ok = math.Min(lo, v), math.Max(hi, v), true
	}
	return lo, hi, ok
}

// FirstRight returns the seconds after switchAt from which every window
// that ends later is classified want, or -1 if the last window is not.
func FirstRight(samples []Sample, switchAt float64, want Class) float64 {
	first := -1.0
	for _, s := range samples {
		if s.At < switchAt {
			continue
		}
		if Classify(s.Features) == want {
			if first < 0 {
				first = s.At - switchAt
			}
		} else {
			first = -1
		}
	}
	return first
}
