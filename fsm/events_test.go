package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// runEvents applies body as one encoded entry and returns its result and
// events, as the node's apply path sees them.
func runEvents(t testing.TB, f *FSM, now, cal int64, body any) (any, []Event) {
	t.Helper()
	data, err := proto.Marshal(EnvelopeAt(now, cal, body))
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	calls := 0
	out := f.ApplyBatchTo([][]byte{data}, func(i int, e []Event) {
		calls++
		evs = slices.Clone(e) // e is reused for the next entry
	})
	if calls != 1 {
		t.Fatalf("sink called %d times for one entry", calls)
	}
	return out[0], evs
}

// brief renders events as "family kind key" lines (the family and kind
// without their enum prefixes).
func brief(evs []Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%s %s %s;", strings.TrimPrefix(e.Family.String(), "WATCH_FAMILY_"),
			strings.TrimPrefix(e.Kind.String(), "WATCH_EVENT_KIND_"), e.Key)
	}
	return b.String()
}

func TestEventsOfLeases(t *testing.T) {
	f := New()
	steps := []struct {
		now  int64
		body any
		want string
	}{
		{1000, acq("a", "o1", 100, "r1"), "LEASE PUT a;"},
		{1010, acq("a", "o2", 100, "r2"), ""}, // held: nothing changes
		{1020, &fsmv1.Renew{Name: "a", Owner: "o1", Generation: 1, TtlMs: 100}, "LEASE PUT a;"},
		{1030, &fsmv1.Renew{Name: "a", Owner: "o2", Generation: 1}, ""}, // refused
		{1040, &fsmv1.Release{Name: "a", Owner: "o1", Generation: 1}, "LEASE PUT a;"},
		{1050, acq("a", "o2", 100, "r3"), "LEASE PUT a;"},
		{1060, acq("b", "o2", 50, "r4"), "LEASE PUT b;"},
		// b's deadline (1110) passes with a tick: expiry is noticed by the
		// first command whose stamp reaches it.
		{1109, &fsmv1.Tick{}, ""},
		{1110, &fsmv1.Tick{}, "LEASE EXPIRE b;"},
		{1120, &fsmv1.Tick{}, ""},
		// a (deadline 1150) and a new grant of it in one command: the
		// expiry first, then the takeover.
		{1200, acq("a", "o3", 100, "r5"), "LEASE EXPIRE a;LEASE PUT a;"},
		// A release with a handoff: the release and the waiter's grant.
		{1210, &fsmv1.Release{Name: "a", Owner: "o3", Generation: 3, Handoff: acq("a", "o4", 100, "r6")}, "LEASE PUT a;LEASE PUT a;"},
		// A released lease never expires.
		{1215, &fsmv1.Release{Name: "a", Owner: "o4", Generation: 4}, "LEASE PUT a;"},
		{2000, &fsmv1.Tick{}, ""},
	}
	for i, s := range steps {
		_, evs := runEvents(t, f, s.now, 0, s.body)
		if got := brief(evs); got != s.want {
			t.Fatalf("step %d (%T at %d): events %q, want %q", i, s.body, s.now, got, s.want)
		}
		for _, e := range evs {
			if e.At != s.now {
				t.Fatalf("step %d: event at %d, command at %d", i, e.At, s.now)
			}
		}
	}
	// The records are the state's after each change.
	_, evs := runEvents(t, f, 2010, 0, acq("a", "o5", 100, "r7"))
	l := evs[0].Record.(*Lease)
	if cur, _, _ := f.Lease("a"); !reflect.DeepEqual(*l, cur) || l.Generation != 5 {
		t.Fatalf("event record %+v, state %+v", *l, cur)
	}
}

func TestEventsOfWindowsFencesJobs(t *testing.T) {
	f := New()
	runEvents(t, f, 1000, 0, acq("close", "o", 1000, "r"))
	put := &fsmv1.PutSchedule{Name: "close", Spec: sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID), Identity: "alice"}
	steps := []struct {
		now  int64
		body any
		want string
	}{
		{1010, &fsmv1.ClaimWindow{Job: "close", Window: "d1", LeaseName: "close", Owner: "o", Generation: 1}, "WINDOW PUT close/d1;"},
		{1020, &fsmv1.ClaimWindow{Job: "close", Window: "d1", LeaseName: "close", Owner: "o", Generation: 1}, ""}, // same holder again
		{1030, &fsmv1.CompleteWindow{Job: "close", Window: "d1", LeaseName: "close", Owner: "o", Generation: 1, Release: true},
			"WINDOW PUT close/d1;LEASE PUT close;"},
		{1040, &fsmv1.FencedCommit{Resource: "ledger", LeaseName: "close", Generation: 1}, ""}, // released: refused
		{1050, put, "SCHEDULE PUT close;"},
		{1060, put, ""}, // same spec
		{1065, &fsmv1.DeleteSchedule{Name: "close", Identity: "alice"}, "SCHEDULE PUT close;"}, // the tombstone
		{1070, acq("close", "o", 1000, "r2"), "LEASE PUT close;"},
		{1080, &fsmv1.FencedCommit{Resource: "ledger", LeaseName: "close", Generation: 2, IdempotencyKey: "k"}, "RESOURCE PUT ledger;"},
		{1090, &fsmv1.FencedCommit{Resource: "ledger", LeaseName: "close", Generation: 2, IdempotencyKey: "k"}, ""}, // duplicate
		{5000, &fsmv1.Prune{CutoffMs: 2000}, "LEASE EXPIRE close;WINDOW DELETE close/d1;"},
		{5010, &fsmv1.Prune{JobsCutoffMs: 2000}, "SCHEDULE DELETE close;"}, // the tombstone's retention
	}
	for i, s := range steps {
		_, evs := runEvents(t, f, s.now, 0, s.body)
		if got := brief(evs); got != s.want {
			t.Fatalf("step %d (%T): events %q, want %q", i, s.body, got, s.want)
		}
	}
}

func TestEventsOfTheQueue(t *testing.T) {
	f := New()
	cal := t0
	_, evs := runEvents(t, f, 1, cal, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{
		jspec("mail", "send", vis(100)), jspec("mail", "send", func(s *fsmv1.QueueJobSpec) { s.RunAtMs = t0 + 500 }),
	}})
	if got := brief(evs); got != "QUEUE_JOB PUT mail/1;QUEUE_JOB PUT mail/2;" {
		t.Fatalf("submit: %q", got)
	}
	_, evs = runEvents(t, f, 2, cal+10, &fsmv1.FetchJobs{Queues: []string{"mail"}, Max: 5, WorkerId: "w"})
	if got := brief(evs); got != "QUEUE_JOB PUT mail/1;" {
		t.Fatalf("fetch: %q", got)
	}
	if j := evs[0].Record.(*QueueJob); j.State != JobRunning || evs[0].Cal != cal+10 {
		t.Fatalf("fetched job %+v at %d", j, evs[0].Cal)
	}
	// Calendar time passes job 1's deadline and job 2's run_at: the lapse
	// and the promotion come before the command's own changes.
	_, evs = runEvents(t, f, 3, cal+600, &fsmv1.CancelJobs{JobIds: []uint64{2}})
	if got := brief(evs); got != "QUEUE_JOB PUT mail/1;QUEUE_JOB PUT mail/2;QUEUE_JOB PUT mail/2;" {
		t.Fatalf("advance + cancel: %q", got)
	}
	states := []JobState{evs[0].Record.(*QueueJob).State, evs[1].Record.(*QueueJob).State, evs[2].Record.(*QueueJob).State}
	if !reflect.DeepEqual(states, []JobState{JobAvailable, JobAvailable, JobCancelled}) {
		t.Fatalf("states %v", states)
	}
	_, evs = runEvents(t, f, 4, cal+700, &fsmv1.Prune{JobsCutoffMs: cal + 700})
	if got := brief(evs); got != "QUEUE_JOB DELETE mail/2;" {
		t.Fatalf("prune: %q", got)
	}
}

func TestEventsOfABatchEntry(t *testing.T) {
	f := New()
	b := &fsmv1.Batch{Commands: []*fsmv1.Command{
		EnvelopeAt(100, 0, acq("x", "o", 10, "r")),
		EnvelopeAt(105, 0, acq("y", "o", 10, "r")),
		EnvelopeAt(111, 0, &fsmv1.Tick{}), // x expired at 110
		EnvelopeAt(109, 0, acq("x", "p", 10, "r2")),
	}}
	_, evs := runEvents(t, f, 0, 0, b)
	if got := brief(evs); got != "LEASE PUT x;LEASE PUT y;LEASE EXPIRE x;LEASE PUT x;" {
		t.Fatalf("batch: %q", got)
	}
	if evs[3].At != 111 {
		t.Fatalf("a command stamped before the clock applies at the clock: %d", evs[3].At)
	}
}

// TestEventsOfEntriesInOneCall: the sink sees each entry's events and only
// those, also when the entries come in one call and share the buffer, and
// the buffer holds no record after the call.
func TestEventsOfEntriesInOneCall(t *testing.T) {
	f := New()
	entries := [][]byte{
		entryAt(t, 1, t0, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("mail", "send"), jspec("mail", "send")}}),
		entryAt(t, 2, t0, &fsmv1.Tick{}),
		entryAt(t, 3, t0, &fsmv1.FetchJobs{Queues: []string{"mail"}, Max: 1, WorkerId: "w"}),
		nil, // not a command
		entryAt(t, 4, t0, acq("x", "o", 10, "r")),
	}
	var got []string
	f.ApplyBatchTo(entries, func(i int, evs []Event) { got = append(got, fmt.Sprintf("%d:%s", i, brief(evs))) })
	want := []string{"0:QUEUE_JOB PUT mail/1;QUEUE_JOB PUT mail/2;", "1:", "2:QUEUE_JOB PUT mail/1;", "3:", "4:LEASE PUT x;"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events per entry:\n got %q\nwant %q", got, want)
	}
	for i, e := range f.st.events[:cap(f.st.events)] {
		if e != (Event{}) {
			t.Fatalf("the buffer keeps event %d after the call: %+v", i, e)
		}
	}
}

// Events do not depend on how a replica got its state: one that restored a
// snapshot mid-way emits the same events for the rest of the log as one
// that applied it all, including expiries of leases granted before the
// snapshot.
func TestEventsAfterRestore(t *testing.T) {
	type cmd struct {
		now  int64
		body any
	}
	cmds := []cmd{
		{100, acq("a", "o", 50, "r")}, {110, acq("b", "o", 500, "r")}, {120, acq("c", "o", 20, "r")},
		{130, &fsmv1.Tick{}}, // c expires at 140: not yet
		{145, &fsmv1.Tick{}}, // c expires here
		// snapshot here
		{151, &fsmv1.Tick{}}, // a (150)
		{160, &fsmv1.Renew{Name: "b", Owner: "o", Generation: 1, TtlMs: 10}},
		{171, acq("b", "p", 10, "r")},
		{200, &fsmv1.Tick{}},
	}
	full, part := New(), New()
	var want, got []string
	for i, c := range cmds {
		_, evs := runEvents(t, full, c.now, 0, c.body)
		if i >= 5 {
			want = append(want, brief(evs))
		}
		if i < 5 {
			runEvents(t, part, c.now, 0, c.body)
		}
		if i == 4 {
			part = restored(t, part)
		}
		if i >= 5 {
			_, evs := runEvents(t, part, c.now, 0, c.body)
			got = append(got, brief(evs))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after restore: %q\nfull log:      %q", got, want)
	}
	if strings.Join(want, "") != "LEASE EXPIRE a;LEASE PUT b;LEASE EXPIRE b;LEASE PUT b;LEASE EXPIRE b;" {
		t.Fatalf("events %q", want)
	}
}

func TestViewRecords(t *testing.T) {
	f := New()
	for _, n := range []string{"svc/a", "svc/b", "svcx", "other"} {
		runEvents(t, f, 100, t0, acq(n, "o", 1000, "r"))
	}
	runEvents(t, f, 100, t0, &fsmv1.ClaimWindow{Job: "svc/a", Window: "w1", LeaseName: "svc/a", Owner: "o", Generation: 1})
	runEvents(t, f, 100, t0, &fsmv1.ClaimWindow{Job: "svc", Window: "w2", LeaseName: "svc/a", Owner: "o", Generation: 1})
	runEvents(t, f, 100, t0, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("svc", "k"), jspec("mail", "k")}})
	var at int64
	v := f.ViewWith(func() { at = f.st.leaseTime })
	runEvents(t, f, 200, t0, acq("svc/c", "o", 1000, "r")) // after the view: not in it
	var keys []string
	v.Records("svc/", nil, func(e Event) bool {
		if e.Kind != EventExisting || e.At != at {
			t.Fatalf("event %+v", e)
		}
		keys = append(keys, fmt.Sprintf("%s:%s", strings.TrimPrefix(e.Family.String(), "WATCH_FAMILY_"), e.Key))
		return true
	})
	want := []string{"LEASE:svc/a", "LEASE:svc/b", "WINDOW:svc/w2", "WINDOW:svc/a/w1", "QUEUE_JOB:svc/1"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("records %v, want %v", keys, want)
	}
	n := 0
	v.Records("", func(fm Family) bool { return fm == FamilyLease }, func(Event) bool { n++; return n < 2 })
	if n != 2 {
		t.Fatalf("stopping early: %d calls", n)
	}
}

// FuzzEvents applies random commands of every family and checks that the
// events say everything: a map built only from the events (PUT and EXPIRE
// set the record, DELETE removes it) equals the state, family by family,
// after every command; every lease whose deadline the clock reached has had
// its EXPIRE event; and EXPIRE comes only for such a lease.
func FuzzEvents(f *testing.F) {
	f.Add([]byte{0, 0, 0, 10, 1, 0, 0, 10, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 3, 0, 0, 63})
	f.Add(bytes.Repeat([]byte{0, 1, 1, 200, 6, 1, 1, 3, 2, 1, 1, 50, 3, 0, 0, 60}, 8))
	f.Add([]byte{8, 3, 7, 5, 9, 1, 2, 1, 10, 1, 0, 3, 11, 1, 0, 2, 8, 2, 1, 60, 9, 0, 3, 63, 12, 2, 0, 1, 13, 3, 0, 2, 14, 3, 0, 2, 15, 1, 0, 3, 15, 0, 2, 200})
	f.Fuzz(func(t *testing.T, data []byte) {
		x := New()
		var now int64
		cal := t0
		view := map[string]any{}
		expired := map[string]bool{} // "name/generation" of leases whose EXPIRE was seen
		names := []string{"l0", "l1"}
		owners := []string{"a", "b"}
		q := newQueueModel()
		for s := range leaseFuzzSteps(data, &now, &cal) {
			op, a, b, c := s.op, s.a, s.b, s.c
			name, owner := names[int(a)%len(names)], owners[int(b)%len(owners)]
			cur, _, _ := x.Lease(name)
			gen := cur.Generation
			var body any
			switch op {
			case 0:
				body = acq(name, owner, int64(c%50)+1, fmt.Sprintf("r%d", a%3))
			case 1:
				body = &fsmv1.Renew{Name: name, Owner: cur.Owner, Generation: gen, TtlMs: int64(c % 40)}
			case 2:
				body = &fsmv1.Release{Name: name, Owner: cur.Owner, Generation: gen}
			case 3:
				body = &fsmv1.Tick{}
			case 4:
				body = &fsmv1.ClaimWindow{Job: "j", Window: fmt.Sprintf("w%d", b%2), LeaseName: name, Owner: cur.Owner, Generation: gen}
			case 5:
				body = &fsmv1.CompleteWindow{Job: "j", Window: fmt.Sprintf("w%d", b%2), LeaseName: name, Owner: cur.Owner,
					Generation: gen, Release: c&1 == 0}
			case 6:
				body = &fsmv1.FencedCommit{Resource: "r-" + name, LeaseName: name, Generation: gen}
			case 7:
				switch {
				case c&3 == 0:
					body = &fsmv1.PutSchedule{Name: fmt.Sprintf("s%d", b%2), Spec: sspec(fsmv1.ScheduleOverlap(b%3 + 1))}
				case c&3 == 1:
					body = &fsmv1.DeleteSchedule{Name: fmt.Sprintf("s%d", b%2)}
				default:
					body = &fsmv1.Prune{CutoffMs: now - int64(c), JobsCutoffMs: cal - int64(c)}
				}
			default:
				body = q.command(x, op, a, b, c, cal)
			}
			_, evs := runEvents(t, x, now-int64(a%8), cal-int64(b%8)*5, body)
			for _, e := range evs {
				k := fmt.Sprintf("%d/%s", e.Family, e.Key)
				switch e.Kind {
				case EventPut:
					view[k] = e.Record
				case EventDelete:
					delete(view, k)
				case EventExpire:
					l := e.Record.(*Lease)
					if l.Released || l.ExpiresAt > e.At {
						t.Fatalf("EXPIRE of a live or released lease at %d: %+v", e.At, l)
					}
					id := fmt.Sprintf("%s/%d", l.Name, l.Generation)
					if expired[id] {
						t.Fatalf("EXPIRE twice for %s", id)
					}
					expired[id] = true
				default:
					t.Fatalf("event kind %s", e.Kind)
				}
			}
			// The view equals the state.
			state := map[string]any{}
			x.st.leases.Ascend(func(l *Lease) bool {
				state[fmt.Sprintf("%d/%s", FamilyLease, l.Name)] = l
				if !l.Released && l.ExpiresAt <= x.LeaseTime() && !expired[fmt.Sprintf("%s/%d", l.Name, l.Generation)] {
					t.Fatalf("lease %s generation %d expired at %d (clock %d) without an EXPIRE event", l.Name, l.Generation, l.ExpiresAt, x.LeaseTime())
				}
				return true
			})
			x.st.windows.Ascend(func(w *Window) bool {
				state[fmt.Sprintf("%d/%s", FamilyWindow, WindowEventKey(w.Ledger, w.Window))] = w
				return true
			})
			x.st.resources.Ascend(func(r *Resource) bool {
				state[fmt.Sprintf("%d/%s", FamilyResource, r.Name)] = r
				return true
			})
			x.st.schedules.Ascend(func(sc *Schedule) bool {
				state[fmt.Sprintf("%d/%s", FamilySchedule, sc.Name)] = sc
				return true
			})
			x.st.qjobs.Ascend(func(j *QueueJob) bool {
				state[fmt.Sprintf("%d/%s", FamilyQueueJob, QueueJobEventKey(j.Queue, j.ID))] = j
				return true
			})
			if len(state) != len(view) {
				t.Fatalf("%d records, the events say %d", len(state), len(view))
			}
			for k, rec := range state {
				if !reflect.DeepEqual(view[k], rec) {
					t.Fatalf("%s: state %+v, events say %+v", k, rec, view[k])
				}
			}
		}
	})
}

var keySink string

// TestQueueJobEventKeyOneAllocation: a job's event key, made for every
// change of a job on every node, costs one allocation (the string).
func TestQueueJobEventKeyOneAllocation(t *testing.T) {
	if got := QueueJobEventKey("mail", 123456789); got != "mail/123456789" {
		t.Fatalf("key %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { keySink = QueueJobEventKey("mail", 123456789) }); n != 1 {
		t.Fatalf("%v allocations a key; want 1", n)
	}
}
