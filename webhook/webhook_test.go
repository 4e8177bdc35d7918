package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
)

// The Standard Webhooks repository's published vector (every reference
// library's sign test: libraries/*/tests, e.g. go/webhook_test.go
// TestWebhookSign).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func mustSecret(t *testing.T, s string) Secret {
	t.Helper()
	sec, err := ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

func TestSignMatchesTheSpecVector(t *testing.T) {
	got := Sign(vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload), mustSecret(t, vectorSecret))
	if got != vectorSignature {
		t.Fatalf("Sign = %q, want the spec's %q", got, vectorSignature)
	}
	// The same secret without its prefix, and padded (the reference
	// libraries' secret-format tests).
	for _, s := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		if got := Sign(vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload), mustSecret(t, s)); got != vectorSignature {
			t.Errorf("secret %q: %q", s, got)
		}
	}
	if s := mustSecret(t, vectorSecret).String(); s != vectorSecret {
		t.Errorf("String = %q, want %q", s, vectorSecret)
	}
}

func TestParseSecretRefusesBadSecrets(t *testing.T) {
	for _, s := range []string{"", "whsec_", "whsec_not base64!", "whsec_" + strings.Repeat("A", 8), "whsec_" + strings.Repeat("A", 90)} {
		if _, err := ParseSecret(s); err == nil {
			t.Errorf("ParseSecret(%q) accepted", s)
		}
	}
	// Padding may be left out or written (25 bytes need two '=').
	for _, s := range []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwBr", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwBr=="} {
		if _, err := ParseSecret(s); err != nil {
			t.Errorf("ParseSecret(%q): %v", s, err)
		}
	}
}

func signed(t *testing.T, at time.Time, secrets ...Secret) http.Header {
	h := http.Header{}
	SetHeaders(h, vectorID, at, []byte(vectorPayload), secrets...)
	return h
}

// hdr builds the three headers as given (an empty one is left out).
func hdr(id, ts, sig string) http.Header {
	h := http.Header{}
	for k, v := range map[string]string{HeaderID: id, HeaderTimestamp: ts, HeaderSignature: sig} {
		if v != "" {
			h.Set(k, v)
		}
	}
	return h
}

func TestVerify(t *testing.T) {
	now := time.Unix(vectorTimestamp, 0)
	c := clock.NewFake(now)
	cur, old, other := mustSecret(t, vectorSecret), NewSecret(), NewSecret()
	v := &Verifier{Secrets: []Secret{cur}, Clock: c}
	for _, tc := range []struct {
		name   string
		h      http.Header
		body   string
		secret []Secret
		want   error
	}{
		{"valid", signed(t, now, cur), vectorPayload, nil, nil},
		{"the spec vector's header", hdr(vectorID, "1614265330", vectorSignature), vectorPayload, nil, nil},
		{"rotation: the old and the new signature", signed(t, now, old, cur), vectorPayload, nil, nil},
		{"rotation: a verifier that knows both", signed(t, now, old), vectorPayload, []Secret{cur, old}, nil},
		{"other versions and broken entries are skipped",
			hdr(vectorID, "1614265330", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,"+vectorSignature[3:]+" v1, junk "+vectorSignature), vectorPayload, nil, nil},
		{"another secret", signed(t, now, other), vectorPayload, nil, ErrNoValidSignature},
		{"a changed body", signed(t, now, cur), vectorPayload + " ", nil, ErrNoValidSignature},
		{"a partial signature", hdr(vectorID, "1614265330", "v1,"), vectorPayload, nil, ErrNoValidSignature},
		{"only v2", hdr(vectorID, "1614265330", "v2,"+vectorSignature[3:]), vectorPayload, nil, ErrNoValidSignature},
		{"no id", hdr("", "1614265330", vectorSignature), vectorPayload, nil, ErrMissingHeaders},
		{"bad timestamp", hdr(vectorID, "soon", vectorSignature), vectorPayload, nil, ErrBadTimestamp},
		{"too old", signed(t, now.Add(-DefaultTolerance-time.Second), cur), vectorPayload, nil, ErrTimestampSkew},
		{"too new", signed(t, now.Add(DefaultTolerance+time.Second), cur), vectorPayload, nil, ErrTimestampSkew},
	} {
		vv := *v
		if tc.secret != nil {
			vv.Secrets = tc.secret
		}
		if err := vv.Verify(tc.h, []byte(tc.body)); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A negative tolerance skips the time check.
	nv := &Verifier{Secrets: []Secret{cur}, Tolerance: -1, Clock: c}
	if err := nv.Verify(signed(t, now.Add(-time.Hour), cur), []byte(vectorPayload)); err != nil {
		t.Errorf("tolerance off: %v", err)
	}
}
