package fencehttp

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/webhook"
)

// TestVerifierRefusesBadSignatures: with a Verifier, a request without a
// valid Standard Webhooks signature is 401 before anything else; a signed
// one goes on with its body intact (here to the token check: no token is
// 428, as without a Verifier).
func TestVerifierRefusesBadSignatures(t *testing.T) {
	key := webhook.NewSecret()
	ran := false
	h := Middleware(nil, Options{Resource: func(*http.Request) string { return "r" }, Logger: slog.New(slog.DiscardHandler),
		Verifier: &webhook.Verifier{Secrets: []webhook.Secret{key}}})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	send := func(sign webhook.Secret, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/jobs", strings.NewReader(body))
		webhook.SetHeaders(r.Header, "job_1", time.Now(), []byte(body), sign)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	if rec := send(webhook.NewSecret(), `{"n":1}`); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "BAD_SIGNATURE") {
		t.Fatalf("another key: %d %s", rec.Code, rec.Body)
	}
	if rec := send(key, `{"n":1}`); rec.Code != http.StatusPreconditionRequired {
		t.Fatalf("signed, no token: %d %s", rec.Code, rec.Body)
	}
	if ran {
		t.Fatal("the handler ran")
	}
	// Optional: a signed request without a token reaches the handler with
	// its body.
	var got string
	opt := Middleware(nil, Options{Resource: func(*http.Request) string { return "r" }, Optional: true, Logger: slog.New(slog.DiscardHandler),
		Verifier: &webhook.Verifier{Secrets: []webhook.Secret{key}}})(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
	}))
	r := httptest.NewRequest(http.MethodPost, "/jobs", strings.NewReader(`{"n":2}`))
	webhook.SetHeaders(r.Header, "job_2", time.Now(), []byte(`{"n":2}`), key)
	opt.ServeHTTP(httptest.NewRecorder(), r)
	if got != `{"n":2}` {
		t.Fatalf("the handler read %q", got)
	}
}
