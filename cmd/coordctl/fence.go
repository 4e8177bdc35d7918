package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func (a *app) fenceCommitCmd() *cobra.Command {
	var (
		req     = &coordv1.FencedCommitRequest{}
		payload string
	)
	cmd := a.newCmd("commit RESOURCE", "Validate a fencing token for a write to RESOURCE (refused if stale)",
		`  coordctl fence commit payments/store-42 --lease daily-close --generation 7 --key close-2026-09-25-store-42 --payload 42.00`,
		cobra.ExactArgs(1), func(ctx context.Context, args []string) error {
			req.Resource, req.Payload = args[0], []byte(payload)
			resp, err := a.coord().FencedCommit(ctx, req)
			return a.reply("fence commit "+args[0], resp, err, func(w io.Writer) {
				kind := "accepted"
				if resp.GetDuplicate() {
					kind = "duplicate (first outcome returned)"
				}
				if resp.GetDryRun() {
					kind = "would be " + kind + " (dry run, nothing recorded)"
				}
				tab(w, func(w io.Writer) {
					row(w, "RESOURCE", "OUTCOME", "GENERATION", "MAX GENERATION", "PAYLOAD")
					row(w, args[0], kind, resp.GetGeneration(), resp.GetMaxGeneration(), short(string(resp.GetPayload()), 40))
				})
			})
		})
	f := cmd.Flags()
	f.StringVar(&req.LeaseName, "lease", "", "lease whose token this is (with --generation, or use --token)")
	f.Uint64Var(&req.Generation, "generation", 0, "the token: the lease generation")
	f.StringVar(&req.Token, "token", "", "the token as lease:generation, instead of --lease and --generation")
	f.BoolVar(&req.DryRun, "dry-run", false, "only check whether the commit would be accepted; record nothing")
	f.StringVar(&req.IdempotencyKey, "key", "", "idempotency key: a repeat returns the first outcome")
	f.StringVar(&payload, "payload", "", "payload stored with the first commit of the key")
	cmd.MarkFlagsRequiredTogether("lease", "generation")
	cmd.MarkFlagsMutuallyExclusive("token", "lease")
	cmd.MarkFlagsMutuallyExclusive("token", "generation")
	cmd.MarkFlagsOneRequired("token", "lease")
	return cmd
}

func (a *app) fenceGetCmd() *cobra.Command {
	return a.newCmd("get RESOURCE", "Show the highest token accepted for RESOURCE and its last commit",
		"  coordctl fence get payments/store-42", cobra.ExactArgs(1), func(ctx context.Context, args []string) error {
			r, err := a.client.GetResource(ctx, args[0])
			return a.reply("fence get "+args[0], &coordv1.GetResourceResponse{Resource: r}, err, func(w io.Writer) {
				resourceTable(w, r, a.calendarTime(ctx))
			})
		})
}
