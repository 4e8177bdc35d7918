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
	// DryRun is true when the commit was only checked (CommitDryRun):
	// Accepted then says it would be accepted, and nothing was recorded.
	DryRun bool
}

// CommitOption changes one FencedCommit call.
type CommitOption func(*commitOptions)

type commitOptions struct{ dryRun bool }

// CommitDryRun only checks the commit: the answer is what the commit would
// be (accepted, or the first outcome of a key already used, or a refusal),
// from a linearizable read on the leader; nothing is recorded and the
// payload is not stored. It is retried like a read.
func CommitDryRun() CommitOption { return func(o *commitOptions) { o.dryRun = true } }

// FencedCommit validates this lease's token for a write to resource. With
// an idempotency key, a repeat returns the first outcome (Duplicate) and
// the call is retried safely after an unknown outcome; without one it is
// not retried once sent. Refusals wrap ErrStaleToken or ErrLeaseLost.
func (l *Lease) FencedCommit(ctx context.Context, resource, idempotencyKey string, payload []byte, opts ...CommitOption) (*Commit, error) {
	return l.c.fencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: resource, LeaseName: l.name, Generation: l.gen,
		IdempotencyKey: idempotencyKey, Payload: payload}, opts)
}

// FencedCommit is Lease.FencedCommit for a service that received only a
// token (see Lease.Token), e.g. an API called by a job. A malformed token
// is ErrInvalidToken, before any call.
func (c *Client) FencedCommit(ctx context.Context, resource, token, idempotencyKey string, payload []byte, opts ...CommitOption) (*Commit, error) {
	if _, _, err := ParseToken(token); err != nil {
		return nil, err
	}
	return c.fencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: resource, Token: token,
		IdempotencyKey: idempotencyKey, Payload: payload}, opts)
}

// CheckToken answers whether FencedCommit with these arguments would be
// accepted, without recording anything: FencedCommit with CommitDryRun.
// The would-be Commit, the first outcome of a key already used
// (Duplicate), or a refusal wrapping ErrStaleToken or ErrLeaseLost.
func (c *Client) CheckToken(ctx context.Context, resource, token, idempotencyKey string) (*Commit, error) {
	return c.FencedCommit(ctx, resource, token, idempotencyKey, nil, CommitDryRun())
}

func (c *Client) fencedCommit(ctx context.Context, req *coordv1.FencedCommitRequest, opts []CommitOption) (*Commit, error) {
	var o commitOptions
	for _, f := range opts {
		f(&o)
	}
	req.DryRun = o.dryRun
	resp, err := call(c, ctx, o.dryRun || req.GetIdempotencyKey() != "", coordv1.CoordinatorClient.FencedCommit, req)
	if err != nil {
		var e *Error
		if !o.dryRun && errors.As(err, &e) && e.Reason != "" {
			c.metrics.FenceRejected(req.GetResource(), e.Reason)
		}
		return nil, err
	}
	return &Commit{Accepted: resp.GetAccepted(), Duplicate: resp.GetDuplicate(), Generation: resp.GetGeneration(),
		MaxGeneration: resp.GetMaxGeneration(), Payload: resp.GetPayload(), DryRun: resp.GetDryRun()}, nil
}
