package dashboards

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// The lint rules need the structure of each query (which series it selects,
// with which matchers and ranges, inside which function); whether the query
// is valid PromQL is for a real Prometheus to say (rule target-promql). The
// module does not depend on the Prometheus server packages (a heavy
// dependency for a test), so this file reads the structure with a small
// lexer. It understands the subset of PromQL dashboards use and refuses
// anything else (subqueries, selectors without a metric name) with an
// error, so that a query it cannot read fails the lint instead of passing
// unchecked.

type tokenKind int

const (
	tokIdent    tokenKind = iota // metric, function, keyword or label name
	tokString                    // "..." '...' `...`, unquoted in text
	tokNumber                    // 1, 0.5, 1e6, 0x10
	tokDuration                  // 5m, 1h30m
	tokVariable                  // a Grafana variable outside a string: $x, ${x}, ${x:fmt}
	tokPunct                     // ( ) { } [ ] ,
	tokOperator                  // == != =~ !~ >= <= = > < + - * / % ^ @ :
)

type token struct {
	kind tokenKind
	text string
}

// errUnsupported marks PromQL the lint cannot analyse (and so refuses).
var errUnsupported = errors.New("unsupported by the dashboard lint")

func lex(expr string) ([]token, error) {
	var out []token
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			s, n, err := lexString(expr[i:])
			if err != nil {
				return nil, err
			}
			out = append(out, token{tokString, s})
			i += n
		case c == '$':
			loc := grafanaVariable.FindStringIndex(expr[i:])
			if loc == nil || loc[0] != 0 {
				return nil, fmt.Errorf("stray $ at offset %d", i)
			}
			out = append(out, token{tokVariable, expr[i : i+loc[1]]})
			i += loc[1]
		case c == '_' || unicode.IsLetter(rune(c)):
			j := i + 1
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || isAlnum(expr[j])) {
				j++
			}
			out = append(out, token{tokIdent, expr[i:j]})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(expr) && isDigit(expr[i+1])):
			t, n := lexNumber(expr[i:])
			out = append(out, t)
			i += n
		case strings.ContainsRune("(){}[],", rune(c)):
			out = append(out, token{tokPunct, string(c)})
			i++
		default:
			op := ""
			for _, o := range []string{"==", "!=", "=~", "!~", ">=", "<=", "=", ">", "<", "+", "-", "*", "/", "%", "^", "@", ":"} {
				if strings.HasPrefix(expr[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("unexpected %q at offset %d", c, i)
			}
			out = append(out, token{tokOperator, op})
			i += len(op)
		}
	}
	return out, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlnum(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// lexString reads a quoted string at the start of s; it returns the text
// between the quotes (escapes kept as written: the rules only look at the
// variables inside) and the bytes consumed.
func lexString(s string) (string, int, error) {
	q := s[0]
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return s[1:j], j + 1, nil
		}
	}
	return "", 0, fmt.Errorf("unterminated string %.20q", s)
}

// lexNumber reads a number or a duration (5m, 1h30m, 500ms) at the start of s.
func lexNumber(s string) (token, int) {
	j := 0
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		j = 2
		for j < len(s) && isAlnum(s[j]) {
			j++
		}
		return token{tokNumber, s[:j]}, j
	}
	for j < len(s) && (isDigit(s[j]) || s[j] == '.') {
		j++
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') && j+1 < len(s) && (isDigit(s[j+1]) || s[j+1] == '+' || s[j+1] == '-') {
		j += 2
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		return token{tokNumber, s[:j]}, j
	}
	if j < len(s) && strings.ContainsRune("smhdwy", rune(s[j])) {
		for j < len(s) && (isDigit(s[j]) || strings.ContainsRune("smhdwy", rune(s[j]))) {
			j++
		}
		return token{tokDuration, s[:j]}, j
	}
	return token{tokNumber, s[:j]}, j
}

// matcher is one label matcher of a selector.
type matcher struct {
	op, value string
}

// selector is one vector selector of a query.
type selector struct {
	name     string
	matchers map[string]matcher
	// rangeText is the range of a range-vector selector as written
	// ("$__rate_interval", "5m"); empty for an instant vector.
	rangeText string
	// fn is the function or aggregation the selector is the whole first
	// argument of (rate(x[..]), sum(x)); empty otherwise.
	fn string
}

// queryShape is what the lint rules read from one query.
type queryShape struct {
	selectors []selector
	calls     []string // every function and aggregation called
}

// Keywords that are not series names.
var (
	groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	otherKeywords    = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true}
	aggregations     = map[string]bool{
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
		"count_values": true, "bottomk": true, "topk": true, "quantile": true,
	}
)

// analyze reads the selectors of a PromQL query written with Grafana
// variables.
func analyze(expr string) (*queryShape, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	a := &analyzer{toks: toks}
	if err := a.run(); err != nil {
		return nil, err
	}
	return &a.shape, nil
}

type analyzer struct {
	toks  []token
	i     int
	stack []string // open parentheses: the function they call, "" for grouping
	shape queryShape
}

func (a *analyzer) peek(k int) token {
	if a.i+k < len(a.toks) {
		return a.toks[a.i+k]
	}
	return token{}
}

func (a *analyzer) is(k int, kind tokenKind, text string) bool {
	t := a.peek(k)
	return t.kind == kind && t.text == text
}

func (a *analyzer) run() error {
	for a.i < len(a.toks) {
		t := a.toks[a.i]
		switch {
		case t.kind == tokIdent:
			if err := a.ident(t); err != nil {
				return err
			}
		case t.kind == tokPunct && t.text == "{":
			return fmt.Errorf("selector without a metric name: %w", errUnsupported)
		case t.kind == tokPunct && t.text == "[":
			return fmt.Errorf("subquery or range after an expression: %w", errUnsupported)
		case t.kind == tokPunct && t.text == "(":
			a.stack = append(a.stack, "")
			a.i++
		case t.kind == tokPunct && t.text == ")":
			if len(a.stack) == 0 {
				return errors.New("unbalanced )")
			}
			a.stack = a.stack[:len(a.stack)-1]
			a.i++
		default:
			a.i++
		}
	}
	if len(a.stack) != 0 {
		return errors.New("unbalanced (")
	}
	return nil
}

// skipParenList skips a parenthesised label list (by (a, b)) at the cursor.
func (a *analyzer) skipParenList() error {
	if !a.is(0, tokPunct, "(") {
		return nil
	}
	for a.i < len(a.toks) {
		if a.is(0, tokPunct, ")") {
			a.i++
			return nil
		}
		a.i++
	}
	return errors.New("unterminated label list")
}

func (a *analyzer) ident(t token) error {
	word := strings.ToLower(t.text)
	switch {
	case groupingKeywords[word]:
		a.i++
		return a.skipParenList()
	case otherKeywords[word]:
		a.i++
		return nil
	case aggregations[word] && (a.is(1, tokIdent, "by") || a.is(1, tokIdent, "without")):
		// sum by (x) (expr): the clause comes before the argument.
		a.i += 2
		if err := a.skipParenList(); err != nil {
			return err
		}
		if !a.is(0, tokPunct, "(") {
			return fmt.Errorf("%s by/without without an argument", t.text)
		}
		a.call(word)
		return nil
	case a.is(1, tokPunct, "("):
		a.i++
		a.call(word)
		return nil
	}
	return a.selector(t.text)
}

// call enters the argument list of fn at the cursor's "(".
func (a *analyzer) call(fn string) {
	a.shape.calls = append(a.shape.calls, fn)
	a.stack = append(a.stack, fn)
	a.i++
}

func (a *analyzer) selector(name string) error {
	prev := token{}
	if a.i > 0 {
		prev = a.toks[a.i-1]
	}
	s := selector{name: name, matchers: map[string]matcher{}}
	a.i++
	if a.is(0, tokPunct, "{") {
		a.i++
		if err := a.matchers(s.matchers); err != nil {
			return fmt.Errorf("selector %s: %w", name, err)
		}
	}
	if a.is(0, tokPunct, "[") {
		a.i++
		var parts []string
		for !a.is(0, tokPunct, "]") {
			if a.i >= len(a.toks) {
				return fmt.Errorf("selector %s: unterminated range", name)
			}
			if a.peek(0).kind == tokOperator && a.peek(0).text == ":" {
				return fmt.Errorf("selector %s: subquery: %w", name, errUnsupported)
			}
			parts = append(parts, a.peek(0).text)
			a.i++
		}
		a.i++
		s.rangeText = strings.Join(parts, "")
	}
	// The selector is its function's whole first argument when it sits
	// between the call's "(" and a "," or ")".
	if len(a.stack) > 0 && prev.kind == tokPunct && prev.text == "(" && (a.is(0, tokPunct, ")") || a.is(0, tokPunct, ",")) {
		s.fn = a.stack[len(a.stack)-1]
	}
	a.shape.selectors = append(a.shape.selectors, s)
	return nil
}

// matchers reads label matchers up to and including "}".
func (a *analyzer) matchers(m map[string]matcher) error {
	for {
		if a.is(0, tokPunct, "}") {
			a.i++
			return nil
		}
		label, op, val := a.peek(0), a.peek(1), a.peek(2)
		if label.kind != tokIdent || op.kind != tokOperator || val.kind != tokString {
			return fmt.Errorf("bad matcher near %q", label.text)
		}
		switch op.text {
		case "=", "!=", "=~", "!~":
		default:
			return fmt.Errorf("bad matcher operator %q", op.text)
		}
		if _, dup := m[label.text]; dup {
			return fmt.Errorf("label %s matched twice: %w", label.text, errUnsupported)
		}
		m[label.text] = matcher{op.text, val.text}
		a.i += 3
		if a.is(0, tokPunct, ",") {
			a.i++
		}
	}
}
