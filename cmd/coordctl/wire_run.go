package main

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"unicode/utf8"
)

// The conversions between a command's output and the API's payloads (lease
// run --window, worker): one place, so that a change of the payload
// contract is a change here.

// resultPayload is the result recorded for a command's output b (a job's
// stdout, a window's last line): b itself when it is one JSON value, else
// b as a JSON string (invalid UTF-8 replaced), so that a result is always
// JSON. Surrounding white space is dropped; nothing is null.
func resultPayload(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(bytes.ToValidUTF8(b, []byte("\uFFFD"))))
	return s
}

// lastLine passes what it is written on to out and keeps the last
// non-empty line of it (its last max bytes).
type lastLine struct {
	out  io.Writer
	max  int
	mu   sync.Mutex
	line []byte // the current line, up to max bytes (its end)
	done []byte // the last complete non-empty line
}

func newLastLine(out io.Writer, max int) *lastLine { return &lastLine{out: out, max: max} }

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			l.line = tail(append(l.line, rest...), l.max)
			break
		}
		l.line = tail(append(l.line, rest[:i]...), l.max)
		if len(bytes.TrimSpace(l.line)) > 0 {
			l.done = append(l.done[:0], l.line...)
		}
		l.line = l.line[:0]
		rest = rest[i+1:]
	}
	l.mu.Unlock()
	return l.out.Write(p)
}

// Bytes is the last non-empty line written (an unterminated one counts).
func (l *lastLine) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(bytes.TrimSpace(l.line)) > 0 {
		return append([]byte(nil), l.line...)
	}
	return append([]byte(nil), l.done...)
}

// tail is the last max bytes of b, starting on a rune boundary.
func tail(b []byte, max int) []byte {
	if len(b) <= max {
		return b
	}
	cut := len(b) - max
	for cut < len(b) && !utf8.RuneStart(b[cut]) {
		cut++
	}
	return append(b[:0], b[cut:]...)
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	mu    sync.Mutex
	max   int
	buf   bytes.Buffer
	total int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += len(p)
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// tailBuf passes writes on to out and keeps their last max bytes.
type tailBuf struct {
	out io.Writer
	max int
	mu  sync.Mutex
	b   []byte
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.b = tail(append(t.b, p...), t.max)
	t.mu.Unlock()
	return t.out.Write(p)
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
