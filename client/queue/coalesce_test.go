package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/tracectx"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// submitGate holds at the fake server every Submit whose first job's kind
// is "hold" (a test's way to keep RPCs in flight) until released, one per
// release, and reports every Submit's arrival.
type submitGate struct {
	arrived chan *coordv1.QueueSubmitRequest
	release chan struct{}
	ended   chan error // a held Submit ended by its context
}

func holdSubmits(h *harness) *submitGate {
	g := &submitGate{arrived: make(chan *coordv1.QueueSubmitRequest, 100), release: make(chan struct{}, 100), ended: make(chan error, 10)}
	h.f.beforeSubmit = func(ctx context.Context, r *coordv1.QueueSubmitRequest) error {
		g.arrived <- r
		if r.GetJobs()[0].GetKind() != "hold" {
			return nil
		}
		select {
		case <-g.release:
			return nil
		case <-ctx.Done():
			g.ended <- ctx.Err()
			return ctx.Err()
		}
	}
	return g
}

type submitAnswer struct {
	i   int
	job *coordv1.SubmittedJob
	err error
}

// goSubmit starts a Submit and returns the channel of its answer.
func goSubmit(ctx context.Context, q *Client, i int, kind string, opts ...Option) chan submitAnswer {
	ch := make(chan submitAnswer, 1)
	go func() {
		j, err := q.Submit(ctx, kind, i, opts...)
		ch <- submitAnswer{i, j, err}
	}()
	return ch
}

// waiting waits until n calls wait for a free slot of q.
func waitWaiting(t *testing.T, q *Client, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d calls waiting", n), func() bool {
		q.co.mu.Lock()
		defer q.co.mu.Unlock()
		return len(q.co.waiting) == n
	})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Calls made while the client's one slot is taken wait and go together in
// the next RPC, each with its own job, key and trace context, and each
// gets its own answer.
func TestSubmitCoalescesConcurrentCalls(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c, WithSubmitCoalescing(1))
	first := goSubmit(ctx, q, -1, "hold")
	recv(t, g.arrived, "the first submit")

	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	const n = 20
	answers := make([]chan submitAnswer, n)
	for i := range answers {
		cctx := ctx
		if i == 0 {
			cctx = trace.ContextWithSpanContext(ctx, sc)
		}
		answers[i] = goSubmit(cctx, q, i, "k")
		waitWaiting(t, q, i+1) // in order, so the RPC's order is known
	}
	g.release <- struct{}{}
	if a := recv(t, first, "the first answer"); a.err != nil {
		t.Fatal(a.err)
	}
	r := recv(t, g.arrived, "the coalesced submit")
	if len(r.GetJobs()) != n {
		t.Fatalf("the second RPC carries %d jobs, want %d", len(r.GetJobs()), n)
	}
	keys := map[string]bool{}
	for i, j := range r.GetJobs() {
		if string(j.GetArgs()) != strconv.Itoa(i) || !strings.HasPrefix(j.GetUniqueKey(), AutoKeyPrefix) || keys[j.GetUniqueKey()] {
			t.Fatalf("job %d: %v", i, j)
		}
		keys[j.GetUniqueKey()] = true
	}
	if tp, _ := tracectx.Format(sc); r.GetJobs()[0].GetTraceparent() != tp || r.GetJobs()[1].GetTraceparent() != "" {
		t.Fatalf("trace contexts %q %q, want %q and none", r.GetJobs()[0].GetTraceparent(), r.GetJobs()[1].GetTraceparent(), tp)
	}
	for i, ch := range answers {
		a := recv(t, ch, "an answer")
		if a.err != nil {
			t.Fatalf("call %d: %v", i, a.err)
		}
		h.f.mu.Lock()
		got := string(h.f.jobs[a.job.GetId()].GetArgs())
		h.f.mu.Unlock()
		if got != strconv.Itoa(i) {
			t.Fatalf("call %d got job %d with args %s", i, a.job.GetId(), got)
		}
	}
	if len(h.f.submits) != 2 {
		t.Fatalf("%d RPCs for %d calls, want 2", len(h.f.submits), n+1)
	}
}

// Without a linger, a call is sent at once while a slot is free
// (DefaultSubmitsInFlight of them by default), on a clock that never
// advances; the next one waits for a slot.
func TestSubmitLoneCallAtOnce(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c, WithSubmitLinger(0))
	var held []chan submitAnswer
	for i := range DefaultSubmitsInFlight {
		held = append(held, goSubmit(ctx, q, i+1, "hold"))
		recv(t, g.arrived, fmt.Sprintf("submit %d, with %d in flight", i+1, i))
	}
	last := DefaultSubmitsInFlight + 1
	c := goSubmit(ctx, q, last, "k")
	waitWaiting(t, q, 1)
	select {
	case r := <-g.arrived:
		t.Fatalf("one more RPC with %d in flight: %v", DefaultSubmitsInFlight, r)
	default:
	}
	for range held {
		g.release <- struct{}{}
	}
	for _, ch := range append(held, c) {
		if r := recv(t, ch, "an answer"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	if r := recv(t, g.arrived, "the waiting call's submit"); len(r.GetJobs()) != 1 || string(r.GetJobs()[0].GetArgs()) != strconv.Itoa(last) {
		t.Fatalf("the waiting call's RPC %v", r)
	}
	if !h.clk.Now().Equal(h.t0) {
		t.Fatalf("the clock moved to t0+%s", h.clk.Now().Sub(h.t0))
	}
	// Alone, nothing in flight: one RPC at once.
	if _, err := q.Submit(ctx, "k", 0); err != nil || len(h.f.submits) != last+1 {
		t.Fatalf("lone call: %v, %d RPCs", err, len(h.f.submits))
	}
}

// With the default linger, a call that finds another Submit of its client
// in flight waits DefaultSubmitLinger (on the client's clock) for others,
// and the calls arriving meanwhile go in one RPC; a call with nothing in
// flight goes at once; an RPC's end sends what lingers without waiting
// out the timer; a caller whose ctx ends while it lingers returns and its
// job is never sent.
func TestSubmitLinger(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c)

	// Nothing in flight: at once, on a clock that never moves.
	if _, err := q.Submit(ctx, "k", 0); err != nil || len(h.f.submits) != 1 {
		t.Fatalf("lone call: %v, %d RPCs", err, len(h.f.submits))
	}
	recv(t, g.arrived, "the lone submit")
	held := goSubmit(ctx, q, 1, "hold")
	recv(t, g.arrived, "the held submit")

	// One in flight: the next calls linger until the clock has moved by
	// DefaultSubmitLinger, then share one RPC.
	const n = 5
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var answers []chan submitAnswer
	for i := range n {
		c := ctx
		if i == 2 {
			c = cctx
		}
		answers = append(answers, goSubmit(c, q, 10+i, "k"))
		waitWaiting(t, q, i+1)
	}
	if !h.clk.WaitArmed(h.at(DefaultSubmitLinger), 5*time.Second) {
		t.Fatal("no linger timer armed at t0+DefaultSubmitLinger")
	}
	cancel() // call 2 gives up while it lingers
	if a := recv(t, answers[2], "the cancelled call's answer"); a.err == nil || errors.Is(a.err, client.ErrUnknownOutcome) || !errors.Is(a.err, client.ErrUnavailable) {
		t.Fatalf("cancelled lingering call: %v, want unavailable, outcome known (never sent)", a.err)
	}
	select {
	case r := <-g.arrived:
		t.Fatalf("an RPC before the linger ended: %v", r)
	default:
	}
	h.clk.Advance(DefaultSubmitLinger - time.Microsecond)
	select {
	case r := <-g.arrived:
		t.Fatalf("an RPC before the linger ended: %v", r)
	default:
	}
	h.clk.Advance(time.Microsecond)
	r := recv(t, g.arrived, "the lingered submit")
	var args []string
	for _, j := range r.GetJobs() {
		args = append(args, string(j.GetArgs()))
	}
	if got := strings.Join(args, ","); got != "10,11,13,14" {
		t.Fatalf("the lingered RPC carries jobs %s, want 10,11,13,14 (12 was cancelled)", got)
	}
	for i, ch := range answers {
		if i == 2 {
			continue
		}
		if a := recv(t, ch, "an answer"); a.err != nil {
			t.Fatalf("call %d: %v", i, a.err)
		}
	}

	// Lingering behind the held RPC again: its end sends the waiting call
	// at once, before the timer; the timer then finds nothing to send.
	at := h.clk.Now().Add(DefaultSubmitLinger)
	late := goSubmit(ctx, q, 20, "k")
	waitWaiting(t, q, 1)
	if !h.clk.WaitArmed(at, 5*time.Second) {
		t.Fatal("no linger timer armed for the late call")
	}
	g.release <- struct{}{}
	if a := recv(t, held, "the held answer"); a.err != nil {
		t.Fatal(a.err)
	}
	if r := recv(t, g.arrived, "the late call's submit"); len(r.GetJobs()) != 1 || string(r.GetJobs()[0].GetArgs()) != "20" {
		t.Fatalf("the late call's RPC %v", r)
	}
	if a := recv(t, late, "the late answer"); a.err != nil {
		t.Fatal(a.err)
	}
	rpcs := len(h.f.submits)
	h.clk.Advance(DefaultSubmitLinger)
	if _, err := q.Submit(ctx, "k", 30); err != nil || len(h.f.submits) != rpcs+1 {
		t.Fatalf("after the timer: %v, %d RPCs, want %d", err, len(h.f.submits), rpcs+1)
	}
}

// A coalesced RPC refused because of one job (INVALID_ARGUMENT naming its
// index) or one caller's queue (PERMISSION_DENIED) gives that caller the
// answer it gets alone and submits the others' jobs.
func TestSubmitCoalescedRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse func(i int, j *coordv1.NewJob) error
		is     error
		rpcs   int // held + refused + …
	}{
		{"invalid", func(i int, j *coordv1.NewJob) error {
			if j.GetKind() != "bad" {
				return nil
			}
			return coorderr.New(codes.InvalidArgument, coorderr.InvalidArgument, fmt.Sprintf("job %d: kind is bad; nothing was submitted", i),
				map[string]string{"index": strconv.Itoa(i), "field": "kind"})
		}, client.ErrInvalidArgument, 1 + 1 + 1 + 1}, // the culprit alone, the rest again
		{"forbidden", func(_ int, j *coordv1.NewJob) error {
			if j.GetQueue() != "secret" {
				return nil
			}
			return coorderr.New(codes.PermissionDenied, coorderr.PermissionDenied, `identity "w1" may not submit to queue "secret"`,
				map[string]string{"rule": "r1"})
		}, client.ErrPermissionDenied, 1 + 1 + 4}, // one call per member
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			g := holdSubmits(h)
			h.f.onSubmit = func(r *coordv1.QueueSubmitRequest) error {
				for i, j := range r.GetJobs() {
					if err := tc.refuse(i, j); err != nil {
						return err
					}
				}
				return nil
			}
			ctx := testCtx(t)
			q := New(h.c, WithSubmitCoalescing(1))
			held := goSubmit(ctx, q, 0, "hold")
			recv(t, g.arrived, "the held submit")
			var answers []chan submitAnswer
			for i, kind := range []string{"a", "bad", "b", "c"} {
				var opts []Option
				if kind == "bad" {
					opts = append(opts, Queue("secret"))
				}
				answers = append(answers, goSubmit(ctx, q, i+1, kind, opts...))
				waitWaiting(t, q, i+1)
			}
			g.release <- struct{}{}
			recv(t, held, "the held answer")
			for i, ch := range answers {
				a := recv(t, ch, "an answer")
				var e *client.Error
				if i == 1 {
					if !errors.Is(a.err, tc.is) || !errors.As(a.err, &e) || (tc.name == "invalid" && e.Metadata["index"] != "0") {
						t.Fatalf("the culprit: %v %v", a.job, a.err)
					}
					continue
				}
				if a.err != nil || a.job.GetDuplicate() {
					t.Fatalf("call %d: %v %v", i, a.job, a.err)
				}
			}
			h.f.mu.Lock()
			defer h.f.mu.Unlock()
			if len(h.f.jobs) != 4 || len(h.f.submits) != tc.rpcs {
				t.Fatalf("%d jobs after %d RPCs, want 4 after %d", len(h.f.jobs), len(h.f.submits), tc.rpcs)
			}
		})
	}
}

// Two callers with one unique key in one RPC: one creates the job, the
// other gets it back as a Duplicate (as the FSM does in one command and in
// two: fsm's TestQueueUniqueKeys).
func TestSubmitCoalescedSameUniqueKey(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c, WithSubmitCoalescing(1))
	held := goSubmit(ctx, q, 0, "hold")
	recv(t, g.arrived, "the held submit")
	a := goSubmit(ctx, q, 1, "a", UniqueKey("order-1"))
	waitWaiting(t, q, 1)
	b := goSubmit(ctx, q, 2, "b", UniqueKey("order-1"))
	waitWaiting(t, q, 2)
	g.release <- struct{}{}
	recv(t, held, "the held answer")
	if r := recv(t, g.arrived, "the coalesced submit"); len(r.GetJobs()) != 2 {
		t.Fatalf("%d jobs in the RPC", len(r.GetJobs()))
	}
	ra, rb := recv(t, a, "a's answer"), recv(t, b, "b's answer")
	if ra.err != nil || rb.err != nil || ra.job.GetDuplicate() || !rb.job.GetDuplicate() || ra.job.GetId() != rb.job.GetId() {
		t.Fatalf("a %v %v, b %v %v", ra.job, ra.err, rb.job, rb.err)
	}
}

// A caller whose ctx ends returns at once without ending the others: with
// its job in flight the outcome is unknown; not yet sent, its job is never
// sent. The RPC goes on for the others.
func TestSubmitCoalescedMemberCancelled(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c, WithSubmitCoalescing(1))
	held := goSubmit(ctx, q, 0, "hold")
	recv(t, g.arrived, "the held submit")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := goSubmit(cctx, q, 1, "hold")
	waitWaiting(t, q, 1)
	b := goSubmit(ctx, q, 2, "b")
	waitWaiting(t, q, 2)
	g.release <- struct{}{}
	recv(t, held, "the held answer")
	if r := recv(t, g.arrived, "the coalesced submit"); len(r.GetJobs()) != 2 {
		t.Fatalf("%d jobs in the RPC", len(r.GetJobs()))
	}
	// The coalesced RPC is held; a caller queued behind it.
	dctx, cancelD := context.WithCancel(ctx)
	d := goSubmit(dctx, q, 3, "d")
	waitWaiting(t, q, 1)
	cancel()
	ra := recv(t, a, "a's answer")
	if !errors.Is(ra.err, client.ErrUnknownOutcome) || !errors.Is(ra.err, client.ErrUnavailable) ||
		!strings.Contains(ra.err.Error(), "Canceled: context canceled (outcome unknown)") {
		t.Fatalf("a: %v", ra.err)
	}
	cancelD()
	rd := recv(t, d, "d's answer")
	if rd.err == nil || errors.Is(rd.err, client.ErrUnknownOutcome) || !errors.Is(rd.err, client.ErrUnavailable) {
		t.Fatalf("d: %v", rd.err)
	}
	select {
	case r := <-b:
		t.Fatalf("b answered while its RPC is held: %v", r)
	case err := <-g.ended:
		t.Fatalf("the coalesced RPC ended with one caller: %v", err)
	default:
	}
	g.release <- struct{}{}
	if rb := recv(t, b, "b's answer"); rb.err != nil {
		t.Fatal(rb.err)
	}
	// d was never sent: the next call goes alone.
	if _, err := q.Submit(ctx, "e", 4); err != nil {
		t.Fatal(err)
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	for _, r := range h.f.submits {
		for _, j := range r.GetJobs() {
			if j.GetKind() == "d" {
				t.Fatalf("d's job was sent: %v", r)
			}
		}
	}
	if len(h.f.submits) != 3 {
		t.Fatalf("%d RPCs, want 3", len(h.f.submits))
	}
}

// The coalesced RPC ends when every caller's ctx has ended.
func TestSubmitCoalescedAllCancelled(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c, WithSubmitCoalescing(1))
	held := goSubmit(ctx, q, 0, "hold")
	recv(t, g.arrived, "the held submit")
	ctxA, cancelA := context.WithCancel(ctx)
	ctxB, cancelB := context.WithCancel(ctx)
	a := goSubmit(ctxA, q, 1, "hold")
	waitWaiting(t, q, 1) // first in the RPC, which is held
	b := goSubmit(ctxB, q, 2, "b")
	waitWaiting(t, q, 2)
	g.release <- struct{}{}
	recv(t, held, "the held answer")
	recv(t, g.arrived, "the coalesced submit")
	cancelA()
	recv(t, a, "a's answer")
	cancelB()
	recv(t, b, "b's answer")
	if err := recv(t, g.ended, "the end of the coalesced RPC"); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// A coalesced RPC's context has the latest of its callers' deadlines, and
// none when one caller has none.
func TestBatchContextDeadline(t *testing.T) {
	t0 := time.Now()
	c1, cancel1 := context.WithDeadline(context.Background(), t0.Add(time.Minute))
	defer cancel1()
	c2, cancel2 := context.WithDeadline(context.Background(), t0.Add(2*time.Minute))
	defer cancel2()
	ctx, cancel := batchContext([]*member{{ctx: c1}, {ctx: c2}})
	if d, ok := ctx.Deadline(); !ok || !d.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("deadline %v %v", d, ok)
	}
	cancel1()
	if ctx.Err() != nil {
		t.Fatal("ended with one caller of two")
	}
	cancel()
	ctx, cancel = batchContext([]*member{{ctx: c2}, {ctx: context.Background()}})
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a deadline though one caller has none")
	}
}

// WithoutSubmitCoalescing: every call is its own RPC, concurrent ones too.
func TestSubmitCoalescingOff(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c, WithoutSubmitCoalescing())
	var answers []chan submitAnswer
	for i := range 5 {
		answers = append(answers, goSubmit(ctx, q, i, "hold"))
	}
	for range 5 {
		if r := recv(t, g.arrived, "a submit"); len(r.GetJobs()) != 1 {
			t.Fatalf("%d jobs in one RPC", len(r.GetJobs()))
		}
	}
	close(g.release)
	for _, ch := range answers {
		if a := recv(t, ch, "an answer"); a.err != nil {
			t.Fatal(a.err)
		}
	}
	if len(h.f.submits) != 5 {
		t.Fatalf("%d RPCs for 5 calls", len(h.f.submits))
	}
}

// The identity's request rate limit refuses the shared call: every caller
// gets the refusal, and nothing is sent one by one (that would only add
// requests).
func TestSubmitCoalescedRateLimited(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	h.f.onSubmit = func(r *coordv1.QueueSubmitRequest) error {
		if len(r.GetJobs()) == 1 {
			return nil
		}
		return coorderr.New(codes.ResourceExhausted, coorderr.RateLimited, `identity "w1" is over its request rate (10/s, burst 10); retry later`,
			map[string]string{"identity": "w1"})
	}
	ctx := testCtx(t)
	q := New(h.c, WithSubmitCoalescing(1))
	held := goSubmit(ctx, q, 0, "hold")
	recv(t, g.arrived, "the held submit")
	var answers []chan submitAnswer
	for i := range 3 {
		answers = append(answers, goSubmit(ctx, q, i+1, "k"))
		waitWaiting(t, q, i+1)
	}
	g.release <- struct{}{}
	recv(t, held, "the held answer")
	for _, ch := range answers {
		if a := recv(t, ch, "an answer"); !errors.Is(a.err, client.ErrResourceExhausted) {
			t.Fatalf("call %d: %v %v", a.i, a.job, a.err)
		}
	}
	if len(h.f.submits) != 2 {
		t.Fatalf("%d RPCs, want 2", len(h.f.submits))
	}
}

// A coalesced call carries at most maxCoalescedBytes of jobs (one job
// always goes); the rest wait for the next slot.
func TestSubmitCoalescedBytesCap(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c, WithSubmitCoalescing(1))
	held := goSubmit(ctx, q, 0, "hold")
	recv(t, g.arrived, "the held submit")
	big := []byte(`"` + strings.Repeat("x", maxCoalescedBytes*2/5) + `"`)
	var answers []chan submitAnswer
	for i := range 3 {
		ch := make(chan submitAnswer, 1)
		go func() {
			j, err := q.Submit(ctx, "big", big)
			ch <- submitAnswer{i, j, err}
		}()
		answers = append(answers, ch)
		waitWaiting(t, q, i+1)
	}
	g.release <- struct{}{}
	recv(t, held, "the held answer")
	for _, ch := range answers {
		if a := recv(t, ch, "an answer"); a.err != nil {
			t.Fatal(a.err)
		}
	}
	r1, r2 := recv(t, g.arrived, "the first coalesced submit"), recv(t, g.arrived, "the second")
	if len(r1.GetJobs()) != 2 || len(r2.GetJobs()) != 1 {
		t.Fatalf("calls of %d and %d jobs, want 2 and 1", len(r1.GetJobs()), len(r2.GetJobs()))
	}
}

// A lone call finding a free slot is sent from the caller's goroutine (no
// goroutine of the coalescer's carries it), and answers a cancellation in
// flight as a coalesced member does: outcome unknown, at once.
func TestSubmitLoneCallCancelledInFlight(t *testing.T) {
	h := newHarness(t)
	g := holdSubmits(h)
	ctx := testCtx(t)
	q := New(h.c, WithSubmitCoalescing(1))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := goSubmit(cctx, q, 0, "hold")
	recv(t, g.arrived, "the lone submit")
	buf := make([]byte, 1<<20)
	if dump := string(buf[:runtime.Stack(buf, true)]); strings.Contains(dump, "created by github.com/coordd/coordd/client/queue.(*coalescer)") {
		t.Fatalf("the lone call runs on a goroutine the coalescer started:\n%s", dump)
	}
	cancel()
	ra := recv(t, a, "a's answer")
	if !errors.Is(ra.err, client.ErrUnknownOutcome) || !errors.Is(ra.err, client.ErrUnavailable) {
		t.Fatalf("a: %v", ra.err)
	}
	g.release <- struct{}{}
}

// BenchmarkSubmitCoalesced: 64 callers at once through a Client with two
// RPC slots, so that most calls share RPCs, against the in-process fake
// over loopback gRPC, on the real clock (the fake keeps every job: run it
// with a bounded -benchtime).
func BenchmarkSubmitCoalesced(b *testing.B) {
	f := newFakeQueue(clock.NewFake(time.Now())) // the server's; the client runs on the real clock
	addr, _ := serveFake(b, f)
	c, err := client.New(context.Background(), []string{addr}, client.WithOwner("b"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	q := New(c, WithSubmitCoalescing(2))
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(32) // 64 goroutines on 2 Ps
	created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(created)
	before := created[0].Value.Uint64()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := q.Submit(ctx, "k", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	metrics.Read(created)
	f.mu.Lock()
	rpcs := len(f.submits)
	f.mu.Unlock()
	// The gRPC server starts one goroutine per call; the rest is the SDK's.
	b.ReportMetric(float64(rpcs)/float64(b.N), "rpcs/op")
	b.ReportMetric(float64(created[0].Value.Uint64()-before)/float64(b.N), "goroutines/op")
}
