package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/node"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// fuzzNode is one single-node cluster (a real node, Raft and all) shared by
// the fuzz targets of this process (starting one costs about a second).
var fuzzNode struct {
	once sync.Once
	dir  string
	n    *node.Node
	s    *Server
	cc   *grpc.ClientConn
	http http.Handler
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fuzzNode.cc != nil {
		fuzzNode.cc.Close()
	}
	if fuzzNode.n != nil {
		fuzzNode.n.Close()
	}
	if fuzzNode.s != nil {
		fuzzNode.s.Close()
	}
	if fuzzNode.dir != "" {
		os.RemoveAll(fuzzNode.dir)
	}
	os.Exit(code)
}

func startFuzzNode(tb testing.TB) (*Server, *grpc.ClientConn) {
	fuzzNode.once.Do(func() {
		dir, err := os.MkdirTemp("", "coordd-fuzz-")
		fuzzNode.dir = dir
		if err != nil {
			fuzzNode.err = err
			return
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		n, err := node.New(node.Config{ID: "fuzz", DataDir: dir, RaftAddr: "127.0.0.1:0", Logger: log})
		if err != nil {
			fuzzNode.err = err
			return
		}
		fuzzNode.n = n
		s, err := Serve(Config{GRPCAddr: "127.0.0.1:0", Logger: log}, n)
		if err != nil {
			fuzzNode.err = err
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for !n.IsLeader() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		fuzzNode.s, fuzzNode.http = s, s.httpAPI()
		fuzzNode.cc, fuzzNode.err = grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	})
	if fuzzNode.err != nil {
		tb.Fatal(fuzzNode.err)
	}
	if !fuzzNode.n.IsLeader() {
		tb.Fatal("fuzz node did not become leader")
	}
	return fuzzNode.s, fuzzNode.cc
}

// fuzzCall decodes data as the request of one method and calls it.
type fuzzCall struct {
	name string
	call func(ctx context.Context, cc *grpc.ClientConn, data []byte) error
}

func unary[Req proto.Message, Resp any](name string, newReq func() Req,
	call func(ctx context.Context, cc *grpc.ClientConn, req Req) (Resp, error)) fuzzCall {
	return fuzzCall{name: name, call: func(ctx context.Context, cc *grpc.ClientConn, data []byte) error {
		req := newReq()
		if err := proto.Unmarshal(data, req); err != nil {
			return nil // not a request: the gRPC server refuses it before us
		}
		_, err := call(ctx, cc, req)
		return err
	}}
}

func co(cc *grpc.ClientConn) coordv1.CoordinatorClient { return coordv1.NewCoordinatorClient(cc) }
func sc(cc *grpc.ClientConn) coordv1.SchedulesClient   { return coordv1.NewSchedulesClient(cc) }

// Membership changes are left out: a random AddVoter would (correctly)
// cost this single node its quorum and stall the rest of the run.
var fuzzCalls = []fuzzCall{
	unary("Acquire", func() *coordv1.AcquireRequest { return &coordv1.AcquireRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.AcquireRequest) (any, error) {
			return co(cc).Acquire(ctx, r)
		}),
	unary("Renew", func() *coordv1.RenewRequest { return &coordv1.RenewRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.RenewRequest) (any, error) {
			return co(cc).Renew(ctx, r)
		}),
	unary("Release", func() *coordv1.ReleaseRequest { return &coordv1.ReleaseRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.ReleaseRequest) (any, error) {
			return co(cc).Release(ctx, r)
		}),
	unary("ClaimWindow", func() *coordv1.ClaimWindowRequest { return &coordv1.ClaimWindowRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.ClaimWindowRequest) (any, error) {
			return co(cc).ClaimWindow(ctx, r)
		}),
	unary("CompleteWindow", func() *coordv1.CompleteWindowRequest { return &coordv1.CompleteWindowRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.CompleteWindowRequest) (any, error) {
			return co(cc).CompleteWindow(ctx, r)
		}),
	unary("FencedCommit", func() *coordv1.FencedCommitRequest { return &coordv1.FencedCommitRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.FencedCommitRequest) (any, error) {
			return co(cc).FencedCommit(ctx, r)
		}),
	unary("GetLease", func() *coordv1.GetLeaseRequest { return &coordv1.GetLeaseRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.GetLeaseRequest) (any, error) {
			return co(cc).GetLease(ctx, r)
		}),
	unary("ListLeases", func() *coordv1.ListLeasesRequest { return &coordv1.ListLeasesRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.ListLeasesRequest) (any, error) {
			return co(cc).ListLeases(ctx, r)
		}),
	unary("ListWindows", func() *coordv1.ListWindowsRequest { return &coordv1.ListWindowsRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.ListWindowsRequest) (any, error) {
			return co(cc).ListWindows(ctx, r)
		}),
	unary("GetResource", func() *coordv1.GetResourceRequest { return &coordv1.GetResourceRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.GetResourceRequest) (any, error) {
			return co(cc).GetResource(ctx, r)
		}),
	unary("PutSchedule", func() *coordv1.PutScheduleRequest { return &coordv1.PutScheduleRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.PutScheduleRequest) (any, error) {
			return sc(cc).PutSchedule(ctx, r)
		}),
	unary("GetSchedule", func() *coordv1.GetScheduleRequest { return &coordv1.GetScheduleRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.GetScheduleRequest) (any, error) {
			return sc(cc).GetSchedule(ctx, r)
		}),
	unary("TriggerSchedule", func() *coordv1.TriggerScheduleRequest { return &coordv1.TriggerScheduleRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.TriggerScheduleRequest) (any, error) {
			return sc(cc).TriggerSchedule(ctx, r)
		}),
	unary("ListOverdue", func() *coordv1.ListOverdueRequest { return &coordv1.ListOverdueRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.ListOverdueRequest) (any, error) {
			return sc(cc).ListOverdue(ctx, r)
		}),
	unary("Queue.Submit", func() *coordv1.QueueSubmitRequest { return &coordv1.QueueSubmitRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueSubmitRequest) (any, error) {
			return qu(cc).Submit(ctx, r)
		}),
	unary("Queue.Get", func() *coordv1.QueueGetRequest { return &coordv1.QueueGetRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueGetRequest) (any, error) {
			return qu(cc).Get(ctx, r)
		}),
	unary("Queue.List", func() *coordv1.QueueListRequest { return &coordv1.QueueListRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueListRequest) (any, error) {
			return qu(cc).List(ctx, r)
		}),
	unary("Queue.Cancel", func() *coordv1.QueueCancelRequest { return &coordv1.QueueCancelRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueCancelRequest) (any, error) {
			return qu(cc).Cancel(ctx, r)
		}),
	unary("Queue.Retry", func() *coordv1.QueueRetryRequest { return &coordv1.QueueRetryRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueRetryRequest) (any, error) {
			return qu(cc).Retry(ctx, r)
		}),
	unary("Queue.Fetch", func() *coordv1.QueueFetchRequest { return &coordv1.QueueFetchRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueFetchRequest) (any, error) {
			return qu(cc).Fetch(ctx, r)
		}),
	unary("Queue.Heartbeat", func() *coordv1.QueueHeartbeatRequest { return &coordv1.QueueHeartbeatRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueHeartbeatRequest) (any, error) {
			return qu(cc).Heartbeat(ctx, r)
		}),
	unary("Queue.Complete", func() *coordv1.QueueCompleteRequest { return &coordv1.QueueCompleteRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueCompleteRequest) (any, error) {
			return qu(cc).Complete(ctx, r)
		}),
	unary("Queue.Fail", func() *coordv1.QueueFailRequest { return &coordv1.QueueFailRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueFailRequest) (any, error) {
			return qu(cc).Fail(ctx, r)
		}),
	unary("Queue.Stats", func() *coordv1.QueueStatsRequest { return &coordv1.QueueStatsRequest{} },
		func(ctx context.Context, cc *grpc.ClientConn, r *coordv1.QueueStatsRequest) (any, error) {
			return qu(cc).Stats(ctx, r)
		}),
}

func qu(cc *grpc.ClientConn) coordv1.QueueClient { return coordv1.NewQueueClient(cc) }

// callIndex is the index of the fuzz call named name.
func callIndex(name string) uint8 {
	for i, c := range fuzzCalls {
		if c.name == name {
			return uint8(i)
		}
	}
	panic(name)
}

// FuzzRequests sends arbitrary request messages to every data-plane RPC of
// a live node: each gets an answer (a result or a status with a code that
// says what was wrong) quickly, never a crash, a hang or an Internal error.
func FuzzRequests(f *testing.F) {
	seeds := []proto.Message{
		&coordv1.AcquireRequest{Name: "a", Owner: "o", Ttl: pbtime.Dur(2000)},
		&coordv1.AcquireRequest{Name: strings.Repeat("x", 300), Owner: "o", Ttl: pbtime.Dur(-1)},
		&coordv1.RenewRequest{Name: "a", Owner: "o", Generation: 1, Ttl: pbtime.Dur(1 << 62)},
		&coordv1.ClaimWindowRequest{Job: "j", Window: "w\x00", LeaseName: "a", Owner: "o", Generation: 1},
		&coordv1.FencedCommitRequest{Resource: "r", LeaseName: "a", Generation: 1<<63 + 1, Payload: make([]byte, 70000)},
		&coordv1.FencedCommitRequest{Resource: "r", Token: "a:1:2", DryRun: true},
		&coordv1.FencedCommitRequest{Resource: "r", Token: "a:x", LeaseName: "a", Generation: 1},
		&coordv1.ListLeasesRequest{PageSize: -5, PageToken: "%%%"},
		&coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "j", Schedule: "61 * * * *", TimeZone: "Mars/Olympus"}},
		&coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "j", Schedule: "@every 1s", Job: &coordv1.JobTemplate{Kind: "k", BackoffFactor: -1}}},
		&coordv1.GetScheduleRequest{Name: "j/../x", Next: 1 << 30},
		&coordv1.TriggerScheduleRequest{Name: "nope"},
		&coordv1.ListOverdueRequest{PageToken: "AAAA"},
	}
	for i, m := range seeds {
		data, _ := proto.Marshal(m)
		f.Add(uint8(i), data)
	}
	for name, m := range map[string]proto.Message{
		"Queue.Submit": &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k", RunAt: pbtime.At(1 << 62), BackoffFactor: -1,
			Labels: map[string]string{"": "\x00"}}, {Kind: "k", Delay: pbtime.Dur(1 << 62)}}},
		"Queue.Get":       &coordv1.QueueGetRequest{Id: 1<<64 - 1},
		"Queue.List":      &coordv1.QueueListRequest{Label: "=", State: 99, PageToken: "MA", PageSize: -1},
		"Queue.Fetch":     &coordv1.QueueFetchRequest{Queues: []string{"q", "q"}, Max: 1000, Wait: pbtime.Dur(30_000), WorkerId: "w"},
		"Queue.Heartbeat": &coordv1.QueueHeartbeatRequest{WorkerId: "w", Attempts: []*coordv1.JobAttemptRef{{JobId: 1, Attempt: 1 << 31}}},
		"Queue.Complete":  &coordv1.QueueCompleteRequest{WorkerId: "w", Completions: []*coordv1.JobCompletion{{JobId: 1, Attempt: 1}}},
		"Queue.Fail":      &coordv1.QueueFailRequest{WorkerId: "w", Failures: []*coordv1.JobFailure{{JobId: 1, Attempt: 1, Error: strings.Repeat("é", 5000)}}},
		"Queue.Retry":     &coordv1.QueueRetryRequest{Id: 1},
		"Queue.Stats":     &coordv1.QueueStatsRequest{Queue: "\xff"},
		"FencedCommit":    &coordv1.FencedCommitRequest{Resource: "r", Token: "job:1:4294967296"},
	} {
		data, _ := proto.Marshal(m)
		f.Add(callIndex(name), data)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		_, cc := startFuzzNode(t)
		fc := fuzzCalls[int(which)%len(fuzzCalls)]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := fc.call(ctx, cc, data)
		if code := status.Code(err); code == codes.Internal || code == codes.Unknown || code == codes.DeadlineExceeded {
			t.Fatalf("%s(%x): %v", fc.name, data, err)
		}
	})
}

// FuzzHTTPAPI sends arbitrary requests to the HTTP/JSON API: every answer
// is a JSON body with a 2xx or the mapped 4xx/5xx status, never a 500.
func FuzzHTTPAPI(f *testing.F) {
	f.Add("POST", "/v1/fence/commit", `{"resource":"r","token":"a:1","dry_run":true}`)
	f.Add("POST", "/v1/fence/commit", `{"resource":"r","lease_name":"a","generation":"18446744073709551615","payload":"!!"}`)
	f.Add("GET", "/v1/leases/a/b/c", "")
	f.Add("GET", "/v1/resources/%00", "")
	f.Add("PUT", "/v1/fence/commit", `[]`)
	f.Add("POST", "/v1/fence/commit", `{"resource":1e999}`)
	f.Add("POST", "/v1/fence/commit", strings.Repeat(`{"a":`, 10000))
	f.Add("POST", "/v1/fence/commit", `{"resource":"r","token":":","lease_name":"a"}`)
	f.Add("POST", "/v1/schedules", `{"name":"n","schedule":"@every 1s","job":{"kind":"k","labels":{"coordd.x":"1"}}}`)
	f.Add("POST", "/v1/schedules/n/trigger", `{}`)
	f.Add("DELETE", "/v1/schedules/n", "")
	f.Add("GET", "/v1/overdue?page_size=5000", "")
	f.Add("POST", "/v1/queue/jobs", `{"jobs":[{"kind":"k","args":"!!","delay":"-1"}]}`)
	f.Add("GET", "/v1/queue/jobs/18446744073709551616", "")
	f.Add("GET", "/v1/queue/jobs?state=JOB_STATE_NOPE&page_token=%00", "")
	f.Add("POST", "/v1/queue/jobs/1/cancel", `{"id":"2"}`)
	f.Add("GET", "/v1/queue/stats?queue=%ff", "")
	f.Add("POST", "/v1/leases/a/b/acquire", `{"owner":"o","ttl":"5s","wait":true}`)
	f.Add("POST", "/v1/leases/a/acquire", `{"owner":"o","ttl":5000,"value":{"addr":"x"}}`)
	f.Add("POST", "/v1/queue/jobs", `{"jobs":[{"kind":"k","args":{"a":[1,2]},"run_at":"2026-09-25T00:05:00-03:00","visibility_timeout":"1m30s"}]}`)
	f.Add("POST", "/v1/queue/jobs", `{"jobs":[{"kind":"k","run_at":"9999-99-99T00:00:00Z","delay":"1e9h"}]}`)
	f.Add("GET", "/v1/queue/jobs?state=dead&state=Available", "")
	f.Add("GET", "/v1/watch?families=queue_job&job_states=running", "")
	f.Add("POST", "/v1/leases//renew", `{"owner":"o","generation":"1"}`)
	f.Add("GET", "/v1/leases?page_size=-1&page_token=%ff", "")
	f.Add("POST", "/v1/windows/j/w/claim", `{"lease_name":"a","owner":"o","generation":"1"}`)
	f.Add("GET", "/v1/windows/j", "")
	f.Add("POST", "/v1/queue/fetch", `{"queues":["q"],"max":1,"worker_id":"w"}`)
	f.Add("POST", "/v1/queue/complete", `{"worker_id":"w","completions":[{"job_id":"1","attempt":1}]}`)
	f.Add("POST", "/v1/queue/fail", `{"worker_id":"w","failures":[{"job_id":"1","attempt":1}]}`)
	f.Add("PUT", "/v1/queue/jobs", `{}`)
	f.Add("GET", "/v1/cluster/status?digest=true", "")
	f.Fuzz(func(t *testing.T, method, path, body string) {
		startFuzzNode(t)
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequest(method, "http://coordd"+path, strings.NewReader(body))
		if err != nil {
			return // not an HTTP request a server could receive
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		fuzzNode.http.ServeHTTP(rec, req.WithContext(ctx))
		// 504: a wait (a waiting acquire, a fetch's wait) that the 5 s
		// deadline above ended.
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable && rec.Code != http.StatusNotImplemented &&
			rec.Code != http.StatusGatewayTimeout {
			t.Fatalf("%s %q %q: %d %s", method, path, body, rec.Code, rec.Body.String())
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s %q: content type %q, body %q", method, path, ct, rec.Body.String())
		}
	})
}
