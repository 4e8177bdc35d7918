package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The parts of keeper.serve, each alone in virtual time: a keeper that
// does not run (no stream), a session driven by hand.

// bareKeeper is a keeper of a client on a fake clock whose loop does not
// run: the test calls its parts.
func bareKeeper(t *testing.T) (*keeper, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	c, err := New(context.Background(), []string{"127.0.0.1:1"}, WithClock(clk), WithOwner("me"))
	if err != nil {
		t.Fatal(err)
	}
	c.keeper.close()
	t.Cleanup(func() { c.Close() })
	k := &keeper{c: c, entries: map[*Lease]*kaEntry{}, ttls: map[time.Duration]int{}, wake: make(chan struct{}, 1)}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	t.Cleanup(k.cancel)
	return k, clk
}

func (k *keeper) hold(name string, ttl time.Duration) *Lease {
	l := k.c.newLease(name, "me", 1, ttl, k.c.clock.Now())
	k.add(l)
	return l
}

// takeDue takes what is due (with the coalescing window), moves each to
// TTL/3 later and says how long until the next; renewAllNow makes
// everything due.
func TestKeeperTakeDue(t *testing.T) {
	k, clk := bareKeeper(t)
	t0 := clk.Now()
	if b, next, _ := k.takeDue(t0); len(b) != 0 || next != -1 {
		t.Fatalf("no lease: batch %d next %s", len(b), next)
	}
	k.hold("a", 3*time.Second) // due t0+1s, window 50 ms
	clk.Advance(40 * time.Millisecond)
	k.hold("b", 3*time.Second) // due t0+1.04s
	k.hold("c", 6*time.Second) // due t0+2.04s
	b, next, shortest := k.takeDue(t0.Add(time.Second))
	if len(b) != 2 || b[0].l.name != "a" || b[1].l.name != "b" || !b[0].sent.Equal(t0.Add(time.Second)) {
		t.Fatalf("batch at t0+1s: %+v", b)
	}
	if next != time.Second || shortest != 3*time.Second {
		t.Fatalf("next %s shortest %s", next, shortest)
	}
	if b, _, _ := k.takeDue(t0.Add(1500 * time.Millisecond)); len(b) != 0 {
		t.Fatalf("renewed again before TTL/3: %+v", b)
	}
	k.renewAllNow(t0.Add(1500 * time.Millisecond))
	if b, next, _ := k.takeDue(t0.Add(1500 * time.Millisecond)); len(b) != 3 || next != time.Second {
		t.Fatalf("after renewAllNow: %d renewals, next %s", len(b), next)
	}
}

// The watchdog of the outstanding renewals fires the stall limit after the
// oldest send or the last answer, whichever is later, and is disarmed
// when nothing is outstanding.
func TestOutstandingWatchdog(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	t0 := clk.Now()
	var fired atomic.Int32
	o := &outstanding{bySeq: map[uint64]sentRenewal{}, ttls: map[time.Duration]int{}, clk: clk,
		timer: clk.AfterFunc(time.Hour, func() { fired.Add(1) })}
	o.timer.Stop()
	o.add(1, sentRenewal{sent: t0, ttl: 3 * time.Second}) // stall limit 1 s
	o.add(2, sentRenewal{sent: t0, ttl: 3 * time.Second})
	o.rearm()
	clk.Advance(600 * time.Millisecond)
	if _, ok := o.take(1, clk.Now()); !ok {
		t.Fatal("seq 1 not outstanding")
	}
	o.rearm() // progress at 600 ms: the deadline is 1.6 s
	clk.Advance(999 * time.Millisecond)
	if fired.Load() != 0 {
		t.Fatal("fired before the last answer's stall limit")
	}
	clk.Advance(time.Millisecond)
	if fired.Load() != 1 {
		t.Fatal("did not fire at the stall limit after the last answer")
	}
	o.take(2, clk.Now())
	o.rearm()
	if clk.Pending() != 0 {
		t.Fatal("armed with nothing outstanding")
	}
	if _, ok := o.take(2, clk.Now()); ok {
		t.Fatal("an answered seq taken twice")
	}
}

// blockingStream answers nothing; Recv ends with the session's context.
type blockingStream struct {
	ctx  context.Context
	sent chan *coordv1.KeepAliveRequest
	recv chan *coordv1.KeepAliveResponse
	done atomic.Bool // Recv returned
}

func (s *blockingStream) Send(r *coordv1.KeepAliveRequest) error { s.sent <- r; return nil }
func (s *blockingStream) Recv() (*coordv1.KeepAliveResponse, error) {
	select {
	case r := <-s.recv:
		return r, nil
	case <-s.ctx.Done():
		s.done.Store(true)
		return nil, s.ctx.Err()
	}
}

func newTestSession(t *testing.T, k *keeper) (*session, *blockingStream, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	st := &blockingStream{ctx: ctx, sent: make(chan *coordv1.KeepAliveRequest, 10), recv: make(chan *coordv1.KeepAliveResponse, 10)}
	s := k.newSession(ctx, "ep", st, cancel)
	return s, st, func() { s.stop(cancel) }
}

// sendDue sends the due renewals with consecutive seqs; an answer moves
// the lease's deadline, counts as acknowledged and makes the stream quiet.
func TestSessionSendAndAnswer(t *testing.T) {
	k, clk := bareKeeper(t)
	t0 := clk.Now()
	l := k.hold("a", 3*time.Second)
	k.hold("b", 3*time.Second)
	s, st, stop := newTestSession(t, k)
	defer stop()
	clk.Advance(time.Second)
	next, err := s.sendDue(clk.Now())
	if err != nil || next != time.Second {
		t.Fatalf("next %s err %v", next, err)
	}
	a, b := <-st.sent, <-st.sent
	if a.GetName() != "a" || a.GetSeq() != 1 || b.GetName() != "b" || b.GetSeq() != 2 || a.GetTtlMs() != 3000 {
		t.Fatalf("sent %v, %v", a, b)
	}
	clk.Advance(100 * time.Millisecond)
	s.answered(&coordv1.KeepAliveResponse{Name: "a", Ok: true, Seq: 1})
	if !s.acked || !l.Deadline().Equal(t0.Add(time.Second+2700*time.Millisecond)) {
		t.Fatalf("acked %v deadline t0+%s", s.acked, l.Deadline().Sub(t0))
	}
	if len(s.out.bySeq) != 1 || !s.quietSince.Equal(t0) {
		t.Fatal("b is still outstanding: not quiet")
	}
	s.answered(&coordv1.KeepAliveResponse{Name: "b", Ok: true, Seq: 2})
	if len(s.out.bySeq) != 0 || !s.quietSince.Equal(clk.Now()) {
		t.Fatalf("quiet since t0+%s", s.quietSince.Sub(t0))
	}
}

// A quiet stream is probed probeAfter after it went quiet, once; the probe's
// end makes it quiet again from then.
func TestSessionProbe(t *testing.T) {
	k, clk := bareKeeper(t)
	t0 := clk.Now()
	probes := make(chan string, 2)
	k.probe = func(_ context.Context, ep string) error { probes <- ep; return nil }
	k.hold("a", 3*time.Second) // probe after 250 ms
	s, _, stop := newTestSession(t, k)
	defer stop()
	if next := s.maybeProbe(t0.Add(100*time.Millisecond), time.Second, 3*time.Second); next != 150*time.Millisecond {
		t.Fatalf("next %s, want the probe in 150 ms", next)
	}
	if next := s.maybeProbe(t0.Add(250*time.Millisecond), 750*time.Millisecond, 3*time.Second); next != 750*time.Millisecond || s.probing != 1 {
		t.Fatalf("next %s probing %d", next, s.probing)
	}
	if ep := within(t, probes, "no probe"); ep != "ep" {
		t.Fatalf("probed %s", ep)
	}
	if s.maybeProbe(t0.Add(300*time.Millisecond), 700*time.Millisecond, 3*time.Second); s.seq != 1 {
		t.Fatal("a second probe while one is outstanding")
	}
	s.answered(&coordv1.KeepAliveResponse{Seq: 1}) // a stray answer with the probe's seq
	if len(s.out.bySeq) != 1 {
		t.Fatal("a response took the probe")
	}
	clk.Advance(400 * time.Millisecond)
	s.probeAnswered(within(t, s.probed, "probe did not end"))
	if s.probing != 0 || len(s.out.bySeq) != 0 || !s.quietSince.Equal(clk.Now()) {
		t.Fatalf("after the probe: probing %d, %d outstanding", s.probing, len(s.out.bySeq))
	}
	// No probes without leases (next -1) or with a TTL that renews often enough.
	if next := s.maybeProbe(clk.Now().Add(time.Second), -1, 3*time.Second); next != -1 || s.seq != 1 {
		t.Fatal("probed with no lease due")
	}
	if next := s.maybeProbe(clk.Now().Add(time.Minute), 5*time.Second, 15*time.Second); next != 5*time.Second || s.seq != 1 {
		t.Fatal("probed at TTL 15 s")
	}
}

// The receiver hands answers and the stream's end to serve; stop ends the
// stream and waits for it (the session owns its goroutines).
func TestSessionReceiveAndStop(t *testing.T) {
	k, _ := bareKeeper(t)
	s, st, stop := newTestSession(t, k)
	resp, errs := s.receive()
	st.recv <- &coordv1.KeepAliveResponse{Seq: 7}
	if r := within(t, resp, "no answer"); r.GetSeq() != 7 {
		t.Fatalf("seq %d", r.GetSeq())
	}
	stop()
	if !st.done.Load() {
		t.Fatal("stop returned before the receiver ended")
	}
	if err := within(t, errs, "no end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("end %v", err)
	}
}
