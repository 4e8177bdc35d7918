package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/fencehttp"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

type reply struct {
	status      int
	body        string
	contentType string
	replayed    bool
}

func post(t *testing.T, url, token, key, body string) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if token != "" {
		req.Header.Set(fencehttp.TokenHeader, token)
	}
	if key != "" {
		req.Header.Set(fencehttp.IdempotencyKeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), contentType: resp.Header.Get("Content-Type"),
		replayed: resp.Header.Get(fencehttp.ReplayedHeader) == "true"}
}

// A job paused past its TTL sends its write after the lease moved on: the
// API refuses it before the successor wrote anything. A retried request is
// answered from the stored response, and the ledger has each write once.
func TestPausedJobRefusedRetryReplayed(t *testing.T) {
	c := testcluster.New(t, 3)
	c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api, err := client.New(ctx, c.Endpoints(), client.WithOwner("ledger-api"))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ledger := &Ledger{}
	srv := httptest.NewServer(Handler(api, ledger, slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer srv.Close()
	url := srv.URL + "/stores/42/commission"

	// Job A acquires and "pauses": no renewals (raw Acquire, no keepalive).
	coord := coordv1.NewCoordinatorClient(c.Conn(c.Nodes[0]))
	a, err := coord.Acquire(ctx, &coordv1.AcquireRequest{Name: "ledger-close", Owner: "job-a", Ttl: durationpb.New(1500 * time.Millisecond)})
	if err != nil || !a.GetAcquired() {
		t.Fatalf("A: %v %v", a, err)
	}
	tokenA := client.FormatToken("ledger-close", a.GetLease().GetGeneration())

	// B takes over once A's lease expires (the SDK retries until then).
	jobB, err := client.New(ctx, c.Endpoints(), client.WithOwner("job-b"))
	if err != nil {
		t.Fatal(err)
	}
	defer jobB.Close()
	var lb *client.Lease
	c.Eventually("B acquires after A's TTL", 10*time.Second, func() bool {
		lb, err = jobB.Acquire(ctx, "ledger-close", 3*time.Second)
		return err == nil
	})
	defer lb.Release(context.Background())
	if lb.Generation() <= a.GetLease().GetGeneration() {
		t.Fatalf("B's generation %d is not above A's", lb.Generation())
	}

	// A wakes up and sends its write before B wrote anything: 409.
	r := post(t, url, tokenA, "ledger-2026-09-25-store-42", `{"amount":"42.00"}`)
	if r.status != http.StatusConflict || !strings.Contains(r.body, "STALE_TOKEN") {
		t.Fatalf("A's late write: %d %s", r.status, r.body)
	}
	if n := len(ledger.Entries()); n != 0 {
		t.Fatalf("A's refused write reached the ledger (%d entries)", n)
	}

	// B writes; its retry (the reply was lost, say) replays the first
	// response, and so do concurrent duplicates.
	first := post(t, url, lb.Token(), "ledger-2026-09-25-store-42", `{"amount":"42.00"}`)
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("B's write: %+v", first)
	}
	var wg sync.WaitGroup
	replies := make([]reply, 4)
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = post(t, url, lb.Token(), "ledger-2026-09-25-store-42", `{"amount":"42.00"}`)
		}()
	}
	wg.Wait()
	for _, again := range replies {
		if again.status != first.status || again.body != first.body || !again.replayed {
			t.Fatalf("retry: %+v, want the first response %+v replayed", again, first)
		}
	}
	// Even after the lease moved on, the key's answer stays the first one.
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if again := post(t, url, lb.Token(), "ledger-2026-09-25-store-42", `{"amount":"42.00"}`); again.body != first.body || !again.replayed {
		t.Fatalf("retry after release: %+v", again)
	}
	// But a new write with the released token is refused.
	if r := post(t, url, lb.Token(), "ledger-2026-09-25-store-43", `{"amount":"1.00"}`); r.status != http.StatusConflict {
		t.Fatalf("write with a released token: %+v", r)
	}

	entries := ledger.Entries()
	if len(entries) != 1 || entries[0].Token != lb.Token() {
		t.Fatalf("ledger: %+v, want B's one entry", entries)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(first.body), &body); err != nil || body["entry"] != float64(1) {
		t.Fatalf("first body: %s", first.body)
	}

	// Missing and malformed tokens never reach the handler.
	if r := post(t, url, "", "", `{"amount":"1"}`); r.status != http.StatusPreconditionRequired {
		t.Fatalf("no token: %+v", r)
	}
	if r := post(t, url, "ledger-close", "", `{"amount":"1"}`); r.status != http.StatusBadRequest {
		t.Fatalf("malformed token: %+v", r)
	}
	// A handler's 4xx is recorded too (the caller's mistake does not change
	// on retry); its 5xx would not be.
	l3, err := jobB.Acquire(ctx, "ledger-close", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Release(context.Background())
	bad := post(t, url, l3.Token(), "ledger-2026-09-26-store-42", `{}`)
	if bad.status != http.StatusBadRequest || bad.contentType != "application/json" || !json.Valid([]byte(bad.body)) {
		t.Fatalf("bad body: %+v, want 400 with a JSON body served as application/json", bad)
	}
	if again := post(t, url, l3.Token(), "ledger-2026-09-26-store-42", `{"amount":"2.00"}`); again.status != http.StatusBadRequest ||
		!again.replayed || again.contentType != "application/json" || again.body != bad.body {
		t.Fatalf("retry of a recorded 400: %+v, want %+v replayed", again, bad)
	}
}
