package guest

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// oracleBlockstats is what query-blockstats' return value holds, read
// through encoding/json into maps as an independent reference: each
// device's names, the counters given as unsigned integers, and each
// histogram's kind (ours only on LatencyBoundsNs with LatencySlots
// unsigned bins). ok is false where encoding/json finds it is not an
// array of such objects.
func oracleBlockstats(t testing.TB, raw []byte) (want []blockstatsEntry, ok bool) {
	t.Helper()
	var list []map[string]json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, false
	}
	for _, m := range list {
		var e blockstatsEntry
		for name, dst := range map[string]*string{"device": &e.Device, "qdev": &e.QDev, "node-name": &e.NodeName} {
			if v, found := m[name]; found && json.Unmarshal(v, dst) != nil {
				return nil, false
			}
		}
		var st map[string]json.RawMessage
		if v, found := m["stats"]; found && json.Unmarshal(v, &st) != nil {
			return nil, false
		}
		for f := range qmpFields {
			for op, name := range qmpFields[f] {
				v, found := st[name]
				if name == "" || !found {
					continue
				}
				if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
					e.st.field(f)[op] = set(n)
				}
			}
		}
		for _, op := range HistogramOps {
			v, found := st[qmpHistograms[op]]
			if !found {
				continue
			}
			e.kinds[op] = histOther
			var h map[string]json.RawMessage
			var bounds, bins []json.RawMessage
			if json.Unmarshal(v, &h) != nil || json.Unmarshal(h["boundaries"], &bounds) != nil || json.Unmarshal(h["bins"], &bins) != nil ||
				len(bounds) != len(LatencyBoundsNs) || len(bins) != LatencySlots {
				continue
			}
			var l Histogram
			ours := true
			for k, b := range bounds {
				n, err := strconv.ParseUint(string(b), 10, 64)
				ours = ours && err == nil && n == LatencyBoundsNs[k]
			}
			for k, b := range bins {
				n, err := strconv.ParseUint(string(b), 10, 64)
				ours = ours && err == nil
				l.Bins[k] = n
			}
			if ours {
				l.OK = true
				e.st.Latency[op], e.kinds[op] = l, histOurs
			}
		}
		want = append(want, e)
	}
	return want, true
}

// blockstatsCases are query-blockstats return values, well formed and
// not: QEMU's own, fields missing, histograms present, absent, on other
// bounds or malformed, and garbage.
func blockstatsCases(t testing.TB) []string {
	t.Helper()
	bounds, _ := json.Marshal(LatencyBoundsNs)
	bins := make([]uint64, LatencySlots)
	for k := range bins {
		bins[k] = uint64(k) * 1_000_003
	}
	ours, _ := json.Marshal(bins)
	hist := func(b, n string) string { return `{"boundaries":` + b + `,"bins":` + n + `}` }
	full := string(blockstatsReply(t, 3, true))
	return []string{
		full,
		string(blockstatsReply(t, 2, false)),
		`[]`,
		`[{}]`,
		`[{"device":"d"}]`,              // no stats
		`[{"device":"d","stats":null}]`, // stats null
		`[{"device":"d","stats":{}}]`,   // no counters
		`[{"device":null,"qdev":"q","stats":{"rd_operations":1}}]`,
		`[{"device":"d","stats":{"rd_operations":7,"rd_operations":"8"}}]`, // the last of a key twice
		`[{"device":"d","stats":{"rd_operations":-0,"wr_operations":0.0,"flush_operations":1E2,"unmap_operations":18446744073709551616}}]`,
		`[{"device":"d\u00e9\"x","qdev":"/machine/peripheral/v\/d","stats":{"rd_bytes":5}}]`,
		`[{"device":"d","parent":{"stats":{"rd_operations":99}},"backing":{"parent":{"stats":{}}},"stats":{"rd_operations":3,"timed_stats":[{"interval_length":60,"avg_rd_latency_ns":1.5e-3}]}}]`,
		`[{"device":"d","stats":{"rd_latency_histogram":` + hist(string(bounds), string(ours)) + `}}]`,
		`[{"device":"d","stats":{"rd_latency_histogram":` + hist(string(bounds), string(ours)) + `,"rd_latency_histogram":7}}]`,
		`[{"device":"d","stats":{"wr_latency_histogram":` + hist(`[10,20]`, `[1,2,3]`) + `}}]`,
		`[{"device":"d","stats":{"wr_latency_histogram":` + hist(string(bounds), `[1]`) + `}}]`,
		`[{"device":"d","stats":{"wr_latency_histogram":` + hist(strings.Replace(string(bounds), "[1001", "[1000", 1), string(ours)) + `}}]`, // other bounds, as many
		`[{"device":"d","stats":{"flush_latency_histogram":` + hist(string(bounds), strings.Replace(string(ours), "[0", "[-1", 1)) + `}}]`,
		`[{"device":"d","stats":{"flush_latency_histogram":` + hist(string(bounds), strings.Replace(string(ours), "[0", `["0"`, 1)) + `}}]`,
		`[{"device":"d","stats":{"flush_latency_histogram":{"bins":` + string(ours) + `}}}]`,
		`[{"device":"d","stats":{"flush_latency_histogram":` + hist(string(bounds), strings.Replace(string(ours), "]", ",1]", 1)) + `}}]`,
		`[{"device":"d","stats":{"rd_latency_histogram":null,"wr_latency_histogram":[],"flush_latency_histogram":"x"}}]`,
		// Not of the shape: ok false in the oracle, an error here.
		`{"device":"d"}`,
		`[1]`,
		`[{"device":5}]`,
		`[{"stats":[1]}]`,
		`"x"`,
		// Not JSON.
		``,
		`[`,
		`[{"device":"d","stats":{"rd_operations":1}`,
		`[{"device":"d","stats":{"rd_operations":01}}]`,
		`[{"device":"d","stats":{"rd_operations":1,}}]`,
		`[{"device":"d" "stats":{}}]`,
		`[{"device":"d\x01"}]`,
		`[{"device":"d\q"}]`,
		`[{"device":"d","stats":{"rd_operations":tru}}]`,
		`[{"device":"d","stats":{"rd_operations":1}}] x`,
		full[:len(full)/2], // a reply cut off
	}
}

// TestParseBlockstats: the scanner reads query-blockstats as encoding/json
// would (oracleBlockstats): the same devices, counters and histogram kinds
// where it is of the shape, an error where it is not or is not JSON.
func TestParseBlockstats(t *testing.T) {
	for i, raw := range blockstatsCases(t) {
		checkBlockstats(t, strconv.Itoa(i), []byte(raw))
	}
}

func checkBlockstats(t *testing.T, name string, raw []byte) {
	t.Helper()
	want, ok := oracleBlockstats(t, raw)
	var got []blockstatsEntry
	err := parseBlockstats(raw, &got)
	if !ok {
		// encoding/json refuses it: so must the scanner, as not JSON
		// when encoding/json finds it is not.
		if err == nil {
			t.Errorf("%s: %.60q: no error, want one", name, raw)
		} else if !json.Valid(raw) && !errors.Is(err, errJSON) {
			t.Errorf("%s: %.60q: error %v, want it named not JSON", name, raw, err)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %.60q: %v", name, raw, err)
		return
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d", name, len(got), len(want))
		return
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("%s: entry %d:\n got %+v\nwant %+v", name, k, got[k], want[k])
		}
	}
}

// FuzzParseBlockstats checks the scanner against encoding/json on any
// input (go test ./exporter/guest -run X -fuzz ParseBlockstats); without
// -fuzz it runs the cases above.
func FuzzParseBlockstats(f *testing.F) {
	for _, raw := range blockstatsCases(f) {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// encoding/json follows 10,000 levels, the scanner maxJSONDepth:
		// past that the scanner's refusal is the only difference allowed.
		if strings.Count(string(raw), "[")+strings.Count(string(raw), "{") > maxJSONDepth {
			var entries []blockstatsEntry
			if err := parseBlockstats(raw, &entries); err != nil && strings.Contains(err.Error(), "nested too deep") {
				return
			}
		}
		checkBlockstats(t, "fuzz", raw)
	})
}

// TestQMPSessionGarbage: over a live session, a monitor that answers
// garbage, cuts its reply off or closes mid-read fails the read at once
// with an error that says so, never a wait for the deadline.
func TestQMPSessionGarbage(t *testing.T) {
	full := blockstatsReply(t, 1, true)
	for _, c := range []struct {
		name, reply string
		close       bool
		want        string
	}{
		{"not JSON", "Welcome to the monitor\n", false, "not JSON"},
		{"a broken object", `{"return": [}` + "\n", false, "not JSON"},
		{"cut off, then closed", `{"return": ` + string(full[:len(full)/2]), true, "EOF"},
		{"closed before replying", "", true, "EOF"},
		{"a reply cut off mid-line", `{"return": ` + string(full[:len(full)/2]) + "\n", false, "not JSON"},
	} {
		client, server := net.Pipe()
		go func() {
			r := bufio.NewReader(server)
			r.ReadBytes('\n') // qmp_capabilities
			r.ReadBytes('\n') // query-blockstats
			server.Write([]byte(`{"return": {}, "id": "fspair-1"}` + "\n" + c.reply))
			if c.close {
				server.Close()
			}
		}()
		_ = client.SetDeadline(time.Now().Add(5 * time.Second))
		s := &qmpSession{conn: client, r: bufio.NewReader(client)}
		var err error
		if s.pending, err = s.queue("qmp_capabilities", nil); err != nil {
			t.Fatal(err)
		}
		s.pendingCmd = "qmp_capabilities"
		var got []blockstatsEntry
		start := time.Now()
		err = s.executeArgs("query-blockstats", nil, &got)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "query-blockstats") {
			t.Errorf("%s: error %v, want one naming query-blockstats and %q", c.name, err, c.want)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: the error took %v", c.name, took)
		}
		client.Close()
		server.Close()
	}
}

// TestQMPCapabilitiesFirst: qmp_capabilities goes out with the first
// command, in one write, and its reply is read first: a monitor refusing
// it fails the session with its refusal, and the command's own reply is
// not taken.
func TestQMPCapabilitiesFirst(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		client, server := net.Pipe()
		lines := make(chan []string, 1)
		go func() {
			buf := make([]byte, 4096)
			n, _ := server.Read(buf) // one write: both commands
			lines <- strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")
			capReply := `{"return": {}, "id": "fspair-1"}`
			if refuse {
				capReply = `{"error": {"class": "GenericError", "desc": "no"}, "id": "fspair-1"}`
			}
			server.Write([]byte(`{"event": "X", "timestamp": {"seconds": 1, "microseconds": 0}}` + "\n" + capReply + "\n" +
				`{"return": [{"device": "d", "stats": {"rd_operations": 4}}], "id": "fspair-2"}` + "\n"))
		}()
		_ = client.SetDeadline(time.Now().Add(5 * time.Second))
		s := &qmpSession{conn: client, r: bufio.NewReader(client)}
		var err error
		s.pending, _ = s.queue("qmp_capabilities", nil)
		s.pendingCmd = "qmp_capabilities"
		var got []blockstatsEntry
		err = s.executeArgs("query-blockstats", nil, &got)
		want := []string{`{"execute":"qmp_capabilities","id":"fspair-1"}`, `{"execute":"query-blockstats","id":"fspair-2"}`}
		if l := <-lines; !slices.Equal(l, want) {
			t.Errorf("refuse=%v: one write of %q, want %q", refuse, l, want)
		}
		var qe *qmpError
		switch {
		case refuse && (!errors.As(err, &qe) || qe.Command != "qmp_capabilities" || got != nil):
			t.Errorf("refused: error %v, entries %+v; want qmp_capabilities refused, no entries", err, got)
		case !refuse && (err != nil || len(got) != 1 || got[0].st.Requests[OpRead] != set(4)):
			t.Errorf("accepted: error %v, entries %+v", err, got)
		}
		client.Close()
		server.Close()
	}
}
