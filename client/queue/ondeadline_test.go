package queue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Job.OnDeadline reports the attempt's local deadline at once and each
// move by an acknowledged heartbeat (send + VT − margin); HandleDefault
// runs the kinds without a handler of their own.
func TestOnDeadlineAndDefaultHandler(t *testing.T) {
	h := newHarness(t)
	h.f.add("default", "other-kind", nil, 30*time.Second)
	ch := make(chan started, 10)
	deadlines := make(chan time.Time, 10)
	w := h.worker(WithQueue("default", 1))
	w.Handle("k", func(context.Context, *Job) error {
		t.Error("the handler of kind k ran a job of another kind")
		return nil
	})
	w.HandleDefault(func(ctx context.Context, j *Job) error {
		j.OnDeadline(func(d time.Time) { deadlines <- d })
		return blocking(ch, nil)(ctx, j)
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	s := recv(t, ch, "start")
	if s.j.Kind != "other-kind" {
		t.Fatalf("started %v", s.j)
	}
	// Margin: 30 s / 10 = 3 s, clamped to 2 s.
	if d := recv(t, deadlines, "first deadline"); !d.Equal(h.at(28 * time.Second)) {
		t.Fatalf("first deadline t0+%s", d.Sub(h.t0))
	}
	h.advanceTo(h.at(10 * time.Second))
	recv(t, h.f.heartbeats, "heartbeat")
	if d := recv(t, deadlines, "deadline after the heartbeat"); !d.Equal(h.at(38*time.Second)) || !d.Equal(s.j.Deadline()) {
		t.Fatalf("deadline after the heartbeat sent at t0+10s: t0+%s", d.Sub(h.t0))
	}
}

// The claims of one acknowledged heartbeat call are queued again together:
// while an OnDeadline function of the first still runs, the next heartbeat
// is due for both and goes out as one call (queued one by one, a clock
// that moved between two of them split the batch).
func TestAcknowledgedBatchStaysTogether(t *testing.T) {
	h := newHarness(t)
	h.f.add("default", "k", nil, 30*time.Second)
	h.f.add("default", "k", nil, 30*time.Second)
	ch := make(chan started, 10)
	hit, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	var blocked atomic.Bool
	w := h.worker(WithQueue("default", 2))
	w.Handle("k", func(ctx context.Context, j *Job) error {
		first := true
		j.OnDeadline(func(time.Time) {
			if first {
				first = false
				return
			}
			if blocked.CompareAndSwap(false, true) {
				hit <- struct{}{}
				<-release
			}
		})
		return blocking(ch, nil)(ctx, j)
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "start")
	recv(t, ch, "start")
	h.advanceTo(h.at(10 * time.Second))
	if hb := recv(t, h.f.heartbeats, "heartbeat"); len(hb.req.GetAttempts()) != 2 {
		t.Fatalf("first heartbeat %v", hb.req)
	}
	recv(t, hit, "an OnDeadline call after the acknowledgement")
	h.advanceTo(h.at(20 * time.Second))
	if hb := recv(t, h.f.heartbeats, "heartbeat"); len(hb.req.GetAttempts()) != 2 {
		t.Fatalf("heartbeat at t0+20s split the batch: %v", hb.req)
	}
}
