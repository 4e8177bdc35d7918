package client

import (
	"context"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
)

// The tally of a lookup round, alone: a self-declared leader beats the
// one more nodes name; a named leader that was asked and has not answered
// is waited for (wait), not trusted; one not asked is trusted.
func TestLookupTally(t *testing.T) {
	cands := []string{"a", "b", "c"}
	tl := newTally(cands, "a", 3)
	if s, w := tl.settled(); s || w {
		t.Fatalf("settled %v wait %v before any answer", s, w)
	}
	tl.add(memberAnswer{ep: "b", ok: true, leaderAddr: "a"})
	tl.add(memberAnswer{ep: "c", ok: true, leaderAddr: "a"})
	if s, w := tl.settled(); s || !w {
		t.Fatalf("the named leader a has not answered: settled %v wait %v, want a wait", s, w)
	}
	if r := tl.result(); r.addr != "a" || r.trusted || r.self {
		t.Fatalf("result %+v: a named leader that did not answer is not trusted", r)
	}
	tl.add(memberAnswer{ep: "a", ok: true, leaderAddr: "a", self: true})
	if s, _ := tl.settled(); !s {
		t.Fatal("not settled after every answer")
	}
	r := tl.result()
	if r.addr != "a" || !r.self || !r.trusted || len(r.reachable) != 3 || r.reachable[0] != "a" {
		t.Fatalf("result %+v", r)
	}

	// A majority behind a self-declared leader settles at once.
	tl = newTally(cands, "", 3)
	tl.add(memberAnswer{ep: "c", ok: true, leaderAddr: "c", self: true})
	tl.add(memberAnswer{ep: "b", ok: true, leaderAddr: "c"})
	if s, _ := tl.settled(); !s {
		t.Fatal("a self-declared leader with 2 of 3 behind it did not settle the round")
	}
	// Self-declared first, even against more votes.
	tl = newTally(cands, "", 5)
	tl.add(memberAnswer{ep: "a", ok: true, leaderAddr: "x"})
	tl.add(memberAnswer{ep: "b", ok: true, leaderAddr: "x"})
	tl.add(memberAnswer{ep: "c", ok: true, leaderAddr: "c", self: true})
	if addr, self := tl.best(); addr != "c" || !self {
		t.Fatalf("best %s self %v, want the self-declared c", addr, self)
	}
	// A leader nobody asked (not one of the candidates) is trusted.
	tl = newTally([]string{"a"}, "", 1)
	tl.add(memberAnswer{ep: "a", ok: true, leaderAddr: "elsewhere"})
	if r := tl.result(); !r.trusted || r.addr != "elsewhere" {
		t.Fatalf("result %+v", r)
	}
}

// A round whose named leader (the suspect) stays silent waits suspectGrace on the
// client's clock (virtual time), then ends untrusted; the leader's own
// answer within the grace ends it trusted.
func TestLookupRoundGraceOnTheClock(t *testing.T) {
	for _, answers := range []bool{false, true} {
		clk := clock.NewFake(time.Unix(1_000_000, 0))
		t0 := clk.Now()
		ch := make(chan memberAnswer, 3)
		done := make(chan leaderInfo, 1)
		go func() {
			done <- lookupRound(context.Background(), clk, newTally([]string{"a", "b", "c"}, "a", 3), ch)
		}()
		ch <- memberAnswer{ep: "b", ok: true, leaderAddr: "a"}
		ch <- memberAnswer{ep: "c", ok: true, leaderAddr: "a"}
		if !clk.WaitArmed(t0.Add(suspectGrace), 5*time.Second) {
			t.Fatal("no grace timer on the client's clock")
		}
		select {
		case r := <-done:
			t.Fatalf("the round ended before its grace: %+v", r)
		default:
		}
		if answers {
			ch <- memberAnswer{ep: "a", ok: true, leaderAddr: "a", self: true}
		} else {
			clk.Advance(suspectGrace)
		}
		r := within(t, done, "the round did not end")
		if r.addr != "a" || r.trusted != answers {
			t.Fatalf("leader answers %v: %+v", answers, r)
		}
	}
}
