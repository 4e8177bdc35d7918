package client

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Leader routing. The client keeps a belief of which node leads (current)
// and whether it was learned or is only a fallback guess (known). It
// learns the leader from
//   - Status on the nodes (locate): at New, and whenever the believed
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

// leaderInfo is the outcome of a Status round.
type leaderInfo struct {
	addr string // the leader's address; "" when no node named one
	self bool   // the leader itself answered, as leader
	// trusted: a leader to use. Not when the others name the suspect and
	// it did not answer itself: they may not have noticed yet that it is
	// gone (a frozen leader is named until the election).
	trusted bool
}

type locateCall struct {
	done chan struct{}
	info leaderInfo
}

// locate asks every node for its Status (one round at a time per client;
// concurrent callers share it) and returns who leads. The suspect (the
// node that last failed a call or stream as leader) counts as leader only
// if it says so itself. A round lasts at most statusTimeout.
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

// startLocate starts a Status round unless one is in flight, and returns it
// (nil after Close).
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
		info := c.askStatus(candidates, suspect)
		info.trusted = info.addr != "" && (info.self || info.addr != suspect)
		c.mu.Lock()
		lc.info = info
		c.locating = nil
		if info.trusted {
			c.current, c.known = info.addr, true
			if c.suspect == suspect {
				c.suspect = ""
			}
		}
		c.mu.Unlock()
		if info.addr != "" {
			c.log.Debug("leader located", "leader", info.addr, "answered", info.self, "suspect", suspect)
		}
		close(lc.done)
	}()
	return lc
}

type statusAnswer struct {
	ep string
	st *coordv1.StatusResponse
}

// askStatus runs one Status round over candidates. It returns as soon as a
// node answers that it leads; otherwise once every node but the suspect
// answered (or failed), with the leader they name in the highest term —
// waiting for the suspect's own answer only when that is the suspect.
func (c *Client) askStatus(candidates []string, suspect string) leaderInfo {
	ctx, cancel := context.WithTimeout(c.life, c.opts.statusTimeout)
	defer cancel()
	answers := make(chan statusAnswer, len(candidates))
	for _, ep := range candidates {
		go func() {
			var st *coordv1.StatusResponse
			if cc, err := c.conn(ep); err == nil {
				st, _ = coordv1.NewClusterClient(cc).Status(ctx, &coordv1.StatusRequest{})
			}
			answers <- statusAnswer{ep: ep, st: st}
		}()
	}
	others := 0
	for _, ep := range candidates {
		if ep != suspect {
			others++
		}
	}
	var named string
	var namedTerm, leaderTerm uint64
	var leader string
	// grace bounds the wait for the suspect's own word once the others
	// answered and named it: it may be slow, or frozen and still named
	// because the election has not happened yet. Short, so that the next
	// round comes soon and sees the new leader.
	var grace <-chan time.Time
	for pending := len(candidates); pending > 0; {
		select {
		case a := <-answers:
			pending--
			if a.ep != suspect {
				others--
			}
			if a.st == nil {
				break
			}
			c.mu.Lock()
			if a.st.GetId() != "" {
				c.ids[a.st.GetId()] = a.ep
			}
			c.mu.Unlock()
			if a.st.GetState() == "Leader" && (leader == "" || a.st.GetTerm() > leaderTerm) {
				leader, leaderTerm = a.ep, a.st.GetTerm()
			}
			if a.st.GetLeaderAddress() != "" && (named == "" || a.st.GetTerm() > namedTerm) {
				named, namedTerm = c.addressOf(a.st.GetLeaderId(), a.st.GetLeaderAddress()), a.st.GetTerm()
			}
		case <-grace:
			pending = 0
		case <-ctx.Done():
			pending = 0
		}
		if leader != "" && leaderTerm >= namedTerm {
			return leaderInfo{addr: leader, self: true}
		}
		if others == 0 {
			if named == "" || named != suspect {
				return leaderInfo{addr: named}
			}
			if grace == nil {
				t := time.NewTimer(suspectGrace)
				defer t.Stop()
				grace = t.C
			}
		}
	}
	if leader != "" && leaderTerm >= namedTerm {
		return leaderInfo{addr: leader, self: true}
	}
	return leaderInfo{addr: named}
}

// suspectGrace is how long a Status round waits for the suspect's own
// answer after the other nodes named it leader.
const suspectGrace = 100 * time.Millisecond

// addressOf prefers the address a node answered Status on (the one this
// client was given) over the address it advertises.
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
