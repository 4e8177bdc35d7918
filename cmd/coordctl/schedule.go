package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	_ "time/tzdata" // render occurrences in any schedule's zone, as the server computes them

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Schedules (coord.v1.Schedules): schedule create|get|list|pause|resume|
// trigger|delete, and job overdue. Occurrences are shown in the
// schedule's time zone; other calendar times in UTC.

func parseOverlap(s string) (coordv1.ScheduleOverlap, error) {
	v, ok := coordv1.ScheduleOverlap_value["SCHEDULE_OVERLAP_"+strings.ToUpper(s)]
	if !ok || v == 0 {
		return 0, fmt.Errorf("--overlap %q: want forbid, allow or replace", s)
	}
	return coordv1.ScheduleOverlap(v), nil
}

// parseDSTPolicy reads --dst-policy: auto (cronie's rule), wall-time or
// cadence.
func parseDSTPolicy(s string) (coordv1.ScheduleDstPolicy, error) {
	if s == "auto" {
		return coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_UNSPECIFIED, nil
	}
	v, ok := coordv1.ScheduleDstPolicy_value["SCHEDULE_DST_POLICY_"+strings.ToUpper(strings.ReplaceAll(s, "-", "_"))]
	if !ok || v == 0 {
		return 0, fmt.Errorf("--dst-policy %q: want auto, wall-time or cadence", s)
	}
	return coordv1.ScheduleDstPolicy(v), nil
}

func (a *app) scheduleCreateCmd() *cobra.Command {
	var (
		spec                          = &coordv1.ScheduleSpec{Job: &coordv1.JobTemplate{}}
		args, overlap, dst            string
		deadline, catchUp, within, vt time.Duration
		attempts, prio                int32
		labels                        []string
	)
	check := func(cmd *cobra.Command, pos []string) error {
		if err := cobra.ExactArgs(1)(cmd, pos); err != nil {
			return err
		}
		if args != "" && !json.Valid([]byte(args)) {
			return fmt.Errorf("--args %q: not valid JSON", args)
		}
		if _, err := parseOverlap(overlap); err != nil {
			return err
		}
		if _, err := parseDSTPolicy(dst); err != nil {
			return err
		}
		for _, d := range []struct {
			flag string
			v    time.Duration
		}{{"--starting-deadline", deadline}, {"--catch-up", catchUp}, {"--complete-within", within}, {"--visibility-timeout", vt}} {
			if d.v < 0 {
				return fmt.Errorf("%s %s: negative", d.flag, d.v)
			}
		}
		_, err := parseLabels(labels)
		return err
	}
	cmd := a.newCmd("create NAME --schedule EXPR --kind KIND [--queue Q] [--tz ZONE] [--args JSON]", "Create or update a schedule (an idempotent upsert by name)",
		`  coordctl schedule create daily-close --schedule "5 0 * * *" --tz America/Sao_Paulo --window-shift-days -1 \
    --queue billing --kind close-day --complete-within 2h
  coordctl schedule create heartbeat --schedule "@every 30s" --kind ping --overlap allow
  coordctl -o json schedule create report --schedule "0 6 * * MON-FRI" --kind report --args '{"to":"ops"}' | jq .created`, check,
		func(ctx context.Context, pos []string) error {
			spec.Name = pos[0]
			spec.Overlap, _ = parseOverlap(overlap)
			spec.DstPolicy, _ = parseDSTPolicy(dst)
			spec.StartingDeadlineMs, spec.CatchUpMs, spec.CompleteWithinMs = deadline.Milliseconds(), catchUp.Milliseconds(), within.Milliseconds()
			spec.Job.VisibilityTimeoutMs, spec.Job.MaxAttempts, spec.Job.Priority = vt.Milliseconds(), attempts, prio
			if args != "" {
				spec.Job.Args = []byte(args)
			}
			spec.Job.Labels, _ = parseLabels(labels)
			resp, err := a.client.PutSchedule(ctx, spec)
			outcome := "unchanged: the schedule has this definition already"
			switch {
			case resp.GetCreated():
				outcome = "created"
			case resp.GetChanged():
				outcome = "updated"
			}
			return a.reply("schedule create "+pos[0], resp, err, func(w io.Writer) {
				fmt.Fprintln(w, outcome)
				scheduleText(w, resp.GetSchedule())
			})
		})
	cmd.Long = `Creates the schedule NAME, or updates it: the same definition again changes
nothing. From then on the leader makes one job of kind KIND in queue Q for
every occurrence of the expression in the zone (cron with 5 fields, or
"@seconds" and 6 with seconds first; @daily, @every 30s,
@once 2026-09-26T02:00:00Z), with the occurrence's
window in its labels (coordd.schedule, coordd.window, coordd.occurrence_ms).
A worker of the queue runs it. Occurrences missed while the cluster was down
are made up to --catch-up ago; older ones, and those past --starting-deadline,
are recorded as skipped. --overlap says what an occurrence does while the
previous one's job is not final: forbid (skip it), allow, replace (cancel
the previous job).`
	f := cmd.Flags()
	f.StringVar(&spec.Schedule, "schedule", "", `cron expression, descriptor (@daily, @every 30s) or "@once RFC3339" (required)`)
	f.StringVar(&spec.TimeZone, "tz", "", "IANA time zone of the expression and the window keys (default UTC)")
	f.StringVar(&spec.Job.Kind, "kind", "", "the jobs' kind: the worker's handler (required)")
	f.StringVar(&spec.Job.Queue, "queue", "", `the jobs' queue (default "default")`)
	f.StringVar(&args, "args", "", "the jobs' parameters, JSON (the same for every occurrence)")
	f.StringVar(&overlap, "overlap", "forbid", "while the previous job is not final: forbid (skip), allow, replace (cancel it)")
	f.StringVar(&dst, "dst-policy", "auto", "at DST changes: wall-time (each wall time once), cadence (follow the clock), auto (cadence if the minute or hour field is *)")
	f.DurationVar(&deadline, "starting-deadline", 0, "skip an occurrence not made within this long after its time (default none)")
	f.DurationVar(&catchUp, "catch-up", 0, "after an outage, make missed occurrences up to this long ago (default max(1h, one interval))")
	f.DurationVar(&within, "complete-within", 0, "an occurrence whose job is not final this long after it is overdue (default one interval)")
	f.StringVar(&spec.WindowLayout, "window-layout", "", "Go time layout of window keys (default by granularity)")
	f.Int32Var(&spec.WindowShiftDays, "window-shift-days", 0, "shift the occurrence by calendar days for its window (-1: previous day)")
	f.Int32Var(&attempts, "max-attempts", 0, "attempts per job, 1 to 100 (default 25)")
	f.Int32Var(&prio, "priority", 0, "-100 to 100; higher is fetched first within the queue")
	f.DurationVar(&vt, "visibility-timeout", 0, "an attempt without a heartbeat for this long lapses (default 30s)")
	f.StringArrayVar(&labels, "label", nil, "key=value label of every job, repeatable")
	_ = cmd.MarkFlagRequired("schedule")
	_ = cmd.MarkFlagRequired("kind")
	return cmd
}

// scheduleRows is the text of one schedule.
func scheduleRows(s *coordv1.Schedule) func(w io.Writer) {
	return func(w io.Writer) { scheduleText(w, s) }
}

func (a *app) scheduleGetCmd() *cobra.Command {
	var next int32
	check := func(cmd *cobra.Command, pos []string) error {
		if err := cobra.ExactArgs(1)(cmd, pos); err != nil {
			return err
		}
		if next < 1 || next > 100 {
			return fmt.Errorf("--next %d: want 1 to 100", next)
		}
		return nil
	}
	cmd := a.newCmd("get NAME", "Show a schedule: its next occurrences and its recent ones with their jobs' states", `  coordctl schedule get daily-close
  coordctl schedule get daily-close --next 10
  coordctl -o json schedule get daily-close | jq '.recent[] | select(.overdue)'`, check,
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.GetSchedule(ctx, pos[0], next)
			return a.reply("schedule get "+pos[0], resp, err, func(w io.Writer) { scheduleGetText(w, resp) })
		})
	cmd.Flags().Int32Var(&next, "next", 5, "next occurrences to show, 1 to 100")
	return cmd
}

func (a *app) scheduleListCmd() *cobra.Command {
	var (
		prefix  string
		deleted bool
		page    pageFlags
	)
	cmd := a.newCmd("list [--prefix P] [--deleted]", "List schedules by name (one page; --page-token for the next)", `  coordctl schedule list
  coordctl schedule list --prefix billing- --deleted
  coordctl -o json schedule list | jq -r '.schedules[].spec.name'`, noArgsLimit(&page.limit),
		func(ctx context.Context, _ []string) error {
			resp, err := a.client.ListSchedulesPage(ctx, prefix, deleted, page.token, page.limit)
			return a.reply("schedule list", resp, err, func(w io.Writer) {
				scheduleTable(w, resp.GetSchedules(), resp.GetCalendarMs())
				morePages(w, resp)
			})
		})
	cmd.Flags().StringVar(&prefix, "prefix", "", "only names starting with this")
	cmd.Flags().BoolVar(&deleted, "deleted", false, "include deleted schedules (kept for their history)")
	page.add(cmd, "schedules")
	return cmd
}

func (a *app) schedulePauseCmd() *cobra.Command {
	return scheduleChangeCmd(a, "pause", "Stop making occurrences (resume makes the next ones, without a burst)",
		"unchanged: already paused", (*client.Client).PauseSchedule)
}

func (a *app) scheduleResumeCmd() *cobra.Command {
	return scheduleChangeCmd(a, "resume", "Make occurrences again from now on; those missed while paused are recorded as skipped (PAUSED)",
		"unchanged: not paused", (*client.Client).ResumeSchedule)
}

func (a *app) scheduleDeleteCmd() *cobra.Command {
	cmd := scheduleChangeCmd(a, "delete", "Delete a schedule: no more occurrences; its history is kept until retention",
		"unchanged: already deleted", (*client.Client).DeleteSchedule)
	cmd.Long = `Makes the schedule a tombstone: no more occurrences, jobs already made are
left alone, its occurrences are no longer reported overdue. 'schedule get'
still shows it and its history (and 'schedule list --deleted') until the
jobs' retention prunes it; 'schedule create' with its name makes a new one.`
	return cmd
}

// scheduleChangeCmd is pause, resume or delete: one call on the schedule,
// then the schedule as it is after it (unchanged says so when the call
// changed nothing).
func scheduleChangeCmd[R interface {
	proto.Message
	GetChanged() bool
	GetSchedule() *coordv1.Schedule
}](a *app, verb, short, unchanged string, call func(*client.Client, context.Context, string) (R, error)) *cobra.Command {
	return a.newCmd(verb+" NAME", short, "  coordctl schedule "+verb+" daily-close", cobra.ExactArgs(1),
		func(ctx context.Context, pos []string) error {
			resp, err := call(a.client, ctx, pos[0])
			return a.reply("schedule "+verb+" "+pos[0], resp, err, noteIf(!resp.GetChanged(), unchanged, scheduleRows(resp.GetSchedule())))
		})
}

func (a *app) scheduleTriggerCmd() *cobra.Command {
	cmd := a.newCmd("trigger NAME", "Make an extra occurrence now, with a window of its own (also while paused)", `  coordctl schedule trigger daily-close
  coordctl -o json schedule trigger daily-close | jq -r .occurrence.job_id`, cobra.ExactArgs(1),
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.TriggerSchedule(ctx, pos[0])
			return a.reply("schedule trigger "+pos[0], resp, err, func(w io.Writer) {
				o := resp.GetOccurrence()
				what := fmt.Sprintf("job %d", o.GetJobId())
				if o.GetDuplicate() {
					what += " (made before: not made twice)"
				}
				fmt.Fprintf(w, "triggered %s: window %s, %s\n", resp.GetSchedule().GetSpec().GetName(), o.GetWindow(), what)
			})
		})
	cmd.Long = `Makes an extra occurrence now: a job with the window of this instant plus
"/manual-<ms>", beside the schedule's own occurrences. The overlap policy
applies: a forbid schedule whose previous job is not final refuses
(SCHEDULE_OVERLAP), a replace schedule cancels that job. Not retried after
an unknown outcome (a repeat would be a second occurrence).`
	return cmd
}

func (a *app) jobOverdueCmd() *cobra.Command {
	var (
		sched string
		page  pageFlags
	)
	cmd := a.newCmd("overdue [--schedule S]", "What did not happen: overdue occurrences of schedules, stuck leases", `  coordctl job overdue
  coordctl job overdue --schedule daily-close
  coordctl -o json job overdue | jq '.total'`, noArgsLimit(&page.limit),
		func(ctx context.Context, _ []string) error {
			resp, err := a.client.ListOverdue(ctx, sched, page.token, page.limit)
			return a.reply("job overdue", resp, err, func(w io.Writer) { overdueText(w, resp, page.token == "") })
		})
	cmd.Long = `Lists the occurrences of schedules whose job is not final by occurrence +
complete_within (oldest first, one page), and those due and not even made
(the leader is behind); the first page also shows the total, the schedules
with the most, and leases held longer than the server's maximum age
(HELD_TOO_LONG) or whose renewals stopped without a release (SILENT).
Exit status 0 even when something is listed.`
	cmd.Flags().StringVar(&sched, "schedule", "", "only this schedule's occurrences")
	page.add(cmd, "occurrences")
	return cmd
}

// scheduleState is a schedule's state as the tables show it.
func scheduleState(s *coordv1.Schedule) string {
	switch {
	case s.GetDeleted():
		return "deleted"
	case s.GetPaused():
		return "paused"
	}
	return "active"
}

// zoneOf is a schedule's time zone (UTC when unknown here).
func zoneOf(s *coordv1.Schedule) *time.Location {
	if l, err := time.LoadLocation(s.GetSpec().GetTimeZone()); err == nil {
		return l
	}
	return time.UTC
}

// inZone renders a calendar time in the schedule's zone, "-" for 0.
func inZone(ms int64, loc *time.Location) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).In(loc).Format("2006-01-02 15:04:05 MST")
}

func overlapName(o coordv1.ScheduleOverlap) string {
	return strings.ToLower(strings.TrimPrefix(o.String(), "SCHEDULE_OVERLAP_"))
}

func skipName(r coordv1.ScheduleSkipReason) string {
	return strings.TrimPrefix(r.String(), "SCHEDULE_SKIP_REASON_")
}

// scheduleText shows one schedule's definition and state.
func scheduleText(out io.Writer, s *coordv1.Schedule) {
	sp := s.GetSpec()
	loc := zoneOf(s)
	tz := sp.GetTimeZone()
	if tz == "" {
		tz = "UTC"
	}
	tab(out, func(w io.Writer) {
		row(w, "NAME", sp.GetName())
		row(w, "SCHEDULE", sp.GetSchedule())
		row(w, "TIME ZONE", tz)
		row(w, "STATE", scheduleState(s))
		row(w, "JOB", fmt.Sprintf("kind %s in queue %s", sp.GetJob().GetKind(), sp.GetJob().GetQueue()))
		if len(sp.GetJob().GetArgs()) > 0 {
			row(w, "ARGS", short(string(sp.GetJob().GetArgs()), 200))
		}
		if l := labelText(sp.GetJob().GetLabels()); l != "" {
			row(w, "LABELS", l)
		}
		row(w, "OVERLAP", overlapName(sp.GetOverlap()))
		row(w, "INTERVAL", human(s.GetIntervalMs()))
		row(w, "CATCH-UP", human(sp.GetCatchUpMs()))
		row(w, "STARTING DEADLINE", orDash(humanOrEmpty(sp.GetStartingDeadlineMs())))
		row(w, "COMPLETE WITHIN", human(sp.GetCompleteWithinMs()))
		if sp.GetWindowLayout() != "" || sp.GetWindowShiftDays() != 0 {
			row(w, "WINDOW", fmt.Sprintf("layout %q, shift %d days", or(sp.GetWindowLayout(), "(by granularity)"), sp.GetWindowShiftDays()))
		}
		row(w, "MADE THROUGH", inZone(s.GetLastMaterialisedMs(), loc))
		row(w, "NEXT DUE", inZone(s.GetNextDueMs(), loc))
		row(w, "JOBS MADE", s.GetJobsCreated())
		row(w, "SKIPPED", s.GetOccurrencesSkipped())
		row(w, "CREATED", fmt.Sprintf("%s by %s", utc(s.GetCreatedAtMs()), orDash(s.GetCreatedBy())))
		row(w, "UPDATED", fmt.Sprintf("%s by %s (revision %d)", utc(s.GetUpdatedAtMs()), orDash(s.GetUpdatedBy()), s.GetRevision()))
		if s.GetPaused() {
			row(w, "PAUSED", fmt.Sprintf("%s by %s", utc(s.GetPausedAtMs()), orDash(s.GetPausedBy())))
		}
		if s.GetDeleted() {
			row(w, "DELETED", fmt.Sprintf("%s by %s", utc(s.GetDeletedAtMs()), orDash(s.GetDeletedBy())))
		}
	})
}

func humanOrEmpty(ms int64) string {
	if ms == 0 {
		return ""
	}
	return human(ms)
}

// occurrenceOutcome says what became of an occurrence.
func occurrenceOutcome(o *coordv1.ScheduleOccurrence) string {
	if o.GetSkipped() != coordv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_UNSPECIFIED {
		if o.GetCount() > 1 {
			return fmt.Sprintf("skipped %s: %d occurrences, through %s", skipName(o.GetSkipped()), o.GetCount(), o.GetLastWindow())
		}
		return "skipped " + skipName(o.GetSkipped())
	}
	s := fmt.Sprintf("job %d", o.GetJobId())
	if o.GetJobState() != coordv1.JobState_JOB_STATE_UNSPECIFIED {
		s += " " + jobStateName(o.GetJobState())
		if o.GetAttempts() > 1 {
			s += fmt.Sprintf(" (%d attempts)", o.GetAttempts())
		}
	} else {
		s += " (pruned)"
	}
	if o.GetDuplicate() {
		s += ", made before"
	}
	if o.GetOverdue() {
		s += ", OVERDUE"
	}
	return s
}

func occurrenceNotes(o *coordv1.ScheduleOccurrence) string {
	var notes []string
	if o.GetDstGap() {
		notes = append(notes, "dst gap: ran at the end of the gap")
	}
	if o.GetManual() {
		notes = append(notes, "triggered")
	}
	return orDash(strings.Join(notes, ", "))
}

// scheduleGetText shows a schedule, its next occurrences and its recent
// ones.
func scheduleGetText(out io.Writer, resp *coordv1.GetScheduleResponse) {
	s := resp.GetSchedule()
	loc := zoneOf(s)
	scheduleText(out, s)
	section(out, resp.GetNext(), []any{"NEXT", "WINDOW", "NOTES"}, func(o *coordv1.ScheduleOccurrence) []any {
		return []any{inZone(o.GetAtMs(), loc), o.GetWindow(), occurrenceNotes(o)}
	})
	outcomes := func(o *coordv1.ScheduleOccurrence) []any {
		return []any{inZone(o.GetAtMs(), loc), o.GetWindow(), occurrenceOutcome(o), occurrenceNotes(o)}
	}
	section(out, resp.GetRecent(), []any{"RECENT", "WINDOW", "OUTCOME", "NOTES"}, outcomes)
	section(out, resp.GetSkipped(), []any{"SKIPPED", "WINDOW", "OUTCOME", "NOTES"}, outcomes)
}

func scheduleTable(out io.Writer, ss []*coordv1.Schedule, now int64) {
	if len(ss) == 0 {
		fmt.Fprintln(out, "no schedules")
		return
	}
	tab(out, func(w io.Writer) {
		row(w, "NAME", "SCHEDULE", "TIME ZONE", "QUEUE", "KIND", "STATE", "NEXT DUE", "JOBS", "SKIPPED", "LAST JOB")
		for _, s := range ss {
			sp := s.GetSpec()
			next := "-"
			if s.GetNextDueMs() > 0 {
				next = utcAt(s.GetNextDueMs(), now)
			}
			last := "-"
			if s.GetLastJobId() > 0 {
				last = fmt.Sprint(s.GetLastJobId())
			}
			row(w, sp.GetName(), sp.GetSchedule(), or(sp.GetTimeZone(), "UTC"), sp.GetJob().GetQueue(), sp.GetJob().GetKind(),
				scheduleState(s), next, s.GetJobsCreated(), s.GetOccurrencesSkipped(), last)
		}
	})
}

// overdueText shows overdue occurrences; the first page also the total,
// the top schedules and stuck leases.
func overdueText(w io.Writer, resp *coordv1.ListOverdueResponse, first bool) {
	if first && len(resp.GetOccurrences())+len(resp.GetStuckLeases()) == 0 {
		fmt.Fprintln(w, "nothing overdue, no stuck leases")
		return
	}
	if first && resp.GetTotal() > 0 {
		fmt.Fprintf(w, "%d overdue occurrences\n\n", resp.GetTotal())
	}
	if len(resp.GetOccurrences()) > 0 {
		tab(w, func(w io.Writer) {
			row(w, "SCHEDULE", "WINDOW", "OCCURRENCE", "LATE BY", "JOB", "STATE", "ATTEMPTS", "QUEUE")
			for _, o := range resp.GetOccurrences() {
				job, state := "not made", "-"
				if o.GetJobId() > 0 {
					job, state = fmt.Sprint(o.GetJobId()), jobStateName(o.GetJobState())
				}
				row(w, o.GetSchedule(), orDash(o.GetWindow()), utc(o.GetAtMs()), human(o.GetOverdueMs()), job, state,
					o.GetAttempts(), o.GetQueue())
			}
		})
		morePages(w, resp)
	}
	section(w, resp.GetTopSchedules(), []any{"TOP SCHEDULE", "OVERDUE", "OLDEST"}, func(s *coordv1.OverdueSchedule) []any {
		return []any{s.GetSchedule(), s.GetOverdue(), utc(s.GetOldestAtMs())}
	})
	section(w, resp.GetStuckLeases(), []any{"STUCK LEASE", "REASON", "OWNER", "GENERATION", "AGE", "RENEWED"}, func(s *coordv1.StuckLease) []any {
		l := s.GetLease()
		return []any{l.GetName(), s.GetReason(), l.GetOwner(), l.GetGeneration(), human(l.GetHeldMs()), agoMs(l.GetRenewedAgoMs())}
	})
}
