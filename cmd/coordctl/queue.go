package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The job queue (coord.v1.Queue): job submit|get|list|cancel|retry and
// queue stats. Times of the queue are calendar time (the leader's wall
// clock), shown in UTC; ages are measured at the calendar time a Get or
// Stats answer carries.

func (a *app) jobSubmitCmd() *cobra.Command {
	var (
		q, args, at, key string
		in, vt, maxRun   time.Duration
		attempts, prio   int
		labels           []string
		target           targetFlags
		cmd              *cobra.Command // run asks it which flags were given
	)
	check := func(cmd *cobra.Command, pos []string) error {
		if err := cobra.ExactArgs(1)(cmd, pos); err != nil {
			return err
		}
		if args != "" && !json.Valid([]byte(args)) {
			return fmt.Errorf("--args %q: not valid JSON", args)
		}
		if at != "" {
			if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
				return fmt.Errorf("--at %q: want an RFC 3339 time such as 2026-09-26T02:00:00Z", at)
			}
		}
		if cmd.Flags().Changed("at") && cmd.Flags().Changed("in") {
			return fmt.Errorf("--at and --in: give one")
		}
		if in < 0 {
			return fmt.Errorf("--in %s: negative", in)
		}
		if err := target.check(); err != nil {
			return err
		}
		_, err := parseLabels(labels)
		return err
	}
	cmd = a.newCmd("submit KIND [--queue Q] [--args JSON] [--at TIME | --in DURATION]", "Submit a job to the queue: now, at a time, or after a delay",
		`  coordctl job submit send-invoice --queue billing --args '{"invoice":42}' --unique-key invoice-42
  coordctl job submit nightly-report --at 2026-09-26T02:00:00Z --max-attempts 3
  coordctl -o json job submit cleanup --in 10m --label team=ops | jq -r '.jobs[0].id'
  coordctl job submit charge --args '{"invoice":42}' --target-url https://billing.internal/jobs/charge --target-secret billing`, check,
		func(ctx context.Context, pos []string) error {
			if key == "" {
				// A key of its own makes the submit safe to repeat: the SDK
				// retries it after an unknown outcome, and so can the user.
				key = queue.AutoKey()
			}
			opts := []queue.Option{queue.Queue(q), queue.UniqueKey(key)}
			f := cmd.Flags()
			if f.Changed("max-attempts") {
				opts = append(opts, queue.MaxAttempts(attempts))
			}
			if f.Changed("priority") {
				opts = append(opts, queue.Priority(prio))
			}
			if vt > 0 {
				opts = append(opts, queue.VisibilityTimeout(vt))
			}
			if maxRun > 0 {
				opts = append(opts, queue.MaxRun(maxRun))
			}
			if at != "" {
				t, _ := time.Parse(time.RFC3339Nano, at)
				opts = append(opts, queue.At(t))
			}
			if in > 0 {
				opts = append(opts, queue.After(in))
			}
			ls, _ := parseLabels(labels)
			for k, v := range ls {
				opts = append(opts, queue.Label(k, v))
			}
			if target.given() {
				opts = append(opts, queue.Target(target.target()))
			}
			var raw []byte
			if args != "" {
				raw = []byte(args)
			}
			spec, err := queue.NewJob(pos[0], raw, opts...)
			if err != nil {
				return fail("job submit "+pos[0], err)
			}
			op := "job submit " + pos[0]
			resp, err := a.client.Queue().Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{spec}})
			if errors.Is(err, client.ErrUnknownOutcome) {
				return &opError{op: op, err: err, msg: a.uncertain(err, fmt.Sprintf("the job may have been added; "+
					"repeat the command with --unique-key %s to learn its outcome without adding it twice", key))}
			}
			return a.reply(op, resp, err, func(w io.Writer) { submittedTable(w, resp.GetJobs()) })
		})
	cmd.Long = `Submits one job of kind KIND (the task's name: it selects the worker's
handler) with its args (JSON). It is due now, at --at (RFC 3339, on the
cluster's clock) or --in a duration from now; it is never handed out
before then. With --unique-key a second submit with the same key returns
the first job (DUPLICATE) and adds nothing, so it is safe to repeat.
Without one, coordctl makes a key for this submit ("auto:" and a random
id): when the outcome is unknown (the leader was lost while applying, the
connection broke) the submit is retried with it for up to --timeout, and
if the outcome is still unknown the error names the key to repeat the
command with.`
	f := cmd.Flags()
	f.StringVar(&q, "queue", "", `queue (default "default")`)
	f.StringVar(&args, "args", "", "the job's parameters, JSON")
	f.StringVar(&at, "at", "", "due at this RFC 3339 time")
	f.DurationVar(&in, "in", 0, "due this long from now")
	f.StringVar(&key, "unique-key", "", "idempotency key within the queue: a repeat returns the first job (default: a generated auto:… key)")
	f.IntVar(&attempts, "max-attempts", 0, "attempts before the job is dead, 1 to 100 (default 25)")
	f.IntVar(&prio, "priority", 0, "-100 to 100; higher is fetched first within the queue")
	f.DurationVar(&vt, "visibility-timeout", 0, "an attempt without a heartbeat for this long lapses (default 30s)")
	f.DurationVar(&maxRun, "max-run", 0, "each attempt ends at its start + this, heartbeats or not (default the queue's max_run, else none)")
	f.StringArrayVar(&labels, "label", nil, "key=value label, repeatable")
	target.add(f, "the job")
	return cmd
}

// parseID reads a job id argument.
func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("job id %q: want a positive integer", s)
	}
	return id, nil
}

// idArg is the Args of commands taking one job id.
func idArg(cmd *cobra.Command, pos []string) error {
	if err := cobra.ExactArgs(1)(cmd, pos); err != nil {
		return err
	}
	_, err := parseID(pos[0])
	return err
}

// jobIDCmd is "job VERB ID", its id checked by idArg; run gets the id and
// the op that names the command in an error.
func (a *app) jobIDCmd(verb, short, example string, run func(ctx context.Context, id uint64, op string) error) *cobra.Command {
	return a.newCmd(verb+" ID", short, example, idArg, func(ctx context.Context, pos []string) error {
		id, _ := parseID(pos[0])
		return run(ctx, id, "job "+verb+" "+pos[0])
	})
}

func (a *app) jobGetCmd() *cobra.Command {
	return a.jobIDCmd("get", "Show a queued job: state, args, and its attempts with tokens and errors",
		`  coordctl job get 17
  coordctl -o json job get 17 | jq -r '.job.attempt_log[-1].error'`,
		func(ctx context.Context, id uint64, op string) error {
			resp, err := a.client.Queue().Get(ctx, &coordv1.QueueGetRequest{Id: id})
			return a.reply(op, resp, err, func(w io.Writer) { queueJobText(w, resp.GetJob(), resp.GetCalendarTimeMs()) })
		})
}

func (a *app) jobListCmd() *cobra.Command {
	var (
		q, state, kind, label string
		page                  pageFlags
	)
	check := func(cmd *cobra.Command, pos []string) error {
		if err := cobra.NoArgs(cmd, pos); err != nil {
			return err
		}
		if _, err := parseState(state); err != nil {
			return err
		}
		if label != "" && !strings.Contains(label, "=") {
			return fmt.Errorf("--label %q: want key=value", label)
		}
		return checkLimit(page.limit)
	}
	cmd := a.newCmd("list [--queue Q] [--state S] [--kind K] [--label k=v]", "List queued jobs, newest first (one page; --page-token for the next)",
		`  coordctl job list --queue billing --state dead
  coordctl job list --kind send-invoice --label tenant=acme --limit 20
  coordctl -o json job list --state retryable | jq -r '.next_page_token'`, check,
		func(ctx context.Context, _ []string) error {
			st, _ := parseState(state)
			resp, err := a.client.Queue().List(ctx, &coordv1.QueueListRequest{Queue: q, State: st, Kind: kind, Label: label,
				PageSize: page.limit, PageToken: page.token})
			return a.reply("job list", resp, err, func(w io.Writer) {
				queueJobTable(w, resp.GetJobs())
				morePages(w, resp)
			})
		})
	f := cmd.Flags()
	f.StringVar(&q, "queue", "", "only this queue")
	f.StringVar(&state, "state", "", "only this state: "+strings.Join(stateNames(), ", "))
	f.StringVar(&kind, "kind", "", "only this kind")
	f.StringVar(&label, "label", "", "only jobs with this key=value label")
	page.add(cmd, "jobs")
	return cmd
}

// jobChangeCmd is cancel or retry: one call on a job, then the job as it
// is after it (unchanged says so when the call found it done already).
func jobChangeCmd[R interface {
	proto.Message
	GetDuplicate() bool
	GetJob() *coordv1.QueueJob
}](a *app, verb, short, unchanged string, call func(ctx context.Context, id uint64) (R, error)) *cobra.Command {
	return a.jobIDCmd(verb, short, "  coordctl job "+verb+" 17", func(ctx context.Context, id uint64, op string) error {
		resp, err := call(ctx, id)
		return a.reply(op, resp, err, noteIf(resp.GetDuplicate(), unchanged, func(w io.Writer) {
			queueJobTable(w, []*coordv1.QueueJob{resp.GetJob()})
		}))
	})
}

func (a *app) jobCancelCmd() *cobra.Command {
	return jobChangeCmd(a, "cancel", "Cancel a queued job; a running attempt ends now: a Go SDK worker cancels its handler within about a second, other workers learn it at their next heartbeat (refused: JOB_CANCELLED)", "unchanged: already cancelled",
		func(ctx context.Context, id uint64) (*coordv1.QueueCancelResponse, error) {
			return a.client.Queue().Cancel(ctx, &coordv1.QueueCancelRequest{Id: id})
		})
}

func (a *app) jobRetryCmd() *cobra.Command {
	cmd := jobChangeCmd(a, "retry", "Make a dead, cancelled, retryable or scheduled job available now", "unchanged: already available",
		func(ctx context.Context, id uint64) (*coordv1.QueueRetryResponse, error) {
			resp, err := a.client.Queue().Retry(ctx, &coordv1.QueueRetryRequest{Id: id})
			if errors.Is(err, client.ErrUnknownOutcome) {
				err = &opError{op: fmt.Sprintf("job retry %d", id), err: err, msg: a.uncertain(err, fmt.Sprintf(
					"the job may be available again; 'coordctl job get %d' shows its state before you retry again", id))}
			}
			return resp, err
		})
	cmd.Long = `Makes the job available now: a dead or cancelled one is revived (with one
more attempt if its attempts are used up), a retryable one skips the rest of
its backoff, a scheduled one runs early. A running job cannot be retried
(cancel it first); a succeeded one cannot either.`
	return cmd
}

func (a *app) queueStatsCmd() *cobra.Command {
	return a.newCmd("stats [QUEUE]", "Jobs per state and the oldest available job's age (dispatch lag), per queue", `  coordctl queue stats
  coordctl -o json queue stats billing | jq '.queues[0].oldest_available_age_ms'`, cobra.MaximumNArgs(1),
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.Queue().Stats(ctx, &coordv1.QueueStatsRequest{Queue: firstArg(pos)})
			return a.reply("queue stats", resp, err, func(w io.Writer) { queueStatsTable(w, resp.GetQueues()) })
		})
}

// jobStateName is a state as the tables show it: "retryable".
func jobStateName(s coordv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

func stateNames() []string {
	var out []string
	for v := range coordv1.JobState_name {
		if v != 0 {
			out = append(out, jobStateName(coordv1.JobState(v)))
		}
	}
	slices.SortFunc(out, func(x, y string) int {
		return int(coordv1.JobState_value["JOB_STATE_"+strings.ToUpper(x)] - coordv1.JobState_value["JOB_STATE_"+strings.ToUpper(y)])
	})
	return out
}

// parseState reads --state ("dead", "DEAD" or "JOB_STATE_DEAD"); "" is any.
func parseState(s string) (coordv1.JobState, error) {
	if s == "" {
		return coordv1.JobState_JOB_STATE_UNSPECIFIED, nil
	}
	v, ok := coordv1.JobState_value["JOB_STATE_"+strings.TrimPrefix(strings.ToUpper(s), "JOB_STATE_")]
	if !ok || v == 0 {
		return 0, fmt.Errorf("--state %q: want one of %s", s, strings.Join(stateNames(), ", "))
	}
	return coordv1.JobState(v), nil
}

func outcomeName(o coordv1.AttemptOutcome) string {
	return strings.ToLower(strings.TrimPrefix(o.String(), "ATTEMPT_OUTCOME_"))
}

// utc renders a calendar time (Unix ms) in UTC to the millisecond, "-" for 0.
func utc(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// utcAt renders a calendar time with its distance from now: "… (in 4.0s)".
func utcAt(ms, now int64) string {
	if ms == 0 || now == 0 {
		return utc(ms)
	}
	return utc(ms) + " (" + agoMs(now-ms) + ")"
}

func submittedTable(out io.Writer, js []*coordv1.SubmittedJob) {
	tab(out, func(w io.Writer) {
		row(w, "ID", "STATE", "RUN AT", "SUBMIT")
		for _, j := range js {
			submit := "added"
			if j.GetDuplicate() {
				submit = "duplicate: unique key names this job, nothing added"
			}
			row(w, j.GetId(), jobStateName(j.GetState()), utc(j.GetRunAtMs()), submit)
		}
	})
}

func queueJobTable(out io.Writer, js []*coordv1.QueueJob) {
	tab(out, func(w io.Writer) {
		row(w, "ID", "QUEUE", "KIND", "STATE", "ATTEMPTS", "PRIORITY", "RUN AT", "UPDATED", "LABELS")
		for _, j := range js {
			row(w, j.GetId(), j.GetQueue(), j.GetKind(), jobStateName(j.GetState()),
				fmt.Sprintf("%d/%d", j.GetAttempts(), j.GetMaxAttempts()), j.GetPriority(), utc(j.GetRunAtMs()),
				utc(j.GetUpdatedAtMs()), orDash(labelText(j.GetLabels())))
		}
	})
}

func labelText(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// queueJobText shows one job: its fields, its attempts (tokens, outcome,
// worker, times, first line of the error) and the last error in full.
func queueJobText(out io.Writer, j *coordv1.QueueJob, now int64) {
	tab(out, func(w io.Writer) {
		row(w, "ID", j.GetId())
		row(w, "QUEUE", j.GetQueue())
		row(w, "KIND", j.GetKind())
		row(w, "STATE", jobStateName(j.GetState()))
		row(w, "ATTEMPTS", fmt.Sprintf("%d of %d", j.GetAttempts(), j.GetMaxAttempts()))
		row(w, "PRIORITY", j.GetPriority())
		row(w, "RUN AT", utcAt(j.GetRunAtMs(), now))
		row(w, "CREATED", utcAt(j.GetCreatedAtMs(), now))
		row(w, "UPDATED", utcAt(j.GetUpdatedAtMs(), now))
		row(w, "FINISHED", utcAt(j.GetFinishedAtMs(), now))
		row(w, "BACKOFF", fmt.Sprintf("%s to %s, x%g", human(j.GetBackoffInitialMs()), human(j.GetBackoffMaxMs()), j.GetBackoffFactor()))
		row(w, "VISIBILITY TIMEOUT", human(j.GetVisibilityTimeoutMs()))
		row(w, "UNIQUE KEY", orDash(j.GetUniqueKey()))
		row(w, "LABELS", orDash(labelText(j.GetLabels())))
		row(w, "SUBMITTED BY", orDash(j.GetSubmittedBy()))
		row(w, "ARGS", short(string(j.GetArgs()), 200))
		if t := j.GetTarget(); t != nil {
			row(w, "TARGET", targetText(t))
		}
	})
	log := j.GetAttemptLog()
	if len(log) == 0 {
		return
	}
	fmt.Fprintln(out)
	var last *coordv1.JobAttempt
	// A delivered job's attempts show each request's status and latency.
	delivered := j.GetTarget() != nil || slices.ContainsFunc(log, func(a *coordv1.JobAttempt) bool {
		return a.GetDeliveryStatus() != 0 || a.GetDeliveryLatency() != nil
	})
	tab(out, func(w io.Writer) {
		head := []any{"ATTEMPT", "TOKEN", "OUTCOME", "WORKER", "STARTED", "RAN FOR", "HEARTBEATS", "ERROR"}
		if delivered {
			head = slices.Insert(head, 3, any("DELIVERY"))
		}
		row(w, head...)
		for _, a := range log {
			ran := "-"
			switch {
			case a.GetFinishedAtMs() > 0:
				ran = human(a.GetFinishedAtMs() - a.GetStartedAtMs())
			case now > 0:
				ran = human(now-a.GetStartedAtMs()) + " so far, deadline " + agoMs(now-a.GetDeadlineMs())
			}
			if a.GetError() != "" {
				last = a
			}
			tok := a.GetToken()
			if tok == "" {
				tok = queue.Token(j.GetId(), a.GetNumber())
			}
			cells := []any{a.GetNumber(), tok, outcomeName(a.GetOutcome()), orDash(a.GetWorkerId()), utc(a.GetStartedAtMs()),
				ran, a.GetHeartbeats(), firstLine(a.GetError(), 60)}
			if delivered {
				cells = slices.Insert(cells, 3, any(deliveryText(a)))
			}
			row(w, cells...)
		}
	})
	if last != nil {
		fmt.Fprintf(out, "\nerror of attempt %d:\n", last.GetNumber())
		for _, line := range strings.Split(strings.TrimRight(last.GetError(), "\n"), "\n") {
			if line == "" {
				fmt.Fprintln(out)
				continue
			}
			fmt.Fprintf(out, "  %s\n", line)
		}
	}
}

// deliveryText is a delivery attempt's request: "HTTP 201 in 12ms", "no
// response after 30s" (a timeout, a connection error: the error says
// which), or "-" (not sent, or still running).
func deliveryText(a *coordv1.JobAttempt) string {
	switch {
	case a.GetDeliveryStatus() != 0:
		return fmt.Sprintf("HTTP %d in %s", a.GetDeliveryStatus(), human(a.GetDeliveryLatencyMs()))
	case a.GetDeliveryLatency() != nil:
		return "no response after " + human(a.GetDeliveryLatencyMs())
	}
	return "-"
}

func queueStatsTable(out io.Writer, qs []*coordv1.QueueStats) {
	if len(qs) == 0 {
		fmt.Fprintln(out, "no jobs")
		return
	}
	paused := slices.ContainsFunc(qs, (*coordv1.QueueStats).GetPaused) // the column only when a queue is paused
	tab(out, func(w io.Writer) {
		head := []any{"QUEUE", "SCHEDULED", "AVAILABLE", "RUNNING", "RETRYABLE", "SUCCEEDED", "CANCELLED", "DEAD", "OLDEST AVAILABLE"}
		if paused {
			head = append(head, "PAUSED")
		}
		row(w, head...)
		for _, s := range qs {
			oldest := "-"
			if s.GetAvailable() > 0 {
				oldest = human(s.GetOldestAvailableAgeMs())
			}
			cells := []any{s.GetQueue(), s.GetScheduled(), s.GetAvailable(), runningText(s), s.GetRetryable(), s.GetSucceeded(),
				s.GetCancelled(), s.GetDead(), oldest}
			if paused {
				cells = append(cells, pausedText(s))
			}
			row(w, cells...)
		}
	})
}
