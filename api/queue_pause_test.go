package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/coordd/coordd/internal/auth"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// TestQueuePauseAtTheEdge: Pause records the caller and the leader's
// calendar time; a paused queue's jobs are not fetched, submits are
// accepted; Stats and the metrics show it; Resume hands them out again.
// A bad queue name is INVALID_ARGUMENT naming the field.
func TestQueuePauseAtTheEdge(t *testing.T) {
	n, s, q := newQueueTest(t)
	ctx := caller("ops")
	p, err := q.Pause(ctx, &coordv1.QueuePauseRequest{Queue: "mail"})
	if err != nil || p.GetAlready() || p.GetPause().GetPausedBy() != "ops" || p.GetPause().GetPausedAtMs() != n.calendar {
		t.Fatalf("pause: %v %v", p, err)
	}
	if again, err := q.Pause(caller("other"), &coordv1.QueuePauseRequest{Queue: "mail"}); err != nil || !again.GetAlready() || again.GetPause().GetPausedBy() != "ops" {
		t.Fatalf("second pause: %v %v", again, err)
	}
	id := submitOne(t, q, ctx, &coordv1.NewJob{Queue: "mail", Kind: "send"})
	if r, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"mail"}, Max: 10, WorkerId: "w"}); err != nil || len(r.GetJobs()) != 0 {
		t.Fatalf("fetch from a paused queue: %v %v", r, err)
	}
	st, err := q.Stats(ctx, &coordv1.QueueStatsRequest{Queue: "mail"})
	if err != nil || len(st.GetQueues()) != 1 || !st.GetQueues()[0].GetPaused() || st.GetQueues()[0].GetPausedBy() != "ops" || st.GetQueues()[0].GetAvailable() != 1 {
		t.Fatalf("stats: %v %v", st, err)
	}
	want := `
# HELP coordd_queue_paused 1 while a queue is paused (no fetch hands out its jobs), else 0, by queue, in this node's replica; queue="_other" counts the paused queues beyond the first series.
# TYPE coordd_queue_paused gauge
coordd_queue_paused{queue="mail"} 1
`
	if err := testutil.GatherAndCompare(s.cfg.Metrics, strings.NewReader(want), "coordd_queue_paused"); err != nil {
		t.Fatal(err)
	}
	r, err := q.Resume(ctx, &coordv1.QueueResumeRequest{Queue: "mail"})
	if err != nil || !r.GetWasPaused() {
		t.Fatalf("resume: %v %v", r, err)
	}
	if r, err := q.Resume(ctx, &coordv1.QueueResumeRequest{Queue: "mail"}); err != nil || r.GetWasPaused() {
		t.Fatalf("second resume: %v %v", r, err)
	}
	if got := fetchOne(t, q, ctx, "w", "mail"); got.GetJob().GetId() != id {
		t.Fatalf("fetched %v after resume, want job %d", got, id)
	}
	if err := testutil.GatherAndCompare(s.cfg.Metrics, strings.NewReader(strings.Replace(want, `"mail"} 1`, `"mail"} 0`, 1)), "coordd_queue_paused"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "a\x01b", strings.Repeat("q", 300)} {
		_, err := q.Pause(ctx, &coordv1.QueuePauseRequest{Queue: bad})
		invalid(t, err, "queue", -1)
		_, err = q.Resume(ctx, &coordv1.QueueResumeRequest{Queue: bad})
		invalid(t, err, "queue", -1)
	}
}

// TestQueuePauseACL: pausing and resuming take the job op on the queue.
func TestQueuePauseACL(t *testing.T) {
	_, s, _ := newQueueTest(t)
	useACL(t, s, "rules:\n  - name: ops\n    identities: [ops]\n    ops: [job, read]\n    prefixes: [\"mail\"]\n  - name: viewer\n    identities: [viewer]\n    ops: [read]\n    prefixes: [\"\"]\n")
	check := func(id, method string, req any) error {
		return s.authorizeMethod(auth.Caller{Identity: id}, method, req)
	}
	for _, m := range []string{coordv1.Queue_Pause_FullMethodName, coordv1.Queue_Resume_FullMethodName} {
		var mail, other any = &coordv1.QueuePauseRequest{Queue: "mail"}, &coordv1.QueuePauseRequest{Queue: "payroll"}
		if m == coordv1.Queue_Resume_FullMethodName {
			mail, other = &coordv1.QueueResumeRequest{Queue: "mail"}, &coordv1.QueueResumeRequest{Queue: "payroll"}
		}
		if err := check("ops", m, mail); err != nil {
			t.Errorf("%s by ops on mail: %v", m, err)
		}
		if err := check("ops", m, other); err == nil {
			t.Errorf("%s by ops on payroll allowed", m)
		}
		if err := check("viewer", m, mail); err == nil {
			t.Errorf("%s by viewer allowed", m)
		}
	}
}

// TestQueuePauseHTTP: the routes, and a bad name is a 400 naming it.
func TestQueuePauseHTTP(t *testing.T) {
	_, s, _ := newQueueTest(t)
	do := jsonDoer(t, s.httpAPI())
	if code, out := do("POST", "/v1/queue/queues/mail/pause", `{}`); code != 200 || out["pause"].(map[string]any)["queue"] != "mail" {
		t.Fatalf("pause: %d %v", code, out)
	}
	if code, out := do("GET", "/v1/queue/stats?queue=mail", ""); code != 200 || out["queues"].([]any)[0].(map[string]any)["paused"] != true {
		t.Fatalf("stats: %d %v", code, out)
	}
	if code, out := do("POST", "/v1/queue/queues/mail/resume", `{}`); code != 200 || out["was_paused"] != true {
		t.Fatalf("resume: %d %v", code, out)
	}
	if code, out := do("POST", "/v1/queue/queues/a%01b/pause", `{}`); code != 400 || out["metadata"].(map[string]any)["field"] != "queue" {
		t.Fatalf("bad name: %d %v", code, out)
	}
}

// TestConsoleQueuePause: the queues page shows a paused queue (who,
// since when) with Resume; Pause and Resume through the page; a viewer's
// pause is refused with the reason.
func TestConsoleQueuePause(t *testing.T) {
	ct := newConsoleTest(t, true)
	ct.submit(coordNewJob("mail"))
	page := ct.get("ops", "/ui/queues", http.StatusOK)
	if !strings.Contains(page, `action="/ui/queues/mail/pause"`) {
		t.Fatalf("no pause button:\n%s", page)
	}
	w := ct.request("viewer", "POST", "/ui/queues/mail/pause", url.Values{"csrf": {ct.csrf("viewer", "/ui/queues")}}, nil)
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "pause refused") {
		t.Fatalf("viewer's pause: %d\n%s", w.Code, w.Body.String())
	}
	w = ct.request("ops", "POST", "/ui/queues/mail/pause", url.Values{"csrf": {ct.csrf("ops", "/ui/queues")}}, nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("ops's pause: %d\n%s", w.Code, w.Body.String())
	}
	if !ct.n.fsm.QueuePaused("mail") {
		t.Fatal("not paused")
	}
	page = ct.get("ops", "/ui/queues?done=queue-pause", http.StatusOK)
	for _, want := range []string{"Queue paused", `<span class="state paused">paused</span> by ops`, `action="/ui/queues/mail/resume"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the queues page lacks %q", want)
		}
	}
	w = ct.request("ops", "POST", "/ui/queues/mail/resume", url.Values{"csrf": {ct.csrf("ops", "/ui/queues")}}, nil)
	if w.Code != http.StatusSeeOther || ct.n.fsm.QueuePaused("mail") {
		t.Fatalf("resume: %d, paused %v", w.Code, ct.n.fsm.QueuePaused("mail"))
	}
	if w := ct.request("ops", "POST", "/ui/queues/mail/explode", url.Values{"csrf": {ct.csrf("ops", "/ui/queues")}}, nil); w.Code != http.StatusNotFound {
		t.Fatalf("unknown action: %d", w.Code)
	}
}

func coordNewJob(queue string) *coordv1.NewJob { return &coordv1.NewJob{Queue: queue, Kind: "k"} }

// jsonDoer calls h with a JSON body and decodes the JSON answer, failing
// the test on an answer that is not JSON.
func jsonDoer(t *testing.T, h http.Handler) func(method, path, body string) (int, map[string]any) {
	return func(method, path, body string) (int, map[string]any) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		b, _ := io.ReadAll(rec.Body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, b)
		}
		return rec.Code, out
	}
}
