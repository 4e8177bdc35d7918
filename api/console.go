package api

import (
	"context"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/api/console"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The web console (package console) on the HTTP port under /ui/. It calls
// this node's own services through the in-process connection (inproc.go),
// as the gateway does: the caller's certificate identity, the rate limit,
// the access table and the ACL, forwarding to the leader and the error
// table all behave as for /v1/. No second authorization: Allowed asks the
// same ACL only to enable buttons.

func (s *Server) newConsole() (*console.Console, error) {
	conn := s.inprocConn()
	b := console.Backend{
		Coordinator: coordv1.NewCoordinatorClient(conn),
		Cluster:     coordv1.NewClusterClient(conn),
		Queue:       coordv1.NewQueueClient(conn),
		Schedules:   coordv1.NewSchedulesClient(conn),
		Watch:       s.consoleWatch,
		Identity:    func(ctx context.Context) string { return httpPeer(ctx).Identity },
		Allowed:     s.consoleAllowed,
		Counters:    s.consoleCounters,
	}
	return console.New(console.Config{Backend: b, TLS: s.authEnabled(), HTTPStatus: HTTPStatus,
		Clock: s.cfg.Clock, SampleInterval: s.cfg.ConsoleSampleInterval, StreamWriteTimeout: s.cfg.HTTPWriteTimeout, Logger: s.log})
}

// consoleHTTP serves /ui/ with the caller's identity, refusing callers
// without a verified certificate when TLS is on (as /v1/ does).
func (s *Server) consoleHTTP(c *console.Console) http.Handler {
	h := c.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := tlsutil.PeerOf(r.TLS)
		if s.authEnabled() && p.Identity == "" {
			http.Error(w, "401 unauthenticated: the console needs a client certificate signed by the cluster's CA, as the HTTP API does", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), httpIdentityKey{}, p)))
	})
}

// consoleAllowed asks the ACL (without logging or counting a denial)
// whether the caller may do op on name.
func (s *Server) consoleAllowed(ctx context.Context, op, name string) bool {
	if !s.authEnabled() {
		return true
	}
	c, err := auth.Authenticate(httpPeer(ctx), nil, s.node.IsMember)
	if err != nil {
		return false
	}
	acl := s.acl.Load()
	if acl == nil || c.Member {
		return true
	}
	if auth.Op(op) == auth.OpJob && acl.Authorize(c, auth.OpAdmin, "", false).Allowed {
		return true // authorizeManage: admins manage every queue
	}
	return acl.Authorize(c, auth.Op(op), name, false).Allowed
}

// consoleCounters are this node's per-queue counters.
func (s *Server) consoleCounters() map[string]console.Counters {
	st, _, err := s.node.Read(context.Background(), true)
	if err != nil || st == nil {
		return nil
	}
	out := map[string]console.Counters{}
	for _, q := range st.QueueStats("", s.node.CalendarTime()) {
		out[q.Queue] = console.Counters{Succeeded: q.QueueCounters.Succeeded, Failures: q.Failures}
	}
	return out
}

// consoleWatch runs the Watch service in process for the caller in ctx.
func (s *Server) consoleWatch(ctx context.Context, req *coordv1.WatchRequest, send func(*coordv1.WatchResponse) error) error {
	ctx, err := s.guard(ctx, httpPeer(ctx), false, coordv1.Watch_Watch_FullMethodName, req)
	if err != nil {
		return err
	}
	return s.watch.Watch(req, &localWatchStream{ctx: ctx, send: send})
}

// localWatchStream is a Watch stream in process. The service places
// pre-encoded events in a message's unknown fields (watch.go, send): a
// copy is decoded so that the receiver sees them as events.
type localWatchStream struct {
	grpc.ServerStream // nil: only Context and Send are used
	ctx               context.Context
	send              func(*coordv1.WatchResponse) error
}

func (l *localWatchStream) Context() context.Context { return l.ctx }

func (l *localWatchStream) Send(m *coordv1.WatchResponse) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	out := &coordv1.WatchResponse{}
	if err := proto.Unmarshal(b, out); err != nil {
		return err
	}
	return l.send(out)
}
