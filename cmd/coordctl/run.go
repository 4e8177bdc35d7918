package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Exit codes of the commands that run a command (lease run, elect,
// worker), besides the command's own status, which they pass on.
const (
	// exitLost: the lease was lost while the command ran; the command was
	// stopped before the server could grant the lease to anyone else.
	exitLost = 5
	// exitCannotRun: the command could not be started (as a shell says).
	exitCannotRun = 127
	// exitTempFail (EX_TEMPFAIL) from a worker's command fails the job
	// attempt retryably.
	exitTempFail = 75
)

// defaultKillGrace is how long a command has between SIGTERM and SIGKILL.
const defaultKillGrace = 10 * time.Second

const runExitCodes = `Exit status: the command's own status when it ran to its end (128 + N when
signal N killed it); 0 without running it when the window is already
completed; 2 bad usage; 3 the lease is held by another owner (without --wait;
nothing is printed: a cron line on every host skips quietly); 5 the lease was
lost while the command ran (it was stopped); 127 the command could not be
started; 1 any other error (the cluster could not be reached, the window
could not be completed, interrupted before the lease was granted). coordctl's own codes and the command's may overlap:
coordctl's own (but 3) come with a message on stderr.`

const leaseEnvDoc = `Environment of the command, besides coordctl's own:
  COORDD_LEASE          the lease name
  COORDD_GENERATION     the generation granted: the fencing token
  COORDD_FENCING_TOKEN  the token as NAME:GENERATION (coordctl fence commit --token,
                        a Fencing-Token header, client.FencedCommit)
  COORDD_OWNER          the owner id the lease is held as
  COORD_ENDPOINTS       the endpoints coordctl used (so that coordctl in the
                        command talks to the same cluster; COORD_TLS_* too)`

// killGraceFlag adds --kill-grace.
func killGraceFlag(cmd *cobra.Command, d *time.Duration) {
	cmd.Flags().DurationVar(d, "kill-grace", defaultKillGrace,
		"time between SIGTERM and SIGKILL when the command must stop (at most a quarter of the TTL)")
}

// dashArgs checks NAME -- CMD [ARGS...]: names arguments before "--",
// a command after it.
func dashArgs(names int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if at := cmd.ArgsLenAtDash(); at != names || len(args) <= names {
			want := append(strings.Fields(cmd.Use)[1:1+names], "-- CMD [ARGS...]")
			return fmt.Errorf("want %s", strings.Join(want, " "))
		}
		return nil
	}
}

// interruptible is cmd's context, ended by SIGINT or SIGTERM.
func interruptible(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

func (a *app) leaseRunCmd() *cobra.Command {
	var (
		owner, window, job, tz string
		ttl, killGrace         time.Duration
		wait                   bool
	)
	cmd := &cobra.Command{
		Use:   "run NAME -- CMD [ARGS...]",
		Short: "Run a command while holding a lease; with --window, once per window whatever the number of hosts",
		Long: `Acquires the lease NAME, runs CMD while keeping it alive (renewals at TTL/3,
following the leader), then releases it and exits with CMD's status.

When the lease is lost (a renewal refused, or none acknowledged in time) CMD
is stopped BEFORE the server could grant the lease to anyone else: the local
deadline is the send time of the last acknowledged renewal + TTL − margin
(the Go SDK's; margin = TTL/10 within [50ms, 2s]); CMD gets SIGTERM
--kill-grace before it and SIGKILL at it, and coordctl exits 5. A guard
process between coordctl and CMD holds that deadline, so CMD is stopped on
time also when coordctl itself is frozen or killed. CMD runs in its own
process group; the signals go to the group, and what is left of the group
when CMD exits is killed (SIGKILL): nothing CMD started outlives the lease.
SIGINT or SIGTERM to coordctl stops CMD the same way and then releases the
lease.

Without --wait a lease held by another owner exits 3 at once, printing
nothing. --wait queues for the lease (granted in arrival order) until
interrupted: a process that runs only where it is the leader.

--window KEY (with --job, default NAME) runs CMD at most once per window of
the window ledger: the lease is granted together with a claim of the window;
a window already completed exits 0 without running CMD ("already
completed" on stderr); CMD's exit 0 completes the window with CMD's last
line of stdout (up to 4 KiB; JSON as is, other text as a JSON string) as
its result, in the same call that releases the lease; a non-zero exit
leaves the window open for the next holder. With --window, --wait is on
unless --wait=false: a host that finds the lease held waits, and exits 0
when the holder completed the window, or runs CMD when the holder failed.
--window today or yesterday is the date (YYYY-MM-DD) in --tz (default the
machine's zone) at the cluster's calendar time.

` + leaseEnvDoc + `
  with --window:
  COORDD_JOB            the job of the window ledger (--job)
  COORDD_WINDOW         the window
  COORDD_WINDOW_ATTEMPT the claim's attempt number (1 the first time)

` + runExitCodes,
		Example: `  coordctl lease run maint --ttl 30s -- ./maintenance.sh
  coordctl lease run singleton --wait -- ./serve   # runs where it holds the lease; another host takes over when it dies
  # crontab line on any number of hosts: the close runs once per day
  5 0 * * * coordctl lease run daily-close --ttl 90s --window yesterday --tz Europe/Berlin -- ./close.sh
  5 0 * * * coordctl lease run daily-close --window "$(TZ=Europe/Berlin date -d yesterday +\%F)" -- ./close.sh
  coordctl lease run backup --ttl 60s -- sh -c 'coordctl fence commit backups/db --token "$COORDD_FENCING_TOKEN" && ./backup.sh'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if tz != "" && window != "today" && window != "yesterday" {
				return fmt.Errorf("--tz %s: only with --window today or yesterday", tz)
			}
			if o := cmd.Flags(); ttl <= 0 || killGrace < 0 || (o.Changed("job") && window == "") {
				return fmt.Errorf("want --ttl > 0, --kill-grace ≥ 0, --job only with --window")
			}
			return dashArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if window != "" && !cmd.Flags().Changed("wait") {
				wait = true
			}
			if job == "" {
				job = args[0]
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			return a.leaseRun(ctx, args[0], args[1:], leaseRunOpts{owner: owner, ttl: ttl, wait: wait, window: window,
				job: job, tz: tz, killGrace: killGrace})
		},
	}
	f := cmd.Flags()
	f.StringVar(&owner, "owner", "", "owner id to hold the lease as (default host:pid:random)")
	f.DurationVar(&ttl, "ttl", 30*time.Second, "lease time to live")
	f.BoolVar(&wait, "wait", false, "wait for the lease while another owner holds it (default true with --window)")
	f.StringVar(&window, "window", "", "run at most once for this window of the ledger (a key, or today / yesterday in --tz)")
	f.StringVar(&job, "job", "", "the job of the window ledger (default NAME)")
	f.StringVar(&tz, "tz", "", "time zone of --window today / yesterday (default the machine's)")
	killGraceFlag(cmd, &killGrace)
	return cmd
}

type leaseRunOpts struct {
	owner           string
	ttl, killGrace  time.Duration
	wait            bool
	window, job, tz string
}

func (a *app) leaseRun(ctx context.Context, name string, argv []string, o leaseRunOpts) error {
	op := "lease run " + name
	acq := []client.AcquireOption{}
	if o.owner != "" {
		acq = append(acq, client.AcquireOwner(o.owner))
	}
	if o.wait {
		acq = append(acq, client.AcquireWait())
	}
	if o.window != "" {
		win, err := a.resolveWindow(ctx, o.window, o.tz)
		if err != nil {
			return fail(op, err)
		}
		o.window = win
		acq = append(acq, client.AcquireClaim(o.job, win))
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if !o.wait {
		actx, cancel = context.WithTimeout(ctx, a.timeout)
	}
	l, err := a.client.Acquire(actx, name, o.ttl, acq...)
	cancel()
	var held *client.NotAcquiredError
	var done *client.WindowCompletedError
	switch {
	case errors.As(err, &held):
		return &codeError{code: exitHeld, msg: held.Error()}
	case errors.As(err, &done):
		fmt.Fprintf(a.errOut, "window %s/%s already completed by %s (generation %d): not running %s\n",
			o.job, o.window, done.Window.GetOwner(), done.Window.GetGeneration(), argv[0])
		return nil
	case err != nil && ctx.Err() != nil:
		if o.wait {
			a.releaseIfMine(name, o.owner)
		}
		return a.said(exitError, "%s: interrupted before the lease was granted", op)
	case err != nil:
		return fail(op, err)
	}
	return a.runUnderLease(ctx, op, l, l.Claim(), argv, o.killGrace, nil)
}

// resolveWindow turns --window today / yesterday into a date in zone tz
// at the cluster's calendar time; any other key is itself.
func (a *app) resolveWindow(ctx context.Context, key, tz string) (string, error) {
	if key != "today" && key != "yesterday" {
		return key, nil
	}
	loc := time.Local
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			return "", fmt.Errorf("--tz: %w", err)
		}
	}
	now := a.client.Clock().Now() // without the cluster's calendar: this machine's clock
	cctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if ms := a.calendarTime(cctx); ms > 0 {
		now = time.UnixMilli(ms)
	}
	return windowDate(key, now, loc), nil
}

// windowDate is the date of today or yesterday at now in loc.
func windowDate(key string, now time.Time, loc *time.Location) string {
	d := now.In(loc)
	if key == "yesterday" {
		d = time.Date(d.Year(), d.Month(), d.Day()-1, 12, 0, 0, 0, loc)
	}
	return d.Format(time.DateOnly)
}

// childEnv is what every command coordctl runs gets: the cluster coordctl
// talks to.
func (a *app) childEnv() []string {
	env := []string{"COORD_ENDPOINTS=" + a.endpoints}
	for k, v := range map[string]string{"COORD_TLS_CA": a.tls.CA, "COORD_TLS_CERT": a.tls.Cert, "COORD_TLS_KEY": a.tls.Key} {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// leaseEnv is the environment of a command run under l.
func leaseEnv(l *client.Lease) []string {
	return []string{"COORDD_LEASE=" + l.Name(), "COORDD_GENERATION=" + strconv.FormatUint(l.Generation(), 10),
		"COORDD_FENCING_TOKEN=" + l.Token(), "COORDD_OWNER=" + l.Owner()}
}

// maxWindowResult bounds the last line of stdout kept as a window's result.
const maxWindowResult = 4 << 10

// runUnderLease runs argv while l is held (and claim, if any, claimed):
// until it exits, the lease is lost or ctx ends (an interrupt); then it
// completes the window (exit 0) or releases the lease, and exits with the
// command's status.
func (a *app) runUnderLease(ctx context.Context, op string, l *client.Lease, claim *client.Claim, argv []string,
	killGrace time.Duration, env []string) error {
	env = append(append(a.childEnv(), leaseEnv(l)...), env...)
	stdout := a.out
	var last *lastLine
	if claim != nil {
		w := claim.Window
		env = append(env, "COORDD_JOB="+w.GetJob(), "COORDD_WINDOW="+w.GetWindow(),
			"COORDD_WINDOW_ATTEMPT="+strconv.FormatUint(claim.Attempts, 10))
		last = newLastLine(a.out, maxWindowResult)
		stdout = last
	}
	what := fmt.Sprintf("lease %s generation %d", l.Name(), l.Generation())
	ch, err := startChild(childSpec{argv: argv, env: env, stdin: os.Stdin, stdout: stdout, stderr: a.errOut,
		killGrace: min(killGrace, l.TTL()/4), what: what}, l.Deadline())
	if err != nil {
		a.release(ctx, l)
		return fail(op, err)
	}
	l.OnDeadline(ch.setDeadline)
	select {
	case <-ch.Done():
	case <-l.Done():
		ch.stop(fmt.Sprintf("%s lost: %v", what, l.Err()))
	case <-ctx.Done():
		ch.stop("coordctl interrupted")
	}
	code := ch.exitCode()
	if lost := leaseLost(a.client, l); lost != nil {
		return a.said(exitLost, "%s: %s lost while %s ran; it was stopped (exit %d): %v", op, what, argv[0], code, lost)
	}
	if claim != nil && code == 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
		defer cancel()
		w := claim.Window
		_, err := claim.CompleteAndRelease(rctx, resultPayload(last.Bytes()))
		if errors.Is(err, client.ErrLeaseLost) {
			return a.said(exitLost, "%s: %s lost before the window was completed: %v", op, what, err)
		}
		if err != nil {
			return &opError{op: op, err: err, msg: fmt.Sprintf("window %s/%s not completed: %s", w.GetJob(), w.GetWindow(), describe(err))}
		}
		fmt.Fprintf(a.errOut, "completed window %s/%s (attempt %d)\n", w.GetJob(), w.GetWindow(), claim.Attempts)
		return nil
	}
	a.release(ctx, l)
	if code != 0 {
		if claim != nil {
			fmt.Fprintf(a.errOut, "%s exited %d: window %s/%s left open for the next holder\n", argv[0], code,
				claim.Window.GetJob(), claim.Window.GetWindow())
		}
		return &codeError{code: code, msg: fmt.Sprintf("%s exited %d", argv[0], code)}
	}
	return nil
}

// releaseIfMine releases name if owner (default the client's) holds it: a
// waiting acquire that was interrupted may have been granted as it ended.
func (a *app) releaseIfMine(name, owner string) {
	if owner == "" {
		owner = a.client.Owner()
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	l, err := a.client.GetLease(ctx, name)
	if err != nil || l.GetOwner() != owner || l.GetReleased() || l.GetExpired() {
		return
	}
	_, _ = a.coord().Release(ctx, &coordv1.ReleaseRequest{Name: name, Owner: owner, Generation: l.GetGeneration()})
}

// leaseLost says why l is lost, or nil while it is held. Past its local
// deadline it is lost, also before the SDK's timer said so: a coordctl
// that wakes from a pause sees its guard's kill first.
func leaseLost(c *client.Client, l *client.Lease) error {
	if err := l.Err(); errors.Is(err, client.ErrLeaseLost) {
		return err
	}
	if d := l.Deadline(); !c.Clock().Now().Before(d) {
		return fmt.Errorf("%w: no renewal acknowledged before the local deadline %s", client.ErrLeaseLost, d.Format(time.RFC3339Nano))
	}
	return nil
}

// said prints a message and exits with code.
func (a *app) said(code int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(a.errOut, "error: "+msg)
	return &codeError{code: code, msg: msg}
}

// release releases l after its command ended; a failure is only said (the
// lease then expires after its TTL).
func (a *app) release(ctx context.Context, l *client.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	if err := l.Release(rctx); err != nil && !errors.Is(err, client.ErrLeaseReleased) {
		fmt.Fprintf(a.errOut, "coordctl: lease %s generation %d not released (it expires after its TTL): %s\n",
			l.Name(), l.Generation(), describe(err))
	}
}
