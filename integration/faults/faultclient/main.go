// Command faultclient is a client process for the fault-injection suite: it
// runs a workload against coordd through the SDK and records every call
// (start, end, outcome, token) as JSON lines, so a test can pause it with
// SIGSTOP or kill it and check the merged histories offline.
//
//	faultclient --mode work --name c1 --endpoints … --history c1.jsonl
//	faultclient --mode hold --name a --endpoints … --history a.jsonl
//	faultclient --mode qworker --name w1 --endpoints … --history w1.jsonl --queue Q
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Record is one line of a history: a call ("call") and its end ("ret")
// share Seq; a lost lease is an "event".
type Record struct {
	Kind      string `json:"kind"` // call, ret, event
	Client    string `json:"client"`
	Seq       int64  `json:"seq"`
	Op        string `json:"op"` // acquire, release, commit, claim, complete, lost
	Lease     string `json:"lease,omitempty"`
	Resource  string `json:"resource,omitempty"`
	Window    string `json:"window,omitempty"`
	Key       string `json:"key,omitempty"`
	Gen       uint64 `json:"gen,omitempty"`
	AtNs      int64  `json:"at_ns"`
	Outcome   string `json:"outcome,omitempty"` // ok, err, unknown
	Reason    string `json:"reason,omitempty"`
	Accepted  bool   `json:"accepted,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Claimed   bool   `json:"claimed,omitempty"`
	// DeadlineNs is the lease's local deadline when it was lost (G10).
	DeadlineNs int64 `json:"deadline_ns,omitempty"`
	// Node is the endpoint the client was sending to when the call ended.
	Node string `json:"node,omitempty"`
	// Job attempts (mode qworker): the job, its attempt, its run_at (Unix
	// ms, as the worker was handed it) and, for a schedule's job, the
	// schedule and the occurrence (Unix ms).
	Job     uint64 `json:"job,omitempty"`
	Attempt uint32 `json:"attempt,omitempty"`
	RunAtMs int64  `json:"run_at_ms,omitempty"`
	Sched   string `json:"sched,omitempty"`
	OccMs   int64  `json:"occ_ms,omitempty"`
	// CtxDone: the handler's context had ended when the call was made
	// (the worker's SDK had given up the claim).
	CtxDone bool `json:"ctx_done,omitempty"`
	// First is a duplicate fenced write's answer: the payload of the first
	// (the token of the attempt whose write made the effect).
	First string `json:"first,omitempty"`
}

type recorder struct {
	mu   sync.Mutex
	w    *bufio.Writer
	f    *os.File
	name string
	seq  int64
	node func() string
}

func (r *recorder) write(rec Record) {
	rec.Client = r.name
	b, _ := json.Marshal(rec)
	r.mu.Lock()
	r.w.Write(b)
	r.w.WriteByte('\n')
	r.w.Flush() // reach the kernel: a kill -9 loses at most the line in flight
	r.mu.Unlock()
}

// call records the start of an op and returns a function that records its end.
func (r *recorder) call(rec Record) func(out Record, err error) {
	r.mu.Lock()
	r.seq++
	seq := r.seq
	r.mu.Unlock()
	rec.Kind, rec.Seq, rec.AtNs = "call", seq, time.Now().UnixNano()
	r.write(rec)
	return func(out Record, err error) {
		out.Kind, out.Seq, out.Op, out.AtNs = "ret", seq, rec.Op, time.Now().UnixNano()
		if r.node != nil {
			out.Node = r.node()
		}
		out.Outcome = "ok"
		if err != nil {
			out.Outcome = "err"
			var ce *client.Error
			if errors.As(err, &ce) {
				out.Reason = ce.Reason
			}
			if errors.Is(err, client.ErrUnknownOutcome) || errors.Is(err, client.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				out.Outcome = "unknown"
			}
		}
		r.write(out)
	}
}

func main() {
	var (
		mode      = flag.String("mode", "work", "work: acquire, claim, commit, complete, release in a loop; hold: acquire once and commit until stopped")
		name      = flag.String("name", "c", "client name (also the owner id)")
		endpoints = flag.String("endpoints", "", "coordd gRPC endpoints")
		history   = flag.String("history", "", "history file (JSON lines)")
		lease     = flag.String("lease", "L", "lease name")
		resource  = flag.String("resource", "R", "fenced resource")
		ttl       = flag.Duration("ttl", 2*time.Second, "lease TTL")
		commits   = flag.Int("commits", 3, "commits per held lease (work)")
		interval  = flag.Duration("interval", 100*time.Millisecond, "pause between operations")
		firstWait = flag.Duration("first-commit-delay", 0, "wait after acquiring before the first commit")
		lose      = flag.Float64("lose-replies", 0, "drop this fraction of successful mutation replies after the server answered (unknown outcomes)")
		payload   = flag.Int("payload-bytes", 0, "pad each commit's payload (its key) to this many bytes (heavy appends)")
		qname     = flag.String("queue", "faults", "qworker: the queue to work")
		kinds     = flag.String("kinds", "effect,tick", "qworker: the job kinds to handle (comma-separated)")
		conc      = flag.Int("concurrency", 64, "qworker: handlers at a time")
		hold      = flag.Duration("hold", 0, "qworker: wait this long in the handler before its fenced write (ignoring the handler's context)")
		holdAfter = flag.Duration("hold-after", 0, "qworker: wait this long after the fenced write, before completing")
		rawDone   = flag.Bool("raw-complete", false, "qworker: after the fenced write, make a second fenced write under a fresh key and complete the attempt with a Queue.Complete call of its own, and record the answers")
	)
	flag.Parse()
	f, err := os.OpenFile(*history, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rec := &recorder{w: bufio.NewWriter(f), f: f, name: *name}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	opts := []client.Option{client.WithOwner(*name), client.WithAttemptTimeout(time.Second)}
	if *lose > 0 {
		opts = append(opts, client.WithDialOptions(grpc.WithChainUnaryInterceptor(loseReplies(*lose, rec))))
	}
	c, err := client.New(ctx, strings.Split(*endpoints, ","), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	rec.node = c.Endpoint
	w := &worker{c: c, rec: rec, lease: *lease, resource: *resource, ttl: *ttl, commits: *commits, interval: *interval,
		firstWait: *firstWait, payload: *payload}
	switch *mode {
	case "work":
		w.work(ctx)
	case "hold":
		w.hold(ctx)
	case "qworker":
		qw := &qworker{c: c, rec: rec, queue: *qname, kinds: strings.Split(*kinds, ","), concurrency: *conc, hold: *hold, holdAfter: *holdAfter, rawComplete: *rawDone}
		if err := qw.run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "qworker:", err)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", *mode)
		os.Exit(2)
	}
	f.Sync()
}

type worker struct {
	c         *client.Client
	rec       *recorder
	lease     string
	resource  string
	ttl       time.Duration
	commits   int
	interval  time.Duration
	firstWait time.Duration
	payload   int
	iter      int
}

func opCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), 3*time.Second)
}

func (w *worker) acquire(ctx context.Context) *client.Lease {
	done := w.rec.call(Record{Op: "acquire", Lease: w.lease})
	cctx, cancel := opCtx(ctx)
	l, err := w.c.Acquire(cctx, w.lease, w.ttl)
	cancel()
	if errors.Is(err, client.ErrNotAcquired) {
		done(Record{Lease: w.lease, Reason: "HELD"}, nil)
		return nil
	}
	if err != nil {
		done(Record{Lease: w.lease}, err)
		return nil
	}
	done(Record{Lease: w.lease, Gen: l.Generation(), Accepted: true}, nil)
	go func() {
		<-l.Done()
		if errors.Is(l.Err(), client.ErrLeaseLost) {
			w.rec.write(Record{Kind: "event", Op: "lost", Lease: w.lease, Gen: l.Generation(), AtNs: time.Now().UnixNano(),
				DeadlineNs: l.Deadline().UnixNano(), Reason: l.Err().Error()})
		}
	}()
	return l
}

func (w *worker) commit(ctx context.Context, l *client.Lease, key string) error {
	done := w.rec.call(Record{Op: "commit", Lease: w.lease, Resource: w.resource, Key: key, Gen: l.Generation()})
	cctx, cancel := opCtx(ctx)
	data := []byte(key)
	if len(data) < w.payload {
		data = append(data, make([]byte, w.payload-len(data))...)
	}
	res, err := l.FencedCommit(cctx, w.resource, key, data)
	cancel()
	out := Record{Lease: w.lease, Resource: w.resource, Key: key, Gen: l.Generation()}
	if err == nil {
		out.Accepted, out.Duplicate = res.Accepted, res.Duplicate
	}
	done(out, err)
	return err
}

// sleep waits d, or until ctx ends (false). An unreceived time.After
// timer is collected (Go 1.23 and later), so there is nothing to stop.
func (w *worker) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// work: acquire; claim a window; commit; complete; release; repeat.
func (w *worker) work(ctx context.Context) {
	for ctx.Err() == nil {
		l := w.acquire(ctx)
		if l == nil {
			w.sleep(ctx, w.interval)
			continue
		}
		w.iter++
		// Clients share windows (one per two seconds), so completions race.
		window := fmt.Sprintf("w-%d", time.Now().Unix()/2)
		done := w.rec.call(Record{Op: "claim", Lease: w.lease, Window: window, Gen: l.Generation()})
		cctx, cancel := opCtx(ctx)
		claim, err := l.ClaimWindow(cctx, "J", window)
		cancel()
		out := Record{Window: window, Gen: l.Generation()}
		if err == nil {
			out.Claimed = claim.Claimed
		}
		done(out, err)
		if w.firstWait > 0 && !w.sleep(ctx, w.firstWait) {
			return
		}
		ok := err == nil
		for i := 0; ok && i < w.commits && ctx.Err() == nil; i++ {
			ok = w.commit(ctx, l, fmt.Sprintf("%s-g%d-%d", w.rec.name, l.Generation(), i)) == nil
			w.sleep(ctx, w.interval)
		}
		if ok && claim != nil && claim.Claimed {
			done := w.rec.call(Record{Op: "complete", Lease: w.lease, Window: window, Gen: l.Generation()})
			cctx, cancel := opCtx(ctx)
			_, err := claim.Complete(cctx, nil)
			cancel()
			done(Record{Window: window, Gen: l.Generation()}, err)
		}
		done = w.rec.call(Record{Op: "release", Lease: w.lease, Gen: l.Generation()})
		cctx, cancel = opCtx(ctx)
		err = l.Release(cctx)
		cancel()
		done(Record{Lease: w.lease, Gen: l.Generation()}, err)
		w.sleep(ctx, w.interval)
	}
}

// hold: acquire until granted, then commit every interval until stopped
// (a paused holder keeps committing when it wakes up).
func (w *worker) hold(ctx context.Context) {
	var l *client.Lease
	for l == nil && ctx.Err() == nil {
		if l = w.acquire(ctx); l == nil {
			w.sleep(ctx, w.interval)
		}
	}
	for i := 0; ctx.Err() == nil; i++ {
		_ = w.commit(ctx, l, fmt.Sprintf("%s-g%d-%d", w.rec.name, l.Generation(), i))
		w.sleep(ctx, w.interval)
	}
	cctx, cancel := opCtx(ctx)
	_ = l.Release(cctx)
	cancel()
}

// loseReplies makes the network eat a fraction of the answers to calls the
// server applied: the SDK sees a reset connection after the fact and must
// retry without a second effect (same request id, same idempotency key).
func loseReplies(p float64, rec *recorder) grpc.UnaryClientInterceptor {
	mutations := map[string]bool{
		coordv1.Coordinator_Acquire_FullMethodName: true, coordv1.Coordinator_Release_FullMethodName: true,
		coordv1.Coordinator_ClaimWindow_FullMethodName: true, coordv1.Coordinator_CompleteWindow_FullMethodName: true,
		coordv1.Coordinator_FencedCommit_FullMethodName: true,
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && mutations[method] && rand.Float64() < p {
			rec.write(Record{Kind: "event", Op: "reply-lost", Reason: method, AtNs: time.Now().UnixNano()})
			return status.Error(codes.Unavailable, "connection reset (reply lost after the server applied the call)")
		}
		return err
	}
}
