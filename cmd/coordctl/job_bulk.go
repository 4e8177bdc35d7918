package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/internal/pbtime"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Bulk actions: "job retry|cancel|delete [IDS...] [filters]" (Queue.Bulk,
// fsm/queue_bulk.go). One id and no filter is the one-job call it always
// was; several ids or a filter count the jobs first (--dry-run stops
// there), ask before acting on more than confirmAbove of them (on a
// terminal; refused elsewhere without --yes), start the operation and
// follow it to its end.

// confirmAbove is the largest set acted on without --yes or a yes at the
// prompt.
const confirmAbove = 100

// stdinTTY and stdin are the prompt's terminal (tests replace them).
var (
	stdinTTY = func() bool {
		fi, err := os.Stdin.Stat()
		return err == nil && fi.Mode()&os.ModeCharDevice != 0
	}
	stdin io.Reader = os.Stdin
	// bulkPoll is how often the progress of an operation is read.
	bulkPoll = 500 * time.Millisecond
)

type bulkFlags struct {
	queue, state, kind, label                  string
	since, until, finishedSince, finishedUntil string
	dryRun, yes                                bool
}

func (f *bulkFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.queue, "queue", "", "only jobs of this queue")
	fl.StringVar(&f.state, "state", "", "only jobs in this state: "+strings.Join(stateNames(), ", "))
	fl.StringVar(&f.kind, "kind", "", "only jobs of this kind")
	fl.StringVar(&f.label, "label", "", "only jobs with this key=value label")
	fl.StringVar(&f.since, "since", "", "only jobs created at or after this time (RFC 3339)")
	fl.StringVar(&f.until, "until", "", "only jobs created before this time (RFC 3339)")
	fl.StringVar(&f.finishedSince, "finished-since", "", "only final jobs that finished at or after this time (RFC 3339)")
	fl.StringVar(&f.finishedUntil, "finished-until", "", "only final jobs that finished before this time (RFC 3339)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "only count the jobs the filter selects")
	fl.BoolVar(&f.yes, "yes", false, fmt.Sprintf("act on more than %d jobs without asking", confirmAbove))
}

// filtered reports whether any filter flag is set.
func (f *bulkFlags) filtered() bool {
	return f.queue != "" || f.state != "" || f.kind != "" || f.label != "" || f.since != "" || f.until != "" ||
		f.finishedSince != "" || f.finishedUntil != ""
}

// filter builds the request's filter from the flags and ids.
func (f *bulkFlags) filter(pos []string) (*coordv1.JobFilter, error) {
	st, err := parseState(f.state)
	if err != nil {
		return nil, err
	}
	if f.label != "" && !strings.Contains(f.label, "=") {
		return nil, fmt.Errorf("--label %q: want key=value", f.label)
	}
	out := &coordv1.JobFilter{Queue: f.queue, State: st, Kind: f.kind, Label: f.label}
	for flag, dst := range map[string]*string{"since": &f.since, "until": &f.until, "finished-since": &f.finishedSince, "finished-until": &f.finishedUntil} {
		if *dst == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, *dst)
		if err != nil {
			return nil, fmt.Errorf("--%s %q: want an RFC 3339 time such as 2026-09-26T02:00:00Z", flag, *dst)
		}
		ts := pbtime.FromTime(at)
		switch flag {
		case "since":
			out.CreatedAfter = ts
		case "until":
			out.CreatedBefore = ts
		case "finished-since":
			out.FinishedAfter = ts
		default:
			out.FinishedBefore = ts
		}
	}
	for _, p := range pos {
		id, err := parseID(p)
		if err != nil {
			return nil, err
		}
		out.Ids = append(out.Ids, id)
	}
	if len(out.Ids) == 0 && !f.filtered() {
		return nil, fmt.Errorf("name job ids or a filter (--queue, --state, --kind, --label, --since, --until, --finished-since, --finished-until)")
	}
	return out, nil
}

// bulkable makes a one-job command (cancel, retry, delete) take several
// ids and filters: one id without a filter runs single as before.
func (a *app) bulkable(single *cobra.Command, verb string, action coordv1.BulkAction) *cobra.Command {
	var f bulkFlags
	oneArgs, oneRun := single.Args, single.RunE
	isOne := func(pos []string) bool { return len(pos) == 1 && !f.filtered() && !f.dryRun }
	single.Use = verb + " [IDS...] [--queue Q] [--state S] [--kind K] [--label k=v] [--since T] [--until T] [--dry-run] [--yes]"
	single.Example += fmt.Sprintf(`
  coordctl job %[1]s 17 18 19
  coordctl job %[1]s --queue billing --state dead --dry-run
  coordctl job %[1]s --queue billing --state dead --since 2026-09-25T00:00:00Z --yes`, verb)
	single.Long = strings.TrimSpace(single.Long + fmt.Sprintf(`

With several ids, or a filter, it is a bulk action (Queue.Bulk): the jobs are
counted first (--dry-run stops there), more than %d need --yes or a yes at
the prompt (refused when stdin is not a terminal), then the leader applies
it in batches of at most 1,000 jobs per log entry, resuming after a leader
change; coordctl follows the operation to its end. Jobs the action does not
apply to are counted as skipped.`, confirmAbove))
	single.Args = func(cmd *cobra.Command, pos []string) error {
		if isOne(pos) {
			return oneArgs(cmd, pos)
		}
		_, err := f.filter(pos)
		return err
	}
	single.RunE = func(cmd *cobra.Command, pos []string) error {
		if isOne(pos) {
			return oneRun(cmd, pos)
		}
		return a.runBulk(cmd.Context(), verb, action, pos, &f)
	}
	f.add(single)
	return single
}

func (a *app) runBulk(ctx context.Context, verb string, action coordv1.BulkAction, pos []string, f *bulkFlags) error {
	op := "job " + verb
	filter, err := f.filter(pos)
	if err != nil {
		return err
	}
	call := func(req *coordv1.QueueBulkRequest) (*coordv1.QueueBulkResponse, error) {
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		return a.client.Queue().Bulk(cctx, req)
	}
	dry, err := call(&coordv1.QueueBulkRequest{Action: action, Filter: filter, DryRun: true})
	if err != nil || f.dryRun {
		return a.reply(op+" --dry-run", dry, err, func(w io.Writer) {
			fmt.Fprintf(w, "%d jobs match; %s would act on those it applies to (the others are skipped)\n", dry.GetCount(), verb)
		})
	}
	if n := dry.GetCount(); n > confirmAbove && !f.yes {
		if !stdinTTY() {
			return &opError{op: op, msg: fmt.Sprintf("%d jobs match, more than %d: pass --yes to %s them (stdin is not a terminal to ask)", n, confirmAbove, verb)}
		}
		fmt.Fprintf(a.errOut, "%s %d jobs? [y/N] ", verb, n)
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
			return &opError{op: op, msg: "not confirmed: nothing done"}
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "ctl-" + hex.EncodeToString(b[:])
	resp, err := call(&coordv1.QueueBulkRequest{Action: action, Filter: filter, RequestId: id})
	if err != nil {
		return fail(op, err)
	}
	o := resp.GetOp()
	last := time.Now()
	for !o.GetFinished() {
		select {
		case <-ctx.Done():
			return &opError{op: op, msg: fmt.Sprintf("stopped following operation %s (%d of %d done); it goes on: coordctl job bulk %s", id, o.GetDone(), o.GetTotal(), id)}
		case <-time.After(bulkPoll):
		}
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		g, err := a.client.Queue().GetBulk(cctx, &coordv1.QueueGetBulkRequest{Id: id})
		cancel()
		if err != nil {
			continue // a leader change: the operation goes on; ask again
		}
		o = g.GetOp()
		if time.Since(last) >= time.Second && a.output != "json" {
			fmt.Fprintf(a.errOut, "%s: %d done, %d skipped of %d\n", id, o.GetDone(), o.GetSkipped(), o.GetTotal())
			last = time.Now()
		}
	}
	return a.print(o, func(w io.Writer) {
		fmt.Fprintf(w, "%s: %d jobs %s, %d skipped (the action does not apply to their state), in %d batches; operation %s\n",
			verb, o.GetDone(), pastTense(verb), o.GetSkipped(), o.GetBatches(), id)
	})
}

func pastTense(verb string) string {
	switch verb {
	case "retry":
		return "retried"
	case "cancel":
		return "cancelled"
	}
	return verb + "d"
}

func (a *app) jobDeleteCmd() *cobra.Command {
	cmd := a.jobIDCmd("delete", "Delete a finished job's record (succeeded, cancelled or dead); a job that is not final is refused: cancel it first",
		"  coordctl job delete 17", func(ctx context.Context, id uint64, op string) error {
			resp, err := a.client.Queue().Delete(ctx, &coordv1.QueueDeleteRequest{Id: id})
			return a.reply(op, resp, err, func(w io.Writer) {
				if resp.GetDuplicate() {
					fmt.Fprintf(w, "unchanged: job %d was already gone (deleted or pruned)\n", id)
					return
				}
				fmt.Fprintf(w, "job %d deleted\n", id)
			})
		})
	cmd.Long = `Deletes a job in a final state (succeeded, cancelled, dead), as retention
would prune it: its record, its attempts, the resources it fenced; its
unique key is free again. A scheduled, available, retryable or running job is
refused (JOB_NOT_FINAL): cancel it first.`
	return cmd
}

func (a *app) jobCancelBulkCmd() *cobra.Command {
	return a.bulkable(a.jobCancelCmd(), "cancel", coordv1.BulkAction_BULK_ACTION_CANCEL)
}

func (a *app) jobRetryBulkCmd() *cobra.Command {
	return a.bulkable(a.jobRetryCmd(), "retry", coordv1.BulkAction_BULK_ACTION_RETRY)
}

func (a *app) jobDeleteBulkCmd() *cobra.Command {
	return a.bulkable(a.jobDeleteCmd(), "delete", coordv1.BulkAction_BULK_ACTION_DELETE)
}

// jobBulkCmd is "job bulk [ID]": the recent bulk operations, or one.
func (a *app) jobBulkCmd() *cobra.Command {
	return a.newCmd("bulk [ID]", "Bulk operations (job retry|cancel|delete with ids or a filter): their progress", `  coordctl job bulk
  coordctl job bulk ctl-3f2a9c01d4e5b6a7`, cobra.MaximumNArgs(1),
		func(ctx context.Context, pos []string) error {
			if len(pos) == 1 {
				resp, err := a.client.Queue().GetBulk(ctx, &coordv1.QueueGetBulkRequest{Id: pos[0]})
				return a.reply("job bulk "+pos[0], resp, err, func(w io.Writer) { bulkTable(w, []*coordv1.BulkOp{resp.GetOp()}) })
			}
			resp, err := a.client.Queue().ListBulk(ctx, &coordv1.QueueListBulkRequest{})
			return a.reply("job bulk", resp, err, func(w io.Writer) { bulkTable(w, resp.GetOps()) })
		})
}

func bulkTable(out io.Writer, ops []*coordv1.BulkOp) {
	if len(ops) == 0 {
		fmt.Fprintln(out, "no bulk operations")
		return
	}
	tab(out, func(w io.Writer) {
		row(w, "ID", "ACTION", "STATE", "DONE", "SKIPPED", "TOTAL", "BATCHES", "BY", "STARTED")
		for _, o := range ops {
			state := "running"
			if o.GetFinished() {
				state = "finished"
			}
			row(w, o.GetId(), strings.ToLower(strings.TrimPrefix(o.GetAction().String(), "BULK_ACTION_")), state, o.GetDone(), o.GetSkipped(),
				o.GetTotal(), o.GetBatches(), orDash(o.GetCreatedBy()), utc(o.GetCreatedAtMs()))
		}
	})
}
