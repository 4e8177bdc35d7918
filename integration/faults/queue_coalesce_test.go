//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
)

// TestCoalescedSubmitsThroughLeaderKill: 64 goroutines submit one job per
// call through 4 SDK clients (Submit coalesced, the default) while the
// leader is killed with kill -9 and restarted. 48 give each job their own
// unique key and, after an error (an unknown outcome: the call's 500 ms ran
// out in the failover), submit it again with that key until it is
// acknowledged; 16 submit without a key (the SDK's AutoKey) and never
// repeat a call. Then: every key is exactly one job, and every answer for
// a key named that job (no job lost, none doubled); every acknowledged
// key-less job exists, no two calls were answered with one job, and their
// jobs number at least the acknowledged and at most that plus the calls
// that failed (a failed call may have added its job; the SDK's retries
// inside a call, with the call's AutoKeys, add none).
func TestCoalescedSubmitsThroughLeaderKill(t *testing.T) {
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const q, clients, keyed, unkeyed = "coalesce", 4, 48, 16
	var rpcs atomic.Int64
	qs := make([]*queue.Client, clients)
	for i := range qs {
		c, err := client.New(ctx, r.c.Endpoints(), client.WithOwner(fmt.Sprintf("submitter-%d", i)),
			client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
			client.WithDialOptions(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
				cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == "/coord.v1.Queue/Submit" {
					rpcs.Add(1)
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		qs[i] = queue.New(c)
	}

	var (
		mu       sync.Mutex
		byKey    = map[string]map[uint64]bool{} // key → ids answered for it
		autoAck  = map[uint64]int{}             // key-less job id → times answered
		autoErrs int
		keyErrs  int
		dups     int // keyed answers that were a Duplicate (a repeat found the first)
		calls    atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	submit := func(qc *queue.Client, opts ...queue.Option) (uint64, bool, error) {
		cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer ccancel()
		calls.Add(1)
		s, err := qc.Submit(cctx, "coalesced", nil, append(opts, queue.Queue(q))...)
		return s.GetId(), s.GetDuplicate(), err
	}
	for g := range keyed {
		qc := qs[g%clients]
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("g%d-%d", g, n)
				for {
					id, dup, err := submit(qc, queue.UniqueKey(key))
					mu.Lock()
					if err != nil {
						keyErrs++
						mu.Unlock()
						if ctx.Err() != nil {
							return
						}
						continue // the same key again: a repeat returns the job if the first took
					}
					if byKey[key] == nil {
						byKey[key] = map[uint64]bool{}
					}
					byKey[key][id] = true
					if dup {
						dups++
					}
					mu.Unlock()
					break
				}
			}
		})
	}
	for g := range unkeyed {
		qc := qs[g%clients]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				id, _, err := submit(qc)
				mu.Lock()
				if err != nil {
					autoErrs++
				} else {
					autoAck[id]++
				}
				mu.Unlock()
			}
		})
	}
	acked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(byKey) + len(autoAck)
	}
	r.await("submits under way", 20*time.Second, func() bool { return acked() >= 2000 })
	leader, took := r.failover("probe-coalesce")
	t.Logf("kill -9 of the leader %s after %d acknowledged submits: the cluster served again after %s", leader.ID, acked(), took.Round(time.Millisecond))
	n0 := acked()
	r.await("submits after the failover", 60*time.Second, func() bool { return acked() >= n0+2000 })
	close(stop)
	wg.Wait()

	// Every job of the queue, by key.
	jobs := map[string][]uint64{}
	all := map[uint64]bool{}
	for j, err := range qs[0].List(ctx, queue.Filter{Queue: q, PageSize: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		jobs[j.GetUniqueKey()] = append(jobs[j.GetUniqueKey()], j.GetId())
		all[j.GetId()] = true
	}
	for key, ids := range byKey {
		if len(ids) != 1 {
			t.Fatalf("key %s answered with jobs %v", key, ids)
		}
		for id := range ids {
			if got := jobs[key]; len(got) != 1 || got[0] != id {
				t.Fatalf("key %s: acknowledged job %d, the queue holds %v", key, id, got)
			}
		}
	}
	autoJobs := 0
	for key, ids := range jobs {
		if len(ids) != 1 {
			t.Fatalf("key %s is %d jobs: %v", key, len(ids), ids)
		}
		if _, ok := byKey[key]; !ok {
			if len(key) < len(queue.AutoKeyPrefix) || key[:len(queue.AutoKeyPrefix)] != queue.AutoKeyPrefix {
				t.Fatalf("key %s: a job no keyed caller was answered with", key) // a keyed submit is repeated until acknowledged
			}
			autoJobs++
		}
	}
	for id, n := range autoAck {
		if n != 1 || !all[id] {
			t.Fatalf("key-less job %d: answered %d times, in the queue %v", id, n, all[id])
		}
	}
	if autoJobs < len(autoAck) || autoJobs > len(autoAck)+autoErrs {
		t.Fatalf("%d key-less jobs in the queue for %d acknowledged and %d failed calls", autoJobs, len(autoAck), autoErrs)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("ran out of time")
	}
	t.Logf("%d calls in %d Submit RPCs (%.1f jobs per RPC); keyed: %d jobs, %d failed calls repeated, %d repeats answered as a duplicate; "+
		"key-less: %d acknowledged, %d failed, %d in the queue", calls.Load(), rpcs.Load(), float64(calls.Load())/float64(rpcs.Load()),
		len(byKey), keyErrs, dups, len(autoAck), autoErrs, autoJobs)
}
