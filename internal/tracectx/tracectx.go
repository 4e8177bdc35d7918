// Package tracectx reads and writes W3C Trace Context (traceparent and
// tracestate, https://www.w3.org/TR/trace-context/) as OpenTelemetry span
// contexts: the form in which coordd stores a job's trace context and hands
// it to workers and HTTP deliveries (docs/tracing.md). Shared by the server
// and the Go SDK; it depends on go.opentelemetry.io/otel/trace only.
package tracectx

import (
	"errors"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// MaxTraceStateBytes bounds a tracestate (the spec's 32 members of at most
// 256 bytes each could reach 8 KiB; 512 is what vendors propagate).
const MaxTraceStateBytes = 512

// Errors of Parse, for the caller's message.
var (
	ErrTraceParent = errors.New("must be a W3C traceparent: 2 hex version (not ff), 32 hex trace id, 16 hex span id, 2 hex flags, " +
		"separated by '-', lower case, ids not all zero")
	ErrTraceState         = errors.New("must be a W3C tracestate: up to 32 comma-separated key=value members, at most 512 bytes")
	ErrStateWithoutParent = errors.New("is set without a traceparent")
)

// Parse reads a traceparent (and an optional tracestate) into a remote span
// context. An empty traceparent with an empty tracestate is the zero
// context and no error; anything else that is not valid W3C syntax is an
// error (ErrTraceParent, ErrTraceState, ErrStateWithoutParent). A version
// above 00 is read as 00 (the spec's rule), its extra fields ignored.
func Parse(traceparent, tracestate string) (trace.SpanContext, error) {
	if traceparent == "" {
		if tracestate != "" {
			return trace.SpanContext{}, ErrStateWithoutParent
		}
		return trace.SpanContext{}, nil
	}
	tid, sid, flags, ok := parseParent(traceparent)
	if !ok {
		return trace.SpanContext{}, ErrTraceParent
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true}
	if tracestate != "" {
		if len(tracestate) > MaxTraceStateBytes {
			return trace.SpanContext{}, ErrTraceState
		}
		ts, err := trace.ParseTraceState(tracestate)
		if err != nil {
			return trace.SpanContext{}, ErrTraceState
		}
		cfg.TraceState = ts
	}
	return trace.NewSpanContext(cfg), nil
}

// Valid reports whether traceparent is W3C syntax (Parse's rule), without
// building a span context.
func Valid(traceparent string) bool {
	_, _, _, ok := parseParent(traceparent)
	return ok
}

func parseParent(s string) (tid trace.TraceID, sid trace.SpanID, flags trace.TraceFlags, ok bool) {
	const n = 55 // "00-" + 32 + "-" + 16 + "-" + 2
	if len(s) < n || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return tid, sid, flags, false
	}
	var ver [1]byte
	if !hexInto(ver[:], s[0:2]) || ver[0] == 0xff || (ver[0] == 0 && len(s) != n) || (len(s) > n && s[n] != '-') {
		return tid, sid, flags, false
	}
	var f [1]byte
	if !hexInto(tid[:], s[3:35]) || !hexInto(sid[:], s[36:52]) || !hexInto(f[:], s[53:55]) || !tid.IsValid() || !sid.IsValid() {
		return tid, sid, flags, false
	}
	return tid, sid, trace.TraceFlags(f[0]) & trace.FlagsSampled, true
}

// hexInto decodes lower-case hex src into dst (len(src) == 2*len(dst)).
func hexInto(dst []byte, src string) bool {
	for i := range dst {
		hi, ok1 := nibble(src[2*i])
		lo, ok2 := nibble(src[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Format writes a span context as traceparent and tracestate; an invalid
// context is two empty strings.
func Format(sc trace.SpanContext) (traceparent, tracestate string) {
	if !sc.IsValid() {
		return "", ""
	}
	var b strings.Builder
	b.Grow(55)
	b.WriteString("00-")
	b.WriteString(sc.TraceID().String())
	b.WriteByte('-')
	b.WriteString(sc.SpanID().String())
	if sc.IsSampled() {
		b.WriteString("-01")
	} else {
		b.WriteString("-00")
	}
	return b.String(), sc.TraceState().String()
}
