package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// This file implements the two option syntaxes of the QEMU command line
// (docs/devel/qapi-code-gen and util/qemu-option.c, util/keyval.c in QEMU):
//
//   - QemuOpts, used by -drive, -device, -name, -object, ...:
//     "key=value,key2=value2", a bare "key" meaning key=on and "nokey"
//     key=off, and optionally an implied key for a first element without "="
//     ("-name foo" is "-name guest=foo").
//   - keyval, used by -blockdev in its non-JSON form: the same, but keys may
//     be dotted ("file.filename=/p") to build nested objects.
//
// In both, a comma inside a value is written as ",,".

// maxOptPairs bounds the number of key=value pairs in one option argument;
// real ones have a few dozen.
const maxOptPairs = 4096

// opt is one key=value pair in command line order.
type opt struct{ key, value string }

// parseOpts splits s into key=value pairs. implied names the key of a first
// element that has no "=" ("" if the option has no implied key).
func parseOpts(s, implied string) ([]opt, error) {
	var out []opt
	for pos, first := 0, true; pos < len(s); first = false {
		if len(out) >= maxOptPairs {
			return nil, fmt.Errorf("more than %d parameters", maxOptPairs)
		}
		n := strings.IndexAny(s[pos:], "=,")
		if n < 0 {
			n = len(s) - pos
		}
		var key, value string
		if pos+n < len(s) && s[pos+n] == '=' {
			key = s[pos : pos+n]
			value, pos = optValue(s, pos+n+1)
		} else if first && implied != "" {
			key = implied
			value, pos = optValue(s, pos)
		} else {
			// A flag: "readonly" is readonly=on, "noreadonly" readonly=off.
			key, value = s[pos:pos+n], "on"
			if strings.HasPrefix(key, "no") && len(key) > 2 {
				key, value = key[2:], "off"
			}
			pos += n
		}
		if key == "" {
			return nil, errors.New("empty parameter name")
		}
		out = append(out, opt{key, value})
		if pos < len(s) { // at the separating comma; a trailing one is accepted, as QEMU does
			pos++
		}
	}
	return out, nil
}

// optValue reads a value starting at pos up to the next single comma,
// turning ",," into ",". It returns the value and the index of the
// terminating comma (or len(s)).
func optValue(s string, pos int) (string, int) {
	var b strings.Builder
	for pos < len(s) {
		c := s[pos]
		if c == ',' {
			if pos+1 < len(s) && s[pos+1] == ',' {
				b.WriteByte(',')
				pos += 2
				continue
			}
			break
		}
		b.WriteByte(c)
		pos++
	}
	return b.String(), pos
}

// optMap returns the pairs as a map; for repeated keys the last one wins, as
// qemu_opt_get() returns the last occurrence.
func optMap(opts []opt) map[string]string {
	m := make(map[string]string, len(opts))
	for _, o := range opts {
		m[o.key] = o.value
	}
	return m
}

// nest turns dotted keys into nested maps the way keyval_parse() does:
// "file.driver=file,file.filename=/p" becomes {"file": {"driver": "file",
// "filename": "/p"}}. A key that is both a value and a parent is an error.
func nest(opts []opt) (map[string]any, error) {
	root := map[string]any{}
	for _, o := range opts {
		parts := strings.Split(o.key, ".")
		cur := root
		for i, p := range parts {
			if p == "" {
				return nil, fmt.Errorf("invalid parameter name %q", o.key)
			}
			if i == len(parts)-1 {
				if _, isMap := cur[p].(map[string]any); isMap {
					return nil, fmt.Errorf("parameter %q conflicts with its own sub-parameters", o.key)
				}
				cur[p] = o.value
				break
			}
			switch next := cur[p].(type) {
			case nil:
				m := map[string]any{}
				cur[p] = m
				cur = m
			case map[string]any:
				cur = next
			default:
				return nil, fmt.Errorf("parameter %q conflicts with %q", o.key, strings.Join(parts[:i+1], "."))
			}
		}
	}
	return root, nil
}

// parseObject parses an argument that QEMU accepts either as JSON (when it
// starts with "{", as -blockdev and -device do since QEMU 2.9 and 6.2) or in
// keyval form with the given implied key.
func parseObject(arg, implied string) (map[string]any, error) {
	if strings.HasPrefix(strings.TrimLeft(arg, " \t\n"), "{") {
		return parseJSONObject(arg)
	}
	opts, err := parseOpts(arg, implied)
	if err != nil {
		return nil, err
	}
	return nest(opts)
}

func parseJSONObject(s string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("parse JSON: %w", err)
	}
	if m == nil {
		return nil, errors.New("parse JSON: not an object")
	}
	if dec.More() {
		return nil, errors.New("parse JSON: trailing data")
	}
	return m, nil
}

// str returns m[key] as a string; JSON numbers are accepted in their textual
// form.
func str(m map[string]any, key string) string {
	switch v := m[key].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

// tristate is an optional boolean.
type tristate int8

const (
	unset tristate = iota
	yes
	no
)

func (t tristate) or(def bool) bool {
	if t == unset {
		return def
	}
	return t == yes
}

// boolOpt reads an optional boolean the ways QEMU accepts one: JSON true and
// false, or on/off, yes/no, true/false in option strings
// (qapi_bool_parse()).
func boolOpt(m map[string]any, key string) tristate {
	switch v := m[key].(type) {
	case bool:
		if v {
			return yes
		}
		return no
	case string:
		return parseBool(v)
	}
	return unset
}

func parseBool(s string) tristate {
	switch s {
	case "on", "yes", "true", "y":
		return yes
	case "off", "no", "false", "n":
		return no
	}
	return unset
}

func intOpt(m map[string]string, key string) (int, bool) {
	s, ok := m[key]
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > 1<<20 {
		return 0, false
	}
	return v, true
}
