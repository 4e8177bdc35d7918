package client

import (
	"context"
	"errors"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Claim is the outcome of claiming a window.
type Claim struct {
	// Claimed is false when the window was already completed; Window then
	// holds what completed it.
	Claimed  bool
	Attempts uint64
	Window   *coordv1.Window
	lease    *Lease
}

// ClaimWindow claims the occurrence window of job for this lease. A
// completed window is not an error: Claimed is false. A repeat by the same
// holder is the same attempt, so retries are safe.
func (l *Lease) ClaimWindow(ctx context.Context, job, window string) (*Claim, error) {
	req := &coordv1.ClaimWindowRequest{Job: job, Window: window, LeaseName: l.name, Owner: l.owner, Generation: l.gen}
	resp, err := call(l.c, ctx, true, coordv1.CoordinatorClient.ClaimWindow, req)
	if err != nil {
		return nil, err
	}
	return &Claim{Claimed: resp.GetClaimed(), Attempts: resp.GetAttempts(), Window: resp.GetWindow(), lease: l}, nil
}

// Complete completes the claimed window with result, at most once. A retry
// by the same holder returns the completed record.
func (cl *Claim) Complete(ctx context.Context, result []byte) (*coordv1.Window, error) {
	return cl.complete(ctx, result, false)
}

func (cl *Claim) complete(ctx context.Context, result []byte, release bool) (*coordv1.Window, error) {
	l := cl.lease
	req := &coordv1.CompleteWindowRequest{Job: cl.Window.GetJob(), Window: cl.Window.GetWindow(), LeaseName: l.name,
		Owner: l.owner, Generation: l.gen, Result: result, Release: release}
	resp, err := call(l.c, ctx, true, coordv1.CoordinatorClient.CompleteWindow, req)
	if err != nil {
		return nil, err
	}
	return resp.GetWindow(), nil
}

// CompleteAndRelease completes the claimed window and releases the lease in
// one call and one log entry: the end of a scheduled occurrence. The lease
// stops being kept alive and its context is cancelled (ErrLeaseReleased)
// before the call, as with Release. A retry by the same holder returns the
// completed record. If the lease was already lost (here or on the server),
// the window stays incomplete and the error wraps ErrLeaseLost.
func (cl *Claim) CompleteAndRelease(ctx context.Context, result []byte) (*coordv1.Window, error) {
	if lost := cl.lease.end(); errors.Is(lost, ErrLeaseLost) {
		return nil, lost
	}
	return cl.complete(ctx, result, true)
}
