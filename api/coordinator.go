package api

import (
	"context"
	"errors"
	"math"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/metriclabel"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// coordinator implements coord.v1.Coordinator. Every handler validates its
// input, then runs on the leader (forwarding from a follower): it builds
// the command, hands it to the node and converts the typed result.
type coordinator struct {
	coordv1.UnimplementedCoordinatorServer
	s *Server
}

func (c *coordinator) Acquire(ctx context.Context, req *coordv1.AcquireRequest) (*coordv1.AcquireResponse, error) {
	s := c.s
	if err := firstErr(checkName("name", req.GetName(), true), checkName("owner", req.GetOwner(), true),
		checkName("request_id", req.GetRequestId(), false), s.checkTTL("ttl", req.GetTtlMs(), false),
		checkLeaseValue(req.GetValue())); err != nil {
		return nil, toStatus(err)
	}
	if cl := req.GetClaim(); cl != nil {
		if err := firstErr(checkName("claim.job", cl.GetJob(), true), checkName("claim.window", cl.GetWindow(), true)); err != nil {
			return nil, toStatus(err)
		}
	}
	if _, reserved := fsm.ParseJobTokenName(req.GetName()); reserved {
		return nil, toStatus(invalidArg("name", "%v", errJobTokenName))
	}
	return coordOnLeader(s, ctx, coordv1.CoordinatorClient.Acquire, req, func() (*coordv1.AcquireResponse, error) {
		identity := auth.IdentityOf(ctx)
		cmd := &fsmv1.Acquire{Name: req.GetName(), Owner: req.GetOwner(), TtlMs: req.GetTtlMs(),
			RequestId: req.GetRequestId(), Identity: identity, MaxLiveLeases: s.cfg.Limits.LeasesPerIdentity,
			ClaimJob: req.GetClaim().GetJob(), ClaimWindow: req.GetClaim().GetWindow(), ClaimNotBeforeMs: req.GetClaim().GetNotBeforeMs(),
			Value: req.GetValue()}
		if req.GetWait() {
			done, err := s.limits.StartWait(identity)
			if err != nil {
				s.metrics.limited.WithLabelValues("waiting_acquires").Inc()
				return nil, err
			}
			defer done()
		}
		r, err := s.node.Acquire(ctx, cmd, req.GetWait())
		if err != nil {
			if rej := (*fsm.Rejection)(nil); errors.As(err, &rej) && rej.Reason == coorderr.LeaseLimit {
				s.metrics.limited.WithLabelValues("leases").Inc()
			}
			return nil, err
		}
		s.observeAcquire(r)
		out := &coordv1.AcquireResponse{Acquired: r.Acquired, Lease: leaseToProto(r.Lease, c.s.stampAt(r.At))}
		if r.Claim != nil {
			out.Claim = &coordv1.WindowClaim{Claimed: r.Claim.Claimed, Attempts: r.Claim.Window.Attempts, Window: windowToProto(r.Claim.Window)}
		}
		if r.Lease.Name == "" {
			out.Lease = nil // a claim of a completed window, on a lease that never existed
		}
		return out, nil
	})
}

func (c *coordinator) Renew(ctx context.Context, req *coordv1.RenewRequest) (*coordv1.RenewResponse, error) {
	if err := firstErr(checkName("name", req.GetName(), true), checkName("owner", req.GetOwner(), true),
		checkGeneration(req.GetGeneration()), c.s.checkTTL("ttl", req.GetTtlMs(), true), checkLeaseValue(req.GetValue())); err != nil {
		return nil, toStatus(err)
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.Renew, req, func() (*coordv1.RenewResponse, error) {
		l, err := c.s.renew(ctx, req.GetName(), req.GetOwner(), auth.IdentityOf(ctx), req.GetGeneration(), req.GetTtlMs(), req.Value)
		if err != nil {
			return nil, err
		}
		return &coordv1.RenewResponse{Lease: leaseToProto(l, c.s.stampAt(l.RenewedAt))}, nil
	})
}

// renew is shared by Renew and KeepAlive; it logs and counts a lost lease.
func (s *Server) renew(ctx context.Context, name, owner, identity string, gen uint64, ttl int64, value []byte) (fsm.Lease, error) {
	r, err := s.node.Renew(ctx, &fsmv1.Renew{Name: name, Owner: owner, Generation: gen, TtlMs: ttl, Identity: identity,
		Value: value})
	if err != nil {
		var rej *fsm.Rejection
		if errors.As(err, &rej) {
			s.metrics.leasesLost.WithLabelValues(metriclabel.Value(coorderr.Name(rej.Reason), "LEASE_")).Inc()
			s.log.Warn("lease lost: renew refused", "lease", name, "owner", owner, "generation", gen,
				"reason", coorderr.Name(rej.Reason), "current_owner", rej.Metadata["current_owner"],
				"current_generation", rej.Metadata["current_generation"])
		}
		return fsm.Lease{}, err
	}
	return r.Lease, nil
}

func (c *coordinator) Release(ctx context.Context, req *coordv1.ReleaseRequest) (*coordv1.ReleaseResponse, error) {
	if err := firstErr(checkName("name", req.GetName(), true), checkName("owner", req.GetOwner(), true),
		checkGeneration(req.GetGeneration())); err != nil {
		return nil, toStatus(err)
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.Release, req, func() (*coordv1.ReleaseResponse, error) {
		r, err := c.s.node.Release(ctx, &fsmv1.Release{Name: req.GetName(), Owner: req.GetOwner(),
			Generation: req.GetGeneration(), Identity: auth.IdentityOf(ctx)})
		if err != nil {
			return nil, err
		}
		return &coordv1.ReleaseResponse{Released: r.Released, Lease: leaseToProto(r.Lease, c.s.stampAt(r.At))}, nil
	})
}

func (c *coordinator) ClaimWindow(ctx context.Context, req *coordv1.ClaimWindowRequest) (*coordv1.ClaimWindowResponse, error) {
	if err := firstErr(checkName("job", req.GetJob(), true), checkName("window", req.GetWindow(), true),
		checkName("lease_name", req.GetLeaseName(), true), checkName("owner", req.GetOwner(), true),
		checkGeneration(req.GetGeneration())); err != nil {
		return nil, toStatus(err)
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.ClaimWindow, req, func() (*coordv1.ClaimWindowResponse, error) {
		r, err := c.s.node.ClaimWindow(ctx, &fsmv1.ClaimWindow{Job: req.GetJob(), Window: req.GetWindow(),
			LeaseName: req.GetLeaseName(), Owner: req.GetOwner(), Generation: req.GetGeneration(), Identity: auth.IdentityOf(ctx)})
		if err != nil {
			c.s.observeWindowRefusal("claim", req.GetJob(), req.GetWindow(), req.GetOwner(), req.GetGeneration(), err)
			return nil, err
		}
		c.s.observeClaim(r)
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
		r, err := c.s.node.CompleteWindow(ctx, &fsmv1.CompleteWindow{Job: req.GetJob(), Window: req.GetWindow(),
			LeaseName: req.GetLeaseName(), Owner: req.GetOwner(), Generation: req.GetGeneration(), Result: req.GetResult(),
			Identity: auth.IdentityOf(ctx), Release: req.GetRelease()})
		if err != nil {
			c.s.observeWindowRefusal("complete", req.GetJob(), req.GetWindow(), req.GetOwner(), req.GetGeneration(), err)
			return nil, err
		}
		c.s.metrics.windowsCompleted.Inc()
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
	if id, ok := fsm.ParseJobTokenName(name); ok {
		// A job attempt's token "job:<id>:<attempt>": the FSM fences with
		// the job's live attempt.
		if gen > math.MaxUint32 {
			return nil, toStatus(invalidArg("generation", "%d is not an attempt number of job %d", gen, id))
		}
		cmd.LeaseName, cmd.JobId = "", id
	}
	return coordOnLeader(c.s, ctx, coordv1.CoordinatorClient.FencedCommit, req, func() (*coordv1.FencedCommitResponse, error) {
		var (
			r   *fsm.CommitResult
			err error
		)
		if req.GetDryRun() {
			r, err = c.s.checkFence(ctx, cmd)
		} else {
			r, err = c.s.fencedCommit(ctx, cmd)
		}
		if err != nil {
			return nil, err
		}
		return &coordv1.FencedCommitResponse{Accepted: r.Accepted, Duplicate: r.Duplicate, MaxGeneration: r.MaxGeneration,
			Payload: r.Payload, Generation: r.Generation, LeaseName: name, DryRun: req.GetDryRun()}, nil
	})
}

// fencedCommit proposes a fenced commit; it logs and counts the outcome.
func (s *Server) fencedCommit(ctx context.Context, cmd *fsmv1.FencedCommit) (*fsm.CommitResult, error) {
	r, err := s.node.FencedCommit(ctx, cmd)
	if err != nil {
		s.observeFenceRefusal(cmd, err)
		return nil, err
	}
	kind := "new"
	if r.Duplicate {
		kind = "duplicate"
	}
	s.metrics.fenceAccepted.WithLabelValues(kind).Inc()
	return r, nil
}

// checkFence answers a dry-run fenced commit: a linearizable read of the
// same checks as the apply (fsm.CheckFence), with no log entry.
func (s *Server) checkFence(ctx context.Context, cmd *fsmv1.FencedCommit) (*fsm.CommitResult, error) {
	st, now, err := s.node.Read(ctx, false)
	if err != nil {
		return nil, err
	}
	switch v := st.CheckFence(now, cmd).(type) {
	case *fsm.CommitResult:
		return v, nil
	case *fsm.Rejection:
		s.observeFenceRefusal(cmd, v)
		return nil, v
	default:
		return nil, errors.New("fence check answered nothing")
	}
}

func (s *Server) observeFenceRefusal(cmd *fsmv1.FencedCommit, err error) {
	var rej *fsm.Rejection
	if errors.As(err, &rej) {
		s.metrics.fenceRejections.WithLabelValues(metriclabel.Value(coorderr.Name(rej.Reason))).Inc()
		lease := cmd.GetLeaseName()
		if cmd.GetJobId() != 0 {
			lease = fsm.JobTokenName(cmd.GetJobId())
		}
		s.log.Warn("fenced commit refused", "resource", cmd.GetResource(), "lease", lease,
			"generation", cmd.GetGeneration(), "idempotency_key", cmd.GetIdempotencyKey(), "reason", coorderr.Name(rej.Reason),
			"detail", rej.Message)
	}
}

// observeAcquire counts an Acquire's outcome and logs a lease taken over
// from a holder that let it expire.
func (s *Server) observeAcquire(r *fsm.AcquireResult) {
	switch {
	case r.Claim != nil && !r.Claim.Claimed:
		s.metrics.windowsRefused.WithLabelValues(metriclabel.Value(coorderr.Name(coorderr.WindowCompleted), "WINDOW_")).Inc()
		return
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
	if r.Claim != nil {
		s.observeClaim(r.Claim)
	}
}

func (s *Server) observeClaim(r *fsm.ClaimResult) {
	if r.Claimed {
		s.metrics.windowsClaimed.Inc()
	} else {
		s.metrics.windowsRefused.WithLabelValues(metriclabel.Value(coorderr.Name(coorderr.WindowCompleted), "WINDOW_")).Inc()
	}
}

func (s *Server) observeWindowRefusal(op, ledger, window, owner string, gen uint64, err error) {
	var rej *fsm.Rejection
	if !errors.As(err, &rej) {
		return
	}
	s.metrics.windowsRefused.WithLabelValues(metriclabel.Value(coorderr.Name(rej.Reason), "WINDOW_")).Inc()
	s.log.Warn("window "+op+" refused", "ledger", ledger, "window", window, "owner", owner, "generation", gen,
		"reason", coorderr.Name(rej.Reason), "detail", rej.Message)
}
