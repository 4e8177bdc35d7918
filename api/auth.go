package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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

// authenticate establishes the caller from the transport's verified
// certificate and, for a member, the forwarded identity.
func (s *Server) authenticate(ctx context.Context, transport tlsutil.Peer, trustForwarding bool) (auth.Caller, error) {
	if !s.authEnabled() {
		return auth.Caller{}, nil
	}
	if trustForwarding {
		if fwd, ok := forwardedCaller(ctx); ok {
			return auth.Authenticate(transport, &fwd, s.node.IsMember)
		}
	}
	return auth.Authenticate(transport, nil, s.node.IsMember)
}

// grpcPeer is the verified certificate of a gRPC peer.
func grpcPeer(ctx context.Context) tlsutil.Peer {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tlsutil.Peer{}
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return tlsutil.Peer{}
	}
	return tlsutil.PeerOf(&info.State)
}

// guard authenticates, rate-limits and authorizes one call of method;
// the returned context carries the caller. Its errors are statuses.
func (s *Server) guard(ctx context.Context, transport tlsutil.Peer, trustForwarding bool, method string, req any) (context.Context, error) {
	c, err := s.authenticate(ctx, transport, trustForwarding)
	if err != nil {
		s.metrics.authDenied.WithLabelValues("unauthenticated", "").Inc()
		return nil, toStatus(err)
	}
	// A call is counted on the node it enters, and a forwarded one again
	// on the leader: every write of an identity, through whichever node,
	// comes out of its one bucket there (cluster-wide), while reads a
	// follower serves (stale) are counted on that follower only. Members
	// are the cluster itself.
	if !c.Member && (!c.Forwarded || s.node.Leading()) {
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
	// names, when set, replaces name: the call needs op on each of them
	// (a Submit's queues, a Fetch's).
	names func(req any) []string
	list  bool
	open  bool // any authenticated identity (cluster topology, health)
	// bound: the FSM binds the call to the identity that fetched the
	// attempt (IDENTITY_MISMATCH), so no ACL check (Heartbeat, Complete, Fail).
	bound bool
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
	// Schedules: a put makes jobs in the template's queue (op job on it),
	// and a put that replaces a live schedule is also checked on the
	// leader against that schedule's queue; pause, resume, trigger and
	// delete are checked on the leader against the schedule's queue
	// (schedules.go: the command's guard holds it until the apply); reads
	// by schedule name.
	coordv1.Schedules_PutSchedule_FullMethodName:     {op: auth.OpJob, name: nameOf(putScheduleQueue)},
	coordv1.Schedules_PauseSchedule_FullMethodName:   {op: auth.OpJob, name: noName},
	coordv1.Schedules_ResumeSchedule_FullMethodName:  {op: auth.OpJob, name: noName},
	coordv1.Schedules_TriggerSchedule_FullMethodName: {op: auth.OpJob, name: noName},
	coordv1.Schedules_DeleteSchedule_FullMethodName:  {op: auth.OpJob, name: noName},
	coordv1.Schedules_GetSchedule_FullMethodName:     {op: auth.OpRead, name: nameOf((*coordv1.GetScheduleRequest).GetName)},
	coordv1.Schedules_ListSchedules_FullMethodName:   {op: auth.OpRead, name: nameOf((*coordv1.ListSchedulesRequest).GetPrefix), list: true},
	coordv1.Schedules_ListOverdue_FullMethodName:     {op: auth.OpRead, name: nameOf((*coordv1.ListOverdueRequest).GetSchedule), list: true},
	// The queue: ops job (Submit; Cancel and Retry, checked on the leader
	// against the job's queue) and work (Fetch) by queue name; read for
	// Get (the job's queue, checked where the read runs), List and Stats
	// (the queue asked for; without one, a list of everything).
	coordv1.Queue_Submit_FullMethodName:    {op: auth.OpJob, names: submitQueues},
	coordv1.Queue_Cancel_FullMethodName:    {op: auth.OpJob, name: noName},
	coordv1.Queue_Retry_FullMethodName:     {op: auth.OpJob, name: noName},
	coordv1.Queue_Fetch_FullMethodName:     {op: auth.OpWork, names: fetchQueues},
	coordv1.Queue_Heartbeat_FullMethodName: {bound: true},
	coordv1.Queue_Complete_FullMethodName:  {bound: true},
	coordv1.Queue_Fail_FullMethodName:      {bound: true},
	coordv1.Queue_Get_FullMethodName:       {op: auth.OpRead, name: noName},
	coordv1.Queue_List_FullMethodName:      {op: auth.OpRead, name: nameOf((*coordv1.QueueListRequest).GetQueue), list: true},
	coordv1.Queue_Stats_FullMethodName:     {op: auth.OpRead, name: nameOf((*coordv1.QueueStatsRequest).GetQueue), list: true},
	coordv1.Queue_SetTarget_FullMethodName: {op: auth.OpJob, name: nameOf((*coordv1.QueueSetTargetRequest).GetQueue)},
	coordv1.Queue_Targets_FullMethodName:   {op: auth.OpRead, name: nameOf((*coordv1.QueueTargetsRequest).GetQueue), list: true},
	coordv1.Queue_Pause_FullMethodName:     {op: auth.OpJob, name: nameOf((*coordv1.QueuePauseRequest).GetQueue)},
	coordv1.Queue_Resume_FullMethodName:    {op: auth.OpJob, name: nameOf((*coordv1.QueueResumeRequest).GetQueue)},
	// Delete is checked on the leader against the job's queue, Bulk
	// there against its filter's queue (none: the admin op); a bulk
	// operation is read by its filter's queue.
	coordv1.Queue_Delete_FullMethodName:               {op: auth.OpJob, name: noName},
	coordv1.Queue_Bulk_FullMethodName:                 {op: auth.OpJob, name: nameOf(bulkQueue)},
	coordv1.Queue_Workers_FullMethodName:              {op: auth.OpRead, name: noName}, // the handler shows the queues the caller may read
	coordv1.Queue_GetBulk_FullMethodName:              {op: auth.OpRead, name: noName},
	coordv1.Queue_ListBulk_FullMethodName:             {op: auth.OpRead, name: noName}, // the handler lists what the caller may read
	coordv1.Queue_SetLimits_FullMethodName:            {op: auth.OpAdmin, name: noName},
	coordv1.Queue_Limits_FullMethodName:               {op: auth.OpRead, name: nameOf((*coordv1.QueueLimitsRequest).GetQueue), list: true},
	coordv1.Cluster_Status_FullMethodName:             {open: true},
	coordv1.Cluster_Members_FullMethodName:            {open: true},
	coordv1.Cluster_AddVoter_FullMethodName:           {op: auth.OpAdmin, name: noName},
	coordv1.Cluster_RemoveServer_FullMethodName:       {op: auth.OpAdmin, name: noName},
	coordv1.Cluster_TransferLeadership_FullMethodName: {op: auth.OpAdmin, name: noName},
	coordv1.Cluster_Snapshot_FullMethodName:           {op: auth.OpAdmin, name: noName},
	coordv1.Cluster_SaveSnapshot_FullMethodName:       {op: auth.OpAdmin, name: noName}, // the whole state
	coordv1.Cluster_Clock_FullMethodName:              {op: auth.OpAdmin, name: noName}, // the leader's probe (a member)
	coordv1.Cluster_Config_FullMethodName:             {op: auth.OpAdmin, name: noName},
	// The prefix is in the request, which a stream's handler receives: it
	// authorizes it (read, as a list of the prefix).
	coordv1.Watch_Watch_FullMethodName: {op: auth.OpRead, name: noName, list: true},
}

func (s *Server) authorizeMethod(c auth.Caller, method string, req any) error {
	if !s.authEnabled() || c.Member {
		return nil
	}
	acc, ok := methods[method]
	list := acc.list
	if !ok {
		if !strings.HasPrefix(method, "/coord.") {
			return nil // health and reflection: any authenticated identity
		}
		acc = methodAccess{op: auth.OpAdmin, name: noName}
	}
	if acc.open || acc.bound {
		return nil
	}
	if acc.names != nil {
		return s.authorizeEach(c, acc.op, acc.names(req))
	}
	if method == coordv1.Coordinator_KeepAlive_FullMethodName || method == coordv1.Watch_Watch_FullMethodName {
		return nil // each message (the watch's request) is authorized on its own
	}
	name := acc.name(req)
	if acc.list && name != "" && isQueueRead(method) {
		list = false // a queue filter names one queue, not a prefix
	}
	if name == "" && !acc.list && acc.op != auth.OpAdmin {
		// Every such call requires its name: the handler refuses it as
		// InvalidArgument, which tells the caller more than a denial.
		return nil
	}
	if err := s.authorize(c, acc.op, name, list); err != nil {
		return err
	}
	if r, ok := req.(*coordv1.AcquireRequest); ok && r.GetClaim() != nil && r.GetClaim().GetJob() != "" {
		return s.authorize(c, auth.OpWindow, r.GetClaim().GetJob(), false) // acquire-and-claim is also a claim
	}
	return nil
}

// submitQueues are the queues a Submit adds to (an empty queue is the
// default one).
func submitQueues(r any) []string {
	req, _ := r.(*coordv1.QueueSubmitRequest)
	var out []string
	for _, j := range req.GetJobs() {
		q := j.GetQueue()
		if q == "" {
			q = fsm.DefaultQueue
		}
		out = append(out, q)
	}
	return out
}

func fetchQueues(r any) []string {
	req, _ := r.(*coordv1.QueueFetchRequest)
	return req.GetQueues()
}

func isQueueRead(method string) bool {
	return method == coordv1.Queue_List_FullMethodName || method == coordv1.Queue_Stats_FullMethodName
}

// authorizeEach authorizes op on every distinct name (empty ones are the
// handler's to refuse).
func (s *Server) authorizeEach(c auth.Caller, op auth.Op, names []string) error {
	seen := map[string]bool{}
	for _, name := range names {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		if err := s.authorize(c, op, name, false); err != nil {
			return err
		}
	}
	return nil
}

// authorizeExisting authorizes an operator's action on an existing job or
// schedule (authorizeManage: the job op on its queue, or admin); see
// hideName for the denial.
func (s *Server) authorizeExisting(ctx context.Context, queue, what string) error {
	return hideName(s.authorizeManage(ctx, queue), what)
}

// hideName rewords a denial of an action on an existing object without the
// name the ACL checked (the object's queue, which may be another tenant's:
// the caller named the object only by id or schedule name, what). Neither
// message nor metadata names it; the server's log line and metric do.
func hideName(err error, what string) error {
	var ae *auth.Error
	if !errors.As(err, &ae) || ae.Kind != auth.PermissionDenied {
		return err
	}
	meta := maps.Clone(ae.Meta)
	delete(meta, "name")
	return &auth.Error{Kind: ae.Kind, Meta: meta,
		Msg: fmt.Sprintf("identity %q may not %s in the queue of %s (ACL rule %q)", meta["identity"], meta["op"], what, meta["rule"])}
}

// authorize applies the ACL to caller c; a denial is an *auth.Error naming
// the rule.
func (s *Server) authorize(c auth.Caller, op auth.Op, name string, list bool) error {
	acl := s.acl.Load()
	if !s.authEnabled() || acl == nil {
		return nil
	}
	d, err := acl.Check(c, op, name, list)
	if err != nil {
		s.metrics.authDenied.WithLabelValues(string(op), d.Rule).Inc()
		s.log.Warn("permission denied", "identity", c.Identity, "node_certificate", c.Node, "op", op, "name", name, "rule", d.Rule)
	}
	return err
}

func (s *Server) unaryGuard(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.guard(ctx, grpcPeer(ctx), true, info.FullMethod, req)
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
	ctx, err := s.guard(ss.Context(), grpcPeer(ss.Context()), true, info.FullMethod, nil)
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
