package fsm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Queue tests run in virtual calendar time from t0; the lease clock is
// irrelevant to the queue and stays at 0.
const t0 = int64(1_700_000_000_000)

func jspec(queue, kind string, mods ...func(*fsmv1.QueueJobSpec)) *fsmv1.QueueJobSpec {
	s := &fsmv1.QueueJobSpec{Queue: queue, Kind: kind, Args: []byte(`{"n":1}`)}
	for _, m := range mods {
		m(s)
	}
	FillJobDefaults(s)
	return s
}

func at(ms int64) func(*fsmv1.QueueJobSpec)  { return func(s *fsmv1.QueueJobSpec) { s.RunAtMs = ms } }
func prio(p int32) func(*fsmv1.QueueJobSpec) { return func(s *fsmv1.QueueJobSpec) { s.Priority = p } }
func attempts(n int32) func(*fsmv1.QueueJobSpec) {
	return func(s *fsmv1.QueueJobSpec) { s.MaxAttempts = n }
}
func vis(ms int64) func(*fsmv1.QueueJobSpec) {
	return func(s *fsmv1.QueueJobSpec) { s.VisibilityTimeoutMs = ms }
}
func unique(k string) func(*fsmv1.QueueJobSpec) {
	return func(s *fsmv1.QueueJobSpec) { s.UniqueKey = k }
}
func backoff(initial, maxMs int64, permille uint32) func(*fsmv1.QueueJobSpec) {
	return func(s *fsmv1.QueueJobSpec) {
		s.BackoffInitialMs, s.BackoffMaxMs, s.BackoffFactorPermille = initial, maxMs, permille
	}
}
func labels(kv ...string) func(*fsmv1.QueueJobSpec) {
	return func(s *fsmv1.QueueJobSpec) {
		for i := 0; i+1 < len(kv); i += 2 {
			s.Labels = append(s.Labels, &fsmv1.JobLabel{Key: kv[i], Value: kv[i+1]})
		}
	}
}

func submit(t testing.TB, f *FSM, cal int64, specs ...*fsmv1.QueueJobSpec) []SubmittedJob {
	t.Helper()
	r, ok := runAt(t, f, 0, cal, &fsmv1.SubmitJobs{Jobs: specs, Identity: "submitter"}).(*SubmitResult)
	if !ok {
		t.Fatalf("submit at %d: %#v", cal, runAt(t, f, 0, cal, &fsmv1.Tick{}))
	}
	return r.Jobs
}

func submitOne(t testing.TB, f *FSM, cal int64, s *fsmv1.QueueJobSpec) QueueJob {
	t.Helper()
	r := submit(t, f, cal, s)[0]
	j, ok := f.QueueJob(r.ID)
	if !ok || j.State != r.State || j.RunAt != r.RunAt {
		t.Fatalf("submitted %+v, stored %+v", r, j)
	}
	return j
}

func fetch(t testing.TB, f *FSM, cal int64, worker string, maxJobs uint32, queues ...string) []*QueueJob {
	t.Helper()
	out := runAt(t, f, 0, cal, &fsmv1.FetchJobs{Queues: queues, Max: maxJobs, WorkerId: worker, Identity: "id-" + worker})
	r, ok := out.(*FetchResult)
	if !ok {
		t.Fatalf("fetch at %d: %#v", cal, out)
	}
	return r.Jobs
}

func ids(js []*QueueJob) []uint64 {
	out := make([]uint64, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// idsOf: ids of jobs as a read returns them (copies).
func idsOf(js []QueueJob) []uint64 {
	out := make([]uint64, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// one returns the single item result of a batch command.
func one(t testing.TB, out any) any {
	t.Helper()
	r, ok := out.(JobResults)
	if !ok || len(r) != 1 {
		t.Fatalf("want one item result, got %#v", out)
	}
	return r[0]
}

func okJob(t testing.TB, out any) JobOutcome {
	t.Helper()
	o, ok := one(t, out).(*JobOutcome)
	if !ok {
		t.Fatalf("want a job, got %#v", one(t, out))
	}
	return *o
}

func heartbeat(f *FSM, t testing.TB, cal int64, worker string, id uint64, n uint32) any {
	return runAt(t, f, 0, cal, &fsmv1.HeartbeatJobs{Attempts: []*fsmv1.JobAttemptRef{{JobId: id, Attempt: n}}, WorkerId: worker, Identity: "id-" + worker})
}

func complete(f *FSM, t testing.TB, cal int64, worker string, id uint64, n uint32, result string) any {
	return runAt(t, f, 0, cal, &fsmv1.CompleteJobs{Completions: []*fsmv1.JobCompletion{{JobId: id, Attempt: n, Result: []byte(result)}},
		WorkerId: worker, Identity: "id-" + worker})
}

func fail(f *FSM, t testing.TB, cal int64, worker string, id uint64, n uint32, retryable bool, jitter uint32) any {
	return runAt(t, f, 0, cal, &fsmv1.FailJobs{Failures: []*fsmv1.JobFailure{{JobId: id, Attempt: n, Error: "boom", Retryable: retryable, JitterPpm: jitter}},
		WorkerId: worker, Identity: "id-" + worker})
}

func tick(t testing.TB, f *FSM, cal int64) { runAt(t, f, 0, cal, &fsmv1.Tick{}) }

func jobState(t testing.TB, f *FSM, id uint64) QueueJob {
	t.Helper()
	return lookup(t, f.QueueJob, id, "job")
}

// lookup is what get finds for key, or the test fails.
func lookup[K, V any](t testing.TB, get func(K) (V, bool), key K, what string) V {
	t.Helper()
	v, ok := get(key)
	if !ok {
		t.Fatalf("%s %v not found", what, key)
	}
	return v
}

func TestQueueScheduledBecomesAvailableOnCalendarTime(t *testing.T) {
	f := New()
	now := submitOne(t, f, t0, jspec("q", "k"))
	later := submitOne(t, f, t0, jspec("q", "k", at(t0+5000)))
	past := submitOne(t, f, t0, jspec("q", "k", at(t0-100)))
	if now.ID != 1 || later.ID != 2 || past.ID != 3 {
		t.Fatalf("ids %d %d %d", now.ID, later.ID, past.ID)
	}
	if now.State != JobAvailable || now.RunAt != t0 || later.State != JobScheduled || past.State != JobAvailable || past.RunAt != t0-100 {
		t.Fatalf("states: %+v / %+v / %+v", now, later, past)
	}
	if d, ok := f.NextJobDue(); !ok || d != t0+5000 {
		t.Fatalf("next due %d %v", d, ok)
	}
	// The past job is older, so it goes first; the scheduled one is not
	// handed out before its time, however often one asks.
	if got := ids(fetch(t, f, t0+1, "w", 10, "q")); fmt.Sprint(got) != "[3 1]" {
		t.Fatalf("fetch: %v", got)
	}
	if got := fetch(t, f, t0+4999, "w", 10, "q"); len(got) != 0 {
		t.Fatalf("handed out before run_at: %v", ids(got))
	}
	if j := jobState(t, f, later.ID); j.State != JobScheduled {
		t.Fatalf("promoted early: %+v", j)
	}
	// Lease time does not make it due: only calendar time does.
	runAt(t, f, t0+10_000, 0, &fsmv1.Tick{})
	if j := jobState(t, f, later.ID); j.State != JobScheduled {
		t.Fatalf("promoted by lease time: %+v", j)
	}
	if !f.JobsReady([]string{"q"}, t0+5000) || f.JobsReady([]string{"q"}, t0+4999) {
		t.Fatal("JobsReady")
	}
	tick(t, f, t0+5000)
	if j := jobState(t, f, later.ID); j.State != JobAvailable || j.UpdatedAt != t0+5000 {
		t.Fatalf("at run_at: %+v", j)
	}
	got := fetch(t, f, t0+5001, "w", 10, "q")
	if len(got) != 1 || got[0].ID != later.ID {
		t.Fatalf("fetch at run_at: %v", ids(got))
	}
	a, ok := got[0].Current()
	if !ok || a.Number != 1 || a.WorkerID != "w" || a.Identity != "id-w" || a.StartedAt != t0+5001 || a.Deadline != t0+5001+DefaultVisibilityMs {
		t.Fatalf("attempt: %+v", a)
	}
}

func TestQueueFetchOrderAndFairness(t *testing.T) {
	f := New()
	// Queue a: priorities and run_at; queue b and c: plain.
	submit(t, f, t0,
		jspec("a", "k", at(t0-30)),           // 1
		jspec("a", "k", at(t0-10), prio(5)),  // 2
		jspec("a", "k", at(t0-20), prio(5)),  // 3
		jspec("a", "k", at(t0-40), prio(-1)), // 4
		jspec("b", "k"), jspec("b", "k"),     // 5 6
		jspec("c", "k"), // 7
	)
	// Within a: priority, then run_at. Across: one per queue per turn,
	// skipping the empty; the first fetch starts at the first queue.
	if got := ids(fetch(t, f, t0, "w", 6, "a", "b", "c")); fmt.Sprint(got) != "[3 5 7 2 6 1]" {
		t.Fatalf("order: %v", got)
	}
	if got := ids(fetch(t, f, t0, "w", 6, "a", "b", "c")); fmt.Sprint(got) != "[4]" {
		t.Fatalf("rest: %v", got)
	}

	// Fetches of one job alternate their first queue, so neither queue
	// starves the other.
	g := New()
	for i := 0; i < 4; i++ {
		submit(t, g, t0, jspec("x", "k"), jspec("y", "k"))
	}
	var order []string
	for i := 0; i < 8; i++ {
		js := fetch(t, g, t0, "w", 1, "x", "y", "x") // a repeated queue counts once
		order = append(order, js[0].Queue)
	}
	if strings.Join(order, "") != "xyxyxyxy" && strings.Join(order, "") != "yxyxyxyx" {
		t.Fatalf("single fetches: %v", order)
	}
	if got := fetch(t, g, t0, "w", 1, "x", "y"); len(got) != 0 {
		t.Fatalf("empty queues: %v", ids(got))
	}
}

func TestQueueCompleteAndTokens(t *testing.T) {
	f := New()
	j := submitOne(t, f, t0, jspec("q", "k"))
	fetch(t, f, t0, "w1", 1, "q")
	wantReason(t, one(t, runAt(t, f, 0, t0+1, &fsmv1.CompleteJobs{Completions: []*fsmv1.JobCompletion{{JobId: j.ID, Attempt: 1}},
		WorkerId: "w2", Identity: "id-w1"})), coorderr.AttemptLost)
	wantReason(t, one(t, runAt(t, f, 0, t0+1, &fsmv1.CompleteJobs{Completions: []*fsmv1.JobCompletion{{JobId: j.ID, Attempt: 1}},
		WorkerId: "w1", Identity: "mallory"})), coorderr.IdentityMismatch)
	wantReason(t, one(t, complete(f, t, t0+1, "w1", j.ID, 2, "x")), coorderr.AttemptLost)
	wantReason(t, one(t, complete(f, t, t0+1, "w1", 99, 1, "x")), coorderr.JobNotFound)
	wantReason(t, one(t, complete(f, t, t0+1, "w1", j.ID, 1, strings.Repeat("r", MaxJobResultBytes+1))), coorderr.InvalidArgument)
	done := okJob(t, complete(f, t, t0+2, "w1", j.ID, 1, "ok"))
	if done.Duplicate || done.Job.State != JobSucceeded || done.Job.FinishedAt != t0+2 || string(done.Job.Log[0].Result) != "ok" ||
		done.Job.Log[0].Outcome != AttemptSucceeded {
		t.Fatalf("complete: %+v", done)
	}
	// A retry after an unknown outcome learns it succeeded; nothing changes.
	again := okJob(t, complete(f, t, t0+3, "w1", j.ID, 1, "other"))
	if !again.Duplicate || string(again.Job.Log[0].Result) != "ok" || again.Job.FinishedAt != t0+2 {
		t.Fatalf("repeat: %+v", again)
	}
	wantReason(t, one(t, fail(f, t, t0+4, "w1", j.ID, 1, true, 0)), coorderr.AttemptLost)
	wantReason(t, one(t, heartbeat(f, t, t0+4, "w1", j.ID, 1)), coorderr.AttemptLost)
	// Bad commands are refused whole.
	wantReason(t, runAt(t, f, 0, t0+5, &fsmv1.CompleteJobs{WorkerId: "w1"}), coorderr.InvalidArgument)
	wantReason(t, runAt(t, f, 0, t0+5, &fsmv1.HeartbeatJobs{Attempts: []*fsmv1.JobAttemptRef{{JobId: 1, Attempt: 1}}}), coorderr.InvalidArgument)
	wantReason(t, runAt(t, f, 0, t0+5, &fsmv1.FetchJobs{Queues: []string{"q"}, WorkerId: "w"}), coorderr.InvalidArgument)
	wantReason(t, runAt(t, f, 0, t0+5, &fsmv1.FetchJobs{Max: 1, WorkerId: "w"}), coorderr.InvalidArgument)
	wantReason(t, runAt(t, f, 0, t0+5, &fsmv1.FetchJobs{Queues: make([]string, MaxFetchQueues+1), Max: 1, WorkerId: "w"}), coorderr.InvalidArgument)
	wantReason(t, runAt(t, f, 0, t0+5, &fsmv1.FetchJobs{Queues: []string{"q", ""}, Max: 1, WorkerId: "w"}), coorderr.InvalidArgument)
	wantReason(t, runAt(t, f, 0, t0+5, &fsmv1.FetchJobs{Queues: []string{"q"}, Max: MaxFetchBatch + 1, WorkerId: "w"}), coorderr.InvalidArgument)
}

func TestQueueHeartbeatBatch(t *testing.T) {
	f := New()
	submit(t, f, t0, jspec("q", "k", vis(1000)), jspec("q", "k", vis(1000)))
	fetch(t, f, t0, "w", 2, "q")
	out := runAt(t, f, 0, t0+600, &fsmv1.HeartbeatJobs{Attempts: []*fsmv1.JobAttemptRef{{JobId: 1, Attempt: 1}, {JobId: 2, Attempt: 7}, {JobId: 2, Attempt: 1}},
		WorkerId: "w", Identity: "id-w"}).(JobResults)
	if a, _ := out[0].(*JobOutcome).Job.Current(); a.Deadline != t0+1600 || a.Heartbeats != 1 {
		t.Fatalf("heartbeat: %+v", a)
	}
	wantReason(t, out[1], coorderr.AttemptLost)
	if _, ok := out[2].(*JobOutcome); !ok {
		t.Fatalf("third item: %#v", out[2])
	}
	if d, _ := f.NextJobDue(); d != t0+1600 {
		t.Fatalf("next due %d", d-t0)
	}
}

func TestQueueFailRetryBackoff(t *testing.T) {
	f := New()
	j := submitOne(t, f, t0, jspec("q", "k", attempts(3), backoff(1000, 1500, 2000)))
	fetch(t, f, t0, "w", 1, "q")
	r := okJob(t, fail(f, t, t0+10, "w", j.ID, 1, true, 0)).Job
	if r.State != JobRetryable || r.RunAt != t0+10+1000 || r.Log[0].Outcome != AttemptFailed || r.Log[0].Error != "boom" {
		t.Fatalf("first failure: %+v", r)
	}
	if again := okJob(t, fail(f, t, t0+11, "w", j.ID, 1, true, 0)); !again.Duplicate || again.Job.RunAt != t0+1010 {
		t.Fatalf("repeat failure: %+v", again)
	}
	if got := fetch(t, f, t0+1009, "w", 1, "q"); len(got) != 0 {
		t.Fatal("retried before its backoff")
	}
	if got := fetch(t, f, t0+1010, "w", 1, "q"); len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("second attempt: %+v", got)
	}
	// The second backoff doubles but is capped at 1500; the jitter adds up
	// to a quarter.
	r = okJob(t, fail(f, t, t0+2000, "w", j.ID, 2, true, 500_000)).Job
	if r.RunAt != t0+2000+1500+187 {
		t.Fatalf("second backoff: %d", r.RunAt-t0-2000)
	}
	fetch(t, f, r.RunAt, "w", 1, "q")
	// The last attempt's failure is final, retryable or not.
	last := r.RunAt + 1
	r = okJob(t, fail(f, t, last, "w", j.ID, 3, true, 0)).Job
	if r.State != JobDead || len(r.Log) != 3 || r.FinishedAt != last {
		t.Fatalf("last failure: %+v", r)
	}
	// A non-retryable failure is final at once.
	k := submitOne(t, f, t0+9000, jspec("q", "k"))
	fetch(t, f, t0+9000, "w", 1, "q")
	if r := okJob(t, fail(f, t, t0+9001, "w", k.ID, 1, false, 0)).Job; r.State != JobDead || r.Attempts != 1 {
		t.Fatalf("non-retryable: %+v", r)
	}
	// Errors are cut at 4 KiB without splitting a character.
	m := submitOne(t, f, t0+9002, jspec("q", "k"))
	fetch(t, f, t0+9002, "w", 1, "q")
	long := strings.Repeat("é", MaxJobErrorBytes)
	out := runAt(t, f, 0, t0+9003, &fsmv1.FailJobs{Failures: []*fsmv1.JobFailure{{JobId: m.ID, Attempt: 1, Error: long}}, WorkerId: "w", Identity: "id-w"})
	if e := okJob(t, out).Job.Log[0].Error; len(e) != MaxJobErrorBytes || !strings.HasPrefix(long, e) {
		t.Fatalf("error cut to %d bytes", len(e))
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		initial, max     int64
		permille, n, jit uint32
		want             int64
	}{
		{1000, 3_600_000, 2000, 1, 0, 1000},
		{1000, 3_600_000, 2000, 2, 0, 2000},
		{1000, 3_600_000, 2000, 13, 0, 3_600_000},
		{1000, 3_600_000, 2000, 100, 0, 3_600_000},
		{1000, 3_600_000, 1500, 3, 0, 2250},
		{1000, 3_600_000, 1000, 50, 0, 1000},
		{1000, 3_600_000, 2000, 1, 999_999, 1249},
		{1000, 3_600_000, 2000, 1, 5_000_000, 1249}, // out-of-range jitter is clamped
		{0, 0, 2000, 5, 0, 0},
		{MaxBackoffMs, MaxBackoffMs, MaxBackoffPermille, 100, 999_999, MaxBackoffMs + MaxBackoffMs*999_999/4_000_000},
	}
	for _, c := range cases {
		if got := Backoff(c.initial, c.max, c.permille, c.n, c.jit); got != c.want {
			t.Errorf("Backoff(%d, %d, %d, %d, %d) = %d, want %d", c.initial, c.max, c.permille, c.n, c.jit, got, c.want)
		}
	}
}

func TestQueueClaimLapses(t *testing.T) {
	f := New()
	j := submitOne(t, f, t0, jspec("q", "k", vis(5000), attempts(3)))
	fetch(t, f, t0, "w1", 1, "q")
	okJob(t, heartbeat(f, t, t0+4000, "w1", j.ID, 1)) // deadline t0+9000
	tick(t, f, t0+8999)
	if s := jobState(t, f, j.ID); s.State != JobRunning {
		t.Fatalf("lapsed before its deadline: %+v", s)
	}
	// At the deadline the claim lapses: the attempt counts, the job is
	// available again at once with its original run_at.
	tick(t, f, t0+9000)
	s := jobState(t, f, j.ID)
	if s.State != JobAvailable || s.RunAt != t0 || s.Log[0].Outcome != AttemptLapsed || s.Log[0].FinishedAt != t0+9000 ||
		!strings.Contains(s.Log[0].Error, "visibility timeout") {
		t.Fatalf("after the deadline: %+v", s)
	}
	rej := one(t, heartbeat(f, t, t0+9001, "w1", j.ID, 1))
	wantReason(t, rej, coorderr.AttemptExpired)
	if m := rej.(*Rejection).Metadata; m["outcome"] != "LAPSED" || m["current_attempt"] != "1" || m["state"] != "AVAILABLE" {
		t.Fatalf("metadata: %v", m)
	}
	got := fetch(t, f, t0+9002, "w2", 1, "q")
	if len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("handed on: %+v", got)
	}
	// The first worker wakes up: everything it tries is refused.
	wantReason(t, one(t, complete(f, t, t0+9003, "w1", j.ID, 1, "late")), coorderr.AttemptExpired)
	wantReason(t, one(t, fail(f, t, t0+9003, "w1", j.ID, 1, true, 0)), coorderr.AttemptExpired)
	wantReason(t, run(t, f, 0, &fsmv1.FencedCommit{Resource: "r", JobId: j.ID, Generation: 1}), coorderr.StaleToken)
	okJob(t, complete(f, t, t0+9004, "w2", j.ID, 2, "done"))

	// A lapse of the last attempt kills the job.
	k := submitOne(t, f, t0+10_000, jspec("q", "k", vis(100), attempts(1)))
	fetch(t, f, t0+10_000, "w", 1, "q")
	tick(t, f, t0+10_100)
	if s := jobState(t, f, k.ID); s.State != JobDead || s.FinishedAt != t0+10_100 {
		t.Fatalf("last attempt lapsed: %+v", s)
	}
}

// A completion stamped before the deadline but applied after a command
// stamped at or past it is judged at the FSM's calendar (it never goes
// back): the claim lapsed first, so the completion is refused.
func TestQueueExpiryWhileCompletionInFlight(t *testing.T) {
	for _, c := range []struct {
		name     string
		before   int64 // calendar of a command applied before the completion (0: none)
		complete int64
		want     Reason
	}{
		{"in time", 0, t0 + 999, 0},
		{"at the deadline", 0, t0 + 1000, coorderr.AttemptExpired},
		{"overtaken by a later stamp", t0 + 1000, t0 + 999, coorderr.AttemptExpired},
		{"later stamp still before the deadline", t0 + 998, t0 + 999, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := New()
			j := submitOne(t, f, t0, jspec("q", "k", vis(1000)))
			fetch(t, f, t0, "w", 1, "q")
			if c.before != 0 {
				tick(t, f, c.before)
			}
			got := one(t, complete(f, t, c.complete, "w", j.ID, 1, "r"))
			if c.want != 0 {
				wantReason(t, got, c.want)
				if s := jobState(t, f, j.ID); s.State != JobAvailable {
					t.Fatalf("state %s", s.State)
				}
				return
			}
			if o, ok := got.(*JobOutcome); !ok || o.Job.State != JobSucceeded {
				t.Fatalf("completion: %#v", got)
			}
		})
	}
}

func TestQueueCancel(t *testing.T) {
	f := New()
	submit(t, f, t0, jspec("q", "k", at(t0+1000)), jspec("q", "k"), jspec("q", "k"))
	fetch(t, f, t0, "w", 1, "q") // job 2 runs
	okAny(t, runAt(t, f, 0, t0+1, &fsmv1.FencedCommit{Resource: "r2", JobId: 2, Generation: 1}))
	out := runAt(t, f, 0, t0+10, &fsmv1.CancelJobs{JobIds: []uint64{1, 2, 3, 2, 42}, Identity: "ops"}).(JobResults)
	for i := 0; i < 3; i++ {
		o := out[i].(*JobOutcome)
		if o.Duplicate || o.Job.State != JobCancelled || o.Job.FinishedAt != t0+10 {
			t.Fatalf("cancel %d: %+v", i, o)
		}
	}
	if o := out[3].(*JobOutcome); !o.Duplicate {
		t.Fatalf("second cancel: %+v", o)
	}
	wantReason(t, out[4], coorderr.JobNotFound)
	// The running attempt's token is stale at once.
	if a := jobState(t, f, 2).Log[0]; a.Outcome != AttemptCancelled || a.FinishedAt != t0+10 || a.Error != `cancelled by "ops"` {
		t.Fatalf("cancelled attempt: %+v", a)
	}
	wantReason(t, one(t, heartbeat(f, t, t0+11, "w", 2, 1)), coorderr.JobCancelled)
	wantReason(t, one(t, complete(f, t, t0+11, "w", 2, 1, "")), coorderr.JobCancelled)
	wantReason(t, runAt(t, f, 0, t0+11, &fsmv1.FencedCommit{Resource: "r2", JobId: 2, Generation: 1}), coorderr.JobCancelled)
	// Cancelled jobs are not handed out, scheduled ones not promoted.
	tick(t, f, t0+2000)
	if got := fetch(t, f, t0+2000, "w", 10, "q"); len(got) != 0 {
		t.Fatalf("fetched cancelled: %v", ids(got))
	}
	// A finished job cannot be cancelled.
	d := submitOne(t, f, t0+3000, jspec("q", "k"))
	fetch(t, f, t0+3000, "w", 1, "q")
	okJob(t, complete(f, t, t0+3001, "w", d.ID, 1, ""))
	wantReason(t, one(t, runAt(t, f, 0, t0+3002, &fsmv1.CancelJobs{JobIds: []uint64{d.ID}})), coorderr.JobFinished)
	wantReason(t, runAt(t, f, 0, t0+3002, &fsmv1.CancelJobs{}), coorderr.InvalidArgument)
}

func okAny(t testing.TB, out any) {
	t.Helper()
	if _, bad := out.(error); bad {
		t.Fatalf("refused: %v", out)
	}
}

func TestQueueRetry(t *testing.T) {
	f := New()
	submit(t, f, t0,
		jspec("q", "k", attempts(1)),                   // 1: will be dead
		jspec("q", "k"),                                // 2: will be cancelled
		jspec("q", "k", backoff(60_000, 60_000, 1000)), // 3: will be retryable
		jspec("q", "k", at(t0+100_000)),                // 4: scheduled
		jspec("q", "k"),                                // 5: will be running
		jspec("q", "k"),                                // 6: will succeed
	)
	got := fetch(t, f, t0, "w", 10, "q")
	if len(got) != 5 {
		t.Fatalf("fetched %v", ids(got))
	}
	okJob(t, fail(f, t, t0+1, "w", 1, 1, true, 0))
	okJob(t, runAt(t, f, 0, t0+1, &fsmv1.CancelJobs{JobIds: []uint64{2}}))
	okJob(t, fail(f, t, t0+1, "w", 3, 1, true, 0))
	okJob(t, complete(f, t, t0+1, "w", 6, 1, ""))
	out := runAt(t, f, 0, t0+50, &fsmv1.RetryJobs{JobIds: []uint64{1, 2, 3, 4, 5, 6, 1, 77}}).(JobResults)
	for i, id := range []uint64{1, 2, 3, 4} {
		o := out[i].(*JobOutcome)
		if o.Duplicate || o.Job.ID != id || o.Job.State != JobAvailable || o.Job.RunAt != t0+50 || o.Job.FinishedAt != 0 {
			t.Fatalf("retry %d: %+v", id, o)
		}
	}
	if o := out[0].(*JobOutcome); o.Job.MaxAttempts != 2 {
		t.Fatalf("exhausted job got no extra attempt: %+v", o.Job)
	}
	wantReason(t, out[4], coorderr.JobRunning)
	wantReason(t, out[5], coorderr.JobFinished)
	if o := out[6].(*JobOutcome); !o.Duplicate {
		t.Fatalf("second retry: %+v", o)
	}
	wantReason(t, out[7], coorderr.JobNotFound)
	// Retried jobs run again with the next attempt number; the old
	// cancelled attempt stays refused.
	again := fetch(t, f, t0+51, "w2", 10, "q")
	if fmt.Sprint(ids(again)) != "[1 2 3 4]" {
		t.Fatalf("after retry: %v", ids(again))
	}
	for _, j := range again {
		want := uint32(2)
		if j.ID == 4 {
			want = 1
		}
		if j.Attempts != want {
			t.Fatalf("job %d attempt %d", j.ID, j.Attempts)
		}
	}
	wantReason(t, one(t, complete(f, t, t0+52, "w", 2, 1, "")), coorderr.JobCancelled)
	okJob(t, complete(f, t, t0+52, "w2", 2, 2, ""))
}

func TestQueueUniqueKeys(t *testing.T) {
	f := New()
	first := submit(t, f, t0, jspec("q", "k", unique("order-17")), jspec("q", "k", unique("order-17")), jspec("other", "k", unique("order-17")))
	if first[0].Duplicate || !first[1].Duplicate || first[1].ID != first[0].ID || first[2].Duplicate || first[2].ID == first[0].ID {
		t.Fatalf("same batch: %+v", first)
	}
	// Two clients race: both submits land in one entry; the first in log
	// order creates the job, the second gets it back.
	race := runAt(t, f, 0, t0+1, &fsmv1.Batch{Commands: []*fsmv1.Command{
		EnvelopeAt(0, t0+1, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("q", "a", unique("invoice-9"))}}),
		EnvelopeAt(0, t0+1, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("q", "b", unique("invoice-9"))}}),
	}}).(BatchResult)
	a, b := race[0].(*SubmitResult).Jobs[0], race[1].(*SubmitResult).Jobs[0]
	if j, _ := f.QueueJob(b.ID); a.Duplicate || !b.Duplicate || b.ID != a.ID || j.Kind != "a" {
		t.Fatalf("race: %+v %+v", a, b)
	}
	// While the job is kept, whatever its state, the key returns it.
	fetch(t, f, t0+2, "w", 10, "q")
	okJob(t, complete(f, t, t0+3, "w", first[0].ID, 1, ""))
	if again := submit(t, f, t0+4, jspec("q", "k", unique("order-17")))[0]; !again.Duplicate || again.State != JobSucceeded {
		t.Fatalf("after completion: %+v", again)
	}
	// Pruned with its job, the key is free again.
	if r := runAt(t, f, 0, t0+5, &fsmv1.Prune{JobsCutoffMs: t0 + 4}).(*PruneResult); r.Jobs != 1 {
		t.Fatalf("prune: %+v", r)
	}
	if fresh := submit(t, f, t0+6, jspec("q", "k", unique("order-17")))[0]; fresh.Duplicate || fresh.ID == first[0].ID {
		t.Fatalf("after prune: %+v", fresh)
	}
}

func TestQueueSubmitAllOrNothing(t *testing.T) {
	bad := []struct {
		field string
		mod   func(*fsmv1.QueueJobSpec)
	}{
		{"kind", func(s *fsmv1.QueueJobSpec) { s.Kind = "" }},
		{"queue", func(s *fsmv1.QueueJobSpec) { s.Queue = strings.Repeat("q", MaxQueueNameBytes+1) }},
		{"args", func(s *fsmv1.QueueJobSpec) { s.Args = make([]byte, MaxJobArgsBytes+1) }},
		{"run_at", func(s *fsmv1.QueueJobSpec) { s.RunAtMs = t0 + MaxRunAheadMs + 1 }},
		{"run_at", func(s *fsmv1.QueueJobSpec) { s.RunAtMs = -1 }},
		{"priority", func(s *fsmv1.QueueJobSpec) { s.Priority = MaxJobPriority + 1 }},
		{"max_attempts", func(s *fsmv1.QueueJobSpec) { s.MaxAttempts = 0 }},
		{"max_attempts", func(s *fsmv1.QueueJobSpec) { s.MaxAttempts = MaxJobAttempts + 1 }},
		{"visibility_timeout", func(s *fsmv1.QueueJobSpec) { s.VisibilityTimeoutMs = -5 }},
		{"backoff_initial", func(s *fsmv1.QueueJobSpec) { s.BackoffInitialMs = s.BackoffMaxMs + 1 }},
		{"backoff_max", func(s *fsmv1.QueueJobSpec) { s.BackoffMaxMs = -1 }},
		{"backoff_factor", func(s *fsmv1.QueueJobSpec) { s.BackoffFactorPermille = 999 }},
		{"unique_key", func(s *fsmv1.QueueJobSpec) { s.UniqueKey = strings.Repeat("u", MaxUniqueKeyBytes+1) }},
		{"labels", labels("a", "1", "a", "2")},
		{"labels", labels("", "1")},
	}
	// The rules of spec_rules 1: an entry written before it (0) replays as
	// it did.
	since1 := []struct {
		field string
		mod   func(*fsmv1.QueueJobSpec)
	}{
		{"queue", func(s *fsmv1.QueueJobSpec) { s.Queue = "ctl\x01q" }},
		{"kind", func(s *fsmv1.QueueJobSpec) { s.Kind = "a\nb" }},
		{"unique_key", func(s *fsmv1.QueueJobSpec) { s.UniqueKey = "u\x7f" }},
		{"labels", labels("k\x00", "1")},
		{"labels", labels("coordd.window", "w")},
	}
	for _, c := range since1 {
		b := jspec("q", "k")
		c.mod(b)
		if _, ok := runAt(t, New(), 0, t0, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{b}}).(*SubmitResult); !ok {
			t.Errorf("%s: an entry of spec_rules 0 replays differently", c.field)
		}
	}
	bad = append(bad, since1...)
	for _, c := range bad {
		t.Run(c.field, func(t *testing.T) {
			f := New()
			b := jspec("q", "k")
			c.mod(b)
			out := runAt(t, f, 0, t0, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("q", "k"), b}, SpecRules: JobSpecRules})
			wantReason(t, out, coorderr.InvalidArgument)
			if m := out.(*Rejection).Metadata; m["field"] != c.field || m["index"] != "1" {
				t.Fatalf("metadata %v", m)
			}
			if f.QueueJobCount() != 0 {
				t.Fatal("a refused batch submitted something")
			}
			if j := submitOne(t, f, t0, jspec("q", "k")); j.ID != 1 {
				t.Fatalf("a refused batch used ids: next is %d", j.ID)
			}
		})
	}
	f := New()
	many := make([]*fsmv1.QueueJobSpec, MaxSubmitBatch+1)
	for i := range many {
		many[i] = jspec("q", "k")
	}
	wantReason(t, runAt(t, f, 0, t0, &fsmv1.SubmitJobs{Jobs: many}), coorderr.InvalidArgument)
	wantReason(t, runAt(t, f, 0, t0, &fsmv1.SubmitJobs{}), coorderr.InvalidArgument)
	if got := submit(t, f, t0, many[:MaxSubmitBatch]...); len(got) != MaxSubmitBatch {
		t.Fatalf("full batch: %d", len(got))
	}
}

func TestQueueRetention(t *testing.T) {
	f := New()
	// 1..3 succeed at t0+1..3, 4 dies at t0+4, 5 is cancelled at t0+5, 6 stays available.
	submit(t, f, t0, jspec("q", "k", unique("u1")), jspec("q", "k"), jspec("q", "k"), jspec("q", "k", attempts(1)), jspec("q", "k"), jspec("q", "k"))
	fetch(t, f, t0, "w", 4, "q")
	for id := uint64(1); id <= 3; id++ {
		okJob(t, complete(f, t, t0+int64(id), "w", id, 1, ""))
	}
	okJob(t, fail(f, t, t0+4, "w", 4, 1, true, 0))
	okJob(t, runAt(t, f, 0, t0+5, &fsmv1.CancelJobs{JobIds: []uint64{5}}))
	// By age: finished before t0+2 goes.
	if r := runAt(t, f, 0, t0+10, &fsmv1.Prune{JobsCutoffMs: t0 + 2}).(*PruneResult); r.Jobs != 1 {
		t.Fatalf("by age: %+v", r)
	}
	// By count: succeeded go first (oldest first), then the others.
	if r := runAt(t, f, 0, t0+11, &fsmv1.Prune{MaxFinishedJobs: 2}).(*PruneResult); r.Jobs != 2 {
		t.Fatalf("by count: %+v", r)
	}
	left, _ := f.ListQueueJobs(JobFilter{}, 0, 10)
	if fmt.Sprint(idsOf(left)) != "[6 5 4]" {
		t.Fatalf("kept: %v", idsOf(left))
	}
	if r := runAt(t, f, 0, t0+12, &fsmv1.Prune{MaxFinishedJobs: 1}).(*PruneResult); r.Jobs != 1 {
		t.Fatalf("by count, failures: %+v", r)
	}
	// Unfinished jobs are never pruned; the old lease-time cutoff alone
	// does not touch jobs.
	runAt(t, f, 1<<50, t0+13, &fsmv1.Prune{CutoffMs: 1 << 50, JobsCutoffMs: t0 + 1_000_000})
	left, _ = f.ListQueueJobs(JobFilter{}, 0, 10)
	if fmt.Sprint(idsOf(left)) != "[6]" {
		t.Fatalf("kept: %v", idsOf(left))
	}
	st := f.QueueStats("q", t0+13)
	if len(st) != 1 || st[0].Available != 1 || st[0].Succeeded+st[0].Dead+st[0].Cancelled != 0 {
		t.Fatalf("stats after prune: %+v", st)
	}
	// The pruned job's unique key is free.
	if j := submit(t, f, t0+14, jspec("q", "k", unique("u1")))[0]; j.Duplicate {
		t.Fatalf("unique key kept after prune: %+v", j)
	}
}

func TestQueueJobFencedCommit(t *testing.T) {
	f := New()
	j := submitOne(t, f, t0, jspec("q", "k", vis(1000)))
	fetch(t, f, t0, "w", 1, "q")
	commit := func(cal int64, gen uint64, key string) any {
		return runAt(t, f, 0, cal, &fsmv1.FencedCommit{Resource: "orders/17", JobId: j.ID, Generation: gen, IdempotencyKey: key, Payload: []byte(key)})
	}
	if r := f.CheckFence(0, &fsmv1.FencedCommit{Resource: "orders/17", JobId: j.ID, Generation: 1}).(*CommitResult); !r.Accepted {
		t.Fatalf("dry run: %+v", r)
	}
	if r := commit(t0+1, 1, "k1").(*CommitResult); !r.Accepted || r.MaxGeneration != 1 {
		t.Fatalf("commit: %+v", r)
	}
	if res, _ := f.Resource("orders/17"); res.JobID != j.ID || res.LeaseName != "job:1" || res.MaxGeneration != 1 {
		t.Fatalf("resource: %+v", res)
	}
	wantReason(t, commit(t0+1, 2, ""), coorderr.AttemptLost)
	wantReason(t, commit(t0+1, 0, ""), coorderr.AttemptLost)
	wantReason(t, runAt(t, f, 0, t0+1, &fsmv1.FencedCommit{Resource: "orders/17", JobId: 99, Generation: 1}), coorderr.JobNotFound)
	wantReason(t, runAt(t, f, 0, t0+1, &fsmv1.FencedCommit{Resource: "orders/17", JobId: 1, LeaseName: "l", Generation: 1}), coorderr.InvalidArgument)
	// The resource is bound to the job: a lease (even one named like the
	// job's token) or another job is refused.
	runAt(t, f, 0, t0+1, acq("job:1", "o", 100_000, ""))
	wantReason(t, runAt(t, f, 0, t0+2, &fsmv1.FencedCommit{Resource: "orders/17", LeaseName: "job:1", Generation: 1}), coorderr.ResourceLeaseMismatch)
	k := submitOne(t, f, t0+2, jspec("q", "k"))
	fetch(t, f, t0+2, "w", 1, "q")
	wantReason(t, runAt(t, f, 0, t0+3, &fsmv1.FencedCommit{Resource: "orders/17", JobId: k.ID, Generation: 1}), coorderr.ResourceLeaseMismatch)
	// The claim lapses: the attempt's token is refused, even before anyone
	// else fetched the job; a repeat of an accepted key still learns its
	// outcome.
	wantReason(t, commit(t0+1000, 1, ""), coorderr.AttemptExpired)
	if r := commit(t0+1001, 1, "k1").(*CommitResult); !r.Duplicate || string(r.Payload) != "k1" {
		t.Fatalf("repeat: %+v", r)
	}
	// The next attempt commits; the older token is stale.
	fetch(t, f, t0+1002, "w2", 1, "q")
	if r := commit(t0+1003, 2, "").(*CommitResult); !r.Accepted || r.MaxGeneration != 2 {
		t.Fatalf("second attempt: %+v", r)
	}
	wantReason(t, commit(t0+1004, 1, ""), coorderr.StaleToken)
	// Completed: the attempt is over, its token too.
	okJob(t, complete(f, t, t0+1005, "w2", j.ID, 2, ""))
	wantReason(t, commit(t0+1006, 2, ""), coorderr.AttemptLost)
	if id, ok := ParseJobTokenName("job:17"); !ok || id != 17 {
		t.Fatal("ParseJobTokenName")
	}
	for _, bad := range []string{"job:", "job:017", "job:-1", "job:1x", "jobs:1", "job:0"} {
		if _, ok := ParseJobTokenName(bad); ok {
			t.Fatalf("ParseJobTokenName(%q) accepted", bad)
		}
	}
}

func TestQueueListAndStats(t *testing.T) {
	f := New()
	submit(t, f, t0,
		jspec("a", "email", labels("tenant", "t1")),           // 1
		jspec("a", "report", prio(3), at(t0-500)),             // 2
		jspec("b", "email", labels("tenant", "t2")),           // 3
		jspec("a", "email", labels("tenant", "t1", "x", "y")), // 4
		jspec("a", "email", at(t0+60_000)),                    // 5
		jspec("b", "report", at(t0-900), prio(-2)),            // 6
	)
	fetch(t, f, t0, "w", 1, "a") // 2 runs
	list := func(fl JobFilter, before uint64, limit int) string {
		js, more := f.ListQueueJobs(fl, before, limit)
		return fmt.Sprint(idsOf(js), more)
	}
	cases := []struct {
		fl     JobFilter
		before uint64
		limit  int
		want   string
	}{
		{JobFilter{}, 0, 10, "[6 5 4 3 2 1] false"},
		{JobFilter{}, 0, 2, "[6 5] true"},
		{JobFilter{}, 5, 2, "[4 3] true"},
		{JobFilter{}, 3, 2, "[2 1] false"},
		{JobFilter{Queue: "a"}, 0, 10, "[5 4 2 1] false"},
		{JobFilter{Queue: "a", State: JobAvailable}, 0, 10, "[4 1] false"},
		{JobFilter{Queue: "a", State: JobAvailable}, 4, 10, "[1] false"},
		{JobFilter{State: JobRunning}, 0, 10, "[2] false"},
		{JobFilter{State: JobScheduled}, 0, 10, "[5] false"},
		{JobFilter{Kind: "email"}, 0, 10, "[5 4 3 1] false"},
		{JobFilter{Kind: "email", Queue: "b"}, 0, 10, "[3] false"},
		{JobFilter{Label: &Label{"tenant", "t1"}}, 0, 10, "[4 1] false"},
		{JobFilter{Label: &Label{"tenant", "t1"}}, 0, 1, "[4] true"},
		{JobFilter{Label: &Label{"tenant", "t3"}}, 0, 10, "[] false"},
		{JobFilter{Queue: "none"}, 0, 10, "[] false"},
	}
	for _, c := range cases {
		if got := list(c.fl, c.before, c.limit); got != c.want {
			t.Errorf("list %+v before %d limit %d: %s, want %s", c.fl, c.before, c.limit, got, c.want)
		}
	}
	st := f.QueueStats("", t0+1000)
	if len(st) != 2 || st[0].Queue != "a" || st[1].Queue != "b" {
		t.Fatalf("stats: %+v", st)
	}
	a, b := st[0], st[1]
	if a.Available != 2 || a.Running != 1 || a.Scheduled != 1 || a.Submitted != 4 || a.Attempts != 1 || a.OldestAvailableRunAt != t0 || a.OldestAvailableAgeMs != 1000 {
		t.Fatalf("queue a: %+v", a)
	}
	// The oldest available job is found across priorities (6 has the
	// lowest priority but waited longest).
	if b.Available != 2 || b.OldestAvailableRunAt != t0-900 || b.OldestAvailableAgeMs != 1900 {
		t.Fatalf("queue b: %+v", b)
	}
	if got := f.QueueStats("b", t0); len(got) != 1 || got[0].Queue != "b" {
		t.Fatalf("one queue: %+v", got)
	}
	if got := f.QueueStats("none", t0); len(got) != 0 {
		t.Fatalf("unknown queue: %+v", got)
	}
	if d, ok := f.NextJobDue(); !ok || d != t0+DefaultVisibilityMs {
		t.Fatalf("next due: %d", d-t0)
	}
}

func TestQueueAttemptLogKeepsTheLatest(t *testing.T) {
	f := New()
	j := submitOne(t, f, t0, jspec("q", "k", attempts(MaxJobAttempts), vis(10)))
	cal := t0
	for i := 0; i < MaxAttemptRecords+8; i++ {
		fetch(t, f, cal, "w", 1, "q")
		cal += 10 // lapses
	}
	tick(t, f, cal)
	s := jobState(t, f, j.ID)
	if s.Attempts != MaxAttemptRecords+8 || len(s.Log) != MaxAttemptRecords || s.Log[0].Number != 9 || s.Log[len(s.Log)-1].Number != s.Attempts {
		t.Fatalf("log: %d attempts, %d records from %d", s.Attempts, len(s.Log), s.Log[0].Number)
	}
	// An attempt whose record was dropped is still refused.
	wantReason(t, one(t, heartbeat(f, t, cal, "w", j.ID, 1)), coorderr.AttemptLost)
}

func TestQueueSnapshotRoundTrip(t *testing.T) {
	f, g := twins(t, buildQueueState)
	for _, x := range []*FSM{f, g} {
		// Lapses and promotions continue from the restored indexes.
		tick(t, x, t0+100_000)
		got := fetch(t, x, t0+100_001, "w9", 100, "a", "b")
		if fmt.Sprint(ids(got)) != "[1 4 2 5]" {
			t.Fatalf("fetch after restore: %v", ids(got))
		}
		if r := runAt(t, x, 0, t0+100_002, &fsmv1.Prune{MaxFinishedJobs: 1}).(*PruneResult); r.Jobs != 2 {
			t.Fatalf("prune after restore: %+v", r)
		}
		if j := submit(t, x, t0+100_003, jspec("a", "k", unique("u")))[0]; j.Duplicate {
			t.Fatalf("unique key of a pruned job after restore: %+v", j)
		}
	}
	if f.Digest() != g.Digest() {
		t.Fatal("digest differs after continuing")
	}
	fs, gs := f.QueueStats("", t0), g.QueueStats("", t0)
	for i := range fs {
		fs[i].QueueCounters, gs[i].QueueCounters = QueueCounters{}, QueueCounters{} // per replica
	}
	if fmt.Sprint(fs) != fmt.Sprint(gs) {
		t.Fatalf("stats differ:\n%+v\n%+v", fs, gs)
	}
	// A running job without its live attempt is a corrupt snapshot.
	bad := New()
	bad.st.lastJobID = 1
	bad.st.qjobs.ReplaceOrInsert(&QueueJob{ID: 1, State: JobRunning, Queue: "q"})
	if _, err := readSnapshot(bytes.NewReader(snapshotOf(t, bad).Bytes())); err == nil {
		t.Fatal("corrupt queue record accepted")
	}
}

// buildQueueState leaves jobs in every state: 1 available again after a
// lapse, 2 running (lapses at t0+30_999), 3 succeeded, 4 retryable (due
// t0+60_000), 5 scheduled (t0+90_000), 6 cancelled, 7 dead.
func buildQueueState(t testing.TB, f *FSM) {
	submit(t, f, t0,
		jspec("a", "k", vis(1000)), jspec("a", "k"), jspec("a", "k", unique("u")),
		jspec("b", "k", backoff(59_000, 59_000, 1000)), jspec("b", "k", at(t0+90_000)),
		jspec("b", "k", labels("l", "v")), jspec("b", "k", attempts(1)))
	fetch(t, f, t0, "w", 1, "a")
	fetch(t, f, t0+999, "w", 10, "a", "b")
	okJob(t, complete(f, t, t0+1001, "w", 3, 1, "res"))
	okJob(t, fail(f, t, t0+1001, "w", 4, 1, true, 0))
	okAny(t, runAt(t, f, 0, t0+1001, &fsmv1.CancelJobs{JobIds: []uint64{6}}))
	okJob(t, fail(f, t, t0+1001, "w", 7, 1, false, 0))
	tick(t, f, t0+1002)
	want := map[uint64]JobState{1: JobAvailable, 2: JobRunning, 3: JobSucceeded, 4: JobRetryable, 5: JobScheduled, 6: JobCancelled, 7: JobDead}
	for id, st := range want {
		if j, _ := f.QueueJob(id); j.State != st {
			t.Fatalf("job %d: %s, want %s", id, j.State, st)
		}
	}
}

// Jobs submitted (or restored) one after another with the same queue,
// kind and identity hold one copy of each name, not one decoded copy per
// job; the values and the digest are as before.
func TestQueueJobsShareNames(t *testing.T) {
	f := New()
	submit(t, f, t0, jspec("q", "send"), jspec("q", "send"), jspec("other", "send"))
	submit(t, f, t0, jspec("other", "mail"))
	same := func(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }
	check := func(f *FSM, when string) {
		t.Helper()
		var js []QueueJob
		for id := uint64(1); id <= 4; id++ {
			j, ok := f.QueueJob(id)
			if !ok {
				t.Fatalf("%s: job %d missing", when, id)
			}
			js = append(js, j)
		}
		if !same(js[0].Queue, js[1].Queue) || !same(js[0].Kind, js[1].Kind) || !same(js[1].Kind, js[2].Kind) ||
			!same(js[2].Queue, js[3].Queue) || !same(js[0].Identity, js[3].Identity) {
			t.Fatalf("%s: names not shared: %+v", when, js)
		}
		if js[2].Queue != "other" || js[3].Kind != "mail" || js[0].Identity != "submitter" {
			t.Fatalf("%s: names changed: %+v", when, js)
		}
	}
	check(f, "after submit")
	g := restored(t, f)
	check(g, "after restore")
	if f.Digest() != g.Digest() {
		t.Fatal("digest changed by a snapshot round trip")
	}
}

// Resources fenced by a queue job go with the job when retention prunes
// it (a DELETE event each); resources of other jobs and of leases stay; the
// name is free for another job afterwards, and a restored replica prunes
// the same (the index is rebuilt from the resources).
func TestQueueJobResourcesPrunedWithTheirJob(t *testing.T) {
	f := New()
	run(t, f, 1, acq("L", "o", 1_000_000, "r"))
	okAny(t, run(t, f, 2, &fsmv1.FencedCommit{Resource: "by-lease", LeaseName: "L", Generation: 1}))
	submit(t, f, t0, jspec("q", "k"), jspec("q", "k"))
	fetch(t, f, t0, "w", 2, "q")
	for _, c := range []struct {
		id  uint64
		res string
	}{{1, "a/1"}, {1, "a/2"}, {2, "b/1"}} {
		okAny(t, runAt(t, f, 0, t0+1, &fsmv1.FencedCommit{Resource: c.res, JobId: c.id, Generation: 1, IdempotencyKey: c.res}))
	}
	okJob(t, complete(f, t, t0+2, "w", 1, 1, ""))
	g := restored(t, f)
	for _, x := range []*FSM{f, g} {
		_, evs := runEvents(t, x, 3, t0+10, &fsmv1.Prune{JobsCutoffMs: t0 + 5})
		if got := brief(evs); got != "QUEUE_JOB DELETE q/1;RESOURCE DELETE a/1;RESOURCE DELETE a/2;" {
			t.Fatalf("prune events %q", got)
		}
		for name, want := range map[string]bool{"a/1": false, "a/2": false, "b/1": true, "by-lease": true} {
			if _, ok := x.Resource(name); ok != want {
				t.Fatalf("resource %s kept=%t, want %t", name, ok, want)
			}
		}
	}
	if f.Digest() != g.Digest() {
		t.Fatal("a restored replica pruned differently")
	}
	// A late commit of the pruned job is refused; another job may take the name.
	wantReason(t, runAt(t, f, 0, t0+11, &fsmv1.FencedCommit{Resource: "a/1", JobId: 1, Generation: 1}), coorderr.JobNotFound)
	okAny(t, runAt(t, f, 0, t0+12, &fsmv1.FencedCommit{Resource: "a/1", JobId: 2, Generation: 1}))
	// The key's first outcome outlives the resource until its own retention.
	if r := runAt(t, f, 0, t0+13, &fsmv1.FencedCommit{Resource: "a/2", JobId: 2, Generation: 1, IdempotencyKey: "a/2"}).(*CommitResult); !r.Duplicate {
		t.Fatalf("key after prune: %+v", r)
	}
}

// The one limit that depends on time is judged at the command's calendar
// stamp and says how far ahead in days.
func TestCheckRunAhead(t *testing.T) {
	const day = 24 * 3600 * 1000
	for _, c := range []struct {
		runAt int64
		want  string
	}{
		{t0 + MaxRunAheadMs, ""},
		{t0 + 400*day, "is 400 days ahead; the limit is 366 days"},
		{t0 + MaxRunAheadMs + 1, "is 366 days 1ms ahead; the limit is 366 days"},
		{t0 + day + 90*60*1000, ""},
	} {
		field, problem := CheckRunAhead(c.runAt, t0)
		if problem != c.want || (c.want != "") != (field == "run_at") {
			t.Errorf("run_at %d ms ahead: %q %q, want %q", c.runAt-t0, field, problem, c.want)
		}
	}
	if got := Days(day + 90*60*1000); got != "1 day 1h30m0s" {
		t.Errorf("Days: %q", got)
	}
}

// Issue 32, item 5: max_live_jobs counts the identity's jobs that are not
// final, exactly, and refuses a batch that would go over it whole; jobs
// that finish stop counting, unique-key duplicates add none, other
// identities are not affected, and the count survives a restore.
func TestLiveJobQuota(t *testing.T) {
	f := New()
	sub := func(cal int64, identity string, specs ...*fsmv1.QueueJobSpec) any {
		return runAt(t, f, 0, cal, &fsmv1.SubmitJobs{Jobs: specs, Identity: identity, MaxLiveJobs: 3})
	}
	if _, ok := sub(t0, "x", jspec("q", "k"), jspec("q", "k", unique("u"))).(*SubmitResult); !ok {
		t.Fatal("first two")
	}
	rej := sub(t0+1, "x", jspec("q", "k"), jspec("q", "k"))
	wantReason(t, rej, coorderr.JobQuota)
	if m := rej.(*Rejection).Metadata; m["live"] != "2" || m["limit"] != "3" || m["identity"] != "x" {
		t.Fatalf("metadata: %v", m)
	}
	if st := f.QueueStats("q", t0+1); len(st) != 1 || st[0].Available != 2 {
		t.Fatalf("a refused batch added jobs: %+v", st)
	}
	// A duplicate of a retained job adds nothing: allowed with the third.
	if r, ok := sub(t0+2, "x", jspec("q", "k", unique("u")), jspec("q", "k")).(*SubmitResult); !ok || !r.Jobs[0].Duplicate {
		t.Fatalf("duplicate and one more: %#v", r)
	}
	wantReason(t, sub(t0+3, "x", jspec("q", "k")), coorderr.JobQuota)
	if _, ok := sub(t0+3, "y", jspec("q", "k")).(*SubmitResult); !ok {
		t.Fatal("another identity is refused")
	}
	// A finished job stops counting.
	for _, j := range fetch(t, f, t0+4, "w", 1, "q") {
		complete(f, t, t0+5, "w", j.ID, j.Attempts, "ok")
	}
	if _, ok := sub(t0+6, "x", jspec("q", "k")).(*SubmitResult); !ok {
		t.Fatal("after a job finished")
	}
	g := restored(t, f)
	wantReason(t, runAt(t, g, 0, t0+7, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("q", "k")}, Identity: "x", MaxLiveJobs: 3}), coorderr.JobQuota)
	// Without the field (entries written before it) there is no limit.
	if _, ok := sub(t0+8, "", jspec("q", "k"), jspec("q", "k"), jspec("q", "k"), jspec("q", "k")).(*SubmitResult); !ok {
		t.Fatal("anonymous")
	}
	if _, ok := runAt(t, f, 0, t0+8, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("q", "k")}, Identity: "x"}).(*SubmitResult); !ok {
		t.Fatal("no max_live_jobs")
	}
}
