package fsm

import (
	"bytes"
	"cmp"
	"fmt"
	"iter"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/btree"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// FuzzCommands applies random command sequences and checks the guarantees
// after every step: generations only grow and are never reused (G1), at most
// one live holder (G2), accepted commits carry the current generation and
// never go down per resource (G4), a window completes at most once (G5), and
// a snapshot round trip preserves the digest (G8). For the job queue:
// attempt tokens only grow, a job has at most one live attempt, no job is
// handed out before its run_at, a job reaches at most one final state (only
// an explicit Retry revives a cancelled or dead job; a succeeded job never
// changes), due and lapsed work is applied at every command, a job-attempt
// fence accepts only the live attempt, and the incremental indexes equal
// the ones rebuilt from the jobs.
func FuzzCommands(f *testing.F) {
	f.Add([]byte{0, 0, 0, 10, 1, 0, 0, 10, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 1, 1, 200, 6, 1, 1, 3, 2, 1, 1, 50}, 8))
	// Queue: submit, fetch, heartbeat, complete, fail, cancel, retry, fence, prune.
	f.Add([]byte{8, 3, 7, 5, 9, 1, 2, 1, 10, 1, 0, 3, 11, 1, 0, 2, 8, 2, 1, 60, 9, 0, 3, 63, 12, 2, 0, 1, 13, 3, 0, 2, 14, 3, 0, 2, 15, 1, 0, 3, 15, 0, 2, 200})
	f.Add(bytes.Repeat([]byte{8, 5, 3, 9, 9, 2, 3, 40, 3, 0, 0, 63, 12, 1, 1, 5, 9, 1, 2, 30, 15, 2, 0, 7, 14, 1, 0, 9}, 6))
	f.Fuzz(func(t *testing.T, data []byte) {
		x := New()
		var now, cal int64
		cal = t0
		names := []string{"l0", "l1"}
		owners := []string{"a", "b", "c"}
		maxGen := map[string]uint64{}
		resMax := map[string]uint64{}
		completed := map[string]Window{}
		q := newQueueModel()
		for s := range leaseFuzzSteps(data, &now, &cal) {
			op, a, b, c := s.op, s.a, s.b, s.c
			name, owner := names[int(a)%len(names)], owners[int(b)%len(owners)]
			before, _, existed := x.Lease(name)
			gen := before.Generation
			if c&0x80 != 0 && gen > 0 {
				gen-- // sometimes a stale token
			}
			wkey := fmt.Sprintf("w%d", b%2)
			var body any
			switch op {
			case 0:
				body = acq(name, owner, int64(c%50)+1, fmt.Sprintf("r%d", a%3))
			case 1:
				body = &fsmv1.Renew{Name: name, Owner: owner, Generation: gen, TtlMs: int64(c % 40)}
			case 2:
				body = &fsmv1.Release{Name: name, Owner: owner, Generation: gen}
			case 3:
				body = &fsmv1.Tick{}
			case 4:
				body = &fsmv1.ClaimWindow{Job: "j", Window: wkey, LeaseName: name, Owner: owner, Generation: gen}
			case 5:
				body = &fsmv1.CompleteWindow{Job: "j", Window: wkey, LeaseName: name, Owner: owner, Generation: gen, Result: []byte{c}}
			case 6:
				body = &fsmv1.FencedCommit{Resource: "r-" + name, LeaseName: name, Generation: gen, IdempotencyKey: fmt.Sprintf("k%d", c%4)}
			case 7:
				body = &fsmv1.Prune{CutoffMs: now - int64(c)}
			default:
				body = q.command(x, op, a, b, c, cal)
			}
			cmdNow := now - int64(a%8) // stamps may arrive slightly out of order
			cmdCal := cal - int64(b%8)*5
			clockBefore := x.LeaseTime()
			jobsBefore := q.snapshot(x)
			out := runAt(t, x, cmdNow, cmdCal, body)
			at := max(clockBefore, cmdNow)
			switch r := out.(type) {
			case *AcquireResult:
				if r.Acquired && (!existed || r.Lease.Generation != before.Generation) {
					if existed && before.Live(at) {
						t.Fatalf("G2: %s granted to %s while %s held gen %d", name, owner, before.Owner, before.Generation)
					}
					if r.Lease.Generation <= maxGen[name] {
						t.Fatalf("G1: %s generation %d after %d", name, r.Lease.Generation, maxGen[name])
					}
					maxGen[name] = r.Lease.Generation
				}
			case *CommitResult:
				fc := body.(*fsmv1.FencedCommit)
				if !r.Duplicate && fc.JobId == 0 {
					if fc.Generation != before.Generation || !before.Live(at) {
						t.Fatalf("G4: commit with gen %d accepted, lease %+v at %d", fc.Generation, before, at)
					}
				}
				if !r.Duplicate && fc.JobId != 0 {
					j, ok := jobsBefore[fc.JobId]
					if !ok || j.State != JobRunning || uint64(j.Attempts) != fc.Generation {
						// The command's own advance may have lapsed it, which
						// would have refused it: so it must have been live.
						t.Fatalf("job fence: attempt %d of job %d accepted, job was %+v", fc.Generation, fc.JobId, j)
					}
					if a, _ := j.Current(); a.Deadline <= max(x.CalendarTime(), cmdCal) {
						t.Fatalf("job fence: lapsed attempt accepted (deadline %d, calendar %d)", a.Deadline, x.CalendarTime())
					}
				}
				if !r.Duplicate {
					if fc.Generation < resMax[fc.Resource] {
						t.Fatalf("G4: resource %s went down to %d from %d", fc.Resource, fc.Generation, resMax[fc.Resource])
					}
					resMax[fc.Resource] = fc.Generation
				}
			case *WindowResult:
				if prev, ok := completed[wkey]; ok && (prev.CompletedAt != r.Window.CompletedAt || !bytes.Equal(prev.Result, r.Window.Result)) {
					t.Fatalf("G5: window %s completed twice: %+v then %+v", wkey, prev, r.Window)
				}
				completed[wkey] = r.Window
			case *PruneResult:
				for k, w := range completed {
					if w.CompletedAt < fcutoff(body) {
						delete(completed, k)
					}
				}
			case *FetchResult:
				for _, j := range r.Jobs {
					a, ok := j.Current()
					if !ok || j.RunAt > x.CalendarTime() || a.StartedAt != x.CalendarTime() {
						t.Fatalf("job %d handed out before its run_at %d (calendar %d): %+v", j.ID, j.RunAt, x.CalendarTime(), a)
					}
				}
			}
			q.check(t, x, jobsBefore, body, out)
		}
		if d := x.st.queueIndexDiff(); d != "" {
			t.Fatalf("incremental queue index differs from a rebuild: %s", d)
		}
		if y := restored(t, x); x.Digest() != y.Digest() {
			t.Fatal("G8: digest differs after snapshot round trip")
		}
	})
}

// fuzzStep is one step of a fuzz input: an op and three operands.
type fuzzStep struct{ op, a, b, c byte }

// leaseFuzzSteps cuts a fuzz input of FuzzCommands or FuzzEvents into steps
// of four bytes, the op taken mod 16 (a shorter tail is dropped). Before
// each step the clock *now advances c%64 ms and the calendar *cal seven
// times as much.
func leaseFuzzSteps(data []byte, now, cal *int64) iter.Seq[fuzzStep] {
	return func(yield func(fuzzStep) bool) {
		for ; len(data) >= 4; data = data[4:] {
			s := fuzzStep{data[0] % 16, data[1], data[2], data[3]}
			*now += int64(s.c % 64)
			*cal += int64(s.c%64) * 7
			if !yield(s) {
				return
			}
		}
	}
}

func fcutoff(body any) int64 { return body.(*fsmv1.Prune).CutoffMs }

// queueModel drives the queue part of FuzzCommands.
type queueModel struct {
	maxAttempt map[uint64]uint32 // highest attempt seen per job
	succeeded  map[uint64]QueueJob
}

func newQueueModel() *queueModel {
	return &queueModel{maxAttempt: map[uint64]uint32{}, succeeded: map[uint64]QueueJob{}}
}

// command builds a queue command from the fuzz bytes.
func (m *queueModel) command(x *FSM, op, a, b, c byte, cal int64) any {
	queues := []string{"q0", "q1"}
	workers := []string{"w0", "w1"}
	worker := workers[int(b)%2]
	id := uint64(a%8) + 1
	attempt := uint32(0)
	if j, ok := x.QueueJob(id); ok {
		attempt = j.Attempts
		if c&0x40 != 0 && attempt > 0 {
			attempt-- // sometimes a stale token
		}
	}
	switch op {
	case 8:
		var specs []*fsmv1.QueueJobSpec
		for i := 0; i <= int(a%3); i++ {
			s := jspec(queues[(int(b)+i)%2], "k", attempts(int32(c%3)+1), vis(int64(c%5)*20+10),
				backoff(int64(b%4)*10, 40, 2000), prio(int32(b%3)))
			if c&1 != 0 {
				s.RunAtMs = cal + int64(c%32)*10 - 40
			}
			if c&2 != 0 {
				s.UniqueKey = fmt.Sprintf("u%d", (int(a)+i)%3)
			}
			if c%23 == 0 {
				s.Kind = "" // a bad spec refuses the batch
			}
			if c%7 == 3 {
				s.MaxRunMs = int64(b%4)*20 + 5 // max_run (queue_maxrun.go)
			}
			specs = append(specs, s)
		}
		return &fsmv1.SubmitJobs{Jobs: specs, Identity: []string{"", "p", "q"}[a%3], MaxLiveJobs: uint32(b%4) * 3}
	case 9:
		qs := queues[:1+int(a%2)]
		if b&4 != 0 {
			qs = []string{queues[1], queues[0]}
		}
		return &fsmv1.FetchJobs{Queues: qs, Max: uint32(c%4) + 1, WorkerId: worker, Identity: "i"}
	case 10:
		return &fsmv1.HeartbeatJobs{Attempts: []*fsmv1.JobAttemptRef{{JobId: id, Attempt: attempt}}, WorkerId: worker, Identity: "i"}
	case 11:
		return &fsmv1.CompleteJobs{Completions: []*fsmv1.JobCompletion{{JobId: id, Attempt: attempt, Result: []byte{c}}}, WorkerId: worker, Identity: "i"}
	case 12:
		return &fsmv1.FailJobs{Failures: []*fsmv1.JobFailure{{JobId: id, Attempt: attempt, Error: "e", Retryable: c&1 == 0, JitterPpm: uint32(c) * 3000}},
			WorkerId: worker, Identity: "i"}
	case 13:
		return &fsmv1.CancelJobs{JobIds: []uint64{id}}
	case 14:
		return &fsmv1.RetryJobs{JobIds: []uint64{id, uint64(b%8) + 1}}
	default:
		if b%3 == 1 && c%4 == 0 && a&32 != 0 {
			return &fsmv1.PauseQueue{Queue: queues[a%2], Paused: c&8 != 0, Identity: "ops"}
		}
		if b%3 == 1 && c%4 == 0 { // limits (queue_limits.go): they never let a fetch break an invariant
			sp := &fsmv1.QueueLimitsSpec{Concurrency: uint32(a % 3), MaxRunMs: int64(c%3) * 15}
			if a&8 != 0 {
				sp.Kinds = []*fsmv1.KindLimit{{Kind: "k", Concurrency: uint32(b%2) + 1}}
			}
			if a&16 != 0 {
				sp.RateMilli, sp.Burst = uint32(c%5+1)*10_000, uint32(b%3)+1
			}
			if a%5 == 0 {
				sp = nil
			}
			return &fsmv1.SetQueueLimits{Queue: queues[int(b)%2], Limits: sp}
		}
		if b%3 == 0 {
			return &fsmv1.Prune{JobsCutoffMs: cal - int64(c)*4, MaxFinishedJobs: uint64(a % 6)}
		}
		return &fsmv1.FencedCommit{Resource: fmt.Sprintf("job-res-%d", id), JobId: id, Generation: uint64(attempt),
			IdempotencyKey: fmt.Sprintf("jk%d", c%3)}
	}
}

// snapshot copies every queue job (the fuzz keeps only a few dozen).
func (m *queueModel) snapshot(x *FSM) map[uint64]QueueJob {
	js, _ := x.ListQueueJobs(JobFilter{}, 0, 1<<30)
	out := make(map[uint64]QueueJob, len(js))
	for _, j := range js {
		out[j.ID] = j
	}
	return out
}

// check asserts the queue's invariants after a command.
func (m *queueModel) check(t *testing.T, x *FSM, before map[uint64]QueueJob, body, out any) {
	t.Helper()
	cal := x.CalendarTime()
	revived := map[uint64]bool{}
	if r, ok := body.(*fsmv1.RetryJobs); ok {
		if res, ok := out.(JobResults); ok {
			for i, id := range r.JobIds {
				if o, ok := res[i].(*JobOutcome); ok && !o.Duplicate {
					revived[id] = true
				}
			}
		}
	}
	after := m.snapshot(x)
	counts := map[string]*[numJobStates]uint64{}
	for id, j := range after {
		if j.Attempts < m.maxAttempt[id] {
			t.Fatalf("job %d: attempt token went down from %d to %d", id, m.maxAttempt[id], j.Attempts)
		}
		m.maxAttempt[id] = j.Attempts
		live := 0
		for i, a := range j.Log {
			if a.Outcome == AttemptRunning {
				live++
			}
			if i > 0 && a.Number != j.Log[i-1].Number+1 {
				t.Fatalf("job %d: attempt numbers %d then %d", id, j.Log[i-1].Number, a.Number)
			}
		}
		if n := len(j.Log); n > 0 && j.Log[n-1].Number != j.Attempts {
			t.Fatalf("job %d: last attempt %d, token %d", id, j.Log[n-1].Number, j.Attempts)
		}
		cur, running := j.Current()
		switch {
		case live > 1:
			t.Fatalf("job %d: %d live attempts", id, live)
		case (live == 1) != (j.State == JobRunning) || (running && cur.Outcome != AttemptRunning):
			t.Fatalf("job %d in %s with %d live attempts", id, j.State, live)
		case running && cur.Deadline <= cal:
			t.Fatalf("job %d: claim past its deadline %d still live at %d", id, cur.Deadline, cal)
		case (j.State == JobScheduled || j.State == JobRetryable) && j.RunAt <= cal:
			t.Fatalf("job %d: %s although due (%d <= %d)", id, j.State, j.RunAt, cal)
		case j.State.Final() != (j.FinishedAt != 0):
			t.Fatalf("job %d: %s finished at %d", id, j.State, j.FinishedAt)
		}
		if prev, ok := before[id]; ok && prev.State.Final() && !j.State.Final() && !revived[id] {
			t.Fatalf("job %d left final state %s for %s without a retry", id, prev.State, j.State)
		}
		if s, ok := m.succeeded[id]; ok && !reflect.DeepEqual(s, j) {
			t.Fatalf("succeeded job %d changed: %+v -> %+v", id, s, j)
		}
		if j.State == JobSucceeded {
			m.succeeded[id] = j
		}
		if counts[j.Queue] == nil {
			counts[j.Queue] = &[numJobStates]uint64{}
		}
		counts[j.Queue][j.State]++
	}
	for id := range m.succeeded {
		if _, ok := after[id]; !ok {
			delete(m.succeeded, id) // pruned
		}
	}
	for _, st := range x.QueueStats("", cal) {
		c := counts[st.Queue]
		if c == nil {
			c = &[numJobStates]uint64{}
		}
		got := [numJobStates]uint64{0, st.Scheduled, st.Available, st.Running, st.Retryable, st.Succeeded, st.Cancelled, st.Dead}
		if got != *c {
			t.Fatalf("stats of %s: %v, counted %v", st.Queue, got, *c)
		}
	}
}

// queueIndexDiff compares the incremental queue index with one rebuilt
// from the jobs ("" when equal).
func (s *state) queueIndexDiff() string {
	fresh := &state{qjobs: s.qjobs, qops: s.qops}
	fresh.rebuildQueueIndex()
	a, b := s.qidx, fresh.qidx
	for _, c := range []struct {
		name string
		x, y string
	}{
		{"due", dumpTree(a.due), dumpTree(b.due)},
		{"running", dumpTree(a.running), dumpTree(b.running)},
		{"avail", dumpTree(a.avail), dumpTree(b.avail)},
		{"deliver", dumpTree(a.deliver), dumpTree(b.deliver)},
		{"finOK", dumpTree(a.finOK), dumpTree(b.finOK)},
		{"finOther", dumpTree(a.finOther), dumpTree(b.finOther)},
		{"byQueue", dumpTree(a.byQueue), dumpTree(b.byQueue)},
		{"states", a.states.dump(), b.states.dump()},
		{"byKind", dumpTree(a.byKind), dumpTree(b.byKind)},
		{"byLabel", dumpTree(a.byLabel), dumpTree(b.byLabel)},
		{"unique", fmt.Sprint(a.unique), fmt.Sprint(b.unique)},
		{"live", fmt.Sprint(a.live), fmt.Sprint(b.live)},
		{"runningKind", fmt.Sprint(a.runningKind), fmt.Sprint(b.runningKind)},
	} {
		if c.x != c.y {
			return fmt.Sprintf("%s: %s vs rebuilt %s", c.name, c.x, c.y)
		}
	}
	for q, c := range b.stats {
		if a.stats[q] == nil || a.stats[q].states != c.states {
			return fmt.Sprintf("counts of %s", q)
		}
	}
	for q, c := range a.stats {
		if c.states != [numJobStates]uint64{} && b.stats[q] == nil {
			return fmt.Sprintf("counts of %s kept after its last job", q)
		}
	}
	return ""
}

// dump lists the ids by state, then by (queue, state) in order; an empty
// tree kept in the map shows as one.
func (s *stateIDs) dump() string {
	var b strings.Builder
	for st, t := range s.byState {
		fmt.Fprintf(&b, "%d:%s ", st, dumpTree(t))
	}
	refs := slices.SortedFunc(maps.Keys(s.byQueueState), func(x, y queueStateRef) int {
		return cmp.Or(cmp.Compare(x.queue, y.queue), cmp.Compare(x.state, y.state))
	})
	for _, r := range refs {
		fmt.Fprintf(&b, "%s/%d:%s ", r.queue, r.state, dumpTree(s.byQueueState[r]))
	}
	return b.String()
}

func dumpTree[T any](t *btree.BTreeG[T]) string {
	var out []T
	t.Ascend(func(v T) bool {
		out = append(out, v)
		return true
	})
	return fmt.Sprint(out)
}
