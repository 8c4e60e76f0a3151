package guest

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The QMP poll's decoding. A query-blockstats reply is about 2.6 KiB a
// device with its three histograms, and at 10,000 plain-QEMU VMs the poll
// decodes 2,000 of them a second: through encoding/json (reflection, a
// validating pass before the decoding one, a map per device and a second
// Unmarshal per histogram) that was most of the poll's CPU. The reply's
// envelope and query-blockstats are read here by a scanner that validates
// as it goes and allocates nothing but the entries; every other command's
// "return" (small, and read once a session at most) still goes through
// encoding/json.

// errJSON is a reply that is not JSON (RFC 8259) where the scanner read it.
var errJSON = errors.New("not JSON")

// maxJSONDepth bounds the nesting the scanner follows: QMP's replies nest
// a few levels (BlockStats' parent and backing chains a few more).
const maxJSONDepth = 64

// jsonScanner reads one JSON text from b, from i on.
type jsonScanner struct {
	b     []byte
	i     int
	depth int
}

// fail is the error for what is at the scanner's position.
func (s *jsonScanner) fail(what string) error {
	if s.i >= len(s.b) {
		return fmt.Errorf("%w: %s, at the end", errJSON, what)
	}
	return fmt.Errorf("%w: %s, at byte %d (%q)", errJSON, what, s.i, s.b[s.i])
}

// next skips white space and returns the byte there, 0 at the end.
func (s *jsonScanner) next() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// literal reads one of true, false and null.
func (s *jsonScanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.fail("a bad literal")
	}
	s.i += len(word)
	return nil
}

// str reads a string and returns what is between its quotes, escapes as
// they came; esc says whether there is any (or a byte beyond ASCII, which
// encoding/json checks as UTF-8).
func (s *jsonScanner) str() (raw []byte, esc bool, err error) {
	if s.next() != '"' {
		return nil, false, s.fail("not a string")
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], esc, nil
		case c < 0x20:
			return nil, false, s.fail("a control character in a string")
		case c == '\\':
			esc = true
			s.i++
			if s.i >= len(s.b) {
				return nil, false, s.fail("an unfinished escape")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if s.i+k >= len(s.b) || !isHex(s.b[s.i+k]) {
						return nil, false, s.fail("a bad \\u escape")
					}
				}
				s.i += 4
			default:
				return nil, false, s.fail("a bad escape")
			}
		case c >= 0x80:
			esc = true
		}
		s.i++
	}
	return nil, false, s.fail("an unfinished string")
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// text reads a string value into a Go string; null leaves dst as it is,
// as encoding/json does.
func (s *jsonScanner) text(dst *string) error {
	switch s.next() {
	case 'n':
		return s.literal("null")
	case '"':
	default:
		return errNotString // the scanner at the value
	}
	start := s.i
	raw, esc, err := s.str()
	if err != nil {
		return err
	}
	if !esc {
		*dst = string(raw)
		return nil
	}
	// Escapes and UTF-8 as encoding/json reads them: rare in QMP (QEMU
	// sends ASCII), so not worth a decoder of their own.
	return json.Unmarshal(s.b[start:s.i], dst)
}

// number reads a number and returns it as it came.
func (s *jsonScanner) number() ([]byte, error) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return nil, s.fail("a bad number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return nil, s.fail("a bad fraction")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return nil, s.fail("a bad exponent")
		}
	}
	return s.b[start:s.i], nil
}

func (s *jsonScanner) digits() int {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

// uintOf is a number's value when it is an unsigned 64-bit integer, as
// strconv.ParseUint would read it (no sign, fraction or exponent).
func uintOf(num []byte) (uint64, bool) {
	if len(num) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false // overflows
		}
		n = n*10 + d
	}
	return n, true
}

// enter and leave bound the nesting.
func (s *jsonScanner) enter() error {
	if s.depth++; s.depth > maxJSONDepth {
		return s.fail("nested too deep")
	}
	return nil
}

func (s *jsonScanner) leave() { s.depth-- }

// object reads an object, calling member with each key (escapes as they
// came: QMP's keys have none) with the scanner at its value, which member
// must read.
func (s *jsonScanner) object(member func(key []byte) error) error {
	if s.next() != '{' {
		return s.fail("not an object")
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	s.i++
	if s.next() == '}' {
		s.i++
		return nil
	}
	for {
		start := s.i
		key, esc, err := s.str()
		if err != nil {
			return err
		}
		if esc {
			// As encoding/json reads the key (QMP's have no escapes).
			var k string
			if err := json.Unmarshal(s.b[start:s.i], &k); err != nil {
				return err
			}
			key = []byte(k)
		}
		if s.next() != ':' {
			return s.fail("no colon after a key")
		}
		s.i++
		if err := member(key); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.fail("no comma or brace after a member")
		}
	}
}

// array reads an array, calling elem with the scanner at each element,
// which elem must read.
func (s *jsonScanner) array(elem func() error) error {
	if s.next() != '[' {
		return s.fail("not an array")
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	s.i++
	if s.next() == ']' {
		s.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.fail("no comma or bracket after an element")
		}
	}
}

// skip reads any value, checking it is JSON.
func (s *jsonScanner) skip() error {
	switch c := s.next(); {
	case c == '{':
		return s.object(func([]byte) error { return s.skip() })
	case c == '[':
		return s.array(s.skip)
	case c == '"':
		_, _, err := s.str()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		_, err := s.number()
		return err
	}
}

// end checks that nothing but white space follows the value.
func (s *jsonScanner) end() error {
	if s.next(); s.i < len(s.b) { // a NUL byte too
		return s.fail("more after the value")
	}
	return nil
}

// value reads any value and returns it as it came.
func (s *jsonScanner) value() ([]byte, error) {
	s.next()
	start := s.i
	err := s.skip()
	return s.b[start:s.i], err
}

// errShape is a reply that is JSON but not of the shape fspair reads
// (where encoding/json would give an *json.UnmarshalTypeError).
var errShape = errors.New("unexpected shape")

// decodeBlockstats reads query-blockstats' return value (an array of QAPI
// BlockStats) into entries, as encoding/json would: null leaves entries
// as they are; a member fspair does not read is skipped (checked as JSON).
// An error of shape leaves the scanner after the value, so that the
// reply's envelope can still be read (its id says whose it is).
func (s *jsonScanner) decodeBlockstats(entries *[]blockstatsEntry) error {
	start := s.i
	if s.next() == 'n' {
		return s.literal("null")
	}
	if s.next() != '[' {
		if err := s.skip(); err != nil {
			return err
		}
		return fmt.Errorf("%w: query-blockstats returned %.40q, not an array", errShape, s.b[start:s.i])
	}
	var shape error
	out := (*entries)[:0]
	err := s.array(func() error {
		out = append(out, blockstatsEntry{})
		e := &out[len(out)-1]
		if c := s.next(); c == 'n' {
			return s.literal("null")
		} else if c != '{' {
			shape = cmp(shape, fmt.Errorf("%w: a query-blockstats entry not an object", errShape))
			return s.skip()
		}
		return s.object(func(key []byte) error {
			var err error
			switch string(key) {
			case "device":
				err = s.text(&e.Device)
			case "qdev":
				err = s.text(&e.QDev)
			case "node-name":
				err = s.text(&e.NodeName)
			case "stats":
				err = s.decodeStats(e)
			default:
				return s.skip()
			}
			if errors.Is(err, errShape) || errors.Is(err, errNotString) {
				shape = cmp(shape, fmt.Errorf("%w: query-blockstats member %s: %v", errShape, key, err))
				return s.skip()
			}
			return err
		})
	})
	*entries = out
	if err != nil {
		return err
	}
	return shape
}

// cmp keeps the first error.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// errNotString is a string member given as another type; the scanner is
// left at the value.
var errNotString = errors.New("not a string")

// decodeStats reads a BlockStats' "stats" (QAPI BlockDeviceStats) into
// the entry: the fields of statSlots, the last of a key given twice
// winning, others skipped.
func (s *jsonScanner) decodeStats(e *blockstatsEntry) error {
	switch s.next() {
	case 'n':
		e.st, e.kinds = Stats{}, [NumOps]histKind{}
		return s.literal("null")
	case '{':
	default:
		return errShape
	}
	// A second "stats" replaces the first.
	e.st, e.kinds = Stats{}, [NumOps]histKind{}
	return s.object(func(key []byte) error {
		slot, ok := statSlots[string(key)]
		if !ok {
			return s.skip()
		}
		if slot.hist {
			h, err := s.histogram()
			e.st.Latency[slot.op], e.kinds[slot.op] = h, histOther
			if h.OK {
				e.kinds[slot.op] = histOurs
			}
			return err
		}
		dst := &e.st.field(slot.field)[slot.op]
		*dst = Counter{}
		if c := s.next(); c != '-' && (c < '0' || c > '9') {
			return s.skip() // not a counter: left absent
		}
		num, err := s.number()
		if v, isUint := uintOf(num); err == nil && isUint {
			*dst = set(v)
		}
		return err
	})
}

// histogram reads a latency histogram (QAPI BlockLatencyHistogramInfo):
// ok when it is on LatencyBoundsNs; anything else is a histogram fspair
// does not export.
func (s *jsonScanner) histogram() (Histogram, error) {
	if s.next() != '{' {
		return Histogram{}, s.skip()
	}
	var bounds [LatencySlots - 1]uint64
	var bins [LatencySlots]uint64
	nb, nn := -1, -1 // counts read; -1: none, or not all unsigned
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "boundaries":
			return s.uints(bounds[:], &nb)
		case "bins":
			return s.uints(bins[:], &nn)
		}
		return s.skip()
	})
	if err != nil || nb != len(bounds) || nn != len(bins) || bounds != LatencyBoundsNs {
		return Histogram{}, err
	}
	return Histogram{Bins: bins, OK: true}, nil
}

// uints reads an array of unsigned integers into dst, setting *n to their
// count; -1 when it is not such an array or has more than dst holds.
func (s *jsonScanner) uints(dst []uint64, n *int) error {
	*n = -1
	if s.next() != '[' {
		return s.skip()
	}
	k, ok := 0, true
	err := s.array(func() error {
		num, err := s.value()
		if err != nil {
			return err
		}
		v, isUint := uintOf(num)
		if !isUint || k >= len(dst) {
			ok = false
			return nil
		}
		dst[k] = v
		k++
		return nil
	})
	if ok {
		*n = k
	}
	return err
}
