package main

import (
	"context"
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
	"google.golang.org/protobuf/types/known/durationpb"

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

func (a *app) leaseListCmd() *cobra.Command {
	var prefix string
	cmd := a.newCmd("list", "List leases sorted by name: owner, generation, state, age, last renewal, expiry",
		"  coordctl lease list\n  coordctl lease list --prefix daily-", cobra.NoArgs,
		func(ctx context.Context, _ []string) error {
			leases, err := allPages(func(tok string) (*coordv1.ListLeasesResponse, error) {
				return a.client.ListLeases(ctx, prefix, tok, 1000)
			}, (*coordv1.ListLeasesResponse).GetLeases)
			return a.reply("lease list", &coordv1.ListLeasesResponse{Leases: leases}, err, func(w io.Writer) { leaseTable(w, leases) })
		})
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
	return a.newCmd("get NAME", "Show who holds a lease, since when, which generation, when it was last renewed",
		"  coordctl lease get daily-close", cobra.ExactArgs(1), func(ctx context.Context, args []string) error {
			l, err := a.client.GetLease(ctx, args[0])
			return a.reply("lease get "+args[0], &coordv1.GetLeaseResponse{Lease: l}, err, leaseRows(l))
		})
}

// leaseRows is the table of one lease.
func leaseRows(l *coordv1.Lease) func(w io.Writer) {
	return func(w io.Writer) { leaseTable(w, []*coordv1.Lease{l}) }
}

func (a *app) leaseAcquireCmd() *cobra.Command {
	var h holderFlags
	var requestID string
	var wait bool
	cmd := a.newCmd("acquire NAME", "Acquire a lease; exit status 3 (and the holder printed) when another owner holds it",
		`  coordctl lease acquire daily-close --owner ops-alice --ttl 30s
  gen=$(coordctl -o json lease acquire maint --owner me | jq -r .lease.generation)
  coordctl lease acquire maint --owner ops-bob --wait --timeout 5m   # queue until the holder releases it`,
		cobra.ExactArgs(1), func(ctx context.Context, args []string) error {
			if requestID == "" {
				requestID = client.NewRequestID()
			}
			req := &coordv1.AcquireRequest{Name: args[0], Owner: h.owner, Ttl: durationpb.New(h.ttl), RequestId: requestID, Wait: wait}
			resp, err := a.coord().Acquire(ctx, req)
			if err != nil {
				return a.acquireFailed(ctx, "lease acquire "+args[0], requestID, wait, err)
			}
			l, held := resp.GetLease(), !resp.GetAcquired()
			if err := a.print(resp, noteIf(held, "not acquired: held by "+l.GetOwner(), leaseRows(l))); err != nil || !held {
				return err
			}
			return &codeError{code: exitHeld, msg: fmt.Sprintf("lease %s is held by %s (generation %d, %s left)",
				l.GetName(), l.GetOwner(), l.GetGeneration(), human(l.GetExpiresInMs()))}
		})
	h.add(cmd, false, true)
	cmd.Flags().StringVar(&requestID, "request-id", "", "request id; a retry with the same id returns the same grant (default random)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait (up to --timeout) while another owner holds it; waiters are served in arrival order")
	return cmd
}

// holderCmd is a command of a lease's holder on lease NAME: --owner and
// --generation, and --ttl when ttl.
func (a *app) holderCmd(use, short, example string, ttl bool, run func(ctx context.Context, name string, h holderFlags) error) *cobra.Command {
	var h holderFlags
	cmd := a.newCmd(use, short, example, cobra.ExactArgs(1), func(ctx context.Context, args []string) error {
		return run(ctx, args[0], h)
	})
	h.add(cmd, true, ttl)
	return cmd
}

func (a *app) leaseRenewCmd() *cobra.Command {
	return a.holderCmd("renew NAME", "Renew a lease as its current holder",
		"  coordctl lease renew daily-close --owner ops-alice --generation 7 --ttl 30s", true,
		func(ctx context.Context, name string, h holderFlags) error {
			resp, err := a.coord().Renew(ctx, &coordv1.RenewRequest{Name: name, Owner: h.owner, Generation: h.generation, Ttl: durationpb.New(h.ttl)})
			return a.reply("lease renew "+name, resp, err, leaseRows(resp.GetLease()))
		})
}

func (a *app) leaseReleaseCmd() *cobra.Command {
	return a.holderCmd("release NAME", "Release a lease (its generation is kept; releasing twice is harmless)",
		"  coordctl lease release daily-close --owner ops-alice --generation 7", false,
		func(ctx context.Context, name string, h holderFlags) error {
			resp, err := a.coord().Release(ctx, &coordv1.ReleaseRequest{Name: name, Owner: h.owner, Generation: h.generation})
			return a.reply("lease release "+name, resp, err, noteIf(!resp.GetReleased(), "already released", leaseRows(resp.GetLease())))
		})
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
		return &opError{op: op, err: err, msg: a.uncertain(err, fmt.Sprintf("retry with --request-id %s "+
			"to learn it without a second grant", requestID))}
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
			_ = a.writeJSON(r, false)
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
