package client

import (
	"context"
	"errors"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Commit is the outcome of an accepted fenced commit.
type Commit struct {
	Accepted bool
	// Duplicate is true when the idempotency key was accepted before;
	// Payload and Generation are then those of the first commit.
	Duplicate     bool
	Generation    uint64
	MaxGeneration uint64
	Payload       []byte
}

// FencedCommit validates this lease's token for a write to resource. With
// an idempotency key, a repeat returns the first outcome (Duplicate) and
// the call is retried safely after an unknown outcome; without one it is
// not retried once sent. Refusals wrap ErrStaleToken or ErrLeaseLost.
func (l *Lease) FencedCommit(ctx context.Context, resource, idempotencyKey string, payload []byte) (*Commit, error) {
	return l.c.fencedCommit(ctx, resource, l.name, l.gen, idempotencyKey, payload)
}

// Validate is FencedCommit for a service that received only a token (see
// Lease.Token), e.g. an API called by a job.
func (c *Client) Validate(ctx context.Context, resource, token, idempotencyKey string, payload []byte) (*Commit, error) {
	name, gen, err := ParseToken(token)
	if err != nil {
		return nil, err
	}
	return c.fencedCommit(ctx, resource, name, gen, idempotencyKey, payload)
}

func (c *Client) fencedCommit(ctx context.Context, resource, lease string, gen uint64, key string, payload []byte) (*Commit, error) {
	req := &coordv1.FencedCommitRequest{Resource: resource, LeaseName: lease, Generation: gen, IdempotencyKey: key, Payload: payload}
	var resp *coordv1.FencedCommitResponse
	err := c.invoke(ctx, key != "", func(ctx context.Context, cc coordv1.CoordinatorClient) error {
		var err error
		resp, err = cc.FencedCommit(ctx, req)
		return err
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Reason != "" {
			c.metrics.FenceRejected(resource, e.Reason)
		}
		return nil, err
	}
	return &Commit{Accepted: resp.GetAccepted(), Duplicate: resp.GetDuplicate(), Generation: resp.GetGeneration(),
		MaxGeneration: resp.GetMaxGeneration(), Payload: resp.GetPayload()}, nil
}

// CheckToken answers whether Validate with these arguments would be
// accepted, without recording anything (a linearizable read on the
// leader): the would-be Commit, the first outcome of a key already used
// (Duplicate), or a refusal wrapping ErrStaleToken or ErrLeaseLost.
func (c *Client) CheckToken(ctx context.Context, resource, token, idempotencyKey string) (*Commit, error) {
	if _, _, err := ParseToken(token); err != nil {
		return nil, err
	}
	req := &coordv1.ValidateRequest{Resource: resource, Token: token, IdempotencyKey: idempotencyKey, DryRun: true}
	var resp *coordv1.ValidateResponse
	err := c.invoke(ctx, true, func(ctx context.Context, cc coordv1.CoordinatorClient) error {
		var err error
		resp, err = cc.Validate(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Commit{Accepted: resp.GetAccepted(), Duplicate: resp.GetDuplicate(), Generation: resp.GetGeneration(),
		MaxGeneration: resp.GetMaxGeneration(), Payload: resp.GetPayload()}, nil
}
