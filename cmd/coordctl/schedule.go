package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // render occurrences in any schedule's zone, as the server computes them

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"

	"github.com/coordd/coordd/internal/apijson"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Schedules (coord.v1.Schedules): schedule create|update|apply|get|list|
// pause|resume|trigger|delete, and job overdue. Occurrences are shown in the
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

// specFlags are the flags of a schedule's definition. create sets every
// field from them (a flag not given is the field's default); update sets
// only the fields whose flags were given and keeps the others.
type specFlags struct {
	schedule, tz, kind, queue, args, overlap, layout string
	dst                                              string
	deadline, catchUp, within, vt                    time.Duration
	shift, attempts, prio                            int32
	labels                                           []string
	target                                           targetFlags
}

func (f *specFlags) add(cmd *cobra.Command, update bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.schedule, "schedule", "", `cron expression, descriptor (@daily, @every 30s) or "@once RFC3339"`)
	fl.StringVar(&f.tz, "tz", "", "IANA time zone of the expression and the window keys (default UTC)")
	fl.StringVar(&f.kind, "kind", "", "the jobs' kind: the worker's handler")
	fl.StringVar(&f.queue, "queue", "", `the jobs' queue (default "default")`)
	fl.StringVar(&f.args, "args", "", "the jobs' parameters, JSON (the same for every occurrence)")
	overlap := "forbid" // update: no default, only what is given changes
	if update {
		overlap = ""
	}
	fl.StringVar(&f.overlap, "overlap", overlap, "while the previous job is not final: forbid (skip), allow, replace (cancel it)")
	dst := "auto"
	if update {
		dst = ""
	}
	fl.StringVar(&f.dst, "dst-policy", dst, "at DST changes: wall-time (each wall time once), cadence (follow the clock), auto (cadence if the minute or hour field starts with *)")
	fl.DurationVar(&f.deadline, "starting-deadline", 0, "skip an occurrence not made within this long after its time (default none)")
	fl.DurationVar(&f.catchUp, "catch-up", 0, "after an outage, make missed occurrences up to this long ago (default max(1h, one interval))")
	fl.DurationVar(&f.within, "complete-within", 0, "an occurrence whose job is not final this long after it is overdue (default one interval)")
	fl.StringVar(&f.layout, "window-layout", "", "Go time layout of window keys (default by granularity)")
	fl.Int32Var(&f.shift, "window-shift-days", 0, "shift the occurrence by calendar days for its window (-1: previous day)")
	fl.Int32Var(&f.attempts, "max-attempts", 0, "attempts per job, 1 to 100 (default 25)")
	fl.Int32Var(&f.prio, "priority", 0, "-100 to 100; higher is fetched first within the queue")
	fl.DurationVar(&f.vt, "visibility-timeout", 0, "an attempt without a heartbeat for this long lapses (default 30s)")
	label := "key=value label of every job, repeatable"
	if update {
		label = "key=value label of every job, repeatable: sets that label, keeps the others"
	}
	fl.StringArrayVar(&f.labels, "label", nil, label)
	f.target.add(fl, "every job")
}

// check finds bad flag values before any call (usage errors).
func (f *specFlags) check() error {
	if f.args != "" && !json.Valid([]byte(f.args)) {
		return fmt.Errorf("--args %q: not valid JSON", f.args)
	}
	if _, err := parseOverlap(f.overlap); err != nil && f.overlap != "" {
		return err
	}
	if _, err := parseDSTPolicy(f.dst); err != nil && f.dst != "" {
		return err
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--starting-deadline", f.deadline}, {"--catch-up", f.catchUp}, {"--complete-within", f.within}, {"--visibility-timeout", f.vt}} {
		if d.v < 0 {
			return fmt.Errorf("%s %s: negative", d.flag, d.v)
		}
	}
	if err := f.target.check(); err != nil {
		return err
	}
	_, err := parseLabels(f.labels)
	return err
}

// set writes into sp the fields whose flags given says were given.
func (f *specFlags) set(sp *coordv1.ScheduleSpec, given func(flag string) bool) {
	if sp.Job == nil {
		sp.Job = &coordv1.JobTemplate{}
	}
	j := sp.Job
	for _, x := range []struct {
		flag string
		set  func()
	}{
		{"schedule", func() { sp.Schedule = f.schedule }},
		{"tz", func() { sp.TimeZone = f.tz }},
		{"kind", func() { j.Kind = f.kind }},
		{"queue", func() { j.Queue = f.queue }},
		{"args", func() { j.Args = []byte(f.args) }},
		{"overlap", func() { sp.Overlap, _ = parseOverlap(f.overlap) }},
		{"dst-policy", func() { sp.DstPolicy, _ = parseDSTPolicy(f.dst) }},
		{"starting-deadline", func() { sp.StartingDeadline = durationpb.New(f.deadline) }},
		{"catch-up", func() { sp.CatchUp = durationpb.New(f.catchUp) }},
		{"complete-within", func() { sp.CompleteWithin = durationpb.New(f.within) }},
		{"window-layout", func() { sp.WindowLayout = f.layout }},
		{"window-shift-days", func() { sp.WindowShiftDays = f.shift }},
		{"max-attempts", func() { j.MaxAttempts = f.attempts }},
		{"priority", func() { j.Priority = f.prio }},
		{"visibility-timeout", func() { j.VisibilityTimeout = durationpb.New(f.vt) }},
		{"target-url", func() { j.Target = f.target.target() }}, // "" removes it (update)
		{"label", func() {
			ls, _ := parseLabels(f.labels)
			if j.Labels == nil && len(ls) > 0 {
				j.Labels = map[string]string{}
			}
			maps.Copy(j.Labels, ls)
		}},
	} {
		if given(x.flag) {
			x.set()
		}
	}
	if len(j.Args) == 0 {
		j.Args = nil
	}
}

// anyGiven reports whether given says any of the flags was given.
func (f *specFlags) anyGiven(given func(flag string) bool) bool {
	found := false
	f.set(&coordv1.ScheduleSpec{}, func(flag string) bool {
		found = found || given(flag)
		return false
	})
	return found
}

// scheduleHowToChange is what create says when the name is taken.
const scheduleHowToChange = "change the fields you name with 'coordctl schedule update %[1]s --FLAG VALUE …' " +
	"(e.g. --tz), or replace the whole definition with 'coordctl schedule apply -f FILE'"

func (a *app) scheduleCreateCmd() *cobra.Command {
	var f specFlags
	check := func(cmd *cobra.Command, pos []string) error {
		if err := cobra.ExactArgs(1)(cmd, pos); err != nil {
			return err
		}
		return f.check()
	}
	cmd := a.newCmd("create NAME --schedule EXPR --kind KIND [--queue Q] [--tz ZONE] [--args JSON]",
		"Create a schedule (an existing name is refused: update or apply changes it)",
		`  coordctl schedule create heartbeat --schedule "@every 30s" --kind ping --overlap allow
  coordctl schedule create daily-close --schedule "5 0 * * *" --tz America/Sao_Paulo --window-shift-days -1 \
    --queue billing --kind close-day --complete-within 2h
  coordctl -o json schedule create report --schedule "0 6 * * MON-FRI" --kind report --args '{"to":"ops"}' | jq .created`, check,
		func(ctx context.Context, pos []string) error {
			spec := &coordv1.ScheduleSpec{Name: pos[0]}
			f.set(spec, func(string) bool { return true })
			op := "schedule create " + pos[0]
			resp, err := a.client.CreateSchedule(ctx, spec)
			if errors.Is(err, client.ErrScheduleExists) {
				return &opError{op: op, err: err, msg: describe(err) + ": " + fmt.Sprintf(scheduleHowToChange, pos[0])}
			}
			return a.putReply(ctx, op, resp, err, nil)
		})
	cmd.Long = `Creates the schedule NAME. From then on the leader makes one job of kind
KIND in queue Q for every occurrence of the expression in the zone (cron
with 5 fields, or "@seconds" and 6 with seconds first; @daily, @every 30s,
@once 2026-09-26T02:00:00Z), with the occurrence's window in its labels (coordd.schedule, coordd.window,
coordd.occurrence_ms). A worker of the queue runs it. Occurrences missed
while the cluster was down are made up to --catch-up ago; older ones, and
those past --starting-deadline, are recorded as skipped. --overlap says what
an occurrence does while the previous one's job is not final: forbid (skip
it), allow, replace (cancel the previous job). --dst-policy says what a
cron expression does at DST changes (docs/jobs.md has the table).

A schedule of that name with another definition is refused
(SCHEDULE_EXISTS): 'schedule update NAME --FLAG …' changes the fields named,
'schedule apply -f FILE' the whole definition. The same definition again
changes nothing (so a repeated create is safe). The table shows the
schedule and its next 3 occurrences.`
	f.add(cmd, false)
	_ = cmd.MarkFlagRequired("schedule")
	_ = cmd.MarkFlagRequired("kind")
	return cmd
}

func (a *app) scheduleUpdateCmd() *cobra.Command {
	var (
		f   specFlags
		cmd *cobra.Command
	)
	given := func(flag string) bool {
		fl := cmd.Flags().Lookup(flag)
		return fl != nil && fl.Changed
	}
	check := func(c *cobra.Command, pos []string) error {
		if err := cobra.ExactArgs(1)(c, pos); err != nil {
			return err
		}
		if !f.anyGiven(given) {
			return fmt.Errorf("name the fields to change: --schedule, --tz, --kind, ... (see --help)")
		}
		return f.check()
	}
	cmd = a.newCmd("update NAME [--schedule EXPR] [--tz ZONE] [--FLAG VALUE]...", "Change the fields of a schedule that the flags name; the others stay",
		`  coordctl schedule update daily-close --tz America/Sao_Paulo
  coordctl schedule update daily-close --complete-within 3h --label team=finance`, check,
		func(ctx context.Context, pos []string) error {
			op := "schedule update " + pos[0]
			resp, before, err := a.client.UpdateSchedule(ctx, pos[0], func(sp *coordv1.ScheduleSpec) error {
				f.set(sp, given)
				return nil
			})
			if errors.Is(err, client.ErrNotFound) {
				return &opError{op: op, err: err, msg: describe(err) + ": create it with 'coordctl schedule create " + pos[0] +
					" …' or 'coordctl schedule apply -f FILE'"}
			}
			return a.putReply(ctx, op, resp, err, before)
		})
	cmd.Long = `Reads the schedule NAME, changes the fields whose flags are given (the
others keep their values, also those that were defaults), and puts it back
only if nobody changed it in between (the revision read: expected_revision;
on a conflict it reads and changes it again). Prints what changed, the
schedule and its next 3 occurrences. --label sets the labels given and
keeps the others (apply replaces them all). A missing or deleted schedule
is an error: create it.`
	f.add(cmd, true)
	return cmd
}

func (a *app) scheduleApplyCmd() *cobra.Command {
	var file string
	cmd := a.newCmd("apply -f FILE", "Create or replace a schedule's whole definition from a YAML or JSON file, printing what changed",
		`  coordctl schedule apply -f daily-close.yaml
  coordctl -o json schedule apply -f - < daily-close.json | jq .changed`, cobra.NoArgs,
		func(ctx context.Context, _ []string) error {
			spec, err := readSpecFile(file)
			if err != nil {
				return &opError{op: "schedule apply", msg: err.Error()}
			}
			op := "schedule apply " + spec.GetName()
			resp, before, err := a.client.UpdateSchedule(ctx, spec.GetName(), func(sp *coordv1.ScheduleSpec) error {
				proto.Reset(sp)
				proto.Merge(sp, spec)
				return nil
			})
			if errors.Is(err, client.ErrNotFound) {
				before = nil
				resp, err = a.client.CreateSchedule(ctx, spec)
			}
			return a.putReply(ctx, op, resp, err, before)
		})
	cmd.Long = `Makes the schedule named in FILE have exactly the definition in FILE (as
kubectl apply does): a new name is created, an existing schedule's
definition is replaced — fields the file leaves out take their defaults —
if nobody changed it since it was read (expected_revision; on a conflict it
reads it again). Prints what changed (nothing: "unchanged"), the schedule
and its next 3 occurrences. FILE ("-": standard input) is a
coord.v1.ScheduleSpec in YAML or JSON with the proto field names, as
'coordctl -o json schedule get NAME | jq .schedule.spec' prints it:

  name: daily-close
  schedule: "5 0 * * *"
  time_zone: America/Sao_Paulo
  window_shift_days: -1
  complete_within: 2h
  job:
    queue: billing
    kind: close-day`
	cmd.Flags().StringVarP(&file, "file", "f", "", `the schedule's definition, YAML or JSON ("-": standard input)`)
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// readSpecFile reads a ScheduleSpec from a YAML or JSON file.
func readSpecFile(file string) (*coordv1.ScheduleSpec, error) {
	var (
		b   []byte
		err error
	)
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(b) // JSON is YAML too
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	spec := &coordv1.ScheduleSpec{}
	if err := apijson.Unmarshal(j, spec); err != nil {
		return nil, fmt.Errorf("%s: not a coord.v1.ScheduleSpec: %w", file, err)
	}
	if spec.GetName() == "" {
		return nil, fmt.Errorf("%s: the spec has no name", file)
	}
	return spec, nil
}

// putReply prints the outcome of a put: created, unchanged, or (before:
// the spec it replaced) the fields that changed; then the schedule and its
// next occurrences (table output; -o json prints the put's response).
func (a *app) putReply(ctx context.Context, op string, resp *coordv1.PutScheduleResponse, err error, before *coordv1.ScheduleSpec) error {
	if err != nil {
		return fail(op, err)
	}
	if a.output == "json" {
		return a.writeJSON(resp, true)
	}
	sc := resp.GetSchedule()
	switch {
	case resp.GetCreated():
		fmt.Fprintln(a.out, "created")
	case !resp.GetChanged():
		fmt.Fprintln(a.out, "unchanged: the schedule has this definition already")
	default:
		fmt.Fprintf(a.out, "updated (revision %d):\n", sc.GetRevision())
		specChanges(a.out, before, sc.GetSpec())
		fmt.Fprintln(a.out)
	}
	scheduleText(a.out, sc)
	next, err := a.client.GetSchedule(ctx, sc.GetSpec().GetName(), 3)
	if err != nil {
		fmt.Fprintf(a.out, "\nnext occurrences: not read (%s)\n", describe(err))
		return nil
	}
	nextSection(a.out, next)
	return nil
}

// specChanges lists the fields whose values differ between two specs.
func specChanges(out io.Writer, before, after *coordv1.ScheduleSpec) {
	old, now := map[string]string{}, map[string]string{}
	var names []string
	specValues(before.ProtoReflect(), "", old, nil)
	specValues(after.ProtoReflect(), "", now, &names)
	tab(out, func(w io.Writer) {
		row(w, "  CHANGED", "FROM", "TO")
		for _, n := range names {
			if old[n] != now[n] {
				row(w, "  "+n, or(old[n], `""`), or(now[n], `""`))
			}
		}
	})
}

// specValues renders every field of m (also unset ones) under its proto
// path ("job.queue"); names, when not nil, gets the paths in field order.
// Durations are shown as coordctl writes them elsewhere ("2h00m").
func specValues(m protoreflect.Message, prefix string, out map[string]string, names *[]string) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := prefix + string(fd.Name())
		v := m.Get(fd)
		var s string
		switch {
		case fd.IsMap():
			var kv []string
			v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				kv = append(kv, k.String()+"="+v.String())
				return true
			})
			slices.Sort(kv)
			s = strings.Join(kv, ",")
		case fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == "google.protobuf.Duration":
			if d, ok := v.Message().Interface().(*durationpb.Duration); ok && m.Has(fd) {
				s = human(pbtime.DurMs(d))
			}
		case fd.Kind() == protoreflect.MessageKind:
			specValues(v.Message(), name+".", out, names)
			continue
		case fd.Kind() == protoreflect.EnumKind:
			if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
				s = string(ev.Name())
			}
		case fd.Kind() == protoreflect.BytesKind:
			s = string(v.Bytes())
		default:
			s = fmt.Sprint(v.Interface())
		}
		out[name] = s
		if names != nil {
			*names = append(*names, name)
		}
	}
}

// nextSection shows a schedule's next occurrences.
func nextSection(out io.Writer, resp *coordv1.GetScheduleResponse) {
	loc := zoneOf(resp.GetSchedule())
	section(out, resp.GetNext(), []any{"NEXT", "WINDOW", "NOTES"}, func(o *coordv1.ScheduleOccurrence) []any {
		return []any{inZone(o.GetAtMs(), loc), o.GetWindow(), occurrenceNotes(o)}
	})
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
				scheduleTable(w, resp.GetSchedules(), resp.GetCalendarTimeMs())
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
			if errors.Is(err, client.ErrUnknownOutcome) {
				return &opError{op: "schedule trigger " + pos[0], err: err, msg: a.uncertain(err, fmt.Sprintf(
					"an occurrence may have been made; 'coordctl schedule get %s' shows it (triggered) before you trigger again", pos[0]))}
			}
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
			if err := a.reply("job overdue", resp, err, func(w io.Writer) { overdueText(w, resp, page.token == "") }); err != nil {
				return err
			}
			if n := len(resp.GetOccurrences()) + len(resp.GetStuckLeases()); n > 0 || resp.GetTotal() > 0 {
				return &codeError{code: exitOverdue, msg: "something is overdue or stuck"}
			}
			return nil
		})
	cmd.Long = `Lists the occurrences of schedules whose job is not final by occurrence +
complete_within (oldest first, one page), and those due and not even made
(the leader is behind); the first page also shows the total, the schedules
with the most, and leases held longer than the server's maximum age
(HELD_TOO_LONG) or whose renewals stopped without a release (SILENT).
Exit status 4 when something is listed (an overdue occurrence or a stuck
lease), 0 when nothing is, 1 on an error: a monitoring check can run it as
it is.`
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
		if p := sp.GetDstPolicy(); p != coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_UNSPECIFIED {
			row(w, "DST POLICY", strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(p.String(), "SCHEDULE_DST_POLICY_")), "_", "-"))
		}
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
		row(w, "CREATED", atBy(s.GetCreatedAtMs(), s.GetCreatedBy()))
		row(w, "UPDATED", fmt.Sprintf("%s (revision %d)", atBy(s.GetUpdatedAtMs(), s.GetUpdatedBy()), s.GetRevision()))
		if s.GetPaused() {
			row(w, "PAUSED", atBy(s.GetPausedAtMs(), s.GetPausedBy()))
		}
		if s.GetDeleted() {
			row(w, "DELETED", atBy(s.GetDeletedAtMs(), s.GetDeletedBy()))
		}
	})
}

// atBy renders when and by whom: "2026-09-25T10:00:00.000Z by ops", just
// the time when no identity was recorded (no authorization).
func atBy(ms int64, identity string) string {
	if identity == "" {
		return utc(ms)
	}
	return utc(ms) + " by " + identity
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
	nextSection(out, resp)
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
