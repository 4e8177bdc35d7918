package client

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/clock"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// fakeStream is a KeepAlive stream driven by the test.
type fakeStream struct {
	clk   *clock.Fake
	sent  chan sentReq
	resp  chan *coordv1.KeepAliveResponse
	fail  chan error
	ctx   context.Context
	label string
}

type sentReq struct {
	req    *coordv1.KeepAliveRequest
	at     time.Time
	stream string
}

func (s *fakeStream) Send(r *coordv1.KeepAliveRequest) error {
	s.sent <- sentReq{req: r, at: s.clk.Now(), stream: s.label}
	return nil
}

func (s *fakeStream) Recv() (*coordv1.KeepAliveResponse, error) {
	select {
	case r := <-s.resp:
		return r, nil
	case err := <-s.fail:
		return nil, err
	case <-s.ctx.Done():
		return nil, io.EOF
	}
}

type harness struct {
	t       *testing.T
	clk     *clock.Fake
	c       *Client
	sent    chan sentReq
	streams chan *fakeStream
	t0      time.Time
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, clk: clock.NewFake(time.Unix(1_000_000, 0)), sent: make(chan sentReq, 100), streams: make(chan *fakeStream, 10)}
	h.t0 = h.clk.Now()
	c, err := New(context.Background(), []string{"127.0.0.1:1", "127.0.0.1:2"}, WithClock(h.clk), WithOwner("me"))
	if err != nil {
		t.Fatal(err)
	}
	c.keeper.close()
	n := 0
	c.keeper = newKeeper(c, func(ctx context.Context, _ string) (kaStream, error) {
		n++
		s := &fakeStream{clk: h.clk, sent: h.sent, resp: make(chan *coordv1.KeepAliveResponse, 10),
			fail: make(chan error, 1), ctx: ctx, label: string(rune('a' + n - 1))}
		h.streams <- s
		return s, nil
	}, nil) // no idle probes: the schedule tests see renewals only
	t.Cleanup(func() { c.Close() })
	h.c = c
	return h
}

func (h *harness) lease(ttl time.Duration) *Lease {
	l := h.c.newLease("job", "me", 7, ttl, h.clk.Now())
	h.c.keeper.add(l)
	return l
}

// advanceTo waits until a timer is armed at `at` (the code under test is
// idle), then moves the clock there.
func (h *harness) advanceTo(at time.Time) {
	h.t.Helper()
	if !h.clk.WaitArmed(at, 5*time.Second) {
		h.t.Fatalf("nothing armed at t0+%s", at.Sub(h.t0))
	}
	h.clk.Advance(at.Sub(h.clk.Now()))
}

// within receives from ch, or fails the test with failure when nothing
// arrives within 5 s of real time.
func within[T any](t *testing.T, ch <-chan T, failure string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal(failure)
		var zero T
		return zero
	}
}

func (h *harness) nextSend() sentReq {
	h.t.Helper()
	select {
	case v := <-h.sent:
		return v
	case <-time.After(5 * time.Second):
		h.t.Fatalf("no keepalive sent (clock at t0+%s)", h.clk.Now().Sub(h.t0))
		return sentReq{}
	}
}

func (h *harness) stream() *fakeStream {
	h.t.Helper()
	return within(h.t, h.streams, "no stream opened")
}

func at(h *harness, d time.Duration) time.Time { return h.t0.Add(d) }

// Renewals go out at TTL/3 after the previous send; an acknowledgement
// moves the local deadline to send time + TTL - margin; without one, the
// lease is lost exactly at the local deadline (G10), in virtual time.
func TestKeepAliveScheduleAndLocalDeadline(t *testing.T) {
	h := newHarness(t)
	l := h.lease(3 * time.Second) // margin 300 ms
	if got := l.Deadline(); !got.Equal(at(h, 2700*time.Millisecond)) {
		t.Fatalf("initial deadline t0+%s", got.Sub(h.t0))
	}
	st := h.stream()
	h.advanceTo(at(h, time.Second))
	s := h.nextSend()
	if !s.at.Equal(at(h, time.Second)) || s.req.GetName() != "job" || s.req.GetGeneration() != 7 || s.req.GetTtlMs() != 3000 {
		t.Fatalf("first renewal %+v at t0+%s", s.req, s.at.Sub(h.t0))
	}
	st.resp <- &coordv1.KeepAliveResponse{Name: "job", Generation: 7, Ok: true, Seq: s.req.GetSeq(), ExpiresIn: pbtime.Dur(3000)}
	// The ack re-arms the deadline timer at t0 + 1 s + 3 s - 300 ms.
	if !h.clk.WaitArmed(at(h, 3700*time.Millisecond), 5*time.Second) {
		t.Fatal("deadline not moved by the acknowledgement")
	}
	// The next renewal, at 2 s, goes unanswered (the network ate it): the
	// stream is abandoned at 3 s (1 s = TTL/3 late) and no leader answers
	// Status (nothing listens on the endpoints), so nothing renews it.
	h.advanceTo(at(h, 2*time.Second))
	if s := h.nextSend(); !s.at.Equal(at(h, 2*time.Second)) {
		t.Fatalf("renewal at t0+%s, want t0+2s", s.at.Sub(h.t0))
	}
	h.advanceTo(at(h, 3*time.Second))
	within(t, st.ctx.Done(), "stalled stream not abandoned")
	h.clk.WaitArmed(at(h, 3700*time.Millisecond), 5*time.Second)
	h.clk.Advance(at(h, 3699*time.Millisecond).Sub(h.clk.Now()))
	select {
	case <-l.Done():
		t.Fatal("lost before the local deadline")
	default:
	}
	h.clk.Advance(time.Millisecond)
	select {
	case <-l.Done():
	default:
		t.Fatal("not lost at the local deadline")
	}
	if !errors.Is(l.Err(), ErrLeaseLost) || !errors.Is(context.Cause(l.Context()), ErrLeaseLost) {
		t.Fatalf("err %v, cause %v", l.Err(), context.Cause(l.Context()))
	}
	// A lost lease is no longer renewed.
	if h.c.keeper.count() != 0 {
		t.Fatal("lost lease still in the keeper")
	}
}

// A refusal from the server ends the lease at once with its reason and
// metadata (who holds the lease now).
func TestKeepAliveServerRefusal(t *testing.T) {
	h := newHarness(t)
	l := h.lease(3 * time.Second)
	st := h.stream()
	h.advanceTo(at(h, time.Second))
	s := h.nextSend()
	st.resp <- &coordv1.KeepAliveResponse{Name: "job", Generation: 7, Ok: false, Reason: "LEASE_LOST", Seq: s.req.GetSeq(),
		Metadata: map[string]string{"current_owner": "other", "current_generation": "8"}}
	within(t, l.Done(), "refusal did not end the lease")
	var e *Error
	if !errors.Is(l.Err(), ErrLeaseLost) || !errors.As(l.Err(), &e) || e.Reason != "LEASE_LOST" ||
		e.Metadata["current_owner"] != "other" || e.Metadata["current_generation"] != "8" {
		t.Fatalf("err %v", l.Err())
	}
}

// When the stream breaks with NOT_LEADER, the keeper follows the leader's
// address and renews everything on the new stream at once.
func TestKeepAliveFollowsLeader(t *testing.T) {
	h := newHarness(t)
	l := h.lease(3 * time.Second)
	first := h.stream()
	st := status.New(codes.Unavailable, "not the leader")
	st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: "NOT_LEADER", Metadata: map[string]string{"leader_address": "127.0.0.1:2"}})
	first.fail <- st.Err()
	second := h.stream()
	s := h.nextSend()
	if s.stream != second.label || !s.at.Equal(h.t0) {
		t.Fatalf("renewal on stream %s at t0+%s", s.stream, s.at.Sub(h.t0))
	}
	if got := h.c.leaderEndpoint(); got != "127.0.0.1:2" {
		t.Fatalf("leader endpoint %s", got)
	}
	second.resp <- &coordv1.KeepAliveResponse{Name: "job", Generation: 7, Ok: true, Seq: s.req.GetSeq()}
	if !h.clk.WaitArmed(at(h, 2700*time.Millisecond), 5*time.Second) {
		t.Fatal("deadline timer missing")
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestSafetyMargin(t *testing.T) {
	c := &Client{}
	for ttl, want := range map[time.Duration]time.Duration{
		100 * time.Millisecond: 50 * time.Millisecond,
		3 * time.Second:        300 * time.Millisecond,
		time.Minute:            2 * time.Second,
	} {
		if got := c.marginFor(ttl); got != want {
			t.Errorf("margin for %s = %s, want %s", ttl, got, want)
		}
	}
}

func TestTokens(t *testing.T) {
	if tok := FormatToken("a:b", 42); tok != "a:b:42" {
		t.Fatal(tok)
	}
	name, gen, err := ParseToken("a:b:42")
	if err != nil || name != "a:b" || gen != 42 {
		t.Fatal(name, gen, err)
	}
	for _, bad := range []string{"", "noколон", ":1", "x:0", "x:-1", "x:y"} {
		if _, _, err := ParseToken(bad); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Renewals due within the coalescing window (min(TTL/60, 50 ms)) leave
// together, at the first one's due time; one due later waits for its turn.
func TestKeepAliveCoalescesRenewals(t *testing.T) {
	h := newHarness(t)
	h.lease(3 * time.Second) // due t0+1s
	h.stream()
	if !h.clk.WaitArmed(at(h, time.Second), 5*time.Second) { // the keeper sleeps until then
		t.Fatal("first renewal not scheduled")
	}
	h.clk.Advance(30 * time.Millisecond)
	second := h.c.newLease("job2", "me", 8, 3*time.Second, h.clk.Now()) // due t0+1.03s: within 50 ms
	h.c.keeper.add(second)
	h.clk.Advance(40 * time.Millisecond)
	third := h.c.newLease("job3", "me", 9, 3*time.Second, h.clk.Now()) // due t0+1.07s: 70 ms after the first
	h.c.keeper.add(third)
	h.advanceTo(at(h, time.Second))
	a, b := h.nextSend(), h.nextSend()
	if !a.at.Equal(at(h, time.Second)) || !b.at.Equal(at(h, time.Second)) || a.req.GetName() != "job" || b.req.GetName() != "job2" {
		t.Fatalf("first burst: %s at t0+%s, %s at t0+%s", a.req.GetName(), a.at.Sub(h.t0), b.req.GetName(), b.at.Sub(h.t0))
	}
	// The third was due 70 ms after the first: had it gone with the burst,
	// it would show up here sent at t0+1s.
	h.advanceTo(at(h, 1070*time.Millisecond))
	if c := h.nextSend(); c.req.GetName() != "job3" || !c.at.Equal(at(h, 1070*time.Millisecond)) {
		t.Fatalf("third renewal: %s at t0+%s", c.req.GetName(), c.at.Sub(h.t0))
	}
}

// A leader slow to answer a burst is not left while it makes progress: the
// watchdog counts from the last answer. Three renewals leave at 1 s; their
// answers come 450 ms apart, the last 1.35 s after they were sent (beyond
// the stall limit of 1 s), and the stream stays.
func TestKeepAliveSlowLeaderIsNotAStall(t *testing.T) {
	h := newHarness(t)
	var ls []*Lease
	for i, name := range []string{"a", "b", "c"} {
		l := h.c.newLease(name, "me", uint64(i+1), 3*time.Second, h.clk.Now())
		h.c.keeper.add(l)
		ls = append(ls, l)
	}
	st := h.stream()
	h.advanceTo(at(h, time.Second))
	var sent []sentReq
	for range ls {
		sent = append(sent, h.nextSend())
	}
	progress := at(h, time.Second)
	for i, s := range sent {
		// The watchdog is armed 1 s after the last answer (or the send).
		if !h.clk.WaitArmed(progress.Add(time.Second), 5*time.Second) {
			t.Fatalf("watchdog not armed at t0+%s", progress.Add(time.Second).Sub(h.t0))
		}
		progress = progress.Add(450 * time.Millisecond)
		h.clk.Advance(progress.Sub(h.clk.Now()))
		st.resp <- &coordv1.KeepAliveResponse{Name: s.req.GetName(), Generation: s.req.GetGeneration(), Ok: true, Seq: s.req.GetSeq()}
		want := s.at.Add(3*time.Second - 300*time.Millisecond)
		for end := time.Now().Add(5 * time.Second); !ls[i].Deadline().Equal(want); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("lease %d: deadline t0+%s", i, ls[i].Deadline().Sub(h.t0))
			}
		}
	}
	select {
	case <-st.ctx.Done():
		t.Fatal("a slow but answering leader was left")
	case s := <-h.streams:
		t.Fatalf("a second stream %s opened", s.label)
	default:
	}
}
