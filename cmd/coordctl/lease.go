package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// holderFlags are --owner, --generation and --ttl, shared by lease commands.
type holderFlags struct {
	owner      string
	generation uint64
	ttl        time.Duration
}

func (h *holderFlags) add(cmd *cobra.Command, gen, ttl bool) {
	cmd.Flags().StringVar(&h.owner, "owner", "", "owner id of the holder (required)")
	_ = cmd.MarkFlagRequired("owner")
	if gen {
		cmd.Flags().Uint64Var(&h.generation, "generation", 0, "generation (fencing token) of the holder (required)")
		_ = cmd.MarkFlagRequired("generation")
	}
	if ttl {
		cmd.Flags().DurationVar(&h.ttl, "ttl", 30*time.Second, "lease time to live")
	}
}

func (a *app) leaseCmd() *cobra.Command {
	return group("lease", "See and operate leases",
		a.leaseListCmd(), a.leaseGetCmd(), a.leaseAcquireCmd(), a.leaseRenewCmd(), a.leaseReleaseCmd(), a.leaseKeepAliveCmd())
}

func (a *app) leaseListCmd() *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List leases sorted by name: owner, generation, state, age, last renewal, expiry",
		Example: "  coordctl lease list\n  coordctl lease list --prefix daily-",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			all := &coordv1.ListLeasesResponse{}
			tok := ""
			for {
				resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.ListLeasesResponse, error) {
					return coord(cc).ListLeases(ctx, &coordv1.ListLeasesRequest{Prefix: prefix, PageToken: tok, PageSize: 1000})
				})
				if err != nil {
					return fail("lease list", err)
				}
				all.Leases = append(all.Leases, resp.GetLeases()...)
				if tok = resp.GetNextPageToken(); tok == "" {
					break
				}
			}
			return a.print(all, func(w io.Writer) { leaseTable(w, all.GetLeases()) })
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only leases whose name starts with this")
	return cmd
}

func (a *app) leaseGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show who holds a lease, since when, which generation, when it was last renewed",
		Example: "  coordctl lease get daily-close",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.GetLeaseResponse, error) {
				return coord(cc).GetLease(ctx, &coordv1.GetLeaseRequest{Name: args[0]})
			})
			if err != nil {
				return fail("lease get "+args[0], err)
			}
			return a.print(resp, func(w io.Writer) { leaseTable(w, []*coordv1.Lease{resp.GetLease()}) })
		},
	}
}

func (a *app) leaseAcquireCmd() *cobra.Command {
	var h holderFlags
	var requestID string
	var wait bool
	cmd := &cobra.Command{
		Use:   "acquire NAME",
		Short: "Acquire a lease; exit status 3 (and the holder printed) when another owner holds it",
		Example: `  coordctl lease acquire daily-close --owner ops-alice --ttl 30s
  gen=$(coordctl -o json lease acquire maint --owner me | jq -r .lease.generation)
  coordctl lease acquire maint --owner ops-bob --wait --timeout 5m   # queue until the holder releases it`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			if requestID == "" {
				var b [12]byte
				_, _ = crand.Read(b[:])
				requestID = hex.EncodeToString(b[:])
			}
			req := &coordv1.AcquireRequest{Name: args[0], Owner: h.owner, TtlMs: h.ttl.Milliseconds(), RequestId: requestID, Wait: wait}
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.AcquireResponse, error) {
				return coord(cc).Acquire(ctx, req)
			})
			if err != nil {
				return fail("lease acquire "+args[0], err)
			}
			if err := a.print(resp, func(w io.Writer) {
				if !resp.GetAcquired() {
					fmt.Fprintf(w, "not acquired: held by %s\n", resp.GetLease().GetOwner())
				}
				leaseTable(w, []*coordv1.Lease{resp.GetLease()})
			}); err != nil {
				return err
			}
			if !resp.GetAcquired() {
				l := resp.GetLease()
				return &heldError{msg: fmt.Sprintf("lease %s is held by %s (generation %d, %s left)",
					l.GetName(), l.GetOwner(), l.GetGeneration(), human(l.GetExpiresInMs()))}
			}
			return nil
		},
	}
	h.add(cmd, false, true)
	cmd.Flags().StringVar(&requestID, "request-id", "", "request id; a retry with the same id returns the same grant (default random)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait (up to --timeout) while another owner holds it; waiters are served in arrival order")
	return cmd
}

func (a *app) leaseRenewCmd() *cobra.Command {
	var h holderFlags
	cmd := &cobra.Command{
		Use:     "renew NAME",
		Short:   "Renew a lease as its current holder",
		Example: "  coordctl lease renew daily-close --owner ops-alice --generation 7 --ttl 30s",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.RenewResponse, error) {
				return coord(cc).Renew(ctx, &coordv1.RenewRequest{Name: args[0], Owner: h.owner, Generation: h.generation, TtlMs: h.ttl.Milliseconds()})
			})
			if err != nil {
				return fail("lease renew "+args[0], err)
			}
			return a.print(resp, func(w io.Writer) { leaseTable(w, []*coordv1.Lease{resp.GetLease()}) })
		},
	}
	h.add(cmd, true, true)
	return cmd
}

func (a *app) leaseReleaseCmd() *cobra.Command {
	var h holderFlags
	cmd := &cobra.Command{
		Use:     "release NAME",
		Short:   "Release a lease (its generation is kept; releasing twice is harmless)",
		Example: "  coordctl lease release daily-close --owner ops-alice --generation 7",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := call(ctx, a.conn, func(cc *grpc.ClientConn) (*coordv1.ReleaseResponse, error) {
				return coord(cc).Release(ctx, &coordv1.ReleaseRequest{Name: args[0], Owner: h.owner, Generation: h.generation})
			})
			if err != nil {
				return fail("lease release "+args[0], err)
			}
			return a.print(resp, func(w io.Writer) {
				if !resp.GetReleased() {
					fmt.Fprintln(w, "already released")
				}
				leaseTable(w, []*coordv1.Lease{resp.GetLease()})
			})
		},
	}
	h.add(cmd, true, false)
	return cmd
}

func (a *app) leaseKeepAliveCmd() *cobra.Command {
	var h holderFlags
	cmd := &cobra.Command{
		Use:   "keepalive NAME",
		Short: "Keep a held lease alive (renewing at TTL/3) until interrupted or lost",
		Long: `Renews the lease over a KeepAlive stream on the leader every TTL/3 until
SIGINT/SIGTERM (exit 0; the lease is not released) or until the lease is lost
(exit 1). With -o json each acknowledgement is printed as one JSON line.`,
		Example: "  coordctl lease keepalive maint --owner ops-alice --generation 3 --ttl 15s",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.keepAlive(ctx, args[0], h)
		},
	}
	h.add(cmd, true, true)
	return cmd
}

func (a *app) keepAlive(ctx context.Context, name string, h holderFlags) error {
	lctx, cancel := context.WithTimeout(ctx, a.timeout)
	cc, err := a.conn.leaderConn(lctx)
	cancel()
	if err != nil {
		return fail("lease keepalive "+name, err)
	}
	stream, err := coord(cc).KeepAlive(ctx)
	if err != nil {
		return fail("lease keepalive "+name, err)
	}
	req := &coordv1.KeepAliveRequest{Name: name, Owner: h.owner, Generation: h.generation, TtlMs: h.ttl.Milliseconds()}
	tick := time.NewTicker(h.ttl / 3)
	defer tick.Stop()
	for seq := uint64(1); ; seq++ {
		req.Seq = seq
		if err := stream.Send(req); err != nil {
			return fail("lease keepalive "+name, err)
		}
		resp, err := stream.Recv()
		if ctx.Err() != nil {
			fmt.Fprintf(a.errOut, "stopped renewing %s (generation %d); it expires after its TTL\n", name, h.generation)
			return nil
		}
		if err != nil {
			return fail("lease keepalive "+name, err)
		}
		if !resp.GetOk() {
			return fmt.Errorf("lease keepalive %s: %s: %s", name, resp.GetReason(), resp.GetMessage())
		}
		if a.output == "json" {
			b, _ := jsonOpts.Marshal(resp)
			fmt.Fprintf(a.out, "%s\n", compact(b))
		} else {
			fmt.Fprintf(a.out, "renewed %s generation %d: expires in %s\n", name, resp.GetGeneration(), human(resp.GetExpiresInMs()))
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(a.errOut, "stopped renewing %s (generation %d); it expires after its TTL\n", name, h.generation)
			return nil
		case <-tick.C:
		}
	}
}

// compact removes the newlines of multiline JSON.
func compact(b []byte) []byte {
	out := make([]byte, 0, len(b))
	space := false
	for _, c := range b {
		if c == '\n' {
			space = true
			continue
		}
		if space && c == ' ' {
			continue
		}
		space = false
		out = append(out, c)
	}
	return out
}
