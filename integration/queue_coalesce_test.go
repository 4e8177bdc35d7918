package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/internal/testcluster"
	"github.com/coordd/coordd/internal/testutil"
)

// Submits coalesced by the SDK (client/queue/coalesce.go) on a real
// cluster: what the server answers each caller of a shared RPC.

// countSubmits is a client option counting the Submit RPCs (each attempt)
// the client sends.
func countSubmits(n *atomic.Int64) client.Option {
	return client.WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == "/coord.v1.Queue/Submit" {
				n.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// 64 concurrent callers on one client, some sharing unique keys and one
// with a job the server refuses: fewer RPCs than calls, each caller the
// answer it gets alone (one job per key, the others its Duplicate; the bad
// job's own INVALID_ARGUMENT).
func TestSubmitCoalescedOnCluster(t *testing.T) {
	c := testcluster.New(t, 3)
	var rpcs atomic.Int64
	cl, err := client.New(context.Background(), c.Endpoints(), countSubmits(&rpcs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	q := queue.New(cl)
	ctx := ctxT(t)
	if _, err := q.Submit(ctx, "warm-up", nil); err != nil {
		t.Fatal(err)
	}
	rpcs.Store(0)
	const n = 64
	type answer struct {
		id  uint64
		dup bool
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var opts []queue.Option
			if i%4 == 0 {
				opts = append(opts, queue.UniqueKey(fmt.Sprintf("key-%d", i%16))) // 4 callers per key
			}
			kind := "k"
			if i == 33 {
				opts = append(opts, queue.VisibilityTimeout(time.Hour*48)) // over the server's limit
			}
			s, err := q.Submit(ctx, kind, i, opts...)
			answers[i] = answer{s.GetId(), s.GetDuplicate(), err}
		})
	}
	wg.Wait()
	byKey := map[int][]answer{}
	ids := map[uint64]int{}
	for i, a := range answers {
		switch {
		case i == 33:
			if !errors.Is(a.err, client.ErrInvalidArgument) {
				t.Fatalf("the bad job: %v", a.err)
			}
			var e *client.Error
			if errors.As(a.err, &e) && e.Metadata["index"] != "0" {
				t.Fatalf("the bad job's error names index %q, not 0 as alone: %v", e.Metadata["index"], a.err)
			}
		case a.err != nil:
			t.Fatalf("call %d: %v", i, a.err)
		case i%4 == 0:
			byKey[i%16] = append(byKey[i%16], a)
		default:
			if a.dup || ids[a.id] != 0 {
				t.Fatalf("call %d: job %d duplicate %v (also call %d)", i, a.id, a.dup, ids[a.id])
			}
			ids[a.id] = i
		}
	}
	for k, as := range byKey {
		created := 0
		for _, a := range as {
			if a.id != as[0].id {
				t.Fatalf("key-%d: jobs %d and %d", k, as[0].id, a.id)
			}
			if !a.dup {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("key-%d: %d callers created the job", k, created)
		}
	}
	if r := rpcs.Load(); r >= n {
		t.Fatalf("%d RPCs for %d concurrent calls", r, n)
	} else {
		t.Logf("%d RPCs for %d concurrent calls", r, n)
	}
}

// BenchmarkSubmitCoalescing: 64 producers over 8 SDK clients submit one
// job per call, on an in-process three-node cluster (fsync on; this
// process's CPU is the cluster's and the SDK's), coalescing off and with
// K = 1, 2, 4 RPCs in flight per client. "max": closed loop, each producer
// submits its next job when the last is answered; "rate5000": the jobs are
// due at 5,000/s in all (job n at start + n/5000 s; a producer takes the
// next job and waits for its time, so at most 64 are in flight), the
// issue's open-loop load scaled to this machine. Reported: jobs/s, Submit
// RPCs per job and the process CPU per job. docs/benchmarks.md has the
// numbers.
//
//	go test ./integration -run '^$' -bench SubmitCoalescing -benchtime 20000x
func BenchmarkSubmitCoalescing(b *testing.B) {
	for _, load := range []struct {
		name string
		rate float64 // jobs/s in all; 0: closed loop
	}{{"max", 0}, {"rate5000", 5000}} {
		for _, tc := range []struct {
			name string
			opt  queue.ClientOption
		}{
			{"off", queue.WithoutSubmitCoalescing()},
			{"k1", queue.WithSubmitCoalescing(1)},
			{"k2", queue.WithSubmitCoalescing(2)},
			{"k4", queue.WithSubmitCoalescing(4)},
		} {
			b.Run(load.name+"/"+tc.name, func(b *testing.B) { benchSubmits(b, tc.opt, load.rate) })
		}
	}
}

func benchSubmits(b *testing.B, opt queue.ClientOption, rate float64) {
	c := testcluster.New(b, 3)
	const clients, producers = 8, 64
	var rpcs atomic.Int64
	qs := make([]*queue.Client, clients)
	for i := range qs {
		cl, err := client.New(context.Background(), c.Endpoints(), countSubmits(&rpcs))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.Close() })
		qs[i] = queue.New(cl, opt)
		if _, err := qs[i].Submit(context.Background(), "warm-up", nil); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var next atomic.Int64
	var failed atomic.Value
	rpcs.Store(0)
	cpu0 := testutil.ProcessCPU()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		q := qs[p%clients]
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
				}
				if _, err := q.Submit(ctx, "bench", nil); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := testutil.ProcessCPU() - cpu0
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(rpcs.Load())/float64(b.N), "rpcs/job")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
}
