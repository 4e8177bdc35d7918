package server

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Authentication and authorization (see DESIGN.md, "Security"):
//
//   - With TLS off there are no identities: every caller is "" and the ACL
//     is not consulted. Limits still apply, to "" as one identity.
//   - With TLS on, every gRPC client presents a certificate from the CA; its
//     identity (tlsutil.Identity) is the caller. A follower that forwards a
//     call to the leader sends the caller's identity in identityKey; the
//     leader believes it only from a cluster member (an identity equal to a
//     Raft server id).
//   - The ACL (when a file is configured) decides per call; members are not
//     subject to it. Without a file every authenticated identity is allowed.
//   - Owner binding is in the FSM: commands carry the caller's identity.

// identityKey is the metadata key a forwarding member puts the original
// caller's identity under.
const identityKey = "coordd-identity"

// caller is who made a call, as established by authenticate.
type caller struct {
	identity  string
	forwarded bool // the call came through a member; identity is the original caller's
	member    bool // the (effective) caller is a cluster member
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// identityOf is the effective identity of the call in ctx ("" without TLS).
func identityOf(ctx context.Context) string {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c.identity
}

// authEnabled reports whether calls carry identities (TLS is on).
func (s *Server) authEnabled() bool { return s.tls != nil }

// isMember reports whether identity is a server id of the Raft configuration.
func (s *Server) isMember(identity string) bool {
	if identity == "" {
		return false
	}
	for _, srv := range s.raft.GetConfiguration().Configuration().Servers {
		if string(srv.ID) == identity {
			return true
		}
	}
	return false
}

// authenticate establishes the caller from the transport identity (the
// verified certificate's) and, for a member, the forwarded identity.
func (s *Server) authenticate(ctx context.Context, transportIdentity string, trustForwarding bool) (caller, error) {
	if !s.authEnabled() {
		return caller{}, nil
	}
	if transportIdentity == "" {
		return caller{}, withInfo(codes.Unauthenticated, "a client certificate signed by the cluster's CA is required",
			coorderr.Unauthenticated, nil)
	}
	c := caller{identity: transportIdentity, member: s.isMember(transportIdentity)}
	if !trustForwarding {
		return c, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if fwd := md.Get(identityKey); len(fwd) > 0 {
		if !c.member {
			return caller{}, withInfo(codes.PermissionDenied,
				fmt.Sprintf("%q is not a cluster member and may not call on behalf of another identity", transportIdentity),
				coorderr.PermissionDenied, map[string]string{"identity": transportIdentity})
		}
		return caller{identity: fwd[0], forwarded: true, member: s.isMember(fwd[0])}, nil
	}
	return c, nil
}

// grpcIdentity is the verified certificate identity of a gRPC peer.
func grpcIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return ""
	}
	return tlsutil.IdentityOf(&info.State)
}

// guard authenticates, rate-limits and authorizes one call of method;
// the returned context carries the caller.
func (s *Server) guard(ctx context.Context, transportIdentity string, trustForwarding bool, method string, req any) (context.Context, error) {
	c, err := s.authenticate(ctx, transportIdentity, trustForwarding)
	if err != nil {
		s.metrics.authDenied.WithLabelValues("unauthenticated", "").Inc()
		return nil, err
	}
	// A forwarded call was counted where it entered; members are the
	// cluster itself.
	if !c.forwarded && !c.member {
		if err := s.limits.allow(c.identity); err != nil {
			s.metrics.limited.WithLabelValues("rate").Inc()
			return nil, err
		}
	}
	if err := s.authorizeMethod(c, method, req); err != nil {
		return nil, err
	}
	return withCaller(ctx, c), nil
}

// methodAccess says which op a method needs and on what name.
type methodAccess struct {
	op   Op
	name func(req any) string
	list bool
	open bool // any authenticated identity (cluster topology, health)
}

func nameOf[Req any](f func(Req) string) func(any) string {
	return func(r any) string {
		if x, ok := r.(Req); ok {
			return f(x)
		}
		return ""
	}
}

// noName is the name of calls that are not about one name.
func noName(any) string { return "" }

// methods is the access table; a method of ours missing from it is admin.
var methods = map[string]methodAccess{
	coordv1.Coordinator_Acquire_FullMethodName:        {op: OpLease, name: nameOf((*coordv1.AcquireRequest).GetName)},
	coordv1.Coordinator_Renew_FullMethodName:          {op: OpLease, name: nameOf((*coordv1.RenewRequest).GetName)},
	coordv1.Coordinator_Release_FullMethodName:        {op: OpLease, name: nameOf((*coordv1.ReleaseRequest).GetName)},
	coordv1.Coordinator_KeepAlive_FullMethodName:      {op: OpLease, name: noName},
	coordv1.Coordinator_ClaimWindow_FullMethodName:    {op: OpWindow, name: nameOf((*coordv1.ClaimWindowRequest).GetJob)},
	coordv1.Coordinator_CompleteWindow_FullMethodName: {op: OpWindow, name: nameOf((*coordv1.CompleteWindowRequest).GetJob)},
	coordv1.Coordinator_FencedCommit_FullMethodName:   {op: OpFence, name: nameOf((*coordv1.FencedCommitRequest).GetResource)},
	coordv1.Coordinator_GetLease_FullMethodName:       {op: OpRead, name: nameOf((*coordv1.GetLeaseRequest).GetName)},
	coordv1.Coordinator_ListLeases_FullMethodName:     {op: OpRead, name: nameOf((*coordv1.ListLeasesRequest).GetPrefix), list: true},
	coordv1.Coordinator_GetWindow_FullMethodName:      {op: OpRead, name: nameOf((*coordv1.GetWindowRequest).GetJob)},
	coordv1.Coordinator_ListWindows_FullMethodName:    {op: OpRead, name: nameOf((*coordv1.ListWindowsRequest).GetJob), list: true},
	coordv1.Coordinator_GetResource_FullMethodName:    {op: OpRead, name: nameOf((*coordv1.GetResourceRequest).GetResource)},
	coordv1.Jobs_RegisterJob_FullMethodName:           {op: OpWindow, name: nameOf(func(r *coordv1.RegisterJobRequest) string { return r.GetSpec().GetName() })},
	coordv1.Jobs_ListJobs_FullMethodName:              {op: OpRead, name: noName, list: true},
	coordv1.Jobs_JobStatus_FullMethodName:             {op: OpRead, name: nameOf((*coordv1.JobStatusRequest).GetName)},
	coordv1.Jobs_ListOverdue_FullMethodName:           {op: OpRead, name: noName, list: true},
	coordv1.Cluster_Status_FullMethodName:             {open: true},
	coordv1.Cluster_Members_FullMethodName:            {open: true},
	coordv1.Cluster_AddVoter_FullMethodName:           {op: OpAdmin, name: noName},
	coordv1.Cluster_RemoveServer_FullMethodName:       {op: OpAdmin, name: noName},
	coordv1.Cluster_TransferLeadership_FullMethodName: {op: OpAdmin, name: noName},
	coordv1.Cluster_Snapshot_FullMethodName:           {op: OpAdmin, name: noName},
}

func (s *Server) authorizeMethod(c caller, method string, req any) error {
	if !s.authEnabled() || c.member {
		return nil
	}
	acc, ok := methods[method]
	if !ok {
		if !strings.HasPrefix(method, "/coord.") {
			return nil // health and reflection: any authenticated identity
		}
		acc = methodAccess{op: OpAdmin, name: noName}
	}
	if acc.open {
		return nil
	}
	if method == coordv1.Coordinator_KeepAlive_FullMethodName {
		return nil // each message is authorized on its own
	}
	name := acc.name(req)
	if name == "" && !acc.list && acc.op != OpAdmin {
		// Every such call requires its name: the handler refuses it as
		// InvalidArgument, which tells the caller more than a denial.
		return nil
	}
	if err := s.authorize(c.identity, acc.op, name, acc.list); err != nil {
		return err
	}
	if r, ok := req.(*coordv1.AcquireRequest); ok && r.GetClaim() != nil && r.GetClaim().GetJob() != "" {
		return s.authorize(c.identity, OpWindow, r.GetClaim().GetJob(), false) // acquire-and-claim is also a claim
	}
	return nil
}

// authorize applies the ACL; a denial is PermissionDenied naming the rule.
func (s *Server) authorize(identity string, op Op, name string, list bool) error {
	acl := s.acl.Load()
	if !s.authEnabled() || acl == nil {
		return nil
	}
	d := acl.Authorize(identity, op, name, list)
	if d.Allowed {
		return nil
	}
	s.metrics.authDenied.WithLabelValues(string(op), d.Rule).Inc()
	what := fmt.Sprintf("%q", name)
	if list {
		what = fmt.Sprintf("names under %q", name)
	}
	if op == OpAdmin {
		what = "the cluster"
	}
	msg := fmt.Sprintf("identity %q may not %s %s (ACL rule %q)", identity, op, what, d.Rule)
	s.log.Warn("permission denied", "identity", identity, "op", op, "name", name, "rule", d.Rule)
	return withInfo(codes.PermissionDenied, msg, coorderr.PermissionDenied,
		map[string]string{"identity": identity, "op": string(op), "name": name, "rule": d.Rule})
}

func (s *Server) unaryGuard(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.guard(ctx, grpcIdentity(ctx), true, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

type guardedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (g *guardedStream) Context() context.Context { return g.ctx }

func (s *Server) streamGuard(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.guard(ss.Context(), grpcIdentity(ss.Context()), true, info.FullMethod, nil)
	if err != nil {
		return err
	}
	if info.FullMethod == coordv1.Coordinator_KeepAlive_FullMethodName {
		release, err := s.limits.openStream(identityOf(ctx))
		if err != nil {
			s.metrics.limited.WithLabelValues("keepalive_streams").Inc()
			return err
		}
		defer release()
	}
	return handler(srv, &guardedStream{ServerStream: ss, ctx: ctx})
}

// Limits are per-identity caps; zero means unlimited.
type Limits struct {
	// LeasesPerIdentity caps the live leases one identity holds (enforced
	// in the FSM, exactly, as Acquire's max_live_leases).
	LeasesPerIdentity uint32
	// RequestsPerSecond and Burst rate-limit calls (and KeepAlive stream
	// opens) per identity on the node a call enters. Excess calls are
	// refused at once with ResourceExhausted, never queued.
	RequestsPerSecond float64
	Burst             int
	// KeepAliveStreams caps open KeepAlive streams per identity on a node.
	KeepAliveStreams int
	// WaitingAcquires caps Acquire calls with wait queued per identity on
	// the leader (each holds a call open until it is granted).
	WaitingAcquires int
}

// limiter holds the per-identity rate limiters and stream counts.
type limiter struct {
	cfg     Limits
	mu      sync.Mutex
	rates   map[string]*rate.Limiter
	streams map[string]int
	waits   map[string]int
}

func newLimiter(cfg Limits) *limiter {
	return &limiter{cfg: cfg, rates: map[string]*rate.Limiter{}, streams: map[string]int{}, waits: map[string]int{}}
}

func (l *limiter) allow(identity string) error {
	if l.cfg.RequestsPerSecond <= 0 {
		return nil
	}
	l.mu.Lock()
	r := l.rates[identity]
	if r == nil {
		burst := l.cfg.Burst
		if burst <= 0 {
			burst = max(1, int(l.cfg.RequestsPerSecond))
		}
		r = rate.NewLimiter(rate.Limit(l.cfg.RequestsPerSecond), burst)
		l.rates[identity] = r
	}
	l.mu.Unlock()
	if r.Allow() {
		return nil
	}
	return withInfo(codes.ResourceExhausted,
		fmt.Sprintf("identity %q is over its request rate (%g/s, burst %d); retry later", identity, l.cfg.RequestsPerSecond, r.Burst()),
		coorderr.RateLimited, map[string]string{"identity": identity})
}

func (l *limiter) openStream(identity string) (func(), error) {
	return l.hold(l.streams, l.cfg.KeepAliveStreams, identity, coorderr.StreamLimit, "KeepAlive streams open on this node")
}

func (l *limiter) startWait(identity string) (func(), error) {
	return l.hold(l.waits, l.cfg.WaitingAcquires, identity, coorderr.WaitLimit, "waiting Acquire calls")
}

// hold counts one more open thing of identity in counts, up to limit (0:
// unlimited); the returned function gives it back.
func (l *limiter) hold(counts map[string]int, limit int, identity string, reason coorderr.Reason, what string) (func(), error) {
	if limit <= 0 {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if counts[identity] >= limit {
		return nil, withInfo(codes.ResourceExhausted,
			fmt.Sprintf("identity %q already has %d %s, its limit", identity, limit, what),
			reason, map[string]string{"identity": identity})
	}
	counts[identity]++
	return func() {
		l.mu.Lock()
		if counts[identity]--; counts[identity] == 0 {
			delete(counts, identity)
		}
		l.mu.Unlock()
	}, nil
}
