package api

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/coordd/coordd/internal/pbtime"

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
//
// The handler sends; a receiver reads the requests and starts one renewal
// per valid request (at most maxInflightRenewals at once). The handler owns
// the renewals: it ends and waits for them before it returns. The receiver
// ends when the stream does (gRPC ends Recv when the handler returns).
func (c *coordinator) KeepAlive(stream coordv1.Coordinator_KeepAliveServer) error {
	s := c.s
	lctx, err := s.node.LeaderContext(stream.Context())
	if err != nil {
		return toStatus(err)
	}
	s.metrics.keepaliveStreams.Inc()
	defer s.metrics.keepaliveStreams.Dec()
	ka := newKeepAliveStream(s, stream)
	defer ka.stop()
	go ka.receive()
	return ka.send(lctx)
}

// keepAliveStream is one KeepAlive stream on the leader.
type keepAliveStream struct {
	s        *Server
	stream   coordv1.Coordinator_KeepAliveServer
	ctx      context.Context // the renewals': the stream's, ended by stop
	cancel   context.CancelFunc
	identity string
	done     chan struct{} // closed by stop
	sendCh   chan *coordv1.KeepAliveResponse
	errCh    chan error // the first reason to end the stream
	sem      chan struct{}

	mu       sync.Mutex
	stopped  bool
	renewals sync.WaitGroup
}

func newKeepAliveStream(s *Server, stream coordv1.Coordinator_KeepAliveServer) *keepAliveStream {
	ctx, cancel := context.WithCancel(stream.Context())
	return &keepAliveStream{s: s, stream: stream, ctx: ctx, cancel: cancel, identity: auth.IdentityOf(ctx),
		done: make(chan struct{}), sendCh: make(chan *coordv1.KeepAliveResponse, maxInflightRenewals),
		errCh: make(chan error, 2), sem: make(chan struct{}, maxInflightRenewals)}
}

// stop ends the renewals in flight and waits for them.
func (ka *keepAliveStream) stop() {
	ka.mu.Lock()
	ka.stopped = true
	ka.mu.Unlock()
	close(ka.done)
	ka.cancel()
	ka.renewals.Wait()
}

// fail ends the stream with err (the first reason wins).
func (ka *keepAliveStream) fail(err error) {
	select {
	case ka.errCh <- err:
	default:
	}
}

// reply queues resp for the sender; false once the stream ended.
func (ka *keepAliveStream) reply(resp *coordv1.KeepAliveResponse) bool {
	select {
	case ka.sendCh <- resp:
		return true
	case <-ka.done:
		return false
	}
}

// send writes the answers until the stream breaks, the client closes it,
// a renewal fails for a reason that is not the lease's, leadership is lost
// or the server stops.
func (ka *keepAliveStream) send(lctx context.Context) error {
	for {
		select {
		case resp := <-ka.sendCh:
			if err := ka.stream.Send(resp); err != nil {
				return err
			}
		case err := <-ka.errCh:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return toStatus(err)
		case <-lctx.Done(): // leadership lost, or the node stops
			return toStatus(ka.s.notLeader())
		case <-ka.s.stop:
			return toStatus(ka.s.notLeader())
		}
	}
}

// receive reads the requests: an invalid one is refused on the stream, a
// valid one renewed.
func (ka *keepAliveStream) receive() {
	for {
		req, err := ka.stream.Recv()
		if err != nil {
			ka.fail(err)
			return
		}
		if resp := ka.refusal(req); resp != nil {
			if !ka.reply(resp) {
				return
			}
			continue
		}
		select {
		case ka.sem <- struct{}{}:
		case <-ka.done:
			return
		}
		if !ka.spawn(func() {
			defer func() { <-ka.sem }()
			if resp, err := ka.renew(req); err != nil {
				ka.fail(err)
			} else {
				ka.reply(resp)
			}
		}) {
			return
		}
	}
}

// spawn runs f as a renewal unless the stream stopped.
func (ka *keepAliveStream) spawn(f func()) bool {
	ka.mu.Lock()
	defer ka.mu.Unlock()
	if ka.stopped {
		return false
	}
	ka.renewals.Go(f)
	return true
}

// refusal is the answer to an invalid request (a field, or a lease the
// caller may not renew), or nil.
func (ka *keepAliveStream) refusal(req *coordv1.KeepAliveRequest) *coordv1.KeepAliveResponse {
	s := ka.s
	err := firstErr(checkName("name", req.GetName(), true), checkName("owner", req.GetOwner(), true),
		checkGeneration(req.GetGeneration()), s.checkTTL("ttl", req.GetTtlMs(), true),
		s.authorize(auth.CallerOf(ka.ctx), auth.OpLease, req.GetName(), false))
	if err == nil {
		return nil
	}
	resp := &coordv1.KeepAliveResponse{Name: req.GetName(), Generation: req.GetGeneration(), Seq: req.GetSeq(),
		Reason: coorderr.Name(coorderr.InvalidArgument), Message: err.Error()}
	if ae := (*auth.Error)(nil); errors.As(err, &ae) && ae.Kind == auth.PermissionDenied {
		resp.Reason = coorderr.Name(coorderr.PermissionDenied)
	}
	return resp
}

// renew renews one lease: the answer (ok, or the lease's definitive
// refusal), or an error that is no verdict on the lease (leadership moved,
// shutdown), which ends the stream so the client retries on the leader.
func (ka *keepAliveStream) renew(req *coordv1.KeepAliveRequest) (*coordv1.KeepAliveResponse, error) {
	resp := &coordv1.KeepAliveResponse{Name: req.GetName(), Generation: req.GetGeneration(), Seq: req.GetSeq()}
	l, err := ka.s.renew(ka.ctx, req.GetName(), req.GetOwner(), ka.identity, req.GetGeneration(), req.GetTtlMs(), nil)
	var rej *fsm.Rejection
	switch {
	case err == nil:
		resp.Ok, resp.ExpiresIn = true, pbtime.Dur(l.ExpiresAt-l.RenewedAt)
	case errors.As(err, &rej):
		resp.Reason, resp.Message, resp.Metadata = coorderr.Name(rej.Reason), rej.Message, rej.Metadata
	default:
		return nil, toStatus(err)
	}
	return resp, nil
}
