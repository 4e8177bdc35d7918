package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

type workload func(ctx context.Context, cfg config, clients int) (*result, error)

var workloadFuncs = map[string]workload{
	"acquire-release":      acquireRelease,
	"contended":            contended,
	"renew":                renew,
	"grpc-floor":           grpcFloor,
	"keepalive":            keepalive,
	"fenced-commit":        fencedCommit(false),
	"fenced-commit-hot":    fencedCommit(true),
	"window-cycle":         windowCycle,
	"failover":             failover,
	"schedules":            schedulesWorkload,
	"queue":                onQueue("tp", queueThroughput),
	"queue-single":         onQueue("one", queueSingle),
	"queue-sdk-single":     onQueue("sdk", queueSDKSingle),
	"queue-delayed":        onQueue("delayed", queueDelayed),
	"queue-footprint":      queueFootprint,
	"watch":                watchWorkload,
	"http-acquire-release": httpAcquireRelease,
	"http-queue":           onQueue("http", httpQueue),
	"queue-delivery":       onQueue("dl", queueDelivery),
}

// run is a benchmark id, so that names never collide between runs.
var run = strconv.FormatInt(time.Now().UnixNano()%1e9, 36)

// newClients returns one SDK client per worker. Workers share
// cfg.conns SDK clients round-robin (each SDK client has one connection per
// node, as one service process would); cfg.conns = 0 gives every worker
// its own.
func newClients(ctx context.Context, cfg config, n int, opts ...client.Option) ([]*client.Client, func(), error) {
	distinct := n
	if cfg.conns > 0 {
		distinct = min(n, cfg.conns)
	}
	var own []*client.Client
	for i := 0; i < distinct; i++ {
		c, err := client.New(ctx, cfg.endpoints, append([]client.Option{client.WithOwner(fmt.Sprintf("bench-%s-%d", run, i))}, opts...)...)
		if err != nil {
			return nil, nil, err
		}
		own = append(own, c)
	}
	cs := make([]*client.Client, n)
	for i := range cs {
		cs[i] = own[i%distinct]
	}
	return cs, func() {
		for _, c := range own {
			c.Close()
		}
	}, nil
}

// drive runs op in n workers until the duration passes and collects
// latencies; op returns whether it counts as an operation.
func drive(cfg config, name string, n int, op func(worker, iter int) (bool, error)) *result {
	r := &result{workload: name, clients: n}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		ops     atomic.Int64
		errs    atomic.Int64
		lastErr atomic.Value
	)
	// The first cfg.warmup runs the workload without counting it: a fresh
	// cluster grows its bbolt files and Go heaps then (the first second of
	// a cold cluster was up to 25 % slower than the rest).
	start := time.Now().Add(cfg.warmup)
	deadline := start.Add(cfg.duration)
	// The cluster's counters over the measured window.
	window := sampleCounters(cfg, start, deadline)
	// Forwarded calls in the measured part (steady state: the SDK found the
	// leader during the warm-up), with --cluster.
	fwd0 := make(chan float64, 1)
	if cfg.cluster != nil {
		go func() {
			time.Sleep(time.Until(start))
			v, err := forwarded(cfg.cluster)
			if err != nil {
				v = -1
			}
			fwd0 <- v
		}()
	}
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			for i := 0; time.Now().Before(deadline); i++ {
				t0 := time.Now()
				counted, err := op(w, i)
				d := time.Since(t0)
				if t0.Before(start) {
					continue // warm-up
				}
				if err != nil {
					errs.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				if counted {
					ops.Add(1)
					lat = append(lat, d)
				}
			}
			mu.Lock()
			r.lat = append(r.lat, lat...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.ops, r.errors = ops.Load(), errs.Load()
	window(r)
	if cfg.cluster != nil {
		v0 := <-fwd0
		if v1, err := forwarded(cfg.cluster); err == nil && v0 >= 0 {
			r.add("forwarded", v1-v0)
		}
	}
	if e, ok := lastErr.Load().(string); ok {
		fmt.Fprintf(os.Stderr, "%s: %d errors, last: %s\n", name, r.errors, e)
	}
	return r
}

// driveClients drives op as the workload name on n workers, each with a
// client of its own.
func driveClients(ctx context.Context, cfg config, n int, name string, op func(c *client.Client, worker, iter int) (bool, error)) (*result, error) {
	cs, done, err := newClients(ctx, cfg, n)
	if err != nil {
		return nil, err
	}
	defer done()
	return drive(cfg, name, n, func(w, i int) (bool, error) { return op(cs[w], w, i) }), nil
}

func acquireRelease(ctx context.Context, cfg config, n int) (*result, error) {
	return driveClients(ctx, cfg, n, "acquire-release", func(c *client.Client, w, i int) (bool, error) {
		l, err := c.Acquire(ctx, fmt.Sprintf("ar-%s-%d-%d", run, w, i), 10*time.Second)
		if err != nil {
			return false, err
		}
		return true, l.Release(ctx)
	})
}

func contended(ctx context.Context, cfg config, n int) (*result, error) {
	cs, done, err := newClients(ctx, cfg, n)
	if err != nil {
		return nil, err
	}
	defer done()
	var attempts atomic.Int64
	var opts []client.AcquireOption
	if cfg.wait {
		opts = append(opts, client.AcquireWait())
	}
	r := drive(cfg, "contended", n, func(w, i int) (bool, error) {
		attempts.Add(1)
		l, err := cs[w].Acquire(ctx, fmt.Sprintf("ct-%s-%d", run, (w+i)%cfg.names), 10*time.Second, opts...)
		if errors.Is(err, client.ErrNotAcquired) {
			time.Sleep(time.Millisecond) // a waiter polls; it does not spin
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, l.Release(ctx)
	})
	r.add("names", cfg.names)
	r.add("wait", cfg.wait)
	r.add("attempts", attempts.Load())
	return r, nil
}

func renew(ctx context.Context, cfg config, n int) (*result, error) {
	cc, done, err := leaderCoord(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	gens := make([]uint64, cfg.leases)
	var failed atomic.Int64
	setup(cfg.leases, func(i int) bool {
		resp, err := cc.Acquire(ctx, &coordv1.AcquireRequest{Name: fmt.Sprintf("rn-%s-%d-%d", run, n, i), Owner: "bench", Ttl: pbtime.Dur(600_000)})
		if err != nil || !resp.GetAcquired() {
			failed.Add(1)
			return true
		}
		gens[i] = resp.GetLease().GetGeneration()
		return true
	})
	if failed.Load() > 0 {
		return nil, fmt.Errorf("%d of %d leases not acquired", failed.Load(), cfg.leases)
	}
	r := drive(cfg, "renew", n, func(w, i int) (bool, error) {
		k := (w + i*n) % cfg.leases
		_, err := cc.Renew(ctx, &coordv1.RenewRequest{Name: fmt.Sprintf("rn-%s-%d-%d", run, n, k), Owner: "bench", Generation: gens[k]})
		return true, err
	})
	r.add("leases", cfg.leases)
	return r, nil
}

// grpcFloor calls the leader's gRPC health check, which does no work: one
// unary gRPC round trip on this machine, its latency and (cluster_cores)
// its server CPU, with nothing of coordd's behind it. Subtracted from
// another workload's numbers on the same cluster it leaves what coordd's
// own path costs (docs/benchmarks.md, "Where a commit's time and CPU go").
func grpcFloor(ctx context.Context, cfg config, n int) (*result, error) {
	cc, err := leaderConn(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	h := healthpb.NewHealthClient(cc)
	return drive(cfg, "grpc-floor", n, func(w, i int) (bool, error) {
		_, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		return true, err
	}), nil
}

// setup runs f(0) to f(count-1) on 64 goroutines, each taking every 64th
// i, until f returns false: the leases a workload then drives.
func setup(count int, f func(i int) bool) {
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < count; i += 64 {
				if !f(i) {
					return
				}
			}
		}(w)
	}
	wg.Wait()
}

// keepalive holds cfg.leases leases over the SDK's streams (spread over the
// clients) for the duration and counts the ones lost.
func keepalive(ctx context.Context, cfg config, n int) (*result, error) {
	clients := min(n, 8)
	cs, done, err := newClients(ctx, cfg, clients)
	if err != nil {
		return nil, err
	}
	defer done()
	ls := make([]*client.Lease, cfg.leases)
	var acqErr atomic.Value
	setup(cfg.leases, func(i int) bool {
		l, err := cs[i%clients].Acquire(ctx, fmt.Sprintf("ka-%s-%d", run, i), cfg.ttl)
		if err != nil {
			acqErr.Store(err)
			return false
		}
		ls[i] = l
		return true
	})
	if err, ok := acqErr.Load().(error); ok {
		return nil, err
	}
	t0, cpu0 := time.Now(), cpuTicks(cfg)
	timer := time.NewTimer(cfg.duration)
	<-timer.C
	elapsed, cpu1 := time.Since(t0), cpuTicks(cfg)
	lost := 0
	for _, l := range ls {
		if l.Err() != nil {
			lost++
		}
	}
	r := &result{workload: "keepalive", clients: clients, ops: int64(float64(cfg.leases) * elapsed.Seconds() / (cfg.ttl / 3).Seconds()),
		elapsed: elapsed}
	r.add("leases", cfg.leases)
	r.add("ttl_s", cfg.ttl.Seconds())
	r.add("lost", lost)
	if cpu0 >= 0 {
		r.add("cluster_cores", fmt.Sprintf("%.2f", float64(cpu1-cpu0)/100/elapsed.Seconds()))
	}
	for _, l := range ls {
		_ = l.Release(ctx)
	}
	return r, nil
}

func fencedCommit(hot bool) workload {
	return func(ctx context.Context, cfg config, n int) (*result, error) {
		cs, done, err := newClients(ctx, cfg, n)
		if err != nil {
			return nil, err
		}
		defer done()
		name := "fenced-commit"
		leases := make([]*client.Lease, n)
		if hot {
			name = "fenced-commit-hot"
			l, err := cs[0].Acquire(ctx, "fch-"+run, time.Minute)
			if err != nil {
				return nil, err
			}
			for i := range leases {
				leases[i] = l
			}
		} else {
			for i := range leases {
				if leases[i], err = cs[i].Acquire(ctx, fmt.Sprintf("fc-%s-%d", run, i), time.Minute); err != nil {
					return nil, err
				}
			}
		}
		r := drive(cfg, name, n, func(w, i int) (bool, error) {
			res := fmt.Sprintf("fc-res-%s-%d", run, w)
			if hot {
				res = "fc-hot-" + run
			}
			_, err := cs[w].FencedCommit(ctx, res, leases[w].Token(), fmt.Sprintf("k-%d-%d", w, i), []byte("payload"))
			return true, err
		})
		for _, l := range leases {
			_ = l.Release(ctx)
		}
		return r, nil
	}
}

func windowCycle(ctx context.Context, cfg config, n int) (*result, error) {
	return driveClients(ctx, cfg, n, "window-cycle", func(c *client.Client, w, i int) (bool, error) {
		job := fmt.Sprintf("wc-%s-%d", run, w)
		l, err := c.Acquire(ctx, job, 10*time.Second)
		if err != nil {
			return false, err
		}
		cl, err := l.ClaimWindow(ctx, job, strconv.Itoa(i))
		if err == nil {
			_, err = cl.Complete(ctx, nil)
		}
		if rerr := l.Release(ctx); err == nil {
			err = rerr
		}
		return true, err
	})
}

// failover kills -9 the leader of the tool's own cluster reps times and
// measures the time to the next successful Acquire, and kept-alive leases lost.
func failover(ctx context.Context, cfg config, n int) (*result, error) {
	lc := cfg.cluster
	if lc == nil {
		return nil, errors.New("failover needs --cluster")
	}
	c, err := client.New(ctx, cfg.endpoints, client.WithOwner("bench-failover"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var held []*client.Lease
	for i := 0; i < 100; i++ {
		l, err := c.Acquire(ctx, fmt.Sprintf("fo-held-%s-%d", run, i), 5*time.Second)
		if err != nil {
			return nil, err
		}
		held = append(held, l)
	}
	r := &result{workload: "failover", clients: 1}
	for rep := 0; rep < cfg.reps; rep++ {
		leader, err := lc.WaitLeader(20 * time.Second)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		lc.Stop(leader, syscall.SIGKILL)
		probe, err := client.New(ctx, cfg.endpoints, client.WithOwner("probe"), client.WithAttemptTimeout(300*time.Millisecond))
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = probe.Acquire(actx, fmt.Sprintf("fo-%s-%d", run, rep), 5*time.Second)
		cancel()
		probe.Close()
		if err != nil {
			return nil, err
		}
		r.lat = append(r.lat, time.Since(t0))
		r.ops++
		if err := lc.Restart(leader); err != nil {
			return nil, err
		}
		time.Sleep(2 * time.Second) // let the restarted node catch up before the next kill
	}
	lost := 0
	for _, l := range held {
		if l.Err() != nil {
			lost++
		}
		_ = l.Release(ctx)
	}
	r.elapsed = time.Duration(r.ops) * time.Second // ops_per_s is meaningless here; report latencies
	r.add("reps", cfg.reps)
	r.add("kept_alive_leases", len(held))
	r.add("lost", lost)
	return r, nil
}
