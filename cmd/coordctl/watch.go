package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// watchFlags are the flags of the watch commands.
type watchFlags struct {
	from     uint64
	position uint32
	initial  bool
	count    int
}

func (f *watchFlags) add(cmd *cobra.Command) {
	cmd.Flags().Uint64Var(&f.from, "from", 0, "start at this log index (0: now); to resume, give the index and --position printed last")
	cmd.Flags().Uint32Var(&f.position, "position", 0, "start at this position within the --from entry")
	cmd.Flags().BoolVar(&f.initial, "initial", false, "first print every matching record as it is now (EXISTING), then the changes")
	cmd.Flags().IntVar(&f.count, "count", 0, "exit after this many events (0: run until interrupted)")
}

func (a *app) leaseWatchCmd() *cobra.Command {
	return a.watchCmd("lease", "watch [PREFIX]", "Print every change of leases under a prefix as it happens: grants, renewals, releases, expiries",
		`Watches the leases whose name starts with PREFIX (all without one) and prints
one line per change (-o json: one JSON document per line, a coord.v1.WatchEvent)
until SIGINT/SIGTERM (exit 0). Each change carries the log index and position
that caused it; the watch survives node restarts and leader changes and
resumes without missing or repeating a change. An expiry is printed when the
cluster notices it: at the first log entry at or after the deadline (within
about 250 ms on an idle cluster). A start the nodes no longer hold fails
with WATCH_INDEX_COMPACTED (exit 1): watch with --initial instead.`,
		"  coordctl lease watch daily-\n  coordctl -o json lease watch svc/ --initial", coordv1.WatchFamily_WATCH_FAMILY_LEASE)
}

func (a *app) jobWatchCmd() *cobra.Command {
	return a.watchCmd("job", "watch [QUEUE/]", "Print every change of queued jobs as it happens: submitted, fetched, completed, failed, lapsed, pruned",
		`Watches queued jobs whose key ("queue/id") starts with the prefix (all
without one: "emails/" is the queue emails) and prints one line per change
(-o json: one coord.v1.WatchEvent per line) until SIGINT/SIGTERM (exit 0). The
watch resumes across node restarts without missing or repeating a change.
A failed attempt's error is printed once, on the change that recorded it:
its first line (of a panic, the panic value), cut to 120 bytes, and how many
lines were left out ('coordctl job get ID' shows them all).`,
		"  coordctl job watch emails/\n  coordctl -o json job watch --from 1200", coordv1.WatchFamily_WATCH_FAMILY_QUEUE_JOB)
}

// watchCmd is the watch subcommand of group: the changes of one family of
// records, under the prefix its argument gives, until interrupted.
func (a *app) watchCmd(group, use, short, long, example string, family coordv1.WatchFamily) *cobra.Command {
	var f watchFlags
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Example: example, Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runWatch(cmd, group+" watch", firstArg(args), f, family)
		}}
	f.add(cmd)
	return cmd
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func (a *app) runWatch(cmd *cobra.Command, op, prefix string, f watchFlags, fams ...coordv1.WatchFamily) error {
	if f.initial && f.from != 0 {
		return fmt.Errorf("--initial reads the records now: it cannot start --from an index")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := []client.WatchOption{client.WatchFamilies(fams...), client.WatchFromPosition(f.position)}
	if f.initial {
		opts = append(opts, client.WatchInitial())
	}
	w := a.client.Watch(ctx, prefix, f.from, opts...)
	a.jobErrors = printedErrors{}
	n := 0
	for resp := range w.Responses() {
		if resp.Reset {
			fmt.Fprintln(a.errOut, "the stream broke during the initial records: they start over")
		}
		for _, e := range resp.Events {
			if err := a.printEvent(e); err != nil {
				return err
			}
			if n++; f.count > 0 && n >= f.count {
				cancel()
				for range w.Responses() {
				}
				return nil
			}
		}
		if resp.Synced && f.initial && a.output != "json" && len(resp.Events) == 0 && n == 0 {
			fmt.Fprintln(a.errOut, "no records match; watching for changes")
		}
	}
	err := w.Err()
	if ctx.Err() != nil {
		return nil // interrupted
	}
	if errors.Is(err, client.ErrWatchCompacted) {
		return &opError{op: op, err: err, msg: fmt.Sprintf("%s: the nodes hold events from index %d on; "+
			"start with --initial to read the records now and watch from there", a.watch.explain(err, a.timeout), client.OldestIndex(err))}
	}
	return fail(op, err)
}

// printedErrors remembers, per job key, the attempt whose error a job
// watch printed last, so that an attempt's error is printed once, on the
// change that recorded it, and not again on every later change of the job.
type printedErrors map[string]uint32

// newError is " error=…" for the job's latest failed attempt the first
// time it is seen: the error's first line (a panic's stack is one line per
// frame), cut, and how many lines were left out ('job get' shows them);
// "" otherwise.
func (p printedErrors) newError(key string, j *coordv1.QueueJob) string {
	log := j.GetAttemptLog()
	if len(log) == 0 || log[len(log)-1].GetError() == "" || p[key] == log[len(log)-1].GetNumber() {
		return ""
	}
	last := log[len(log)-1]
	p[key] = last.GetNumber()
	s := fmt.Sprintf(" error=%q", firstLine(last.GetError(), 120))
	if n := strings.Count(strings.TrimSpace(last.GetError()), "\n"); n > 0 {
		s += fmt.Sprintf(" (+%d lines: coordctl job get %d)", n, j.GetId())
	}
	return s
}

// printEvent prints one event: a line, or a JSON document per line.
func (a *app) printEvent(e *coordv1.WatchEvent) error {
	if a.output == "json" {
		return a.writeJSON(e, false)
	}
	kind := strings.TrimPrefix(e.GetKind().String(), "WATCH_EVENT_KIND_")
	var what string
	switch r := e.GetRecord().(type) {
	case *coordv1.WatchEvent_Lease:
		l := r.Lease
		state, left := leaseState(l)
		if state == "held" {
			state = "expires in " + left
		}
		what = fmt.Sprintf("owner=%s generation=%d renewals=%d %s", l.GetOwner(), l.GetGeneration(), l.GetRenewals(), state)
		if len(l.GetValue()) > 0 {
			what += fmt.Sprintf(" value=%q", l.GetValue())
		}
	case *coordv1.WatchEvent_QueueJob:
		j := r.QueueJob
		what = fmt.Sprintf("kind=%s state=%s attempts=%d", j.GetKind(), strings.TrimPrefix(j.GetState().String(), "JOB_STATE_"), j.GetAttempts())
		what += a.jobErrors.newError(e.GetKey(), j)
		if e.GetKind() == coordv1.WatchEventKind_WATCH_EVENT_KIND_DELETE {
			delete(a.jobErrors, e.GetKey()) // pruned
		}
	case *coordv1.WatchEvent_Window:
		w := r.Window
		what = fmt.Sprintf("state=%s owner=%s generation=%d attempts=%d", strings.TrimPrefix(w.GetState().String(), "WINDOW_STATE_"),
			w.GetOwner(), w.GetGeneration(), w.GetAttempts())
	case *coordv1.WatchEvent_Resource:
		what = fmt.Sprintf("lease=%s max_generation=%d commits=%d", r.Resource.GetLeaseName(), r.Resource.GetMaxGeneration(), r.Resource.GetCommits())
	case *coordv1.WatchEvent_Schedule:
		sc := r.Schedule
		what = fmt.Sprintf("schedule=%q revision=%d paused=%t deleted=%t jobs=%d skipped=%d", sc.GetSpec().GetSchedule(), sc.GetRevision(),
			sc.GetPaused(), sc.GetDeleted(), sc.GetJobsCreated(), sc.GetOccurrencesSkipped())
	}
	_, err := fmt.Fprintf(a.out, "%d.%d %s %s %s\n", e.GetIndex(), e.GetPosition(), kind, e.GetKey(), what)
	return err
}
