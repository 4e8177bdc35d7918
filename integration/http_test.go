package integration

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

type httpResult struct {
	status int
	header http.Header
	body   map[string]any
}

func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func doJSON(t *testing.T, hc *http.Client, method, url string, body any) httpResult {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out := httpResult{status: resp.StatusCode, header: resp.Header}
	data, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") == "application/json" && len(data) > 0 {
		if err := json.Unmarshal(data, &out.body); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, url, data, err)
		}
	}
	return out
}

func wantHTTP(t *testing.T, what string, got httpResult, status int, reason string) {
	t.Helper()
	if got.status != status || (reason != "" && got.body["reason"] != reason) {
		t.Fatalf("%s: got %d %v, want %d %s", what, got.status, got.body, status, reason)
	}
}

func TestHTTPAPI(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, securityACL, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.HTTPAddr = "127.0.0.1:0" }))
	leader := c.WaitLeader()
	follower := c.Followers()[0]
	billing := coordAs(t, certs, leader, "billing-worker")
	l := acquire(t, billing, "billing/close", "w1", 3*time.Second)

	ledger := httpsClient(certs.Client("ledger-api"))
	base := "https://" + follower.API.HTTPAddr() // a follower: the call is forwarded
	token := "billing/close:1"

	// Commit with the token form, dry run: nothing recorded.
	r := doJSON(t, ledger, "POST", base+"/v1/fence/commit", map[string]any{"resource": "ledger/store-42", "token": token, "dry_run": true})
	wantHTTP(t, "dry run", r, 200, "")
	if r.body["accepted"] != true || r.body["dry_run"] != true || r.body["lease_name"] != "billing/close" {
		t.Fatalf("dry run body: %v", r.body)
	}
	// Commit with a key and a payload (a JSON value, embedded as it is).
	payload := map[string]any{"store": 42.0, "total": "42.00"}
	commit := map[string]any{"resource": "ledger/store-42", "lease_name": "billing/close", "generation": "1",
		"idempotency_key": "close-2026-09-25-store-42", "payload": payload}
	r = doJSON(t, ledger, "POST", base+"/v1/fence/commit", commit)
	wantHTTP(t, "commit", r, 200, "")
	if r.body["accepted"] != true || r.body["duplicate"] != false || r.body["max_generation"] != "1" {
		t.Fatalf("commit body: %v", r.body)
	}
	// The same key again: the first outcome, with its payload.
	r = doJSON(t, ledger, "POST", base+"/v1/fence/commit", commit)
	if r.status != 200 || r.body["duplicate"] != true || !reflect.DeepEqual(r.body["payload"], payload) {
		t.Fatalf("repeat: %d %v", r.status, r.body)
	}

	// The lease moves on: the old token is 409.
	if _, err := billing.Release(ctxT(t), &coordv1.ReleaseRequest{Name: "billing/close", Owner: "w1", Generation: l.GetGeneration()}); err != nil {
		t.Fatal(err)
	}
	acquire(t, billing, "billing/close", "w2", 3*time.Second)
	r = doJSON(t, ledger, "POST", base+"/v1/fence/commit", map[string]any{"resource": "ledger/store-42", "token": token})
	wantHTTP(t, "stale token", r, 409, "STALE_TOKEN")
	if r.body["code"] != "FAILED_PRECONDITION" || r.body["metadata"].(map[string]any)["current_generation"] != "2" {
		t.Fatalf("stale body: %v", r.body)
	}

	// Denied: a resource outside ledger-api's prefix.
	r = doJSON(t, ledger, "POST", base+"/v1/fence/commit", map[string]any{"resource": "hr/x", "token": "billing/close:2"})
	wantHTTP(t, "denied", r, 403, "PERMISSION_DENIED")
	if r.body["metadata"].(map[string]any)["rule"] != auth.DefaultDenyRule {
		t.Fatalf("denial names no rule: %v", r.body)
	}

	// Bad input: a malformed token, both token forms, neither, a missing
	// resource (each naming the field), broken JSON, an unknown field.
	for name, c := range map[string]struct {
		body  any
		field string
	}{
		"token without colon":       {map[string]any{"resource": "ledger/a", "token": "no-generation"}, "token"},
		"non-numeric generation":    {map[string]any{"resource": "ledger/a", "token": "billing/close:x"}, "token"},
		"generation 0":              {map[string]any{"resource": "ledger/a", "token": "billing/close:0"}, "token"},
		"token and lease_name":      {map[string]any{"resource": "ledger/a", "token": "billing/close:2", "lease_name": "billing/close"}, "token"},
		"token and generation":      {map[string]any{"resource": "ledger/a", "token": "billing/close:2", "generation": "2"}, "token"},
		"neither token nor a lease": {map[string]any{"resource": "ledger/a", "generation": "2"}, "lease_name"},
		"lease without generation":  {map[string]any{"resource": "ledger/a", "lease_name": "billing/close"}, "generation"},
		"no resource":               {map[string]any{"token": "billing/close:2"}, "resource"},
		"broken json":               {`{"resource": `, ""},
		"unknown field":             {map[string]any{"resource": "ledger/a", "token": "billing/close:2", "tokn": 1}, ""},
	} {
		r := doJSON(t, ledger, "POST", base+"/v1/fence/commit", c.body)
		wantHTTP(t, name, r, 400, "INVALID_ARGUMENT")
		if c.field != "" {
			if meta, _ := r.body["metadata"].(map[string]any); meta["field"] != c.field {
				t.Fatalf("%s: want field %q: %v", name, c.field, r.body)
			}
		}
	}

	// Reads: a lease by name (with slashes), a missing one.
	ops := httpsClient(certs.Client("ops"))
	r = doJSON(t, ops, "GET", base+"/v1/leases/billing/close", nil)
	if r.status != 200 || r.body["lease"].(map[string]any)["generation"] != "2" ||
		r.body["lease"].(map[string]any)["identity"] != "billing-worker" {
		t.Fatalf("get lease: %d %v", r.status, r.body)
	}
	wantHTTP(t, "missing lease", doJSON(t, ops, "GET", base+"/v1/leases/nope", nil), 404, "NOT_FOUND")
	r = doJSON(t, ops, "GET", base+"/v1/resources/ledger/store-42", nil)
	if r.status != 200 || r.body["resource"].(map[string]any)["max_generation"] != "1" {
		t.Fatalf("get resource: %d %v", r.status, r.body)
	}

	// No client certificate: the API and metrics are 401 (listener_test.go
	// has the rest of the metrics rule), health is open.
	anon := httpsClient(certs.Client(""))
	wantHTTP(t, "anonymous", doJSON(t, anon, "GET", base+"/v1/leases/billing/close", nil), 401, "UNAUTHENTICATED")
	wantHTTP(t, "anonymous metrics", doJSON(t, anon, "GET", base+"/metrics", nil), 401, "UNAUTHENTICATED")
	if r := doJSON(t, anon, "GET", base+"/healthz", nil); r.status != 200 {
		t.Fatalf("health without a client certificate: %d", r.status)
	}

	// No leader: 503 with Retry-After.
	for _, n := range c.Running() {
		if n != follower {
			c.Stop(n)
		}
	}
	c.Eventually("503 without a leader", 10*time.Second, func() bool {
		r = doJSON(t, ledger, "POST", base+"/v1/fence/commit", map[string]any{"resource": "ledger/store-42", "token": "billing/close:2", "dry_run": true})
		return r.status == 503
	})
	if r.header.Get("Retry-After") == "" || r.body["code"] != "UNAVAILABLE" {
		t.Fatalf("503: %v %v", r.header, r.body)
	}
}
