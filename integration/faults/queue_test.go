//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/internal/testutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The job queue (issue 14) under faults: worker processes
// (faultclient --mode qworker, a client/queue Worker) make each job's
// effect with one FencedCommit fenced by the attempt's token and keyed by
// the job; the checkers (jobhistory_test.go) count the effects per job.

// clockSkewBound is how far a worker's start may precede a job's run_at:
// run_at is judged on the cluster's calendar clock (the leader's wall
// clock), and the nodes and the workers all read this host's clock, so
// not at all.
const clockSkewBound = 0

// sdk is a client of the whole cluster for the test process.
func (r *run) sdk(ctx context.Context, owner string) *client.Client {
	r.t.Helper()
	c, err := client.New(ctx, r.c.Endpoints(), client.WithOwner(owner),
		client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

// qworker starts a worker process on queue q.
func (r *run) qworker(name, q string, extra ...string) {
	r.t.Helper()
	r.client(name, "qworker", append([]string{"--queue", q}, extra...)...)
}

// qworkers starts worker processes w1, w2 and w3 on queue q, each with
// extra, and waits until they are up; it returns their job log.
func (r *run) qworkers(q string, extra ...string) *jobLog {
	r.t.Helper()
	l := newJobLog(r.dir)
	for _, w := range []string{"w1", "w2", "w3"} {
		r.qworker(w, q, extra...)
	}
	r.awaitUp(l, "w1", "w2", "w3")
	return l
}

// kill ends a client process with kill -9 (by its PID).
func (r *run) kill(name string) {
	cmd := r.clients[name]
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	delete(r.clients, name)
}

// awaitUp waits until the named workers have started.
func (r *run) awaitUp(l *jobLog, names ...string) {
	r.t.Helper()
	r.await("workers "+strings.Join(names, ", ")+" up", 20*time.Second, func() bool {
		l.refresh(r.t)
		for _, n := range names {
			if !l.up[n] {
				return false
			}
		}
		return true
	})
}

// awaitSlow polls cond every 250 ms (conditions that read the histories
// or ask the cluster).
func (r *run) awaitSlow(what string, timeout time.Duration, cond func() bool) {
	r.t.Helper()
	testutil.Poll(r.t, what, timeout, 250*time.Millisecond, cond)
}

// submitAll submits jobs in batches of up to 1,000 (each job has a unique
// key, so a batch whose outcome is unknown is submitted again: the repeat
// returns the same jobs) and returns job id → run_at (Unix ms).
func submitAll(t *testing.T, ctx context.Context, qc *queue.Client, jobs []*coordv1.NewJob) map[uint64]int64 {
	t.Helper()
	out, err := submitBatches(ctx, t.Logf, qc, jobs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// submitBatches is submitAll for any goroutine: it gives up only when ctx
// ends.
func submitBatches(ctx context.Context, logf func(string, ...any), qc *queue.Client, jobs []*coordv1.NewJob) (map[uint64]int64, error) {
	out := map[uint64]int64{}
	for i := 0; i < len(jobs); i += queue.MaxBatch {
		batch := jobs[i:min(i+queue.MaxBatch, len(jobs))]
		for {
			resp, err := qc.SubmitBatch(ctx, batch)
			if err == nil {
				for _, j := range resp {
					out[j.GetId()] = j.GetRunAtMs()
				}
				break
			}
			if ctx.Err() != nil {
				return out, fmt.Errorf("submit: %w", err)
			}
			logf("submit of %d jobs: %v (submitting the same batch again)", len(batch), err)
			time.Sleep(100 * time.Millisecond) // retry pacing
		}
	}
	return out, nil
}

// newJobs builds n jobs of kind "effect" for queue q; name makes their
// unique keys; runAt (nil: now) gives the i-th job's due time.
func newJobs(t *testing.T, q, name string, n int, runAt func(i int) time.Time, opts ...queue.Option) []*coordv1.NewJob {
	t.Helper()
	var out []*coordv1.NewJob
	for i := 0; i < n; i++ {
		o := append([]queue.Option{queue.Queue(q), queue.UniqueKey(fmt.Sprintf("%s-%d", name, i))}, opts...)
		if runAt != nil {
			o = append(o, queue.At(runAt(i)))
		}
		j, err := queue.NewJob("effect", nil, o...)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	return out
}

// stats are queue q's counts per state.
func stats(ctx context.Context, qc *queue.Client, q string) (*coordv1.QueueStats, error) {
	resp, err := qc.Stats(ctx, q)
	if err != nil {
		return nil, err
	}
	for _, s := range resp.GetQueues() {
		if s.GetQueue() == q {
			return s, nil
		}
	}
	return &coordv1.QueueStats{Queue: q}, nil
}

func unfinished(s *coordv1.QueueStats) uint64 {
	return s.GetScheduled() + s.GetAvailable() + s.GetRunning() + s.GetRetryable()
}

// awaitAllFinal waits until every one of n jobs of queue q is final and
// checks that they all succeeded.
func (r *run) awaitAllFinal(ctx context.Context, qc *queue.Client, q string, n int, timeout time.Duration) *coordv1.QueueStats {
	r.t.Helper()
	var s *coordv1.QueueStats
	r.awaitSlow(fmt.Sprintf("all %d jobs of %s final", n, q), timeout, func() bool {
		var err error
		s, err = stats(ctx, qc, q)
		return err == nil && unfinished(s) == 0 && s.GetSucceeded()+s.GetDead()+s.GetCancelled() >= uint64(n)
	})
	if s.GetSucceeded() != uint64(n) || s.GetDead() != 0 || s.GetCancelled() != 0 {
		r.t.Errorf("queue %s: %d succeeded, %d dead, %d cancelled; want all %d succeeded", q, s.GetSucceeded(), s.GetDead(),
			s.GetCancelled(), n)
	}
	return s
}

// checkEffects runs the job checker and reports what the faults did.
func (r *run) checkEffects(l *jobLog, want map[uint64]int64) {
	r.t.Helper()
	l.refresh(r.t)
	commits := l.commits()
	for _, v := range checkJobEffects(l.starts, commits, want, clockSkewBound) {
		r.t.Error(v)
	}
	_, writers, _ := effects(commits)
	reruns, refused, dups, unknown := 0, map[string]int{}, 0, 0
	for _, s := range l.starts {
		if s.Attempt > 1 {
			reruns++
		}
	}
	for _, o := range commits {
		switch {
		case !o.returned || o.ret.Outcome == "unknown":
			unknown++
		case !o.ok():
			refused[o.ret.Reason]++
		case o.ret.Duplicate:
			dups++
		}
	}
	r.t.Logf("%d jobs, %d with their effect made (by one attempt each); %d attempts started, %d of them re-runs (attempt > 1); fenced writes: %d answered as duplicates, %d unknown (the worker died), refused %v",
		len(want), len(writers), len(l.starts), reruns, dups, unknown, refused)
}

// Scenario 13: a worker frozen past its visibility timeout. Worker w1
// (one handler slot, so no fetch of its own is waiting on the server while
// it is frozen) takes the job and is frozen (SIGSTOP) (a) before its
// fenced write, (b) after its fenced write, before completing; the claim
// lapses and w2's attempt 2 runs the job and completes it. When w1 wakes,
// a fenced write with its attempt's token under a fresh key and its
// completion are refused with their reasons (ATTEMPT_EXPIRED or
// STALE_TOKEN; ATTEMPT_EXPIRED); its effect write in (a), whose key
// attempt 2 used first, is answered as attempt 2's duplicate, not made
// again; in (b) attempt 2's write is answered as a duplicate of attempt
// 1's. The job's effect happened once, and its attempt log says 1 LAPSED
// (w1), 2 SUCCEEDED (w2).
func TestFrozenWorker(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("frozen_after_effect=%v", after), func(t *testing.T) {
			r := newRun(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const vt, q = 2 * time.Second, "frozen"
			hold := []string{"--hold", "1s"}
			if after {
				hold = []string{"--hold-after", "1s"}
			}
			l := newJobLog(r.dir)
			r.qworker("w1", q, append(hold, "--raw-complete", "--concurrency", "1")...)
			r.awaitUp(l, "w1")
			qc := queue.New(r.sdk(ctx, "submitter"))
			want := submitAll(t, ctx, qc, newJobs(t, q, "frozen", 1, nil, queue.VisibilityTimeout(vt), queue.Backoff(100*time.Millisecond, time.Second, 2)))
			var id uint64
			for id = range want {
			}
			r.await("w1 runs the job", 15*time.Second, func() bool {
				l.refresh(t)
				if !after {
					return len(l.starts) > 0
				}
				for _, o := range l.commits() {
					if o.returned {
						return true
					}
				}
				return false
			})
			w1 := r.clients["w1"]
			_ = w1.Process.Signal(syscall.SIGSTOP)
			frozen := time.Now()
			r.qworker("w2", q)
			r.await("attempt 2 completes the job", 30*time.Second, func() bool {
				j, err := qc.Get(ctx, id)
				return err == nil && j.GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED
			})
			_ = w1.Process.Signal(syscall.SIGCONT)
			t.Logf("w1 frozen for %s (visibility timeout %s)", time.Since(frozen).Round(time.Millisecond), vt)
			r.await("w1's completion answered", 15*time.Second, func() bool {
				l.refresh(t)
				for _, o := range l.opsNamed("jcomplete") {
					if o.returned {
						return true
					}
				}
				return false
			})
			r.stopClients()
			l.refresh(t)
			for _, o := range l.order {
				c := o.call
				t.Logf("%s attempt %d %s: outcome %s, reason %q, accepted %v, duplicate %v (its SDK had given up the claim: %v)",
					c.Client, c.Attempt, c.Op, o.ret.Outcome, o.ret.Reason, o.ret.Accepted, o.ret.Duplicate, c.CtxDone)
				switch {
				case c.Client == "w1" && c.Op == "jcomplete":
					if o.ok() || (o.ret.Reason != "ATTEMPT_EXPIRED" && o.ret.Reason != "ATTEMPT_LOST") {
						t.Errorf("w1's late completion: outcome %s, reason %q; want ATTEMPT_EXPIRED or ATTEMPT_LOST", o.ret.Outcome, o.ret.Reason)
					}
				case c.Client == "w1" && c.Op == "jcommit" && !after:
					if o.effect() {
						t.Errorf("w1's late effect write was accepted as a first effect")
					}
				case c.Client == "w1" && c.Op == "jprobe":
					if o.ok() || (o.ret.Reason != "ATTEMPT_EXPIRED" && o.ret.Reason != "STALE_TOKEN" && o.ret.Reason != "ATTEMPT_LOST") {
						t.Errorf("w1's late fenced write: outcome %s, reason %q; want ATTEMPT_EXPIRED or STALE_TOKEN", o.ret.Outcome, o.ret.Reason)
					}
				case c.Client == "w2" && c.Op == "jcommit":
					if c.Attempt != 2 || !o.ok() || o.ret.Duplicate != after {
						t.Errorf("w2's write: attempt %d, outcome %s, duplicate %v", c.Attempt, o.ret.Outcome, o.ret.Duplicate)
					}
				}
			}
			j, err := qc.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var outcomes []string
			for _, a := range j.GetAttemptLog() {
				outcomes = append(outcomes, fmt.Sprintf("%d:%s@%s", a.GetNumber(), a.GetOutcome(), a.GetWorkerId()))
			}
			t.Logf("job %d: %s, attempts %v", id, j.GetState(), outcomes)
			if len(j.GetAttemptLog()) != 2 || j.GetAttemptLog()[0].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED ||
				j.GetAttemptLog()[1].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED {
				t.Errorf("attempts %v: want 1 LAPSED (w1), 2 SUCCEEDED (w2)", outcomes)
			}
			r.checkEffects(l, want)
			r.check()
		})
	}
}

// Scenario 14: jobs submitted in batches and fetched by three worker
// processes while, in one run, the leader is killed with kill -9 (and
// restarted), a worker process is killed with kill -9 (a new one takes its
// place), and another worker is frozen (SIGSTOP) past the visibility
// timeout (and resumed). Every submitted job reaches a final state, all
// succeeded (none lost), and each job's effect happened once (the fenced
// writes of the killed and the frozen worker's attempts were refused or
// answered as duplicates).
func TestQueueFaultsDuringDispatch(t *testing.T) {
	batches, per := cycles(12, 40), cycles(150, 500)
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const vt, q = 3 * time.Second, "dispatch"
	l := newJobLog(r.dir)
	for _, w := range []string{"w1", "w2", "w3"} {
		hold := "100ms"
		if w == "w3" {
			hold = "1s" // the one frozen below: its jobs run long enough to be caught mid-run
		}
		r.qworker(w, q, "--concurrency", "32", "--hold", hold)
	}
	r.awaitUp(l, "w1", "w2", "w3")
	qc := queue.New(r.sdk(ctx, "submitter"))

	var mu sync.Mutex
	want := map[uint64]int64{}
	submitted := make(chan int, batches)
	var jobs [][]*coordv1.NewJob
	for b := 0; b < batches; b++ {
		jobs = append(jobs, newJobs(t, q, fmt.Sprintf("b%d", b), per, nil, queue.VisibilityTimeout(vt),
			queue.Backoff(100*time.Millisecond, time.Second, 2)))
	}
	go func() {
		defer close(submitted)
		for b := 0; b < batches; b++ {
			ids, err := submitBatches(ctx, t.Logf, qc, jobs[b])
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for id, at := range ids {
				want[id] = at
			}
			mu.Unlock()
			submitted <- b
			time.Sleep(250 * time.Millisecond) // the next batch, as a service submits in bursts
		}
	}()
	waitBatch := func(n int) {
		for b := range submitted {
			if b >= n {
				return
			}
		}
	}
	started := func() int { return len(l.refresh(t).starts) }

	// 1: kill -9 the leader while jobs are dispatched.
	waitBatch(batches / 4)
	n0 := started()
	leader, took := r.failover("probe-dispatch")
	t.Logf("kill -9 of the leader %s with %d attempts started: the cluster served again after %s", leader.ID, n0, took.Round(time.Millisecond))

	// 2: kill -9 a worker mid-job; a new worker process takes its place.
	waitBatch(batches / 2)
	r.awaitSlow("w2 runs jobs", 10*time.Second, func() bool {
		l.refresh(t)
		return len(l.starts) > 0 && l.starts[len(l.starts)-1].AtNs > time.Now().Add(-time.Second).UnixNano()
	})
	r.kill("w2")
	r.qworker("w4", q, "--concurrency", "32", "--hold", "100ms")
	t.Logf("kill -9 of worker w2 at %d attempts started; w4 started", started())

	// 3: freeze a worker past the visibility timeout, then resume it.
	waitBatch(3 * batches / 4)
	// ... while it runs a job (its handlers hold 1 s: a start in the last
	// 700 ms is still running), so that the freeze bites.
	for running := false; !running; time.Sleep(20 * time.Millisecond) {
		l.refresh(t)
		for i := len(l.starts) - 1; i >= 0; i-- {
			if st := l.starts[i]; st.Client == "w3" {
				running = st.AtNs > time.Now().Add(-700*time.Millisecond).UnixNano()
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("w3 never ran a job to freeze")
		}
	}
	w3 := r.clients["w3"]
	_ = w3.Process.Signal(syscall.SIGSTOP)
	time.Sleep(vt + 2*time.Second) // the fault itself: frozen past the visibility timeout
	_ = w3.Process.Signal(syscall.SIGCONT)
	t.Logf("w3 frozen for %s (visibility timeout %s), resumed at %d attempts started", vt+2*time.Second, vt, started())

	waitBatch(batches)
	mu.Lock()
	n := len(want)
	mu.Unlock()
	if n != batches*per {
		t.Fatalf("%d jobs submitted, want %d", n, batches*per)
	}
	s := r.awaitAllFinal(ctx, qc, q, n, 90*time.Second)
	r.stopClients()
	t.Logf("queue %s: %d succeeded", q, s.GetSucceeded())
	r.checkEffects(l, want)
	// The faults must have bitten: jobs of the killed and the frozen
	// worker ran again.
	reran := map[string]int{}
	firstOn := map[uint64]string{}
	for _, st := range l.starts {
		if st.Attempt == 1 {
			firstOn[st.Job] = st.Client
		}
	}
	for _, st := range l.starts {
		if st.Attempt > 1 {
			reran[firstOn[st.Job]]++
		}
	}
	t.Logf("re-run jobs by the worker of their first attempt: %v", reran)
	if reran["w2"] == 0 || reran["w3"] == 0 {
		t.Errorf("no job of the killed worker w2 (%d) or of the frozen worker w3 (%d) ran again: the faults did not bite", reran["w2"], reran["w3"])
	}
	r.check()
}

// Scenario 15: 10,000 jobs with run_at spread over the next 20–40 s
// (short profile: 8–16 s) are submitted, then every node is killed with
// kill -9 and restarted; once the jobs are being dispatched (halfway
// through their spread) every node is killed and restarted again. Every job
// was still in the queue after the first restart (acknowledged submits are
// durable), and afterwards every job ran and succeeded (none lost), none
// started before its run_at (the handler's start on this host's wall
// clock, which is the leader's), and each job's effect happened once. The
// start lag (run_at to handler start) is reported.
func TestWholeClusterKillScheduledJobs(t *testing.T) {
	const n = 10000
	from, spread := time.Duration(cycles(8, 20))*time.Second, time.Duration(cycles(8, 20))*time.Second
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const q = "delayed"
	l := r.qworkers(q, "--concurrency", "64")
	qc := queue.New(r.sdk(ctx, "submitter"))
	// A visibility timeout of 3 s: the attempts the second kill cuts off
	// run again 3 s after it, not after the default 30 s.
	jobs := newJobs(t, q, "delayed", n, func(i int) time.Time { return time.Now().Add(from + spread*time.Duration(i)/n) },
		queue.VisibilityTimeout(3*time.Second))
	t0 := time.Now()
	want := submitAll(t, ctx, qc, jobs)
	if len(want) != n {
		t.Fatalf("%d jobs submitted, want %d", len(want), n)
	}
	t.Logf("%d jobs submitted in %s, due from +%s to +%s", n, time.Since(t0).Round(time.Millisecond), from, from+spread)
	if time.Since(t0) > from-3*time.Second {
		t.Fatalf("submitting took %s: the jobs would be due before the cluster is down", time.Since(t0))
	}
	killAll := func(what string) {
		for _, nd := range r.c.Nodes {
			r.c.Kill(nd)
		}
		started := len(l.refresh(t).starts)
		for _, nd := range r.c.Nodes {
			r.c.Restart(nd)
		}
		r.c.WaitLeader()
		t.Logf("%s: every node killed with kill -9 at +%s (%d jobs started), restarted", what, time.Since(t0).Round(time.Millisecond), started)
	}
	killAll("before the jobs are due")
	if len(l.starts) != 0 {
		t.Fatalf("%d jobs started before the kill, before they were due", len(l.starts))
	}
	s, err := stats(ctx, qc, q)
	for err != nil {
		time.Sleep(100 * time.Millisecond) // the restarted cluster's first answer
		s, err = stats(ctx, qc, q)
	}
	if total := unfinished(s) + s.GetSucceeded(); total != n {
		t.Errorf("after the restart the queue holds %d jobs, want %d", total, n)
	}
	time.Sleep(time.Until(t0.Add(from + spread/2))) // the fault's time: halfway through the jobs' due times
	killAll("during dispatch")
	r.awaitAllFinal(ctx, qc, q, n, from+spread+90*time.Second)
	r.stopClients()
	r.checkEffects(l, want)
	var lags []time.Duration
	for _, st := range l.starts {
		if st.Attempt == 1 {
			lags = append(lags, time.Duration(st.AtNs-want[st.Job]*int64(time.Millisecond)))
		}
	}
	t.Logf("start lag (run_at as submitted -> handler start), every job, the outage's included: %s", lagSummary(lags))
	r.check()
}
