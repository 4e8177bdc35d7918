package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/testcluster"
)

// routesACL: app may do everything under app; stranger may only read
// under other/, so every call about app is refused.
const routesACL = `
rules:
  - name: nodes
    identities: [node*]
    ops: [admin]
  - name: app
    identities: [app]
    ops: [lease, window, fence, read, job, work]
    prefixes: [app]
  - name: stranger
    identities: [stranger]
    ops: [read]
    prefixes: [other/]
`

// httpRoute is one call of TestHTTPRoutes: app's call must answer want
// (and check its body); the stranger's same call 403 PERMISSION_DENIED
// (or denied: another status and reason) with a reason.
type httpRoute struct {
	name, method, path string
	body               any
	want               int
	check              func(t *testing.T, r httpResult)
	denied             int // 0: 403
	deniedReason       string
}

// Every route of coord_http.yaml through a follower (forwarded to the
// leader where the call needs it), over HTTPS with client certificates:
// app's call succeeds, the stranger's is refused with 403 and a reason by
// the same ACL as gRPC, a spoofed forwarding header changes nothing.
func TestHTTPRoutes(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, routesACL, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.HTTPAddr = "127.0.0.1:0" }))
	c.WaitLeader()
	base := "https://" + c.Followers()[0].API.HTTPAddr()
	app, stranger := httpsClient(certs.Client("app")), httpsClient(certs.Client("stranger"))
	var gen, jobID, attempt string
	field := func(r httpResult, path ...string) any {
		var v any = r.body
		for _, p := range path {
			m, _ := v.(map[string]any)
			v = m[p]
		}
		return v
	}
	// is checks that the answer's field at path is v; count that the
	// list at key has n items.
	is := func(v any, path ...string) func(*testing.T, httpResult) {
		return func(t *testing.T, r httpResult) {
			if got := field(r, path...); got != v {
				t.Fatalf("%v = %v, want %v: %v", path, got, v, r.body)
			}
		}
	}
	count := func(key string, n int) func(*testing.T, httpResult) {
		return func(t *testing.T, r httpResult) {
			if l, _ := field(r, key).([]any); len(l) != n {
				t.Fatalf("%d %s, want %d: %v", len(l), key, n, r.body)
			}
		}
	}
	routes := []httpRoute{
		{name: "acquire", method: "POST", path: "/v1/leases/app/close/acquire", body: map[string]any{"owner": "w1", "ttl": "10s"}, want: 200,
			check: func(t *testing.T, r httpResult) {
				if field(r, "acquired") != true {
					t.Fatalf("not acquired: %v", r.body)
				}
				gen = field(r, "lease", "generation").(string)
			}},
		{name: "renew", method: "POST", path: "/v1/leases/app/close/renew", body: func() any { return map[string]any{"owner": "w1", "generation": gen, "ttl": "10s"} }, want: 200},
		{name: "get lease", method: "GET", path: "/v1/leases/app/close", want: 200,
			check: is("w1", "lease", "owner")},
		{name: "list leases", method: "GET", path: "/v1/leases?prefix=app/&page_size=10", want: 200,
			check: count("leases", 1)},
		{name: "claim window", method: "POST", path: "/v1/windows/app/close/2026-09-25/claim",
			body: func() any { return map[string]any{"lease_name": "app/close", "owner": "w1", "generation": gen} }, want: 200,
			check: is(true, "claimed")},
		{name: "complete window", method: "POST", path: "/v1/windows/app/close/2026-09-25/complete",
			body: func() any { return map[string]any{"lease_name": "app/close", "owner": "w1", "generation": gen} }, want: 200},
		{name: "get window", method: "GET", path: "/v1/windows/app/close/2026-09-25", want: 200,
			check: is("app/close", "window", "job")},
		{name: "list windows", method: "GET", path: "/v1/windows?job=app/close", want: 200,
			check: count("windows", 1)},
		{name: "fenced commit", method: "POST", path: "/v1/fence/commit",
			body: func() any { return map[string]any{"resource": "app/store", "token": "app/close:" + gen} }, want: 200},
		{name: "get resource", method: "GET", path: "/v1/resources/app/store", want: 200},
		{name: "release", method: "POST", path: "/v1/leases/app/close/release", body: func() any { return map[string]any{"owner": "w1", "generation": gen} }, want: 200,
			check: is(true, "released")},
		{name: "submit", method: "POST", path: "/v1/queue/jobs", body: map[string]any{"jobs": []any{map[string]any{"queue": "app", "kind": "close"}}}, want: 200,
			check: func(t *testing.T, r httpResult) { jobID = field(r, "jobs").([]any)[0].(map[string]any)["id"].(string) }},
		{name: "get job", method: "GET", path: "/v1/queue/jobs/{id}", want: 200, denied: 403, deniedReason: "PERMISSION_DENIED"},
		{name: "list jobs", method: "GET", path: "/v1/queue/jobs?queue=app", want: 200},
		{name: "stats", method: "GET", path: "/v1/queue/stats?queue=app", want: 200},
		{name: "fetch", method: "POST", path: "/v1/queue/fetch", body: map[string]any{"queues": []any{"app"}, "max": 1, "wait": "5s", "worker_id": "curl-1"}, want: 200,
			check: func(t *testing.T, r httpResult) {
				jobs, _ := field(r, "jobs").([]any)
				if len(jobs) != 1 {
					t.Fatalf("fetch: %v", r.body)
				}
				attempt = fmt.Sprint(jobs[0].(map[string]any)["attempt"].(map[string]any)["number"])
			}},
		// Heartbeat, Complete and Fail are bound to the identity that
		// fetched the attempt: the stranger's one item is refused as that
		// item's IDENTITY_MISMATCH, as the HTTP status.
		{name: "heartbeat", method: "POST", path: "/v1/queue/heartbeat",
			body: func() any {
				return map[string]any{"worker_id": "curl-1", "attempts": []any{map[string]any{"job_id": jobID, "attempt": attempt}}}
			}, want: 200, deniedReason: "IDENTITY_MISMATCH"},
		{name: "fail", method: "POST", path: "/v1/queue/fail",
			body: func() any {
				return map[string]any{"worker_id": "curl-1", "failures": []any{map[string]any{"job_id": jobID, "attempt": attempt, "error": "x", "retryable": true}}}
			}, want: 200, deniedReason: "IDENTITY_MISMATCH"},
		{name: "retry", method: "POST", path: "/v1/queue/jobs/{id}/retry", body: map[string]any{}, want: 200, denied: 403},
		{name: "fetch again", method: "POST", path: "/v1/queue/fetch", body: map[string]any{"queues": []any{"app"}, "max": 1, "wait": "5s", "worker_id": "curl-1"}, want: 200,
			check: func(t *testing.T, r httpResult) {
				attempt = fmt.Sprint(field(r, "jobs").([]any)[0].(map[string]any)["attempt"].(map[string]any)["number"])
			}},
		{name: "complete", method: "POST", path: "/v1/queue/complete",
			body: func() any {
				return map[string]any{"worker_id": "curl-1", "completions": []any{map[string]any{"job_id": jobID, "attempt": attempt}}}
			}, want: 200, deniedReason: "IDENTITY_MISMATCH"},
		{name: "cancel", method: "POST", path: "/v1/queue/jobs/{id}/cancel", body: map[string]any{}, want: 409, denied: 403},
		{name: "pause queue", method: "POST", path: "/v1/queue/queues/app/pause", body: map[string]any{}, want: 200, check: is("app", "pause", "paused_by")},
		{name: "resume queue", method: "POST", path: "/v1/queue/queues/app/resume", body: map[string]any{}, want: 200, check: is(true, "was_paused")},
		{name: "bulk dry run", method: "POST", path: "/v1/queue/bulk", body: map[string]any{"action": "RETRY", "filter": map[string]any{"queue": "app"}, "dry_run": true},
			want: 200, check: is("1", "count")},
		{name: "delete job", method: "DELETE", path: "/v1/queue/jobs/{id}", want: 200, denied: 403},
		{name: "put schedule", method: "POST", path: "/v1/schedules",
			body: map[string]any{"name": "app-daily", "schedule": "0 2 * * *", "job": map[string]any{"queue": "app", "kind": "close"}}, want: 200},
		{name: "get schedule", method: "GET", path: "/v1/schedules/app-daily", want: 200, denied: 403},
		{name: "list schedules", method: "GET", path: "/v1/schedules?prefix=app", want: 200},
		{name: "pause schedule", method: "POST", path: "/v1/schedules/app-daily/pause", body: map[string]any{}, want: 200},
		{name: "resume schedule", method: "POST", path: "/v1/schedules/app-daily/resume", body: map[string]any{}, want: 200},
		{name: "trigger schedule", method: "POST", path: "/v1/schedules/app-daily/trigger", body: map[string]any{}, want: 200},
		{name: "overdue", method: "GET", path: "/v1/overdue?schedule=app-daily", want: 200},
		{name: "delete schedule", method: "DELETE", path: "/v1/schedules/app-daily", want: 200},
	}
	for _, rt := range routes {
		path := strings.ReplaceAll(rt.path, "{id}", jobID)
		body := rt.body
		if f, ok := body.(func() any); ok {
			body = f()
		}
		// The stranger first (a refusal changes nothing), with a forged
		// forwarding identity that no node may believe from a client.
		denied := doJSONHeader(t, stranger, rt.method, base+path, body, http.Header{"Grpc-Metadata-Coordd-Identity": {"app"}})
		want, reason := rt.denied, rt.deniedReason
		if want == 0 {
			want = 403
		}
		if reason == "" {
			reason = "PERMISSION_DENIED"
		}
		if denied.status != want || denied.body["reason"] != reason || denied.body["message"] == "" {
			t.Fatalf("%s %s as stranger: %d %v, want %d %s", rt.method, path, denied.status, denied.body, want, reason)
		}
		r := doJSON(t, app, rt.method, base+path, body)
		if r.status != rt.want {
			t.Fatalf("%s %s: %d %v, want %d", rt.method, path, r.status, r.body, rt.want)
		}
		if rt.check != nil {
			rt.check(t, r)
		}
	}

	// The cluster's reads are open to any verified identity, not to none.
	for _, p := range []string{"/v1/cluster/status", "/v1/cluster/members"} {
		wantHTTP(t, p, doJSON(t, stranger, "GET", base+p, nil), 200, "")
		wantHTTP(t, p+" anonymous", doJSON(t, httpsClient(certs.Client("")), "GET", base+p, nil), 401, "UNAUTHENTICATED")
	}
	if r := doJSON(t, app, "GET", base+"/v1/cluster/members", nil); len(field(r, "members").([]any)) != 3 {
		t.Fatalf("members: %v", r.body)
	}

	// Watch: a stranger is refused before the stream starts, in the one
	// error body; app reads NDJSON and resumes where a line said.
	wantHTTP(t, "watch as stranger", doJSON(t, stranger, "GET", base+"/v1/watch?prefix=app/", nil), 403, "PERMISSION_DENIED")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/watch?prefix=app/&families=LEASE", nil)
	resp, err := app.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch: %v %v", resp, err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	next := func() map[string]any {
		if !lines.Scan() {
			t.Fatalf("watch ended: %v", lines.Err())
		}
		var m struct {
			Result map[string]any `json:"result"`
			Error  any            `json:"error"`
		}
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil || m.Result == nil {
			t.Fatalf("watch line %q: %v", lines.Text(), err)
		}
		return m.Result
	}
	first := next()
	if first["resume_index"] == "0" || first["resume_index"] == nil {
		t.Fatalf("first watch message: %v", first)
	}
	wantHTTP(t, "acquire watched", doJSON(t, app, "POST", base+"/v1/leases/app/watched/acquire", map[string]any{"owner": "w", "ttl": "10s"}), 200, "")
	firstEvent := func() {
		for {
			m := next()
			if evs, _ := m["events"].([]any); len(evs) > 0 {
				if evs[0].(map[string]any)["key"] != "app/watched" {
					t.Fatalf("watch event: %v", m)
				}
				return
			}
		}
	}
	firstEvent()
	// Resumed from the first line's position: the same event again.
	resp.Body.Close()
	req, _ = http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/watch?prefix=app/&start_index=%s&start_position=%v",
		base, first["resume_index"], first["resume_position"]), nil)
	if resp, err = app.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("resumed watch: %v %v", resp, err)
	}
	defer resp.Body.Close()
	lines = bufio.NewScanner(resp.Body)
	firstEvent()
}

// doJSONHeader is doJSON with extra request headers.
func doJSONHeader(t *testing.T, hc *http.Client, method, url string, body any, h http.Header) httpResult {
	t.Helper()
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	hc2 := *hc
	hc2.Transport = headerTransport{rt: rt, h: h}
	return doJSON(t, &hc2, method, url, body)
}

type headerTransport struct {
	rt http.RoundTripper
	h  http.Header
}

func (x headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range x.h {
		r.Header[k] = v
	}
	return x.rt.RoundTrip(r)
}

// The HTTP conventions: 405 with Allow for a wrong method, 404 for an
// unknown path, the list without a name, a worker call of one refused
// item answering the item's refusal as its status (a batch answers 200
// with results[i].error), bad JSON and unknown fields 400: always the one
// error body. And the OpenAPI document.
func TestHTTPConventions(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.HTTPAddr = "127.0.0.1:0" }))
	base := "http://" + c.WaitLeader().API.HTTPAddr()
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/queue/jobs", "GET, POST"},
		{"DELETE", "/v1/leases/a/acquire", "GET, POST"}, // GET: the lease "a/acquire"
		{"POST", "/v1/leases/a", "GET"},
		{"GET", "/v1/fence/commit", "POST"},
		{"POST", "/v1/schedules/x", "GET, DELETE"},
	} {
		r := doJSON(t, hc, tc.method, base+tc.path, "{}")
		if r.status != 405 || r.header.Get("Allow") != tc.allow || r.body["reason"] != "INVALID_ARGUMENT" ||
			r.body["metadata"].(map[string]any)["allow"] != tc.allow {
			t.Fatalf("%s %s: %d Allow %q %v, want 405 Allow %q", tc.method, tc.path, r.status, r.header.Get("Allow"), r.body, tc.allow)
		}
	}
	wantHTTP(t, "unknown path", doJSON(t, hc, "GET", base+"/v1/nope", nil), 404, "NOT_FOUND")
	wantHTTP(t, "list leases", doJSON(t, hc, "GET", base+"/v1/leases", nil), 200, "")
	wantHTTP(t, "list windows", doJSON(t, hc, "GET", base+"/v1/windows", nil), 400, "INVALID_ARGUMENT") // a job is required
	wantHTTP(t, "unknown field", doJSON(t, hc, "POST", base+"/v1/leases/a/acquire", `{"owner":"o","ttl":"5s","tll":1}`), 400, "INVALID_ARGUMENT")
	wantHTTP(t, "bad json", doJSON(t, hc, "POST", base+"/v1/queue/fetch", `{"queues":`), 400, "INVALID_ARGUMENT")
	wantHTTP(t, "wrong type", doJSON(t, hc, "POST", base+"/v1/queue/fetch", `{"queues":"q"}`), 400, "INVALID_ARGUMENT")
	wantHTTP(t, "invalid UTF-8", doJSON(t, hc, "POST", base+"/v1/queue/fetch", "{\"queues\":[\"q\xff\"],\"worker_id\":\"w\"}"), 400, "INVALID_ARGUMENT")

	// One refused item: its refusal. Two: 200 and the items' errors.
	sub := doJSON(t, hc, "POST", base+"/v1/queue/jobs", map[string]any{"jobs": []any{map[string]any{"queue": "q", "kind": "k"}}})
	id := sub.body["jobs"].([]any)[0].(map[string]any)["id"]
	wantHTTP(t, "fetch", doJSON(t, hc, "POST", base+"/v1/queue/fetch", map[string]any{"queues": []any{"q"}, "max": 1, "worker_id": "w1"}), 200, "")
	one := map[string]any{"worker_id": "w2", "completions": []any{map[string]any{"job_id": id, "attempt": 1}}}
	r := doJSON(t, hc, "POST", base+"/v1/queue/complete", one)
	wantHTTP(t, "one refused item", r, 409, "ATTEMPT_LOST")
	if r.body["code"] != "FAILED_PRECONDITION" || r.body["message"] == "" {
		t.Fatalf("one refused item: %v", r.body)
	}
	two := map[string]any{"worker_id": "w2", "completions": []any{map[string]any{"job_id": id, "attempt": 1}, map[string]any{"job_id": id, "attempt": 2}}}
	r = doJSON(t, hc, "POST", base+"/v1/queue/complete", two)
	wantHTTP(t, "a batch", r, 200, "")
	if res := r.body["results"].([]any); len(res) != 2 || res[0].(map[string]any)["error"].(map[string]any)["reason"] != "ATTEMPT_LOST" {
		t.Fatalf("a batch: %v", r.body)
	}
	one["worker_id"] = "w1"
	wantHTTP(t, "one accepted item", doJSON(t, hc, "POST", base+"/v1/queue/complete", one), 200, "")

	// A waiting acquire ends at the request's Grpc-Timeout: 504 TIMEOUT.
	wantHTTP(t, "hold", doJSON(t, hc, "POST", base+"/v1/leases/held/acquire", map[string]any{"owner": "a", "ttl": "30s"}), 200, "")
	start := time.Now()
	r = doJSONHeader(t, hc, "POST", base+"/v1/leases/held/acquire", map[string]any{"owner": "b", "ttl": "30s", "wait": true},
		http.Header{"Grpc-Timeout": {"500m"}})
	wantHTTP(t, "waiting acquire", r, 504, "TIMEOUT")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the wait took %v", d)
	}
	// Lists page.
	wantHTTP(t, "second lease", doJSON(t, hc, "POST", base+"/v1/leases/held2/acquire", map[string]any{"owner": "a", "ttl": "30s"}), 200, "")
	r = doJSON(t, hc, "GET", base+"/v1/leases?prefix=held&page_size=1", nil)
	if l := r.body["leases"].([]any); len(l) != 1 || r.body["next_page_token"] == "" {
		t.Fatalf("page 1: %v", r.body)
	}
	r = doJSON(t, hc, "GET", base+"/v1/leases?prefix=held&page_size=1&page_token="+r.body["next_page_token"].(string), nil)
	if l := r.body["leases"].([]any); len(l) != 1 || l[0].(map[string]any)["name"] != "held2" {
		t.Fatalf("page 2: %v", r.body)
	}

	r = doJSON(t, hc, "GET", base+"/v1/openapi.json", nil)
	if r.status != 200 || r.body["openapi"] == nil || r.body["paths"].(map[string]any)["/v1/leases/{name}/acquire"] == nil {
		t.Fatalf("openapi: %d %v", r.status, r.body["openapi"])
	}
}

// An HTTP watch quiet for longer than the write timeout still delivers the
// next change: each line has its own write deadline, none while quiet (as
// the console's stream, TestConsoleStreamOutlivesTheWriteTimeout).
func TestHTTPWatchOutlivesTheWriteTimeout(t *testing.T) {
	streamOutlivesTheWriteTimeout(t, "/v1/watch?prefix=billing/",
		func(line, proto string) bool { return strings.Contains(line, `"key":"billing/`+proto+`"`) })
}

// A waiting acquire without a Grpc-Timeout answers 504 TIMEOUT before the
// write timeout would cut its connection; the OpenAPI document needs no
// certificate (it is the same for everyone), the API does.
func TestHTTPWaitEndsBeforeTheWriteTimeout(t *testing.T) {
	n, certs := limitedCluster(t, func(cfg *testcluster.Config) { cfg.API.HTTPWriteTimeout = time.Second })
	acquire(t, coordAs(t, certs, n, "billing-worker"), "billing/held", "w1", 30*time.Second)
	base := "https://" + n.API.HTTPAddr()
	r := doJSON(t, httpsClient(certs.Client("billing-worker")), "POST", base+"/v1/leases/billing/held/acquire",
		map[string]any{"owner": "w2", "ttl": "30s", "wait": true})
	wantHTTP(t, "waiting acquire", r, 504, "TIMEOUT")
	anon := httpsClient(certs.Client(""))
	if r := doJSON(t, anon, "GET", base+"/v1/openapi.json", nil); r.status != 200 || r.body["openapi"] == nil {
		t.Fatalf("openapi without a certificate: %d", r.status)
	}
	wantHTTP(t, "API without a certificate", doJSON(t, anon, "GET", base+"/v1/leases", nil), 401, "UNAUTHENTICATED")
}
