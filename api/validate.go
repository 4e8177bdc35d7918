package api

import (
	"errors"
	"time"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// checkName validates names, owners, jobs, windows, resources and keys:
// 1..256 bytes of UTF-8 without control characters.
func checkName(field, v string, required bool) error {
	if v == "" {
		if required {
			return invalidArg(field, "must not be empty")
		}
		return nil
	}
	if len(v) > MaxNameBytes {
		return invalidArg(field, "is %d bytes; the limit is %d", len(v), MaxNameBytes)
	}
	if problem := fsm.TextProblem(v); problem != "" {
		return invalidArg(field, "%s", problem)
	}
	return nil
}

// checkTTL checks a lease TTL against the range the node accepts.
func (s *Server) checkTTL(field string, ms int64, zeroOK bool) error {
	if ms == 0 && zeroOK {
		return nil
	}
	lo, hi := s.node.TTLRange()
	ttl := time.Duration(ms) * time.Millisecond
	if ms <= 0 || ttl < lo || ttl > hi {
		return invalidArg(field, "%s is outside [%s, %s]", ttl, lo, hi)
	}
	return nil
}

func checkPayload(field string, b []byte) error {
	if len(b) > MaxPayloadBytes {
		return invalidArg(field, "is %d bytes; the limit is %d", len(b), MaxPayloadBytes)
	}
	return nil
}

// MaxLeaseValueBytes bounds a lease's value: leases are never pruned.
const MaxLeaseValueBytes = 4 << 10

func checkLeaseValue(v []byte) error {
	if len(v) > MaxLeaseValueBytes {
		return invalidArg("value", "is %d bytes; the limit is %d", len(v), MaxLeaseValueBytes)
	}
	return nil
}

func checkGeneration(g uint64) error {
	if g == 0 {
		return invalidArg("generation", "must be at least 1")
	}
	return nil
}

func pageSize(n int32) (int, error) {
	switch {
	case n < 0 || n > MaxPageSize:
		return 0, invalidArg("page_size", "%d is outside [0, %d]", n, MaxPageSize)
	case n == 0:
		return DefaultPageSize, nil
	default:
		return int(n), nil
	}
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// fenceToken reads the token of a FencedCommit: (lease_name, generation)
// or its string form in token, not both. Without either, lease_name is the
// missing field.
func fenceToken(req *coordv1.FencedCommitRequest) (string, uint64, error) {
	tok := req.GetToken()
	if tok == "" {
		if req.GetLeaseName() == "" {
			return "", 0, invalidArg("lease_name", "must not be empty (or set token to lease_name:generation)")
		}
		return req.GetLeaseName(), req.GetGeneration(), nil
	}
	if req.GetLeaseName() != "" || req.GetGeneration() != 0 {
		return "", 0, invalidArg("token", "set either token or lease_name and generation, not both")
	}
	name, gen, err := coorderr.ParseToken(tok)
	if te := (*coorderr.TokenError)(nil); errors.As(err, &te) {
		return "", 0, invalidArg("token", "%s", te.Problem)
	}
	return name, gen, err
}
