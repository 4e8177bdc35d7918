// Package fencehttp is net/http middleware for APIs that receive a fencing
// token from the jobs that call them. It reads the Fencing-Token
// ("lease:generation") and Idempotency-Key headers, refuses a stale token
// with 409 before the handler runs, and answers a repeated key with the
// first response (status, headers, body) instead of running the handler
// again. The response is stored in coordd as the payload of the key's
// fenced commit, so every replica of the API replays the same answer.
//
// The order of one request:
//
//  1. CheckToken (a dry-run FencedCommit, no write): a key seen before replays its stored response;
//     a token that is not current, or below the highest the resource has
//     accepted, gets 409.
//  2. Requests with the same key on this replica run one at a time.
//  3. The handler runs, its response buffered.
//  4. FencedCommit records the key, raises the resource's highest token and
//     stores the response; then the response is sent. A 5xx is sent
//     without recording, so the caller may retry the key.
//
// A token can go stale between 1 and 4 (the job's lease expired while the
// handler ran). The handler's effect then happened, the response is 409,
// and OnLateRefusal is called: handlers whose effect must never follow a
// newer holder's write should also fence their own store with the token
// (TokenFrom).
//
// An endpoint that coordd's nodes deliver jobs to (docs/delivery.md) gets
// the attempt's token in Coordd-Fencing-Token (read when Fencing-Token is
// absent) and the job's key in Idempotency-Key; with Options.Verifier the
// middleware first checks the request's Standard Webhooks signature.
package fencehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/webhook"
)

// Header names.
const (
	TokenHeader = "Fencing-Token"
	// DeliveryTokenHeader carries the token of a job attempt that
	// coordd's nodes deliver to an HTTP target (docs/delivery.md); it is
	// read when TokenHeader is absent.
	DeliveryTokenHeader  = "Coordd-Fencing-Token"
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is set to "true" on a response replayed from a key.
	ReplayedHeader = "Idempotent-Replayed"
)

// MaxStoredBody is the largest response body stored for replay (coordd
// stores at most 64 KiB per key, with the status and headers). A larger
// body is sent once and replayed as its status and headers only, with
// Idempotent-Body-Omitted: true.
const MaxStoredBody = 48 << 10

// Options configure the middleware.
type Options struct {
	// Resource names the fenced resource a request writes (for example
	// from its path). Required.
	Resource func(*http.Request) string
	// Optional lets requests without a token through unfenced (default:
	// refused with 428 Precondition Required).
	Optional bool
	// Logger receives refusals and late refusals (default: slog.Default()).
	Logger *slog.Logger
	// OnLateRefusal is called when the handler ran but its token was
	// refused at commit (see the package documentation).
	OnLateRefusal func(r *http.Request, err error)
	// Verifier, when set, checks every request's Standard Webhooks
	// signature (coordd's deliveries with a target secret) before
	// anything else: a bad or missing one is 401. The body (up to
	// MaxSignedBody) is read for it and handed on unchanged.
	Verifier *webhook.Verifier
}

// MaxSignedBody bounds the body read to verify a signature (a delivery's
// args are at most 64 KiB).
const MaxSignedBody = 1 << 20

type tokenKey struct{}

// Token is the validated token of a request.
type Token struct {
	Raw            string // "lease:generation"
	Lease          string
	Generation     uint64
	Resource       string
	IdempotencyKey string
}

// TokenFrom returns the request's validated token.
func TokenFrom(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok
}

// Middleware returns the middleware; c is a client of the coordd cluster.
func Middleware(c *client.Client, o Options) func(http.Handler) http.Handler {
	if o.Resource == nil {
		panic("fencehttp: Options.Resource is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m := &middleware{c: c, o: o, inflight: map[string]*keyLock{}}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}
}

type middleware struct {
	c        *client.Client
	o        Options
	mu       sync.Mutex
	inflight map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lock serializes requests with the same resource and key on this replica.
func (m *middleware) lock(k string) func() {
	m.mu.Lock()
	l := m.inflight[k]
	if l == nil {
		l = &keyLock{}
		m.inflight[k] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.inflight, k)
		}
		m.mu.Unlock()
	}
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if v := m.o.Verifier; v != nil {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxSignedBody+1))
		if err == nil && len(body) > MaxSignedBody {
			err = errors.New("the body is over the limit")
		}
		if err == nil {
			err = v.Verify(r.Header, body)
		}
		if err != nil {
			m.o.Logger.Warn("fencehttp: refused a request without a valid signature", "path", r.URL.Path, "err", err)
			writeError(w, http.StatusUnauthorized, "BAD_SIGNATURE", err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	raw := r.Header.Get(TokenHeader)
	if raw == "" {
		raw = r.Header.Get(DeliveryTokenHeader)
	}
	if raw == "" {
		if m.o.Optional {
			next.ServeHTTP(w, r)
			return
		}
		writeError(w, http.StatusPreconditionRequired, "MISSING_TOKEN", "a "+TokenHeader+" header (lease:generation) is required")
		return
	}
	lease, gen, err := client.ParseToken(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_TOKEN", err.Error())
		return
	}
	resource := m.o.Resource(r)
	if resource == "" {
		writeError(w, http.StatusBadRequest, "NO_RESOURCE", "the request names no fenced resource")
		return
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	tok := Token{Raw: raw, Lease: lease, Generation: gen, Resource: resource, IdempotencyKey: key}
	ctx := r.Context()

	if key != "" {
		defer m.lock(resource + "\x00" + key)()
	}
	check, err := m.c.CheckToken(ctx, resource, raw, key)
	if err != nil {
		m.refuse(w, r, tok, err)
		return
	}
	if check.Duplicate {
		replay(w, check.Payload)
		return
	}

	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, tokenKey{}, tok)))
	if rec.status >= 500 {
		rec.send(w) // not recorded: the caller may retry the key
		return
	}
	commit, err := m.c.FencedCommit(ctx, resource, raw, key, rec.stored())
	if err != nil {
		m.o.Logger.Error("fencehttp: the handler ran but its token was refused at commit",
			"resource", resource, "token", raw, "idempotency_key", key, "err", err)
		if m.o.OnLateRefusal != nil {
			m.o.OnLateRefusal(r, err)
		}
		m.refuse(w, r, tok, err)
		return
	}
	if commit.Duplicate { // another replica committed the key first: its answer wins
		replay(w, commit.Payload)
		return
	}
	rec.send(w)
}

func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, tok Token, err error) {
	var e *client.Error
	reason := ""
	if errors.As(err, &e) {
		reason = e.Reason
	}
	status := http.StatusBadGateway
	switch {
	case errors.Is(err, client.ErrStaleToken), errors.Is(err, client.ErrLeaseLost),
		errors.Is(err, client.ErrLeaseNotFound), errors.Is(err, client.ErrResourceLeaseMismatch):
		status = http.StatusConflict
	case errors.Is(err, client.ErrInvalidArgument), errors.Is(err, client.ErrInvalidToken):
		status = http.StatusBadRequest
	case errors.Is(err, client.ErrPermissionDenied), errors.Is(err, client.ErrUnauthenticated):
		status = http.StatusBadGateway // the API's own credentials are at fault, not the caller
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrUnknownOutcome):
		status = http.StatusServiceUnavailable
	}
	m.o.Logger.Warn("fencehttp: request refused", "method", r.Method, "path", r.URL.Path, "resource", tok.Resource,
		"token", tok.Raw, "idempotency_key", tok.IdempotencyKey, "status", status, "reason", reason, "err", err)
	if reason == "" {
		reason = "COORDD_ERROR"
	}
	writeError(w, status, reason, err.Error())
}

func writeError(w http.ResponseWriter, status int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"reason": reason, "message": msg})
}

// recorder buffers a handler's response.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(p)
}
func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) send(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body.Bytes())
}

// stored is the response as kept in coordd.
type stored struct {
	Status      int         `json:"status"`
	Header      http.Header `json:"header,omitempty"`
	Body        []byte      `json:"body,omitempty"`
	BodyOmitted bool        `json:"body_omitted,omitempty"`
}

func (r *recorder) stored() []byte {
	s := stored{Status: r.status, Header: r.header, Body: r.body.Bytes()}
	if len(s.Body) > MaxStoredBody {
		s.Body, s.BodyOmitted = nil, true
	}
	b, _ := json.Marshal(s) // cannot fail: plain types
	return b
}

func replay(w http.ResponseWriter, payload []byte) {
	var s stored
	if err := json.Unmarshal(payload, &s); err != nil || s.Status == 0 {
		writeError(w, http.StatusConflict, "KEY_USED", "the idempotency key was used by a commit that stored no replayable response")
		return
	}
	for k, v := range s.Header {
		w.Header()[k] = v
	}
	w.Header().Set(ReplayedHeader, "true")
	if s.BodyOmitted {
		w.Header().Set("Idempotent-Body-Omitted", "true")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(s.Body)))
	w.WriteHeader(s.Status)
	_, _ = w.Write(s.Body)
}
