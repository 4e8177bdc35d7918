package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/api/console"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// statusNode adds Status to the fake node (the cluster page).
type statusNode struct{ *fakeNode }

func (n statusNode) Status(bool) *coordv1.StatusResponse {
	return &coordv1.StatusResponse{Id: n.id, State: "Leader", LeaderId: n.id, Term: 7, CommitIndex: 42, AppliedIndex: 41}
}

type consoleTest struct {
	t  *testing.T
	n  *fakeNode
	s  *Server
	c  *console.Console
	h  http.Handler
	q  *queue
	sh *schedules
}

const consoleACL = `
rules:
  - name: operators
    identities: [ops]
    ops: [admin, read, job]
  - name: viewers
    identities: [viewer]
    ops: [read]
`

// newConsoleTest is a console over a fake node; with tlsOn, identities
// and the ACL above are on.
func newConsoleTest(t *testing.T, tlsOn bool) *consoleTest {
	t.Helper()
	n := newFakeNode()
	n.members = []*coordv1.Member{{Id: "n1", Suffrage: "Voter", Leader: true, RaftAddress: "127.0.0.1:1", GrpcAddress: "127.0.0.1:2"},
		{Id: "n2", Suffrage: "Voter", RaftAddress: "127.0.0.1:3", GrpcAddress: "127.0.0.1:4"}}
	s := newTestServer(t, n)
	s.node = statusNode{n}
	if tlsOn {
		s.tls = &tlsutil.Reloader{}
		acl, err := auth.ParseACL([]byte(consoleACL))
		if err != nil {
			t.Fatal(err)
		}
		s.acl.Store(acl)
	}
	s.watch = newWatchService(s)
	c, err := s.newConsole()
	if err != nil {
		t.Fatal(err)
	}
	return &consoleTest{t: t, n: n, s: s, c: c, h: s.consoleHTTP(c), q: &queue{s: s}, sh: &schedules{s: s}}
}

// request is an HTTP request to the console as identity ("" for none).
func (ct *consoleTest) request(identity, method, path string, form url.Values, header map[string]string) *httptest.ResponseRecorder {
	ct.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, "https://console.test"+path, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		r.Header.Set(k, v)
	}
	if identity != "" {
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: identity}}
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	}
	w := httptest.NewRecorder()
	ct.h.ServeHTTP(w, r)
	return w
}

func (ct *consoleTest) get(identity, path string, want int) string {
	ct.t.Helper()
	w := ct.request(identity, "GET", path, nil, nil)
	if w.Code != want {
		ct.t.Fatalf("GET %s as %q: status %d, want %d\n%s", path, identity, w.Code, want, w.Body.String())
	}
	return w.Body.String()
}

func (ct *consoleTest) submit(jobs ...*coordv1.NewJob) []uint64 {
	ct.t.Helper()
	resp, err := ct.q.Submit(caller("ops"), &coordv1.QueueSubmitRequest{Jobs: jobs})
	if err != nil {
		ct.t.Fatal(err)
	}
	var ids []uint64
	for _, j := range resp.GetJobs() {
		ids = append(ids, j.GetId())
	}
	return ids
}

// deadJob submits a job and fails its only attempt for good.
func (ct *consoleTest) deadJob(queue, errText string) uint64 {
	ct.t.Helper()
	id := ct.submit(&coordv1.NewJob{Queue: queue, Kind: "charge", Args: []byte(`{"invoice":17}`), MaxAttempts: 1})[0]
	if _, err := ct.q.Fetch(caller("w"), &coordv1.QueueFetchRequest{Queues: []string{queue}, Max: 1, WorkerId: "w1"}); err != nil {
		ct.t.Fatal(err)
	}
	resp, err := ct.q.Fail(caller("w"), &coordv1.QueueFailRequest{WorkerId: "w1",
		Failures: []*coordv1.JobFailure{{JobId: id, Attempt: 1, Error: errText, Retryable: true}}})
	if err != nil || resp.GetResults()[0].GetError() != nil {
		ct.t.Fatalf("fail: %v %v", err, resp)
	}
	return id
}

func (ct *consoleTest) csrf(identity, page string) string {
	ct.t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(ct.get(identity, page, 200))
	if m == nil {
		ct.t.Fatalf("no CSRF token on %s", page)
	}
	return m[1]
}

func (ct *consoleTest) jobState(id uint64) fsm.JobState {
	ct.t.Helper()
	st, _, _ := ct.n.Read(context.Background(), true)
	j, ok := st.QueueJob(id)
	if !ok {
		ct.t.Fatalf("job %d gone", id)
	}
	return j.State
}

// Every page renders what the services return.
func TestConsolePagesRender(t *testing.T) {
	ct := newConsoleTest(t, true)
	if _, err := (&coordinator{s: ct.s}).Acquire(caller("ops"), &coordv1.AcquireRequest{Name: "billing/close", Owner: "worker-7", Ttl: pbtime.Dur(30_000)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ct.sh.PutSchedule(caller("ops"), &coordv1.PutScheduleRequest{Spec: everyMinute("nightly-report")}); err != nil {
		t.Fatal(err)
	}
	ct.s.clocks.mu.Lock() // as the leader's probe measured it
	ct.s.clocks.offsets["n2"] = &coordv1.ClockOffset{Id: "n2", Offset: pbtime.DurUs(1500), OffsetError: pbtime.DurUs(200), MeasuredAt: pbtime.At(ct.n.calendar)}
	ct.s.clocks.mu.Unlock()
	dead := ct.deadJob("billing", "card declined: insufficient funds")
	ct.n.apply(&fsmv1.FencedCommit{Resource: "ledger/accounts", LeaseName: "billing/close", Generation: 1})

	for _, c := range []struct {
		path string
		want []string
	}{
		{"/ui/", []string{"n1", "Leader", "42 / 41", "&#43;1.500 ms ± 0.200", "identity <b id=\"identity\">viewer</b>"}},
		{"/ui/leases?prefix=billing/", []string{"billing/close", "worker-7", `data-key="billing/close"`, "held", `data-family="lease"`}},
		{"/ui/queues", []string{`<svg class="chart"`, "billing", "sampled every 1m00s", "Throughput over the last 1h00m"}},
		{"/ui/jobs?state=dead", []string{fmt.Sprintf(`href="/ui/jobs/%d"`, dead), "charge", "dead"}},
		{fmt.Sprintf("/ui/jobs/%d", dead), []string{"card declined: insufficient funds", "job:" + fmt.Sprint(dead) + ":1", "&#34;invoice&#34;: 17", "w1"}},
		{"/ui/schedules", []string{"nightly-report", "@every 1m", "reports / report"}},
		{"/ui/schedules/nightly-report", []string{"Next occurrences", "@every 1m", `id="next-run"`}},
		{"/ui/resources?name=ledger/accounts", []string{"billing/close:1", `id="commits">1<`}},
		{"/ui/resources", []string{"look one up by name"}},
	} {
		body := ct.get("viewer", c.path, 200)
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: missing %q", c.path, w)
			}
		}
	}
	// A missing job is the API's 404, a bad state a 400.
	ct.get("viewer", "/ui/jobs/999", 404)
	ct.get("viewer", "/ui/jobs?state=bogus", 400)
	ct.get("viewer", "/ui/nope", 404)
	// Static assets are embedded.
	if b := ct.get("viewer", "/ui/static/console.js", 200); !strings.Contains(b, "EventSource") {
		t.Error("console.js not served")
	}
}

// Lists are paged, newest first; no page holds more than the page size.
func TestConsoleJobPaging(t *testing.T) {
	ct := newConsoleTest(t, false)
	var jobs []*coordv1.NewJob
	for range 120 {
		jobs = append(jobs, &coordv1.NewJob{Queue: "bulk", Kind: "k"})
	}
	ids := ct.submit(jobs...)
	rowID := regexp.MustCompile(`<td><a href="/ui/jobs/(\d+)">`)
	next := regexp.MustCompile(`id="next" href="([^"]+)"`)
	path, seen := "/ui/jobs?queue=bulk", []string{}
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("too many pages")
		}
		body := ct.get("", path, 200)
		rows := rowID.FindAllStringSubmatch(body, -1)
		if len(rows) > 50 {
			t.Fatalf("page of %d rows", len(rows))
		}
		for _, r := range rows {
			seen = append(seen, r[1])
		}
		path = ""
		if m := next.FindStringSubmatch(body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if len(seen) != 120 {
		t.Fatalf("saw %d jobs over the pages, want 120", len(seen))
	}
	for i, s := range seen { // newest first
		if want := fmt.Sprint(ids[len(ids)-1-i]); s != want {
			t.Fatalf("row %d is job %s, want %s", i, s, want)
		}
	}
}

// A read-only identity sees disabled buttons, and a retry it posts anyway
// is refused by the service with a clear message; an allowed identity
// retries.
func TestConsoleActionACL(t *testing.T) {
	ct := newConsoleTest(t, true)
	id := ct.deadJob("billing", "boom")
	page := fmt.Sprintf("/ui/jobs/%d", id)

	body := ct.get("viewer", page, 200)
	if !strings.Contains(body, `id="readonly"`) || !regexp.MustCompile(`id="retry" disabled`).MatchString(body) {
		t.Fatalf("viewer's retry button is not disabled:\n%s", body)
	}
	tok := ct.csrf("viewer", page)
	w := ct.request("viewer", "POST", page+"/retry", url.Values{"csrf": {tok}}, nil)
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "retry refused") ||
		!strings.Contains(w.Body.String(), `identity &#34;viewer&#34; may not job`) || !strings.Contains(w.Body.String(), "read-only") {
		t.Fatalf("viewer's retry: %d\n%s", w.Code, w.Body.String())
	}
	if st := ct.jobState(id); st != fsm.JobDead {
		t.Fatalf("job is %v after a refused retry", st)
	}

	if body := ct.get("ops", page, 200); strings.Contains(body, `id="readonly"`) {
		t.Fatal("ops is shown as read-only")
	}
	w = ct.request("ops", "POST", page+"/retry", url.Values{"csrf": {ct.csrf("ops", page)}}, nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != page+"?done=retry" {
		t.Fatalf("ops's retry: %d %v\n%s", w.Code, w.Header(), w.Body.String())
	}
	if st := ct.jobState(id); st != fsm.JobAvailable {
		t.Fatalf("job is %v after a retry", st)
	}
	if !strings.Contains(ct.get("ops", page+"?done=retry", 200), "Job retried") {
		t.Fatal("no confirmation after the redirect")
	}

	// Schedules: pause is the same story.
	if _, err := ct.sh.PutSchedule(caller("ops"), &coordv1.PutScheduleRequest{Spec: everyMinute("r1")}); err != nil {
		t.Fatal(err)
	}
	w = ct.request("viewer", "POST", "/ui/schedules/r1/pause", url.Values{"csrf": {tok}}, nil)
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "pause refused") {
		t.Fatalf("viewer's pause: %d\n%s", w.Code, w.Body.String())
	}
	w = ct.request("ops", "POST", "/ui/schedules/r1/pause", url.Values{"csrf": {ct.csrf("ops", "/ui/schedules/r1")}}, nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("ops's pause: %d\n%s", w.Code, w.Body.String())
	}
	if sc, _ := ct.n.fsm.Schedule("r1"); !sc.Paused {
		t.Fatal("not paused")
	}

	// Without a certificate: 401, as the HTTP API.
	ct.get("", "/ui/", http.StatusUnauthorized)
}

// Actions need a same-origin request carrying the token of this process
// for this identity.
func TestConsoleCSRF(t *testing.T) {
	ct := newConsoleTest(t, true)
	id := ct.deadJob("billing", "boom")
	page := fmt.Sprintf("/ui/jobs/%d", id)
	good := ct.csrf("ops", page)
	for _, c := range []struct {
		name   string
		form   url.Values
		header map[string]string
	}{
		{"no token", url.Values{}, nil},
		{"another identity's token", url.Values{"csrf": {ct.csrf("viewer", page)}}, nil},
		{"a forged token", url.Values{"csrf": {strings.Repeat("A", len(good))}}, nil},
		{"cross-site (Sec-Fetch-Site)", url.Values{"csrf": {good}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"cross-origin (Origin)", url.Values{"csrf": {good}}, map[string]string{"Origin": "https://evil.example"}},
	} {
		w := ct.request("ops", "POST", page+"/retry", c.form, c.header)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "Refused") {
			t.Errorf("%s: %d\n%s", c.name, w.Code, w.Body.String())
		}
	}
	if st := ct.jobState(id); st != fsm.JobDead {
		t.Fatalf("a refused form changed the job: %v", st)
	}
	// A console of another process (another node, or a restart) has
	// another key.
	other := newConsoleTest(t, true)
	if _, err := other.q.Submit(caller("ops"), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "billing", Kind: "k"}}}); err != nil {
		t.Fatal(err)
	}
	if w := other.request("ops", "POST", "/ui/jobs/1/cancel", url.Values{"csrf": {good}}, nil); w.Code != http.StatusForbidden {
		t.Fatalf("another process accepted the token: %d", w.Code)
	}
	// Same-origin with the token: accepted.
	w := ct.request("ops", "POST", page+"/retry", url.Values{"csrf": {good}}, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("same-origin retry: %d\n%s", w.Code, w.Body.String())
	}
}

// Without TLS (development) there are no identities and every action is
// allowed, as the HTTP API allows it.
func TestConsoleWithoutTLS(t *testing.T) {
	ct := newConsoleTest(t, false)
	id := ct.deadJob("default", "boom")
	page := fmt.Sprintf("/ui/jobs/%d", id)
	body := ct.get("", page, 200)
	if strings.Contains(body, `id="readonly"`) || !strings.Contains(body, "no TLS") {
		t.Fatalf("dev mode page:\n%s", body)
	}
	w := ct.request("", "POST", page+"/retry", url.Values{"csrf": {ct.csrf("", page)}}, nil)
	if w.Code != http.StatusSeeOther || ct.jobState(id) != fsm.JobAvailable {
		t.Fatalf("retry without TLS: %d %v", w.Code, ct.jobState(id))
	}
}

// The queues page shows each queue's limits (running against the
// concurrency limit, per-kind limits, the rate and its tokens now, the
// default max_run) and the job page a job's max_run and each attempt's
// end by it.
func TestConsoleShowsLimits(t *testing.T) {
	ct := newConsoleTest(t, true)
	if _, err := ct.q.SetLimits(caller("ops"), &coordv1.QueueSetLimitsRequest{Queue: "billing", Limits: &coordv1.QueueLimits{
		Queue: "billing", Concurrency: 3, KindConcurrency: map[string]uint32{"charge": 1, "refund": 2}, Rate: 5, Burst: 2,
		MaxRun: pbtime.Dur(120_000)}}); err != nil {
		t.Fatal(err)
	}
	id := ct.submit(&coordv1.NewJob{Queue: "billing", Kind: "charge", Args: []byte(`{}`), MaxRun: pbtime.Dur(90_000)})[0]
	if _, err := ct.q.Fetch(caller("w"), &coordv1.QueueFetchRequest{Queues: []string{"billing"}, Max: 1, WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	body := ct.get("viewer", "/ui/queues", 200)
	for _, w := range []string{`id="limits"`, ">1</a> / 3</td>", "charge: 1, refund: 2", "5/s, burst 2", "may start now", "2m00s", "ops"} {
		if !strings.Contains(body, w) {
			t.Errorf("/ui/queues: missing %q", w)
		}
	}
	body = ct.get("viewer", fmt.Sprintf("/ui/jobs/%d", id), 200)
	if !strings.Contains(body, `<span id="max-run">1m30s</span>`) {
		t.Errorf("job page: no max run of 1m30s")
	}
	if m := regexp.MustCompile(`<td class="run-until">([^<]*)</td>`).FindStringSubmatch(body); m == nil || m[1] == "–" {
		t.Errorf("job page: the running attempt's run-until cell is %v, want its end by max_run", m)
	}
}
