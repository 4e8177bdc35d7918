package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The job queue workloads (coord.v1.Queue). Jobs are submitted on raw
// gRPC against the leader; workers are the SDK's (client/queue.Worker: one
// per worker "client", --queue-concurrency handlers each, batched fetches
// and completions), or with --queue-raw plain loops that fetch (long poll)
// and complete each fetched batch on raw gRPC. Handlers are empty. The
// start lag of a job is the worker's wall clock when its handler starts
// minus the job's run_at (the leader's calendar clock; same machine, same
// clock).
//
//	queue          submit in batches of up to 1,000 at --queue-rate jobs/s
//	               (0: as fast as the cluster takes them); clients = workers
//	queue-single   clients submitters, one job per Submit; --queue-workers workers
//	queue-delayed  --delayed-jobs jobs due 1 s to --delay-max ahead; clients =
//	               workers; none may start before its run_at
//	queue-delivery the queue workload with jobs delivered by the nodes to an
//	               HTTP endpoint of this process (docs/delivery.md; the nodes
//	               need --delivery-allow 127.0.0.1); the start lag is the
//	               request's arrival minus the submit's start

type queueConfig struct {
	raw         bool          // raw gRPC workers instead of the SDK's
	concurrency int           // handlers per SDK worker
	rate        int           // jobs/s submitted by the queue workload (0: max)
	batch       int           // jobs per Submit
	fetchMax    int           // jobs per Fetch
	workers     int           // workers of queue-single
	delayed     int           // jobs of queue-delayed
	delayMax    time.Duration // queue-delayed: latest run_at ahead
	coalesce    int           // queue-sdk-single: Submit RPCs in flight per SDK client before calls coalesce; 0: off
}

var qcfg = queueConfig{concurrency: 100, batch: 1000, fetchMax: 100, workers: 8, delayed: 100_000, delayMax: 60 * time.Second,
	coalesce: queue.DefaultSubmitsInFlight}

// queueWorkers runs n workers on a queue until ctx ends: fetch (long poll),
// call started for each job, complete the batch. fetch and complete are
// the wire: raw gRPC (grpcWorkerCalls) or HTTP/JSON (http.go).
type queueWorkers struct {
	fetch    func(ctx context.Context, worker string) ([]fetchedJob, error)
	complete func(ctx context.Context, worker string, jobs []fetchedJob) error
	started  func(runAtMs int64, at time.Time, attempt uint32)
	errs     atomic.Int64
	lastErr  atomic.Value
	wg       sync.WaitGroup
}

// fetchedJob is a claimed job as the raw workers need it.
type fetchedJob struct {
	id      uint64
	attempt uint32
	runAtMs int64
}

// grpcWorkerCalls are the raw workers' Fetch (--fetch-max jobs, 1 s long
// poll) and Complete on q, for queue.
func grpcWorkerCalls(q coordv1.QueueClient, queue string) (fetch func(context.Context, string) ([]fetchedJob, error),
	complete func(context.Context, string, []fetchedJob) error) {
	fetch = func(ctx context.Context, worker string) ([]fetchedJob, error) {
		r, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{queue}, Max: uint32(qcfg.fetchMax),
			Wait: pbtime.Dur(1000), WorkerId: worker})
		var jobs []fetchedJob
		for _, cl := range r.GetJobs() {
			jobs = append(jobs, fetchedJob{id: cl.GetJob().GetId(), attempt: cl.GetAttempt().GetNumber(), runAtMs: cl.GetJob().GetRunAtMs()})
		}
		return jobs, err
	}
	complete = func(ctx context.Context, worker string, jobs []fetchedJob) error {
		comps := make([]*coordv1.JobCompletion, len(jobs))
		for i, j := range jobs {
			comps[i] = &coordv1.JobCompletion{JobId: j.id, Attempt: j.attempt}
		}
		_, err := q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: worker, Completions: comps})
		return err
	}
	return fetch, complete
}

// startWorkers runs n workers on the queue (the SDK's, or raw with
// --queue-raw); stop ends them and reports their errors.
func startWorkers(ctx context.Context, cfg config, q coordv1.QueueClient, name string, n int,
	started func(runAtMs int64, at time.Time, attempt uint32)) (stop func(), err error) {
	if qcfg.raw {
		qw := &queueWorkers{started: started}
		qw.fetch, qw.complete = grpcWorkerCalls(q, name)
		return qw.start(ctx, n, name), nil
	}
	cs, done, err := newClients(ctx, cfg, n)
	if err != nil {
		return nil, err
	}
	var ws []*queue.Worker
	for i := 0; i < n; i++ {
		w := queue.NewWorker(cs[i], queue.WithQueue(name, qcfg.concurrency), queue.WithWorkerID(fmt.Sprintf("bench-%s-w%d", run, i)),
			queue.WithPollWait(time.Second))
		w.Handle("noop", func(_ context.Context, j *queue.Job) error {
			started(j.RunAt.UnixMilli(), time.Now(), j.Attempt)
			return nil
		})
		if err := w.Start(); err != nil {
			done()
			return nil, err
		}
		ws = append(ws, w)
	}
	return func() {
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := w.Stop(sctx); err != nil {
					fmt.Fprintf(os.Stderr, "%s: worker stop: %v\n", name, err)
				}
			})
		}
		wg.Wait()
		done()
	}, nil
}

// start runs n raw workers until stop, which waits for them and reports
// their errors under name.
func (qw *queueWorkers) start(ctx context.Context, n int, name string) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	qw.run(wctx, n)
	return func() {
		cancel()
		qw.wg.Wait()
		qw.report(name)
	}
}

func (qw *queueWorkers) fail(err error) {
	qw.errs.Add(1)
	qw.lastErr.Store(err.Error())
}

func (qw *queueWorkers) run(ctx context.Context, n int) {
	for w := 0; w < n; w++ {
		worker := fmt.Sprintf("bench-%s-w%d", run, w)
		qw.wg.Go(func() {
			for ctx.Err() == nil {
				fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				jobs, err := qw.fetch(fctx, worker)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						qw.fail(err)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				if len(jobs) == 0 {
					continue
				}
				for _, j := range jobs {
					qw.started(j.runAtMs, time.Now(), j.attempt) // the (empty) handler starts
				}
				for ctx.Err() == nil {
					cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					err := qw.complete(cctx, worker, jobs)
					cancel()
					if err == nil {
						break
					}
					qw.fail(err) // a repeat of an applied completion is a duplicate
				}
			}
		})
	}
}

func (qw *queueWorkers) report(name string) {
	if e, ok := qw.lastErr.Load().(string); ok {
		fmt.Fprintf(os.Stderr, "%s: %d worker errors, last: %s\n", name, qw.errs.Load(), e)
	}
}

// lagRecorder keeps start lags of jobs whose handlers started in the
// measured window.
type lagRecorder struct {
	mu         sync.Mutex
	from, to   time.Time
	lags       []time.Duration
	early      int64 // started before run_at
	late       int64 // started more than 2 s after run_at (the bound)
	again      int64 // attempts after the first (a claim lapsed: its fetch's answer was lost)
	inWindow   int64
	maxEarlyMs int64
}

func (l *lagRecorder) started(runAtMs int64, at time.Time, attempt uint32) {
	lag := at.Sub(time.UnixMilli(runAtMs))
	l.mu.Lock()
	defer l.mu.Unlock()
	if attempt > 1 {
		l.again++
	}
	if at.UnixMilli() < runAtMs {
		l.early++
		l.maxEarlyMs = max(l.maxEarlyMs, runAtMs-at.UnixMilli())
	}
	if lag > 2*time.Second {
		l.late++
	}
	if (l.from.IsZero() || !at.Before(l.from)) && (l.to.IsZero() || at.Before(l.to)) {
		l.inWindow++
		l.lags = append(l.lags, max(0, lag))
	}
}

// queueRun is what a queue workload runs on: a Queue client on the leader,
// a fresh queue, the start lags of its workers' jobs, and the Raft term at
// the start (for leader_changes).
type queueRun struct {
	q     coordv1.QueueClient
	name  string
	term0 uint64
	lags  lagRecorder
	stop  func() // ends the workers; nil before they start and after
	// delivery, when set, is the URL the jobs are delivered to instead of
	// workers (queue-delivery).
	delivery string
}

// onQueue makes a queue workload of run, on a fresh queue named for kind;
// workers that run starts and does not stop are stopped when it returns.
func onQueue(kind string, run func(ctx context.Context, cfg config, qr *queueRun, n int) (*result, error)) workload {
	return func(ctx context.Context, cfg config, n int) (*result, error) {
		q, done, err := leaderQueue(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer done()
		qr := &queueRun{q: q, term0: clusterTerm(cfg), name: queueName(kind)}
		defer qr.stopWorkers()
		return run(ctx, cfg, qr, n)
	}
}

// startWorkers starts n workers on the queue that record start lags.
func (qr *queueRun) startWorkers(ctx context.Context, cfg config, n int) error {
	stop, err := startWorkers(ctx, cfg, qr.q, qr.name, n, qr.lags.started)
	qr.stop = stop
	return err
}

// stopWorkers ends the workers, if they run.
func (qr *queueRun) stopWorkers() {
	if qr.stop != nil {
		qr.stop()
		qr.stop = nil
	}
}

func workerKind() string {
	if qcfg.raw {
		return fmt.Sprintf("raw(fetch %d)", qcfg.fetchMax)
	}
	return fmt.Sprintf("sdk(concurrency %d)", qcfg.concurrency)
}

func queueName(kind string) string {
	return fmt.Sprintf("bench-%s-%s-%d", run, kind, time.Now().UnixNano()%1e6)
}

// queueThroughput: submit in batches at a target rate, workers complete.
func queueThroughput(ctx context.Context, cfg config, qr *queueRun, n int) (*result, error) {
	start := time.Now().Add(cfg.warmup)
	end := start.Add(cfg.duration)
	qr.lags.from, qr.lags.to = start, end
	if qr.delivery == "" {
		if err := qr.startWorkers(ctx, cfg, n); err != nil {
			return nil, err
		}
	}

	// The cluster's counters over the measured window (cores, entries).
	window := sampleCounters(cfg, start, end)
	var submitted, submitErrs atomic.Int64
	var sub sync.WaitGroup
	submitters := 4
	batch := qcfg.batch
	var tick time.Duration
	if qcfg.rate > 0 {
		// One batch per submitter about every 100 ms.
		batch = min(qcfg.batch, max(1, qcfg.rate/10/submitters))
		tick = time.Duration(float64(time.Second) * float64(batch*submitters) / float64(qcfg.rate))
	}
	for s := 0; s < submitters; s++ {
		sub.Go(func() {
			jobs := make([]*coordv1.NewJob, batch)
			for i := range jobs {
				jobs[i] = &coordv1.NewJob{Queue: qr.name, Kind: "noop", Args: []byte(`{"n":1}`)}
				if qr.delivery != "" {
					jobs[i].Target = &coordv1.HttpTarget{Url: qr.delivery}
				}
			}
			next := time.Now()
			for time.Now().Before(end) {
				if tick > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					next = next.Add(tick)
				}
				t0 := time.Now()
				if qr.delivery != "" {
					args := fmt.Appendf(nil, `{"t":%d}`, t0.UnixMilli()) // what the endpoint measures the lag from
					for _, j := range jobs {
						j.Args = args
					}
				}
				_, err := qr.q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: jobs})
				if err != nil {
					submitErrs.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if !t0.Before(start) && t0.Before(end) {
					submitted.Add(int64(len(jobs)))
				}
			}
		})
	}
	sub.Wait()
	// Let the backlog drain a little (not counted), then stop.
	time.Sleep(500 * time.Millisecond)
	qr.stopWorkers()
	qr.lags.mu.Lock()
	defer qr.lags.mu.Unlock()
	r := &result{workload: "queue", clients: n, elapsed: cfg.duration, ops: qr.lags.inWindow, lat: qr.lags.lags,
		errors: submitErrs.Load()}
	r.add("workers", workerKind())
	r.add("latency", "start_lag")
	r.add("target_rate", qcfg.rate)
	r.add("batch", batch)
	r.add("submitted_per_s", round(float64(submitted.Load())/cfg.duration.Seconds()))
	r.add("completed_per_s", round(float64(qr.lags.inWindow)/cfg.duration.Seconds()))
	r.add("early", qr.lags.early)
	r.add("over_2s", qr.lags.late)
	r.add("second_attempts", qr.lags.again)
	r.add("leader_changes", leaderChanges(cfg, qr.term0))
	window(r) // the counters over the window (sampled at start and end)
	if st, err := qr.q.Stats(ctx, &coordv1.QueueStatsRequest{Queue: qr.name}); err == nil && len(st.GetQueues()) == 1 {
		r.add("backlog_at_end", st.GetQueues()[0].GetAvailable())
	}
	return r, nil
}

// queueSingle: n submitters, one job per Submit call (closed loop);
// --queue-workers workers complete them.
func queueSingle(ctx context.Context, cfg config, qr *queueRun, n int) (*result, error) {
	if err := qr.startWorkers(ctx, cfg, qcfg.workers); err != nil {
		return nil, err
	}
	return qr.submitLoop(cfg, "queue-single", n, fmt.Sprintf("%d %s", qcfg.workers, workerKind()), func(w, i int) error {
		_, err := qr.q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: qr.name, Kind: "noop"}}})
		return err
	}), nil
}

// queueSDKSingle is queue-single through the SDK: the submitters share
// --conns SDK clients (queue.Client.Submit, one job per call), whose
// concurrent calls coalesce (--submit-coalescing; 0: one RPC per call).
// submit_rpcs_per_job counts the Submit RPCs the clients sent.
func queueSDKSingle(ctx context.Context, cfg config, qr *queueRun, n int) (*result, error) {
	var rpcs, jobs atomic.Int64
	cs, closeAll, err := newClients(ctx, cfg, n, client.WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == coordv1.Queue_Submit_FullMethodName {
				rpcs.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})))
	if err != nil {
		return nil, err
	}
	defer closeAll()
	opt := queue.WithSubmitCoalescing(qcfg.coalesce)
	qs := map[*client.Client]*queue.Client{}
	subs := make([]*queue.Client, n)
	for i, c := range cs {
		if qs[c] == nil {
			qs[c] = queue.New(c, opt)
		}
		subs[i] = qs[c]
	}
	if err := qr.startWorkers(ctx, cfg, qcfg.workers); err != nil {
		return nil, err
	}
	r := qr.submitLoop(cfg, "queue-sdk-single", n, fmt.Sprintf("%d %s", qcfg.workers, workerKind()), func(w, i int) error {
		_, err := subs[w].Submit(ctx, "noop", nil, queue.Queue(qr.name))
		jobs.Add(1)
		return err
	})
	r.add("coalesce", qcfg.coalesce)
	r.add("submit_rpcs_per_job", math.Round(float64(rpcs.Load())/float64(max(jobs.Load(), 1))*1000)/1000)
	return r, nil
}

// submitLoop drives submit (one job per call) on n submitters while the
// running workers complete the jobs, then stops them: ops and latency are
// the submits; completed (and completed_per_s) the jobs whose handlers
// started in the measured window.
func (qr *queueRun) submitLoop(cfg config, name string, n int, workers string, submit func(w, i int) error) *result {
	qr.lags.mu.Lock()
	qr.lags.from = time.Now().Add(cfg.warmup) // as drive measures
	qr.lags.to = qr.lags.from.Add(cfg.duration)
	qr.lags.mu.Unlock()
	r := drive(cfg, name, n, func(w, i int) (bool, error) { return true, submit(w, i) })
	time.Sleep(500 * time.Millisecond)
	qr.stopWorkers()
	r.add("latency", "submit")
	r.add("workers", workers)
	r.add("leader_changes", leaderChanges(cfg, qr.term0))
	qr.lags.mu.Lock()
	r.add("completed", qr.lags.inWindow)
	r.add("completed_per_s", round(float64(qr.lags.inWindow)/cfg.duration.Seconds()))
	r.add("early", qr.lags.early)
	qr.lags.mu.Unlock()
	return r
}

// queueDelayed: --delayed-jobs jobs due uniformly 1 s to --delay-max ahead,
// submitted in batches of 1,000; n workers. None may start before its
// run_at; reports the start lag and jobs not done in time.
func queueDelayed(ctx context.Context, cfg config, qr *queueRun, n int) (*result, error) {
	if err := qr.startWorkers(ctx, cfg, n); err != nil {
		return nil, err
	}
	t0 := time.Now()
	spread := qcfg.delayMax - time.Second
	for sent := 0; sent < qcfg.delayed; {
		k := min(qcfg.batch, qcfg.delayed-sent)
		jobs := make([]*coordv1.NewJob, k)
		now := time.Now()
		for i := range jobs {
			at := now.Add(time.Second + time.Duration(rand.Int64N(int64(spread)+1)))
			jobs[i] = &coordv1.NewJob{Queue: qr.name, Kind: "noop", RunAt: pbtime.FromTime(at)}
		}
		if _, err := qr.q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: jobs}); err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		sent += k
	}
	submitTook := time.Since(t0)
	deadline := t0.Add(submitTook + qcfg.delayMax + 30*time.Second)
	for time.Now().Before(deadline) {
		qr.lags.mu.Lock()
		got := qr.lags.inWindow
		qr.lags.mu.Unlock()
		if got >= int64(qcfg.delayed) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	qr.stopWorkers()
	qr.lags.mu.Lock()
	defer qr.lags.mu.Unlock()
	r := &result{workload: "queue-delayed", clients: n, elapsed: time.Since(t0), ops: qr.lags.inWindow, lat: qr.lags.lags}
	r.add("workers", workerKind())
	r.add("latency", "start_lag")
	r.add("jobs", qcfg.delayed)
	r.add("delay_s", fmt.Sprintf("1-%g", qcfg.delayMax.Seconds()))
	r.add("submit_ms", submitTook.Milliseconds())
	r.add("not_started", int64(qcfg.delayed)-qr.lags.inWindow)
	r.add("early", qr.lags.early)
	r.add("max_early_ms", qr.lags.maxEarlyMs)
	r.add("over_2s", qr.lags.late)
	r.add("second_attempts", qr.lags.again)
	r.add("leader_changes", leaderChanges(cfg, qr.term0))
	return r, nil
}

// queueDelivery is queueThroughput with the jobs delivered by the nodes
// to an endpoint of this process, which records each request's start lag
// (arrival minus the submit's start, carried in the args) and answers 204.
func queueDelivery(ctx context.Context, cfg config, qr *queueRun, n int) (*result, error) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var args struct {
			T int64 `json:"t"`
		}
		body, _ := io.ReadAll(r.Body)
		attempt, _ := strconv.ParseUint(r.Header.Get("Coordd-Attempt"), 10, 32)
		if json.Unmarshal(body, &args) == nil && args.T > 0 {
			qr.lags.started(args.T, time.Now(), uint32(attempt))
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	qr.delivery = srv.URL + "/bench"
	r, err := queueThroughput(ctx, cfg, qr, n)
	if r != nil {
		r.workload = "queue-delivery"
		for i, kv := range r.extra {
			if kv[0] == "workers" {
				r.extra[i][1] = "the nodes' deliverers (64 slots, 16 per target, a node)"
			}
		}
	}
	return r, err
}
