package client

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Leader routing. The client keeps a belief of which node leads (current)
// and whether it was learned or is only a fallback guess (known). It
// learns the leader from
//   - Members on the nodes (locate): at New, and whenever the believed
//     leader failed (NO_LEADER, a transport error, an attempt timeout, a
//     KeepAlive stream that broke or stalled);
//   - NOT_LEADER refusals carrying the leader's address (redirected);
//   - the leaderHeader a node may put on a response it forwarded.
//
// Writes and linearizable reads go to the believed leader; while none is
// known they go to the fallback endpoint, which forwards them.

// leaderHeader is the response header in which a node that forwarded a
// call to the leader names the leader's gRPC address. A client that sees
// it switches to the leader, so forwarding happens at most once per client
// and leader change.
const leaderHeader = "coordd-leader-address"

// Endpoint is the node the client currently sends calls to: the leader
// when it is known, otherwise the node it falls back to (any node
// forwards).
func (c *Client) Endpoint() string { return c.leaderEndpoint() }

func (c *Client) leaderEndpoint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// redirected records a leader address learned from a call to from
// (NOT_LEADER, the leader header).
func (c *Client) redirected(from, to string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == from || !c.known {
		c.current, c.known = to, true
	}
}

// leaderFailed records that ep did not serve a call as leader: it becomes
// the suspect, and the next call looks for the leader again and meanwhile
// falls back to the next configured endpoint.
func (c *Client) leaderFailed(ep string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.suspect = ep
	if c.current != ep {
		return // someone already moved on
	}
	c.known = false
	for i, e := range c.endpoints {
		if e == ep {
			c.current = c.endpoints[(i+1)%len(c.endpoints)]
			return
		}
	}
	c.current = c.endpoints[0]
}

// leader is the endpoint for the next attempt: the known leader, else the
// result of asking the nodes (joining a round in flight), else the
// fallback.
func (c *Client) leader(ctx context.Context) string {
	c.mu.Lock()
	cur, known := c.current, c.known
	c.mu.Unlock()
	if known {
		return cur
	}
	if info := c.locate(ctx); info.trusted {
		return info.addr
	}
	return c.leaderEndpoint()
}

// leaderInfo is the outcome of a lookup round.
type leaderInfo struct {
	addr string // the leader most nodes name; "" when none is named
	self bool   // it answered itself, as leader
	// trusted: a leader to use — it said so itself, or it is not one of
	// the nodes asked (nothing to check it against) and not the suspect.
	// Not a node the others name that did not answer (dead, or frozen: a
	// frozen leader is named until the others elect a new one).
	trusted   bool
	reachable []string // the nodes that answered
}

type locateCall struct {
	done chan struct{}
	info leaderInfo
}

// locate asks the nodes who leads (one round at a time per client;
// concurrent callers share it). A round lasts at most locateTimeout.
func (c *Client) locate(ctx context.Context) leaderInfo {
	lc := c.startLocate()
	if lc == nil {
		return leaderInfo{}
	}
	select {
	case <-lc.done:
		return lc.info
	case <-ctx.Done():
		return leaderInfo{}
	}
}

// startLocate starts a lookup round unless one is in flight, and returns
// it (nil after Close). A trusted answer becomes the client's leader;
// otherwise, while none is known, the fallback moves to a node that
// answered.
func (c *Client) startLocate() *locateCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if c.locating != nil {
		return c.locating
	}
	suspect := c.suspect
	lc := &locateCall{done: make(chan struct{})}
	c.locating = lc
	candidates := []string{}
	seen := map[string]bool{}
	for _, ep := range append([]string{c.current}, c.endpoints...) {
		if !seen[ep] {
			seen[ep] = true
			candidates = append(candidates, ep)
		}
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		info := c.askLeader(candidates, suspect)
		c.mu.Lock()
		lc.info = info
		c.locating = nil
		switch {
		case info.trusted:
			c.current, c.known = info.addr, true
			if c.suspect == suspect {
				c.suspect = ""
			}
		case !c.known && len(info.reachable) > 0 && !slices.Contains(info.reachable, c.current):
			c.current = info.reachable[0]
			for _, ep := range info.reachable {
				if ep != c.suspect {
					c.current = ep
					break
				}
			}
		}
		c.mu.Unlock()
		c.log.Debug("leader lookup", "leader", info.addr, "answered", info.self, "trusted", info.trusted,
			"suspect", suspect, "reachable", len(info.reachable))
		close(lc.done)
	}()
	return lc
}

// memberAnswer is what one node said: which member it is (when it can be
// told) and which it believes leads.
type memberAnswer struct {
	ep         string
	ok         bool
	leaderAddr string
	self       bool // the node names itself
}

// askLeader runs one round of Members calls over candidates (Members, not
// Status: Status hashes the whole state machine, 11–17 ms at 10k leases and
// 0.2 s at 110k; Members is a configuration read). The leader is the one
// the most nodes name, a self-declared one first. The round ends as soon
// as a self-declared leader has a majority of the endpoints behind it;
// otherwise once every node but the suspect answered — waiting up to
// suspectGrace more for the named leader's own answer when it has not
// come yet.
func (c *Client) askLeader(candidates []string, suspect string) leaderInfo {
	ctx, cancel := context.WithTimeout(c.life, c.opts.locateTimeout)
	defer cancel()
	answers := make(chan memberAnswer, len(candidates))
	for _, ep := range candidates {
		go func() { answers <- c.askMembers(ctx, ep) }()
	}
	asked := map[string]bool{}
	others := 0
	for _, ep := range candidates {
		asked[ep] = true
		if ep != suspect {
			others++
		}
	}
	answered := map[string]bool{}
	votes := map[string]int{}
	selfDeclared := map[string]bool{}
	var reachable []string
	best := func() (string, bool) {
		addr, self := "", false
		for a, n := range votes {
			if s := selfDeclared[a]; addr == "" || (s && !self) || (s == self && (n > votes[addr] || n == votes[addr] && a < addr)) {
				addr, self = a, s
			}
		}
		return addr, self
	}
	result := func() leaderInfo {
		addr, self := best()
		return leaderInfo{addr: addr, self: self, reachable: reachable,
			trusted: addr != "" && (self || (!asked[addr] && addr != suspect))}
	}
	var grace <-chan time.Time
	for pending := len(candidates); pending > 0; {
		select {
		case a := <-answers:
			pending--
			answered[a.ep] = true
			if a.ep != suspect {
				others--
			}
			if !a.ok {
				break
			}
			reachable = append(reachable, a.ep)
			if a.leaderAddr != "" {
				votes[a.leaderAddr]++
				if a.self {
					selfDeclared[a.leaderAddr] = true
				}
			}
		case <-grace:
			pending = 0
		case <-ctx.Done():
			pending = 0
		}
		addr, self := best()
		if self && votes[addr] > len(c.endpoints)/2 {
			break
		}
		if others == 0 {
			if addr == "" || self || !asked[addr] || answered[addr] {
				break
			}
			// The named leader has not answered yet: slow, or frozen and
			// still named because the election has not happened yet. Wait
			// a little for its own word; the next round comes soon.
			if grace == nil {
				t := time.NewTimer(suspectGrace)
				defer t.Stop()
				grace = t.C
			}
		}
	}
	slices.SortFunc(reachable, func(a, b string) int { return slices.Index(candidates, a) - slices.Index(candidates, b) })
	return result()
}

type leaderLookupKey struct{}

// IsLeaderLookup reports whether a call's context is one of the SDK's own
// leader lookups (Members calls on the endpoints), for interceptors that
// watch a command's attempts (coordctl) and should not count these.
func IsLeaderLookup(ctx context.Context) bool { return ctx.Value(leaderLookupKey{}) != nil }

// askMembers asks the node at ep for the members and reads which one it
// believes leads, and whether that is itself (its gRPC address is the one
// dialled or the connection's peer address).
func (c *Client) askMembers(ctx context.Context, ep string) memberAnswer {
	out := memberAnswer{ep: ep}
	cc, err := c.conn(ep)
	if err != nil {
		return out
	}
	var p peer.Peer
	ctx = context.WithValue(ctx, leaderLookupKey{}, true)
	resp, err := coordv1.NewClusterClient(cc).Members(ctx, &coordv1.MembersRequest{}, grpc.Peer(&p))
	if err != nil {
		return out
	}
	out.ok = true
	var selfID string
	for _, m := range resp.GetMembers() {
		if m.GetGrpcAddress() == ep || (p.Addr != nil && m.GetGrpcAddress() == p.Addr.String()) {
			selfID = m.GetId()
		}
	}
	if selfID != "" {
		c.mu.Lock()
		c.ids[selfID] = ep
		c.mu.Unlock()
	}
	for _, m := range resp.GetMembers() {
		if m.GetLeader() && m.GetGrpcAddress() != "" {
			out.leaderAddr = c.addressOf(m.GetId(), m.GetGrpcAddress())
			out.self = selfID != "" && m.GetId() == selfID
		}
	}
	return out
}

// suspectGrace is how long a lookup round waits for the named leader's
// own answer after the other nodes answered.
const suspectGrace = 100 * time.Millisecond

// addressOf prefers the address a node answered on (the one this client
// was given) over the address it advertises.
func (c *Client) addressOf(id, advertised string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ep, ok := c.ids[id]; ok {
		return ep
	}
	return advertised
}

// observeLeader is a unary interceptor on the connection to ep: a
// response that names the leader (leaderHeader) moves the client there.
func (c *Client) observeLeader(ep string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var md metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&md))...)
		if v := md.Get(leaderHeader); len(v) > 0 && v[0] != "" && v[0] != ep {
			c.redirected(ep, v[0])
		}
		return err
	}
}
