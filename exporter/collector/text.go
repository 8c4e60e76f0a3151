package collector

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The per-disk families are written straight into the response in the
// Prometheus text format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format):
// at a thousand disks they are half a million series, and building a
// client_golang metric, then a protobuf family, then sorting and encoding it
// cost about 1.4 us a series (issue 6). The writer below appends each line
// to one buffer, which it passes on whenever half full: about 50 ns a
// series (BenchmarkScrape), and memory that does not grow with the series.

// textBufSize is the writer's buffer: it is passed on at half full, so
// that each write to the connection (or the compressor) moves tens of
// kilobytes and the other half holds a whole histogram without growing.
const textBufSize = 64 << 10

// textWriter writes exposition text through a fixed buffer. The first error
// of the underlying writer sticks and later writes are dropped: a scraper
// that went away is found out once, at the end.
type textWriter struct {
	dst io.Writer
	buf []byte
	err error

	// pending is the HELP and TYPE header of the current family, written
	// before its first sample: a family without samples is left out, as
	// client_golang leaves it out.
	pending string
}

func newTextWriter(dst io.Writer) *textWriter {
	return &textWriter{dst: dst, buf: make([]byte, 0, textBufSize)}
}

// Write passes p through the buffer (the registry's families are encoded
// through it too, so that the response is one stream).
func (t *textWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	t.maybeFlush()
	return len(p), nil
}

func (t *textWriter) maybeFlush() {
	if len(t.buf) >= textBufSize/2 {
		t.flush()
	}
}

func (t *textWriter) flush() {
	if len(t.buf) > 0 && t.err == nil {
		_, t.err = t.dst.Write(t.buf)
	}
	t.buf = t.buf[:0]
}

// finish writes what the buffer holds and returns the first error.
func (t *textWriter) finish() error {
	t.flush()
	return t.err
}

// family starts a family; its header goes out with its first sample.
func (t *textWriter) family(f *family) {
	t.pending = f.header
}

func (t *textWriter) head() {
	if t.pending != "" {
		t.buf = append(t.buf, t.pending...)
		t.pending = ""
	}
}

// uint writes name{labels extra} v. labels is a disk's or device's label
// set (never empty), extra none or more pairs to follow it.
func (t *textWriter) uint(f *family, labels, extra lbl, v uint64) {
	t.sample(f.name, labels.text, extra.text)
	t.buf = strconv.AppendUint(t.buf, v, 10)
	t.endSample()
}

// int is uint for signed values.
func (t *textWriter) int(f *family, labels, extra lbl, v int64) {
	t.sample(f.name, labels.text, extra.text)
	t.buf = strconv.AppendInt(t.buf, v, 10)
	t.endSample()
}

// float is uint for floating-point values, spelt as client_golang spells
// them.
func (t *textWriter) float(f *family, labels, extra lbl, v float64) {
	t.sample(f.name, labels.text, extra.text)
	t.buf = appendFloat(t.buf, v)
	t.endSample()
}

// sample starts a sample line: name{labels extra} and the space before
// the value.
func (t *textWriter) sample(name, labels, extra string) {
	t.head()
	t.buf = append(t.buf, name...)
	t.buf = append(t.buf, '{')
	t.buf = append(t.buf, labels...)
	t.buf = append(t.buf, extra...)
	t.buf = append(t.buf, "} "...)
}

func (t *textWriter) endSample() {
	t.buf = append(t.buf, '\n')
	t.maybeFlush()
}

// histogram writes the _bucket, _sum and _count series of one histogram
// from per-slot counts whose last slot is +Inf: buckets are cumulative.
// Integer counts are written as integers; a parser reads them into the same
// float64 as client_golang's exponent form. A histogram with no
// observation is left out (histFamily.observed). The text format has no
// native histograms: a text scrape gets classic ones in every
// --histograms mode.
func (t *textWriter) histogram(h *histFamily, l, e lbl, slots []uint64, sum float64) {
	if !h.observed(slots, &t.err) {
		return
	}
	labels, extra := l.text, e.text
	t.head()
	var buf [maxClassicBuckets]uint64
	cums := h.cumulative(buf[:0], slots)
	for k, cum := range cums {
		t.buf = append(t.buf, h.bucket...)
		t.buf = append(t.buf, labels...)
		t.buf = append(t.buf, extra...)
		t.buf = append(t.buf, h.le[k]...)
		t.buf = strconv.AppendUint(t.buf, cum, 10)
		t.buf = append(t.buf, '\n')
	}
	t.buf = append(t.buf, h.sum...)
	t.buf = append(t.buf, labels...)
	t.buf = append(t.buf, extra...)
	t.buf = append(t.buf, "} "...)
	t.buf = appendFloat(t.buf, sum)
	t.buf = append(t.buf, '\n')
	t.buf = append(t.buf, h.count...)
	t.buf = append(t.buf, labels...)
	t.buf = append(t.buf, extra...)
	t.buf = append(t.buf, "} "...)
	t.buf = strconv.AppendUint(t.buf, cums[len(cums)-1], 10)
	t.buf = append(t.buf, '\n')
	t.maybeFlush()
}

// family is a metric family's name and header, in both formats.
type family struct {
	name   string
	gauge  bool   // else a counter or a histogram
	header string // "# HELP ...\n# TYPE ...\n"
	pb     []byte // MetricFamily's name, help and type fields (proto.go)
}

func newFamily(name, help, typ string) *family {
	return &family{name: name, gauge: typ == "gauge", pb: pbFamilyHeader(name, help, typ),
		header: "# HELP " + name + " " + helpEscaper.Replace(help) + "\n# TYPE " + name + " " + typ + "\n"}
}

// histFamily is a histogram family with its series names and the le label
// of each classic bucket written out once, the kernel slots each classic
// bucket ends at, and where each slot goes in a native histogram.
type histFamily struct {
	family
	bucket, sum, count string
	// le[k] is ",le=\"<bound>\"} " of the k-th classic bucket, the last
	// one +Inf.
	le     []string
	bounds []float64 // the classic buckets' finite upper bounds
	// ends[k] is one past the last slot counted in the k-th classic
	// bucket; the last is the number of slots (+Inf).
	ends   []int
	native *nativeLayout
}

// maxClassicBuckets bounds the classic buckets of a histogram (+Inf
// included): the seek distance's 28 bounds, all kept, make 29.
const maxClassicBuckets = 32

func newHistFamily(name, help string, sh shape) *histFamily {
	h := &histFamily{family: *newFamily(name, help, "histogram"),
		bucket: name + "_bucket{", sum: name + "_sum{", count: name + "_count{", native: sh.native}
	for i, b := range sh.bounds {
		if sh.keep[i] {
			h.bounds = append(h.bounds, b)
			h.le = append(h.le, `,le="`+formatFloat(b)+`"} `)
			h.ends = append(h.ends, i+1)
		}
	}
	h.le = append(h.le, `,le="+Inf"} `)
	h.ends = append(h.ends, len(sh.bounds)+1)
	if len(h.ends) > maxClassicBuckets {
		panic(fmt.Sprintf("histogram %s: %d classic buckets, at most %d", name, len(h.ends), maxClassicBuckets))
	}
	return h
}

// cumulative appends to dst the count of each classic bucket, +Inf (the
// histogram's count) last: both writers read them from here.
func (h *histFamily) cumulative(dst, slots []uint64) []uint64 {
	var cum uint64
	i := 0
	for _, end := range h.ends {
		for ; i < end; i++ {
			cum += slots[i]
		}
		dst = append(dst, cum)
	}
	return dst
}

// observed says whether a histogram's slots have any observation, and
// reports in *err (if still nil) slots that do not fit the family.
//
// A histogram with no observation yet is left out, in every format, and
// appears with its first: most disks never see some operations (discard,
// write_zeroes, allocate; flush under cache=unsafe), and their histograms
// would be 27 series of zeros each. The rules and dashboards read
// histograms through rate() guarded by "> 0", for which a missing series
// and a series standing at zero are the same. What is lost: rate() and
// increase() miss the observations made in the scrape interval in which a
// histogram first appears (once per disk, operation and histogram); the
// fspair_disk_requests_total counters, always written, count them.
func (h *histFamily) observed(slots []uint64, err *error) bool {
	if n := h.ends[len(h.ends)-1]; len(slots) != n {
		// The bounds follow the BPF slot arrays (TestSeekBoundsMatchSlots);
		// a mismatch is a bug, reported rather than written wrong.
		if *err == nil {
			*err = fmt.Errorf("histogram %s: %d slots, want %d", h.name, len(slots), n)
		}
		return false
	}
	for _, n := range slots {
		if n != 0 {
			return true
		}
	}
	return false
}

// formatFloat formats a float as client_golang's text encoder does: the
// shortest representation that reads back exactly (%g), +Inf for infinity.
// The le label is a string to Prometheus, so bucket bounds must be spelt
// exactly so for queries and recording rules that match on le to keep
// working.
func formatFloat(f float64) string { return string(appendFloat(nil, f)) }

func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(f):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// The text format escapes backslash, double quote and newline in label
// values, and backslash and newline in HELP text.
var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// validLabel replaces the bytes of v that are not UTF-8.
func validLabel(v string) string {
	if !utf8.ValidString(v) {
		return strings.ToValidUTF8(v, "\uFFFD")
	}
	return v
}

// lbl is a run of label pairs in both formats: the text format's
// name="value" pairs, escaped (starting with a comma when it follows
// another run), and protobuf's Metric.label fields. Built once per disk,
// device or label value, so that neither writer escapes or encodes a
// label per series.
type lbl struct {
	text string
	pb   string
}

// and is a followed by b.
func (a lbl) and(b lbl) lbl { return lbl{a.text + b.text, a.pb + b.pb} }

// pairs is the run of the name, value pairs in nv (see labelPairs).
func pairs(nv ...string) lbl {
	return lbl{text: labelPairs(nv...), pb: pbLabelPairs(nv...)}
}

// extra is pairs to follow another run.
func extra(nv ...string) lbl {
	l := pairs(nv...)
	l.text = "," + l.text
	return l
}

// labelPairs renders name="value" pairs, comma-separated, values escaped;
// names and values alternate in nv. Discovery and hostLabel make every
// value valid UTF-8 already; a value that is not anyway has its bad bytes
// replaced, as Prometheus rejects the whole scrape over one.
func labelPairs(nv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(nv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(nv[i])
		b.WriteString(`="`)
		labelEscaper.WriteString(&b, validLabel(nv[i+1]))
		b.WriteByte('"')
	}
	return b.String()
}

// extraLabels is name="value" for each value, to follow a label set.
func extraLabels(name string, values []string) []lbl {
	out := make([]lbl, len(values))
	for i, v := range values {
		out[i] = extra(name, v)
	}
	return out
}
