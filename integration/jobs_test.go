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

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/jobs"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

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

// Three replicas run the same job every two seconds against a three-node
// cluster. One replica crashes mid-run (no release), one is cut off past
// its TTL mid-run and keeps writing when it wakes. Every completed window's
// stores are written exactly once, resumed windows count two attempts, and
// every occurrence in the run completed.
func TestJobsExactlyOnceUnderCrashAndPause(t *testing.T) {
	c := testcluster.New(t, 3)
	led := &ledger{accepted: map[string]int{}, refused: map[string]int{}}
	const stores = 3
	var crashOnce, pauseOnce, lateWriteDone atomic.Bool
	var faultWindows sync.Map // window -> fault
	var lateOutcome atomic.Value
	type replica struct {
		name   string
		c      *client.Client
		hole   *blackhole
		cancel context.CancelFunc
		done   chan struct{}
	}
	var replicas []*replica
	start := time.Now()
	for _, name := range []string{"r1", "r2", "r3"} {
		hole := &blackhole{}
		cl := newClient(t, c, name, client.WithDialOptions(hole.interceptor()))
		rep := &replica{name: name, c: cl, hole: hole, done: make(chan struct{})}
		runner := jobs.NewRunner(cl, jobs.WithPollInterval(100*time.Millisecond), jobs.WithLogger(slog.New(slog.NewTextHandler(tw{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", name)))
		err := runner.Add(jobs.Job{
			Name: "close", Schedule: jobs.Every(2 * time.Second), TTL: 2 * time.Second, RetryBackoff: 200 * time.Millisecond,
			CatchUp: 20 * time.Second, // also how long a crashed window is retried
			Run: func(ctx context.Context, run *jobs.Run) error {
				for i := 1; i <= stores; i++ {
					// Faults only on fresh occurrences (not on catch-up of the
					// windows before the test, which are near their horizon).
					fresh := run.Occurrence.After(start.Add(2 * time.Second))
					if fresh && i == 2 && rep.name == "r1" && run.Attempt == 1 && crashOnce.CompareAndSwap(false, true) {
						faultWindows.Store(run.Window, "crash")
						rep.cancel() // the process dies: no release, no completion
						rep.c.Close()
						return errors.New("crashed")
					}
					if fresh && i == 2 && rep.name == "r2" && run.Attempt == 1 && pauseOnce.CompareAndSwap(false, true) {
						faultWindows.Store(run.Window, "pause")
						rep.hole.on.Store(true) // frozen: no renewals get through
						<-ctx.Done()            // the SDK says the lease is gone
						time.Sleep(2500 * time.Millisecond)
						rep.hole.on.Store(false) // wakes up and writes anyway
					}
					key := fmt.Sprintf("%s/store-%d", run.Window, i)
					cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					commit, err := run.Fence(cctx, fmt.Sprintf("store-%d", i), []byte(rep.name))
					cancel()
					led.note(key, commit, err)
					if rep.name == "r2" && pauseOnce.Load() && !lateWriteDone.Load() && ctx.Err() != nil {
						switch {
						case err != nil:
							lateOutcome.Store("refused: " + err.Error())
						case commit.Duplicate:
							lateOutcome.Store("duplicate of generation " + fmt.Sprint(commit.Generation))
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
	// Run until both faults happened, the paused replica made its late
	// write, and both windows were resumed and completed by others.
	c.Eventually("faults and resumptions", 60*time.Second, func() bool {
		if !crashOnce.Load() || !pauseOnce.Load() || !lateWriteDone.Load() {
			return false
		}
		resumed := 0
		faultWindows.Range(func(k, _ any) bool {
			w, err := cl.GetWindow(ctx, "close", k.(string))
			if err == nil && w.GetState() == coordv1.WindowState_WINDOW_STATE_COMPLETED && w.GetAttempts() >= 2 {
				resumed++
			}
			return true
		})
		return resumed == 2
	})
	time.Sleep(3 * time.Second) // a few more ordinary occurrences before the cutoff
	stopAt := time.Now()
	for _, r := range replicas {
		r.cancel()
		<-r.done
	}
	ws, err := cl.ListWindows(ctx, "close", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	resumed := 0
	led.mu.Lock()
	defer led.mu.Unlock()
	for _, w := range ws.GetWindows() {
		occ, err := time.ParseInLocation("2006-01-02T15:04:05", w.GetWindow(), time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		if _, fault := faultWindows.Load(w.GetWindow()); !fault && occ.After(stopAt.Add(-3*time.Second)) {
			continue // around the shutdown: may legitimately be unfinished
		}
		if w.GetState() != coordv1.WindowState_WINDOW_STATE_COMPLETED {
			t.Errorf("window %s not completed: %v", w.GetWindow(), w)
			continue
		}
		if w.GetAttempts() > 1 {
			resumed++
		}
		for i := 1; i <= stores; i++ {
			if n := led.accepted[fmt.Sprintf("%s/store-%d", w.GetWindow(), i)]; n != 1 {
				t.Errorf("window %s store-%d accepted %d times", w.GetWindow(), i, n)
			}
		}
	}
	if resumed < 2 {
		t.Errorf("%d windows resumed; the crash and the pause should each have made one", resumed)
	}
	refused := 0
	for _, n := range led.refused {
		refused += n
	}
	// Whether the successor wrote that store first or not, the late write
	// has no effect: refused (stale token) or answered as a duplicate.
	late, _ := lateOutcome.Load().(string)
	if late == "ACCEPTED" || late == "" {
		t.Errorf("the paused replica's late write: %q", late)
	}
	t.Logf("paused replica's late write: %s", late)
	// Every occurrence from the start to the cutoff ran.
	for occ := start.Truncate(2 * time.Second).Add(2 * time.Second); occ.Before(stopAt.Add(-3 * time.Second)); occ = occ.Add(2 * time.Second) {
		if _, err := cl.GetWindow(ctx, "close", occ.Format("2006-01-02T15:04:05")); err != nil {
			t.Errorf("occurrence %s has no window: %v", occ.Format(time.TimeOnly), err)
		}
	}
	t.Logf("%d windows, %d resumed, %d refused late writes", len(ws.GetWindows()), resumed, refused)
}

// The runner in virtual time against a real cluster: a failed run is
// retried after its backoff, an occurrence past its starting deadline is
// missed, and catch-up runs incomplete windows oldest first.
func TestJobsRunnerVirtualTime(t *testing.T) {
	c := testcluster.New(t, 1)
	// An hourly job; the runner starts 3.5 hours after a round hour.
	clk := clock.NewFake(time.Date(2026, 9, 25, 13, 30, 0, 0, time.UTC))
	cl := newClient(t, c, "vt")
	var order []string
	var mu sync.Mutex
	fails := 1
	runner := jobs.NewRunner(cl, jobs.WithClock(clk), jobs.WithPollInterval(time.Second))
	if err := runner.Add(jobs.Job{
		Name: "hourly", Schedule: jobs.Cron("0 * * * *", "UTC"), TTL: 30 * time.Second, CatchUp: 3 * time.Hour,
		RetryBackoff: 10 * time.Second,
		Run: func(ctx context.Context, run *jobs.Run) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, fmt.Sprintf("%s#%d", run.Window, run.Attempt))
			if run.Window == "2026-09-25T11" && fails > 0 {
				fails--
				return errors.New("transient")
			}
			return nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	missedClk := clock.NewFake(time.Date(2026, 9, 25, 13, 30, 0, 0, time.UTC))
	missedRunner := jobs.NewRunner(cl, jobs.WithClock(missedClk))
	ran := atomic.Bool{}
	if err := missedRunner.Add(jobs.Job{Name: "strict", Schedule: jobs.Cron("0 13 * * *", "UTC"), StartingDeadline: 10 * time.Minute,
		Run: func(context.Context, *jobs.Run) error { ran.Store(true); return nil }}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, 2)
	go func() { _ = runner.Run(ctx); done <- struct{}{} }()
	go func() { _ = missedRunner.Run(ctx); done <- struct{}{} }()
	// Catch-up ran 11:00 (failed), then waits 10 s of virtual time before
	// retrying it: advance exactly that.
	if !clk.WaitArmed(clk.Now().Add(10*time.Second), 10*time.Second) {
		t.Fatal("no retry scheduled after the failure")
	}
	clk.Advance(10 * time.Second)
	// Then 12:00 and 13:00; then the runner sleeps until 14:00.
	if !clk.WaitArmed(time.Date(2026, 9, 25, 14, 0, 0, 0, time.UTC), 10*time.Second) {
		t.Fatal("runner did not wait for the next occurrence")
	}
	mu.Lock()
	got := strings.Join(order, " ")
	mu.Unlock()
	if got != "2026-09-25T11#1 2026-09-25T11#2 2026-09-25T12#1 2026-09-25T13#1" {
		t.Fatalf("runs: %s", got)
	}
	clk.Advance(30 * time.Minute)
	c.Eventually("14:00 ran", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 5 && order[4] == "2026-09-25T14#1"
	})
	cancel()
	<-done
	<-done
	if ran.Load() {
		t.Fatal("an occurrence past its starting deadline ran")
	}
	if _, err := cl.GetWindow(context.Background(), "strict", "2026-09-25"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missed window was claimed: %v", err)
	}
}

// Monitoring by absence: a registered job whose replicas are all down has
// overdue windows that nobody claimed; they show in ListOverdue, JobStatus
// and the leader's gauges. Stuck leases are flagged.
func TestJobsOverdueAndStuckLeases(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.HTTPAddr = "127.0.0.1:0"
		cfg.API.MonitorInterval = 100 * time.Millisecond
		cfg.API.MaxLeaseAge = 1500 * time.Millisecond
	}))
	cl := newClient(t, c, "ops")
	ctx := ctxT(t)
	if _, err := cl.RegisterJob(ctx, &coordv1.JobSpec{Name: "nobody-runs-me", Schedule: "@every 1s", CompleteWithinMs: 1000}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.RegisterJob(ctx, &coordv1.JobSpec{Name: "bad", Schedule: "not cron"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Metadata["field"] != "spec.schedule" {
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
	c.Eventually("overdue windows and stuck leases", 15*time.Second, func() bool {
		od, err = cl.ListOverdue(ctx)
		if err != nil || len(od.GetWindows()) < 2 {
			return false
		}
		reasons := map[string]string{}
		for _, s := range od.GetStuckLeases() {
			reasons[s.GetLease().GetName()] = s.GetReason()
		}
		return reasons["held-forever"] == "HELD_TOO_LONG" && reasons["crashed-holder"] == "SILENT"
	})
	for _, w := range od.GetWindows() {
		if w.GetJob() != "nobody-runs-me" || w.GetClaimed() || w.GetOverdueMs() < 0 {
			t.Fatalf("overdue window: %v", w)
		}
	}
	st, err := cl.JobStatus(ctx, "nobody-runs-me", 5)
	if err != nil || len(st.GetOverdue()) == 0 || len(st.GetNextOccurrences()) != 5 || st.GetJob().GetIntervalMs() != 1000 {
		t.Fatalf("job status: %v %v", st, err)
	}
	leader := c.WaitLeader()
	c.Eventually("overdue gauge", 10*time.Second, func() bool {
		resp, err := http.Get("http://" + leader.API.HTTPAddr() + "/metrics")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), `coordd_job_overdue_windows{job="nobody-runs-me"}`) &&
			!strings.Contains(string(body), `coordd_job_overdue_windows{job="nobody-runs-me"} 0`) &&
			strings.Contains(string(body), `coordd_stuck_leases{reason="SILENT"} 1`)
	})
	js, err := cl.ListJobs(ctx)
	if err != nil || len(js.GetJobs()) != 1 {
		t.Fatalf("jobs: %v %v", js, err)
	}
}

type tw struct{ t *testing.T }

func (w tw) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// A replica whose clock runs 3 s ahead does not start occurrences early:
// coordd refuses the claim until the occurrence on the cluster's clock, and
// the runner waits. Without the gate the same replica starts each run
// about 3 s early.
func TestJobsReplicaClockAheadWaitsForTheCluster(t *testing.T) {
	c := testcluster.New(t, 1)
	c.WaitLeader()
	for _, gate := range []bool{true, false} {
		t.Run(fmt.Sprintf("gate=%v", gate), func(t *testing.T) {
			cl := newClient(t, c, "ahead")
			ahead := clock.Offset{Base: clock.Real{}, Skew: 3 * time.Second}
			opts := []jobs.Option{jobs.WithClock(ahead), jobs.WithPollInterval(100 * time.Millisecond)}
			if !gate {
				opts = append(opts, jobs.WithoutClusterClockGate())
			}
			runner := jobs.NewRunner(cl, opts...)
			type started struct {
				window string
				occ    time.Time
			}
			runs := make(chan started, 16)
			name := fmt.Sprintf("ahead-%v", gate)
			if err := runner.Add(jobs.Job{Name: name, Schedule: jobs.Every(time.Second), TTL: 5 * time.Second,
				Run: func(_ context.Context, run *jobs.Run) error {
					select {
					case runs <- started{run.Window, run.Occurrence}:
					default:
					}
					return nil
				}}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = runner.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			for i := 0; i < 3; i++ {
				var s started
				select {
				case s = <-runs:
				case <-time.After(10 * time.Second):
					t.Fatal("no run")
				}
				c.Eventually("window recorded", 5*time.Second, func() bool {
					w, err := cl.GetWindow(context.Background(), name, s.window)
					if err != nil {
						return false
					}
					early := s.occ.UnixMilli() - w.GetFirstStartedAt()
					if gate && early > 0 {
						t.Fatalf("window %s started %d ms before its occurrence on the cluster clock", s.window, early)
					}
					if !gate && early < 2000 {
						t.Fatalf("without the gate, window %s started only %d ms early; the test would not catch a missing gate", s.window, early)
					}
					return true
				})
			}
		})
	}
}
