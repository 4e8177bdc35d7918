// Package auth decides who a caller is and what it may do: identities from
// TLS client certificates, the ACL, and per-identity limits. It is a leaf:
// it imports neither the node nor the API, and builds no gRPC statuses; its
// refusals are *Error values that the API's one error table turns into
// statuses.
//
// The model (docs/security.md is the operator's view):
//
//   - With TLS off there are no identities: every caller is "" and the ACL
//     is not consulted. Limits still apply, to "" as one identity.
//   - With TLS on, every caller presents a certificate from the CA; its
//     identity (tlsutil.Identity) is the caller. A member that forwards a
//     call to the leader sends the original caller's identity along; the
//     leader believes it only from a cluster member (a node certificate,
//     tlsutil.NodeID, of a Raft server id), see Authenticate. A client
//     certificate named like a member is an ordinary identity.
//   - The ACL (when a file is configured) decides per call; members are not
//     subject to it. Without a file every authenticated identity is allowed.
//   - Owner binding is not here but in the FSM: commands carry the caller's
//     identity and a lease is bound to the identity that acquired it.
package auth

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/internal/tlsutil"
)

// Caller is who made a call, as established by Authenticate.
type Caller struct {
	Identity string
	// Forwarded: the call came through a member; Identity is the original
	// caller's.
	Forwarded bool
	// Member: the (effective) caller is a cluster member.
	Member bool
	// Node: the (effective) caller presented a node certificate
	// (tlsutil.NodeID), member or not; what an ACL rule with
	// node_certificates requires.
	Node bool
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf is the caller in ctx (the zero Caller when none was set).
func CallerOf(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// IdentityOf is the effective identity of the call in ctx ("" without TLS).
func IdentityOf(ctx context.Context) string { return CallerOf(ctx).Identity }

// Authenticate establishes the caller of a call made over a connection
// whose verified certificate is transport's (the zero Peer when the caller
// presented none). forwarded, when the call says a member forwarded it, is
// the original caller as the forwarding member saw it (Node: it was a
// member). isMember tells cluster members (Raft server ids): a caller is a
// member only with a node certificate of one (tlsutil.NodeID); a client
// certificate that carries a member's name is an ordinary identity.
func Authenticate(transport tlsutil.Peer, forwarded *tlsutil.Peer, isMember func(string) bool) (Caller, error) {
	if transport.Identity == "" {
		return Caller{}, &Error{Kind: Unauthenticated, Msg: "a client certificate signed by the cluster's CA is required"}
	}
	member := func(p tlsutil.Peer) bool { return p.Node && isMember(p.Identity) }
	c := Caller{Identity: transport.Identity, Member: member(transport), Node: transport.Node}
	if forwarded == nil {
		return c, nil
	}
	if !c.Member {
		return Caller{}, &Error{Kind: PermissionDenied,
			Msg:  fmt.Sprintf("%q is not a cluster member (a node certificate of a server of the configuration) and may not call on behalf of another identity", transport.Identity),
			Meta: map[string]string{"identity": transport.Identity}}
	}
	return Caller{Identity: forwarded.Identity, Forwarded: true, Member: member(*forwarded), Node: forwarded.Node}, nil
}

// Kind is the cause of an authentication, authorization or limit refusal.
type Kind int

// The kinds of refusal.
const (
	Unauthenticated  Kind = iota + 1 // no certificate the CA signed
	PermissionDenied                 // the ACL, or a non-member forwarding
	RateLimited                      // over the identity's request rate
	StreamLimit                      // the identity's KeepAlive streams on this node
	WaitLimit                        // the identity's waiting Acquire calls
	JobBytesLimited                  // over the identity's rate of job args bytes
	ScheduleQuota                    // the identity's schedules would be over their rate quotas
)

// Error is a refusal of this package. Meta carries facts a caller can act
// on (identity, op, name, rule); keys are stable.
type Error struct {
	Kind Kind
	Msg  string
	Meta map[string]string
}

func (e *Error) Error() string { return e.Msg }
