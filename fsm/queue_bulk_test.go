package fsm

import (
	"fmt"
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// deadJobs submits n jobs to queue with one attempt each and fails them
// for good, in batches (a worker's fetch and fail of up to 1,000).
func deadJobs(t testing.TB, f *FSM, cal int64, queue string, n int) {
	t.Helper()
	for left := n; left > 0; {
		k := min(left, MaxSubmitBatch)
		specs := make([]*fsmv1.QueueJobSpec, k)
		for i := range specs {
			specs[i] = jspec(queue, "k", attempts(1))
		}
		submit(t, f, cal, specs...)
		got := fetch(t, f, cal, "w", uint32(k), queue)
		fl := &fsmv1.FailJobs{WorkerId: "w", Identity: "id-w"}
		for _, j := range got {
			fl.Failures = append(fl.Failures, &fsmv1.JobFailure{JobId: j.ID, Attempt: j.Attempts, Error: "boom"})
		}
		runAt(t, f, 0, cal, fl)
		left -= k
	}
}

func bulk(t testing.TB, f *FSM, cal int64, body any) *BulkResult {
	t.Helper()
	out := runAt(t, f, 0, cal, body)
	r, ok := out.(*BulkResult)
	if !ok {
		t.Fatalf("%T at %d: %#v", body, cal, out)
	}
	return r
}

// TestBulkRetryInBatches: a bulk retry of dead jobs proceeds in steps of
// at most max jobs; a step from a stale cursor changes nothing (a repeat
// or a deposed leader's entry cannot act twice); it covers the jobs there
// when it started, each once; a repeated start returns the operation.
func TestBulkRetryInBatches(t *testing.T) {
	f := New()
	deadJobs(t, f, t0, "a", 2500)
	submit(t, f, t0, jspec("c", "k"), jspec("b", "k")) // 2501, 2502: available
	deadJobs(t, f, t0, "b", 10)                        // another queue's dead jobs
	sel := &fsmv1.JobSelector{Queue: "a", State: fsmv1.JobState(JobDead)}
	if n := f.CountSelected(sel); n != 2500 {
		t.Fatalf("count %d", n)
	}
	start := &fsmv1.StartBulkJobs{OpId: "op1", Action: fsmv1.BulkAction_BULK_ACTION_RETRY, Selector: sel, Identity: "ops", Total: 2500}
	r := bulk(t, f, t0+1, start)
	if r.Duplicate || r.Op.Finished() || r.Op.Upto != 2512 || r.Op.Identity != "ops" {
		t.Fatalf("start: %+v", r)
	}
	deadJobs(t, f, t0+2, "a", 5) // after the start: not covered
	cursor := uint64(0)
	for step := 1; ; step++ {
		r = bulk(t, f, t0+int64(10*step), &fsmv1.StepBulkJobs{OpId: "op1", Cursor: cursor, Max: 1000})
		if r.Stale || r.Op.Steps != uint64(step) {
			t.Fatalf("step %d: %+v", step, r)
		}
		// The same step again (a repeat, or a deposed leader's late
		// entry): nothing changes.
		again := bulk(t, f, t0+int64(10*step)+1, &fsmv1.StepBulkJobs{OpId: "op1", Cursor: cursor, Max: 1000})
		if !again.Stale || again.Op.Done != r.Op.Done || again.Op.Cursor != r.Op.Cursor {
			t.Fatalf("repeated step %d: %+v", step, again)
		}
		cursor = r.Op.Cursor
		if r.Op.Finished() {
			break
		}
		if r.Op.Done != uint64(1000*step) {
			t.Fatalf("step %d: done %d", step, r.Op.Done)
		}
	}
	if r.Op.Done != 2500 || r.Op.Skipped != 0 || r.Op.Steps != 3 || r.Op.FinishedAt == 0 {
		t.Fatalf("finished: %+v", r.Op)
	}
	st := f.QueueStats("a", t0+100)[0]
	if st.Available != 2500 || st.Dead != 5 {
		t.Fatalf("stats after the bulk retry: %+v", st)
	}
	for _, id := range []uint64{1, 1250, 2500} {
		if j := jobState(t, f, id); j.State != JobAvailable || j.MaxAttempts != 2 || j.Attempts != 1 {
			t.Fatalf("job %d: %s %d/%d", id, j.State, j.Attempts, j.MaxAttempts)
		}
	}
	if j := jobState(t, f, 2505); j.State != JobDead {
		t.Fatalf("a job after the start was retried: %s", j.State)
	}
	if d := bulk(t, f, t0+200, start); !d.Duplicate || d.Op.Done != 2500 {
		t.Fatalf("repeated start: %+v", d)
	}
	if ops := f.BulkOps(true); len(ops) != 0 {
		t.Fatalf("running ops after the end: %+v", ops)
	}
	if d := f.st.queueIndexDiff(); d != "" {
		t.Fatal(d)
	}
}

// TestBulkStepIsBounded: a selector no index serves (a time range) visits
// at most MaxBulkScan jobs per step and acts on at most max.
func TestBulkStepIsBounded(t *testing.T) {
	f := New()
	specs := make([]*fsmv1.QueueJobSpec, 1000)
	for i := range specs {
		specs[i] = jspec("a", "k")
	}
	for i := 0; i < 25; i++ {
		submit(t, f, t0+int64(i), specs...)
	}
	// Only the jobs of the last submit (created at t0+24) match.
	sel := &fsmv1.JobSelector{CreatedAfterMs: t0 + 24}
	bulk(t, f, t0+100, &fsmv1.StartBulkJobs{OpId: "c", Action: fsmv1.BulkAction_BULK_ACTION_CANCEL, Selector: sel})
	r := bulk(t, f, t0+101, &fsmv1.StepBulkJobs{OpId: "c", Max: 1000})
	if r.Op.Cursor != MaxBulkScan || r.Op.Done != 0 {
		t.Fatalf("first step: %+v", r.Op)
	}
	r = bulk(t, f, t0+102, &fsmv1.StepBulkJobs{OpId: "c", Cursor: r.Op.Cursor, Max: 1000})
	r = bulk(t, f, t0+103, &fsmv1.StepBulkJobs{OpId: "c", Cursor: r.Op.Cursor, Max: 300})
	if r.Op.Cursor != 24_300 || r.Op.Done != 300 {
		t.Fatalf("third step: %+v", r.Op)
	}
	r = bulk(t, f, t0+104, &fsmv1.StepBulkJobs{OpId: "c", Cursor: r.Op.Cursor, Max: 1000})
	if !r.Op.Finished() || r.Op.Done != 1000 || f.QueueStats("a", t0)[0].Cancelled != 1000 {
		t.Fatalf("last step: %+v", r.Op)
	}
}

// TestDeleteJobs: only final jobs; a repeat answers Duplicate; the unique
// key is free again; a bulk delete skips what is not final.
func TestDeleteJobs(t *testing.T) {
	f := New()
	submit(t, f, t0, jspec("a", "k", unique("u")), jspec("a", "k"), jspec("a", "k", labels("t", "x")))
	runAt(t, f, 0, t0, &fsmv1.CancelJobs{JobIds: []uint64{1}})
	del := func(id uint64) any {
		return one(t, runAt(t, f, 0, t0+1, &fsmv1.DeleteJobs{JobIds: []uint64{id}, Identity: "ops"}))
	}
	if o, ok := del(1).(*JobOutcome); !ok || o.Duplicate || o.Job.ID != 1 {
		t.Fatalf("delete of a cancelled job: %#v", o)
	}
	if _, ok := f.QueueJob(1); ok {
		t.Fatal("deleted job still there")
	}
	if o, ok := del(1).(*JobOutcome); !ok || !o.Duplicate {
		t.Fatalf("repeated delete: %#v", o)
	}
	if rej, ok := del(2).(*Rejection); !ok || rej.Reason != coorderr.JobNotFinal || rej.Metadata["state"] != "AVAILABLE" {
		t.Fatalf("delete of an available job: %#v", rej)
	}
	if rej, ok := del(99).(*Rejection); !ok || rej.Reason != coorderr.JobNotFound {
		t.Fatalf("delete of no job: %#v", rej)
	}
	if j := submit(t, f, t0+2, jspec("a", "k", unique("u")))[0]; j.Duplicate {
		t.Fatal("the deleted job's unique key still taken")
	}
	// Bulk delete over the queue: the available ones are skipped.
	runAt(t, f, 0, t0+3, &fsmv1.CancelJobs{JobIds: []uint64{3}})
	bulk(t, f, t0+4, &fsmv1.StartBulkJobs{OpId: "d", Action: fsmv1.BulkAction_BULK_ACTION_DELETE, Selector: &fsmv1.JobSelector{Queue: "a"}})
	r := bulk(t, f, t0+5, &fsmv1.StepBulkJobs{OpId: "d", Max: 10})
	if !r.Op.Finished() || r.Op.Done != 1 || r.Op.Skipped != 2 {
		t.Fatalf("bulk delete: %+v", r.Op)
	}
	if d := f.st.queueIndexDiff(); d != "" {
		t.Fatal(d)
	}
}

// TestBulkSelectorsAndRefusals: ids, labels, kinds; bad input is named.
func TestBulkSelectorsAndRefusals(t *testing.T) {
	f := New()
	submit(t, f, t0, jspec("a", "x", labels("t", "1")), jspec("a", "y", labels("t", "2")), jspec("b", "x"), jspec("b", "y", labels("t", "1")))
	for _, c := range []struct {
		sel  *fsmv1.JobSelector
		want uint64
	}{
		{&fsmv1.JobSelector{LabelKey: "t", LabelValue: "1"}, 2},
		{&fsmv1.JobSelector{Kind: "x"}, 2},
		{&fsmv1.JobSelector{Kind: "x", Queue: "b"}, 1},
		{&fsmv1.JobSelector{Ids: []uint64{2, 4, 9}}, 2},
		{&fsmv1.JobSelector{Ids: []uint64{2, 4}, Queue: "a"}, 1},
		{&fsmv1.JobSelector{State: fsmv1.JobState(JobAvailable), Queue: "b"}, 2},
		{&fsmv1.JobSelector{FinishedAfterMs: 1}, 0},
	} {
		if n := f.CountSelected(c.sel); n != c.want {
			t.Errorf("count %v: %d, want %d", c.sel, n, c.want)
		}
	}
	for i, c := range []struct {
		body  *fsmv1.StartBulkJobs
		field string
	}{
		{&fsmv1.StartBulkJobs{Action: fsmv1.BulkAction_BULK_ACTION_RETRY}, "request_id"},
		{&fsmv1.StartBulkJobs{OpId: "x"}, "action"},
		{&fsmv1.StartBulkJobs{OpId: "x", Action: fsmv1.BulkAction_BULK_ACTION_RETRY, Selector: &fsmv1.JobSelector{Ids: []uint64{3, 2}}}, "ids"},
		{&fsmv1.StartBulkJobs{OpId: "x", Action: fsmv1.BulkAction_BULK_ACTION_RETRY, Selector: &fsmv1.JobSelector{LabelValue: "v"}}, "label"},
	} {
		rej, ok := runAt(t, f, 0, t0, c.body).(*Rejection)
		if !ok || rej.Reason != coorderr.InvalidArgument || rej.Metadata["field"] != c.field {
			t.Errorf("%d: %#v, want INVALID_ARGUMENT on %s", i, rej, c.field)
		}
	}
	for i := 0; i < MaxBulkRunning; i++ {
		bulk(t, f, t0, &fsmv1.StartBulkJobs{OpId: fmt.Sprint("r", i), Action: fsmv1.BulkAction_BULK_ACTION_RETRY})
	}
	if rej, ok := runAt(t, f, 0, t0, &fsmv1.StartBulkJobs{OpId: "one-too-many", Action: fsmv1.BulkAction_BULK_ACTION_RETRY}).(*Rejection); !ok || rej.Reason != coorderr.JobQuota {
		t.Fatalf("over the running limit: %#v", rej)
	}
	if rej, ok := runAt(t, f, 0, t0, &fsmv1.StepBulkJobs{OpId: "nope", Max: 1}).(*Rejection); !ok || rej.Metadata["field"] != "op_id" {
		t.Fatalf("step of no op: %#v", rej)
	}
}

// TestBulkSnapshot: a running operation is in the snapshot; both copies
// continue from its cursor alike.
func TestBulkSnapshot(t *testing.T) {
	f, g := twins(t, func(t testing.TB, f *FSM) {
		deadJobs(t, f, t0, "a", 30)
		bulk(t, f, t0+1, &fsmv1.StartBulkJobs{OpId: "op", Action: fsmv1.BulkAction_BULK_ACTION_RETRY, Selector: &fsmv1.JobSelector{State: fsmv1.JobState(JobDead)}, Total: 30})
		bulk(t, f, t0+2, &fsmv1.StepBulkJobs{OpId: "op", Max: 10})
	})
	for _, x := range []*FSM{f, g} {
		o, ok := x.BulkOp("op")
		if !ok || o.Cursor != 10 || o.Done != 10 || o.Total != 30 {
			t.Fatalf("op after restore: %+v", o)
		}
		for !o.Finished() {
			o = bulk(t, x, t0+3, &fsmv1.StepBulkJobs{OpId: "op", Cursor: o.Cursor, Max: 10}).Op
		}
		if o.Done != 30 || x.QueueStats("a", t0)[0].Available != 30 {
			t.Fatalf("op at its end: %+v", o)
		}
	}
	if f.Digest() != g.Digest() {
		t.Fatal("digest differs")
	}
}

// TestScanQueueJobsIsBounded: a search looks at at most maxScan jobs per
// page and says where to go on; following the pages finds every match
// once, newest first.
func TestScanQueueJobsIsBounded(t *testing.T) {
	f := New()
	for i := 0; i < 5; i++ {
		specs := make([]*fsmv1.QueueJobSpec, 1000)
		for k := range specs {
			specs[k] = jspec("a", "k")
			if (i*1000+k)%700 == 0 {
				specs[k].Args = []byte(`{"needle":true}`)
			}
		}
		submit(t, f, t0+int64(i), specs...)
	}
	var found []uint64
	pages, before := 0, uint64(0)
	for {
		out, next, scanned := f.ScanQueueJobs(JobFilter{Queue: "a"}, JobSearch{ArgsContains: []byte("needle")}, before, 50, 1200)
		if scanned > 1200 {
			t.Fatalf("page %d looked at %d jobs", pages, scanned)
		}
		pages++
		found = append(found, idsOf(out)...)
		if next == 0 {
			break
		}
		before = next
	}
	want := []uint64{4901, 4201, 3501, 2801, 2101, 1401, 701, 1}
	if fmt.Sprint(found) != fmt.Sprint(want) || pages != 5 {
		t.Fatalf("found %v in %d pages, want %v in 5", found, pages, want)
	}
	// A created range: the jobs of the second submit only.
	out, _, _ := f.ScanQueueJobs(JobFilter{}, JobSearch{CreatedAfter: t0 + 1, CreatedBefore: t0 + 2}, 0, 5000, 10_000)
	if len(out) != 1000 || out[0].ID != 2000 || out[999].ID != 1001 {
		t.Fatalf("created range: %d jobs", len(out))
	}
}
