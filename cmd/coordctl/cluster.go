package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// opError names the operation that failed.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return e.op + ": " + describe(e.err) }
func (e *opError) Unwrap() error { return e.err }

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
			for _, ep := range a.conn.endpoints {
				st, err := clus(a.conn.conns[ep]).Status(ctx, &coordv1.StatusRequest{})
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

// writeStatusJSON prints {"nodes":[{"endpoint":…,"status":{StatusResponse}}
// or {"endpoint":…,"error":…}]}: one document for every endpoint.
func writeStatusJSON(out io.Writer, nodes []nodeStatus) error {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		ep, _ := protojson.Marshal(wrapString(n.endpoint))
		if n.err != nil {
			msg, _ := protojson.Marshal(wrapString(describe(n.err)))
			parts[i] = fmt.Sprintf(`{"endpoint": %s, "error": %s}`, ep, msg)
			continue
		}
		b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(n.status)
		if err != nil {
			return err
		}
		parts[i] = fmt.Sprintf(`{"endpoint": %s, "status": %s}`, ep, b)
	}
	_, err := fmt.Fprintf(out, "{\"nodes\": [\n  %s\n]}\n", strings.Join(parts, ",\n  "))
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
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.MembersResponse, error) {
				return clus(cc).Members(ctx, &coordv1.MembersRequest{})
			})
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
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.AddVoterResponse, error) {
				return clus(cc).AddVoter(ctx, &coordv1.AddVoterRequest{Id: args[0], RaftAddress: args[1], GrpcAddress: args[2]})
			})
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
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.RemoveServerResponse, error) {
				return clus(cc).RemoveServer(ctx, &coordv1.RemoveServerRequest{Id: args[0]})
			})
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
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.TransferLeadershipResponse, error) {
				return clus(cc).TransferLeadership(ctx, &coordv1.TransferLeadershipRequest{Id: id})
			})
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
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.SnapshotResponse, error) {
				return clus(cc).Snapshot(ctx, &coordv1.SnapshotRequest{})
			})
			if err != nil {
				return fail("snapshot", err)
			}
			return a.print(resp, func(w io.Writer) {
				fmt.Fprintf(w, "snapshot %s at index %d, term %d\n", resp.GetId(), resp.GetIndex(), resp.GetTerm())
			})
		},
	}
}

// clusterTime asks for the cluster clock, to render record ages.
func (a *app) clusterTime(ctx context.Context) int64 {
	st, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.StatusResponse, error) {
		return clus(cc).Status(ctx, &coordv1.StatusRequest{})
	})
	if err != nil {
		return 0
	}
	return st.GetClusterTime()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
