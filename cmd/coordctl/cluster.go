package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/apijson"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// opError names the operation that failed. msg, when set, replaces the
// rendering of err.
type opError struct {
	op  string
	err error
	msg string
}

func (e *opError) Error() string {
	if e.msg != "" {
		return e.op + ": " + e.msg
	}
	return e.op + ": " + describe(e.err)
}
func (e *opError) Unwrap() error { return e.err }

// render is the message after the op, with what the watcher learned. An
// outcome left unknown gets generic advice (commands with an idempotency
// handle give their own, naming the flag: uncertain).
func (e *opError) render(a *app) string {
	switch {
	case e.msg != "":
		return e.msg
	case errors.Is(e.err, client.ErrUnknownOutcome):
		return a.uncertain(e.err, "look (get, list) before repeating the command")
	}
	return a.watch.explain(e.err, a.timeout)
}

// uncertain renders an error after which the command may have been
// applied: what happened (without the server's advice to retry with a
// request id, which a command without one cannot follow) and advice, what
// to do with coordctl's flags.
func (a *app) uncertain(err error, advice string) string {
	what, _, _ := strings.Cut(a.watch.explain(err, a.timeout), "; the outcome is unknown")
	return what + "; the outcome is unknown (it may have been applied): " + advice
}

// fail names op in err, unless err names its op already.
func fail(op string, err error) error {
	var named *opError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &named):
		return err
	}
	return &opError{op: op, err: err}
}

func (a *app) statusCmd() *cobra.Command {
	var withConfig bool
	cmd := a.newCmd("status", "Show every endpoint's Raft state, leader, indexes and FSM digest", `  coordctl status
  coordctl --endpoints 127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430 -o json status
  coordctl status --config`, cobra.NoArgs,
		func(ctx context.Context, _ []string) error {
			if withConfig {
				return a.printConfigs(ctx)
			}
			var nodes []nodeStatus
			failed := 0
			for _, ep := range a.client.Endpoints() {
				st, err := a.client.StatusDigest(perNodeContext(ctx), ep)
				nodes = append(nodes, nodeStatus{endpoint: ep, status: st, err: err})
				if err != nil {
					failed++
				}
			}
			if a.output == "json" {
				if err := writeStatusJSON(a.out, nodes); err != nil {
					return err
				}
			} else {
				statusTable(a.out, nodes)
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d endpoints did not answer", failed, len(nodes))
			}
			return nil
		})
	cmd.Long = `Asks every endpoint for its status, one by one (not through the leader),
and prints one row per endpoint:

  STATE         Leader, Follower or Candidate, or unreachable. "Leader (no
                majority)": the node says it leads but only a minority of the
                members answered its last probes, or of the endpoints answered
                coordctl; it cannot commit anything, so writes fail or time
                out with an unknown outcome until a majority is back (a leader
                alone steps down within a second). A warning line after the
                table says why; another says so when no node that answered
                leads or knows a leader (nothing commits until one is elected).
  LEADER        the leader this node knows of.
  TERM, COMMIT, APPLIED
                Raft term, commit index, and the index applied to its state.
  LAST CONTACT  how long ago a follower last heard from the leader ("never"
                before it has; "-" on the leader).
  CLOCK OFFSET  the node's wall clock minus the leader's, ± the measurement's
                error bound (half the probe's round trip), as the leader last
                measured it ("0" for the leader, "-" before the first probe).
                Nothing is judged on wall clocks, but a leader's becomes the
                calendar (schedules, run_at, overdue).
  LEASE LAG     how far lease time (the clock leases expire on, which pauses
                while there is no leader) trails calendar time: the total of
                past elections and outages, plus, on a follower, the time since
                it last applied a command. It grows with each failover; it is
                not an error.
  DIGEST        a hash of the state: equal on nodes that applied the same log.

With --config it prints each endpoint's effective configuration instead:
every setting (the flag's name, as in a --config file), its value (secrets
show as <redacted>) and where it came from (flag, env, file or default).
An admin call.

Exit status 1 when an endpoint did not answer.`
	cmd.Flags().BoolVar(&withConfig, "config", false, "print each endpoint's effective configuration (admin)")
	return cmd
}

// printConfigs asks every endpoint for its effective configuration and
// prints one table per endpoint (-o json: {"nodes": [{"endpoint", "config"
// or "error"}]}).
func (a *app) printConfigs(ctx context.Context) error {
	type node struct {
		Endpoint string          `json:"endpoint"`
		Config   json.RawMessage `json:"config,omitempty"`
		Error    string          `json:"error,omitempty"`
	}
	var doc struct {
		Nodes []node `json:"nodes"`
	}
	failed := 0
	for _, ep := range a.client.Endpoints() {
		resp, err := a.client.Config(perNodeContext(ctx), ep)
		n := node{Endpoint: ep}
		switch {
		case err != nil:
			failed++
			n.Error = describe(err)
			if a.output != "json" {
				fmt.Fprintf(a.out, "%s: %s\n", ep, n.Error)
			}
		case a.output == "json":
			if n.Config, err = apijson.Marshal(resp); err != nil {
				return err
			}
		default:
			fmt.Fprintf(a.out, "%s (%s), config file %s\n", ep, resp.GetId(), orDash(resp.GetFile()))
			tab(a.out, func(w io.Writer) {
				row(w, "  NAME", "VALUE", "SOURCE")
				for _, st := range resp.GetSettings() {
					row(w, "  "+st.GetName(), orDash(st.GetValue()), st.GetSource())
				}
			})
		}
		doc.Nodes = append(doc.Nodes, n)
	}
	if a.output == "json" {
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(a.out, "%s\n", b)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d endpoints did not answer", failed, len(doc.Nodes))
	}
	return nil
}

// writeStatusJSON prints one document, {"nodes": [...]}, with one object
// per endpoint: {"endpoint": …, "status": {StatusResponse}} or
// {"endpoint": …, "error": …}, all indented alike; and "warnings" (a
// leader without a majority, as the table says after it) when there are.
func writeStatusJSON(out io.Writer, nodes []nodeStatus) error {
	type node struct {
		Endpoint string          `json:"endpoint"`
		Status   json.RawMessage `json:"status,omitempty"`
		Error    string          `json:"error,omitempty"`
	}
	doc := struct {
		Nodes    []node   `json:"nodes"`
		Warnings []string `json:"warnings,omitempty"`
	}{Nodes: make([]node, len(nodes))}
	_, doc.Warnings = noMajority(nodes)
	for i, n := range nodes {
		doc.Nodes[i].Endpoint = n.endpoint
		if n.err != nil {
			doc.Nodes[i].Error = describe(n.err)
			continue
		}
		b, err := apijson.Marshal(n.status)
		if err != nil {
			return err
		}
		doc.Nodes[i].Status = b
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

func (a *app) membersCmd() *cobra.Command {
	// Each prints the members as they are after it.
	members := func(op string, resp interface {
		proto.Message
		GetMembers() []*coordv1.Member
	}, err error) error {
		return a.reply(op, resp, err, func(w io.Writer) { membersTable(w, resp.GetMembers()) })
	}
	list := a.newCmd("members", "List the cluster's members (add and remove them with subcommands)",
		"  coordctl members\n  coordctl members add node4 127.0.0.1:7442 127.0.0.1:7440\n  coordctl members remove node4", cobra.NoArgs,
		func(ctx context.Context, _ []string) error {
			resp, err := a.cluster().Members(ctx, &coordv1.MembersRequest{})
			return members("members", resp, err)
		})
	add := a.newCmd("add ID RAFT_ADDR GRPC_ADDR", "Add a voter (or update a member's addresses)",
		"  coordctl members add node4 127.0.0.1:7442 127.0.0.1:7440", cobra.ExactArgs(3),
		func(ctx context.Context, args []string) error {
			resp, err := a.cluster().AddVoter(ctx, &coordv1.AddVoterRequest{Id: args[0], RaftAddress: args[1], GrpcAddress: args[2]})
			return members("members add "+args[0], resp, err)
		})
	remove := a.newCmd("remove ID", "Remove a server from the cluster", "  coordctl members remove node4", cobra.ExactArgs(1),
		func(ctx context.Context, args []string) error {
			resp, err := a.cluster().RemoveServer(ctx, &coordv1.RemoveServerRequest{Id: args[0]})
			return members("members remove "+args[0], resp, err)
		})
	list.AddCommand(add, remove)
	return list
}

func (a *app) leaderTransferCmd() *cobra.Command {
	return a.newCmd("transfer [ID]", "Hand leadership to ID, or to any up-to-date voter",
		"  coordctl leader transfer\n  coordctl leader transfer node2", cobra.MaximumNArgs(1),
		func(ctx context.Context, args []string) error {
			if err := a.checkTransfer(ctx); err != nil {
				return err
			}
			resp, err := a.cluster().TransferLeadership(ctx, &coordv1.TransferLeadershipRequest{Id: firstArg(args)})
			return a.reply("leader transfer", resp, err, func(w io.Writer) {
				fmt.Fprintf(w, "leadership transferred; leader is now %s\n", orDash(resp.GetLeaderId()))
			})
		})
}

func (a *app) snapshotCmd() *cobra.Command {
	c := a.newCmd("snapshot", "Take a snapshot now on the first endpoint that answers; save, inspect: backups",
		"  coordctl --endpoints 127.0.0.1:7420 snapshot\n  coordctl snapshot save backup.snap\n  coordctl snapshot inspect backup.snap",
		cobra.NoArgs, func(ctx context.Context, _ []string) error {
			resp, err := a.client.Snapshot(perNodeContext(ctx), "")
			return a.reply("snapshot", resp, err, func(w io.Writer) {
				fmt.Fprintf(w, "snapshot %s at index %d, term %d\n", resp.GetId(), resp.GetIndex(), resp.GetTerm())
			})
		})
	c.AddCommand(a.snapshotSaveCmd(), a.snapshotInspectCmd()) // backup.go
	return c
}

// checkTransfer refuses a leader transfer in a cluster of one voter: there
// is nobody to hand leadership to (Raft would say "cannot find peer").
func (a *app) checkTransfer(ctx context.Context) error {
	ms, err := a.cluster().Members(ctx, &coordv1.MembersRequest{})
	if err != nil {
		return fail("leader transfer", err)
	}
	var voters []string
	for _, m := range ms.GetMembers() {
		if m.GetSuffrage() == "Voter" {
			voters = append(voters, m.GetId())
		}
	}
	if len(voters) <= 1 {
		return &opError{op: "leader transfer", msg: fmt.Sprintf(
			"the cluster has a single voter (%s): there is no other node to hand leadership to (%s)",
			strings.Join(voters, ""), codes.FailedPrecondition)}
	}
	return nil
}

// calendarTime asks for calendar time, to render ages: every time of the
// API is a calendar time.
func (a *app) calendarTime(ctx context.Context) int64 {
	st, err := a.cluster().Status(ctx, &coordv1.StatusRequest{})
	if err != nil {
		return 0
	}
	return st.GetCalendarTimeMs()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
