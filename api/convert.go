package api

import (
	"github.com/coordd/coordd/fsm"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Conversions from domain records to wire types, judged at cluster time now.

func leaseToProto(l fsm.Lease, now int64) *coordv1.Lease {
	out := &coordv1.Lease{
		Name: l.Name, Owner: l.Owner, Generation: l.Generation, TtlMs: l.TTLMs,
		HeldMs: max(0, now-l.AcquiredAt), RenewedAgoMs: max(0, now-l.RenewedAt),
		Released: l.Released, AcquiredAtMs: l.AcquiredAt, RenewedAtMs: l.RenewedAt,
		ExpiresAtMs: l.ExpiresAt, Renewals: l.Renewals, Identity: l.Identity, Value: []byte(l.Value),
	}
	if l.Live(now) {
		out.ExpiresInMs = l.ExpiresAt - now
	} else if !l.Released {
		out.Expired = true
	}
	return out
}

func windowToProto(w fsm.Window) *coordv1.Window {
	st := coordv1.WindowState_WINDOW_STATE_INCOMPLETE
	if w.Completed {
		st = coordv1.WindowState_WINDOW_STATE_COMPLETED
	}
	return &coordv1.Window{
		Job: w.Job, Window: w.Window, State: st, Owner: w.Owner, Generation: w.Generation,
		Attempts: w.Attempts, StartedAt: w.StartedAt, CompletedAt: w.CompletedAt, Result: w.Result,
		LeaseName: w.LeaseName, FirstStartedAt: w.FirstStartedAt,
	}
}

func resourceToProto(r fsm.Resource) *coordv1.Resource {
	return &coordv1.Resource{
		Resource: r.Name, LeaseName: r.LeaseName, MaxGeneration: r.MaxGeneration,
		LastCommitAt: r.LastCommitAt, LastIdempotencyKey: r.LastIdempotencyKey, Commits: r.Commits,
	}
}

// convertAll converts every element of ts with f.
func convertAll[T, U any](ts []T, f func(T) U) []U {
	out := make([]U, len(ts))
	for i, t := range ts {
		out[i] = f(t)
	}
	return out
}
