package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

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

// render is the message after the op, with what the watcher learned.
func (e *opError) render(a *app) string {
	if e.msg != "" {
		return e.msg
	}
	return a.watch.explain(e.err, a.timeout)
}

func fail(op string, err error) error {
	if err == nil {
		return nil
	}
	return &opError{op: op, err: err}
}

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show every endpoint's Raft state, leader, indexes and FSM digest",
		Example: `  coordctl status
  coordctl --endpoints 127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430 -o json status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
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
		},
	}
}

// writeStatusJSON prints one document, {"nodes": [...]}, with one object
// per endpoint: {"endpoint": …, "status": {StatusResponse}} or
// {"endpoint": …, "error": …}, all indented alike.
func writeStatusJSON(out io.Writer, nodes []nodeStatus) error {
	type node struct {
		Endpoint string          `json:"endpoint"`
		Status   json.RawMessage `json:"status,omitempty"`
		Error    string          `json:"error,omitempty"`
	}
	doc := struct {
		Nodes []node `json:"nodes"`
	}{Nodes: make([]node, len(nodes))}
	for i, n := range nodes {
		doc.Nodes[i].Endpoint = n.endpoint
		if n.err != nil {
			doc.Nodes[i].Error = describe(n.err)
			continue
		}
		b, err := jsonOpts.Marshal(n.status)
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
	list := &cobra.Command{
		Use:     "members",
		Short:   "List the cluster's members (add and remove them with subcommands)",
		Example: "  coordctl members\n  coordctl members add node4 127.0.0.1:7442 127.0.0.1:7440\n  coordctl members remove node4",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.cluster().Members(ctx, &coordv1.MembersRequest{})
			if err != nil {
				return fail("members", err)
			}
			return a.print(resp, func(w io.Writer) { membersTable(w, resp.GetMembers()) })
		},
	}
	add := &cobra.Command{
		Use:     "add ID RAFT_ADDR GRPC_ADDR",
		Short:   "Add a voter (or update a member's addresses)",
		Example: "  coordctl members add node4 127.0.0.1:7442 127.0.0.1:7440",
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.cluster().AddVoter(ctx, &coordv1.AddVoterRequest{Id: args[0], RaftAddress: args[1], GrpcAddress: args[2]})
			if err != nil {
				return fail("members add "+args[0], err)
			}
			return a.print(resp, func(w io.Writer) { membersTable(w, resp.GetMembers()) })
		},
	}
	remove := &cobra.Command{
		Use:     "remove ID",
		Short:   "Remove a server from the cluster",
		Example: "  coordctl members remove node4",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.cluster().RemoveServer(ctx, &coordv1.RemoveServerRequest{Id: args[0]})
			if err != nil {
				return fail("members remove "+args[0], err)
			}
			return a.print(resp, func(w io.Writer) { membersTable(w, resp.GetMembers()) })
		},
	}
	list.AddCommand(add, remove)
	return list
}

func (a *app) leaderCmd() *cobra.Command {
	transfer := &cobra.Command{
		Use:     "transfer [ID]",
		Short:   "Hand leadership to ID, or to any up-to-date voter",
		Example: "  coordctl leader transfer\n  coordctl leader transfer node2",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			if err := a.checkTransfer(ctx); err != nil {
				return err
			}
			resp, err := a.cluster().TransferLeadership(ctx, &coordv1.TransferLeadershipRequest{Id: id})
			if err != nil {
				return fail("leader transfer", err)
			}
			return a.print(resp, func(w io.Writer) {
				fmt.Fprintf(w, "leadership transferred; leader is now %s\n", orDash(resp.GetLeaderId()))
			})
		},
	}
	return group("leader", "Leadership operations", transfer)
}

func (a *app) snapshotCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "snapshot",
		Short:   "Take a snapshot now on the first endpoint that answers",
		Example: "  coordctl --endpoints 127.0.0.1:7420 snapshot",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.client.Snapshot(perNodeContext(ctx), "")
			if err != nil {
				return fail("snapshot", err)
			}
			return a.print(resp, func(w io.Writer) {
				fmt.Fprintf(w, "snapshot %s at index %d, term %d\n", resp.GetId(), resp.GetIndex(), resp.GetTerm())
			})
		},
	}
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

// clusterTime asks for the cluster clock (lease time), to render the ages
// of records stamped with it (resources).
func (a *app) clusterTime(ctx context.Context) int64 {
	st, err := a.cluster().Status(ctx, &coordv1.StatusRequest{})
	if err != nil {
		return 0
	}
	return st.GetClusterTime()
}

// calendarTime asks for calendar time, to render the ages of windows and
// jobs (their times are calendar time); lease time from a server that
// stamps no calendar time.
func (a *app) calendarTime(ctx context.Context) int64 {
	st, err := a.cluster().Status(ctx, &coordv1.StatusRequest{})
	if err != nil {
		return 0
	}
	if c := st.GetCalendarTimeMs(); c > 0 {
		return c
	}
	return st.GetClusterTime()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
