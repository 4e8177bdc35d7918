//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/periodic"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/proccluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Calendar time (node/DESIGN.md, "Time") with real processes. The test
// process's wall clock is the leader's: both read this host's clock, and
// the leader runs without --test-clock-offset.

// Scenario 11: three failovers in a row (kill -9 of the leader, restarted
// once a new one leads), then a full-cluster outage (every node killed;
// short profile 5 s, full 30 s), under a light workload. Lease time pauses
// through all of it (G9) and lags the wall clock by about the sum; calendar
// time does not: after the restart the calendar stamped into a claim is
// within 100 ms of the test's (= the leader's) wall clock, a claim with
// not_before = now is granted at once, and a one-shot job due "now"
// (client/periodic with periodic.At) starts within 1 s.
func TestCalendarAfterFailoversAndOutage(t *testing.T) {
	outage := time.Duration(cycles(5, 30)) * time.Second
	r := newRun(t)
	r.client("w1", "work", "--ttl", "2s", "--interval", "50ms")
	for i := 0; i < 3; i++ {
		leader, took := r.failover(fmt.Sprintf("failover-%d", i))
		r.c.WaitCaughtUp(leader, 30*time.Second)
		t.Logf("failover %d: kill -9 %s -> acquire after %s", i, leader.ID, took.Round(time.Millisecond))
	}
	before := leaderStatus(t, r.c)
	t.Logf("before the outage: lease time lags the calendar by %s", ms(before.GetLeaseClockLagMs()))

	for _, nd := range r.c.Nodes {
		r.c.Kill(nd)
	}
	time.Sleep(outage)
	for _, nd := range r.c.Nodes {
		r.c.Restart(nd)
	}
	leader := r.c.WaitLeader()
	due := time.Now() // a job due now, at the moment the cluster is back

	// The leader's calendar against its wall clock, in its own Status, and
	// the lease clock's lag, which grew by the outage.
	st := leaderStatus(t, r.c)
	t.Logf("after a %s outage: %s leads; lease time lags the calendar by %s (was %s); calendar - wall on the leader %s",
		outage, st.GetId(), ms(st.GetLeaseClockLagMs()), ms(before.GetLeaseClockLagMs()),
		ms(st.GetCalendarTimeMs()-st.GetWallTimeMs()))
	if lag := st.GetLeaseClockLagMs() - before.GetLeaseClockLagMs(); lag < outage.Milliseconds() {
		t.Errorf("the lease clock lag grew by %s over a %s outage: lease time did not pause?", ms(lag), outage)
	}

	// A claim due now: granted at once, stamped with the calendar time.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc := coordv1.NewCoordinatorClient(leader.Conn)
	sent := time.Now()
	resp, err := cc.Acquire(ctx, &coordv1.AcquireRequest{Name: "due-now", Owner: "probe", Ttl: pbtime.Dur(10_000),
		Claim: &coordv1.WindowRef{Job: "due-now", Window: "w", NotBefore: pbtime.At(sent.UnixMilli())}})
	recv := time.Now()
	if err != nil || !resp.GetClaim().GetClaimed() {
		t.Fatalf("a claim due now after the outage: %v %v", resp, err)
	}
	stamped := resp.GetClaim().GetWindow().GetStartedAtMs()
	off := max(sent.UnixMilli()-stamped, stamped-recv.UnixMilli(), 0)
	t.Logf("claim with not_before = now: granted in %s; calendar stamp %s outside [send, receive] of the call (target <= 100ms)",
		recv.Sub(sent).Round(time.Millisecond), ms(off))
	if off > 100 {
		t.Errorf("calendar time is %s off the leader's wall clock after the outage (target 100 ms)", ms(off))
	}

	// A one-shot job due now, through the code-defined runner.
	c, err := client.New(ctx, r.c.Endpoints(), client.WithOwner("calendar-runner"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	started := make(chan time.Time, 1)
	runner := periodic.NewRunner(c)
	if err := runner.Add(periodic.Job{Name: "run-now", Schedule: periodic.At(due), Queue: "calendar-run-now",
		Run: func(context.Context, *periodic.Run) error { started <- time.Now(); return nil }}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(rctx) }()
	select {
	case at := <-started:
		t.Logf("job due at the restart (periodic.At) started %s after it was due (target <= 1s)", at.Sub(due).Round(time.Millisecond))
		if at.Before(due) {
			t.Errorf("the job started %s early", due.Sub(at))
		}
		if at.Sub(due) > time.Second {
			t.Errorf("the job started %s after it was due (target 1 s)", at.Sub(due).Round(time.Millisecond))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job due now did not start within 30 s")
	}
	stop()
	<-done
	r.stopClients()
	r.check()
}

// Scenario 12: followers with skewed clocks (--test-clock-offset +10s on
// one, -10s on another); the leader's clock is right. Jobs run through
// client/periodic runners in the test process (one reaching the cluster
// through each skewed follower first, and one whose own clock is 10 s
// ahead; the three put the same schedules, whose occurrences the leader
// makes on its calendar clock): no run starts before its occurrence on the
// leader's clock, none more than 1 s after it, none twice; a claim through the follower that is ahead is
// refused as TOO_EARLY until its time on the leader's clock. The leader
// measures both offsets (Status, coordctl status) and logs a warning for
// each. Then leadership moves to the node 10 s ahead (calendar time jumps
// 10 s forward) and to the one 10 s behind (calendar time holds until that
// clock passes the last stamp; it never goes back).
func TestSkewedFollowersStartNoJobEarly(t *testing.T) {
	runFor := time.Duration(cycles(12, 60)) * time.Second
	const skew = 10 * time.Second
	r := newRunOn(t, func() *proccluster.TestCluster {
		nodes := proccluster.LoopbackNodes(3, true)
		nodes[1].ExtraArgs = append(nodes[1].ExtraArgs, "--test-clock-offset", skew.String())
		nodes[2].ExtraArgs = append(nodes[2].ExtraArgs, "--test-clock-offset", (-skew).String())
		return proccluster.StartNodes(t, coorddBin, nodes)
	})
	right, ahead, behind := r.c.Nodes[0], r.c.Nodes[1], r.c.Nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lead(t, r, ctx, right)
	// If the node 10 s ahead led first, it stamped calendar time 10 s
	// ahead, and calendar time never goes back: the right leader holds that
	// stamp until its own clock passes it (node/DESIGN.md "Time"). The
	// checks below start once calendar time is the leader's clock again.
	waited := time.Now()
	r.await("calendar time back on the leader's clock", 2*skew, func() bool {
		st, err := r.c.Status(right, time.Second)
		return err == nil && st.GetCalendarTimeMs() <= time.Now().UnixMilli()+100
	})
	if w := time.Since(waited); w > time.Second {
		t.Logf("calendar time was held ahead (a skewed node led first): waited %s for the leader's clock", w.Round(time.Millisecond))
	}

	// The leader's measurements: +10 s and -10 s, within their bounds.
	var offsets map[string]*coordv1.ClockOffset
	r.await("offsets of both skewed followers", 15*time.Second, func() bool {
		st, err := r.c.Status(right, time.Second)
		if err != nil {
			return false
		}
		offsets = map[string]*coordv1.ClockOffset{}
		for _, o := range st.GetClockOffsets() {
			if o.GetError() == "" {
				offsets[o.GetId()] = o
			}
		}
		return offsets[ahead.ID] != nil && offsets[behind.ID] != nil
	})
	for nd, want := range map[*proccluster.Node]time.Duration{ahead: skew, behind: -skew} {
		o := offsets[nd.ID]
		got, bound := pbtime.Duration(o.GetOffset()), pbtime.Duration(o.GetOffsetError())
		t.Logf("leader %s measured %s at %s ± %s (set: %s)", right.ID, nd.ID, got, bound, want)
		if (got - want).Abs() > bound+5*time.Millisecond {
			t.Errorf("%s: offset %s ± %s, set to %s", nd.ID, got, bound, want)
		}
	}
	if fst, err := r.c.Status(ahead, time.Second); err != nil || fst.GetClockOffset() == nil {
		// a member learns its own offset on the next probe
		r.await(ahead.ID+" knows its offset", 5*time.Second, func() bool {
			fst, err := r.c.Status(ahead, time.Second)
			return err == nil && fst.GetClockOffset() != nil
		})
	}
	if logs := nodeLog(t, right); strings.Count(logs, "wall clock is off the leader's") < 2 {
		t.Errorf("the leader logged %d clock warnings, want one per skewed member", strings.Count(logs, "wall clock is off the leader's"))
	}

	// A claim through the follower that is 10 s ahead, due in 500 ms on
	// the leader's clock: too early now, granted at its time.
	fc := coordv1.NewCoordinatorClient(ahead.Conn)
	nb := time.Now().Add(500 * time.Millisecond)
	claim := &coordv1.AcquireRequest{Name: "gate", Owner: "probe", Ttl: pbtime.Dur(10_000),
		Claim: &coordv1.WindowRef{Job: "gate", Window: "w", NotBefore: pbtime.At(nb.UnixMilli())}}
	if _, err := fc.Acquire(ctx, claim); coorderr.ReasonOf(err) != coorderr.TooEarly {
		t.Fatalf("a claim 500 ms early through the follower 10 s ahead: %v", err)
	} else {
		t.Logf("claim 500 ms early through %s (+10s): TOO_EARLY, wait_ms %s", ahead.ID, coorderr.Metadata(err)["wait_ms"])
	}
	time.Sleep(time.Until(nb))
	if resp, err := fc.Acquire(ctx, claim); err != nil || !resp.GetClaim().GetClaimed() {
		t.Fatalf("the claim at its time: %v %v", resp, err)
	}

	// Runners: two with a right clock reaching the cluster through each
	// skewed follower first, one whose own clock is 10 s ahead.
	var mu sync.Mutex
	type start struct {
		runner, job string
		occ, at     time.Time
	}
	var starts []start
	job := func(runner, name string, every time.Duration) periodic.Job {
		return periodic.Job{Name: name, Schedule: periodic.Every(every), Queue: "skewed",
			Run: func(_ context.Context, run *periodic.Run) error {
				at := time.Now()
				mu.Lock()
				starts = append(starts, start{runner, name, run.Occurrence, at})
				mu.Unlock()
				return nil
			}}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runners := []struct {
		name  string
		first *proccluster.Node
		clk   clock.Clock
	}{
		{"via-ahead", ahead, clock.Real{}},
		{"via-behind", behind, clock.Real{}},
		{"clock-ahead", behind, clock.Offset{Base: clock.Real{}, Skew: skew}},
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	up := time.Now()
	for _, rn := range runners {
		eps := []string{rn.first.GRPCAddr}
		for _, nd := range r.c.Nodes {
			if nd != rn.first {
				eps = append(eps, nd.GRPCAddr)
			}
		}
		c, err := client.New(ctx, eps, client.WithOwner(rn.name), client.WithClock(rn.clk), client.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		run := periodic.NewRunner(c, periodic.WithLogger(quiet))
		for _, j := range []periodic.Job{job(rn.name, "every-1s", time.Second), job(rn.name, "every-2s", 2*time.Second),
			job(rn.name, "every-3s", 3*time.Second)} {
			if err := run.Add(j); err != nil {
				t.Fatal(err)
			}
		}
		wg.Go(func() {
			if err := run.Run(rctx); err != nil {
				t.Errorf("runner %s: %v", rn.name, err)
			}
		})
	}
	time.Sleep(runFor)
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var lags []time.Duration
	byRunner := map[string]int{}
	windows := map[string]int{}
	// An occurrence from before the runners were up is caught up late on
	// purpose; lateness is judged on the ones after (a second of start-up
	// dropped), earliness on all.
	settled := up.Add(time.Second)
	for _, s := range starts {
		lag := s.at.Sub(s.occ)
		if !s.occ.Before(settled) {
			lags = append(lags, lag)
		}
		byRunner[s.runner]++
		windows[s.job+"/"+s.occ.UTC().Format(time.RFC3339Nano)]++
		if lag < 0 {
			t.Errorf("%s ran %s/%s %s before its occurrence on the leader's clock", s.runner, s.job, s.occ.Format(time.TimeOnly), -lag)
		}
	}
	if len(lags) == 0 {
		t.Fatal("no job ran after the runners were up")
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	t.Logf("%d runs in %s (by runner: %v), %d of occurrences after start-up; their start lag after the occurrence on the leader's clock: min %s, p50 %s, p99 %s, max %s (target: none < 0, none > 1s)",
		len(starts), runFor, byRunner, len(lags), lags[0].Round(time.Millisecond), lags[len(lags)/2].Round(time.Millisecond),
		lags[len(lags)*99/100].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	for _, s := range starts {
		if lag := s.at.Sub(s.occ); lag > time.Second && !s.occ.Before(settled) {
			t.Errorf("%s ran %s at %s, %s after its occurrence (target 1 s)", s.runner, s.job, s.occ.Format(time.TimeOnly),
				lag.Round(time.Millisecond))
		}
	}
	for w, n := range windows {
		if n > 1 {
			t.Errorf("window %s ran %d times", w, n)
		}
	}
	if byRunner["clock-ahead"] > 0 {
		t.Logf("the runner whose clock is 10 s ahead ran %d occurrences, none early", byRunner["clock-ahead"])
	}

	// The leader's wall clock jumps: leadership to the node 10 s ahead,
	// then to the one 10 s behind.
	lead(t, r, ctx, ahead)
	st := leaderStatus(t, r.c)
	jump := time.Duration(st.GetCalendarTimeMs()-time.Now().UnixMilli()) * time.Millisecond
	t.Logf("%s (+10s) leads: calendar time is %s ahead of the right clock (the jump forward)", ahead.ID, jump.Round(time.Millisecond))
	if jump < skew-time.Second || jump > skew+time.Second {
		t.Errorf("calendar under the leader 10 s ahead: %s ahead", jump)
	}
	time.Sleep(500 * time.Millisecond) // a few ticks stamped by the leader ahead
	fst, err := r.c.Status(behind, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lastCal := fst.GetCalendarTimeMs() // the last stamp behind applied (a follower's calendar)
	lead(t, r, ctx, behind)
	handed := time.Now()
	st = leaderStatus(t, r.c)
	if st.GetCalendarTimeMs() < lastCal {
		t.Fatalf("calendar time went back from the stamp %d to %d on the leader 10 s behind", lastCal, st.GetCalendarTimeMs())
	}
	held := time.Duration(st.GetCalendarTimeMs()-st.GetWallTimeMs()) * time.Millisecond
	t.Logf("%s (-10s) leads: calendar holds %s ahead of its wall clock (never back)", behind.ID, held.Round(time.Millisecond))
	if held < 2*skew-2*time.Second {
		t.Errorf("the leader 10 s behind holds calendar time only %s ahead of its clock", held)
	}
	if full() {
		// It holds until the leader's wall clock passes the last stamp.
		r.await("the calendar follows the wall clock again", 40*time.Second, func() bool {
			st, err := r.c.Status(behind, time.Second)
			return err == nil && st.GetCalendarTimeMs() <= st.GetWallTimeMs()
		})
		t.Logf("calendar time followed the wall clock of %s again %s after it took over", behind.ID,
			time.Since(handed).Round(100*time.Millisecond))
	}
	lead(t, r, ctx, right)
	d := r.c.WaitConverged()
	t.Logf("all nodes at digest %s", d[:12])
}

// lead hands leadership to nd (if it does not lead yet) and waits until it
// leads.
func lead(t *testing.T, r *run, ctx context.Context, nd *proccluster.Node) {
	t.Helper()
	cur := r.c.WaitLeader()
	if cur == nd {
		return
	}
	if _, err := coordv1.NewClusterClient(cur.Conn).TransferLeadership(ctx, &coordv1.TransferLeadershipRequest{Id: nd.ID}); err != nil {
		t.Fatalf("transfer to %s: %v", nd.ID, err)
	}
	r.await(nd.ID+" leads", 15*time.Second, func() bool {
		st, err := r.c.Status(nd, time.Second)
		return err == nil && st.GetState() == "Leader" && st.GetCalendarTimeMs() > 0 && r.c.Leader() == nd
	})
}

// leaderStatus is the Status of the leader, once it is ready: its
// calendar time is then its own (its wall clock, or the last stamp when
// that is ahead), not yet the FSM's.
func leaderStatus(t *testing.T, c *proccluster.TestCluster) *coordv1.StatusResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil {
			if st, err := c.Status(l, time.Second); err == nil && st.GetState() == "Leader" &&
				st.GetCalendarTimeMs() >= st.GetWallTimeMs() {
				return st
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no ready leader")
	return nil
}

// nodeLog is a node's log so far.
func nodeLog(t *testing.T, nd *proccluster.Node) string {
	t.Helper()
	b, err := os.ReadFile(nd.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
