package api

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/pbtime"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Conversions from domain records to wire types.

// stamp is a pair of the two clocks' readings (lease time, calendar time)
// that an answer is judged at. Every instant of the API is a calendar
// Timestamp, so a reader prints each the same way: a lease-time instant
// (a lease's acquired_at, a resource's last_commit_at) is given as the
// calendar time it was (will be) at, as seen from this pair. Leases are
// judged on lease time, so the durations beside them (expires_in, held)
// are the exact ones.
type stamp struct{ lease, calendar int64 }

// stampAt pairs lease time now with this node's calendar time: the
// leader's clock on the leader, the last applied stamp elsewhere (where
// now is the last applied lease time too).
func (s *Server) stampAt(now int64) stamp {
	return stamp{lease: now, calendar: s.node.CalendarTime()}
}

// at is the calendar Timestamp of lease-time instant t (unset for 0).
func (st stamp) at(t int64) *timestamppb.Timestamp {
	if t == 0 {
		return nil
	}
	return pbtime.At(st.calendar + t - st.lease)
}

func leaseToProto(l fsm.Lease, st stamp) *coordv1.Lease {
	now := st.lease
	out := &coordv1.Lease{
		Name: l.Name, Owner: l.Owner, Generation: l.Generation, Ttl: pbtime.Dur(l.TTLMs),
		Held: pbtime.Dur(max(0, now-l.AcquiredAt)), RenewedAgo: pbtime.Dur(max(0, now-l.RenewedAt)),
		Released: l.Released, AcquiredAt: st.at(l.AcquiredAt), RenewedAt: st.at(l.RenewedAt),
		ExpiresAt: st.at(l.ExpiresAt), ExpiresIn: pbtime.Dur(0),
		Renewals: l.Renewals, Identity: l.Identity, Value: []byte(l.Value),
	}
	if l.Live(now) {
		out.ExpiresIn = pbtime.Dur(l.ExpiresAt - now)
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
		Job: w.Ledger, Window: w.Window, State: st, Owner: w.Owner, Generation: w.Generation,
		Attempts: w.Attempts, StartedAt: pbtime.At(w.StartedAt), CompletedAt: pbtime.At(w.CompletedAt), Result: w.Result,
		LeaseName: w.LeaseName, FirstStartedAt: pbtime.At(w.FirstStartedAt),
	}
}

func resourceToProto(r fsm.Resource, st stamp) *coordv1.Resource {
	return &coordv1.Resource{
		Resource: r.Name, LeaseName: r.LeaseName, MaxGeneration: r.MaxGeneration,
		LastCommitAt: st.at(r.LastCommitAt), LastIdempotencyKey: r.LastIdempotencyKey, Commits: r.Commits,
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
