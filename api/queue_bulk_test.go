package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// deadVia makes n dead jobs in queue through the API (max_attempts 1,
// fetched and failed).
func deadVia(t *testing.T, q *queue, queue string, n int) []uint64 {
	t.Helper()
	ctx := caller("ops")
	var jobs []*coordv1.NewJob
	for range n {
		jobs = append(jobs, &coordv1.NewJob{Queue: queue, Kind: "k", MaxAttempts: 1})
	}
	sub, err := q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	f, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{queue}, Max: uint32(n), WorkerId: "w"})
	if err != nil {
		t.Fatal(err)
	}
	fl := &coordv1.QueueFailRequest{WorkerId: "w"}
	for _, j := range f.GetJobs() {
		fl.Failures = append(fl.Failures, &coordv1.JobFailure{JobId: j.GetJob().GetId(), Attempt: j.GetAttempt().GetNumber(), Error: "boom"})
	}
	if _, err := q.Fail(ctx, fl); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, j := range sub.GetJobs() {
		ids = append(ids, j.GetId())
	}
	return ids
}

// TestBulkAtTheEdge: a dry run counts; a start records the operation with
// its total and creator, a repeat with the request id returns it; the
// steps (the leader's bulk service; here by hand) make progress GetBulk
// and ListBulk show; bad input names its field.
func TestBulkAtTheEdge(t *testing.T) {
	n, _, q := newQueueTest(t)
	ctx := caller("ops")
	deadVia(t, q, "mail", 30)
	submitOne(t, q, ctx, &coordv1.NewJob{Queue: "mail", Kind: "k"})
	filter := &coordv1.JobFilter{Queue: "mail", State: coordv1.JobState_JOB_STATE_DEAD}
	dry, err := q.Bulk(ctx, &coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_RETRY, Filter: filter, DryRun: true})
	if err != nil || dry.GetCount() != 30 || dry.GetOp() != nil {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	if ops := n.fsm.BulkOps(false); len(ops) != 0 {
		t.Fatalf("a dry run started %+v", ops)
	}
	req := &coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_RETRY, Filter: filter, RequestId: "r1"}
	r, err := q.Bulk(ctx, req)
	if err != nil || r.GetCount() != 30 || r.GetOp().GetTotal() != 30 || r.GetOp().GetCreatedBy() != "ops" || r.GetOp().GetFinished() || r.GetDuplicate() {
		t.Fatalf("start: %v %v", r, err)
	}
	if again, err := q.Bulk(ctx, req); err != nil || !again.GetDuplicate() || again.GetOp().GetId() != "r1" {
		t.Fatalf("repeat: %v %v", again, err)
	}
	for cursor := uint64(0); ; {
		res, err := n.propose(&fsmv1.StepBulkJobs{OpId: "r1", Cursor: cursor, Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		if o := res.(*fsm.BulkResult).Op; o.Finished() {
			break
		} else {
			cursor = o.Cursor
		}
	}
	g, err := q.GetBulk(ctx, &coordv1.QueueGetBulkRequest{Id: "r1"})
	if err != nil || !g.GetOp().GetFinished() || g.GetOp().GetDone() != 30 || g.GetOp().GetBatches() != 3 || g.GetOp().GetFilter().GetState() != coordv1.JobState_JOB_STATE_DEAD {
		t.Fatalf("get: %v %v", g, err)
	}
	if l, err := q.ListBulk(ctx, &coordv1.QueueListBulkRequest{}); err != nil || len(l.GetOps()) != 1 {
		t.Fatalf("list: %v %v", l, err)
	}
	if _, err := q.GetBulk(ctx, &coordv1.QueueGetBulkRequest{Id: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("get of no op: %v", err)
	}
	for _, c := range []struct {
		req   *coordv1.QueueBulkRequest
		field string
	}{
		{&coordv1.QueueBulkRequest{Filter: filter, DryRun: true}, "action"},
		{&coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_CANCEL, Filter: filter}, "request_id"},
		{&coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_CANCEL, DryRun: true, Filter: &coordv1.JobFilter{Label: "nokey"}}, "filter.label"},
		{&coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_CANCEL, DryRun: true, Filter: &coordv1.JobFilter{State: 99}}, "filter.state"},
		{&coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_CANCEL, DryRun: true, Filter: &coordv1.JobFilter{Ids: []uint64{0, 3}}}, "filter.ids"},
		{&coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_CANCEL, DryRun: true, Filter: &coordv1.JobFilter{
			CreatedAfter: r.GetOp().GetCreatedAt(), CreatedBefore: r.GetOp().GetCreatedAt()}}, "filter.created_before"},
	} {
		_, err := q.Bulk(ctx, c.req)
		invalid(t, err, c.field, -1)
	}
}

// TestQueueDeleteAtTheEdge: a final job goes; a repeat is a duplicate; a
// job that is not final is FAILED_PRECONDITION JOB_NOT_FINAL.
func TestQueueDeleteAtTheEdge(t *testing.T) {
	_, _, q := newQueueTest(t)
	ctx := caller("ops")
	dead := deadVia(t, q, "mail", 1)[0]
	live := submitOne(t, q, ctx, &coordv1.NewJob{Queue: "mail", Kind: "k"})
	if r, err := q.Delete(ctx, &coordv1.QueueDeleteRequest{Id: dead}); err != nil || r.GetDuplicate() {
		t.Fatalf("delete: %v %v", r, err)
	}
	if _, err := q.Get(ctx, &coordv1.QueueGetRequest{Id: dead}); status.Code(err) != codes.NotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if r, err := q.Delete(ctx, &coordv1.QueueDeleteRequest{Id: dead}); err != nil || !r.GetDuplicate() {
		t.Fatalf("repeated delete: %v %v", r, err)
	}
	_, err := q.Delete(ctx, &coordv1.QueueDeleteRequest{Id: live})
	if status.Code(err) != codes.FailedPrecondition || coorderr.WireReason(err) != "JOB_NOT_FINAL" || coorderr.Metadata(err)["state"] != "AVAILABLE" {
		t.Fatalf("delete of an available job: %v", err)
	}
	_, err = q.Delete(ctx, &coordv1.QueueDeleteRequest{})
	invalid(t, err, "id", -1)
}

// TestBulkACL: a bulk names its queue for the job op; over every queue it
// takes the admin op.
func TestBulkACL(t *testing.T) {
	_, s, q := newQueueTest(t)
	useACL(t, s, "rules:\n  - name: ops\n    identities: [ops]\n    ops: [job, read, work]\n    prefixes: [\"mail\"]\n  - name: admin\n    identities: [root]\n    ops: [admin]\n")
	dry := func(who, queue string) error {
		req := &coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_RETRY, Filter: &coordv1.JobFilter{Queue: queue}, DryRun: true}
		if err := s.authorizeMethod(auth.Caller{Identity: who}, coordv1.Queue_Bulk_FullMethodName, req); err != nil {
			return err
		}
		_, err := q.Bulk(caller(who), req)
		return err
	}
	if err := dry("ops", "mail"); err != nil {
		t.Fatalf("ops on mail: %v", err)
	}
	if err := dry("ops", "payroll"); status.Code(toStatus(err)) != codes.PermissionDenied {
		t.Fatalf("ops on payroll: %v", err)
	}
	if err := dry("ops", ""); status.Code(toStatus(err)) != codes.PermissionDenied {
		t.Fatalf("ops on every queue: %v", err)
	}
	if err := dry("root", ""); err != nil {
		t.Fatalf("admin on every queue: %v", err)
	}
}

// TestBulkHTTP: the routes.
func TestBulkHTTP(t *testing.T) {
	_, s, q := newQueueTest(t)
	ids := deadVia(t, q, "mail", 3)
	do := jsonDoer(t, s.httpAPI())
	if code, out := do("POST", "/v1/queue/bulk", `{"action":"RETRY","filter":{"queue":"mail","state":"dead"},"dry_run":true}`); code != 200 || out["count"] != "3" {
		t.Fatalf("dry run: %d %v", code, out)
	}
	if code, out := do("POST", "/v1/queue/bulk", `{"action":"DELETE","filter":{"ids":["1","2"]},"request_id":"x"}`); code != 200 || out["op"].(map[string]any)["id"] != "x" {
		t.Fatalf("start: %d %v", code, out)
	}
	if code, out := do("GET", "/v1/queue/bulk/x", ""); code != 200 || out["op"].(map[string]any)["total"] != "2" {
		t.Fatalf("get: %d %v", code, out)
	}
	if code, out := do("GET", "/v1/queue/bulk", ""); code != 200 || len(out["ops"].([]any)) != 1 {
		t.Fatalf("list: %d %v", code, out)
	}
	if code, out := do("DELETE", "/v1/queue/jobs/"+jsonID(ids[2]), ""); code != 200 {
		t.Fatalf("delete: %d %v", code, out)
	}
	if code, out := do("POST", "/v1/queue/bulk", `{"action":"RETRY","filter":{"label":"x"},"dry_run":true}`); code != 400 || out["metadata"].(map[string]any)["field"] != "filter.label" {
		t.Fatalf("bad filter: %d %v", code, out)
	}
}

func jsonID(id uint64) string { b, _ := json.Marshal(id); return string(b) }

// TestConsoleBulkAndSearch: the jobs page searches by label, created
// range and args (a bounded scan, said so), a bulk retry through the
// page starts one operation (a repeated post with the form's request id
// is the same one) shown with its progress, and a viewer's is refused.
func TestConsoleBulkAndSearch(t *testing.T) {
	ct := newConsoleTest(t, true)
	ctx := caller("ops")
	ids := deadVia(t, ct.q, "mail", 3)
	if _, err := ct.q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{
		{Queue: "mail", Kind: "send", Args: []byte(`{"to":"ann@example.com"}`), Labels: map[string]string{"tenant": "acme"}},
		{Queue: "mail", Kind: "send", Args: []byte(`{"to":"bob@example.com"}`)}}}); err != nil {
		t.Fatal(err)
	}
	page := ct.get("ops", "/ui/jobs?queue=mail&args=ann%40", http.StatusOK)
	if strings.Count(page, `<tr data-id=`) != 1 || !strings.Contains(page, `id="scanned"`) {
		t.Fatalf("args search:\n%s", page)
	}
	if page := ct.get("ops", "/ui/jobs?label=tenant%3Dacme", http.StatusOK); strings.Count(page, `<tr data-id=`) != 1 {
		t.Fatalf("label search:\n%s", page)
	}
	if page := ct.get("ops", "/ui/jobs?since=2999-01-01T00:00", http.StatusOK); strings.Count(page, `<tr data-id=`) != 0 || !strings.Contains(page, "No jobs match among the") {
		t.Fatalf("future range:\n%s", page)
	}
	ct.get("ops", "/ui/jobs?since=yesterday", http.StatusBadRequest)

	form := func(who, reqID string) url.Values {
		return url.Values{"csrf": {ct.csrf(who, "/ui/jobs")}, "request_id": {reqID}, "queue": {"mail"}, "state": {"DEAD"}}
	}
	if w := ct.request("viewer", "POST", "/ui/jobs-bulk/retry", form("viewer", "ui-v"), nil); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "retry refused") {
		t.Fatalf("viewer's bulk retry: %d", w.Code)
	}
	for range 2 { // the same form twice: one operation
		w := ct.request("ops", "POST", "/ui/jobs-bulk/retry", form("ops", "ui-1"), nil)
		if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "op=ui-1") {
			t.Fatalf("ops's bulk retry: %d %s", w.Code, w.Header().Get("Location"))
		}
	}
	if ops := ct.n.fsm.BulkOps(false); len(ops) != 1 || ops[0].Total != 3 || ops[0].Identity != "ops" {
		t.Fatalf("operations %+v", ops)
	}
	if _, err := ct.n.propose(&fsmv1.StepBulkJobs{OpId: "ui-1", Max: 1000}); err != nil {
		t.Fatal(err)
	}
	page = ct.get("ops", "/ui/jobs?queue=mail&done=bulk-retry&op=ui-1", http.StatusOK)
	for _, want := range []string{"Bulk retry started", `<tr data-op="ui-1">`, "3 done, 0 skipped of 3 (finished)", "queue=mail state=dead", `id="refresh"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the jobs page lacks %q", want)
		}
	}
	for _, id := range ids {
		if j, _ := ct.n.fsm.QueueJob(id); j.State != fsm.JobAvailable {
			t.Fatalf("job %d is %s after the bulk retry", id, j.State)
		}
	}
}

// TestConsoleWindowsPage: the window ledger of a job prefix, with its
// claimant's token.
func TestConsoleWindowsPage(t *testing.T) {
	ct := newConsoleTest(t, false)
	if _, err := ct.n.propose(&fsmv1.Acquire{Name: "close", Owner: "w7", TtlMs: 60_000, RequestId: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ct.n.propose(&fsmv1.ClaimWindow{Job: "billing/close", Window: "2026-12-01", LeaseName: "close", Owner: "w7", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	page := ct.get("", "/ui/windows?job=billing/close", http.StatusOK)
	for _, want := range []string{"billing/close", "2026-12-01", "incomplete", "w7", "<code>close:1</code>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the windows page lacks %q", want)
		}
	}
	if page := ct.get("", "/ui/windows?job=other", http.StatusOK); !strings.Contains(page, "No windows of job other.") {
		t.Error("an unknown job's page")
	}
	if page := ct.get("", "/ui/windows", http.StatusOK); !strings.Contains(page, "Name a job") {
		t.Error("an empty prefix's page")
	}
}

// TestConsoleWorkersPage: who runs what, from the running attempts.
func TestConsoleWorkersPage(t *testing.T) {
	ct := newConsoleTest(t, false)
	ct.submit(&coordv1.NewJob{Queue: "mail", Kind: "send"}, &coordv1.NewJob{Queue: "mail", Kind: "send"}, &coordv1.NewJob{Queue: "pay", Kind: "charge"})
	for _, w := range []struct{ worker, queue string }{{"w1", "mail"}, {"w1", "mail"}, {"w2", "pay"}} {
		if _, err := ct.q.Fetch(caller("app"), &coordv1.QueueFetchRequest{Queues: []string{w.queue}, Max: 1, WorkerId: w.worker}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := ct.q.Workers(caller("app"), &coordv1.QueueWorkersRequest{})
	if err != nil || len(r.GetWorkers()) != 2 || len(r.GetWorkers()[0].GetAttempts()) != 2 || r.GetWorkers()[1].GetWorkerId() != "w2" {
		t.Fatalf("workers: %v %v", r, err)
	}
	page := ct.get("", "/ui/workers", http.StatusOK)
	for _, want := range []string{`<tr data-worker="w1">`, `<tr data-worker="w2">`, "mail / send, attempt 1", "pay / charge", `<td>2</td>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the workers page lacks %q", want)
		}
	}
	if page := ct.get("", "/ui/workers?queue=pay", http.StatusOK); strings.Contains(page, `data-worker="w1"`) {
		t.Error("a queue's workers page shows another queue's worker")
	}
}
