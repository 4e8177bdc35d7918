// Package coorderr builds and reads coordd's errors and fencing tokens. It
// is the one place both the server and the client SDK go through, so the
// wire contract has one source:
//
//   - A refusal is a gRPC status with a google.rpc.ErrorInfo whose domain is
//     Domain and whose reason is a coord.v1.ErrorReason (proto/coord/v1/
//     errors.proto documents each: meaning, code, metadata keys). On the
//     wire the reason is the enum value's name without the ERROR_REASON_
//     prefix ("LEASE_LOST"); Name and ParseReason convert.
//   - A fencing token's string form is "lease_name:generation" (the
//     generation follows the last colon, so lease names may contain
//     colons); FormatToken and ParseToken convert.
//   - A failed job attempt's error text is kept up to a byte limit, cut
//     without splitting a UTF-8 character; Truncate cuts it so.
//
// It imports only the generated coord.v1 package, grpc's status and codes
// and genproto's errdetails.
package coorderr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Domain is the domain of every google.rpc.ErrorInfo coordd sends.
const Domain = "coordd.io"

// Reason is a coord.v1.ErrorReason.
type Reason = coordv1.ErrorReason

// prefix is what the enum's value names carry and the wire names do not.
const prefix = "ERROR_REASON_"

// Name is the wire name of a reason: "LEASE_LOST" for
// ERROR_REASON_LEASE_LOST, "" for ERROR_REASON_UNSPECIFIED. A number this
// version does not know is rendered as its decimal.
func Name(r Reason) string {
	if r == Unspecified {
		return ""
	}
	return strings.TrimPrefix(r.String(), prefix)
}

// ParseReason reads a wire name ("LEASE_LOST"). An empty or unknown name
// is Unspecified and false.
func ParseReason(name string) (Reason, bool) {
	if name == "" {
		return Unspecified, false
	}
	v, ok := coordv1.ErrorReason_value[prefix+name]
	if !ok || v == int32(Unspecified) {
		return Unspecified, false
	}
	return Reason(v), true
}

// Status builds a status of code with an ErrorInfo of reason and meta
// (which may be nil).
func Status(code codes.Code, reason Reason, msg string, meta map[string]string) *status.Status {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: Name(reason), Domain: Domain, Metadata: meta}); err == nil {
		st = d
	}
	return st
}

// New is Status as an error.
func New(code codes.Code, reason Reason, msg string, meta map[string]string) error {
	return Status(code, reason, msg, meta).Err()
}

// Info returns the status of err and its ErrorInfo: nil, nil when err is
// not a status error; st, nil when it carries no ErrorInfo.
func Info(err error) (*status.Status, *errdetails.ErrorInfo) {
	st, ok := status.FromError(err)
	if !ok || st == nil {
		return nil, nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st, info
		}
	}
	return st, nil
}

// ReasonOf returns the reason of a status error's ErrorInfo; Unspecified
// when err has none or one this version does not know (WireReason gives
// the string).
func ReasonOf(err error) Reason {
	r, _ := ParseReason(WireReason(err))
	return r
}

// WireReason returns the reason string of a status error's ErrorInfo as
// sent ("LEASE_LOST"), or "".
func WireReason(err error) string {
	_, info := Info(err)
	return info.GetReason()
}

// Metadata returns the metadata of a status error's ErrorInfo, or nil.
func Metadata(err error) map[string]string {
	_, info := Info(err)
	return info.GetMetadata()
}

// Truncate cuts s to at most n bytes without splitting a UTF-8 character:
// at the start of the character that byte n is in. The server keeps a
// failed attempt's error text so cut (fsm.MaxJobErrorBytes), and the
// client SDK cuts what it sends alike.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ErrInvalidToken is wrapped by every error of ParseToken (the client SDK
// exports it as client.ErrInvalidToken).
var ErrInvalidToken = errors.New("coordd: invalid token")

// TokenError is a malformed token: Problem says what is wrong with it.
type TokenError struct {
	Token   string
	Problem string
}

func (e *TokenError) Error() string { return ErrInvalidToken.Error() + ": " + e.Problem }

// Unwrap returns ErrInvalidToken.
func (e *TokenError) Unwrap() error { return ErrInvalidToken }

// FormatToken renders a fencing token as "lease_name:generation".
func FormatToken(leaseName string, generation uint64) string {
	return leaseName + ":" + strconv.FormatUint(generation, 10)
}

// ParseToken reads a token made by FormatToken. The generation follows the
// last colon (lease names may contain colons); the name must not be empty
// and the generation must be a decimal of at least 1. Errors are
// *TokenError (wrapping ErrInvalidToken) and quote the token.
func ParseToken(token string) (leaseName string, generation uint64, err error) {
	bad := func(format string, args ...any) (string, uint64, error) {
		return "", 0, &TokenError{Token: token, Problem: fmt.Sprintf(format, args...)}
	}
	i := strings.LastIndexByte(token, ':')
	switch {
	case token == "":
		return bad("empty; want lease_name:generation")
	case i < 0:
		return bad("%q has no colon; want lease_name:generation", token)
	case i == 0:
		return bad("%q has no lease name before the colon", token)
	}
	generation, err = strconv.ParseUint(token[i+1:], 10, 64)
	if err != nil || generation == 0 {
		return bad("%q: the generation after the last colon must be a decimal of at least 1", token)
	}
	return token[:i], generation, nil
}
