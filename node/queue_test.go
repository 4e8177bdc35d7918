package node

import (
	"context"
	"testing"
	"time"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// submit adds jobs to queue q due at the given calendar times and returns
// their ids.
func (tn *testNode) submit(t *testing.T, q string, runAt ...int64) []uint64 {
	t.Helper()
	cmd := &fsmv1.SubmitJobs{}
	for _, at := range runAt {
		s := &fsmv1.QueueJobSpec{Queue: q, Kind: "k", RunAtMs: at}
		fsm.FillJobDefaults(s)
		cmd.Jobs = append(cmd.Jobs, s)
	}
	res, err := tn.Propose(bg(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, j := range res.(*fsm.SubmitResult).Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

func (tn *testNode) job(t *testing.T, id uint64) fsm.QueueJob {
	t.Helper()
	j, ok := tn.fsm.QueueJob(id)
	if !ok {
		t.Fatalf("no job %d", id)
	}
	return j
}

// fetchWaiting returns a channel that gets the outcome of a long poll.
type fetched struct {
	r   *fsm.FetchResult
	err error
}

func (tn *testNode) longPoll(ctx context.Context, worker string, max uint32, wait time.Duration, queues ...string) <-chan fetched {
	ch := make(chan fetched, 1)
	go func() {
		r, err := tn.Fetch(ctx, &fsmv1.FetchJobs{Queues: queues, Max: max, WorkerId: worker}, wait)
		ch <- fetched{r, err}
	}()
	return ch
}

// fetchers is the number of long polls waiting on the leader.
func (tn *testNode) fetchers() int {
	ls := tn.leader.Load()
	return ls.fetches.Len()
}

func got(t *testing.T, ch <-chan fetched, what string) *fsm.FetchResult {
	t.Helper()
	select {
	case f := <-ch:
		if f.err != nil {
			t.Fatalf("%s: %v", what, f.err)
		}
		return f.r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer", what)
		return nil
	}
}

func stillWaiting(t *testing.T, ch <-chan fetched, what string) {
	t.Helper()
	select {
	case f := <-ch:
		t.Fatalf("%s answered: %+v %v", what, f.r, f.err)
	case <-time.After(20 * time.Millisecond):
	}
}

// The dispatcher proposes one tick when the calendar reaches a job's
// run_at, not before, so the job becomes available on time with nothing
// else proposed.
func TestDispatcherMakesDelayedJobsAvailable(t *testing.T) {
	n := newTestNode(t)
	now := start.UnixMilli()
	ids := n.submit(t, "q", now+5000, now+8000)
	base := n.raft.count()
	if !n.clock.WaitArmed(start.Add(5*time.Second), 5*time.Second) {
		t.Fatal("the dispatcher armed no timer at the first run_at")
	}
	n.clock.Advance(4999 * time.Millisecond)
	if n.raft.count() != base || n.job(t, ids[0]).State != fsm.JobScheduled {
		t.Fatalf("%d entries before the run_at; job %s", n.raft.count()-base, n.job(t, ids[0]).State)
	}
	n.clock.Advance(time.Millisecond)
	eventually(t, "the first job available", func() bool { return n.job(t, ids[0]).State == fsm.JobAvailable })
	if n.job(t, ids[1]).State != fsm.JobScheduled {
		t.Fatal("the second job is early")
	}
	if got := n.raft.ticks(t, base); got != 1 || n.raft.count() != base+1 {
		t.Fatalf("%d ticks, %d entries for one due time", got, n.raft.count()-base)
	}
	if !n.clock.WaitArmed(start.Add(8*time.Second), 5*time.Second) {
		t.Fatal("the dispatcher armed no timer at the second run_at")
	}
	n.clock.Advance(3 * time.Second)
	eventually(t, "the second job available", func() bool { return n.job(t, ids[1]).State == fsm.JobAvailable })
}

// A claim whose visibility timeout passes lapses at its deadline by the
// dispatcher's tick: the job is available again, the attempt LAPSED.
func TestDispatcherLapsesClaims(t *testing.T) {
	n := newTestNode(t)
	cmd := &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{{Queue: "q", Kind: "k", VisibilityTimeoutMs: 2000}}}
	fsm.FillJobDefaults(cmd.Jobs[0])
	if _, err := n.Propose(bg(), cmd); err != nil {
		t.Fatal(err)
	}
	r, err := n.Fetch(bg(), &fsmv1.FetchJobs{Queues: []string{"q"}, Max: 1, WorkerId: "w"}, 0)
	if err != nil || len(r.Jobs) != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	id := r.Jobs[0].ID
	if !n.clock.WaitArmed(start.Add(2*time.Second), 5*time.Second) {
		t.Fatal("no timer at the visibility deadline")
	}
	n.clock.Advance(2 * time.Second)
	eventually(t, "the claim lapsed", func() bool { return n.job(t, id).State == fsm.JobAvailable })
	if j := n.job(t, id); j.Log[0].Outcome != fsm.AttemptLapsed {
		t.Fatalf("attempt %+v", j.Log[0])
	}
}

// A long poll waits on the leader without entries and wakes when a job is
// submitted; it times out empty on the node's clock.
func TestLongPollWakesOnSubmit(t *testing.T) {
	n := newTestNode(t)
	base := n.raft.count()
	ch := n.longPoll(bg(), "w", 10, 10*time.Second, "q")
	eventually(t, "the poll waits", func() bool { return n.fetchers() == 1 })
	stillWaiting(t, ch, "a poll with nothing to fetch")
	if n.raft.count() != base {
		t.Fatalf("%d entries while waiting", n.raft.count()-base)
	}
	n.submit(t, "other", 0)
	stillWaiting(t, ch, "a poll on another queue's submit")
	ids := n.submit(t, "q", 0, 0)
	r := got(t, ch, "the poll")
	if len(r.Jobs) != 2 || r.Jobs[0].ID != ids[0] || r.Jobs[1].ID != ids[1] {
		t.Fatalf("fetched %+v, want %v", r.Jobs, ids)
	}
	// The other queue's submit; then the submit and the poll's fetch in one
	// entry: nothing else.
	if got := n.raft.count() - base; got != 2 {
		t.Fatalf("%d entries", got)
	}
	if b := n.raft.entry(t, base+1).GetBatch().GetCommands(); len(b) != 2 ||
		b[0].GetType() != fsmv1.CommandType_COMMAND_TYPE_SUBMIT_JOBS || b[1].GetType() != fsmv1.CommandType_COMMAND_TYPE_FETCH_JOBS {
		t.Fatalf("the submit's entry: %v", n.raft.entry(t, base+1))
	}

	empty := n.longPoll(bg(), "w", 10, 3*time.Second, "q")
	eventually(t, "the poll waits", func() bool { return n.fetchers() == 1 })
	// In line before its timer is armed: advancing before then would move
	// the timer's start, not bring it closer.
	if !n.clock.WaitArmed(n.clock.Now().Add(3*time.Second), 5*time.Second) {
		t.Fatal("no timer at the poll's wait")
	}
	n.clock.Advance(2999 * time.Millisecond)
	stillWaiting(t, empty, "before its wait")
	n.clock.Advance(time.Millisecond)
	if r := got(t, empty, "the poll at its wait"); len(r.Jobs) != 0 {
		t.Fatalf("%+v", r)
	}
	if n.fetchers() != 0 {
		t.Fatal("a waiter left behind")
	}
}

// A delayed job wakes the poll at its run_at (the dispatcher's tick).
func TestLongPollWakesWhenAJobIsDue(t *testing.T) {
	n := newTestNode(t)
	ids := n.submit(t, "q", start.UnixMilli()+4000)
	ch := n.longPoll(bg(), "w", 1, 30*time.Second, "q")
	eventually(t, "the poll waits", func() bool { return n.fetchers() == 1 })
	if !n.clock.WaitArmed(start.Add(4*time.Second), 5*time.Second) {
		t.Fatal("no dispatcher timer")
	}
	n.clock.Advance(3999 * time.Millisecond)
	stillWaiting(t, ch, "before run_at")
	n.clock.Advance(time.Millisecond)
	r := got(t, ch, "the poll")
	if len(r.Jobs) != 1 || r.Jobs[0].ID != ids[0] {
		t.Fatalf("%+v", r)
	}
	if a, _ := r.Jobs[0].Current(); a.StartedAt < start.UnixMilli()+4000 {
		t.Fatalf("handed out at %d, before its run_at", a.StartedAt)
	}
}

// Waiters are served in arrival order: the first gets the first job, and
// one job costs one fetch however many wait.
func TestLongPollsAreServedInArrivalOrder(t *testing.T) {
	n := newTestNode(t)
	var chans []<-chan fetched
	for i, w := range []string{"a", "b", "c"} {
		chans = append(chans, n.longPoll(bg(), w, 1, time.Minute, "q"))
		eventually(t, "waiter "+w, func() bool { return n.fetchers() == i+1 })
	}
	base := n.raft.count()
	first := n.submit(t, "q", 0)
	r := got(t, chans[0], "a")
	if len(r.Jobs) != 1 || r.Jobs[0].ID != first[0] || r.Jobs[0].Log[0].WorkerID != "a" {
		t.Fatalf("a got %+v", r.Jobs)
	}
	stillWaiting(t, chans[1], "b")
	if got := n.raft.count() - base; got != 1 || len(n.raft.entry(t, base).GetBatch().GetCommands()) != 2 {
		t.Fatalf("%d entries for one job and three waiters, want one: the submit and one fetch", got)
	}
	two := n.submit(t, "q", 0, 0)
	rb, rc := got(t, chans[1], "b"), got(t, chans[2], "c")
	if rb.Jobs[0].ID != two[0] || rc.Jobs[0].ID != two[1] {
		t.Fatalf("b got %d, c got %d; want %v", rb.Jobs[0].ID, rc.Jobs[0].ID, two)
	}
}

// A call that does not wait answers empty without an entry; with jobs it
// fetches at once.
func TestFetchWithoutWait(t *testing.T) {
	n := newTestNode(t)
	base := n.raft.count()
	r, err := n.Fetch(bg(), &fsmv1.FetchJobs{Queues: []string{"q"}, Max: 5, WorkerId: "w"}, 0)
	if err != nil || len(r.Jobs) != 0 || n.raft.count() != base {
		t.Fatalf("%+v %v, %d entries", r, err, n.raft.count()-base)
	}
	n.submit(t, "q", 0, 0, 0)
	res, err := n.Propose(bg(), &fsmv1.FetchJobs{Queues: []string{"q"}, Max: 5, WorkerId: "w"})
	if err != nil || len(res.(*fsm.FetchResult).Jobs) != 3 {
		t.Fatalf("%+v %v", res, err)
	}
}

// A poll whose context ends leaves the line; a poll bounded by its
// context's deadline answers empty before it.
func TestLongPollContext(t *testing.T) {
	n := newTestNode(t)
	ctx, cancel := context.WithCancel(bg())
	ch := n.longPoll(ctx, "w", 1, time.Minute, "q")
	eventually(t, "the poll waits", func() bool { return n.fetchers() == 1 })
	cancel()
	if f := <-ch; f.err != context.Canceled {
		t.Fatalf("cancelled poll: %v", f.err)
	}
	if n.fetchers() != 0 {
		t.Fatal("a cancelled poll stays in line")
	}
	dctx, dcancel := context.WithTimeout(bg(), 10*time.Second)
	defer dcancel()
	// The wait is cut to the deadline less a margin: a timer on the node's
	// clock for (at most) that long.
	dch := n.longPoll(dctx, "w", 1, time.Minute, "q")
	eventually(t, "the poll waits", func() bool { return n.fetchers() == 1 })
	// Its timer is armed just after it is in line, for the deadline's
	// 10 s less what has passed and the margin: wait for it before the
	// clock moves.
	if now := n.clock.Now(); !n.clock.WaitArmedBetween(now.Add(5*time.Second), now.Add(9750*time.Millisecond), 5*time.Second) {
		t.Fatal("no timer for the bounded poll")
	}
	n.clock.Advance(9750 * time.Millisecond)
	if f := got(t, dch, "the bounded poll"); len(f.Jobs) != 0 {
		t.Fatalf("%+v", f)
	}
}

// Leadership lost: waiting polls answer NotLeader.
func TestLongPollEndsWithLeadership(t *testing.T) {
	n := newTestNode(t)
	ch := n.longPoll(bg(), "w", 1, time.Minute, "q")
	eventually(t, "the poll waits", func() bool { return n.fetchers() == 1 })
	n.notifyCh <- false
	select {
	case f := <-ch:
		var nl interface{ NotLeader() (string, string) }
		if f.err == nil || !asNotLeader(f.err, &nl) {
			t.Fatalf("%v", f.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the poll outlived the leadership")
	}
}

func asNotLeader(err error, nl *interface{ NotLeader() (string, string) }) bool {
	x, ok := err.(interface{ NotLeader() (string, string) })
	*nl = x
	return ok
}

// The leader draws each failure's retry jitter and stamps it.
func TestFailCarriesTheLeadersJitter(t *testing.T) {
	n := newTestNode(t)
	n.submit(t, "q", 0, 0, 0)
	r, err := n.Fetch(bg(), &fsmv1.FetchJobs{Queues: []string{"q"}, Max: 3, WorkerId: "w"}, 0)
	if err != nil || len(r.Jobs) != 3 {
		t.Fatal(err)
	}
	fail := &fsmv1.FailJobs{WorkerId: "w"}
	for _, j := range r.Jobs {
		fail.Failures = append(fail.Failures, &fsmv1.JobFailure{JobId: j.ID, Attempt: 1, Retryable: true, Error: "x"})
	}
	if _, err := n.Propose(bg(), fail); err != nil {
		t.Fatal(err)
	}
	cmd := n.raft.entry(t, n.raft.count()-1)
	distinct := map[uint32]bool{}
	for _, f := range cmd.GetFailJobs().GetFailures() {
		if f.GetJitterPpm() >= 1_000_000 {
			t.Fatalf("jitter %d", f.GetJitterPpm())
		}
		distinct[f.GetJitterPpm()] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("three failures, jitters %v", distinct)
	}
	for _, j := range r.Jobs {
		if rj := n.job(t, j.ID); rj.State != fsm.JobRetryable || rj.RunAt < start.UnixMilli()+1000 || rj.RunAt > start.UnixMilli()+1250 {
			t.Fatalf("job %d %s due %d", j.ID, rj.State, rj.RunAt-start.UnixMilli())
		}
	}
}

// The prune carries the job retention on the calendar clock.
func TestPruneCarriesJobRetention(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.PruneInterval = time.Minute
		c.JobRetention = time.Hour
		c.MaxFinishedJobs = 7
	})
	base := n.raft.count()
	n.clock.Advance(time.Minute)
	eventually(t, "a prune", func() bool { return n.raft.count() > base })
	p := n.raft.entry(t, base).GetPrune()
	if p.GetJobsCutoffMs() != start.Add(time.Minute-time.Hour).UnixMilli() || p.GetMaxFinishedJobs() != 7 {
		t.Fatalf("prune %v", p)
	}
	d := Defaults()
	if d.JobRetention != 7*24*time.Hour || d.MaxFinishedJobs != 1_000_000 {
		t.Fatalf("defaults %s %d", d.JobRetention, d.MaxFinishedJobs)
	}
}

// A poll is woken by any command that makes jobs available, not only a
// submit: here a Retry of a scheduled job (the pump, after the commit).
func TestLongPollWakesOnRetry(t *testing.T) {
	n := newTestNode(t)
	ids := n.submit(t, "q", start.UnixMilli()+time.Hour.Milliseconds())
	ch := n.longPoll(bg(), "w", 1, time.Minute, "q")
	eventually(t, "the poll waits", func() bool { return n.fetchers() == 1 })
	if _, err := n.Propose(bg(), &fsmv1.RetryJobs{JobIds: ids}); err != nil {
		t.Fatal(err)
	}
	if r := got(t, ch, "the poll"); len(r.Jobs) != 1 || r.Jobs[0].ID != ids[0] {
		t.Fatalf("%+v", r)
	}
}

// The delivery lane (docs/delivery.md): a submit of a job with a target
// feeds a waiting targeted fetch (a node's deliverer) in its own entry;
// a pull worker waiting on the job's queue is not woken for it, and no
// empty fetch follows.
func TestDeliveryLaneLongPolls(t *testing.T) {
	n := newTestNode(t)
	pull := n.longPoll(bg(), "w", 10, 10*time.Second, "q")
	eventually(t, "the pull worker waits", func() bool { return n.fetchers() == 1 })
	lane := make(chan fetched, 1)
	go func() {
		r, err := n.Fetch(bg(), &fsmv1.FetchJobs{Targeted: true, Max: 8, WorkerId: "coordd-delivery/n1"}, 10*time.Second)
		lane <- fetched{r, err}
	}()
	eventually(t, "the deliverer waits", func() bool { return n.fetchers() == 2 })
	base := n.raft.count()
	s := &fsmv1.QueueJobSpec{Queue: "q", Kind: "hook", Target: &fsmv1.HttpTarget{Url: "http://127.0.0.1/hook"}}
	fsm.FillJobDefaults(s)
	if _, err := n.Propose(bg(), &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{s}, SpecRules: fsm.JobSpecRules}); err != nil {
		t.Fatal(err)
	}
	r := got(t, lane, "the deliverer's poll")
	if len(r.Jobs) != 1 || r.Jobs[0].Target.GetUrl() != "http://127.0.0.1/hook" {
		t.Fatalf("the deliverer fetched %+v", r.Jobs)
	}
	stillWaiting(t, pull, "the pull worker")
	if b := n.raft.entry(t, base).GetBatch().GetCommands(); len(b) != 2 || !b[1].GetFetchJobs().GetTargeted() {
		t.Fatalf("the submit's entry: %v", n.raft.entry(t, base))
	}
	if got := n.raft.count() - base; got != 1 {
		t.Fatalf("%d entries after the submit, want its one", got)
	}
}
