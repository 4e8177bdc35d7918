// Package jsonvalid answers encoding/json.Valid, faster.
//
// The FSM checks that every job's args are JSON when it applies a submit,
// on every node, and the leader's API checks them before that: four
// validations per job in a three-node cluster, the largest single
// function on a busy leader's profile (docs/benchmarks.md). encoding/json
// validates through its scanner, a function call per byte.
//
// Valid must give exactly encoding/json.Valid's answer: the FSM's verdict
// on a logged entry may not change from one coordd version to the next.
// So it parses a strict subset of what encoding/json accepts (RFC 8259
// with a nesting limit well below encoding/json's) in a plain loop, and
// whenever the input leaves that subset — an error, or anything this
// parser does not handle itself — it asks encoding/json. "Accepted here"
// implies "accepted by encoding/json" by construction; everything else
// is encoding/json's own answer. FuzzValid checks the two against each
// other.
package jsonvalid

import "encoding/json"

// maxDepth is how deep the fast path nests arrays and objects before it
// hands the input to encoding/json (whose limit is 10,000).
const maxDepth = 64

// Valid reports whether b is one valid JSON value, as encoding/json.Valid.
func Valid(b []byte) bool {
	if fastValid(b) {
		return true
	}
	return json.Valid(b)
}

// fastValid reports whether b is, by the subset this parser knows, one
// JSON value. false means "not known here", not "invalid".
func fastValid(b []byte) bool {
	p := parser{b: b}
	p.space()
	if !p.value(0) {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

type parser struct {
	b []byte
	i int
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.str()
	case c == '{':
		return depth < maxDepth && p.object(depth+1)
	case c == '[':
		return depth < maxDepth && p.array(depth+1)
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return false
}

func (p *parser) literal(lit string) bool {
	if len(p.b)-p.i < len(lit) || string(p.b[p.i:p.i+len(lit)]) != lit {
		return false
	}
	p.i += len(lit)
	return true
}

func (p *parser) object(depth int) bool {
	p.i++ // {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return true
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' || !p.str() {
			return false
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		p.space()
		if !p.value(depth) {
			return false
		}
		if more, ok := p.after('}'); !more {
			return ok
		}
	}
}

func (p *parser) array(depth int) bool {
	p.i++ // [
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return true
	}
	for {
		if !p.value(depth) {
			return false
		}
		if more, ok := p.after(']'); !more {
			return ok
		}
	}
}

// after reads what follows a member of an object or an element of an
// array: a ',' (more follows: more) or close (the end: ok).
func (p *parser) after(close byte) (more, ok bool) {
	p.space()
	if p.i >= len(p.b) {
		return false, false
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		p.space()
		return true, true
	case close:
		p.i++
		return false, true
	}
	return false, false
}

// str reads a string: any byte from 0x20 up but '"' and '\\' (as
// encoding/json, which does not check UTF-8 here), and the escapes
// \" \\ \/ \b \f \n \r \t \uXXXX.
func (p *parser) str() bool {
	b, i := p.b, p.i+1 // past "
	for {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '"':
			p.i = i + 1
			return true
		case '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !hex4(b[i+2:i+6]) {
					return false
				}
				i += 6
			default:
				return false
			}
		default: // a control character
			return false
		}
	}
}

// plain marks the bytes a string holds as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func hex4(h []byte) bool {
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *parser) number() bool {
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i >= len(p.b):
		return false
	case p.b[p.i] == '0':
		p.i++
	case '1' <= p.b[p.i] && p.b[p.i] <= '9':
		p.digits()
	default:
		return false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if !p.digits() {
			return false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if !p.digits() {
			return false
		}
	}
	return true
}

// digits reads one or more digits.
func (p *parser) digits() bool {
	start := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}
