package client

import (
	"context"
	"errors"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/client/internal/due"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/backoff"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// kaStream is the client side of a KeepAlive stream (a seam for tests).
type kaStream interface {
	Send(*coordv1.KeepAliveRequest) error
	Recv() (*coordv1.KeepAliveResponse, error)
}

// openFunc opens a KeepAlive stream to ep.
type openFunc func(ctx context.Context, ep string) (kaStream, error)

func (c *Client) openKeepAlive(ctx context.Context, ep string) (kaStream, error) {
	cc, err := c.conn(ep)
	if err != nil {
		return nil, err
	}
	return coordv1.NewCoordinatorClient(cc).KeepAlive(ctx)
}

// probeFunc asks ep whether it is alive, over the connection the stream
// uses (any answer counts; only silence does not).
type probeFunc func(ctx context.Context, ep string) error

func (c *Client) probeHealth(ctx context.Context, ep string) error {
	cc, err := c.conn(ep)
	if err != nil {
		return err
	}
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// errStalled ends a stream whose acknowledgements are late: the node
// neither answers nor breaks the stream (frozen, partitioned without a
// reset, stuck).
var errStalled = errors.New("keepalive acknowledgements late")

// stallLimit is how late an acknowledgement may be before the stream is
// abandoned: a third of the TTL (one renewal period), at most 2 s. A lease
// then still has about 2/3 TTL − margin to be renewed on another leader.
func stallLimit(ttl time.Duration) time.Duration { return min(ttl/3, 2*time.Second) }

// probeAfter is how long a stream may sit with nothing outstanding before
// the keeper probes the node (a health check on the same connection), or
// -1 when renewals come often enough: a frozen node is then noticed within
// probeAfter + stallLimit <= TTL/2 - reconnect allowance of the freeze,
// whatever the phase of the renewals, instead of up to TTL/3 + stallLimit.
// Probes are needed for TTLs below about 12 s; a client whose leases renew
// at spread-out times rarely has such a gap.
func probeAfter(ttl time.Duration) time.Duration {
	l := stallLimit(ttl)
	p := ttl/2 - l - min(l/4, 250*time.Millisecond)
	if p <= 0 || p >= ttl/3 {
		return -1
	}
	return p
}

// keeper renews every held lease of a client over one shared stream: each
// lease is sent at TTL/3 after its previous send; an acknowledgement moves
// the lease's local deadline to (send time + TTL - margin). When the stream
// breaks, or its acknowledgements are late by more than stallLimit, it
// reconnects to the leader (following NOT_LEADER, or asking the nodes) and
// sends every lease at once. A lease whose local deadline passes is lost,
// whatever the stream is doing.
type keeper struct {
	c     *Client
	open  openFunc
	probe probeFunc // nil: no idle probes

	mu      sync.Mutex
	entries map[*Lease]*kaEntry
	due     due.Heap[*kaEntry]
	ttls    map[time.Duration]int // TTL -> leases held with it

	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// kaEntry is a held lease in the keeper's heap, due for renewal at due.
type kaEntry struct {
	due.Slot
	l   *Lease
	due time.Time
}

func (e *kaEntry) Due() time.Time { return e.due }

func newKeeper(c *Client, open openFunc, probe probeFunc) *keeper {
	ctx, cancel := context.WithCancel(context.Background())
	k := &keeper{c: c, open: open, probe: probe, entries: map[*Lease]*kaEntry{}, ttls: map[time.Duration]int{},
		wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go k.run()
	return k
}

func (k *keeper) signal() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// add starts renewing l; its first renewal is due at TTL/3.
func (k *keeper) add(l *Lease) {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done {
		return
	}
	k.mu.Lock()
	e := &kaEntry{l: l, due: k.c.clock.Now().Add(l.ttl / 3)}
	k.entries[l] = e
	k.due.Push(e)
	first := k.due.Peek() == e
	k.ttls[l.ttl]++
	shortest := k.ttls[l.ttl] == 1 && k.shortestTTLLocked() == l.ttl
	k.mu.Unlock()
	// The keeper sleeps until the earliest due time (or probe): wake it only
	// if that moved.
	if first || shortest {
		k.signal()
	}
}

func (k *keeper) remove(l *Lease) {
	k.mu.Lock()
	if e, ok := k.entries[l]; ok {
		delete(k.entries, l)
		k.due.Remove(e)
		if k.ttls[l.ttl]--; k.ttls[l.ttl] == 0 {
			delete(k.ttls, l.ttl)
		}
	}
	k.mu.Unlock()
}

// shortestTTLLocked is the shortest TTL held (0 when none); k.mu held.
func (k *keeper) shortestTTLLocked() time.Duration {
	var d time.Duration
	for ttl := range k.ttls {
		if d == 0 || ttl < d {
			d = ttl
		}
	}
	return d
}

func (k *keeper) shortestTTL() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.shortestTTLLocked()
}

func (k *keeper) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.entries)
}

// close stops the keeper and cancels every lease still held.
func (k *keeper) close() {
	k.cancel()
	<-k.done
	k.mu.Lock()
	var ls []*Lease
	for l := range k.entries {
		ls = append(ls, l)
	}
	k.mu.Unlock()
	for _, l := range ls {
		l.lose("CLIENT_CLOSED", ErrLeaseLost)
	}
}

func (k *keeper) run() {
	defer close(k.done)
	// Reconnects back off to at most 250 ms: every moment without a stream
	// eats into the leases' TTL budget, and a reconnect is cheap.
	maxBackoff := min(k.c.opts.backoffMax, 250*time.Millisecond)
	delays := backoff.New(backoff.Policy{Initial: min(k.c.opts.backoffMin, maxBackoff), Max: maxBackoff})
	reconnect := false
	redirects := 0
	// After a failure the keeper reconnects only to a leader the nodes
	// name, never to the failed node (the suspect) unless it says itself
	// that it leads: the others name a frozen leader until they elect a
	// new one, and a stream there would only stall again.
	failed := "" // the endpoint whose stream failed last
	for k.ctx.Err() == nil {
		if k.count() == 0 {
			select {
			case <-k.wake:
				continue
			case <-k.ctx.Done():
				return
			}
		}
		ep := ""
		if failed == "" {
			ep = k.c.leader(k.ctx)
		} else if info := k.c.locate(k.ctx); info.trusted && (info.addr != failed || info.self) {
			ep = info.addr
		}
		if ep == "" { // no leader known yet (an election): look again shortly
			if !k.sleep(delays.Next()) {
				return
			}
			continue
		}
		failed = ""
		sctx, scancel := context.WithCancelCause(k.ctx)
		// The open itself must make progress too (a new connection to a
		// frozen node never completes its handshake). A network timeout:
		// real time, also under a test clock.
		watchdog := time.AfterFunc(k.shortestStallLimit(), func() { scancel(errStalled) })
		st, err := k.open(sctx, ep)
		watchdog.Stop()
		acked := false
		if err == nil {
			acked, err = k.serve(sctx, ep, st, scancel, reconnect)
			reconnect = true
		}
		if context.Cause(sctx) == errStalled {
			err = errStalled
		}
		scancel(nil)
		if k.ctx.Err() != nil {
			return
		}
		if acked {
			delays.Reset()
			redirects = 0
		}
		if kind, addr := classify(err); kind == redirect && redirects < 3 {
			redirects++
			k.c.redirected(ep, addr)
			continue
		}
		k.c.leaderFailed(ep)
		failed = ep
		if errors.Is(err, errStalled) {
			// The stall already cost stallLimit: look for the leader now.
			k.c.log.Warn("keepalive stream stalled; moving to the leader", "endpoint", ep)
			continue
		}
		d := delays.Next()
		k.c.log.Info("keepalive stream broken; reconnecting", "endpoint", ep, "err", err, "in", d)
		if !k.sleep(d) {
			return
		}
	}
}

// sleep waits d on the client's clock; false when the keeper closes.
func (k *keeper) sleep(d time.Duration) bool {
	t := k.c.clock.NewTimer(d)
	select {
	case <-t.C():
		return true
	case <-k.ctx.Done():
		t.Stop()
		return false
	}
}

// shortestStallLimit is the stall limit of the shortest-TTL lease held.
func (k *keeper) shortestStallLimit() time.Duration {
	if ttl := k.shortestTTL(); ttl > 0 {
		return stallLimit(ttl)
	}
	return 2 * time.Second
}

// coalesceWindow is how early a renewal may go so that renewals due at
// about the same time leave together: a client's leases are renewed in a
// few bursts a second instead of one message at a time, which lets the
// leader put each burst in one log entry (one fsync on each node instead of
// dozens). Renewing early is always safe; it costs at most
// window/(TTL/3) more renewals (about 2.5 % for TTL 3 s).
func coalesceWindow(ttl time.Duration) time.Duration {
	return min(ttl/60, 50*time.Millisecond)
}

// sentRenewal is a renewal of l sent at sent, or a probe (l nil) on
// behalf of leases with TTL ttl.
type sentRenewal struct {
	l    *Lease
	sent time.Time
	ttl  time.Duration
}

// outstanding are the renewals (and the probe) sent on one stream and not
// yet answered, with a watchdog that abandons the stream when it makes no
// progress: the oldest has waited longer than the stall limit of the
// shortest TTL among them, and no answer at all came in that time. (A
// leader slow under a burst — every lease renewed at once on a new stream —
// still answers some, so it is not left for being slow; a frozen one
// answers none.)
type outstanding struct {
	bySeq    map[uint64]sentRenewal
	order    []uint64 // send order; answered ones are dropped lazily from the front
	ttls     map[time.Duration]int
	progress time.Time // the last answer
	clk      clock.Clock
	timer    clock.Timer
	armed    bool
	armedAt  time.Time
}

func (o *outstanding) add(seq uint64, r sentRenewal) {
	o.bySeq[seq] = r
	o.order = append(o.order, seq)
	o.ttls[r.ttl]++
}

// take removes the answered seq; now is when the answer came.
func (o *outstanding) take(seq uint64, now time.Time) (sentRenewal, bool) {
	r, ok := o.bySeq[seq]
	if !ok {
		return r, false
	}
	o.progress = now
	delete(o.bySeq, seq)
	if o.ttls[r.ttl]--; o.ttls[r.ttl] == 0 {
		delete(o.ttls, r.ttl)
	}
	return r, true
}

// rearm points the watchdog at the stall deadline: the stall limit after
// the oldest outstanding send or the last answer, whichever is later.
func (o *outstanding) rearm() {
	for len(o.order) > 0 {
		if _, ok := o.bySeq[o.order[0]]; ok {
			break
		}
		o.order = o.order[1:]
	}
	if len(o.order) == 0 {
		if o.armed {
			o.timer.Stop()
			o.armed = false
		}
		return
	}
	limit := 2 * time.Second
	for ttl := range o.ttls {
		limit = min(limit, stallLimit(ttl))
	}
	at := o.bySeq[o.order[0]].sent
	if o.progress.After(at) {
		at = o.progress
	}
	at = at.Add(limit)
	if !o.armed || !at.Equal(o.armedAt) {
		clock.ResetAt(o.clk, o.timer, at)
		o.armed, o.armedAt = true, at
	}
}

// serve runs one stream to ep until it breaks or stalls (then cancel ends
// it with errStalled); acked reports whether any renewal was acknowledged.
// On a reconnect every lease is renewed at once: renewals sent on the
// broken stream may be lost, and the new stream may be on a new leader.
// While nothing is outstanding for probeAfter, a probe is. serve owns the
// session's goroutines (the receiver, the probes): it ends the stream and
// waits for them before it returns.
func (k *keeper) serve(ctx context.Context, ep string, st kaStream, cancel context.CancelCauseFunc, reconnect bool) (acked bool, err error) {
	s := k.newSession(ctx, ep, st, cancel)
	defer s.stop(cancel)
	resp, errs := s.receive()
	if reconnect {
		k.renewAllNow(k.c.clock.Now())
	}
	timer := k.c.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Send what is due, then sleep until the next one or an event. The
		// timer is set for the instant next was reckoned from (the clock
		// may have moved while sending: with a fake clock, a whole step).
		now := k.c.clock.Now()
		next, err := s.sendDue(now)
		if err != nil {
			return s.acked, err
		}
		timer.Stop()
		if next >= 0 {
			clock.ResetAt(k.c.clock, timer, now.Add(next))
		}
		select {
		case <-timer.C():
		case <-k.wake:
		case r := <-resp:
			s.answered(r)
		case p := <-s.probed:
			s.probeAnswered(p)
		case err := <-errs:
			return s.acked, err
		case <-ctx.Done():
			return s.acked, ctx.Err()
		}
	}
}

// renewAllNow makes every held lease due at now (a new stream).
func (k *keeper) renewAllNow(now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.due.Each(func(e *kaEntry) { e.due = now })
	k.due.Init()
}

// takeDue takes the renewals due at now (or within the coalescing window
// of their TTL) and schedules each lease's next one TTL/3 later. next is
// how long until the next due renewal (-1: no lease held); shortest, the
// shortest TTL held.
func (k *keeper) takeDue(now time.Time) (batch []sentRenewal, next, shortest time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for k.due.Len() > 0 && !k.due.Peek().due.After(now.Add(coalesceWindow(k.due.Peek().l.ttl))) {
		e := k.due.Peek()
		e.due = now.Add(e.l.ttl / 3)
		k.due.Fix(e)
		batch = append(batch, sentRenewal{l: e.l, sent: now, ttl: e.l.ttl})
	}
	next = -1
	if k.due.Len() > 0 {
		next = k.due.Peek().due.Sub(now)
	}
	return batch, next, k.shortestTTLLocked()
}

// session is the state of one stream while serve runs it.
type session struct {
	k   *keeper
	ctx context.Context
	ep  string
	st  kaStream
	// The watchdog cancels the stream, which also unblocks a Send stuck on
	// flow control (a frozen peer stops reading).
	out        *outstanding
	seq        uint64      // the last seq sent
	quietSince time.Time   // nothing outstanding since
	probing    uint64      // the outstanding probe's seq
	probed     chan uint64 // a probe came back
	acked      bool        // a renewal was acknowledged
	wg         sync.WaitGroup
}

func (k *keeper) newSession(ctx context.Context, ep string, st kaStream, cancel context.CancelCauseFunc) *session {
	s := &session{k: k, ctx: ctx, ep: ep, st: st, quietSince: k.c.clock.Now(), probed: make(chan uint64, 1),
		out: &outstanding{bySeq: map[uint64]sentRenewal{}, ttls: map[time.Duration]int{}, clk: k.c.clock,
			timer: k.c.clock.AfterFunc(time.Hour, func() { cancel(errStalled) })}}
	s.out.timer.Stop()
	return s
}

// stop ends the stream (a stall already set its cause) and waits for the
// session's goroutines.
func (s *session) stop(cancel context.CancelCauseFunc) {
	s.out.timer.Stop()
	cancel(nil)
	s.wg.Wait()
}

// receive reads the stream's answers until it breaks or the session ends.
func (s *session) receive() (<-chan *coordv1.KeepAliveResponse, <-chan error) {
	respCh := make(chan *coordv1.KeepAliveResponse, 64)
	errCh := make(chan error, 1)
	s.wg.Go(func() {
		for {
			r, err := s.st.Recv()
			if err != nil {
				errCh <- err
				return
			}
			select {
			case respCh <- r:
			case <-s.ctx.Done():
				return
			}
		}
	})
	return respCh, errCh
}

// sendDue sends the renewals due at now (and a probe when the stream has
// been quiet long enough) and re-arms the watchdog; next is how long to
// sleep (-1: until an event).
func (s *session) sendDue(now time.Time) (next time.Duration, err error) {
	batch, next, shortest := s.k.takeDue(now)
	first := s.seq + 1
	for _, b := range batch {
		s.seq++
		s.out.add(s.seq, b)
	}
	next = s.maybeProbe(now, next, shortest)
	s.out.rearm()
	for i, b := range batch {
		if err := s.st.Send(&coordv1.KeepAliveRequest{Name: b.l.name, Owner: b.l.owner, Generation: b.l.gen,
			Ttl: durationpb.New(b.l.ttl), Seq: first + uint64(i)}); err != nil {
			return next, err
		}
	}
	return next, nil
}

// maybeProbe sends a probe when nothing has been outstanding for
// probeAfter(shortest) (and leases are held), or shortens next to when
// one is due.
func (s *session) maybeProbe(now time.Time, next, shortest time.Duration) time.Duration {
	pa := probeAfter(shortest)
	if s.k.probe == nil || pa < 0 || len(s.out.bySeq) != 0 || next < 0 {
		return next
	}
	if at := s.quietSince.Add(pa); at.After(now) {
		return min(next, at.Sub(now))
	}
	s.seq++
	seq := s.seq
	s.probing = seq
	s.out.add(seq, sentRenewal{sent: now, ttl: shortest})
	s.wg.Go(func() {
		_ = s.k.probe(s.ctx, s.ep)
		select {
		case s.probed <- seq:
		case <-s.ctx.Done():
		}
	})
	return next
}

// answered takes the node's answer r to a renewal.
func (s *session) answered(r *coordv1.KeepAliveResponse) {
	if r.GetSeq() == s.probing {
		return // a probe's seq: never a renewal's answer
	}
	now := s.k.c.clock.Now()
	if sr, ok := s.out.take(r.GetSeq(), now); ok {
		// The watchdog moves before the lease learns of the ack.
		s.settle(now)
		s.acked = s.k.handle(sr, r) || s.acked
	}
}

// probeAnswered takes the end of the probe seq.
func (s *session) probeAnswered(seq uint64) {
	now := s.k.c.clock.Now()
	s.out.take(seq, now)
	s.probing = 0
	s.settle(now)
}

// settle re-arms the watchdog after an answer at now; with nothing left
// outstanding the stream is quiet from now.
func (s *session) settle(now time.Time) {
	s.out.rearm()
	if len(s.out.bySeq) == 0 {
		s.quietSince = now
	}
}

// handle applies the answer r to the renewal s; it reports whether it
// was an acknowledgement.
func (k *keeper) handle(s sentRenewal, r *coordv1.KeepAliveResponse) bool {
	if r.GetOk() {
		k.c.metrics.RenewLatency(k.c.clock.Now().Sub(s.sent))
		s.l.acked(s.sent)
		if f := s.l.onRenewal; f != nil {
			f(r)
		}
		return true
	}
	s.l.lose(r.GetReason(), &Error{Reason: r.GetReason(), Message: r.GetMessage(), Metadata: r.GetMetadata(), sentinel: ErrLeaseLost})
	return false
}
