package waitq

import (
	"sync"
	"testing"
)

type q = Queue[string, int]

func names(qu *q) []string {
	var out []string
	qu.mu.Lock()
	defer qu.mu.Unlock()
	for _, w := range qu.line {
		out = append(out, w.Value)
	}
	return out
}

func woken(w *Waiter[string, int]) bool {
	select {
	case <-w.Woken():
		return true
	default:
		return false
	}
}

// Callers wait in arrival order; leaving the head wakes the next; a
// delivery takes the caller out of the line with its outcome.
func TestArrivalOrderAndWakeNext(t *testing.T) {
	var qu q
	a, b, c := qu.Push("a"), qu.Push("b"), qu.Push("c")
	if qu.First() != a || qu.Len() != 3 {
		t.Fatalf("first %v len %d", qu.First().Value, qu.Len())
	}
	if b.Leave() != Removed || woken(a) || woken(c) {
		t.Fatal("leaving from the middle woke someone")
	}
	if !a.Deliver(7) || <-a.Done() != 7 {
		t.Fatal("delivery to the head")
	}
	if qu.First() != c || !woken(c) {
		t.Fatal("the new head was not woken")
	}
	if a.Deliver(8) || a.Leave() != Delivered {
		t.Fatal("a second delivery, or a delivered caller leaving, was not refused")
	}
	if c.Leave() != Removed || c.Deliver(1) || qu.Len() != 0 {
		t.Fatal("delivered to a caller that left")
	}
	qu.Push("d").Wake()
	e := qu.Push("e")
	qu.WakeAll()
	if !woken(e) {
		t.Fatal("WakeAll missed a caller")
	}
}

// Claims walk the unclaimed callers in order; a caller that leaves while
// claimed gets the claim's outcome as its last; a claim that produced
// nothing keeps its caller's place.
func TestClaimLeaveUnclaim(t *testing.T) {
	var qu q
	a, b, c := qu.Push("a"), qu.Push("b"), qu.Push("c")
	got := qu.Claim(func(v string) bool { return v != "b" })
	if len(got) != 2 || got[0] != a || got[1] != c {
		t.Fatalf("claimed %v", got)
	}
	if len(qu.Claim(func(string) bool { return true })) != 1 {
		t.Fatal("claimed a claimed caller again")
	}
	if d, _ := a.Unclaim(0, false); d || qu.First() != a {
		t.Fatal("an empty claim moved its caller")
	}
	if c.Leave() != Claimed || qu.Any(func(v string) bool { return v == "c" }) {
		t.Fatal("a claimed caller that left still counts as waiting")
	}
	if d, ab := c.Unclaim(3, false); !d || ab || <-c.Done() != 3 {
		t.Fatal("the claim's outcome was not the leaving caller's last")
	}
	qu.Claim(func(v string) bool { return v == "b" })
	if b.Abandon() != Claimed {
		t.Fatal("abandon while claimed")
	}
	if d, ab := b.Unclaim(5, true); !d || !ab {
		t.Fatalf("delivered %v abandoned %v", d, ab)
	}
	if names(&qu)[0] != "a" || qu.Len() != 1 {
		t.Fatalf("line %v", names(&qu))
	}
	if d, _ := a.Unclaim(9, true); !d || <-a.Done() != 9 || qu.Len() != 0 {
		t.Fatal("a final claim did not deliver")
	}
}

// Leaving races with delivering: exactly one of them wins.
func TestLeaveRacesDeliver(t *testing.T) {
	for range 200 {
		var qu q
		w := qu.Push("x")
		var wg sync.WaitGroup
		var delivered bool
		var st Status
		wg.Go(func() { delivered = w.Deliver(1) })
		wg.Go(func() { st = w.Leave() })
		wg.Wait()
		if delivered != (st == Delivered) {
			t.Fatalf("delivered %v, leave saw %v", delivered, st)
		}
		if qu.Len() != 0 {
			t.Fatal("left in line")
		}
	}
}
