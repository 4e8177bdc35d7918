package fsm

import (
	"bytes"
	"fmt"
	"testing"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// FuzzSchedules applies random sequences of schedule commands (put with
// any overlap, pause, resume, delete, trigger, materialisations from the
// current or a stale state, and the queue's fetch, complete, fail, cancel
// and prune on their jobs) and checks after every step: an occurrence
// (schedule, window) is at most one job; a schedule's mark never goes back
// while it lives; a paused or deleted schedule makes no scheduled job; the
// incremental schedule indexes equal the ones rebuilt from the records and
// jobs; and at the end a snapshot round trip keeps the digest (G8).
func FuzzSchedules(f *testing.F) {
	f.Add([]byte{0, 0, 1, 5, 4, 0, 2, 9, 4, 0, 3, 9, 6, 0, 0, 3, 7, 0, 0, 2, 4, 0, 3, 9})
	f.Add([]byte{0, 1, 3, 1, 4, 1, 5, 8, 1, 1, 0, 0, 4, 1, 4, 2, 2, 1, 0, 0, 4, 1, 4, 9, 5, 1, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 2, 2, 3, 4, 2, 2, 7, 6, 0, 0, 1, 8, 2, 0, 0, 3, 2, 0, 9}, 5))
	f.Fuzz(func(t *testing.T, data []byte) {
		x := New()
		cal := t0
		names := []string{"a", "b", "c"}
		lastMark := map[string]int64{}
		for len(data) >= 4 {
			op, a, b, c := data[0]%10, data[1], data[2], data[3]
			data = data[4:]
			cal += int64(c%16) * 20_000
			name := names[int(a)%len(names)]
			sc, exists := x.Schedule(name)
			var body any
			switch op {
			case 0:
				body = &fsmv1.PutSchedule{Name: name, Spec: sspec(fsmv1.ScheduleOverlap(b%3+1), func(s *fsmv1.ScheduleSpec) {
					s.CompleteWithinMs = int64(c%4) * minute
					s.Job.VisibilityTimeoutMs = int64(b%3+1) * 30_000
				}), Identity: []string{"", "p", "q"}[c%3], MaxSchedules: uint32(b % 3)}
			case 1:
				body = &fsmv1.PauseSchedule{Name: name, Paused: b%2 == 0}
			case 2:
				body = &fsmv1.DeleteSchedule{Name: name}
			case 3:
				body = &fsmv1.TriggerSchedule{Name: name, Window: fmt.Sprintf("t%d", cal%(int64(b%3+1)*60_000)), AtMs: cal}
			case 4, 5:
				if !exists {
					body = &fsmv1.Tick{}
					break
				}
				// What the leader would compute: whole minutes in (from,
				// through]; sometimes from a stale view (an older mark or
				// revision) or repeated.
				from := sc.Mark
				if op == 5 && b%2 == 0 {
					from -= minute
				}
				rev := sc.Revision
				if op == 5 && b%3 == 0 {
					rev--
				}
				through := max(from, cal-int64(b%3)*minute)
				it := &fsmv1.ScheduleMaterialisation{Name: name, Revision: rev, FromMs: from, ThroughMs: through,
					NextDueMs: (through/minute + 1) * minute}
				for m := from/minute + 1; m*minute <= through; m++ {
					it.Create = append(it.Create, &fsmv1.ScheduleOccurrence{AtMs: m * minute, Window: fmt.Sprintf("m%d", m)})
				}
				if c%5 == 0 && len(it.Create) > 1 {
					k := it.Create[0]
					it.Create = it.Create[1:]
					it.Skipped = []*fsmv1.ScheduleSkip{{Reason: fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_HORIZON,
						FirstMs: k.GetAtMs(), LastMs: k.GetAtMs(), Count: 1, FirstWindow: k.GetWindow(), LastWindow: k.GetWindow()}}
				}
				body = &fsmv1.MaterialiseSchedules{Items: []*fsmv1.ScheduleMaterialisation{it}}
			case 6:
				body = &fsmv1.FetchJobs{Queues: []string{"reports"}, Max: uint32(b%4 + 1), WorkerId: "w", Identity: "w"}
			case 7, 8:
				var refs []uint64
				x.st.qjobs.Ascend(func(j *QueueJob) bool {
					if j.State == JobRunning {
						refs = append(refs, j.ID)
					}
					return len(refs) < 3
				})
				if len(refs) == 0 {
					body = &fsmv1.Tick{}
					break
				}
				id := refs[int(b)%len(refs)]
				j, _ := x.QueueJob(id)
				if op == 7 {
					body = &fsmv1.CompleteJobs{Completions: []*fsmv1.JobCompletion{{JobId: id, Attempt: j.Attempts}}, WorkerId: "w", Identity: "w"}
				} else {
					body = &fsmv1.CancelJobs{JobIds: []uint64{id}}
				}
			default:
				body = &fsmv1.Prune{JobsCutoffMs: cal - int64(c%8)*minute, MaxFinishedJobs: uint64(b % 6)}
			}
			before, _ := x.Schedule(name)
			jobsBefore := x.QueueJobCount()
			out := runAt(t, x, 0, cal, body)
			after, ok := x.Schedule(name)
			if mr, isMat := out.(*MaterialiseResult); isMat && ok && exists && (before.Paused || before.Deleted) {
				if !mr.Items[0].Stale || x.QueueJobCount() != jobsBefore {
					t.Fatalf("a paused or deleted schedule materialised: %+v", mr.Items[0])
				}
			}
			if ok && !after.Deleted {
				if after.Mark < lastMark[name] && after.CreatedAt != cal {
					t.Fatalf("%s: mark went back from %d to %d", name, lastMark[name], after.Mark)
				}
				lastMark[name] = after.Mark
			}
			if ok && after.Deleted {
				delete(lastMark, name)
			}
			if !ok {
				delete(lastMark, name)
			}
			// One job per (schedule, window) among retained jobs.
			seen := map[string]uint64{}
			x.st.qjobs.Ascend(func(j *QueueJob) bool {
				if j.UniqueKey == "" {
					return true
				}
				if id, dup := seen[j.Queue+"\x00"+j.UniqueKey]; dup {
					t.Fatalf("jobs %d and %d share the occurrence key %q", id, j.ID, j.UniqueKey)
				}
				seen[j.Queue+"\x00"+j.UniqueKey] = j.ID
				return true
			})
			if d := x.st.scheduleIndexDiff(); d != "" {
				t.Fatalf("after %T: incremental schedule index differs from a rebuild: %s", body, d)
			}
		}
		if g := restored(t, x); x.Digest() != g.Digest() {
			t.Fatal("digest differs after a snapshot round trip")
		}
	})
}

// scheduleIndexDiff compares the incremental schedule index with one
// rebuilt from the schedules and jobs ("" when equal).
func (s *state) scheduleIndexDiff() string {
	fresh := &state{schedules: s.schedules, qjobs: s.qjobs}
	fresh.rebuildScheduleIndex()
	a, b := s.sidx, fresh.sidx
	for _, c := range []struct{ name, x, y string }{
		{"due", dumpTree(a.due), dumpTree(b.due)},
		{"tomb", dumpTree(a.tomb), dumpTree(b.tomb)},
		{"open", dumpTree(a.open), dumpTree(b.open)},
		{"byCreator", fmt.Sprint(a.byCreator), fmt.Sprint(b.byCreator)},
	} {
		if c.x != c.y {
			return fmt.Sprintf("%s: %s vs rebuilt %s", c.name, c.x, c.y)
		}
	}
	return ""
}
