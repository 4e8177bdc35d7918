package main

import (
	"io"

	"github.com/spf13/cobra"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func (a *app) windowCmd() *cobra.Command {
	return group("window", "See and operate the window ledger",
		a.windowListCmd(), a.windowGetCmd(), a.windowClaimCmd(), a.windowCompleteCmd())
}

func (a *app) windowListCmd() *cobra.Command {
	var job string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List a job's windows: state, attempts, who ran them",
		Example: "  coordctl window list --job daily-close",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			windows, err := allPages(func(tok string) (*coordv1.ListWindowsResponse, error) {
				return a.client.ListWindows(ctx, job, tok, 1000)
			}, (*coordv1.ListWindowsResponse).GetWindows)
			if err != nil {
				return fail("window list", err)
			}
			all := &coordv1.ListWindowsResponse{Windows: windows}
			now := a.calendarTime(ctx)
			return a.print(all, func(w io.Writer) { windowTable(w, all.GetWindows(), now) })
		},
	}
	cmd.Flags().StringVar(&job, "job", "", "the job (required)")
	_ = cmd.MarkFlagRequired("job")
	return cmd
}

func (a *app) windowGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get JOB WINDOW",
		Short:   "Show one window: did it complete, how many attempts, who ran it",
		Example: "  coordctl window get daily-close 2026-09-25",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			w, err := a.client.GetWindow(ctx, args[0], args[1])
			if err != nil {
				return fail("window get "+args[0]+" "+args[1], err)
			}
			resp := &coordv1.GetWindowResponse{Window: w}
			now := a.calendarTime(ctx)
			return a.print(resp, func(w io.Writer) { windowTable(w, []*coordv1.Window{resp.GetWindow()}, now) })
		},
	}
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
	cmd := &cobra.Command{
		Use:     "claim JOB WINDOW",
		Short:   "Claim a window for the current lease holder (a completed one is shown, not claimed)",
		Example: "  coordctl window claim daily-close 2026-09-25 --lease daily-close --owner ops-alice --generation 7",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.coord().ClaimWindow(ctx, &coordv1.ClaimWindowRequest{Job: args[0], Window: args[1],
				LeaseName: f.lease, Owner: f.owner, Generation: f.generation})
			if err != nil {
				return fail("window claim "+args[0]+" "+args[1], err)
			}
			now := a.calendarTime(ctx)
			return a.print(resp, func(w io.Writer) {
				if !resp.GetClaimed() {
					io.WriteString(w, "not claimed: the window is already completed\n")
				}
				windowTable(w, []*coordv1.Window{resp.GetWindow()}, now)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func (a *app) windowCompleteCmd() *cobra.Command {
	var f fenceFlags
	var result string
	cmd := &cobra.Command{
		Use:     "complete JOB WINDOW",
		Short:   "Complete a window claimed by this holder (at most once)",
		Example: `  coordctl window complete daily-close 2026-09-25 --lease daily-close --owner ops-alice --generation 7 --result "closed by hand"`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			resp, err := a.coord().CompleteWindow(ctx, &coordv1.CompleteWindowRequest{Job: args[0], Window: args[1],
				LeaseName: f.lease, Owner: f.owner, Generation: f.generation, Result: []byte(result)})
			if err != nil {
				return fail("window complete "+args[0]+" "+args[1], err)
			}
			now := a.calendarTime(ctx)
			return a.print(resp, func(w io.Writer) { windowTable(w, []*coordv1.Window{resp.GetWindow()}, now) })
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&result, "result", "", "result to record with the completion")
	return cmd
}
