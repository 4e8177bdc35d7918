package client

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
)

// notSent reports whether a transport error happened before any request
// could be sent: the connection was never made (refused, no route, no such
// host). Any call may then go to another node, whatever its idempotency.
func notSent(st *status.Status) bool {
	return st.Code() == codes.Unavailable && strings.Contains(st.Message(), "Error while dialing")
}

// attemptProbe is what one attempt's unary call learned about its
// connection (observeLeader fills it in): observed once the call returned
// through the SDK's interceptor, reached when it had a stream on a
// connection to the node (its request may have been sent).
type attemptProbe struct{ observed, reached bool }

type attemptProbeKey struct{}

// neverReached reports whether an attempt ended by its deadline while it
// still waited for a connection (the node down, or being dialled again
// after a refusal): no request was sent, so nothing can have been applied.
// gRPC says only "deadline exceeded" then, as for a call cut in flight.
func (p *attemptProbe) neverReached(err error) bool {
	st, ok := status.FromError(err)
	return ok && p.observed && !p.reached && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled)
}

// refusedInARow counts attempts in a row whose connection was never made:
// n+1 after such an attempt, 0 after any other.
func refusedInARow(n int, err error, neverReached bool) int {
	if st, ok := status.FromError(err); neverReached || ok && notSent(st) {
		return n + 1
	}
	return 0
}

// telling reports whether err says something about the cluster (a
// verdict, a reason — a node's TIMEOUT too —, a refused connection) rather
// than only that an attempt's time ran out: what a call that ran out of
// time reports.
func telling(err error) bool {
	st, info := coorderr.Info(err)
	if st == nil || info.GetReason() != "" {
		return true
	}
	return st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled
}
