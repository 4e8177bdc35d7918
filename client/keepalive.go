package client

import (
	"container/heap"
	"context"
	"sync"
	"time"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// kaStream is the client side of a KeepAlive stream (a seam for tests).
type kaStream interface {
	Send(*coordv1.KeepAliveRequest) error
	Recv() (*coordv1.KeepAliveResponse, error)
}

// openFunc opens a KeepAlive stream to the node believed to lead.
type openFunc func(ctx context.Context) (kaStream, error)

func (c *Client) openKeepAlive(ctx context.Context) (kaStream, error) {
	cc, err := c.conn(c.leaderEndpoint())
	if err != nil {
		return nil, err
	}
	return coordv1.NewCoordinatorClient(cc).KeepAlive(ctx)
}

// keeper renews every held lease of a client over one shared stream: each
// lease is sent at TTL/3 after its previous send; an acknowledgement moves
// the lease's local deadline to (send time + TTL - margin). When the stream
// breaks it reconnects (following the leader's address) and sends every
// lease at once. A lease whose local deadline passes is lost, whatever the
// stream is doing.
type keeper struct {
	c    *Client
	open openFunc

	mu      sync.Mutex
	entries map[*Lease]*kaEntry
	due     dueHeap

	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

type kaEntry struct {
	l     *Lease
	due   time.Time
	index int
}

type dueHeap []*kaEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	e := x.(*kaEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

func newKeeper(c *Client, open openFunc) *keeper {
	ctx, cancel := context.WithCancel(context.Background())
	k := &keeper{c: c, open: open, entries: map[*Lease]*kaEntry{}, wake: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
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
	heap.Push(&k.due, e)
	first := e.index == 0
	k.mu.Unlock()
	if first { // the keeper sleeps until the earliest due time: wake it only if that moved
		k.signal()
	}
}

func (k *keeper) remove(l *Lease) {
	k.mu.Lock()
	if e, ok := k.entries[l]; ok {
		delete(k.entries, l)
		heap.Remove(&k.due, e.index)
	}
	k.mu.Unlock()
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
	backoff := min(k.c.opts.backoffMin, maxBackoff)
	reconnect := false
	for k.ctx.Err() == nil {
		if k.count() == 0 {
			select {
			case <-k.wake:
				continue
			case <-k.ctx.Done():
				return
			}
		}
		ep := k.c.leaderEndpoint()
		sctx, scancel := context.WithCancel(k.ctx)
		st, err := k.open(sctx)
		if err == nil {
			err = k.serve(sctx, st, reconnect)
			reconnect = true
		}
		scancel()
		if k.ctx.Err() != nil {
			return
		}
		kind, addr := classify(err)
		if kind == redirect {
			k.c.setLeader(addr)
			backoff = min(k.c.opts.backoffMin, maxBackoff)
			continue
		}
		k.c.rotate(ep)
		k.c.log.Info("keepalive stream broken; reconnecting", "endpoint", ep, "err", err, "in", backoff)
		t := k.c.clock.NewTimer(backoff)
		select {
		case <-t.C():
		case <-k.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
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

type sentRenewal struct {
	l    *Lease
	sent time.Time
}

// serve runs one stream until it breaks. On a reconnect every lease is
// renewed at once: renewals sent on the broken stream may be lost, and the
// new stream may be on a new leader.
func (k *keeper) serve(ctx context.Context, st kaStream, reconnect bool) error {
	respCh := make(chan *coordv1.KeepAliveResponse, 64)
	errCh := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				errCh <- err
				return
			}
			select {
			case respCh <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	if reconnect {
		now := k.c.clock.Now()
		k.mu.Lock()
		for _, e := range k.due {
			e.due = now
		}
		heap.Init(&k.due)
		k.mu.Unlock()
	}

	inflight := map[uint64]sentRenewal{}
	var seq uint64
	timer := k.c.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Send what is due, then sleep until the next one or an event.
		now := k.c.clock.Now()
		var batch []sentRenewal
		k.mu.Lock()
		for len(k.due) > 0 && !k.due[0].due.After(now.Add(coalesceWindow(k.due[0].l.ttl))) {
			e := k.due[0]
			e.due = now.Add(e.l.ttl / 3)
			heap.Fix(&k.due, 0)
			batch = append(batch, sentRenewal{l: e.l, sent: now})
		}
		next := time.Duration(-1)
		if len(k.due) > 0 {
			next = k.due[0].due.Sub(now)
		}
		k.mu.Unlock()
		for _, b := range batch {
			seq++
			inflight[seq] = b
			if err := st.Send(&coordv1.KeepAliveRequest{Name: b.l.name, Owner: b.l.owner, Generation: b.l.gen,
				TtlMs: b.l.ttl.Milliseconds(), Seq: seq}); err != nil {
				return err
			}
		}
		timer.Stop()
		if next >= 0 {
			timer.Reset(next)
		}
		select {
		case <-timer.C():
		case <-k.wake:
		case r := <-respCh:
			k.handle(inflight, r)
		case err := <-errCh:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (k *keeper) handle(inflight map[uint64]sentRenewal, r *coordv1.KeepAliveResponse) {
	s, ok := inflight[r.GetSeq()]
	if !ok {
		return
	}
	delete(inflight, r.GetSeq())
	if r.GetOk() {
		k.c.metrics.RenewLatency(k.c.clock.Now().Sub(s.sent))
		s.l.acked(s.sent)
		if f := s.l.onRenewal; f != nil {
			f(r)
		}
		return
	}
	s.l.lose(r.GetReason(), &Error{Reason: r.GetReason(), Message: r.GetMessage(), Metadata: r.GetMetadata(), sentinel: ErrLeaseLost})
}
