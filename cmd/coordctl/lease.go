package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/coorderr"
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
		a.leaseListCmd(), a.leaseGetCmd(), a.leaseAcquireCmd(), a.leaseRenewCmd(), a.leaseReleaseCmd(), a.leaseKeepAliveCmd(), a.leaseWatchCmd())
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
			leases, err := allPages(func(tok string) (*coordv1.ListLeasesResponse, error) {
				return a.client.ListLeases(ctx, prefix, tok, 1000)
			}, (*coordv1.ListLeasesResponse).GetLeases)
			if err != nil {
				return fail("lease list", err)
			}
			all := &coordv1.ListLeasesResponse{Leases: leases}
			return a.print(all, func(w io.Writer) { leaseTable(w, all.GetLeases()) })
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only leases whose name starts with this")
	return cmd
}

// allPages gathers the items of every page of a list call: list is called
// with each page's token until a page has no next one.
func allPages[R interface{ GetNextPageToken() string }, T any](list func(tok string) (R, error), items func(R) []T) ([]T, error) {
	var all []T
	tok := ""
	for {
		resp, err := list(tok)
		if err != nil {
			return nil, err
		}
		all = append(all, items(resp)...)
		if tok = resp.GetNextPageToken(); tok == "" {
			return all, nil
		}
	}
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
			l, err := a.client.GetLease(ctx, args[0])
			if err != nil {
				return fail("lease get "+args[0], err)
			}
			resp := &coordv1.GetLeaseResponse{Lease: l}
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
			resp, err := a.coord().Acquire(ctx, req)
			if err != nil {
				return a.acquireFailed(ctx, "lease acquire "+args[0], requestID, wait, err)
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
			resp, err := a.coord().Renew(ctx, &coordv1.RenewRequest{Name: args[0], Owner: h.owner, Generation: h.generation,
				TtlMs: h.ttl.Milliseconds()})
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
			resp, err := a.coord().Release(ctx, &coordv1.ReleaseRequest{Name: args[0], Owner: h.owner, Generation: h.generation})
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
		Long: `Renews the lease at once and then every TTL/3 over a KeepAlive stream on the
leader (the SDK's keepalive: it follows leader changes) until SIGINT/SIGTERM
(exit 0; the lease is not released) or until the lease is lost (exit 1). With
-o json each acknowledgement is printed as one JSON line.`,
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

// acquireFailed renders a failed acquire. When the outcome is unknown (a
// --wait that ran out of time, a lost reply) the lease may have been
// granted: a retry with the same request id returns that grant.
func (a *app) acquireFailed(ctx context.Context, op, requestID string, wait bool, err error) error {
	switch {
	case wait && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &opError{op: op, err: err, msg: fmt.Sprintf("not granted within --timeout %s; a grant made as the wait "+
			"ended is kept for this request: retry with --request-id %s to get it or wait again", a.timeout, requestID)}
	case errors.Is(err, client.ErrUnknownOutcome):
		return &opError{op: op, err: err, msg: fmt.Sprintf("%s; the outcome is unknown: retry with --request-id %s "+
			"to learn it without a second grant", a.watch.explain(err, a.timeout), requestID)}
	}
	return fail(op, err)
}

func (a *app) keepAlive(ctx context.Context, name string, h holderFlags) error {
	op := "lease keepalive " + name
	var (
		mu      sync.Mutex
		stopped bool
	)
	printRenewal := func(r *coordv1.KeepAliveResponse) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if a.output == "json" {
			b, _ := protoJSON(r, false)
			fmt.Fprintf(a.out, "%s\n", b)
			return
		}
		fmt.Fprintf(a.out, "renewed %s generation %d: expires in %s\n", name, r.GetGeneration(), human(r.GetExpiresInMs()))
	}
	stop := func() error {
		mu.Lock()
		stopped = true
		mu.Unlock()
		fmt.Fprintf(a.errOut, "stopped renewing %s (generation %d); it expires after its TTL\n", name, h.generation)
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, a.timeout)
	l, err := a.client.Resume(rctx, name, h.owner, h.generation, h.ttl, client.OnRenewal(printRenewal))
	cancel()
	switch {
	case ctx.Err() != nil:
		return stop()
	case err != nil:
		return fail(op, err)
	}
	select {
	case <-ctx.Done():
		return stop()
	case <-l.Done():
		return fail(op, a.withHolder(name, l.Err()))
	}
}

// withHolder adds the current holder to a lease loss that the KeepAlive
// stream reported without it, so that it reads like a refused Renew or
// Release: "(current_generation=…, current_owner=…)". A server that sends
// KeepAliveResponse.metadata (the SDK puts it in the *Error) needs no read
// here; an older one answered with a reason and a message only.
func (a *app) withHolder(name string, err error) error {
	var e *client.Error
	if !errors.As(err, &e) || len(e.Metadata) > 0 {
		return err
	}
	switch reasonOfErr(err) {
	case coorderr.LeaseLost, coorderr.LeaseExpired, coorderr.LeaseReleased:
	default:
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	cur, gerr := a.client.GetLease(ctx, name)
	if gerr != nil {
		return err
	}
	withMeta := *e
	withMeta.Metadata = map[string]string{"current_owner": cur.GetOwner(),
		"current_generation": strconv.FormatUint(cur.GetGeneration(), 10)}
	return &withMeta
}
