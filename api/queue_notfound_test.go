package api

import (
	"context"
	"testing"

	"google.golang.org/grpc/status"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// A missing job reads alike whichever call found it missing: a Get
// (NOT_FOUND) and a Cancel or Retry (FAILED_PRECONDITION) say the same.
func TestJobNotFoundHasOneWording(t *testing.T) {
	_, _, q := newQueueTest(t)
	ctx := context.Background()
	_, gerr := q.Get(ctx, &coordv1.QueueGetRequest{Id: 99})
	_, cerr := q.Cancel(ctx, &coordv1.QueueCancelRequest{Id: 99})
	_, rerr := q.Retry(ctx, &coordv1.QueueRetryRequest{Id: 99})
	want := "job 99 does not exist (never submitted, or pruned)"
	for _, err := range []error{gerr, cerr, rerr} {
		if got := status.Convert(err).Message(); got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
