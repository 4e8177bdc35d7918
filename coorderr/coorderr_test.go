package coorderr_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Every enum value survives New → ReasonOf with its short wire name, code,
// message, domain and metadata.
func TestRoundTripEveryReason(t *testing.T) {
	seen := map[string]bool{}
	for num, full := range coordv1.ErrorReason_name {
		r := coorderr.Reason(num)
		if r == coorderr.Unspecified {
			continue
		}
		name := coorderr.Name(r)
		if name == "" || strings.HasPrefix(name, "ERROR_REASON_") || "ERROR_REASON_"+name != full {
			t.Fatalf("Name(%s) = %q", full, name)
		}
		if seen[name] {
			t.Fatalf("wire name %q twice", name)
		}
		seen[name] = true
		if got, ok := coorderr.ParseReason(name); !ok || got != r {
			t.Fatalf("ParseReason(%q) = %v, %v; want %v", name, got, ok, r)
		}
		meta := map[string]string{"k": "v"}
		err := coorderr.New(codes.FailedPrecondition, r, "msg "+name, meta)
		if got := coorderr.ReasonOf(err); got != r {
			t.Fatalf("ReasonOf = %v, want %v", got, r)
		}
		if got := coorderr.WireReason(err); got != name {
			t.Fatalf("WireReason = %q, want %q", got, name)
		}
		if got := coorderr.Metadata(err)["k"]; got != "v" {
			t.Fatalf("Metadata[k] = %q", got)
		}
		if st, _ := coorderr.Info(err); st.Message() != "msg "+name {
			t.Fatalf("message %q", st.Message())
		}
		st, info := coorderr.Info(fmt.Errorf("wrapped: %w", err))
		if st == nil || info == nil || st.Code() != codes.FailedPrecondition ||
			info.GetDomain() != coorderr.Domain || info.GetReason() != name {
			t.Fatalf("Info of wrapped %s: %v %v", name, st, info)
		}
	}
	if len(seen) < 23 {
		t.Fatalf("only %d reasons", len(seen))
	}
}

func TestReasonWireNamesAreStable(t *testing.T) {
	// The wire names are a published contract: a few are pinned here.
	for r, want := range map[coorderr.Reason]string{
		coorderr.LeaseLost: "LEASE_LOST", coorderr.StaleToken: "STALE_TOKEN",
		coorderr.NotLeader: "NOT_LEADER", coorderr.InvalidArgument: "INVALID_ARGUMENT",
		coorderr.WaitLimit: "WAIT_LIMIT", coorderr.Unspecified: "",
	} {
		if got := coorderr.Name(r); got != want {
			t.Errorf("Name(%v) = %q, want %q", r, got, want)
		}
	}
}

func TestReadingErrorsWithoutInfo(t *testing.T) {
	for _, err := range []error{nil, errors.New("plain"), status.Error(codes.Internal, "no details")} {
		if r := coorderr.ReasonOf(err); r != coorderr.Unspecified {
			t.Errorf("ReasonOf(%v) = %v", err, r)
		}
		if m := coorderr.Metadata(err); m != nil {
			t.Errorf("Metadata(%v) = %v", err, m)
		}
	}
	if st, info := coorderr.Info(errors.New("plain")); st != nil || info != nil {
		t.Errorf("Info(plain) = %v, %v", st, info)
	}
	if _, ok := coorderr.ParseReason("NO_SUCH_REASON"); ok {
		t.Error("unknown reason parsed")
	}
	if _, ok := coorderr.ParseReason("UNSPECIFIED"); ok {
		t.Error("UNSPECIFIED parsed as a reason")
	}
	// A reason from a newer server: not known here, but the string is kept.
	newer := coorderr.Status(codes.Aborted, coorderr.Reason(999), "x", nil).Err()
	if coorderr.ReasonOf(newer) != coorderr.Unspecified || coorderr.WireReason(newer) != "999" {
		t.Errorf("unknown number: %v %q", coorderr.ReasonOf(newer), coorderr.WireReason(newer))
	}
}

func TestTokenRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		gen  uint64
	}{{"a", 1}, {"billing/close", 42}, {"a:b", 7}, {"x::", 18446744073709551615}} {
		tok := coorderr.FormatToken(c.name, c.gen)
		name, gen, err := coorderr.ParseToken(tok)
		if err != nil || name != c.name || gen != c.gen {
			t.Fatalf("ParseToken(%q) = %q, %d, %v", tok, name, gen, err)
		}
	}
	if tok := coorderr.FormatToken("a:b", 42); tok != "a:b:42" {
		t.Fatalf("FormatToken = %q", tok)
	}
}

func TestTokenParseErrors(t *testing.T) {
	for tok, want := range map[string]string{
		"":                       "empty",
		"nocolon":                "no colon",
		":5":                     "no lease name",
		"a:":                     "generation",
		"a:0":                    "generation",
		"a:-1":                   "generation",
		"a:x1":                   "generation",
		"a:1.5":                  "generation",
		"a:18446744073709551616": "generation", // overflows uint64
	} {
		_, _, err := coorderr.ParseToken(tok)
		if !errors.Is(err, coorderr.ErrInvalidToken) {
			t.Fatalf("ParseToken(%q) = %v, want ErrInvalidToken", tok, err)
		}
		var te *coorderr.TokenError
		if !errors.As(err, &te) || te.Token != tok || !strings.Contains(te.Problem, want) {
			t.Fatalf("ParseToken(%q) = %v, want a TokenError about %q", tok, err, want)
		}
		if tok != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", tok)) {
			t.Fatalf("error %q does not quote the token", err)
		}
	}
}

// Truncate cuts at the start of the character byte n is in (the FSM's
// failed-attempt errors depend on it: it must not change).
func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 4, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"ab€", 3, "ab"},         // € is 3 bytes: not split
		{"ab€", 4, "ab"},         // still inside €
		{"ab€x", 5, "ab€"},       // cut after €
		{"é", 0, ""},             // nothing fits
		{"a\x80\x80\x80", 2, ""}, // stray continuation bytes go back to the start
	} {
		if got := coorderr.Truncate(c.s, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
