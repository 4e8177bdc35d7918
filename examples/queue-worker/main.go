// Command queue-worker submits jobs to coordd's job queue and runs them on
// a Worker, each with one fenced effect: "charge order N" is recorded
// through FencedCommit with the attempt's token and the idempotency key
// job-<id>-charge, so the charge happens once however often the job runs.
//
// To show that, every --flaky-every'th job fails its first attempt after
// it charged (a timeout on the way back, say): the job is retried, its
// second attempt charges again, and coordd answers with the first charge
// (duplicate) instead of recording a second one. A worker that paused past
// its visibility timeout would be refused instead (its attempt lapsed).
//
//	scripts/local-cluster.sh up /tmp/coordd3
//	go run ./examples/queue-worker --endpoints 127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430
//	scripts/local-cluster.sh down /tmp/coordd3
//
// It exits non-zero unless every job succeeded and every order was
// charged exactly once.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/examples/internal/demo"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Charge is the args of a "charge-order" job.
type Charge struct {
	Order int `json:"order"`
	Cents int `json:"cents"`
}

// Receipt is the result a "charge-order" job records when it succeeds.
// Args and results are JSON values (coordd refuses others), so that
// coordctl and the HTTP API show them as they are.
type Receipt struct {
	Order        int `json:"order"`
	ChargedCents int `json:"charged_cents"`
}

type config struct {
	queue       string
	jobs        int
	concurrency int
	flakyEvery  int
	timeout     time.Duration
}

// report is what a run did.
type report struct {
	jobs       int
	succeeded  int
	attempts   int
	charged    int // commits recorded (first of their key)
	duplicates int // commits answered with the first outcome
}

func (r report) String() string {
	return fmt.Sprintf("%d jobs, %d succeeded in %d attempts; %d charges recorded, %d repeated charges answered as duplicates",
		r.jobs, r.succeeded, r.attempts, r.charged, r.duplicates)
}

func main() {
	var (
		endpoints   = flag.String("endpoints", demo.Env("COORD_ENDPOINTS", "127.0.0.1:7400"), "coordd gRPC endpoints, comma-separated")
		queueName   = flag.String("queue", "example-charges", "queue to use")
		jobs        = flag.Int("jobs", 20, "jobs to submit")
		concurrency = flag.Int("concurrency", 4, "handlers running at once")
		flakyEvery  = flag.Int("flaky-every", 5, "every n-th job fails its first attempt after charging (0: none)")
		timeout     = flag.Duration("timeout", time.Minute, "give up after this long")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := client.New(ctx, strings.Split(*endpoints, ","))
	if err != nil {
		fatal(err)
	}
	defer c.Close()
	r, err := run(ctx, c, config{queue: *queueName, jobs: *jobs, concurrency: *concurrency, flakyEvery: *flakyEvery, timeout: *timeout})
	fmt.Println(r)
	if err != nil {
		fatal(err)
	}
}

// run submits cfg.jobs charge jobs (a unique key each, so the submit can be
// repeated), runs them on a worker and waits until all have succeeded.
func run(ctx context.Context, c *client.Client, cfg config) (report, error) {
	rep := report{jobs: cfg.jobs}
	q := queue.New(c)
	run := strconv.FormatInt(time.Now().UnixNano(), 36) // unique keys per run of the example
	specs := make([]*coordv1.NewJob, cfg.jobs)
	for i := range specs {
		var err error
		specs[i], err = queue.NewJob("charge-order", Charge{Order: i + 1, Cents: 100 * (i + 1)}, queue.Queue(cfg.queue),
			queue.UniqueKey(fmt.Sprintf("charge-%s-%d", run, i+1)), queue.MaxAttempts(5),
			queue.Backoff(100*time.Millisecond, time.Second, 2), queue.VisibilityTimeout(10*time.Second))
		if err != nil {
			return rep, err
		}
	}
	submitted, err := q.SubmitBatch(ctx, specs)
	if err != nil {
		return rep, fmt.Errorf("submit: %w", err)
	}

	var mu sync.Mutex
	w := queue.NewWorker(c, queue.WithQueue(cfg.queue, cfg.concurrency), queue.WithPollWait(time.Second))
	queue.HandleJSON(w, "charge-order", func(ctx context.Context, j *queue.Job, ch Charge) error {
		// The effect, fenced by this attempt and keyed by the job: a later
		// attempt of the job gets the first charge back (Duplicate); an
		// attempt that is no longer live is refused (and ctx is cancelled).
		cm, err := j.FencedCommit(ctx, fmt.Sprintf("orders/%s/%d/charge", run, ch.Order),
			fmt.Sprintf("job-%d-charge", j.ID), []byte(strconv.Itoa(ch.Cents)))
		if err != nil {
			return err
		}
		mu.Lock()
		if cm.Duplicate {
			rep.duplicates++
		} else {
			rep.charged++
		}
		mu.Unlock()
		if cfg.flakyEvery > 0 && ch.Order%cfg.flakyEvery == 0 && j.Attempt == 1 {
			return errors.New("timeout reading the payment provider's answer") // retryable
		}
		res, err := json.Marshal(Receipt{Order: ch.Order, ChargedCents: ch.Cents})
		if err != nil {
			return err
		}
		j.SetResult(res)
		return nil
	})
	if err := w.Start(); err != nil {
		return rep, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()

	// Wait until every job is final (a stale read is enough to poll).
	for {
		done, err := final(ctx, q, submitted, &rep)
		if err != nil {
			return rep, err
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			return rep, fmt.Errorf("jobs not finished: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if rep.succeeded != cfg.jobs || rep.charged != cfg.jobs {
		return rep, fmt.Errorf("want %d jobs succeeded and %d charges recorded", cfg.jobs, cfg.jobs)
	}
	return rep, nil
}

// final reports whether every submitted job is in a final state, counting
// successes and attempts.
func final(ctx context.Context, q *queue.Client, jobs []*coordv1.SubmittedJob, rep *report) (bool, error) {
	succeeded, attempts := 0, 0
	for _, s := range jobs {
		j, err := q.Get(ctx, s.GetId(), client.Stale())
		if err != nil {
			return false, err
		}
		switch j.GetState() {
		case coordv1.JobState_JOB_STATE_SUCCEEDED:
			succeeded++
		case coordv1.JobState_JOB_STATE_DEAD, coordv1.JobState_JOB_STATE_CANCELLED:
			return false, fmt.Errorf("job %d is %s: %s", j.GetId(), j.GetState(), lastError(j))
		default:
			return false, nil
		}
		attempts += int(j.GetAttempts())
	}
	rep.succeeded, rep.attempts = succeeded, attempts
	return true, nil
}

func lastError(j *coordv1.QueueJob) string {
	log := j.GetAttemptLog()
	if len(log) == 0 {
		return ""
	}
	return log[len(log)-1].GetError()
}

func fatal(err error) { demo.Fatal("queue-worker", err) }
