// Command fenced-api is an HTTP API that receives fencing tokens from the
// jobs that call it: a commission ledger. It cannot store tokens itself,
// so it fences every write through coordd with the fencehttp middleware:
//
//   - a job sends Fencing-Token: <lease>:<generation> and an
//     Idempotency-Key derived from the occurrence (ledger-2026-09-25-store-42);
//   - a token that is not the lease's current generation (a holder that
//     woke from a pause after its lease moved on) gets 409 and the handler
//     never runs;
//   - a retried request (same key) gets the first response back, replayed
//     from coordd, and the commission is written once.
//
// Its names are its own (lease ledger-close, resources ledger/store-{id},
// keys ledger-<day>-store-{id}). Run it against a single coordd and call it
// with curl (jq reads the token from coordctl's JSON):
//
//	go build -o bin/ ./cmd/coordd ./cmd/coordctl ./examples/fenced-api && export PATH=$PWD/bin:$PATH
//	coordd 2>/tmp/coordd.log & coordd_pid=$!
//	fenced-api --endpoints 127.0.0.1:7400 --listen 127.0.0.1:8080 2>/tmp/fenced-api.log & api_pid=$!
//	until coordctl status 2>/dev/null | grep -q Leader; do sleep 0.2; done
//	until curl -s 127.0.0.1:8080/ledger >/dev/null; do sleep 0.2; done
//	TOKEN=$(coordctl -o json lease acquire ledger-close --owner job-a --ttl 30s | jq -r '"\(.lease.name):\(.lease.generation)"')
//	curl -si --fail-with-body -X POST 127.0.0.1:8080/stores/42/commission -H "Fencing-Token: $TOKEN" -H "Idempotency-Key: ledger-2026-09-25-store-42" -d '{"amount":"42.00"}'
//	curl -si --fail-with-body -X POST 127.0.0.1:8080/stores/42/commission -H "Fencing-Token: $TOKEN" -H "Idempotency-Key: ledger-2026-09-25-store-42" -d '{"amount":"42.00"}'   # the same response, Idempotent-Replayed: true
//	coordctl lease release ledger-close --owner job-a --generation "${TOKEN##*:}"
//	coordctl lease acquire ledger-close --owner job-b --ttl 30s
//	curl -s --fail-with-body -X POST 127.0.0.1:8080/stores/43/commission -H "Fencing-Token: $TOKEN" -H "Idempotency-Key: ledger-2026-09-25-store-43" -d '{"amount":"43.00"}'   # 409 STALE_TOKEN: job-a's token (exit 22)
//	curl -s 127.0.0.1:8080/ledger
//	kill $api_pid $coordd_pid; wait
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/fencehttp"
)

// Ledger is the API's own store: commissions by store, in write order.
type Ledger struct {
	mu      sync.Mutex
	entries []Entry
}

// Entry is one written commission.
type Entry struct {
	Store  string `json:"store"`
	Amount string `json:"amount"`
	Token  string `json:"token"`
	Key    string `json:"idempotency_key"`
}

// Entries returns a copy of the ledger.
func (l *Ledger) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Entry(nil), l.entries...)
}

// Handler serves POST /stores/{id}/commission and GET /ledger; writes go
// through the fencing middleware, keyed by the resource ledger/store-{id}.
func Handler(c *client.Client, ledger *Ledger, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	fenced := fencehttp.Middleware(c, fencehttp.Options{
		Resource: func(r *http.Request) string { return "ledger/store-" + r.PathValue("id") },
		Logger:   log,
	})
	mux.Handle("POST /stores/{id}/commission", fenced(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Amount string `json:"amount"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil || body.Amount == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": `want {"amount": "…"}`})
			return
		}
		tok, _ := fencehttp.TokenFrom(r.Context())
		e := Entry{Store: r.PathValue("id"), Amount: body.Amount, Token: tok.Raw, Key: tok.IdempotencyKey}
		ledger.mu.Lock()
		ledger.entries = append(ledger.entries, e)
		n := len(ledger.entries)
		ledger.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"entry": n, "store": e.Store, "amount": e.Amount})
	})))
	mux.HandleFunc("GET /ledger", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ledger.Entries())
	})
	return mux
}

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7400", "coordd gRPC endpoints, comma-separated")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP listen address")
	cert := flag.String("tls-cert", "", "client certificate for a cluster running mutual TLS")
	key := flag.String("tls-key", "", "key of --tls-cert")
	ca := flag.String("tls-ca", "", "CA bundle of the cluster (turns TLS on)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var opts []client.Option
	if *ca != "" {
		opts = append(opts, client.WithTLSFiles(*cert, *key, *ca))
	}
	c, err := client.New(context.Background(), strings.Split(*endpoints, ","), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenced-api:", err)
		os.Exit(1)
	}
	defer c.Close()
	srv := &http.Server{Addr: *listen, Handler: Handler(c, &Ledger{}, log), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	log.Info("fenced-api listening", "addr", *listen)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "fenced-api:", err)
		os.Exit(1)
	}
}
