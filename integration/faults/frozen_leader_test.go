//go:build faults

package faults

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/client"
)

// Scenario 10: the frozen leader. Leases kept alive through the SDK (in
// the test process) while the leader is stopped with SIGSTOP: a frozen
// leader neither breaks the KeepAlive stream nor answers, so only the
// SDK's progress deadline (acknowledgements late by min(TTL/3, 2 s)) gets
// the renewals to the new leader. Short profile: 200 leases, 10 s frozen;
// full: 1,000 leases, 30 s. None is lost; renewals resume on the new
// leader within TTL/2 of the freeze; after SIGCONT the old leader rejoins,
// every lease is still held with its generation, and the digests converge.
func TestFrozenLeaderKeepsLeases(t *testing.T) {
	n, frozenFor := cycles(200, 1000), time.Duration(cycles(10, 30))*time.Second
	const ttl = 5 * time.Second
	const margin = ttl / 10 // the SDK's default safety margin for this TTL
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.New(ctx, r.c.Endpoints(), client.WithOwner("frozen-leader-holder"), client.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	leases := make([]*client.Lease, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				l, err := c.Acquire(ctx, fmt.Sprintf("frozen-%d", i), ttl)
				if err != nil {
					errs <- err
					return
				}
				leases[i] = l
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	time.Sleep(ttl / 2) // renewals in their steady rhythm

	old := r.c.WaitLeader()
	frozeAt := time.Now()
	r.c.Signal(old, syscall.SIGSTOP)
	t.Logf("froze %s at %s", old.ID, frozeAt.Format("15:04:05.000"))
	elected := make(chan time.Duration, 1)
	go func() { // when the others elect a new leader, for the record
		for time.Since(frozeAt) < frozenFor {
			for _, nd := range r.c.Nodes {
				if st, err := r.c.Status(nd, 200*time.Millisecond); nd != old && err == nil && st.GetState() == "Leader" {
					elected <- time.Since(frozeAt)
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(elected)
	}()
	// A renewal sent after the freeze moves a lease's local deadline past
	// threshold; only a new leader can have acknowledged it.
	threshold := frozeAt.Add(ttl - margin)
	var first, all time.Duration
	lost := 0
	for time.Since(frozeAt) < frozenFor {
		renewed := 0
		lost = 0
		for _, l := range leases {
			if l.Err() != nil {
				lost++
			} else if l.Deadline().After(threshold) {
				renewed++
			}
		}
		if renewed > 0 && first == 0 {
			first = time.Since(frozeAt)
		}
		if renewed == n && all == 0 {
			all = time.Since(frozeAt)
		}
		if lost > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if lost > 0 {
		t.Fatalf("%d of %d leases lost while %s was frozen (%s after the freeze)", lost, n, old.ID,
			time.Since(frozeAt).Round(time.Millisecond))
	}
	if first == 0 || all == 0 {
		t.Fatalf("renewals did not resume on a new leader within %s (first %s, all %s)", frozenFor, first, all)
	}
	newLeader := r.c.Leader()
	if newLeader == nil || newLeader == old {
		t.Fatalf("no new leader while %s is frozen", old.ID)
	}
	t.Logf("%s frozen for %s with %d leases (TTL %s): %s elected %s after the freeze; renewals resumed there %s after the freeze, all %d renewed after %s (target <= TTL/2 = %s); SDK on %s; 0 lost",
		old.ID, frozenFor, n, ttl, newLeader.ID, (<-elected).Round(time.Millisecond), first.Round(time.Millisecond), n,
		all.Round(time.Millisecond), ttl/2, c.Endpoint())
	if first > ttl/2 {
		t.Errorf("renewals resumed %s after the freeze, target <= %s", first.Round(time.Millisecond), ttl/2)
	}

	r.c.Signal(old, syscall.SIGCONT)
	r.c.WaitCaughtUp(old, 30*time.Second)
	time.Sleep(ttl / 2) // the old leader back as a follower; renewals go on
	for _, l := range leases {
		if l.Err() != nil {
			t.Fatalf("lease %s lost after the old leader resumed: %v", l.Name(), l.Err())
		}
		got, err := c.GetLease(ctx, l.Name())
		if err != nil {
			t.Fatal(err)
		}
		if got.GetGeneration() != l.Generation() || got.GetOwner() != l.Owner() || got.GetExpired() {
			t.Fatalf("lease %s: generation %d owner %q expired %v, want generation %d held by %q", l.Name(),
				got.GetGeneration(), got.GetOwner(), got.GetExpired(), l.Generation(), l.Owner())
		}
	}
	for _, l := range leases { // quiet, so that the nodes can converge
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	d := r.c.WaitConverged()
	t.Logf("after SIGCONT: %d leases still held with their generations; all nodes at digest %s", n, d[:12])
}

// testWriter sends the SDK's log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("sdk: %s", p)
	return len(p), nil
}
