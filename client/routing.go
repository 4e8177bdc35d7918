package client

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/coordd/coordd/clock"
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
// 0.2 s at 110k; Members is a configuration read). The round is bounded by
// locateTimeout and ends at Close; its calls run on the client's
// background group, so Close waits for them.
func (c *Client) askLeader(candidates []string, suspect string) leaderInfo {
	ctx, cancel := context.WithTimeout(c.life, c.opts.locateTimeout)
	defer cancel()
	answers := make(chan memberAnswer, len(candidates))
	for _, ep := range candidates {
		c.bg.Go(func() { answers <- c.askMembers(ctx, ep) })
	}
	return lookupRound(ctx, c.clock, newTally(candidates, suspect, len(c.endpoints)), answers)
}

// lookupRound collects the answers of one round into t until t.settled:
// as soon as a self-declared leader has a majority of the endpoints behind
// it; otherwise once every node but the suspect answered — waiting up to
// suspectGrace (on clk) more for the named leader's own answer when it
// has not come yet — or when ctx ends.
func lookupRound(ctx context.Context, clk clock.Clock, t *tally, answers <-chan memberAnswer) leaderInfo {
	var grace <-chan time.Time
	for pending := len(t.candidates); pending > 0; {
		select {
		case a := <-answers:
			pending--
			t.add(a)
		case <-grace:
			pending = 0
		case <-ctx.Done():
			pending = 0
		}
		settled, wait := t.settled()
		if settled {
			break
		}
		if wait && grace == nil {
			// The named leader has not answered yet: slow, or frozen and
			// still named because the election has not happened yet. Wait
			// a little for its own word; the next round comes soon.
			timer := clk.NewTimer(suspectGrace)
			defer timer.Stop()
			grace = timer.C()
		}
	}
	return t.result()
}

// tally counts the answers of one lookup round. The leader is the one the
// most nodes name, a self-declared one first (then the lowest address).
type tally struct {
	candidates   []string
	suspect      string
	endpoints    int // the client's configured endpoints: a majority of them decides
	asked        map[string]bool
	others       int // candidates other than the suspect still to answer
	answered     map[string]bool
	votes        map[string]int
	selfDeclared map[string]bool
	reachable    []string
}

func newTally(candidates []string, suspect string, endpoints int) *tally {
	t := &tally{candidates: candidates, suspect: suspect, endpoints: endpoints, asked: map[string]bool{},
		answered: map[string]bool{}, votes: map[string]int{}, selfDeclared: map[string]bool{}}
	for _, ep := range candidates {
		t.asked[ep] = true
		if ep != suspect {
			t.others++
		}
	}
	return t
}

// add counts one node's answer.
func (t *tally) add(a memberAnswer) {
	t.answered[a.ep] = true
	if a.ep != t.suspect {
		t.others--
	}
	if !a.ok {
		return
	}
	t.reachable = append(t.reachable, a.ep)
	if a.leaderAddr != "" {
		t.votes[a.leaderAddr]++
		if a.self {
			t.selfDeclared[a.leaderAddr] = true
		}
	}
}

// best is the leader named so far, and whether it declared itself.
func (t *tally) best() (string, bool) {
	addr, self := "", false
	for a, n := range t.votes {
		if s := t.selfDeclared[a]; addr == "" || (s && !self) || (s == self && (n > t.votes[addr] || n == t.votes[addr] && a < addr)) {
			addr, self = a, s
		}
	}
	return addr, self
}

// settled reports whether the round can end now; wait, whether it should
// give the named leader suspectGrace to answer itself (every other node
// answered, the named leader was asked and has not).
func (t *tally) settled() (settled, wait bool) {
	addr, self := t.best()
	if self && t.votes[addr] > t.endpoints/2 {
		return true, false
	}
	if t.others > 0 {
		return false, false
	}
	if addr == "" || self || !t.asked[addr] || t.answered[addr] {
		return true, false
	}
	return false, true
}

// result is the round's outcome; reachable is in candidate order.
func (t *tally) result() leaderInfo {
	addr, self := t.best()
	reachable := slices.Clone(t.reachable)
	slices.SortFunc(reachable, func(a, b string) int {
		return slices.Index(t.candidates, a) - slices.Index(t.candidates, b)
	})
	return leaderInfo{addr: addr, self: self, reachable: reachable,
		trusted: addr != "" && (self || (!t.asked[addr] && addr != t.suspect))}
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
// response that names the leader (leaderHeader) moves the client there,
// and the attempt's probe (if any) learns whether the call got a
// connection to the node.
func (c *Client) observeLeader(ep string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var md metadata.MD
		var p peer.Peer // set once the call has a stream on a connection
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&md), grpc.Peer(&p))...)
		if probe, ok := ctx.Value(attemptProbeKey{}).(*attemptProbe); ok {
			probe.observed, probe.reached = true, p.Addr != nil
		}
		if v := md.Get(leaderHeader); len(v) > 0 && v[0] != "" && v[0] != ep {
			c.redirected(ep, v[0])
		}
		return err
	}
}
