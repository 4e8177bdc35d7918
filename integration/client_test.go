package integration

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func newClient(t *testing.T, c *testcluster.Cluster, owner string, opts ...client.Option) *client.Client {
	t.Helper()
	cl, err := client.New(context.Background(), c.Endpoints(), append([]client.Option{client.WithOwner(owner)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// blackhole drops keepalive messages while on (the network ate them).
type blackhole struct{ on atomic.Bool }

func (b *blackhole) interceptor() grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		return &holedStream{ClientStream: s, b: b}, err
	})
}

type holedStream struct {
	grpc.ClientStream
	b *blackhole
}

func (h *holedStream) SendMsg(m any) error {
	if h.b.on.Load() {
		return nil
	}
	return h.ClientStream.SendMsg(m)
}

// G10: when renewals stop getting through, the holder's context is
// cancelled before the server grants the lease to anyone else.
func TestClientLeaseLossCancelsBeforeRegrant(t *testing.T) {
	c := testcluster.New(t, 3)
	var hole blackhole
	a := newClient(t, c, "a", client.WithDialOptions(hole.interceptor()))
	b := newClient(t, c, "b")
	ctx := ctxT(t)
	la, err := a.Acquire(ctx, "job", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hole.on.Store(true)
	lostCh := make(chan time.Time, 1)
	go func() { <-la.Done(); lostCh <- time.Now() }()
	var grantAttemptStart time.Time
	for {
		start := time.Now()
		lb, err := b.Acquire(ctx, "job", 2*time.Second)
		if err == nil {
			grantAttemptStart = start
			if lb.Generation() != la.Generation()+1 {
				t.Fatalf("successor generation %d after %d", lb.Generation(), la.Generation())
			}
			break
		}
		if !errors.Is(err, client.ErrNotAcquired) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // B polls, as a replica's scheduler would
	}
	lostAt := <-lostCh
	if !errors.Is(la.Err(), client.ErrLeaseLost) {
		t.Fatalf("a's error: %v", la.Err())
	}
	if !lostAt.Before(grantAttemptStart) {
		t.Fatalf("a learned the loss at %v, b's granting call started at %v", lostAt, grantAttemptStart)
	}
	t.Logf("a cancelled %s before b's granting attempt started", grantAttemptStart.Sub(lostAt))
}

// The keepalive stream moves to the new leader; a lease with TTL >= 3x the
// failover time is not lost.
func TestClientKeepAliveSurvivesLeaderKill(t *testing.T) {
	c := testcluster.New(t, 3)
	a := newClient(t, c, "a")
	ctx := ctxT(t)
	l, err := a.Acquire(ctx, "survivor", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := c.WaitLeader()
	c.Stop(old)
	c.WaitLeader()
	var base uint64
	c.Eventually("renewals on the new leader", 10*time.Second, func() bool {
		r, err := a.GetLease(ctx, "survivor")
		if err != nil {
			return false
		}
		if base == 0 {
			base = r.GetRenewals() + 1
		}
		return r.GetRenewals() >= base+3 // three more renewals: a full TTL later
	})
	if l.Err() != nil {
		t.Fatalf("lease lost over failover: %v", l.Err())
	}
	r, err := a.GetLease(ctx, "survivor")
	if err != nil || r.GetGeneration() != l.Generation() || r.GetOwner() != "a" {
		t.Fatalf("lease after failover: %v %v", r, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A retry after an unknown outcome (the response never arrived) returns
// the same generation: no second grant.
func TestClientAcquireRetryAfterUnknownOutcome(t *testing.T) {
	c := testcluster.New(t, 3)
	var dropped atomic.Int32
	drop := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if method == coordv1.Coordinator_Acquire_FullMethodName && err == nil && dropped.Add(1) == 1 {
			return status.Error(codes.Unavailable, "connection reset (injected after the server answered)")
		}
		return err
	})
	a := newClient(t, c, "a", client.WithDialOptions(drop))
	ctx := ctxT(t)
	l, err := a.Acquire(ctx, "once", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if dropped.Load() < 2 {
		t.Fatalf("the acquire was not retried (%d calls)", dropped.Load())
	}
	if l.Generation() != 1 {
		t.Fatalf("retry produced generation %d", l.Generation())
	}
	r, err := a.GetLease(ctx, "once")
	if err != nil || r.GetGeneration() != 1 || r.GetOwner() != "a" {
		t.Fatalf("server record: %v %v", r, err)
	}
}

func TestClientRunExclusive(t *testing.T) {
	c := testcluster.New(t, 3)
	a := newClient(t, c, "a")
	b := newClient(t, c, "b")
	ctx := ctxT(t)

	t.Run("not acquired", func(t *testing.T) {
		held, err := b.Acquire(ctx, "busy", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		ran, err := a.RunExclusive(ctx, "busy", 5*time.Second, func(context.Context, *client.Lease) error {
			t.Fatal("ran while another owner held the lease")
			return nil
		})
		if ran || err != nil {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
	})
	t.Run("panic releases and re-panics", func(t *testing.T) {
		var gen uint64
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("recovered %v", p)
				}
			}()
			_, _ = a.RunExclusive(ctx, "panicky", 5*time.Second, func(_ context.Context, l *client.Lease) error {
				gen = l.Generation()
				panic("boom")
			})
		}()
		r, err := a.GetLease(ctx, "panicky")
		if err != nil || !r.GetReleased() || r.GetGeneration() != gen {
			t.Fatalf("after panic: %v %v", r, err)
		}
	})
	t.Run("loss is reported", func(t *testing.T) {
		var hole blackhole
		h := newClient(t, c, "h", client.WithDialOptions(hole.interceptor()))
		ran, err := h.RunExclusive(ctx, "lossy", 2*time.Second, func(ctx context.Context, l *client.Lease) error {
			hole.on.Store(true)
			<-ctx.Done()
			return nil
		})
		if !ran || !errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
	})
}

// A crashed run is resumed by the next holder: attempts = 2, completed once.
func TestClientWindowResumeAfterCrash(t *testing.T) {
	c := testcluster.New(t, 3)
	ctx := ctxT(t)
	crashed := newClient(t, c, "crashed")
	l, err := crashed.Acquire(ctx, "daily-close", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := l.ClaimWindow(ctx, "daily-close", "2026-09-25"); err != nil || !cl.Claimed || cl.Attempts != 1 {
		t.Fatalf("first claim: %+v %v", cl, err)
	}
	crashed.Close() // dies mid-run: no release, no completion

	next := newClient(t, c, "next")
	var completed *coordv1.Window
	c.Eventually("the next holder runs", 15*time.Second, func() bool {
		ran, err := next.RunExclusive(ctx, "daily-close", 5*time.Second, func(ctx context.Context, l *client.Lease) error {
			cl, err := l.ClaimWindow(ctx, "daily-close", "2026-09-25")
			if err != nil {
				return err
			}
			if !cl.Claimed || cl.Attempts != 2 {
				t.Errorf("resume claim: %+v", cl)
			}
			completed, err = cl.Complete(ctx, []byte("closed 42 stores"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return ran
	})
	if completed.GetState() != coordv1.WindowState_WINDOW_STATE_COMPLETED || completed.GetAttempts() != 2 {
		t.Fatalf("completed: %v", completed)
	}
	// A late run finds it complete and does nothing.
	ran, err := next.RunExclusive(ctx, "daily-close", 5*time.Second, func(ctx context.Context, l *client.Lease) error {
		cl, err := l.ClaimWindow(ctx, "daily-close", "2026-09-25")
		if err != nil || cl.Claimed || cl.Window.GetOwner() != "next" {
			t.Errorf("late claim: %+v %v", cl, err)
		}
		return err
	})
	if !ran || err != nil {
		t.Fatal(ran, err)
	}
}

// FencedCommit with a token refuses a stale token; a duplicate key returns
// the first payload; CheckToken (a dry run) answers the same without
// recording anything.
func TestClientFencedCommitToken(t *testing.T) {
	c := testcluster.New(t, 3)
	ctx := ctxT(t)
	a := newClient(t, c, "a")
	api := newClient(t, c, "api")
	la, err := a.Acquire(ctx, "payout", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	oldToken := la.Token()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := a.Acquire(ctx, "payout", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.FencedCommit(ctx, "payouts/42", oldToken, "k1", []byte("x"))
	if !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("stale token: %v", err)
	}
	if _, err := api.CheckToken(ctx, "payouts/42", oldToken, "k1"); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("stale token, dry run: %v", err)
	}
	check, err := api.CheckToken(ctx, "payouts/42", lb.Token(), "k1")
	if err != nil || !check.Accepted || !check.DryRun || check.Duplicate {
		t.Fatal(check, err)
	}
	if res, err := api.GetResource(ctx, "payouts/42"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a dry run recorded the resource: %v %v", res, err)
	}
	first, err := api.FencedCommit(ctx, "payouts/42", lb.Token(), "k1", []byte("first"))
	if err != nil || !first.Accepted || first.Duplicate {
		t.Fatal(first, err)
	}
	again, err := lb.FencedCommit(ctx, "payouts/42", "k1", []byte("second"))
	if err != nil || !again.Duplicate || string(again.Payload) != "first" {
		t.Fatal(again, err)
	}
	if again, err := api.CheckToken(ctx, "payouts/42", lb.Token(), "k1"); err != nil || !again.Duplicate || string(again.Payload) != "first" {
		t.Fatal(again, err)
	}
	if _, err := api.FencedCommit(ctx, "payouts/42", "garbage", "", nil); !errors.Is(err, client.ErrInvalidToken) {
		t.Fatal(err)
	}
}

// Calls succeed while the first endpoint is down, and with no leader the
// client retries until its context ends.
func TestClientFailoverAcrossEndpoints(t *testing.T) {
	c := testcluster.New(t, 3)
	c.Stop(c.Nodes[0])
	a := newClient(t, c, "a")
	ctx := ctxT(t)
	if _, err := a.Acquire(ctx, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Stop(c.Nodes[1]) // no majority: no leader
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	_, err := a.Acquire(short, "y", 5*time.Second, client.AcquireRequestID("y-1"))
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("without a majority: %v", err)
	}
	// The entry may sit in the old leader's log and commit once a majority
	// is back, so the outcome is unknown; a retry with the same request id
	// learns it without a second grant.
	c.Restart(c.Nodes[1])
	l, err := a.Acquire(ctx, "y", 5*time.Second, client.AcquireRequestID("y-1"))
	if err != nil || l.Generation() != 1 {
		t.Fatalf("retry after the majority returned: %v %v", l, err)
	}
}

// One scheduled occurrence in two calls: acquire-and-claim, then
// complete-and-release; a completed window grants nothing.
func TestClientAcquireClaimCompleteRelease(t *testing.T) {
	c := testcluster.New(t, 3)
	c.WaitLeader()
	a := newClient(t, c, "replica-a")
	b := newClient(t, c, "replica-b")
	ctx := ctxT(t)
	l, err := a.Acquire(ctx, "close", 3*time.Second, client.AcquireClaim("close", "2026-09-25"))
	if err != nil {
		t.Fatal(err)
	}
	cl := l.Claim()
	if cl == nil || !cl.Claimed || cl.Attempts != 1 || cl.Window.GetGeneration() != l.Generation() {
		t.Fatalf("claim: %+v", cl)
	}
	if _, err := b.Acquire(ctx, "close", 3*time.Second, client.AcquireClaim("close", "2026-09-25")); !errors.Is(err, client.ErrNotAcquired) {
		t.Fatalf("b while a holds it: %v", err)
	}
	w, err := cl.CompleteAndRelease(ctx, []byte("6 stores"))
	if err != nil || w.GetState() != coordv1.WindowState_WINDOW_STATE_COMPLETED {
		t.Fatalf("complete and release: %v %v", w, err)
	}
	if l.Context().Err() == nil {
		t.Fatal("the lease context is still live after the release")
	}
	got, err := b.GetLease(ctx, "close")
	if err != nil || !got.GetReleased() {
		t.Fatalf("lease after complete-and-release: %v %v", got, err)
	}
	// A late replica: nothing granted, the generation does not move.
	_, err = b.Acquire(ctx, "close", 3*time.Second, client.AcquireClaim("close", "2026-09-25"))
	var wc *client.WindowCompletedError
	if !errors.Is(err, client.ErrWindowCompleted) || !errors.As(err, &wc) || wc.Window.GetOwner() != "replica-a" {
		t.Fatalf("late replica: %v", err)
	}
	if got, _ := b.GetLease(ctx, "close"); got.GetGeneration() != l.Generation() {
		t.Fatalf("generation moved for a completed window: %d -> %d", l.Generation(), got.GetGeneration())
	}
	// The next occurrence is granted with the next generation.
	l2, err := b.Acquire(ctx, "close", 3*time.Second, client.AcquireClaim("close", "2026-09-26"))
	if err != nil || l2.Generation() != l.Generation()+1 || l2.Claim().Attempts != 1 {
		t.Fatalf("next occurrence: %v %v", l2, err)
	}
	defer l2.Release(context.Background())
}

// Waiting acquires: waiters get the lease in arrival order, handed over in
// the holder's Release entry; a holder that never releases is replaced at
// its TTL; a waiter whose context ends leaves the queue.
func TestClientAcquireWait(t *testing.T) {
	c := testcluster.New(t, 3)
	leader := c.WaitLeader()
	a, b, d := newClient(t, c, "a"), newClient(t, c, "b"), newClient(t, c, "d")
	ctx := ctxT(t)
	la, err := a.Acquire(ctx, "lock", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waiters := func() float64 { return metricValue(t, c.Leader(), "coordd_acquire_waiters") }
	type got struct {
		l   *client.Lease
		err error
	}
	bCh, dCh := make(chan got, 1), make(chan got, 1)
	go func() { l, err := b.Acquire(ctx, "lock", 5*time.Second, client.AcquireWait()); bCh <- got{l, err} }()
	c.Eventually("b waits", 5*time.Second, func() bool { return waiters() == 1 })
	go func() { l, err := d.Acquire(ctx, "lock", 5*time.Second, client.AcquireWait()); dCh <- got{l, err} }()
	c.Eventually("d waits", 5*time.Second, func() bool { return waiters() == 2 })
	acquires := func() float64 {
		return metricValue(t, c.Leader(), `coordd_proposals_total{type="acquire",outcome="ok"}`)
	}
	before := acquires()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	gb := <-bCh
	if gb.err != nil || gb.l.Generation() != 2 {
		t.Fatalf("b: %v %v", gb.l, gb.err)
	}
	// Handed over in the release's entry: no Acquire of its own.
	if n := acquires() - before; n != 0 {
		t.Fatalf("the hand-over proposed %v Acquire commands", n)
	}
	select {
	case g := <-dCh:
		t.Fatalf("d got the lease while b holds it: %v %v", g.l, g.err)
	default:
	}
	if err := gb.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	gd := <-dCh
	if gd.err != nil || gd.l.Generation() != 3 {
		t.Fatalf("d: %v %v", gd.l, gd.err)
	}
	// A holder that never releases (no keepalive): the waiter gets it at
	// the TTL.
	if err := gd.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	stuck := acquire(t, c.Coord(leader), "lock", "stuck", 1500*time.Millisecond)
	start := time.Now()
	le, err := b.Acquire(ctx, "lock", 5*time.Second, client.AcquireWait())
	if err != nil || le.Generation() != stuck.GetGeneration()+1 {
		t.Fatalf("after the stuck holder: %v %v", le, err)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("waited %s for a 1.5 s lease", waited)
	}
	// A waiter whose context ends leaves the queue.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := d.Acquire(short, "lock", 5*time.Second, client.AcquireWait()); err == nil {
		t.Fatal("a waiter got a held lease")
	}
	c.Eventually("the queue is empty", 5*time.Second, func() bool { return waiters() == 0 })
	_ = le.Release(ctx)
}

// A waiting Acquire survives a leader change: the old leader's queue is
// gone, the call fails over to the new leader with the same request id and
// waits there, and the holder's release hands the lease over.
func TestClientAcquireWaitSurvivesLeaderKill(t *testing.T) {
	c := testcluster.New(t, 3)
	a, b := newClient(t, c, "a"), newClient(t, c, "b")
	ctx := ctxT(t)
	la, err := a.Acquire(ctx, "lock", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Lease, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, "lock", 3*time.Second, client.AcquireWait())
		if err != nil {
			errs <- err
			return
		}
		got <- l
	}()
	old := c.WaitLeader()
	c.Eventually("b waits on the leader", 5*time.Second, func() bool { return metricValue(t, old, "coordd_acquire_waiters") == 1 })
	c.Stop(old)
	leader := c.WaitLeader()
	c.Eventually("b waits on the new leader", 10*time.Second, func() bool {
		return metricValue(t, leader, "coordd_acquire_waiters") == 1
	})
	if la.Err() != nil {
		t.Fatalf("holder lost its lease over the failover: %v", la.Err())
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb.Generation() != la.Generation()+1 {
			t.Fatalf("b got generation %d after %d", lb.Generation(), la.Generation())
		}
		_ = lb.Release(ctx)
	case err := <-errs:
		t.Fatalf("b: %v", err)
	case <-ctx.Done():
		t.Fatal("b never got the lease")
	}
}
