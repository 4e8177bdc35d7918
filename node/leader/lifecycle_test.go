package leader

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// stub is a service for lifecycle tests: it counts its runs and returns
// fail (when set) instead of waiting for its context.
type stub struct {
	name        string
	runs, ended atomic.Int32
	fail        atomic.Pointer[error]
	started     chan struct{}
}

func newStub(name string) *stub { return &stub{name: name, started: make(chan struct{}, 10)} }

func (s *stub) Name() string { return s.name }

func (s *stub) Run(ctx context.Context, _ Leadership) error {
	s.runs.Add(1)
	s.started <- struct{}{}
	if err := s.fail.Load(); err != nil {
		return *err
	}
	<-ctx.Done()
	s.ended.Add(1)
	return nil
}

func (s *stub) waitStart(t *testing.T) {
	t.Helper()
	select {
	case <-s.started:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not start", s.name)
	}
}

// Lead runs every registered service, one registered meanwhile at once,
// and returns only once all of them stopped with the leadership.
func TestLifecycleStartsAndStopsEveryService(t *testing.T) {
	l := newFakeLeadership()
	lc := NewLifecycle(quiet(), l.clk)
	a, b, late := newStub("a"), newStub("b"), newStub("late")
	lc.Register(a, b)
	ctx, cancel := context.WithCancel(context.Background())
	led := make(chan struct{})
	go func() { lc.Lead(ctx, l); close(led) }()
	a.waitStart(t)
	b.waitStart(t)
	lc.Register(late)
	late.waitStart(t)
	if got := lc.Names(); len(got) != 3 || got[0] != "a" || got[2] != "late" {
		t.Fatalf("Names = %v", got)
	}
	cancel()
	select {
	case <-led:
	case <-time.After(5 * time.Second):
		t.Fatal("Lead did not return after its leadership ended")
	}
	for _, s := range []*stub{a, b, late} {
		if s.ended.Load() != 1 {
			t.Fatalf("Lead returned before %s stopped", s.name)
		}
	}
	// Between leaderships nothing runs; the next one starts them all again.
	lc.Register(newStub("between"))
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go lc.Lead(ctx, l)
	a.waitStart(t)
	if a.runs.Load() != 2 {
		t.Fatalf("a ran %d times, want 2", a.runs.Load())
	}
}

// A service that fails runs again after a backoff on the lifecycle's
// clock; one that returns nil is done for the term.
func TestLifecycleRestartsAFailedService(t *testing.T) {
	l := newFakeLeadership()
	lc := NewLifecycle(quiet(), l.clk)
	failing, done := newStub("failing"), newStub("done")
	boom := errors.New("boom")
	failing.fail.Store(&boom)
	var nilErr error
	done.fail.Store(&nilErr)
	lc.Register(failing, done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go lc.Lead(ctx, l)
	failing.waitStart(t)
	done.waitStart(t)
	// The first restart waits 80-100 ms (restartBackoff, 20 % jitter).
	if !l.clk.WaitTimers(1, 5*time.Second) {
		t.Fatal("no restart timer armed")
	}
	l.clk.Advance(79 * time.Millisecond)
	select {
	case <-failing.started:
		t.Fatal("restarted before its backoff")
	default:
	}
	l.clk.Advance(21 * time.Millisecond)
	failing.waitStart(t)
	if done.runs.Load() != 1 {
		t.Fatalf("a service that returned nil ran %d times", done.runs.Load())
	}
}
