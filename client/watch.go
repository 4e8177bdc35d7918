package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// ErrWatchCompacted: the watch asked to start or resume at an event that no
// node holds any more (OldestIndex says where they start). Re-read the
// state and watch again from now.
var ErrWatchCompacted = errors.New("coordd: watch index no longer available")

// OldestIndex is the oldest index a node could still watch from, from an
// error wrapping ErrWatchCompacted (0 otherwise).
func OldestIndex(err error) uint64 { return metaUint(err, "oldest_index") }

// WatchOption changes one Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	families []coordv1.WatchFamily
	jobs     []coordv1.JobState
	worker   string
	follower bool
	position uint32
	initial  bool
	buffer   int
}

// WatchFamilies limits the watch to these record families (default all:
// leases, windows, fenced resources, queued jobs, schedules).
func WatchFamilies(f ...coordv1.WatchFamily) WatchOption {
	return func(o *watchOptions) { o.families = append(o.families, f...) }
}

// WatchJobs narrows queued jobs' events to jobs in one of states after the
// change (none: any state) whose last attempt was handed to worker (empty:
// any worker); other families are not affected. A server that predates
// the filter sends every job event: check the records.
func WatchJobs(worker string, states ...coordv1.JobState) WatchOption {
	return func(o *watchOptions) { o.worker, o.jobs = worker, append(o.jobs, states...) }
}

// WatchOnFollower starts the watch on a node other than the believed
// leader, chosen at random (any node serves a watch from its applied
// state; a follower applies a change a little after the leader): many
// long-lived watches then cost the followers, not the leader, the work of
// serving them. After a break the watch moves on as usual.
func WatchOnFollower() WatchOption { return func(o *watchOptions) { o.follower = true } }

// WatchFromPosition starts within the entry at fromIndex, at this position
// (what WatchResponse.ResumePosition said).
func WatchFromPosition(pos uint32) WatchOption { return func(o *watchOptions) { o.position = pos } }

// WatchInitial first delivers every matching record as an EXISTING event,
// read at one applied index, then the changes after it (fromIndex must be
// 0): "list, then watch" without a gap or an overlap.
func WatchInitial() WatchOption { return func(o *watchOptions) { o.initial = true } }

// WatchBuffer sets how many responses wait for the reader (default 16).
// A reader slower than the changes for long is dropped by the node
// (WATCHER_TOO_SLOW) and the watch resumes, or ends with ErrWatchCompacted
// when the node no longer holds what it missed.
func WatchBuffer(n int) WatchOption { return func(o *watchOptions) { o.buffer = n } }

// WatchResponse is a batch of changes, in log order.
type WatchResponse struct {
	Events []*coordv1.WatchEvent
	// Synced: the initial set is complete (always true without
	// WatchInitial). The first response with Synced may have no events.
	Synced bool
	// Reset: the stream broke during the initial set, which starts over
	// with this response: forget the EXISTING events received so far.
	Reset bool
	// ResumeIndex and ResumePosition: where the watch would resume after
	// this response (Watch's fromIndex and WatchFromPosition).
	ResumeIndex    uint64
	ResumePosition uint32
}

// Watcher is a running watch.
type Watcher struct {
	c        *Client
	ch       chan WatchResponse
	started  bool // a response was delivered (run's goroutine only)
	mu       sync.Mutex
	err      error
	endpoint string
}

// Responses delivers the watch's responses; it is closed when the watch
// ends (Err says why).
func (w *Watcher) Responses() <-chan WatchResponse { return w.ch }

// Err is why the watch ended: the context's error, or a final refusal
// (ErrWatchCompacted, ErrPermissionDenied, ErrInvalidArgument). nil while
// it runs.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Endpoint is the node the watch is (or was last) connected to.
func (w *Watcher) Endpoint() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.endpoint
}

// Watch streams the changes of records whose key starts with prefix (a
// lease's name, "job/window", a resource's name, a schedule's name,
// "queue/id"), from log index fromIndex (0: now). Any node serves it from
// its applied state. When the stream breaks (the node stops, restarts,
// drops a slow reader), the watch reconnects — to the same node or
// another — and resumes right after the last response delivered: every
// change arrives exactly once, in log order. It ends when ctx ends or on a
// final refusal; a start or resume point that no node holds any more is
// ErrWatchCompacted.
func (c *Client) Watch(ctx context.Context, prefix string, fromIndex uint64, opts ...WatchOption) *Watcher {
	o := watchOptions{buffer: 16}
	for _, opt := range opts {
		opt(&o)
	}
	w := &Watcher{c: c, ch: make(chan WatchResponse, max(o.buffer, 0))}
	req := &coordv1.WatchRequest{Prefix: prefix, Families: o.families, StartIndex: fromIndex, StartPosition: o.position, Initial: o.initial,
		JobStates: o.jobs, JobWorkerId: o.worker}
	go w.run(ctx, req, o.follower)
	return w
}

// run keeps the watch going across reconnects.
func (w *Watcher) run(ctx context.Context, req *coordv1.WatchRequest, follower bool) {
	defer close(w.ch)
	c := w.c
	synced := !req.GetInitial()
	restart := false // an initial set was interrupted: the next one resets
	delays := c.retryBackoff()
	compacted := map[string]bool{} // endpoints that said so since the last message
	ep := c.leaderEndpoint()
	if follower {
		ep = c.awayFrom(ep)
	}
	for {
		w.mu.Lock()
		w.endpoint = ep
		w.mu.Unlock()
		progressed, err := w.stream(ctx, ep, req, &synced, &restart)
		if progressed {
			delays.Reset()
			clear(compacted)
		}
		if ctx.Err() != nil {
			w.finish(ctx.Err())
			return
		}
		e := fromStatus(err)
		reason := coorderr.ReasonOf(err)
		c.log.Debug("watch stream ended", "endpoint", ep, "prefix", req.GetPrefix(), "resume_index", req.GetStartIndex(), "err", err)
		switch {
		case reason == coorderr.WatchIndexCompacted:
			// This node's ring starts later; another may still hold it.
			compacted[ep] = true
			if len(compacted) >= len(c.endpoints) {
				w.finish(e)
				return
			}
			ep = w.nextEndpoint(ep)
			continue
		case errors.Is(e, ErrInvalidArgument), errors.Is(e, ErrPermissionDenied), errors.Is(e, ErrUnauthenticated):
			w.finish(e)
			return
		case reason == coorderr.WatcherTooSlow:
			// The node dropped us: resume at once, here (it still holds
			// recent events) — ErrWatchCompacted if it does not.
			continue
		}
		st, _ := coorderr.Info(err)
		if st != nil && st.Code() == codes.Unimplemented {
			w.finish(e)
			return
		}
		ep = w.nextEndpoint(ep)
		if !delays.Wait(ctx, c.clock) {
			w.finish(ctx.Err())
			return
		}
	}
}

// stream runs one Watch call on ep until it breaks. progressed reports
// whether any message came.
func (w *Watcher) stream(ctx context.Context, ep string, req *coordv1.WatchRequest, synced, restart *bool) (progressed bool, err error) {
	cc, err := w.c.conn(ep)
	if err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *synced {
		req.Initial = false
	} else if req.GetInitial() {
		req.StartIndex, req.StartPosition = 0, 0 // the set starts over, now
	}
	s, err := coordv1.NewWatchClient(cc).Watch(sctx, req, grpc.MaxCallRecvMsgSize(32<<20))
	if err != nil {
		return false, err
	}
	for {
		m, err := s.Recv()
		if err != nil {
			if !*synced && progressed {
				*restart = true
			}
			return progressed, err
		}
		resp := WatchResponse{Events: m.GetEvents(), Synced: m.GetSynced(), ResumeIndex: m.GetResumeIndex(),
			ResumePosition: m.GetResumePosition()}
		if *restart {
			resp.Reset, *restart = true, false
		}
		progressed = true
		wasSynced := *synced
		*synced = m.GetSynced()
		if *synced {
			// Resume right after this message from now on.
			req.StartIndex, req.StartPosition = m.GetResumeIndex(), m.GetResumePosition()
		}
		// Deliver what carries events, the end of the initial set, a reset,
		// and the first message of the first stream (it says where the
		// watch starts); progress messages only move the resume point.
		if len(resp.Events) == 0 && !resp.Reset && (wasSynced || !*synced) && w.started {
			continue
		}
		w.started = true
		select {
		case w.ch <- resp:
		case <-ctx.Done():
			return progressed, ctx.Err()
		}
	}
}

// awayFrom is a configured endpoint other than ep, at random (ep when it
// is the only one).
func (c *Client) awayFrom(ep string) string {
	var others []string
	for _, e := range c.endpoints {
		if e != ep {
			others = append(others, e)
		}
	}
	if len(others) == 0 {
		return ep
	}
	return others[rand.N(len(others))]
}

func (w *Watcher) nextEndpoint(ep string) string {
	eps := w.c.endpoints
	for i, e := range eps {
		if e == ep {
			return eps[(i+1)%len(eps)]
		}
	}
	return eps[0]
}

func (w *Watcher) finish(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// WatchEvents is Watch for callers that want events one by one: fn is
// called for each event in order until it returns an error or the watch
// ends; the error returned is fn's, or the watch's.
func (c *Client) WatchEvents(ctx context.Context, prefix string, fromIndex uint64, fn func(*coordv1.WatchEvent) error, opts ...WatchOption) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := c.Watch(ctx, prefix, fromIndex, opts...)
	for resp := range w.Responses() {
		for _, e := range resp.Events {
			if err := fn(e); err != nil {
				cancel()
				for range w.Responses() {
				}
				return err
			}
		}
	}
	return w.Err()
}
