package server

import (
	"context"
	"errors"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// coordinator implements coord.v1.Coordinator. Every handler validates its
// input, then runs on the leader (forwarding from a follower).
type coordinator struct {
	coordv1.UnimplementedCoordinatorServer
	s *Server
}

func (c *coordinator) Acquire(ctx context.Context, req *coordv1.AcquireRequest) (*coordv1.AcquireResponse, error) {
	if err := firstErr(checkName("name", req.GetName(), true), checkName("owner", req.GetOwner(), true),
		checkName("request_id", req.GetRequestId(), false), c.s.checkTTL("ttl_ms", req.GetTtlMs(), false)); err != nil {
		return nil, toStatus(err)
	}
	if cl := req.GetClaim(); cl != nil {
		if err := firstErr(checkName("claim.job", cl.GetJob(), true), checkName("claim.window", cl.GetWindow(), true)); err != nil {
			return nil, toStatus(err)
		}
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.Acquire, req, func() (*coordv1.AcquireResponse, error) {
		resp, ok, err := c.s.acquireFromState(ctx, req)
		if ok && (err != nil || !req.GetWait() || resp.GetAcquired() || resp.GetClaim() != nil) {
			return resp, err
		}
		cmd := &fsmv1.Acquire{Name: req.GetName(), Owner: req.GetOwner(), TtlMs: req.GetTtlMs(),
			RequestId: req.GetRequestId(), Identity: identityOf(ctx), MaxLiveLeases: c.s.cfg.Limits.LeasesPerIdentity,
			ClaimJob: req.GetClaim().GetJob(), ClaimWindow: req.GetClaim().GetWindow(), ClaimNotBeforeMs: req.GetClaim().GetNotBeforeMs()}
		var res any
		if req.GetWait() {
			res, err = c.s.acquireWaiting(ctx, cmd)
		} else {
			res, err = c.s.propose(ctx, cmd)
		}
		if err != nil {
			if rej := (*fsm.Rejection)(nil); errors.As(err, &rej) && rej.Reason == fsm.ReasonLeaseLimit {
				c.s.metrics.limited.WithLabelValues("leases").Inc()
			}
			return nil, err
		}
		r := res.(*fsm.AcquireResult)
		c.s.observeAcquire(r)
		out := &coordv1.AcquireResponse{Acquired: r.Acquired, Lease: leaseToProto(r.Lease, r.At)}
		if r.Claim != nil {
			out.Claim = &coordv1.WindowClaim{Claimed: r.Claim.Claimed, Attempts: r.Claim.Window.Attempts, Window: windowToProto(r.Claim.Window)}
			if r.Claim.Claimed {
				c.s.metrics.windowsClaimed.Inc()
			} else {
				c.s.metrics.windowsRefused.WithLabelValues(coorderr.Name(fsm.ReasonWindowCompleted)).Inc()
			}
		}
		return out, nil
	})
}

func (c *coordinator) Renew(ctx context.Context, req *coordv1.RenewRequest) (*coordv1.RenewResponse, error) {
	if err := firstErr(checkName("name", req.GetName(), true), checkName("owner", req.GetOwner(), true),
		checkGeneration(req.GetGeneration()), c.s.checkTTL("ttl_ms", req.GetTtlMs(), true)); err != nil {
		return nil, toStatus(err)
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.Renew, req, func() (*coordv1.RenewResponse, error) {
		l, err := c.s.renew(ctx, req.GetName(), req.GetOwner(), identityOf(ctx), req.GetGeneration(), req.GetTtlMs())
		if err != nil {
			return nil, err
		}
		return &coordv1.RenewResponse{Lease: leaseToProto(l, l.RenewedAt)}, nil
	})
}

// renew is shared by Renew and KeepAlive; it logs and counts a lost lease.
func (s *Server) renew(ctx context.Context, name, owner, identity string, gen uint64, ttl int64) (fsm.Lease, error) {
	res, err := s.propose(ctx, &fsmv1.Renew{Name: name, Owner: owner, Generation: gen, TtlMs: ttl, Identity: identity})
	if err != nil {
		var rej *fsm.Rejection
		if errors.As(err, &rej) {
			s.metrics.leasesLost.WithLabelValues(coorderr.Name(rej.Reason)).Inc()
			s.log.Warn("lease lost: renew refused", "lease", name, "owner", owner, "generation", gen,
				"reason", coorderr.Name(rej.Reason), "current_owner", rej.Metadata["current_owner"],
				"current_generation", rej.Metadata["current_generation"])
		}
		return fsm.Lease{}, err
	}
	return res.(*fsm.LeaseResult).Lease, nil
}

func (c *coordinator) Release(ctx context.Context, req *coordv1.ReleaseRequest) (*coordv1.ReleaseResponse, error) {
	if err := firstErr(checkName("name", req.GetName(), true), checkName("owner", req.GetOwner(), true),
		checkGeneration(req.GetGeneration())); err != nil {
		return nil, toStatus(err)
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.Release, req, func() (*coordv1.ReleaseResponse, error) {
		handoff, deliver := c.s.handoffFor(req.GetName())
		res, err := c.s.propose(ctx, &fsmv1.Release{Name: req.GetName(), Owner: req.GetOwner(), Generation: req.GetGeneration(),
			Identity: identityOf(ctx), Handoff: handoff})
		if err != nil {
			return nil, err
		}
		r := res.(*fsm.ReleaseResult)
		if r.Handoff != nil {
			deliver(r.Handoff)
		} else if r.Released {
			c.s.waiters.wakeAll(req.GetName())
		}
		return &coordv1.ReleaseResponse{Released: r.Released, Lease: leaseToProto(r.Lease, r.At)}, nil
	})
}

func (c *coordinator) ClaimWindow(ctx context.Context, req *coordv1.ClaimWindowRequest) (*coordv1.ClaimWindowResponse, error) {
	if err := firstErr(checkName("job", req.GetJob(), true), checkName("window", req.GetWindow(), true),
		checkName("lease_name", req.GetLeaseName(), true), checkName("owner", req.GetOwner(), true),
		checkGeneration(req.GetGeneration())); err != nil {
		return nil, toStatus(err)
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.ClaimWindow, req, func() (*coordv1.ClaimWindowResponse, error) {
		res, err := c.s.propose(ctx, &fsmv1.ClaimWindow{Job: req.GetJob(), Window: req.GetWindow(),
			LeaseName: req.GetLeaseName(), Owner: req.GetOwner(), Generation: req.GetGeneration(), Identity: identityOf(ctx)})
		if err != nil {
			c.s.observeWindowRefusal("claim", req.GetJob(), req.GetWindow(), req.GetOwner(), req.GetGeneration(), err)
			return nil, err
		}
		r := res.(*fsm.ClaimResult)
		if r.Claimed {
			c.s.metrics.windowsClaimed.Inc()
		} else {
			c.s.metrics.windowsRefused.WithLabelValues(coorderr.Name(fsm.ReasonWindowCompleted)).Inc()
		}
		return &coordv1.ClaimWindowResponse{Claimed: r.Claimed, Attempts: r.Window.Attempts, Window: windowToProto(r.Window)}, nil
	})
}

func (c *coordinator) CompleteWindow(ctx context.Context, req *coordv1.CompleteWindowRequest) (*coordv1.CompleteWindowResponse, error) {
	if err := firstErr(checkName("job", req.GetJob(), true), checkName("window", req.GetWindow(), true),
		checkName("lease_name", req.GetLeaseName(), true), checkName("owner", req.GetOwner(), true),
		checkGeneration(req.GetGeneration()), checkPayload("result", req.GetResult())); err != nil {
		return nil, toStatus(err)
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.CompleteWindow, req, func() (*coordv1.CompleteWindowResponse, error) {
		res, err := c.s.propose(ctx, &fsmv1.CompleteWindow{Job: req.GetJob(), Window: req.GetWindow(),
			LeaseName: req.GetLeaseName(), Owner: req.GetOwner(), Generation: req.GetGeneration(), Result: req.GetResult(),
			Identity: identityOf(ctx), Release: req.GetRelease()})
		if err != nil {
			c.s.observeWindowRefusal("complete", req.GetJob(), req.GetWindow(), req.GetOwner(), req.GetGeneration(), err)
			return nil, err
		}
		c.s.metrics.windowsCompleted.Inc()
		r := res.(*fsm.WindowResult)
		if r.Released {
			c.s.waiters.wakeAll(req.GetLeaseName())
		}
		return &coordv1.CompleteWindowResponse{Window: windowToProto(r.Window), Released: r.Released}, nil
	})
}

// FencedCommit records a fenced write, or with dry_run answers whether it
// would be accepted: a linearizable read of the same checks on the leader
// (fsm.CheckFence), with no log entry. The token is (lease_name,
// generation) or its string form in token.
func (c *coordinator) FencedCommit(ctx context.Context, req *coordv1.FencedCommitRequest) (*coordv1.FencedCommitResponse, error) {
	name, gen, terr := fenceToken(req)
	if err := firstErr(checkName("resource", req.GetResource(), true), terr, checkName("lease_name", name, true),
		checkGeneration(gen), checkName("idempotency_key", req.GetIdempotencyKey(), false),
		checkPayload("payload", req.GetPayload())); err != nil {
		return nil, toStatus(err)
	}
	cmd := &fsmv1.FencedCommit{Resource: req.GetResource(), LeaseName: name, Generation: gen,
		IdempotencyKey: req.GetIdempotencyKey(), Payload: req.GetPayload()}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.FencedCommit, req, func() (*coordv1.FencedCommitResponse, error) {
		var r *fsm.CommitResult
		if req.GetDryRun() {
			now, err := c.s.readAt(ctx, false)
			if err != nil {
				return nil, err
			}
			switch v := c.s.fsm.CheckFence(now, cmd).(type) {
			case *fsm.Rejection:
				c.s.observeFenceRefusal(cmd, v)
				return nil, v
			case *fsm.CommitResult:
				r = v
			}
		} else {
			var err error
			if r, err = c.s.fencedCommit(ctx, cmd); err != nil {
				return nil, err
			}
		}
		return &coordv1.FencedCommitResponse{Accepted: r.Accepted, Duplicate: r.Duplicate, MaxGeneration: r.MaxGeneration,
			Payload: r.Payload, Generation: r.Generation, LeaseName: name, DryRun: req.GetDryRun()}, nil
	})
}

// fencedCommit proposes a fenced commit; it logs and counts the outcome.
func (s *Server) fencedCommit(ctx context.Context, cmd *fsmv1.FencedCommit) (*fsm.CommitResult, error) {
	res, err := s.propose(ctx, cmd)
	if err != nil {
		s.observeFenceRefusal(cmd, err)
		return nil, err
	}
	r := res.(*fsm.CommitResult)
	kind := "new"
	if r.Duplicate {
		kind = "duplicate"
	}
	s.metrics.fenceAccepted.WithLabelValues(kind).Inc()
	return r, nil
}

func (s *Server) observeFenceRefusal(cmd *fsmv1.FencedCommit, err error) {
	var rej *fsm.Rejection
	if errors.As(err, &rej) {
		s.metrics.fenceRejections.WithLabelValues(coorderr.Name(rej.Reason)).Inc()
		s.log.Warn("fenced commit refused", "resource", cmd.GetResource(), "lease", cmd.GetLeaseName(),
			"generation", cmd.GetGeneration(), "idempotency_key", cmd.GetIdempotencyKey(), "reason", coorderr.Name(rej.Reason),
			"detail", rej.Message)
	}
}

func (s *Server) observeAcquire(r *fsm.AcquireResult) {
	switch {
	case !r.Acquired:
		s.metrics.acquisitions.WithLabelValues("held").Inc()
	case r.TookOver:
		s.metrics.acquisitions.WithLabelValues("takeover").Inc()
		s.metrics.leasesLost.WithLabelValues("expired").Inc()
		s.log.Warn("lease lost: expired without release, taken over", "lease", r.Lease.Name,
			"owner", r.Previous.Owner, "generation", r.Previous.Generation,
			"silent_for_ms", r.Lease.AcquiredAt-r.Previous.RenewedAt,
			"new_owner", r.Lease.Owner, "new_generation", r.Lease.Generation)
	default:
		s.metrics.acquisitions.WithLabelValues("acquired").Inc()
	}
}

func (s *Server) observeWindowRefusal(op, job, window, owner string, gen uint64, err error) {
	var rej *fsm.Rejection
	if !errors.As(err, &rej) {
		return
	}
	s.metrics.windowsRefused.WithLabelValues(coorderr.Name(rej.Reason)).Inc()
	s.log.Warn("window "+op+" refused", "job", job, "window", window, "owner", owner, "generation", gen,
		"reason", coorderr.Name(rej.Reason), "detail", rej.Message)
}

// acquireFromState answers an Acquire that cannot grant anything without a
// log entry: the lease is live at the leader's cluster time and held by
// someone else (not acquired), or it is this request's own live grant (a
// retry), or a claim finds its window completed or its not-before time
// ahead. These answers are reads of committed state and grant nothing, so
// contention costs no fsync.
func (s *Server) acquireFromState(ctx context.Context, req *coordv1.AcquireRequest) (*coordv1.AcquireResponse, bool, error) {
	ls, err := s.readyLeader(ctx)
	if err != nil {
		return nil, false, nil
	}
	l, _, ok := s.fsm.Lease(req.GetName())
	now := ls.clock.current()
	if cl := req.GetClaim(); cl != nil {
		// A completed window grants nothing: answer from state.
		if w, found := s.fsm.Window(cl.GetJob(), cl.GetWindow()); found && w.Completed {
			s.metrics.windowsRefused.WithLabelValues(coorderr.Name(fsm.ReasonWindowCompleted)).Inc()
			out := &coordv1.AcquireResponse{Claim: &coordv1.WindowClaim{Claimed: false, Attempts: w.Attempts, Window: windowToProto(w)}}
			if ok {
				out.Lease = leaseToProto(l, now)
			}
			return out, true, nil
		}
	}
	if nb := req.GetClaim().GetNotBeforeMs(); now < nb {
		// Refused without a log entry (the FSM refuses it too).
		return nil, true, fsm.TooEarly(now, nb, req.GetClaim().GetJob(), req.GetClaim().GetWindow())
	}
	if !ok || !l.Live(now) {
		return nil, false, nil
	}
	if l.Owner == req.GetOwner() && l.RequestID != "" && l.RequestID == req.GetRequestId() && l.Identity == identityOf(ctx) {
		if req.GetClaim() != nil {
			return nil, false, nil // the retry's claim comes from the log
		}
		return &coordv1.AcquireResponse{Acquired: true, Lease: leaseToProto(l, now)}, true, nil
	}
	s.metrics.acquisitions.WithLabelValues("held").Inc()
	return &coordv1.AcquireResponse{Acquired: false, Lease: leaseToProto(l, now)}, true, nil
}
