package due

import (
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
)

type item struct {
	Slot
	at   time.Time
	name string
}

func (i *item) Due() time.Time { return i.at }

func TestHeapOrdersByDueAndTracksPlaces(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var h Heap[*item]
	a, b, c, d := &item{at: t0.Add(3), name: "a"}, &item{at: t0.Add(1), name: "b"}, &item{at: t0.Add(2), name: "c"}, &item{at: t0.Add(4), name: "d"}
	for _, x := range []*item{a, b, c, d} {
		if x.Queued() {
			t.Fatalf("%s queued before Push", x.name)
		}
		h.Push(x)
	}
	if h.Len() != 4 || h.Peek() != b {
		t.Fatalf("len %d, earliest %s; want 4, b", h.Len(), h.Peek().name)
	}
	h.Remove(c)
	if c.Queued() || h.Len() != 3 {
		t.Fatalf("c queued %t, len %d after Remove", c.Queued(), h.Len())
	}
	h.Remove(c) // not in the heap: nothing
	d.at = t0
	h.Fix(d)
	if h.Peek() != d {
		t.Fatalf("earliest %s after Fix; want d", h.Peek().name)
	}
	h.Each(func(x *item) { x.at = t0.Add(10) })
	a.at = t0.Add(5)
	h.Init()
	var got []string
	for h.Len() > 0 {
		x := h.Pop()
		if x.Queued() {
			t.Fatalf("%s queued after Pop", x.name)
		}
		got = append(got, x.name)
	}
	if got[0] != "a" || len(got) != 3 {
		t.Fatalf("pop order %v; want a first, 3 items", got)
	}
}

func TestDeadlineOnlyMovesLater(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	fired := 0
	var d Deadline
	d.Start(clk, clk.Now().Add(3*time.Second), func() { fired++ })
	d.Extend(clk.Now().Add(time.Second)) // earlier: ignored
	if want := time.Unix(1003, 0); !d.At.Equal(want) {
		t.Fatalf("deadline %s; want %s", d.At, want)
	}
	clk.Advance(2 * time.Second)
	d.Extend(clk.Now().Add(2 * time.Second)) // 1004
	clk.Advance(1500 * time.Millisecond)     // 1003.5: past the old deadline
	if fired != 0 {
		t.Fatal("fired at the old deadline after Extend")
	}
	clk.Advance(time.Second)
	if fired != 1 {
		t.Fatalf("fired %d times; want 1 at the extended deadline", fired)
	}
}
