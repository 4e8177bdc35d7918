package api

import (
	"cmp"
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Authentication and authorization (see DESIGN.md, "Security", and the
// auth package for the model). This file is where the API meets it: the
// gRPC interceptors and the HTTP gateway call guard, which authenticates,
// rate-limits and authorizes a call against the access table methods.

// authEnabled reports whether calls carry identities (TLS is on).
func (s *Server) authEnabled() bool { return s.tls != nil }

// authenticate establishes the caller from the transport identity (the
// verified certificate's) and, for a member, the forwarded identity.
func (s *Server) authenticate(ctx context.Context, transportIdentity string, trustForwarding bool) (auth.Caller, error) {
	if !s.authEnabled() {
		return auth.Caller{}, nil
	}
	var fwd []string
	if trustForwarding {
		md, _ := metadata.FromIncomingContext(ctx)
		fwd = md.Get(identityKey)
	}
	if len(fwd) > 0 {
		return auth.Authenticate(transportIdentity, fwd[0], true, s.node.IsMember)
	}
	return auth.Authenticate(transportIdentity, "", false, s.node.IsMember)
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
// the returned context carries the caller. Its errors are statuses.
func (s *Server) guard(ctx context.Context, transportIdentity string, trustForwarding bool, method string, req any) (context.Context, error) {
	c, err := s.authenticate(ctx, transportIdentity, trustForwarding)
	if err != nil {
		s.metrics.authDenied.WithLabelValues("unauthenticated", "").Inc()
		return nil, toStatus(err)
	}
	// A forwarded call was counted where it entered; members are the
	// cluster itself.
	if !c.Forwarded && !c.Member {
		if err := s.limits.Allow(c.Identity); err != nil {
			s.metrics.limited.WithLabelValues("rate").Inc()
			return nil, toStatus(err)
		}
	}
	if err := s.authorizeMethod(c, method, req); err != nil {
		return nil, toStatus(err)
	}
	return auth.WithCaller(ctx, c), nil
}

// methodAccess says which op a method needs and on what name.
type methodAccess struct {
	op   auth.Op
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

// putScheduleQueue is the queue a put makes jobs in ("" without a spec:
// the handler refuses it).
func putScheduleQueue(r *coordv1.PutScheduleRequest) string {
	if r.GetSpec() == nil {
		return ""
	}
	return cmp.Or(r.GetSpec().GetJob().GetQueue(), fsm.DefaultQueue)
}

// methods is the access table; a method of ours missing from it is admin.
var methods = map[string]methodAccess{
	coordv1.Coordinator_Acquire_FullMethodName:        {op: auth.OpLease, name: nameOf((*coordv1.AcquireRequest).GetName)},
	coordv1.Coordinator_Renew_FullMethodName:          {op: auth.OpLease, name: nameOf((*coordv1.RenewRequest).GetName)},
	coordv1.Coordinator_Release_FullMethodName:        {op: auth.OpLease, name: nameOf((*coordv1.ReleaseRequest).GetName)},
	coordv1.Coordinator_KeepAlive_FullMethodName:      {op: auth.OpLease, name: noName},
	coordv1.Coordinator_ClaimWindow_FullMethodName:    {op: auth.OpWindow, name: nameOf((*coordv1.ClaimWindowRequest).GetJob)},
	coordv1.Coordinator_CompleteWindow_FullMethodName: {op: auth.OpWindow, name: nameOf((*coordv1.CompleteWindowRequest).GetJob)},
	coordv1.Coordinator_FencedCommit_FullMethodName:   {op: auth.OpFence, name: nameOf((*coordv1.FencedCommitRequest).GetResource)},
	coordv1.Coordinator_GetLease_FullMethodName:       {op: auth.OpRead, name: nameOf((*coordv1.GetLeaseRequest).GetName)},
	coordv1.Coordinator_ListLeases_FullMethodName:     {op: auth.OpRead, name: nameOf((*coordv1.ListLeasesRequest).GetPrefix), list: true},
	coordv1.Coordinator_GetWindow_FullMethodName:      {op: auth.OpRead, name: nameOf((*coordv1.GetWindowRequest).GetJob)},
	coordv1.Coordinator_ListWindows_FullMethodName:    {op: auth.OpRead, name: nameOf((*coordv1.ListWindowsRequest).GetJob), list: true},
	coordv1.Coordinator_GetResource_FullMethodName:    {op: auth.OpRead, name: nameOf((*coordv1.GetResourceRequest).GetResource)},
	// Schedules: a put makes jobs in the template's queue (op job on it);
	// pause, resume, trigger and delete are checked on the leader against
	// the schedule's queue (schedules.go); reads by schedule name.
	coordv1.Schedules_PutSchedule_FullMethodName:      {op: opJob, name: nameOf(putScheduleQueue)},
	coordv1.Schedules_PauseSchedule_FullMethodName:    {op: opJob, name: noName},
	coordv1.Schedules_ResumeSchedule_FullMethodName:   {op: opJob, name: noName},
	coordv1.Schedules_TriggerSchedule_FullMethodName:  {op: opJob, name: noName},
	coordv1.Schedules_DeleteSchedule_FullMethodName:   {op: opJob, name: noName},
	coordv1.Schedules_GetSchedule_FullMethodName:      {op: auth.OpRead, name: nameOf((*coordv1.GetScheduleRequest).GetName)},
	coordv1.Schedules_ListSchedules_FullMethodName:    {op: auth.OpRead, name: nameOf((*coordv1.ListSchedulesRequest).GetPrefix), list: true},
	coordv1.Schedules_ListOverdue_FullMethodName:      {op: auth.OpRead, name: nameOf((*coordv1.ListOverdueRequest).GetSchedule), list: true},
	coordv1.Cluster_Status_FullMethodName:             {open: true},
	coordv1.Cluster_Members_FullMethodName:            {open: true},
	coordv1.Cluster_AddVoter_FullMethodName:           {op: auth.OpAdmin, name: noName},
	coordv1.Cluster_RemoveServer_FullMethodName:       {op: auth.OpAdmin, name: noName},
	coordv1.Cluster_TransferLeadership_FullMethodName: {op: auth.OpAdmin, name: noName},
	coordv1.Cluster_Snapshot_FullMethodName:           {op: auth.OpAdmin, name: noName},
}

func (s *Server) authorizeMethod(c auth.Caller, method string, req any) error {
	if !s.authEnabled() || c.Member {
		return nil
	}
	acc, ok := methods[method]
	if !ok {
		if !strings.HasPrefix(method, "/coord.") {
			return nil // health and reflection: any authenticated identity
		}
		acc = methodAccess{op: auth.OpAdmin, name: noName}
	}
	if acc.open {
		return nil
	}
	if method == coordv1.Coordinator_KeepAlive_FullMethodName {
		return nil // each message is authorized on its own
	}
	name := acc.name(req)
	if name == "" && !acc.list && acc.op != auth.OpAdmin {
		// Every such call requires its name: the handler refuses it as
		// InvalidArgument, which tells the caller more than a denial.
		return nil
	}
	if err := s.authorize(c.Identity, acc.op, name, acc.list); err != nil {
		return err
	}
	if r, ok := req.(*coordv1.AcquireRequest); ok && r.GetClaim() != nil && r.GetClaim().GetJob() != "" {
		return s.authorize(c.Identity, auth.OpWindow, r.GetClaim().GetJob(), false) // acquire-and-claim is also a claim
	}
	return nil
}

// authorize applies the ACL; a denial is an *auth.Error naming the rule.
func (s *Server) authorize(identity string, op auth.Op, name string, list bool) error {
	acl := s.acl.Load()
	if !s.authEnabled() || acl == nil {
		return nil
	}
	d, err := acl.Check(identity, op, name, list)
	if err != nil {
		s.metrics.authDenied.WithLabelValues(string(op), d.Rule).Inc()
		s.log.Warn("permission denied", "identity", identity, "op", op, "name", name, "rule", d.Rule)
	}
	return err
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
		release, err := s.limits.OpenStream(auth.IdentityOf(ctx))
		if err != nil {
			s.metrics.limited.WithLabelValues("keepalive_streams").Inc()
			return toStatus(err)
		}
		defer release()
	}
	return handler(srv, &guardedStream{ServerStream: ss, ctx: ctx})
}
