package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The HTTP/JSON workloads: the cycles of acquire-release and queue-single
// over the HTTP gateway (docs/http-api.md) with net/http and keep-alive
// connections, next to the gRPC ones in one run.
//
//	http-acquire-release  POST /v1/leases/{name}/acquire then /release, a fresh name per cycle
//	http-queue            clients submitters, one job per POST /v1/queue/jobs;
//	                      --queue-workers workers POST /v1/queue/fetch (--fetch-max,
//	                      "wait": "1s") and /v1/queue/complete for each batch
//	                      (the shape of queue-single with --queue-raw)
//
// Requests go to the nodes' HTTP addresses (--http-endpoints, or the
// cluster's with --cluster): round-robin, one node after the other per
// request, by default; with --first leader all to the leader, with --first
// follower all to one follower (which forwards to the leader).

// httpAPI is the HTTP/JSON client of one workload run: one transport with
// a keep-alive connection per concurrent request.
type httpAPI struct {
	hc   *http.Client
	eps  []string // base URLs, http://host:port
	pin  bool     // every request to eps[0]
	next atomic.Uint64
}

func newHTTPAPI(cfg config, conns int) (*httpAPI, error) {
	if len(cfg.httpEndpoints) == 0 {
		return nil, errors.New("the HTTP workloads need --http-endpoints or --cluster")
	}
	tr := &http.Transport{MaxIdleConns: 0, MaxIdleConnsPerHost: conns + 8, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	return &httpAPI{hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}, eps: cfg.httpEndpoints, pin: cfg.first != ""}, nil
}

func (h *httpAPI) close() { h.hc.CloseIdleConnections() }

// base is the node the next request goes to.
func (h *httpAPI) base() string {
	if h.pin {
		return h.eps[0]
	}
	return h.eps[(h.next.Add(1)-1)%uint64(len(h.eps))]
}

// httpError is a non-200 answer: the API's one error body.
type httpError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (e *httpError) Error() string {
	return fmt.Sprintf("HTTP %d %s %s: %s", e.Status, e.Code, e.Reason, e.Message)
}

// post sends in as JSON to path on the next node and decodes a 200 answer
// into out; the body is read to its end, so the connection is reused.
func (h *httpAPI) post(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base()+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		e := &httpError{Status: resp.StatusCode}
		_ = json.Unmarshal(body, e)
		return e
	}
	return json.Unmarshal(body, out)
}

// The wire (docs/http-api.md): the request and answer fields the
// workloads use. 64-bit integers are strings in answers; durations are
// "<seconds>s"; instants RFC 3339.
type (
	httpAcquire struct {
		Owner string `json:"owner"`
		TTL   string `json:"ttl"`
	}
	httpAcquired struct {
		Acquired bool `json:"acquired"`
		Lease    struct {
			Generation string `json:"generation"`
		} `json:"lease"`
	}
	httpRelease struct {
		Owner      string `json:"owner"`
		Generation string `json:"generation"`
	}
	httpSubmit struct {
		Jobs []httpNewJob `json:"jobs"`
	}
	httpNewJob struct {
		Queue string `json:"queue"`
		Kind  string `json:"kind"`
	}
	httpFetch struct {
		Queues   []string `json:"queues"`
		Max      int      `json:"max"`
		Wait     string   `json:"wait"`
		WorkerID string   `json:"worker_id"`
	}
	httpFetched struct {
		Jobs []struct {
			Job struct {
				ID    string    `json:"id"`
				RunAt time.Time `json:"run_at"`
			} `json:"job"`
			Attempt struct {
				Number uint32 `json:"number"`
			} `json:"attempt"`
		} `json:"jobs"`
	}
	httpComplete struct {
		WorkerID    string           `json:"worker_id"`
		Completions []httpCompletion `json:"completions"`
	}
	httpCompletion struct {
		JobID   string `json:"job_id"`
		Attempt uint32 `json:"attempt"`
	}
	httpCompleted struct {
		Results []struct {
			Error *httpError `json:"error"`
		} `json:"results"`
	}
)

// jobs converts a fetch answer to the raw workers' jobs.
func (f *httpFetched) jobs() ([]fetchedJob, error) {
	out := make([]fetchedJob, 0, len(f.Jobs))
	for _, cl := range f.Jobs {
		id, err := strconv.ParseUint(cl.Job.ID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("job id %q: %w", cl.Job.ID, err)
		}
		out = append(out, fetchedJob{id: id, attempt: cl.Attempt.Number, runAtMs: cl.Job.RunAt.UnixMilli()})
	}
	return out, nil
}

// acquireRelease acquires name for owner and releases it.
func (h *httpAPI) acquireRelease(ctx context.Context, name, owner string) error {
	var acq httpAcquired
	if err := h.post(ctx, "/v1/leases/"+name+"/acquire", httpAcquire{Owner: owner, TTL: "10s"}, &acq); err != nil {
		return err
	}
	if !acq.Acquired {
		return fmt.Errorf("lease %s not acquired", name)
	}
	var rel struct{}
	return h.post(ctx, "/v1/leases/"+name+"/release", httpRelease{Owner: owner, Generation: acq.Lease.Generation}, &rel)
}

func (h *httpAPI) submit(ctx context.Context, queue string) error {
	var out struct{}
	return h.post(ctx, "/v1/queue/jobs", httpSubmit{Jobs: []httpNewJob{{Queue: queue, Kind: "noop"}}}, &out)
}

func (h *httpAPI) fetcher(queue string) func(context.Context, string) ([]fetchedJob, error) {
	return func(ctx context.Context, worker string) ([]fetchedJob, error) {
		var out httpFetched
		if err := h.post(ctx, "/v1/queue/fetch", httpFetch{Queues: []string{queue}, Max: qcfg.fetchMax, Wait: "1s", WorkerID: worker}, &out); err != nil {
			return nil, err
		}
		return out.jobs()
	}
}

func (h *httpAPI) complete(ctx context.Context, worker string, jobs []fetchedJob) error {
	in := httpComplete{WorkerID: worker, Completions: make([]httpCompletion, len(jobs))}
	for i, j := range jobs {
		in.Completions[i] = httpCompletion{JobID: strconv.FormatUint(j.id, 10), Attempt: j.attempt}
	}
	var out httpCompleted
	if err := h.post(ctx, "/v1/queue/complete", in, &out); err != nil {
		return err
	}
	for _, r := range out.Results {
		if r.Error != nil {
			return fmt.Errorf("completion refused: %s: %s", r.Error.Reason, r.Error.Message)
		}
	}
	return nil
}

// routeTag is how an HTTP line says where its requests went.
func routeTag(cfg config) string {
	if cfg.first == "" {
		return "round-robin"
	}
	return cfg.first
}

func httpAcquireRelease(ctx context.Context, cfg config, n int) (*result, error) {
	h, err := newHTTPAPI(cfg, n)
	if err != nil {
		return nil, err
	}
	defer h.close()
	r := drive(cfg, "http-acquire-release", n, func(w, i int) (bool, error) {
		return true, h.acquireRelease(ctx, fmt.Sprintf("har-%s-%d-%d", run, w, i), fmt.Sprintf("bench-http-%s-%d", run, w))
	})
	r.add("http", routeTag(cfg))
	return r, nil
}

// httpQueue: queue-single over HTTP, with raw HTTP workers.
func httpQueue(ctx context.Context, cfg config, qr *queueRun, n int) (*result, error) {
	h, err := newHTTPAPI(cfg, n+qcfg.workers)
	if err != nil {
		return nil, err
	}
	defer h.close()
	qw := &queueWorkers{started: qr.lags.started, fetch: h.fetcher(qr.name), complete: h.complete}
	qr.stop = qw.start(ctx, qcfg.workers, qr.name)
	r := qr.submitLoop(cfg, "http-queue", n, fmt.Sprintf("%d raw http(fetch %d)", qcfg.workers, qcfg.fetchMax), func(w, i int) error {
		return h.submit(ctx, qr.name)
	})
	r.add("http", routeTag(cfg))
	return r, nil
}

// httpBases turns --http-endpoints (host:port or http://host:port, comma
// separated) into base URLs.
func httpBases(list string) ([]string, error) {
	var out []string
	for _, ep := range strings.Split(list, ",") {
		ep = strings.TrimSuffix(strings.TrimSpace(ep), "/")
		if rest, ok := strings.CutPrefix(ep, "http://"); ok {
			ep = rest
		}
		if ep == "" || strings.Contains(ep, "/") || !strings.Contains(ep, ":") {
			return nil, fmt.Errorf("--http-endpoints: %q is not host:port or http://host:port (the tool speaks plain HTTP)", ep)
		}
		out = append(out, "http://"+ep)
	}
	return out, nil
}

// httpLeader reports whether the node at base (http://host:port) says it
// is the leader (GET /v1/cluster/status).
func httpLeader(base string) bool {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get(base + "/v1/cluster/status")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		State string `json:"state"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&st) == nil && st.State == "Leader"
}
