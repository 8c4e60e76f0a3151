package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/fspair/fspair/tests/workload"
)

// Reading is what one scrape of the exporter says about the matrix's disks
// and probes.
type Reading struct {
	Requests map[fileOp]float64 // fspair_disk_requests_total
	Bytes    map[fileOp]float64 // fspair_disk_bytes_total
	// Unfollowed holds the fspair_disk_unfollowed series at 1: the
	// exporter says it does not follow op on that I/O path. A series
	// without source_file applies to every disk.
	Unfollowed []Unfollowed
	Attached   map[string]bool // fspair_probe_attached by program
	// Lost holds the exporter's own words for events it missed:
	// "recursion <program>" from fspair_probe_recursion_misses_total and
	// "dropped <reason>" from fspair_probe_events_dropped_total.
	Lost map[string]float64
}

type fileOp struct{ file, op string }

// Unfollowed is one fspair_disk_unfollowed series at 1.
type Unfollowed struct {
	SourceFile string // "" when the series names no disk
	Op, Path   string
	// Measure is what goes unseen: requests (the counters stay at 0),
	// latency (counted untimed) or flush_cost; only the first makes a
	// cell "not followed": the others leave the counts to be compared.
	Measure string
}

// parseReading parses exposition text (the families in counterFamilies).
func parseReading(text []byte) (Reading, error) {
	fams, err := workload.ParseMetrics(text)
	if err != nil {
		return Reading{}, err
	}
	r := Reading{Requests: map[fileOp]float64{}, Bytes: map[fileOp]float64{}, Attached: map[string]bool{}, Lost: map[string]float64{}}
	each := func(name string, fn func(labels map[string]string, v float64)) {
		workload.EachSeries(fams, name, func(l map[string]string, m *dto.Metric) { fn(l, value(m)) })
	}
	each("fspair_disk_requests_total", func(l map[string]string, v float64) { r.Requests[fileOp{l["source_file"], l["op"]}] += v })
	each("fspair_disk_bytes_total", func(l map[string]string, v float64) { r.Bytes[fileOp{l["source_file"], l["op"]}] += v })
	each("fspair_disk_unfollowed", func(l map[string]string, v float64) {
		if v == 1 {
			r.Unfollowed = append(r.Unfollowed, Unfollowed{SourceFile: l["source_file"], Op: l["op"], Path: l["path"], Measure: l["measure"]})
		}
	})
	each("fspair_probe_attached", func(l map[string]string, v float64) { r.Attached[l["program"]] = v == 1 })
	each("fspair_probe_recursion_misses_total", func(l map[string]string, v float64) { r.Lost["recursion "+l["program"]] += v })
	each("fspair_probe_events_dropped_total", func(l map[string]string, v float64) { r.Lost["dropped "+l["reason"]] += v })
	return r, nil
}

// lostBetween says what the probes reported missing between two readings
// ("recursion iomap_dio_done +1, dropped completion_unseen +2"), "" when
// nothing: beside a DIFF it tells a lost event from a miscount.
func lostBetween(before, after Reading) string {
	var parts []string
	for k, v := range after.Lost {
		if d := v - before.Lost[k]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s +%g", k, d))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// value is a sample's value whatever its type (the matrix greps the
// samples without their TYPE lines, so they parse as untyped).
func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// unfollowed reports whether r says the requests of op are not followed
// for file, on whichever path the exporter names for it (its static
// configuration gives each disk one path per op: a flush from QEMU's
// threads is path "syscall" whatever the engine's reads and writes use).
func (r Reading) unfollowed(file, op string) bool {
	for _, u := range r.Unfollowed {
		if u.Op == op && (u.Measure == "" || u.Measure == "requests") && (u.SourceFile == "" || u.SourceFile == file) {
			return true
		}
	}
	return false
}

// LogLine is one line of the exporter's log (logfmt, promslog's format).
type LogLine struct {
	Level, Msg string
	Fields     map[string]string
	Text       string // as printed
}

// parseLog parses the exporter's logfmt lines; lines that are not logfmt
// (a panic, a message printed before the logger exists) come back with
// only Text.
func parseLog(log string) []LogLine {
	var lines []LogLine
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		fields := parseLogfmt(text)
		lines = append(lines, LogLine{Level: strings.ToLower(fields["level"]), Msg: fields["msg"], Fields: fields, Text: text})
	}
	return lines
}

// logfmtPair is key=value or key="quoted value" (Go-quoted, as go-logfmt
// and slog's text handler write it).
var logfmtPair = regexp.MustCompile(`([A-Za-z0-9_.\-]+)=("(?:[^"\\]|\\.)*"|[^ ]*)`)

func parseLogfmt(line string) map[string]string {
	fields := map[string]string{}
	for _, m := range logfmtPair.FindAllStringSubmatch(line, -1) {
		v := m[2]
		if strings.HasPrefix(v, `"`) {
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
		}
		fields[m[1]] = v
	}
	return fields
}

// startUpWarnings returns the warning lines the exporter logged before it
// said "started" (all of them when it never did), and the reason given for
// each program it could not attach ("BPF program not attached" lines).
func startUpWarnings(log string) (warnings []string, reasons map[string]string) {
	reasons = map[string]string{}
	for _, l := range parseLog(log) {
		if l.Msg == "started" {
			break
		}
		if l.Level != "warn" {
			continue
		}
		warnings = append(warnings, l.Text)
		if p := l.Fields["program"]; p != "" {
			reasons[p] = l.Fields["err"]
		}
	}
	return warnings, reasons
}

// testVerdict is what `go test -v` output says.
type testVerdict struct {
	Pass   bool     // the final line is PASS (or ok)
	Failed []string // --- FAIL lines, in order
	// Messages are the first lines each failed test logged (t.Log,
	// t.Error: the indented "file_test.go:N: ..." lines).
	Messages map[string][]string
}

var (
	failLine = regexp.MustCompile(`^\s*--- FAIL: (\S+) \(`)
	runLine  = regexp.MustCompile(`^=== (?:RUN|CONT|PAUSE|NAME)\s+(\S+)`)
	logLine  = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)
)

// maxMessages bounds the lines kept per failed test.
const maxMessages = 3

// parseTestOutput reads a test binary's -test.v output.
func parseTestOutput(out string) testVerdict {
	v := testVerdict{Messages: map[string][]string{}}
	logs := map[string][]string{}
	seen := map[string]bool{}
	current := ""
	for _, line := range strings.Split(out, "\n") {
		if m := runLine.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := logLine.FindStringSubmatch(line); m != nil && current != "" && len(logs[current]) < maxMessages {
			logs[current] = append(logs[current], m[1])
			continue
		}
		if m := failLine.FindStringSubmatch(line); m != nil && !seen[m[1]] {
			seen[m[1]] = true
			v.Failed = append(v.Failed, m[1])
		}
		if t := strings.TrimSpace(line); t == "PASS" || strings.HasPrefix(t, "ok ") {
			v.Pass = true
		}
		if strings.TrimSpace(line) == "FAIL" {
			v.Pass = false
		}
	}
	for _, name := range v.Failed {
		if len(logs[name]) > 0 {
			v.Messages[name] = logs[name]
		}
	}
	return v
}

// prefixLog prefixes every line written to it (the lab's progress lines,
// which carry their own times).
type prefixLog struct {
	w      io.Writer
	prefix string
}

func (p prefixLog) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, line)
	}
	return len(b), nil
}
