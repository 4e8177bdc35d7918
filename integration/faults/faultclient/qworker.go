package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// qworker runs a queue Worker (client/queue) whose handler records its
// start, makes the job's effect with one FencedCommit fenced by the
// attempt's token, and completes. The effect's resource is per job
// ("eff/<job id>"); its idempotency key is per job ("job-<id>"), or for a
// schedule's job per occurrence ("occ/<schedule>/<occurrence ms>"), so a
// second job made for one occurrence would show as a second effect or a
// second job id of the occurrence in the histories.
type qworker struct {
	c           *client.Client
	rec         *recorder
	queue       string
	kinds       []string
	concurrency int
	hold        time.Duration
	holdAfter   time.Duration
	rawComplete bool
}

func (q *qworker) run(ctx context.Context) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w := queue.NewWorker(q.c, queue.WithQueue(q.queue, q.concurrency), queue.WithWorkerID(q.rec.name),
		queue.WithPollWait(2*time.Second), queue.WithLogger(logger), queue.WithShutdownTimeout(5*time.Second))
	for _, k := range q.kinds {
		w.Handle(k, q.handle)
	}
	if err := w.Start(); err != nil {
		return err
	}
	q.rec.write(Record{Kind: "event", Op: "worker-up", AtNs: time.Now().UnixNano()})
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.Stop(sctx)
}

func (q *qworker) handle(ctx context.Context, j *queue.Job) error {
	base := Record{Job: j.ID, Attempt: j.Attempt, RunAtMs: j.RunAt.UnixMilli(), Sched: j.Labels["coordd.schedule"]}
	key := "job-" + strconv.FormatUint(j.ID, 10)
	if base.Sched != "" {
		base.OccMs, _ = strconv.ParseInt(j.Labels["coordd.occurrence_ms"], 10, 64)
		key = fmt.Sprintf("occ/%s/%d", base.Sched, base.OccMs)
	}
	start := base
	start.Kind, start.Op, start.AtNs = "event", "start", time.Now().UnixNano()
	q.rec.write(start)
	if q.hold > 0 {
		// Work that does not look at its context: a pause here (SIGSTOP)
		// is a worker frozen mid-job.
		time.Sleep(q.hold)
	}
	// The fenced write goes out whatever the handler's context says: the
	// server, not the worker's SDK, must refuse it once the attempt is over.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	call := base
	call.Op, call.Resource, call.Key, call.CtxDone = "jcommit", "eff/"+strconv.FormatUint(j.ID, 10), key, ctx.Err() != nil
	done := q.rec.call(call)
	cm, err := j.FencedCommit(cctx, call.Resource, key, []byte(j.Token()))
	out := base
	out.Key = key
	if err == nil {
		out.Accepted, out.Duplicate = cm.Accepted, cm.Duplicate
		if cm.Duplicate {
			out.First = string(cm.Payload)
		}
	}
	done(out, err)
	if q.holdAfter > 0 {
		time.Sleep(q.holdAfter) // a pause here is a worker frozen between its effect and its completion
	}
	if q.rawComplete {
		// A write of its own, fenced by the attempt's token, under a key no
		// attempt used before: once the attempt is over it must be refused
		// (an effect write whose key a later attempt used is answered as
		// that one's duplicate instead).
		call := base
		call.Op, call.Resource, call.Key, call.CtxDone = "jprobe", "eff/"+strconv.FormatUint(j.ID, 10),
			fmt.Sprintf("probe-%d-%d", j.ID, j.Attempt), ctx.Err() != nil
		done := q.rec.call(call)
		pm, perr := j.FencedCommit(cctx, call.Resource, call.Key, []byte(j.Token()))
		out := base
		out.Key = call.Key
		if perr == nil {
			out.Accepted, out.Duplicate = pm.Accepted, pm.Duplicate
		}
		done(out, perr)
	}
	if q.rawComplete {
		call := base
		call.Op, call.CtxDone = "jcomplete", ctx.Err() != nil
		done := q.rec.call(call)
		resp, cerr := q.c.Queue().Complete(cctx, &coordv1.QueueCompleteRequest{WorkerId: q.rec.name,
			Completions: []*coordv1.JobCompletion{{JobId: j.ID, Attempt: j.Attempt}}})
		if cerr == nil {
			if rs := resp.GetResults(); len(rs) != 1 {
				cerr = errors.New("no completion result")
			} else {
				cerr = client.ItemError(rs[0].GetError())
			}
		}
		done(base, cerr)
	}
	if err != nil {
		return err
	}
	if !cm.Accepted {
		return errors.New("effect not accepted")
	}
	return nil
}
