package api

import (
	"errors"
	"io"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// maxInflightRenewals bounds concurrent renewals per stream; they share
// fsyncs through Raft's batching.
const maxInflightRenewals = 512

// notLeader is the error a leader-only stream ends with: where the
// leader is now, as far as this node knows.
func (s *Server) notLeader() error {
	id, addr := s.node.Leader()
	return &notLeaderError{id: id, addr: addr}
}

// KeepAlive renews many leases over one stream. The stream lives on the
// leader: a follower answers Unavailable with the leader's address, and the
// stream ends with Unavailable when this node stops leading, so the client
// moves to the new leader. ok=false is sent only for a definitive refusal
// (the lease is lost); the stream stays up for the other leases.
func (c *coordinator) KeepAlive(stream coordv1.Coordinator_KeepAliveServer) error {
	s := c.s
	ctx := stream.Context()
	lctx, err := s.node.LeaderContext(ctx)
	if err != nil {
		return toStatus(err)
	}
	identity := auth.IdentityOf(ctx)
	s.metrics.keepaliveStreams.Inc()
	defer s.metrics.keepaliveStreams.Dec()

	done := make(chan struct{})
	defer close(done)
	sendCh := make(chan *coordv1.KeepAliveResponse, maxInflightRenewals)
	errCh := make(chan error, 2)
	sem := make(chan struct{}, maxInflightRenewals)
	fail := func(err error) {
		select {
		case errCh <- err:
		default:
		}
	}
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				fail(err)
				return
			}
			resp := &coordv1.KeepAliveResponse{Name: req.GetName(), Generation: req.GetGeneration(), Seq: req.GetSeq()}
			if err := firstErr(checkName("name", req.GetName(), true), checkName("owner", req.GetOwner(), true),
				checkGeneration(req.GetGeneration()), s.checkTTL("ttl_ms", req.GetTtlMs(), true),
				s.authorize(auth.CallerOf(ctx), auth.OpLease, req.GetName(), false)); err != nil {
				resp.Reason, resp.Message = coorderr.Name(coorderr.InvalidArgument), err.Error()
				if ae := (*auth.Error)(nil); errors.As(err, &ae) && ae.Kind == auth.PermissionDenied {
					resp.Reason = coorderr.Name(coorderr.PermissionDenied)
				}
				select {
				case sendCh <- resp:
				case <-done:
					return
				}
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-done:
				return
			}
			go func() {
				defer func() { <-sem }()
				l, err := s.renew(ctx, req.GetName(), req.GetOwner(), identity, req.GetGeneration(), req.GetTtlMs(), nil)
				var rej *fsm.Rejection
				switch {
				case err == nil:
					resp.Ok, resp.ExpiresInMs = true, l.ExpiresAt-l.RenewedAt
				case errors.As(err, &rej):
					resp.Reason, resp.Message, resp.Metadata = coorderr.Name(rej.Reason), rej.Message, rej.Metadata
				default:
					// Not a verdict on the lease (leadership moved, shutdown):
					// end the stream so the client retries on the leader.
					fail(toStatus(err))
					return
				}
				select {
				case sendCh <- resp:
				case <-done:
				}
			}()
		}
	}()
	for {
		select {
		case resp := <-sendCh:
			if err := stream.Send(resp); err != nil {
				return err
			}
		case err := <-errCh:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return toStatus(err)
		case <-lctx.Done(): // leadership lost, or the node stops
			return toStatus(s.notLeader())
		case <-s.stop:
			return toStatus(s.notLeader())
		}
	}
}
