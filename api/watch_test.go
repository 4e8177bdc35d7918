package api

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// watchFake serves Node.Watch from a feed of entries the test supplies.
type watchFake struct {
	*fakeNode
	feed chan []fsm.Event // one entry's events each; index = 1, 2, ...
	end  error            // what Watch returns when the feed closes
	from fsm.Position
}

func (w *watchFake) Watch(ctx context.Context, from fsm.Position, initial bool, match func(*fsm.Event) bool,
	send func(fsm.WatchBatch) error) error {
	if from.Index == 0 {
		from = fsm.Position{Index: 1}
	}
	w.from = from
	first := fsm.WatchBatch{Next: from}
	if initial {
		first.View = w.fsm.ViewWith(nil)
	}
	if err := send(first); err != nil {
		return err
	}
	index := uint64(0)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case evs, ok := <-w.feed:
			if !ok {
				return w.end
			}
			index++
			var out []*fsm.LogEvent
			for i, e := range evs {
				if match(&e) {
					out = append(out, &fsm.LogEvent{Position: fsm.Position{Index: index, Offset: uint32(i)}, Event: e})
				}
			}
			if err := send(fsm.WatchBatch{Events: out, Next: fsm.Position{Index: index + 1}}); err != nil {
				return err
			}
		}
	}
}

// sink is a server stream that keeps what is sent, decoded as the client
// would decode it off the wire (the console's in-process stream copies so).
type sink struct {
	localWatchStream
	sent []*coordv1.WatchResponse
}

func newSink() *sink {
	s := &sink{}
	s.localWatchStream = localWatchStream{ctx: context.Background(), send: func(m *coordv1.WatchResponse) error {
		s.sent = append(s.sent, m)
		return nil
	}}
	return s
}

func newWatchFake(t *testing.T) (*watchFake, *watchService) {
	f := &watchFake{fakeNode: newFakeNode(), feed: make(chan []fsm.Event, 16)}
	return f, newWatchService(newTestServer(t, f.fakeNode).withNode(f))
}

// withNode serves n instead (a fake that adds methods to fakeNode).
func (s *Server) withNode(n Node) *Server {
	s.node = n
	return s
}

func leaseEvent(name string, gen uint64) fsm.Event {
	return fsm.Event{Family: fsm.FamilyLease, Kind: fsm.EventPut, Key: name, At: 1000,
		Record: &fsm.Lease{Name: name, Owner: "o", Generation: gen, ExpiresAt: 3000}}
}

func TestWatchValidation(t *testing.T) {
	_, w := newWatchFake(t)
	for _, c := range []struct {
		req   *coordv1.WatchRequest
		field string
	}{
		{&coordv1.WatchRequest{Families: []coordv1.WatchFamily{99}}, "families"},
		{&coordv1.WatchRequest{Families: []coordv1.WatchFamily{0}}, "families"},
		{&coordv1.WatchRequest{Initial: true, StartIndex: 5}, "initial"},
		{&coordv1.WatchRequest{StartPosition: 2}, "start_position"},
		{&coordv1.WatchRequest{Prefix: "a\x00"}, "prefix"},
		{&coordv1.WatchRequest{JobStates: []coordv1.JobState{99}}, "job_states"},
		{&coordv1.WatchRequest{JobStates: []coordv1.JobState{0}}, "job_states"},
		{&coordv1.WatchRequest{JobWorkerId: "w\x01"}, "job_worker_id"},
	} {
		err := w.Watch(c.req, newSink())
		_, info := coorderr.Info(err)
		if status.Code(err) != codes.InvalidArgument || info.GetMetadata()["field"] != c.field {
			t.Fatalf("%v: %v (%v)", c.req, err, info)
		}
	}
}

// Events are filtered by prefix and family, arrive decoded as the client
// sees them (each encoded once, placed in the message as bytes), with the
// position to resume from.
func TestWatchSendsMatchingEvents(t *testing.T) {
	f, w := newWatchFake(t)
	f.feed <- []fsm.Event{leaseEvent("svc/a", 1), leaseEvent("other", 1),
		{Family: fsm.FamilyWindow, Kind: fsm.EventPut, Key: "svc/w", Record: &fsm.Window{Ledger: "svc", Window: "w"}}}
	f.feed <- []fsm.Event{{Family: fsm.FamilyLease, Kind: fsm.EventExpire, Key: "svc/a", At: 3000,
		Record: &fsm.Lease{Name: "svc/a", Owner: "o", Generation: 1, ExpiresAt: 3000}}}
	f.feed <- []fsm.Event{{Family: fsm.FamilyQueueJob, Kind: fsm.EventPut, Key: "svc/7",
		Record: &fsm.QueueJob{ID: 7, Queue: "svc", Kind: "k", State: fsm.JobRunning, Log: []fsm.Attempt{{Number: 1}}}}}
	close(f.feed)
	f.end = errors.New("feed over")
	out := newSink()
	err := w.Watch(&coordv1.WatchRequest{Prefix: "svc/", Families: []coordv1.WatchFamily{fsm.FamilyLease, fsm.FamilyQueueJob}}, out)
	if status.Code(err) != codes.Internal {
		t.Fatalf("end: %v", err)
	}
	if len(out.sent) != 4 || !out.sent[0].GetSynced() || out.sent[0].GetResumeIndex() != 1 || len(out.sent[0].GetEvents()) != 0 {
		t.Fatalf("first message: %v", out.sent)
	}
	var got []string
	for _, m := range out.sent[1:] {
		for _, e := range m.GetEvents() {
			got = append(got, fmt.Sprintf("%d.%d %s %s", e.GetIndex(), e.GetPosition(), e.GetKind(), e.GetKey()))
		}
	}
	want := []string{"1.0 WATCH_EVENT_KIND_PUT svc/a", "2.0 WATCH_EVENT_KIND_EXPIRE svc/a", "3.0 WATCH_EVENT_KIND_PUT svc/7"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	put := out.sent[1].GetEvents()[0]
	if l := put.GetLease(); l.GetGeneration() != 1 || l.GetExpiresInMs() != 2000 || put.GetLeaseTimeMs() != 1000 {
		t.Fatalf("lease event %v", put)
	}
	if l := out.sent[2].GetEvents()[0].GetLease(); !l.GetExpired() || l.GetExpiresInMs() != 0 {
		t.Fatalf("expire event %v", l)
	}
	if j := out.sent[3].GetEvents()[0].GetQueueJob(); j.GetId() != 7 || j.GetAttemptLog()[0].GetToken() != "job:7:1" {
		t.Fatalf("queue job event %v", j)
	}
	if out.sent[3].GetResumeIndex() != 4 {
		t.Fatalf("resume after the last: %v", out.sent[3])
	}
}

func jobEvent(id uint64, st fsm.JobState, workers ...string) fsm.Event {
	j := &fsm.QueueJob{ID: id, Queue: "svc", Kind: "k", State: st}
	for i, w := range workers {
		j.Log = append(j.Log, fsm.Attempt{Number: uint32(i + 1), WorkerID: w})
	}
	return fsm.Event{Family: fsm.FamilyQueueJob, Kind: fsm.EventPut, Key: fmt.Sprintf("svc/%d", id), Record: j}
}

// job_states and job_worker_id narrow queued jobs' events (what the SDK's
// Worker watches: its own cancelled attempts), in the changes and in the
// initial set; other families pass as before.
func TestWatchJobStateAndWorkerFilter(t *testing.T) {
	f, w := newWatchFake(t)
	f.feed <- []fsm.Event{jobEvent(1, fsm.JobRunning, "w1"), jobEvent(1, fsm.JobCancelled, "w1"),
		jobEvent(2, fsm.JobCancelled, "w2"), jobEvent(3, fsm.JobCancelled), jobEvent(4, fsm.JobCancelled, "w1", "w2"),
		jobEvent(5, fsm.JobCancelled, "w2", "w1"), leaseEvent("svc/a", 1)}
	close(f.feed)
	out := newSink()
	req := &coordv1.WatchRequest{Prefix: "svc/", JobStates: []coordv1.JobState{coordv1.JobState_JOB_STATE_CANCELLED}, JobWorkerId: "w1"}
	if err := w.Watch(req, out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range out.sent {
		for _, e := range m.GetEvents() {
			got = append(got, fmt.Sprintf("%s %s", e.GetKey(), e.GetQueueJob().GetState()))
		}
	}
	if want := "[svc/1 JOB_STATE_CANCELLED svc/5 JOB_STATE_CANCELLED svc/a JOB_STATE_UNSPECIFIED]"; fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s", got, want)
	}

	// The initial set: of jobs 1 (cancelled while w1 ran it), 2 (run by
	// w2, cancelled) and 3 (running on w1), only 1 is sent.
	f, w = newWatchFake(t)
	close(f.feed)
	submit := &fsmv1.SubmitJobs{}
	for range 3 {
		spec := &fsmv1.QueueJobSpec{Queue: "svc", Kind: "k"}
		fsm.FillJobDefaults(spec)
		submit.Jobs = append(submit.Jobs, spec)
	}
	f.apply(submit)
	f.apply(&fsmv1.FetchJobs{Queues: []string{"svc"}, Max: 1, WorkerId: "w1"})
	f.apply(&fsmv1.FetchJobs{Queues: []string{"svc"}, Max: 1, WorkerId: "w2"})
	f.apply(&fsmv1.FetchJobs{Queues: []string{"svc"}, Max: 1, WorkerId: "w1"})
	f.apply(&fsmv1.CancelJobs{JobIds: []uint64{1, 2}})
	out = newSink()
	req.Initial = true
	if err := w.Watch(req, out); err != nil {
		t.Fatal(err)
	}
	if e := out.sent[0].GetEvents(); len(out.sent) != 1 || len(e) != 1 || e[0].GetKey() != "svc/1" {
		t.Fatalf("initial set: %v", out.sent)
	}

	keep := watchFilter(&coordv1.WatchRequest{JobStates: []coordv1.JobState{coordv1.JobState_JOB_STATE_RUNNING}},
		map[fsm.Family]bool{fsm.FamilyQueueJob: true})
	for _, c := range []struct {
		e    fsm.Event
		want bool
	}{{jobEvent(1, fsm.JobRunning, "w1"), true}, {jobEvent(1, fsm.JobAvailable), false}, {leaseEvent("a", 1), false}} {
		if keep(c.e.Family, c.e.Key, c.e.Record) != c.want {
			t.Errorf("%v: want %v", c.e.Record, c.want)
		}
	}
}

// Under an ACL a watch needs read on its prefix, or — for queued jobs
// only — work on it: a worker's cancellation watch of the queues it works.
func TestWatchACL(t *testing.T) {
	f, w := newWatchFake(t)
	close(f.feed)
	w.s.tls = &tlsutil.Reloader{} // identities on; no files are read
	acl, err := auth.ParseACL([]byte(`
rules:
  - name: worker
    identities: [wrk]
    ops: [work]
    prefixes: [billing/]
  - name: reader
    identities: [rdr]
    ops: [read]
    prefixes: [billing/]
`))
	if err != nil {
		t.Fatal(err)
	}
	w.s.acl.Store(acl)
	jobs := []coordv1.WatchFamily{fsm.FamilyQueueJob}
	for _, c := range []struct {
		id, prefix string
		fams       []coordv1.WatchFamily
		ok         bool
	}{
		{"wrk", "billing/a/", jobs, true},
		{"wrk", "billing/a/", nil, false},
		{"wrk", "billing/a/", []coordv1.WatchFamily{fsm.FamilyQueueJob, fsm.FamilyLease}, false},
		{"wrk", "payroll/", jobs, false},
		{"wrk", "", jobs, false},
		{"rdr", "billing/", nil, true},
		{"rdr", "billing/a/", jobs, true},
		{"rdr", "payroll/", jobs, false},
	} {
		out := newSink()
		out.ctx = auth.WithCaller(context.Background(), auth.Caller{Identity: c.id})
		err := w.Watch(&coordv1.WatchRequest{Prefix: c.prefix, Families: c.fams}, out)
		if (err == nil) != c.ok || (err != nil && status.Code(err) != codes.PermissionDenied) {
			t.Errorf("%s watching %q %v: %v", c.id, c.prefix, c.fams, err)
		}
	}
}

// With initial, the matching records come first as EXISTING events at the
// applied index, then synced, then the changes.
func TestWatchInitialSet(t *testing.T) {
	f, w := newWatchFake(t)
	for _, n := range []string{"svc/a", "svc/b", "zzz"} {
		f.apply(&fsmv1.Acquire{Name: n, Owner: "o", TtlMs: 5000, RequestId: "r"})
	}
	f.feed <- []fsm.Event{leaseEvent("svc/c", 1)}
	close(f.feed)
	out := newSink()
	if err := w.Watch(&coordv1.WatchRequest{Prefix: "svc/", Initial: true}, out); err != nil {
		t.Fatal(err)
	}
	if len(out.sent) != 2 {
		t.Fatalf("messages: %v", out.sent)
	}
	init := out.sent[0]
	if !init.GetSynced() || init.GetResumeIndex() != 1 || len(init.GetEvents()) != 2 {
		t.Fatalf("initial: %v", init)
	}
	for i, e := range init.GetEvents() {
		if e.GetKind() != coordv1.WatchEventKind_WATCH_EVENT_KIND_EXISTING || e.GetPosition() != uint32(i) || e.GetLease().GetExpiresInMs() != 5000 {
			t.Fatalf("existing %d: %v", i, e)
		}
	}
	if e := out.sent[1].GetEvents(); len(e) != 1 || e[0].GetKey() != "svc/c" {
		t.Fatalf("after the initial set: %v", out.sent[1])
	}
}

// watchRefusal stands for the node's refusals.
type watchRefusal struct {
	reason coorderr.Reason
	meta   map[string]string
}

func (e *watchRefusal) Error() string { return "refused" }
func (e *watchRefusal) WatchRefused() (coorderr.Reason, map[string]string) {
	return e.reason, e.meta
}

func TestWatchRefusals(t *testing.T) {
	for _, c := range []struct {
		reason coorderr.Reason
		code   codes.Code
	}{
		{coorderr.WatchIndexCompacted, codes.FailedPrecondition},
		{coorderr.WatcherTooSlow, codes.ResourceExhausted},
		{coorderr.WatchLimit, codes.ResourceExhausted},
	} {
		f, w := newWatchFake(t)
		close(f.feed)
		f.end = &watchRefusal{reason: c.reason, meta: map[string]string{"oldest_index": "42"}}
		err := w.Watch(&coordv1.WatchRequest{}, newSink())
		_, info := coorderr.Info(err)
		if status.Code(err) != c.code || info.GetReason() != coorderr.Name(c.reason) || info.GetMetadata()["oldest_index"] != "42" {
			t.Fatalf("%s: %v %v", c.reason, err, info)
		}
	}
}
