// Package webhook signs and verifies HTTP requests by the Standard
// Webhooks 1.0 scheme (https://www.standardwebhooks.com, symmetric
// signatures): three headers, webhook-id, webhook-timestamp (Unix
// seconds) and webhook-signature, a space-separated list of "v1,"
// followed by the base64 HMAC-SHA256 of "<id>.<timestamp>.<body>" under a
// secret. Secrets are written "whsec_" + base64 of 24 to 64 random bytes.
// During a key rotation a request carries one signature per secret, and a
// verifier accepts any one it knows.
//
// coordd's delivery (package delivery) signs every request to an HTTP
// target with the secrets configured under the target's secret name; an
// endpoint verifies with this package (Go: Verifier, or
// client/fencehttp's middleware) or with the Standard Webhooks library of
// its language. The package imports only the standard library and
// coordd's clock, so the SDK can use it.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/clock"
)

// The headers of the scheme.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts a serialised secret.
const SecretPrefix = "whsec_"

// Secret lengths the scheme allows (bytes of key, before base64).
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// DefaultTolerance is how far a request's timestamp may be from the
// verifier's clock, either way (the reference libraries' 5 minutes).
const DefaultTolerance = 5 * time.Minute

// Errors of Verify, for errors.Is.
var (
	ErrMissingHeaders   = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrBadTimestamp     = errors.New("webhook: webhook-timestamp is not Unix seconds")
	ErrTimestampSkew    = errors.New("webhook: webhook-timestamp is outside the tolerance")
	ErrNoValidSignature = errors.New("webhook: no signature matches")
)

// Secret is a signing key.
type Secret struct{ key []byte }

// ParseSecret reads a serialised secret: "whsec_" and the standard
// base64 of 24 to 64 bytes (padding optional, as the reference libraries
// accept it). Without the prefix the text is read as the base64 alone.
func ParseSecret(s string) (Secret, error) {
	b64 := strings.TrimRight(strings.TrimPrefix(strings.TrimSpace(s), SecretPrefix), "=")
	key, err := base64.RawStdEncoding.DecodeString(b64)
	if err != nil {
		return Secret{}, fmt.Errorf("webhook secret: not %s followed by base64: %w", SecretPrefix, err)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return Secret{}, fmt.Errorf("webhook secret: %d bytes; the scheme wants %d to %d", len(key), MinSecretBytes, MaxSecretBytes)
	}
	return Secret{key: key}, nil
}

// NewSecret draws a random 32-byte secret.
func NewSecret() Secret {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return Secret{key: key}
}

// String is the serialised form, "whsec_" + base64.
func (s Secret) String() string { return SecretPrefix + base64.StdEncoding.EncodeToString(s.key) }

// signature is the base64 HMAC-SHA256 of "<id>.<ts>.<body>" under s.
func (s Secret) signature(id string, ts int64, body []byte) string {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, ts, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// Sign is the webhook-signature value for a message: "v1,<sig>" for each
// secret, space-separated (the current secret first, then the old one
// during a rotation).
func Sign(id string, ts time.Time, body []byte, secrets ...Secret) string {
	parts := make([]string, len(secrets))
	for i, s := range secrets {
		parts[i] = "v1," + s.signature(id, ts.Unix(), body)
	}
	return strings.Join(parts, " ")
}

// SetHeaders sets the three headers of a signed message on h. The id must
// not contain a '.' (the scheme's separator); coordd's are "job_<id>".
func SetHeaders(h http.Header, id string, ts time.Time, body []byte, secrets ...Secret) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(id, ts, body, secrets...))
}

// Verifier checks signed requests.
type Verifier struct {
	// Secrets are the keys accepted (several during a rotation).
	Secrets []Secret
	// Tolerance bounds the timestamp's distance from Clock's time;
	// 0 means DefaultTolerance, negative skips the check.
	Tolerance time.Duration
	// Clock reads the time the timestamp is judged at (nil: the real
	// clock).
	Clock clock.Clock
}

// Verify checks the headers against body: present, a timestamp within
// the tolerance, and a v1 signature made with one of the secrets
// (compared in constant time). Signatures of other versions are skipped.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	id, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	if tol := v.tolerance(); tol > 0 {
		c := v.Clock
		if c == nil {
			c = clock.Real{}
		}
		now := clock.Wall(c)
		if d := now.Sub(time.Unix(ts, 0)); d > tol || d < -tol {
			return fmt.Errorf("%w: %s from now (tolerance %s)", ErrTimestampSkew, d.Round(time.Second), tol)
		}
	}
	for _, s := range v.Secrets {
		want := []byte(s.signature(id, ts, body))
		for _, vs := range strings.Fields(sigs) {
			version, sig, ok := strings.Cut(vs, ",")
			if ok && version == "v1" && hmac.Equal([]byte(sig), want) {
				return nil
			}
		}
	}
	return ErrNoValidSignature
}

func (v *Verifier) tolerance() time.Duration {
	if v.Tolerance == 0 {
		return DefaultTolerance
	}
	return v.Tolerance
}
