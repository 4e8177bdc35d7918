package client

import (
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// A resumed lease's OnRenewal sees every acknowledged renewal of the
// shared stream, and only its own.
func TestOnRenewalSeesAcknowledgements(t *testing.T) {
	h := newHarness(t)
	got := make(chan *coordv1.KeepAliveResponse, 4)
	l := h.c.newLease("job", "me", 7, 3*time.Second, h.clk.Now())
	l.onRenewal = func(r *coordv1.KeepAliveResponse) { got <- r }
	h.c.keeper.add(l)
	other := h.c.newLease("other", "me", 8, 3*time.Second, h.clk.Now()) // same due time, no callback
	h.c.keeper.add(other)
	st := h.stream()
	h.advanceTo(at(h, time.Second))
	sent := map[string]*coordv1.KeepAliveRequest{}
	for range 2 {
		s := h.nextSend()
		sent[s.req.GetName()] = s.req
	}
	// The other lease's ack first: the keeper handles acks in order, so when
	// the callback reports "job", the other's ack was handled before it.
	for _, name := range []string{"other", "job"} {
		r := sent[name]
		st.resp <- &coordv1.KeepAliveResponse{Name: name, Generation: r.GetGeneration(), Ok: true, Seq: r.GetSeq(), ExpiresIn: pbtime.Dur(3000)}
	}
	select {
	case r := <-got:
		if r.GetName() != "job" || r.GetGeneration() != 7 || r.GetExpiresInMs() != 3000 || !r.GetOk() {
			t.Fatalf("renewal %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal reported")
	}
	select {
	case r := <-got:
		t.Fatalf("callback for another lease: %v", r)
	default:
	}
}

// OnDeadline reports the local deadline at once, then each move by an
// acknowledged renewal: send time + TTL − margin, in order.
func TestOnDeadlineSeesEveryMove(t *testing.T) {
	h := newHarness(t)
	l := h.c.newLease("job", "me", 7, 3*time.Second, h.clk.Now())
	h.c.keeper.add(l)
	got := make(chan time.Time, 4)
	l.OnDeadline(func(d time.Time) { got <- d })
	next := func() time.Time {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(5 * time.Second):
			t.Fatal("no deadline reported")
			return time.Time{}
		}
	}
	if d := next(); !d.Equal(at(h, 2700*time.Millisecond)) { // margin 300 ms
		t.Fatalf("first deadline t0+%s, want t0+2.7s", d.Sub(h.t0))
	}
	st := h.stream()
	h.advanceTo(at(h, time.Second))
	s := h.nextSend()
	st.resp <- &coordv1.KeepAliveResponse{Name: "job", Generation: 7, Ok: true, Seq: s.req.GetSeq(), ExpiresIn: pbtime.Dur(3000)}
	if d := next(); !d.Equal(at(h, 3700*time.Millisecond)) || !d.Equal(l.Deadline()) {
		t.Fatalf("deadline after the renewal sent at t0+1s: t0+%s (Deadline t0+%s), want t0+3.7s", d.Sub(h.t0), l.Deadline().Sub(h.t0))
	}
}
