package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/client"
)

func (a *app) electCmd() *cobra.Command {
	var (
		owner, value   string
		ttl, killGrace time.Duration
		observe        bool
	)
	cmd := &cobra.Command{
		Use:   "elect NAME -- CMD [ARGS...]",
		Short: "Run a command while this process is the elected leader of NAME, or --observe who leads",
		Long: `Campaigns for the leadership of NAME (the Go SDK's Campaign: a waiting
acquire of the lease NAME; candidates are elected in the order they asked),
publishes --value with the grant, and runs CMD while it leads. When CMD
exits, coordctl resigns (the next candidate is elected in the same log entry)
and exits with CMD's status. When the leadership is lost, CMD is stopped
before anyone else could be elected, as lease run does: SIGTERM --kill-grace
before the local deadline, SIGKILL at it; coordctl exits 5. SIGINT/SIGTERM
while waiting exits 1 without running CMD; while leading, stops CMD and
resigns.

--observe prints the election's state and then every change (a new
leader, a resignation, an expiry) until interrupted: one line per change,
or one JSON object per line with -o json ({"name","held","owner",
"generation","value","index"}).

` + leaseEnvDoc + `
  COORDD_LEADER_VALUE   the value published (--value)

` + runExitCodes,
		Example: `  coordctl elect scheduler --ttl 10s --value "$(hostname)" -- ./scheduler
  coordctl elect scheduler --observe
  coordctl -o json elect scheduler --observe | jq -r .owner`,
		Args: func(cmd *cobra.Command, args []string) error {
			if observe {
				if cmd.ArgsLenAtDash() >= 0 || len(args) != 1 {
					return errors.New("--observe: want NAME only, no command")
				}
				return nil
			}
			return dashArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			if observe {
				return a.observe(ctx, args[0])
			}
			opts := []client.ElectionOption{client.ElectionTTL(ttl)}
			if owner != "" {
				opts = append(opts, client.ElectionOwner(owner))
			}
			op := "elect " + args[0]
			lead, err := a.client.Campaign(ctx, args[0], []byte(value), opts...)
			switch {
			case err != nil && ctx.Err() != nil:
				return &codeError{code: exitError, msg: "interrupted before elected"}
			case err != nil:
				return fail(op, err)
			}
			fmt.Fprintf(a.errOut, "elected leader of %s (generation %d): running %s\n", args[0], lead.Generation(), args[1])
			return a.runUnderLease(ctx, op, lead.Lease(), nil, args[1:], killGrace, []string{"COORDD_LEADER_VALUE=" + value})
		},
	}
	f := cmd.Flags()
	f.StringVar(&owner, "owner", "", "owner id to campaign as: observers see it as the leader (default host:pid:random)")
	f.StringVar(&value, "value", "", "value to publish as the leader (up to 4 KiB)")
	f.DurationVar(&ttl, "ttl", client.DefaultElectionTTL, "leadership lease TTL: a leader that dies is replaced about this long after its last renewal")
	f.BoolVar(&observe, "observe", false, "print the leader and every change instead of campaigning")
	killGraceFlag(cmd, &killGrace)
	return cmd
}

// leaderJSON is one line of elect --observe -o json.
type leaderJSON struct {
	Name       string `json:"name"`
	Held       bool   `json:"held"`
	Owner      string `json:"owner"`
	Generation string `json:"generation"` // a string, as 64-bit integers are in coordctl's JSON
	Value      string `json:"value"`
	Index      string `json:"index"`
}

// observe prints an election's changes until ctx ends.
func (a *app) observe(ctx context.Context, name string) error {
	enc := json.NewEncoder(a.out)
	for l := range a.client.Observe(ctx, name) {
		if a.output == "json" {
			if err := enc.Encode(leaderJSON{Name: l.Name, Held: l.Held, Owner: l.Owner, Generation: fmt.Sprint(l.Generation),
				Value: string(l.Value), Index: fmt.Sprint(l.Index)}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(a.out, l.String())
	}
	return nil
}
