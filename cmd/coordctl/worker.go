package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/client/queue"
)

// maxJobResult is the largest result a job may record (the server's limit,
// fsm.MaxJobResultBytes): a worker's command's stdout.
const maxJobResult = 64 << 10

// maxJobError is how much of a command's stderr a failure records (the
// server keeps 4 KiB of an error).
const maxJobError = 4 << 10

// The labels a schedule puts on the jobs it makes (fsm.LabelSchedule, ...).
const (
	labelSchedule   = "coordd.schedule"
	labelWindow     = "coordd.window"
	labelOccurrence = "coordd.occurrence_ms"
)

type workerOpts struct {
	queue, id                string
	kinds                    []string
	concurrency              int
	shutdownGrace, killGrace time.Duration
}

func (a *app) workerCmd() *cobra.Command {
	var o workerOpts
	cmd := &cobra.Command{
		Use:   "worker --queue Q -- CMD [ARGS...]",
		Short: "Run the jobs of a queue, each as a command: args on stdin, result on stdout",
		Long: `Fetches the jobs of --queue (the Go SDK's queue Worker: long polls, heartbeats
at a third of the visibility timeout, outcomes in batches) and runs each
attempt as CMD, up to --concurrency at a time:

  stdin   the job's args (JSON), then EOF
  stdout  the result: exit 0 completes the job with it (at most 64 KiB; JSON
          as is, other text as a JSON string; more fails the job for good)
  stderr  passed on to coordctl's stderr; its last 4 KiB is the error of a
          failed attempt

Exit status of CMD: 0 completes the job; 75 (EX_TEMPFAIL) fails the
attempt, retryable: the job runs again after its backoff while attempts
remain; killed by a signal (a crash, kill -9, the OOM killer): the same;
any other status fails the job for good (DEAD) with the stderr tail.

When the attempt ends while CMD runs — the job is cancelled (within about a
second: the worker watches its cancellations), a heartbeat is refused, or no
heartbeat was acknowledged in time — CMD is stopped before the server could
hand the job to another worker: SIGTERM, then SIGKILL after --kill-grace,
at the latest at the attempt's local deadline (send time of the last
acknowledged heartbeat + visibility timeout − margin), held by a guard
process as lease run does. Effects outside coordd should be fenced with
COORDD_FENCING_TOKEN (coordctl fence commit --token, client.FencedCommit):
writes of an attempt that is over are refused.

Without --kind the worker runs every kind; with --kind (repeatable) only
those, and a job of another kind fails, retryable (another worker of the
queue may run it): give every worker of a queue all of its kinds.

SIGINT or SIGTERM stops fetching and waits up to --shutdown-grace for the
running commands (saying so); then the attempts still running are handed
back (failed, retryable: "worker shutdown") and their commands stopped. A
second SIGINT/SIGTERM hands them back at once. Exit 0 after a stop, 2 bad
usage, 1 an error (e.g. the queue cannot be read).

Environment of CMD, besides coordctl's own:
  COORDD_JOB_ID          the job id
  COORDD_ATTEMPT         the attempt number (1 the first time)
  COORDD_FENCING_TOKEN   the attempt's token, job:ID:ATTEMPT
  COORDD_KIND            the job's kind
  COORDD_QUEUE           the job's queue
  COORDD_WORKER_ID       the worker id the attempt is recorded with
  COORD_ENDPOINTS        the endpoints coordctl used (COORD_TLS_* too)
  for a job made by a schedule:
  COORDD_SCHEDULE        the schedule's name
  COORDD_WINDOW          the occurrence's window (e.g. 2026-09-25)
  COORDD_OCCURRENCE      the occurrence, RFC 3339 in UTC`,
		Example: `  coordctl worker --queue billing -- ./handle-job.sh
  coordctl worker --queue billing --kind send-invoice --concurrency 4 -- python3 send_invoice.py
  coordctl worker --queue billing -- sh -c 'jq .invoice; coordctl fence commit "invoices/$COORDD_JOB_ID" --token "$COORDD_FENCING_TOKEN" --key sent >/dev/null'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.concurrency < 1 || o.concurrency > 1000 {
				return fmt.Errorf("--concurrency %d: want 1 to 1000", o.concurrency)
			}
			return dashArgs(0)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			return a.runWorker(ctx, args, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.queue, "queue", "", "the queue (required)")
	_ = cmd.MarkFlagRequired("queue")
	f.StringSliceVar(&o.kinds, "kind", nil, "run only jobs of this kind (repeatable; default every kind)")
	f.IntVar(&o.concurrency, "concurrency", 1, "commands running at a time, 1 to 1000")
	f.StringVar(&o.id, "worker-id", "", "worker id the attempts are recorded with (default host:pid:random)")
	f.DurationVar(&o.shutdownGrace, "shutdown-grace", 30*time.Second, "after SIGINT/SIGTERM, how long to wait for running commands before handing their jobs back")
	f.DurationVar(&o.killGrace, "kill-grace", defaultKillGrace, "time between SIGTERM and SIGKILL when a command must stop (at most a quarter of the visibility timeout)")
	return cmd
}

func (a *app) runWorker(ctx context.Context, argv []string, o workerOpts) error {
	opts := []queue.WorkerOption{queue.WithQueue(o.queue, o.concurrency),
		queue.WithLogger(slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		queue.WithShutdownTimeout(o.shutdownGrace)}
	if o.id != "" {
		opts = append(opts, queue.WithWorkerID(o.id))
	}
	w := queue.NewWorker(a.client, opts...)
	var (
		running  atomic.Int64
		handlers sync.WaitGroup // until each command has exited
	)
	h := func(ctx context.Context, j *queue.Job) error {
		handlers.Add(1)
		defer handlers.Done()
		running.Add(1)
		defer running.Add(-1)
		return a.runJob(ctx, w.ID(), j, argv, o.killGrace)
	}
	if len(o.kinds) == 0 {
		w.HandleDefault(h)
	}
	for _, k := range o.kinds {
		w.Handle(k, h)
	}
	if err := w.Start(); err != nil {
		return fail("worker", err)
	}
	fmt.Fprintf(a.errOut, "worker %s: running jobs of queue %s, %d at a time, with %s\n", w.ID(), o.queue, o.concurrency, argv[0])
	<-ctx.Done()

	// A second signal hands the running attempts back at once.
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownGrace)
	defer cancel()
	go func() {
		select {
		case <-again:
			cancel()
		case <-sctx.Done():
		}
	}()
	if n := running.Load(); n > 0 {
		fmt.Fprintf(a.errOut, "worker %s: stopping: fetching no more jobs; waiting up to %s for %d running command(s), "+
			"then handing their jobs back (SIGINT/SIGTERM again: at once)\n", w.ID(), o.shutdownGrace, n)
	}
	err := w.Stop(sctx)
	// The commands of the attempts handed back got SIGTERM: wait for them
	// (their guards send SIGKILL after the kill grace).
	handlers.Wait()
	if errors.Is(err, queue.ErrWorkerShutdown) {
		fmt.Fprintf(a.errOut, "worker %s: stopped: %v\n", w.ID(), err)
		return nil
	}
	if err != nil {
		return fail("worker", err)
	}
	fmt.Fprintf(a.errOut, "worker %s: stopped\n", w.ID())
	return nil
}

// jobEnv is the environment of the command that runs attempt j.
func jobEnv(workerID string, j *queue.Job) []string {
	env := []string{"COORDD_JOB_ID=" + strconv.FormatUint(j.ID, 10), "COORDD_ATTEMPT=" + strconv.FormatUint(uint64(j.Attempt), 10),
		"COORDD_FENCING_TOKEN=" + j.Token(), "COORDD_KIND=" + j.Kind, "COORDD_QUEUE=" + j.Queue, "COORDD_WORKER_ID=" + workerID}
	if s, ok := j.Labels[labelSchedule]; ok {
		env = append(env, "COORDD_SCHEDULE="+s, "COORDD_WINDOW="+j.Labels[labelWindow])
		if ms, err := strconv.ParseInt(j.Labels[labelOccurrence], 10, 64); err == nil {
			env = append(env, "COORDD_OCCURRENCE="+time.UnixMilli(ms).UTC().Format(time.RFC3339Nano))
		}
	}
	return env
}

// runJob runs attempt j as argv and turns its exit into the attempt's
// outcome (see workerCmd).
func (a *app) runJob(ctx context.Context, workerID string, j *queue.Job, argv []string, killGrace time.Duration) error {
	what := fmt.Sprintf("job %d attempt %d", j.ID, j.Attempt)
	out := &capped{max: maxJobResult + 1}
	errTail := &tailBuf{out: a.errOut, max: maxJobError}
	started := time.Now()
	ch, err := startChild(childSpec{argv: argv, env: append(a.childEnv(), jobEnv(workerID, j)...), stdin: bytes.NewReader(j.Args),
		stdout: out, stderr: errTail, killGrace: min(killGrace, j.VisibilityTimeout/4), what: what}, j.Deadline())
	if err != nil {
		return fmt.Errorf("%s: cannot start %s: %w", what, argv[0], err)
	}
	j.OnDeadline(ch.setDeadline)
	fmt.Fprintf(a.errOut, "%s (kind %s) started: %s, pid %d\n", what, j.Kind, argv[0], ch.cmd.Process.Pid)
	select {
	case <-ch.Done():
	case <-ctx.Done():
		ch.stop(fmt.Sprintf("%s is over: %v", what, context.Cause(ctx)))
	}
	code := ch.exitCode()
	took := time.Since(started).Round(time.Millisecond)
	if ctx.Err() != nil {
		fmt.Fprintf(a.errOut, "%s stopped after %s (%v): exit %d\n", what, took, context.Cause(ctx), code)
		return context.Cause(ctx)
	}
	fmt.Fprintf(a.errOut, "%s: exit %d after %s\n", what, code, took)
	return jobOutcome(j, code, out, errTail.String())
}

// jobOutcome is the outcome of an attempt whose command exited with code,
// having written out and errTail: nil (completed, result set), an error
// (retryable) or a Permanent one.
func jobOutcome(j *queue.Job, code int, out *capped, errTail string) error {
	switch {
	case code == 0:
		if out.total > maxJobResult {
			return queue.Permanent(fmt.Errorf("the result (stdout) is %d bytes; the limit is %d", out.total, maxJobResult))
		}
		res := resultPayload(out.buf.Bytes())
		if len(res) > maxJobResult {
			return queue.Permanent(fmt.Errorf("the result (stdout as a JSON string) is %d bytes; the limit is %d", len(res), maxJobResult))
		}
		j.SetResult(res)
		return nil
	case code == exitTempFail:
		return fmt.Errorf("exit %d (EX_TEMPFAIL, retryable): %s", code, errTail)
	case code > 128:
		return fmt.Errorf("killed by signal %d (%s), retryable: %s", code-128, syscall.Signal(code-128), errTail)
	}
	return queue.Permanent(fmt.Errorf("exit %d: %s", code, errTail))
}
