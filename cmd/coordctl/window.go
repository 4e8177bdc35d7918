package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// windowRows is the table of windows, their ages measured at the cluster's
// calendar time.
func (a *app) windowRows(ctx context.Context, ws ...*coordv1.Window) func(w io.Writer) {
	return func(w io.Writer) { windowTable(w, ws, a.calendarTime(ctx)) }
}

func (a *app) windowListCmd() *cobra.Command {
	var job string
	cmd := a.newCmd("list", "List a job's windows: state, attempts, who ran them", "  coordctl window list --job daily-close", cobra.NoArgs,
		func(ctx context.Context, _ []string) error {
			windows, err := allPages(func(tok string) (*coordv1.ListWindowsResponse, error) {
				return a.client.ListWindows(ctx, job, tok, 1000)
			}, (*coordv1.ListWindowsResponse).GetWindows)
			return a.reply("window list", &coordv1.ListWindowsResponse{Windows: windows}, err, a.windowRows(ctx, windows...))
		})
	cmd.Flags().StringVar(&job, "job", "", "the job (required)")
	_ = cmd.MarkFlagRequired("job")
	return cmd
}

func (a *app) windowGetCmd() *cobra.Command {
	return a.newCmd("get JOB WINDOW", "Show one window: did it complete, how many attempts, who ran it",
		"  coordctl window get daily-close 2026-09-25", cobra.ExactArgs(2), func(ctx context.Context, args []string) error {
			w, err := a.client.GetWindow(ctx, args[0], args[1])
			return a.reply("window get "+args[0]+" "+args[1], &coordv1.GetWindowResponse{Window: w}, err, a.windowRows(ctx, w))
		})
}

// fenceFlags are --lease, --owner and --generation for window commands.
type fenceFlags struct {
	lease, owner string
	generation   uint64
}

func (f *fenceFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.lease, "lease", "", "lease that fences the window (required)")
	cmd.Flags().StringVar(&f.owner, "owner", "", "owner id of the lease holder (required)")
	cmd.Flags().Uint64Var(&f.generation, "generation", 0, "generation of the lease holder (required)")
	for _, n := range []string{"lease", "owner", "generation"} {
		_ = cmd.MarkFlagRequired(n)
	}
}

func (a *app) windowClaimCmd() *cobra.Command {
	var f fenceFlags
	cmd := a.newCmd("claim JOB WINDOW", "Claim a window for the current lease holder (a completed one is shown, not claimed)",
		"  coordctl window claim daily-close 2026-09-25 --lease daily-close --owner ops-alice --generation 7", cobra.ExactArgs(2),
		func(ctx context.Context, args []string) error {
			resp, err := a.coord().ClaimWindow(ctx, &coordv1.ClaimWindowRequest{Job: args[0], Window: args[1],
				LeaseName: f.lease, Owner: f.owner, Generation: f.generation})
			return a.reply("window claim "+args[0]+" "+args[1], resp, err,
				noteIf(!resp.GetClaimed(), "not claimed: the window is already completed", a.windowRows(ctx, resp.GetWindow())))
		})
	f.add(cmd)
	return cmd
}

func (a *app) windowCompleteCmd() *cobra.Command {
	var f fenceFlags
	var result string
	cmd := a.newCmd("complete JOB WINDOW", "Complete a window claimed by this holder (at most once)",
		`  coordctl window complete daily-close 2026-09-25 --lease daily-close --owner ops-alice --generation 7 --result "closed by hand"`,
		cobra.ExactArgs(2), func(ctx context.Context, args []string) error {
			resp, err := a.coord().CompleteWindow(ctx, &coordv1.CompleteWindowRequest{Job: args[0], Window: args[1],
				LeaseName: f.lease, Owner: f.owner, Generation: f.generation, Result: []byte(result)})
			return a.reply("window complete "+args[0]+" "+args[1], resp, err, a.windowRows(ctx, resp.GetWindow()))
		})
	f.add(cmd)
	cmd.Flags().StringVar(&result, "result", "", "result to record with the completion")
	return cmd
}
