package tracectx

import (
	"errors"
	"testing"
)

const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParseFormatRoundTrip(t *testing.T) {
	sc, err := Parse(valid, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("parsed %+v", sc)
	}
	tp, ts := Format(sc)
	if tp != valid || ts != "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE" {
		t.Fatalf("formatted %q %q", tp, ts)
	}
	unsampled, err := Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "")
	if err != nil || unsampled.IsSampled() {
		t.Fatalf("unsampled: %v %v", unsampled, err)
	}
	if tp, _ := Format(unsampled); tp[53:] != "00" {
		t.Fatalf("unsampled formatted as %q", tp)
	}
	// A later version is read as 00, its extra fields ignored (W3C).
	if sc, err := Parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds", ""); err != nil || !sc.IsValid() {
		t.Fatalf("future version: %v", err)
	}
	if sc, err := Parse("", ""); err != nil || sc.IsValid() {
		t.Fatalf("empty: %v %v", sc, err)
	}
	if tp, ts := Format(unsampled.WithTraceID([16]byte{})); tp != "" || ts != "" {
		t.Fatalf("invalid context formatted as %q %q", tp, ts)
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	for _, tc := range []struct{ tp, ts string }{
		{"garbage", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", ""},      // no flags
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", ""},   // upper case
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},   // zero trace id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},   // zero span id
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},   // version ff
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", ""}, // 00 with more
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", ""},  // more without '-'
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},   // separator
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", ""},   // not hex
	} {
		if _, err := Parse(tc.tp, tc.ts); !errors.Is(err, ErrTraceParent) {
			t.Errorf("Parse(%q): %v, want ErrTraceParent", tc.tp, err)
		}
		if Valid(tc.tp) {
			t.Errorf("Valid(%q)", tc.tp)
		}
	}
	if _, err := Parse(valid, "not a tracestate"); !errors.Is(err, ErrTraceState) {
		t.Errorf("bad tracestate: %v", err)
	}
	long := make([]byte, MaxTraceStateBytes+1)
	for i := range long {
		long[i] = 'a'
	}
	if _, err := Parse(valid, "k="+string(long)); !errors.Is(err, ErrTraceState) {
		t.Errorf("long tracestate: %v", err)
	}
	if _, err := Parse("", "k=v"); !errors.Is(err, ErrStateWithoutParent) {
		t.Errorf("tracestate alone: %v", err)
	}
}

func TestParseAllocatesNothingWithoutState(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = Parse(valid, "") }); n != 0 {
		t.Fatalf("Parse allocates %v times", n)
	}
}
