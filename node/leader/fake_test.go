package leader

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
)

// calendarAhead is how far the fake leadership's calendar time reads ahead
// of its lease time, so a test sees which of the two a service used.
const calendarAhead = 1_000_000

// fakeLeadership is a ready leadership on a fake clock: lease time is the
// clock's Unix ms, calendar time calendarAhead more. Propose records each
// body (on proposed) and answers with answer (nil: a nil result).
type fakeLeadership struct {
	clk      *clock.Fake
	proposed chan any

	mu     sync.Mutex
	last   int64
	answer func(body any) (any, error)
}

func newFakeLeadership() *fakeLeadership {
	return &fakeLeadership{clk: clock.NewFake(time.Unix(1_700_000_000, 0)), proposed: make(chan any, 100)}
}

func (f *fakeLeadership) LeaseTime() int64    { return f.clk.Now().UnixMilli() }
func (f *fakeLeadership) CalendarTime() int64 { return f.LeaseTime() + calendarAhead }
func (f *fakeLeadership) LastStamp() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fakeLeadership) Propose(ctx context.Context, body any) (any, error) {
	f.mu.Lock()
	f.last = f.LeaseTime()
	answer := f.answer
	f.mu.Unlock()
	f.proposed <- body
	if answer == nil {
		return nil, ctx.Err()
	}
	return answer(body)
}

func (f *fakeLeadership) setAnswer(a func(body any) (any, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = a
}

// next is the next proposed body; it fails the test after 5 s (real time).
func (f *fakeLeadership) next(t *testing.T, what string) any {
	t.Helper()
	select {
	case b := <-f.proposed:
		return b
	case <-time.After(5 * time.Second):
		t.Fatalf("nothing proposed: %s", what)
		return nil
	}
}

// none fails if anything was proposed.
func (f *fakeLeadership) none(t *testing.T, what string) {
	t.Helper()
	select {
	case b := <-f.proposed:
		t.Fatalf("%s: proposed %T", what, b)
	default:
	}
}

// armed waits until a timer is armed to fire d from now on the fake clock.
func (f *fakeLeadership) armed(t *testing.T, d time.Duration) {
	t.Helper()
	if !f.clk.WaitArmed(f.clk.Now().Add(d), 5*time.Second) {
		t.Fatalf("no timer armed at +%v", d)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// running runs s on l until the test ends; it fails the test if Run
// returns an error or does not return once its context ends.
func running(t *testing.T, s Service, l Leadership) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s returned %v", s.Name(), err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s did not stop with its context", s.Name())
		}
	})
}

// ticked waits until the service took the ticks the clock fired.
func (f *fakeLeadership) ticked(t *testing.T) {
	t.Helper()
	if !f.clk.WaitTicksReceived(5 * time.Second) {
		t.Fatal("a tick was not received")
	}
}
