package collector

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// The protobuf exposition (application/vnd.google.protobuf;
// proto=io.prometheus.client.MetricFamily; encoding=delimited), for the
// scrapers that ask for it: Prometheus 3 with scrape_native_histograms,
// Prometheus 2.40+ with --enable-feature=native-histograms, or any
// Prometheus that lists PrometheusProto in scrape_protocols. It is the one
// format that carries native histograms. As the text, the families are
// encoded straight from the snapshot, through the walk of exposition.go:
// the wire bytes of io.prometheus.client.MetricFamily (client_model's
// metrics.proto) are appended by hand, each disk's label pairs encoded
// once per scrape, rather than building a dto.Metric per series and
// marshalling it (about 1 us a series where this takes tens of ns).

// Histograms is how histograms are exposed to the protobuf scrapes (the
// --histograms flag); a text scrape always gets classic histograms, as the
// text format has no native ones.
type Histograms int

const (
	// HistogramsClassic: classic buckets (_bucket{le}), in both formats.
	HistogramsClassic Histograms = iota
	// HistogramsNative: a native histogram, without classic buckets, to
	// protobuf scrapes.
	HistogramsNative
	// HistogramsBoth: both in the same metric to protobuf scrapes, as
	// client_golang writes a histogram that has both.
	HistogramsBoth
)

var histogramsNames = []string{"classic", "native", "both"}

func (h Histograms) String() string {
	if int(h) < len(histogramsNames) {
		return histogramsNames[h]
	}
	return fmt.Sprintf("Histograms(%d)", int(h))
}

// ParseHistograms reads a --histograms value.
func ParseHistograms(s string) (Histograms, error) {
	for i, n := range histogramsNames {
		if s == n {
			return Histograms(i), nil
		}
	}
	return 0, fmt.Errorf("histograms=%s: want classic, native or both", s)
}

func (h Histograms) classic() bool { return h != HistogramsNative }
func (h Histograms) native() bool  { return h != HistogramsClassic }

// Field numbers of metrics.proto.
const (
	pbFamilyName, pbFamilyHelp, pbFamilyType, pbFamilyMetric protowire.Number = 1, 2, 3, 4
	pbLabelName, pbLabelValue                                protowire.Number = 1, 2
	pbMetricLabel, pbMetricGauge, pbMetricCounter            protowire.Number = 1, 2, 3
	pbMetricHistogram                                        protowire.Number = 7
	pbValue                                                  protowire.Number = 1 // Gauge.value, Counter.value

	pbHistCount, pbHistSum, pbHistBucket protowire.Number = 1, 2, 3
	pbHistSchema, pbHistZeroThreshold    protowire.Number = 5, 6
	pbHistZeroCount                      protowire.Number = 7
	pbHistNegSpan, pbHistNegDelta        protowire.Number = 9, 10
	pbHistPosSpan, pbHistPosDelta        protowire.Number = 12, 13
	pbBucketCount, pbBucketBound         protowire.Number = 1, 2
	pbSpanOffset, pbSpanLength           protowire.Number = 1, 2
)

// MetricType values.
var pbTypes = map[string]uint64{"counter": 0, "gauge": 1, "histogram": 4}

// pbFamilyHeader is a MetricFamily's name, help and type fields.
func pbFamilyHeader(name, help, typ string) []byte {
	t, ok := pbTypes[typ]
	if !ok {
		panic("metric type " + typ)
	}
	b := protowire.AppendTag(nil, pbFamilyName, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, pbFamilyHelp, protowire.BytesType)
	b = protowire.AppendString(b, help)
	b = protowire.AppendTag(b, pbFamilyType, protowire.VarintType)
	return protowire.AppendVarint(b, t)
}

// pbLabelPairs is the name, value pairs of nv as Metric.label fields,
// values made valid UTF-8 as labelPairs makes them. Built once per disk
// and scrape: sized first, so that it is one allocation and a copy.
func pbLabelPairs(nv ...string) string {
	pair := func(name, value string) int {
		return protowire.SizeTag(pbLabelName) + protowire.SizeBytes(len(name)) +
			protowire.SizeTag(pbLabelValue) + protowire.SizeBytes(len(value))
	}
	n := 0
	for i := 0; i+1 < len(nv); i += 2 {
		n += protowire.SizeTag(pbMetricLabel) + protowire.SizeBytes(pair(nv[i], validLabel(nv[i+1])))
	}
	b := make([]byte, 0, n)
	for i := 0; i+1 < len(nv); i += 2 {
		name, value := nv[i], validLabel(nv[i+1])
		b = protowire.AppendTag(b, pbMetricLabel, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(pair(name, value)))
		b = protowire.AppendTag(b, pbLabelName, protowire.BytesType)
		b = protowire.AppendString(b, name)
		b = protowire.AppendTag(b, pbLabelValue, protowire.BytesType)
		b = protowire.AppendString(b, value)
	}
	return string(b)
}

// protoWriter writes the length-delimited MetricFamily messages. Each
// family is built whole in fam (a message's length comes before it) and
// written when the next one starts, so that memory is the largest family,
// not the exposition; fam is pooled across scrapes. Errors stick as in
// textWriter.
//
// A part writer (newProtoPart) builds the Metric fields of one range of
// disks without the family's header, and writes nothing: direct joins the
// parts of each family.
type protoWriter struct {
	dst  io.Writer
	mode Histograms
	part bool
	cur  *family
	n    int // metrics in fam
	fam  *[]byte
	hist []byte // one histogram, before its length is known
	err  error
}

// pbFamBufs are the family buffers, kept across scrapes: the largest
// family is 13 MB at 10,000 disks, split between the parts of a scrape
// (a buffer a part), and two scrapes may render at once (one plain, one
// compressed).
var pbFamBufs = spares[[]byte]{max: 2 * maxProtoParts}

func newProtoWriter(dst io.Writer, mode Histograms) *protoWriter {
	return &protoWriter{dst: dst, mode: mode}
}

// Write passes through encoded families (the registry's, encoded by
// expfmt), after the family under way.
func (t *protoWriter) Write(p []byte) (int, error) {
	t.end()
	t.write(p)
	return len(p), nil
}

func (t *protoWriter) write(p []byte) {
	if t.err == nil {
		_, t.err = t.dst.Write(p)
	}
}

// finish ends the family under way, gives back the buffer and returns the
// first error: the writer is done.
func (t *protoWriter) finish() error {
	t.flush()
	return t.err
}

func (t *protoWriter) flush() {
	t.end()
	if t.fam != nil {
		*t.fam = (*t.fam)[:0]
		pbFamBufs.put(t.fam)
		t.fam = nil
	}
}

func (t *protoWriter) end() {
	if t.cur != nil && t.n > 0 && !t.part {
		var l [binaryMaxVarint]byte
		t.write(protowire.AppendVarint(l[:0], uint64(len(*t.fam))))
		t.write(*t.fam)
	}
	t.cur, t.n = nil, 0
}

const binaryMaxVarint = 10

func (t *protoWriter) family(f *family) {
	if t.part {
		t.cur, t.n = f, 0
		*t.fam = (*t.fam)[:0]
		return
	}
	t.end()
	t.cur = f
	if t.fam == nil {
		t.fam = pbFamBufs.get()
	}
	*t.fam = append((*t.fam)[:0], f.pb...)
}

func newProtoPart(mode Histograms) *protoWriter {
	return &protoWriter{mode: mode, part: true, fam: pbFamBufs.get()}
}

// The direct families of a protobuf scrape are encoded in parts, each a
// range of the disks, on goroutines of their own (one a core, up to
// maxProtoParts), and each family's parts are written in order, after
// its header: the same bytes as writeDirect, in a fraction of the time
// where cores are free. At 10,000 disks with guest values the encoding
// was more than half of a protobuf scrape's CPU (a perf profile of the
// scrape bench's guest=qmp row; the rest reading the counters and writing
// to the connection). Memory is the largest family still, split between
// the parts. CPU is not saved: the scrape's wall time is.
const (
	maxProtoParts = 4
	// minPartDisks: fewer disks a part are not split (a choice, not
	// measured: a scrape of a thousand disks takes tens of ms).
	minPartDisks = 512
)

// protoParts is how many parts a scrape of n disks is encoded in.
func protoParts(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), maxProtoParts, n/minPartDisks))
}

// direct writes the direct families of s, each family's disks encoded in
// parts parts (protoParts) at once.
func (t *protoWriter) direct(s *snapshot, parts int) {
	if parts <= 1 {
		writeDirect(t, s)
		return
	}
	t.end()
	views := make([]snapshot, parts)
	ws := make([]*protoWriter, parts)
	for k := range views {
		// A view of s with the k-th range of its disks, and its devices
		// in the first part only. Writers only read a snapshot.
		views[k] = snapshot{disks: s.disks[k*len(s.disks)/parts : (k+1)*len(s.disks)/parts]}
		if k == 0 {
			views[k].devices = s.devices
		}
		ws[k] = newProtoPart(t.mode)
	}
	var wg sync.WaitGroup
	for _, f := range directFamilies {
		for k := 1; k < parts; k++ {
			wg.Go(func() { f.write(ws[k], &views[k]) })
		}
		f.write(ws[0], &views[0])
		wg.Wait()
		t.joinParts(ws)
	}
	for _, w := range ws {
		w.flush()
	}
}

// joinParts writes the family the parts hold: its header, then the
// parts' Metric fields in order, as one message; nothing when no part has
// a metric.
func (t *protoWriter) joinParts(ws []*protoWriter) {
	n, size := 0, 0
	for _, w := range ws {
		n += w.n
		size += len(*w.fam)
		if w.err != nil && t.err == nil {
			t.err = w.err
		}
	}
	if n == 0 {
		return
	}
	f := ws[0].cur
	var l [binaryMaxVarint]byte
	t.write(protowire.AppendVarint(l[:0], uint64(len(f.pb)+size)))
	t.write(f.pb)
	for _, w := range ws {
		if len(*w.fam) > 0 {
			t.write(*w.fam)
		}
	}
}

// metric appends a Metric field: labels, extra, then a field of body bytes
// (a Counter, Gauge or Histogram message).
func (t *protoWriter) metric(labels, extra lbl, field protowire.Number, body []byte) {
	b := *t.fam
	n := len(labels.pb) + len(extra.pb) + protowire.SizeTag(field) + protowire.SizeBytes(len(body))
	b = appendTag(b, pbFamilyMetric, protowire.BytesType)
	b = appendVarint(b, uint64(n))
	b = append(b, labels.pb...)
	b = append(b, extra.pb...)
	b = appendTag(b, field, protowire.BytesType)
	b = appendVarint(b, uint64(len(body)))
	b = append(b, body...)
	*t.fam = b
	t.n++
}

func (t *protoWriter) float(f *family, labels, extra lbl, v float64) {
	var body [9]byte
	b := appendTag(body[:0], pbValue, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(v))
	field := pbMetricCounter
	if f.gauge {
		field = pbMetricGauge
	}
	t.metric(labels, extra, field, b)
}

func (t *protoWriter) uint(f *family, labels, extra lbl, v uint64) {
	t.float(f, labels, extra, float64(v))
}

func (t *protoWriter) int(f *family, labels, extra lbl, v int64) {
	t.float(f, labels, extra, float64(v))
}

// histogram writes a Histogram with the sum and count, then the classic
// buckets (cumulative, the +Inf one left implicit as client_golang leaves
// it), the native buckets, or both (t.mode).
func (t *protoWriter) histogram(h *histFamily, labels, extra lbl, slots []uint64, sum float64) {
	if !h.observed(slots, &t.err) {
		return
	}
	var buf [maxClassicBuckets]uint64
	cums := h.cumulative(buf[:0], slots)
	b := appendTag(t.hist[:0], pbHistCount, protowire.VarintType)
	b = appendVarint(b, cums[len(cums)-1])
	b = appendTag(b, pbHistSum, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(sum))
	if t.mode.classic() {
		for k, bound := range h.bounds {
			cum := cums[k]
			b = appendTag(b, pbHistBucket, protowire.BytesType)
			b = appendVarint(b, uint64(protowire.SizeTag(pbBucketCount)+protowire.SizeVarint(cum)+protowire.SizeTag(pbBucketBound)+8))
			b = appendTag(b, pbBucketCount, protowire.VarintType)
			b = appendVarint(b, cum)
			b = appendTag(b, pbBucketBound, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, math.Float64bits(bound))
		}
	}
	if t.mode.native() {
		b = h.native.append(b, slots)
	}
	t.hist = b
	t.metric(labels, extra, pbMetricHistogram, b)
}

// nativeLayout places the slots of a BPF histogram in the buckets of a
// native histogram: each slot in the zero bucket or in one exponential
// bucket, never split, so that a native histogram counts exactly what the
// classic one does, with its boundaries where the layout says (disk.go
// says where they are exact and where not).
type nativeLayout struct {
	schema        int32
	zeroThreshold float64
	zero          []int       // slots in the zero bucket
	pos, neg      []slotIndex // slots in positive and negative buckets, by bucket index ascending
}

type slotIndex struct {
	slot  int
	index int32
}

// bucketBound is the upper bound of positive bucket index i in the
// layout's schema (the negative one mirrors it): base^i, base =
// 2^(2^-schema).
func (l *nativeLayout) bucketBound(i int32) float64 {
	return math.Exp2(math.Ldexp(float64(i), -int(l.schema)))
}

// append appends the native fields of a histogram of slots.
func (l *nativeLayout) append(b []byte, slots []uint64) []byte {
	b = appendTag(b, pbHistSchema, protowire.VarintType)
	b = appendVarint(b, protowire.EncodeZigZag(int64(l.schema)))
	b = appendTag(b, pbHistZeroThreshold, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(l.zeroThreshold))
	var zero uint64
	for _, s := range l.zero {
		zero += slots[s]
	}
	b = appendTag(b, pbHistZeroCount, protowire.VarintType)
	b = appendVarint(b, zero)
	b = appendBuckets(b, pbHistNegSpan, pbHistNegDelta, l.neg, slots)
	b = appendBuckets(b, pbHistPosSpan, pbHistPosDelta, l.pos, slots)
	return b
}

// maxSpanGap is the longest run of empty buckets kept inside a span (each
// costs a one-byte delta) rather than starting a new span (four bytes or
// more), as client_golang decides.
const maxSpanGap = 2

// appendBuckets appends the spans, then the count deltas, of the
// non-empty buckets among order (the deltas run over every bucket the
// spans cover, empty ones inside a span included).
func appendBuckets(b []byte, spanField, deltaField protowire.Number, order []slotIndex, slots []uint64) []byte {
	type span struct {
		offset int32
		length uint32
	}
	var spans [32]span   // no histogram has more slots
	var counts [96]int64 // nor covers more buckets than 3 a slot
	ns, nc := 0, 0
	var last int32
	for _, o := range order {
		c := slots[o.slot]
		if c == 0 {
			continue
		}
		switch gap := o.index - last - 1; {
		case ns == 0:
			spans[0] = span{o.index, 1}
			ns = 1
		case gap <= maxSpanGap:
			spans[ns-1].length += uint32(gap) + 1
			for ; gap > 0; gap-- {
				counts[nc] = 0
				nc++
			}
		default:
			spans[ns] = span{gap, 1}
			ns++
		}
		counts[nc] = int64(c)
		nc++
		last = o.index
	}
	for _, s := range spans[:ns] {
		off := protowire.EncodeZigZag(int64(s.offset))
		b = appendTag(b, spanField, protowire.BytesType)
		b = appendVarint(b, uint64(protowire.SizeTag(pbSpanOffset)+protowire.SizeVarint(off)+
			protowire.SizeTag(pbSpanLength)+protowire.SizeVarint(uint64(s.length))))
		b = appendTag(b, pbSpanOffset, protowire.VarintType)
		b = appendVarint(b, off)
		b = appendTag(b, pbSpanLength, protowire.VarintType)
		b = appendVarint(b, uint64(s.length))
	}
	var prev int64
	for _, c := range counts[:nc] {
		b = appendTag(b, deltaField, protowire.VarintType)
		b = appendVarint(b, protowire.EncodeZigZag(c-prev))
		prev = c
	}
	return b
}

// appendTag is protowire.AppendTag for the field numbers of metrics.proto
// that this file writes, all below 16: their key is one byte, appended
// inline. A histogram's buckets are two keys and two varints each, and
// the calls were a fifth of a protobuf scrape's CPU at 10,000 disks whose
// histograms all had data (BenchmarkScrape10k).
func appendTag(b []byte, n protowire.Number, t protowire.Type) []byte {
	return append(b, byte(n)<<3|byte(t))
}

// appendVarint is protowire.AppendVarint, the one-byte case (a bucket's
// delta, a length) inline.
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}
