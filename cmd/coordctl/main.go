// Command coordctl lets operators see and act on a coordd cluster: leases,
// windows, fenced resources, the job queue and the cluster itself.
//
// Exit status: 0 success, 1 error, 2 bad usage, 3 lease held by another
// owner (lease acquire), 4 something is overdue or stuck (job overdue); the
// commands that run a command (lease run, elect, worker) also pass on its
// status and exit 5 when the lease was lost (run.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/tlsutil"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	exitHeld  = 3
	// exitOverdue: job overdue listed overdue occurrences or stuck leases.
	exitOverdue = 4
)

// app is the state shared by all commands: global flags and I/O.
type app struct {
	endpoints string
	tls       tlsutil.Files
	output    string
	timeout   time.Duration
	out       io.Writer
	errOut    io.Writer
	started   bool           // a command's RunE began: later errors are not usage errors
	client    *client.Client // the SDK client of commands that talk to a cluster
	watch     *watcher
	jobErrors printedErrors // job watch: the errors printed already
}

// codeError makes coordctl exit with code after a command printed its
// answer (exitHeld, exitOverdue): a finding, not a failure, so nothing more
// is printed.
type codeError struct {
	code int
	msg  string
}

func (e *codeError) Error() string { return e.msg }

func main() {
	if os.Getenv(guardEnv) != "" { // the watchdog of a command run under a lease or job (child.go)
		os.Exit(guardMain(os.Args[1:], os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, out, errOut io.Writer) int {
	return runContext(context.Background(), args, out, errOut)
}

// runContext runs coordctl with args; ctx ending is an interrupt (tests).
func runContext(ctx context.Context, args []string, out, errOut io.Writer) int {
	a := &app{out: out, errOut: errOut, watch: newWatcher(errOut)}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errOut)
	cmd, err := root.ExecuteContextC(ctx)
	if a.client != nil {
		a.client.Close()
	}
	if err == nil {
		return exitOK
	}
	var coded *codeError
	switch {
	case errors.As(err, &coded):
		return coded.code
	case !a.started:
		fmt.Fprintf(errOut, "error: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	default:
		var op *opError
		if errors.As(err, &op) {
			fmt.Fprintf(errOut, "error: %s: %s\n", op.op, op.render(a))
		} else {
			fmt.Fprintf(errOut, "error: %s\n", a.watch.explain(err, a.timeout))
		}
		return exitError
	}
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "coordctl",
		Short: "See and operate a coordd cluster",
		Long: `coordctl talks to a coordd cluster over gRPC.

Endpoints come from --endpoints, else COORD_ENDPOINTS, else 127.0.0.1:7400.
-o json prints the RPC response as the HTTP API writes it (docs/http-api.md):
the proto field names, times in RFC 3339, durations like "90s", args and
results as JSON, enums by short name ("DEAD"), and 64-bit integers
(generations, indexes, counts) as JSON strings: "generation": "7".

Exit status: 0 success, 1 error, 2 bad usage, 3 lease held by another
owner (lease acquire, lease run), 4 something is overdue or stuck (job
overdue), 5 the lease was lost while a command ran (lease run, elect); lease
run and elect otherwise exit with their command's status (see their --help).

Commands go through the Go SDK: to the leader, past nodes that are down, and,
while a leader is being elected, retried for up to --timeout (coordctl says
so once on stderr).`,
		Example: `  coordctl status
  coordctl lease list --prefix daily-
  COORD_ENDPOINTS=127.0.0.1:7410,127.0.0.1:7420 coordctl -o json lease get daily-close`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			// cobra checks required flags after this hook; check them first so
			// that a missing flag is a usage error (exit 2).
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return err
			}
			if a.output != "table" && a.output != "json" {
				return fmt.Errorf("-o %q: want table or json", a.output)
			}
			if a.timeout <= 0 {
				return fmt.Errorf("--timeout must be positive")
			}
			if cmd.Annotations[offline] == "true" {
				a.started = true
				return nil
			}
			eps := splitEndpoints(a.endpoints)
			if len(eps) == 0 {
				return fmt.Errorf("--endpoints: no endpoint given")
			}
			a.watch.endpoints, a.watch.timeout = len(eps), a.timeout
			c, err := newClient(eps, a.tls, a.watch)
			if err != nil {
				return err
			}
			a.client = c
			a.started = true
			return nil
		},
	}
	def := os.Getenv("COORD_ENDPOINTS")
	if def == "" {
		def = "127.0.0.1:7400"
	}
	root.PersistentFlags().StringVar(&a.endpoints, "endpoints", def, "comma-separated gRPC addresses of coordd nodes (env COORD_ENDPOINTS)")
	root.PersistentFlags().StringVar(&a.tls.Cert, "tls-cert", os.Getenv("COORD_TLS_CERT"), "client certificate (PEM) for a cluster running mutual TLS (env COORD_TLS_CERT)")
	root.PersistentFlags().StringVar(&a.tls.Key, "tls-key", os.Getenv("COORD_TLS_KEY"), "key of --tls-cert (env COORD_TLS_KEY)")
	root.PersistentFlags().StringVar(&a.tls.CA, "tls-ca", os.Getenv("COORD_TLS_CA"), "CA bundle (PEM) that signed the nodes' certificates; turns TLS on (env COORD_TLS_CA)")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().DurationVar(&a.timeout, "timeout", 10*time.Second, "timeout of each command")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddCommand(a.statusCmd(), a.membersCmd(), group("leader", "Leadership operations", a.leaderTransferCmd()), a.snapshotCmd(),
		group("lease", "See and operate leases",
			a.leaseListCmd(), a.leaseGetCmd(), a.leaseAcquireCmd(), a.leaseRenewCmd(), a.leaseReleaseCmd(), a.leaseKeepAliveCmd(), a.leaseWatchCmd(),
			a.leaseRunCmd()),
		group("window", "See and operate the window ledger",
			a.windowListCmd(), a.windowGetCmd(), a.windowClaimCmd(), a.windowCompleteCmd()),
		group("fence", "Fenced resources: commit with a token, see the highest token seen",
			a.fenceCommitCmd(), a.fenceGetCmd()),
		group("job", "Queued jobs (submit, get, list, cancel, retry, delete: one or in bulk) and what did not happen (overdue)",
			a.jobSubmitCmd(), a.jobGetCmd(), a.jobListCmd(), a.jobCancelBulkCmd(), a.jobRetryBulkCmd(), a.jobDeleteBulkCmd(), a.jobBulkCmd(), a.jobWatchCmd(), a.jobOverdueCmd()),
		group("queue", "The job queue's counts per state and dispatch lag; queues' HTTP targets and limits; pause and resume a queue", a.queueStatsCmd(), a.queueTargetCmd(),
			a.queueLimitCmd(), a.queueLimitsCmd(), a.queuePauseCmd(), a.queueResumeCmd()),
		group("schedule", "Recurring jobs: one queue job per occurrence of a cron expression, made by the leader",
			a.scheduleCreateCmd(), a.scheduleUpdateCmd(), a.scheduleApplyCmd(), a.scheduleGetCmd(), a.scheduleListCmd(), a.schedulePauseCmd(), a.scheduleResumeCmd(),
			a.scheduleTriggerCmd(), a.scheduleDeleteCmd()),
		a.workerCmd(), a.electCmd(), a.certsCmd(), a.versionCmd())
	return root
}

func splitEndpoints(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// newCmd is a command that talks to the cluster: run gets the command's
// context bounded by --timeout.
func (a *app) newCmd(use, short, example string, args cobra.PositionalArgs, run func(ctx context.Context, args []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Example: example, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return run(ctx, args)
		}}
}

// group is a command that only holds subcommands; its example lists the
// subcommands' first examples.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	var ex []string
	for _, sub := range subs {
		if first, _, _ := strings.Cut(sub.Example, "\n"); first != "" {
			ex = append(ex, first)
		}
	}
	c.Example = strings.Join(ex, "\n")
	c.AddCommand(subs...)
	return c
}

// parseLabels reads repeated --label key=value flags (nil for none).
func parseLabels(labels []string) (map[string]string, error) {
	var out map[string]string
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want key=value", l)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out, nil
}

// pageFlags are --limit and --page-token, the flags of the list commands
// that print one page.
type pageFlags struct {
	limit int32
	token string
}

func (p *pageFlags) add(cmd *cobra.Command, items string) {
	cmd.Flags().Int32Var(&p.limit, "limit", 100, items+" per page, 1 to 1000")
	cmd.Flags().StringVar(&p.token, "page-token", "", "the page after the one that printed this token")
}

// noArgsLimit is the Args check of a list command without arguments: no
// argument, and --limit in range.
func noArgsLimit(limit *int32) cobra.PositionalArgs {
	return func(cmd *cobra.Command, pos []string) error {
		if err := cobra.NoArgs(cmd, pos); err != nil {
			return err
		}
		return checkLimit(*limit)
	}
}

// checkLimit is the --limit check of the list commands.
func checkLimit(limit int32) error {
	if limit < 1 || limit > 1000 {
		return fmt.Errorf("--limit %d: want 1 to 1000", limit)
	}
	return nil
}
