package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/periodic"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Schedules and the code-defined runner on in-process clusters: occurrences
// made by the leader on time, run by queue workers, exactly once under a
// crashed and a frozen replica and under leader kills.

// ledger records, across replicas, every accepted first commit per window
// and store: exactly-once means one per pair.
type ledger struct {
	mu       sync.Mutex
	accepted map[string]int
	refused  map[string]int
}

func (l *ledger) note(key string, c *client.Commit, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		l.refused[key]++
	case !c.Duplicate:
		l.accepted[key]++
	}
}

// unaryHole fails every unary call while on (the replica is cut off: its
// heartbeats and outcomes do not get through).
type unaryHole struct{ on atomic.Bool }

func (h *unaryHole) interceptor() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if h.on.Load() {
			return status.Error(codes.Unavailable, "cut off (test)")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

type tw struct{ t *testing.T }

func (w tw) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// Three replicas run the same code-defined job (client/periodic: a schedule
// every two seconds whose jobs a queue worker in each replica runs)
// against a three-node cluster. One replica crashes mid-run, another is
// cut off past its visibility timeout mid-run and writes anyway when it
// wakes.
// Every occurrence's job succeeded, its stores were written exactly once,
// the faulted occurrences took a second attempt, and the late write had no
// effect.
func TestPeriodicExactlyOnceUnderCrashAndPause(t *testing.T) {
	c := testcluster.New(t, 3)
	led := &ledger{accepted: map[string]int{}, refused: map[string]int{}}
	const stores = 3
	var crashOnce, pauseOnce, lateWriteDone atomic.Bool
	var faultWindows sync.Map // window -> fault
	var lateOutcome, crashed, paused atomic.Value
	type replica struct {
		name   string
		c      *client.Client
		hole   *unaryHole
		cancel context.CancelFunc
		done   chan struct{}
	}
	var replicas []*replica
	start := time.Now()
	for _, name := range []string{"r1", "r2", "r3"} {
		hole := &unaryHole{}
		cl := newClient(t, c, name, client.WithDialOptions(hole.interceptor()))
		rep := &replica{name: name, c: cl, hole: hole, done: make(chan struct{})}
		runner := periodic.NewRunner(cl, periodic.WithConcurrency(2), periodic.WithShutdownTimeout(time.Second),
			periodic.WithWorkerOptions(queue.WithWorkerID(name), queue.WithPollWait(500*time.Millisecond)),
			periodic.WithLogger(slog.New(slog.NewTextHandler(tw{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", name)))
		err := runner.Add(periodic.Job{
			Name: "close", Schedule: periodic.Every(2 * time.Second), Concurrency: periodic.Allow, Queue: "it-close",
			VisibilityTimeout: 2 * time.Second, RetryBackoff: 200 * time.Millisecond,
			Run: func(ctx context.Context, run *periodic.Run) error {
				for i := 1; i <= stores; i++ {
					// The first replica at store 2 of a first attempt crashes;
					// the next other one, on a later occurrence, freezes.
					// (Which replica a job goes to is the queue's choice.)
					if i == 2 && run.Attempt == 1 && crashOnce.CompareAndSwap(false, true) {
						crashed.Store(rep.name)
						faultWindows.Store(run.Window, "crash")
						rep.cancel() // the process dies: no completion
						rep.c.Close()
						return errors.New("crashed")
					}
					if _, fault := faultWindows.Load(run.Window); i == 2 && run.Attempt == 1 && !fault && crashOnce.Load() &&
						crashed.Load() != rep.name && pauseOnce.CompareAndSwap(false, true) {
						paused.Store(rep.name)
						faultWindows.Store(run.Window, "pause")
						rep.hole.on.Store(true) // frozen: no heartbeat gets through
						<-ctx.Done()            // the worker says the claim is gone
						time.Sleep(2500 * time.Millisecond)
						rep.hole.on.Store(false) // wakes up and writes anyway
					}
					key := fmt.Sprintf("%s/store-%d", run.Window, i)
					cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					commit, err := run.Fence(cctx, fmt.Sprintf("store-%d", i), []byte(rep.name))
					cancel()
					led.note(key, commit, err)
					if paused.Load() == rep.name && !lateWriteDone.Load() && ctx.Err() != nil {
						switch {
						case err != nil:
							lateOutcome.Store("refused: " + err.Error())
						case commit.Duplicate:
							lateOutcome.Store("duplicate of attempt " + fmt.Sprint(commit.Generation))
						default:
							lateOutcome.Store("ACCEPTED")
						}
						lateWriteDone.Store(true)
					}
					if err != nil {
						return err
					}
					time.Sleep(50 * time.Millisecond)
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		rep.cancel = cancel
		go func() { defer close(rep.done); _ = runner.Run(ctx) }()
		replicas = append(replicas, rep)
	}
	ctx, cancelAll := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancelAll()
	cl := newClient(t, c, "observer")
	// The occurrences made so far, oldest first.
	made := func() []*coordv1.ScheduleOccurrence {
		resp, err := cl.GetSchedule(ctx, "close", 1)
		if err != nil {
			return nil
		}
		var out []*coordv1.ScheduleOccurrence
		for i := len(resp.GetRecent()) - 1; i >= 0; i-- {
			out = append(out, resp.GetRecent()[i])
		}
		return out
	}
	c.Eventually("faults and second attempts", 60*time.Second, func() bool {
		if !crashOnce.Load() || !pauseOnce.Load() || !lateWriteDone.Load() {
			return false
		}
		resumed := 0
		for _, o := range made() {
			if _, fault := faultWindows.Load(o.GetWindow()); fault && o.GetJobState() == coordv1.JobState_JOB_STATE_SUCCEEDED && o.GetAttempts() >= 2 {
				resumed++
			}
		}
		return resumed == 2
	})
	time.Sleep(3 * time.Second) // a few more ordinary occurrences before the cutoff
	stopAt := time.Now()
	for _, r := range replicas {
		r.cancel()
		<-r.done
	}
	occs := made()
	led.mu.Lock()
	defer led.mu.Unlock()
	resumed := 0
	var prev time.Time
	for _, o := range occs {
		at := time.UnixMilli(o.GetAtMs())
		if o.GetSkipped() != coordv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_UNSPECIFIED {
			t.Errorf("skipped occurrences: %v", o)
			continue
		}
		if !prev.IsZero() && at.Sub(prev) != 2*time.Second {
			t.Errorf("occurrences %s and %s: not consecutive", prev.Format(time.TimeOnly), at.Format(time.TimeOnly))
		}
		prev = at
		if _, fault := faultWindows.Load(o.GetWindow()); !fault && at.After(stopAt.Add(-3*time.Second)) {
			continue // around the shutdown: may legitimately be unfinished
		}
		if o.GetJobState() != coordv1.JobState_JOB_STATE_SUCCEEDED {
			t.Errorf("occurrence %s: job %d %s", o.GetWindow(), o.GetJobId(), o.GetJobState())
			continue
		}
		if o.GetAttempts() > 1 {
			resumed++
		}
		for i := 1; i <= stores; i++ {
			if n := led.accepted[fmt.Sprintf("%s/store-%d", o.GetWindow(), i)]; n != 1 {
				t.Errorf("occurrence %s store-%d accepted %d times", o.GetWindow(), i, n)
			}
		}
	}
	if resumed < 2 {
		t.Errorf("%d occurrences took a second attempt; the crash and the pause should each have made one", resumed)
	}
	if len(occs) == 0 || time.UnixMilli(occs[0].GetAtMs()).Before(start.Add(-time.Second)) {
		t.Errorf("occurrences %v from a schedule created at %s", occs, start)
	}
	// Whether the successor wrote that store first or not, the late write
	// has no effect: refused (its attempt expired) or a duplicate.
	late, _ := lateOutcome.Load().(string)
	if late == "ACCEPTED" || late == "" {
		t.Errorf("the paused replica's late write: %q", late)
	}
	t.Logf("%d occurrences, %d resumed; the paused replica's late write: %s", len(occs), resumed, late)
}

// A schedule's jobs appear on time and a worker completes them: an every-
// second schedule on a three-node cluster, put through a follower; each
// occurrence is one job, made within a second of its time (on the
// calendar clock), started by the worker within two seconds of it, and
// succeeded.
func TestScheduleJobsOnTimeAndAWorkerCompletesThem(t *testing.T) {
	c := testcluster.New(t, 3)
	cl := newClient(t, c, "ops")
	ctx := ctxT(t)
	spec := &coordv1.ScheduleSpec{Name: "tick", Schedule: "@every 1s", Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW,
		Job: &coordv1.JobTemplate{Queue: "it-tick", Kind: "tick", Args: []byte(`{"n":1}`)}}
	put, err := cl.PutSchedule(ctx, spec)
	if err != nil || !put.GetCreated() {
		t.Fatalf("put: %v %v", put, err)
	}
	if again, err := cl.PutSchedule(ctx, spec); err != nil || again.GetChanged() {
		t.Fatalf("put again: %v %v", again, err)
	}
	created := put.GetSchedule().GetCreatedAtMs()
	var mu sync.Mutex
	started := map[uint64]time.Time{}
	w := queue.NewWorker(cl, queue.WithQueue("it-tick", 4), queue.WithPollWait(time.Second))
	w.Handle("tick", func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		started[j.ID] = time.Now()
		mu.Unlock()
		if j.Labels[fsm.LabelSchedule] != "tick" || string(j.Args) != `{"n":1}` {
			return queue.Permanent(fmt.Errorf("job %d: labels %v args %s", j.ID, j.Labels, j.Args))
		}
		return nil
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	resp, err := cl.GetSchedule(ctx, "tick", 3)
	if err != nil {
		t.Fatal(err)
	}
	q := queue.New(cl)
	n := 0
	for _, o := range resp.GetRecent() {
		if o.GetJobId() == 0 || o.GetAtMs() <= created {
			t.Fatalf("occurrence %v (created at %d)", o, created)
		}
		j, err := q.Get(ctx, o.GetJobId())
		if err != nil {
			t.Fatal(err)
		}
		if j.GetUniqueKey() != "schedule:tick/"+o.GetWindow() || j.GetCreatedAtMs()-o.GetAtMs() > 1000 {
			t.Errorf("occurrence %s: job %d key %q made %d ms after it", o.GetWindow(), j.GetId(), j.GetUniqueKey(), j.GetCreatedAtMs()-o.GetAtMs())
		}
		if j.GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED {
			n++
			mu.Lock()
			lag := started[j.GetId()].Sub(time.UnixMilli(o.GetAtMs()))
			mu.Unlock()
			if lag > 2*time.Second || lag < -100*time.Millisecond {
				t.Errorf("occurrence %s started %s after it", o.GetWindow(), lag)
			}
		}
	}
	if n < 3 || len(resp.GetNext()) != 3 {
		t.Fatalf("%d succeeded in 5 s; next %v", n, resp.GetNext())
	}
	// One job per occurrence, read without racing the next second's
	// occurrence: every occurrence read above has its job in the queue, and
	// every job in the queue is an occurrence's as read after the listing
	// (a job is made in the entry that records its occurrence), once.
	list, err := q.ListPage(ctx, queue.Filter{Queue: "it-tick"}, "")
	if err != nil {
		t.Fatal(err)
	}
	after, err := cl.GetSchedule(ctx, "tick", 3)
	if err != nil {
		t.Fatal(err)
	}
	inQueue, keys := map[uint64]bool{}, map[string]bool{}
	for _, j := range list.GetJobs() {
		if keys[j.GetUniqueKey()] {
			t.Errorf("two jobs with key %q", j.GetUniqueKey())
		}
		keys[j.GetUniqueKey()], inQueue[j.GetId()] = true, true
	}
	occurred := map[uint64]bool{}
	for _, o := range after.GetRecent() {
		occurred[o.GetJobId()] = true
	}
	for _, j := range list.GetJobs() {
		if !occurred[j.GetId()] {
			t.Errorf("job %d (%s) is no occurrence's: occurrences %v", j.GetId(), j.GetUniqueKey(), after.GetRecent())
		}
	}
	for _, o := range resp.GetRecent() {
		if !inQueue[o.GetJobId()] {
			t.Errorf("occurrence %s: job %d is not in the queue", o.GetWindow(), o.GetJobId())
		}
	}
}

// The leader is killed while it materialises: twenty every-second
// schedules, three leader stops (each a few hundred ms of no leader). When
// it settles, every occurrence since the schedules were created is exactly
// one job (no double job, no missing occurrence, none skipped: the outages
// are far inside the catch-up horizon), and all replicas agree.
func TestScheduleLeaderKilledWhileMaterialising(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	c := testcluster.New(t, 3)
	cl := newClient(t, c, "ops")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const schedules = 20
	for i := 0; i < schedules; i++ {
		if _, err := cl.PutSchedule(ctx, &coordv1.ScheduleSpec{Name: fmt.Sprintf("s%02d", i), Schedule: "@every 1s",
			Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW, Job: &coordv1.JobTemplate{Queue: "it-kill", Kind: "k"}}); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 3; round++ {
		time.Sleep(1500 * time.Millisecond)
		l := c.WaitLeader()
		t.Logf("round %d: stopping leader %s", round, l.ID)
		c.Stop(l)
		c.WaitLeader()
		c.Restart(l)
	}
	time.Sleep(1500 * time.Millisecond)
	c.WaitConverged()
	l := c.WaitLeader()
	st, _, err := l.Node.Read(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i := 0; i < schedules; i++ {
		name := fmt.Sprintf("s%02d", i)
		sc, ok := st.Schedule(name)
		if !ok {
			t.Fatalf("schedule %s missing", name)
		}
		if sc.SkipCount != 0 {
			t.Errorf("%s: %d occurrences skipped: %+v", name, sc.SkipCount, sc.Skips)
		}
		// Every second in (created, mark] is one job, found by its window.
		first := (sc.CreatedAt/1000 + 1) * 1000
		n := 0
		for at := first; at <= sc.Mark; at += 1000 {
			w := time.UnixMilli(at).UTC().Format("2006-01-02T15:04:05")
			js, _ := st.ListQueueJobs(fsm.JobFilter{Label: &fsm.Label{Key: fsm.LabelWindow, Value: w}}, 0, 1000)
			mine := 0
			for _, j := range js {
				if j.UniqueKey == fsm.ScheduleUniqueKey(name, w) {
					mine++
				}
			}
			if mine != 1 {
				t.Errorf("%s window %s: %d jobs", name, w, mine)
			}
			n++
		}
		if uint64(n) != sc.JobsMade {
			t.Errorf("%s: %d occurrences in (created, mark], %d jobs made", name, n, sc.JobsMade)
		}
		total += n
	}
	if total < schedules*5 {
		t.Fatalf("only %d occurrences in the run", total)
	}
	t.Logf("%d occurrences of %d schedules across 3 leader stops: each exactly one job", total, schedules)
}

// Monitoring by absence: a schedule nobody runs has overdue occurrences in
// ListOverdue (paged) and in the leader's per-queue gauge; deleting it
// stops them; stuck leases are flagged. Pause, resume and trigger through
// a follower.
func TestScheduleOverdueAndStuckLeases(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.HTTPAddr = "127.0.0.1:0"
		cfg.API.MonitorInterval = 100 * time.Millisecond
		cfg.API.MaxLeaseAge = 1500 * time.Millisecond
	}))
	cl := newClient(t, c, "ops")
	ctx := ctxT(t)
	if _, err := cl.PutSchedule(ctx, &coordv1.ScheduleSpec{Name: "nobody-runs-me", Schedule: "@every 1s", CompleteWithin: pbtime.Dur(1000),
		Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW, Job: &coordv1.JobTemplate{Queue: "it-nobody", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.PutSchedule(ctx, &coordv1.ScheduleSpec{Name: "bad", Schedule: "not cron", Job: &coordv1.JobTemplate{Kind: "k"}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Metadata["field"] != "schedule" {
		t.Fatalf("bad schedule: %v", err)
	}
	held, err := cl.Acquire(ctx, "held-forever", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	silent := newClient(t, c, "silent")
	if _, err := silent.Acquire(ctx, "crashed-holder", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	silent.Close()
	var od *coordv1.ListOverdueResponse
	reasons := map[string]string{} // stuck leases seen (SILENT lasts MaxLeaseAge after the expiry)
	c.Eventually("overdue occurrences and stuck leases", 15*time.Second, func() bool {
		od, err = cl.ListOverdue(ctx, "", "", 2)
		if err != nil {
			return false
		}
		for _, s := range od.GetStuckLeases() {
			reasons[s.GetLease().GetName()] = s.GetReason()
		}
		return od.GetTotal() >= 3 && reasons["held-forever"] == "HELD_TOO_LONG" && reasons["crashed-holder"] == "SILENT"
	})
	if len(od.GetOccurrences()) != 2 || od.GetNextPageToken() == "" || len(od.GetTopSchedules()) != 1 ||
		od.GetTopSchedules()[0].GetSchedule() != "nobody-runs-me" {
		t.Fatalf("first page: %v", od)
	}
	for _, o := range od.GetOccurrences() {
		if o.GetSchedule() != "nobody-runs-me" || o.GetOverdueMs() <= 0 || o.GetJobState() != coordv1.JobState_JOB_STATE_AVAILABLE {
			t.Fatalf("overdue occurrence: %v", o)
		}
	}
	next, err := cl.ListOverdue(ctx, "", od.GetNextPageToken(), 2)
	if err != nil || len(next.GetOccurrences()) == 0 || next.GetOccurrences()[0].GetAtMs() < od.GetOccurrences()[1].GetAtMs() {
		t.Fatalf("second page: %v %v", next, err)
	}
	leader := c.WaitLeader()
	gauge := func() string {
		resp, err := http.Get("http://" + leader.API.HTTPAddr() + "/metrics")
		if err != nil {
			return ""
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(body)
	}
	c.Eventually("overdue gauge", 10*time.Second, func() bool {
		body := gauge()
		return strings.Contains(body, `coordd_schedule_overdue_occurrences{queue="it-nobody"}`) &&
			!strings.Contains(body, `coordd_schedule_overdue_occurrences{queue="it-nobody"} 0`) &&
			strings.Contains(body, `coordd_stuck_leases{reason="held_too_long"} 1`) && strings.Contains(body, `coordd_schedules{state="active"} 1`)
	})
	// Pause, trigger while paused, resume, through a follower.
	f := c.Followers()[0]
	fc, err := client.New(ctx, []string{f.API.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if p, err := fc.PauseSchedule(ctx, "nobody-runs-me"); err != nil || !p.GetSchedule().GetPaused() {
		t.Fatalf("pause: %v %v", p, err)
	}
	tr, err := fc.TriggerSchedule(ctx, "nobody-runs-me")
	if err != nil || !tr.GetOccurrence().GetManual() || !strings.Contains(tr.GetOccurrence().GetWindow(), "/manual-") {
		t.Fatalf("trigger: %v %v", tr, err)
	}
	if r, err := fc.ResumeSchedule(ctx, "nobody-runs-me"); err != nil || r.GetSchedule().GetPaused() {
		t.Fatalf("resume: %v %v", r, err)
	}
	// Deleted: its occurrences are no longer overdue, and it makes no more.
	if d, err := cl.DeleteSchedule(ctx, "nobody-runs-me"); err != nil || !d.GetSchedule().GetDeleted() {
		t.Fatalf("delete: %v %v", d, err)
	}
	c.Eventually("nothing overdue after the delete", 10*time.Second, func() bool {
		od, err := cl.ListOverdue(ctx, "", "", 10)
		return err == nil && od.GetTotal() == 0 && strings.Contains(gauge(), `coordd_schedules{state="deleted"} 1`)
	})
	g, err := cl.GetSchedule(ctx, "nobody-runs-me", 1)
	if err != nil || !g.GetSchedule().GetDeleted() || len(g.GetRecent()) == 0 {
		t.Fatalf("the tombstone keeps its history: %v %v", g, err)
	}
	if _, err := cl.TriggerSchedule(ctx, "nobody-runs-me"); !errors.Is(err, client.ErrScheduleNotFound) {
		t.Fatalf("trigger of a deleted schedule: %v", err)
	}
}
