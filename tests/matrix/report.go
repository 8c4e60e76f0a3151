package main

import (
	"fmt"
	"strings"
	"time"
)

// Markdown renders the results: the cell table, what did not attach, the
// probe tests, the time each part took, and the counts behind every cell
// that is not ok.
func (r *Results) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# fspair kernel matrix\n\n")
	w("Run %s on %s", r.Started.Format(time.RFC3339), r.Host)
	if r.Command != "" {
		w(" with `%s`", r.Command)
	}
	w(". Each cell compares, per operation, the exporter's `fspair_disk_requests_total` and `fspair_disk_bytes_total` deltas over one counted fio run with fio's own accounting; they must be equal (`DIFF op exporter/fio` when not). tests/matrix/README.md explains every column.\n\n")

	w("## Counts: exporter against fio\n\n")
	w("| kernel | mode | FS |")
	for _, e := range r.Engines {
		w(" %s |", e)
	}
	w("\n|---|---|---|%s\n", strings.Repeat("---|", len(r.Engines)))
	for _, k := range r.Kernels {
		if k.Error != "" && len(k.Modes) == 0 {
			w("| %s | | | %s |\n", k.name(), mdCell("did not run: "+firstLine(k.Error)))
			continue
		}
		for _, m := range k.Modes {
			for _, fs := range r.FS {
				w("| %s | %s | %s |", k.name(), m.Mode, fs)
				for _, e := range r.Engines {
					w(" %s |", mdCell(m.cell(fs, e)))
				}
				w("\n")
			}
		}
		if k.Error != "" {
			w("| %s | | | %s |\n", k.name(), mdCell("stopped: "+firstLine(k.Error)))
		}
	}

	for _, k := range r.Kernels {
		if k.Error != "" {
			w("\n%s stopped (its console is in the state directory's logs):\n\n```\n%s\n```\n", k.name(), strings.TrimSpace(k.Error))
		}
	}

	w("\n## BPF programs not attached\n\n")
	w("From `fspair_probe_attached` at the first reading of each kernel and mode; the reason is the exporter's start-up warning for the program.\n\n")
	w("| kernel | mode | program | reason |\n|---|---|---|---|\n")
	for _, k := range r.Kernels {
		for _, m := range k.Modes {
			switch {
			case m.Programs == nil:
				w("| %s | %s | (no reading: the exporter did not run) | |\n", k.name(), m.Mode)
			case m.notAttached() == 0:
				w("| %s | %s | all %d attached | |\n", k.name(), m.Mode, len(m.Programs))
			}
			for _, p := range m.Programs {
				if !p.Attached {
					reason := p.Reason
					if reason == "" {
						reason = "(no warning logged)"
					}
					w("| %s | %s | %s | %s |\n", k.name(), m.Mode, p.Name, mdCell(reason))
				}
			}
		}
	}
	var warned bool
	for _, k := range r.Kernels {
		for _, m := range k.Modes {
			if len(m.Warnings) == 0 && m.Error == "" {
				continue
			}
			if !warned {
				w("\n### Exporter start-up warnings\n\n")
				warned = true
			}
			w("%s, mode %s:\n\n```\n", k.name(), m.Mode)
			for _, l := range m.Warnings {
				w("%s\n", l)
			}
			if m.Error != "" {
				w("%s\n", strings.TrimSpace(m.Error))
			}
			w("```\n\n")
		}
	}

	w("\n## Probe tests (exporter/probe's test binary in the guest)\n\n")
	w("| kernel | mode | FS | result | failing tests | took |\n|---|---|---|---|---|---|\n")
	for _, k := range r.Kernels {
		for _, m := range k.Modes {
			for _, p := range m.Probe {
				result, failing := "PASS", strings.Join(p.Failed, ", ")
				if !p.Passed {
					result = "FAIL"
				}
				if p.Error != "" {
					failing = strings.TrimSpace(strings.Join([]string{failing, firstLine(p.Error)}, " "))
				}
				w("| %s | %s | %s | %s | %s | %.0f s |\n", k.name(), m.Mode, p.FS, result, mdCell(failing), p.Seconds)
			}
		}
	}

	first := true
	for _, k := range r.Kernels {
		for _, m := range k.Modes {
			var fsOf = map[string][]string{}
			var msg = map[string]string{}
			var order []string
			for _, p := range m.Probe {
				for _, t := range p.Failed {
					if _, ok := fsOf[t]; !ok {
						order = append(order, t)
						msg[t] = strings.Join(p.Messages[t], " / ")
					}
					fsOf[t] = append(fsOf[t], p.FS)
				}
			}
			if len(order) == 0 {
				continue
			}
			if first {
				w("\nWhat each failing test logged first (the full output is in the state directory's logs):\n\n")
				first = false
			}
			w("- %s, mode %s:\n", k.name(), m.Mode)
			for _, t := range order {
				text := msg[t]
				if text == "" {
					text = "(no message of its own; see its subtests)"
				}
				w("  - `%s` (%s): %s\n", t, strings.Join(fsOf[t], ", "), truncate(text, 400))
			}
		}
	}

	w("\n## Time\n\n| part | took |\n|---|---|\n")
	for _, t := range r.Timing[:max(0, len(r.Timing)-1)] {
		w("| %s | %s |\n", t.Part, fmtSeconds(t.Seconds))
	}
	for _, k := range r.Kernels {
		for _, t := range k.Timing {
			w("| %s: %s | %s |\n", k.name(), t.Part, fmtSeconds(t.Seconds))
		}
	}
	if n := len(r.Timing); n > 0 {
		w("| **%s** | **%s** |\n", r.Timing[n-1].Part, fmtSeconds(r.Timing[n-1].Seconds))
	}

	var detail strings.Builder
	for _, k := range r.Kernels {
		for _, m := range k.Modes {
			for _, c := range m.Cells {
				if c.Status == StatusOK || len(c.Ops) == 0 {
					continue
				}
				for _, o := range c.Ops {
					said := ""
					if o.Unfollowed {
						said = "yes"
					}
					fmt.Fprintf(&detail, "| %s | %s | %s | %s | %s | %d | %d | %d | %d | %s |\n",
						k.name(), m.Mode, c.FS, c.Engine, o.Op, o.FioRequests, o.Requests, o.FioBytes, o.Bytes, said)
				}
			}
		}
	}
	if detail.Len() > 0 {
		w("\n## Counts behind the cells that are not ok\n\n")
		w("| kernel | mode | FS | engine | op | fio requests | exporter requests | fio bytes | exporter bytes | unfollowed said |\n|---|---|---|---|---|---:|---:|---:|---:|---|\n")
		b.WriteString(detail.String())
	}
	if failed := r.Failed(); len(failed) > 0 {
		w("\n**%d failure(s)**: the run exits 1.\n", len(failed))
	} else {
		w("\nNo failures.\n")
	}
	return b.String()
}

// cell returns the text of the cell fs x engine.
func (m *ModeResult) cell(fs, engine string) string {
	for _, c := range m.Cells {
		if c.FS == fs && c.Engine == engine {
			return c.Text
		}
	}
	return "(not run)"
}

func (m *ModeResult) notAttached() int {
	n := 0
	for _, p := range m.Programs {
		if !p.Attached {
			n++
		}
	}
	return n
}

// mdCell makes text safe inside a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%.1f s", s)
	}
	return d.String()
}

// truncate shortens s to about n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + " ..."
}
