package client

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// notSent reports whether a transport error happened before any request
// could be sent: the connection was never made (refused, no route, no such
// host). Any call may then go to another node, whatever its idempotency.
func notSent(st *status.Status) bool {
	return st.Code() == codes.Unavailable && strings.Contains(st.Message(), "Error while dialing")
}

// refusedInARow counts attempts in a row whose connection was never made:
// n+1 after such an attempt, 0 after any other.
func refusedInARow(n int, err error) int {
	if st, ok := status.FromError(err); ok && notSent(st) {
		return n + 1
	}
	return 0
}
