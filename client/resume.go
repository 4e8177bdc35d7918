package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/internal/pbtime"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// ResumeOption changes one Resume call.
type ResumeOption func(*resumeOptions)

type resumeOptions struct {
	onRenewal func(*coordv1.KeepAliveResponse)
}

// OnRenewal calls f with every acknowledged renewal of the resumed lease,
// Resume's own first renewal included. f runs on the client's keepalive
// goroutine: it must return quickly.
func OnRenewal(f func(*coordv1.KeepAliveResponse)) ResumeOption {
	return func(o *resumeOptions) { o.onRenewal = f }
}

// Resume keeps alive, from now on, a lease this client did not acquire: one
// held as (owner, generation) by a process that handed it over, or taken
// with coordctl. It renews the lease once for ttl, which fails (wrapping
// ErrLeaseLost) when that is not the current holder, and then keeps it
// alive like a lease Acquire granted: renewed at TTL/3 over the client's
// shared stream, following leader changes, with a local deadline; Context
// and Done report its loss and Release ends it.
func (c *Client) Resume(ctx context.Context, name, owner string, generation uint64, ttl time.Duration,
	opts ...ResumeOption) (*Lease, error) {
	var o resumeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("%w: ttl must be positive", ErrInvalidArgument)
	}
	// As with Acquire, the renewal lands after sent: a local deadline
	// derived from sent is conservative (G10).
	sent := c.clock.Now()
	req := &coordv1.RenewRequest{Name: name, Owner: owner, Generation: generation, Ttl: durationpb.New(ttl)}
	resp, err := call(c, ctx, true, coordv1.CoordinatorClient.Renew, req)
	if err != nil {
		return nil, err
	}
	l := c.newLease(name, owner, generation, ttl, sent)
	l.onRenewal = o.onRenewal
	if o.onRenewal != nil {
		o.onRenewal(&coordv1.KeepAliveResponse{Name: name, Generation: generation, Ok: true,
			ExpiresIn: pbtime.Dur(resp.GetLease().GetExpiresInMs())})
	}
	c.keeper.add(l)
	return l, nil
}
