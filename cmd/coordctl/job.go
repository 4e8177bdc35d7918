package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func (a *app) jobCmd() *cobra.Command {
	return group("job", "Queued jobs (submit, get, list, cancel, retry); registered jobs and what did not happen",
		a.jobSubmitCmd(), a.jobGetCmd(), a.jobListCmd(), a.jobCancelCmd(), a.jobRetryCmd(),
		a.jobRegisteredCmd(), a.jobStatusCmd(), a.jobOverdueCmd(), a.jobRegisterCmd())
}

func (a *app) jobRegisterCmd() *cobra.Command {
	var (
		spec                                   coordv1.JobSpec
		completeWithin, ttl, deadline, catchUp time.Duration
		allow                                  bool
		by                                     string
	)
	cmd := &cobra.Command{
		Use:   "register NAME --schedule EXPR [--tz ZONE]",
		Short: "Register (or update) a job so that coordd watches its windows",
		Long: `Registers a job in coordd's registry (an idempotent upsert; runners do it at
start). From then on the leader expects a completed window for every
occurrence and reports the ones not completed by occurrence + complete-within.`,
		Example: `  coordctl job register daily-close --schedule "5 0 * * *" --tz America/Sao_Paulo --complete-within 30m --window-shift-days -1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			spec.Name = args[0]
			spec.CompleteWithinMs, spec.TtlMs = completeWithin.Milliseconds(), ttl.Milliseconds()
			spec.StartingDeadlineMs, spec.CatchUpMs = deadline.Milliseconds(), catchUp.Milliseconds()
			spec.Concurrency = coordv1.JobConcurrency_JOB_CONCURRENCY_FORBID
			if allow {
				spec.Concurrency = coordv1.JobConcurrency_JOB_CONCURRENCY_ALLOW
			}
			resp, err := a.jobs().RegisterJob(ctx, &coordv1.RegisterJobRequest{Spec: &spec, RegisteredBy: by})
			if err != nil {
				return fail("job register "+args[0], err)
			}
			now := a.clusterTime(ctx)
			return a.print(resp, func(w io.Writer) {
				if !resp.GetChanged() {
					fmt.Fprintln(w, "unchanged: already registered with this spec")
				}
				jobTable(w, []*coordv1.Job{resp.GetJob()}, now)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Schedule, "schedule", "", "cron expression, descriptor (@daily, @every 30s) or \"@once RFC3339\" (required)")
	f.StringVar(&spec.TimeZone, "tz", "", "IANA time zone of the schedule and window keys (default UTC)")
	f.DurationVar(&completeWithin, "complete-within", 0, "a window is overdue this long after its occurrence (default one interval)")
	f.DurationVar(&ttl, "ttl", 0, "the job's lease TTL (informational)")
	f.DurationVar(&deadline, "starting-deadline", 0, "occurrences that cannot start this long after they are due are missed")
	f.DurationVar(&catchUp, "catch-up", 0, "how far back incomplete windows are still run")
	f.StringVar(&spec.WindowLayout, "window-layout", "", "Go time layout of window keys (default by granularity)")
	f.Int32Var(&spec.WindowShiftDays, "window-shift-days", 0, "shift the occurrence by calendar days before formatting (-1: previous day)")
	f.BoolVar(&allow, "allow-concurrent", false, "one run per window, windows may overlap (default: one run at a time)")
	f.StringVar(&by, "registered-by", "coordctl", "who registers it")
	_ = cmd.MarkFlagRequired("schedule")
	return cmd
}

func (a *app) jobRegisteredCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "registered",
		Short: "List registered (monitored) jobs: schedule, zone, last completion",
		Long: `Lists the jobs of coordd's registry (job register; runners register at
start): the schedules whose windows coordd watches. Queued jobs are listed by
'job list'.`,
		Example: "  coordctl job registered",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.client.ListJobs(ctx)
			if err != nil {
				return fail("job registered", err)
			}
			now := a.clusterTime(ctx)
			return a.print(resp, func(w io.Writer) { jobTable(w, resp.GetJobs(), now) })
		},
	}
}

func jobTable(out io.Writer, js []*coordv1.Job, now int64) {
	tab(out, func(w io.Writer) {
		row(w, "JOB", "SCHEDULE", "TIME ZONE", "INTERVAL", "LAST COMPLETED", "WINDOW", "REGISTERED BY")
		for _, j := range js {
			tz := j.GetSpec().GetTimeZone()
			if tz == "" {
				tz = "UTC"
			}
			row(w, j.GetSpec().GetName(), j.GetSpec().GetSchedule(), tz, human(j.GetIntervalMs()),
				ago(now, j.GetLastCompletedAt()), orDash(j.GetLastCompletedWindow()), orDash(j.GetRegisteredBy()))
		}
	})
}

func (a *app) jobStatusCmd() *cobra.Command {
	var limit int32
	cmd := &cobra.Command{
		Use:     "status NAME",
		Short:   "Show a job's recent windows, next occurrences and overdue windows",
		Example: "  coordctl job status daily-close\n  coordctl -o json job status daily-close --limit 50",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.client.JobStatus(ctx, args[0], limit)
			if err != nil {
				return fail("job status "+args[0], err)
			}
			now := a.clusterTime(ctx)
			return a.print(resp, func(w io.Writer) { jobStatusText(w, resp, now) })
		},
	}
	cmd.Flags().Int32Var(&limit, "limit", 20, "recent windows to show")
	return cmd
}

func jobStatusText(w io.Writer, resp *coordv1.JobStatusResponse, now int64) {
	jobTable(w, []*coordv1.Job{resp.GetJob()}, now)
	loc := time.UTC
	if tz := resp.GetJob().GetSpec().GetTimeZone(); tz != "" {
		if l, err := time.LoadLocation(tz); err == nil {
			loc = l
		}
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "next occurrences:")
	for _, t := range resp.GetNextOccurrences() {
		fmt.Fprintf(w, " %s", time.UnixMilli(t).In(loc).Format("2006-01-02 15:04:05 MST"))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	windowTable(w, resp.GetWindows(), now)
	if len(resp.GetOverdue()) > 0 {
		fmt.Fprintln(w)
		overdueTable(w, resp.GetOverdue())
	}
}

func overdueTable(out io.Writer, ws []*coordv1.OverdueWindow) {
	tab(out, func(w io.Writer) {
		row(w, "OVERDUE JOB", "WINDOW", "OCCURRENCE", "LATE BY", "STATE", "ATTEMPTS", "OWNER")
		for _, o := range ws {
			state := "never claimed"
			if o.GetClaimed() {
				state = "incomplete"
			}
			row(w, o.GetJob(), o.GetWindow(), time.UnixMilli(o.GetOccurrence()).UTC().Format(time.RFC3339),
				human(o.GetOverdueMs()), state, o.GetAttempts(), orDash(o.GetOwner()))
		}
	})
}

func (a *app) jobOverdueCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "overdue",
		Short: "What did not happen: overdue windows, stuck leases, runs longer than half their interval",
		Long: `Lists every expected window of a registered job that is not completed by
occurrence + complete_within (including windows nobody ever claimed), leases
held longer than the server's maximum age (HELD_TOO_LONG) or whose renewals
stopped without a release (SILENT), and recent runs that took more than half
their job's interval. Exit status 0 even when something is listed.`,
		Example: "  coordctl job overdue\n  coordctl -o json job overdue | jq '.windows | length'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.client.ListOverdue(ctx)
			if err != nil {
				return fail("job overdue", err)
			}
			return a.print(resp, func(w io.Writer) { overdueText(w, resp) })
		},
	}
}

func overdueText(w io.Writer, resp *coordv1.ListOverdueResponse) {
	if len(resp.GetWindows())+len(resp.GetStuckLeases())+len(resp.GetSlowWindows()) == 0 {
		fmt.Fprintln(w, "nothing overdue, no stuck leases, no slow runs")
		return
	}
	if len(resp.GetWindows()) > 0 {
		overdueTable(w, resp.GetWindows())
	}
	if len(resp.GetStuckLeases()) > 0 {
		fmt.Fprintln(w)
		tab(w, func(w io.Writer) {
			row(w, "STUCK LEASE", "REASON", "OWNER", "GENERATION", "AGE", "RENEWED")
			for _, s := range resp.GetStuckLeases() {
				l := s.GetLease()
				row(w, l.GetName(), s.GetReason(), l.GetOwner(), l.GetGeneration(), human(l.GetHeldMs()), agoMs(l.GetRenewedAgoMs()))
			}
		})
	}
	if len(resp.GetSlowWindows()) > 0 {
		fmt.Fprintln(w)
		tab(w, func(w io.Writer) {
			row(w, "SLOW JOB", "WINDOW", "DURATION", "INTERVAL")
			for _, s := range resp.GetSlowWindows() {
				row(w, s.GetJob(), s.GetWindow(), human(s.GetDurationMs()), human(s.GetIntervalMs()))
			}
		})
	}
}
