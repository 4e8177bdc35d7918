package api

import (
	"context"

	"github.com/coordd/coordd/delivery"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// startDelivery runs this node's deliverer (package delivery,
// docs/delivery.md) until Close: a pull worker of the delivery lane that
// calls this node's own Queue service in process as the node itself (a
// member: the access table lets it fetch targeted jobs), so its calls
// are forwarded to the leader like any worker's. Close cancels the
// requests in flight; their attempts lapse and are delivered again.
// A node without an allow-list delivers nothing (no target could name it).
func (s *Server) startDelivery() {
	if s.cfg.Delivery.Allow.Empty() || s.cfg.Delivery.Concurrency < 0 {
		return
	}
	id := s.node.ID()
	opts := s.cfg.Delivery
	if opts.TracerProvider == nil {
		opts.TracerProvider = s.cfg.TracerProvider // the API's unless the delivery has its own
	}
	d := delivery.New(coordv1.NewQueueClient(s.inprocConn()), "coordd-delivery/"+id, opts, s.cfg.Clock,
		s.log.With("service", "delivery"), delivery.NewMetrics(s.cfg.Metrics))
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), httpIdentityKey{}, tlsutil.Peer{Identity: id, Node: true}))
	s.wg.Go(func() {
		<-s.stop
		cancel()
	})
	s.wg.Go(func() { d.Run(ctx) })
}
