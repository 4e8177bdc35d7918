package main

import "github.com/spf13/cobra"

func (a *app) jobCmd() *cobra.Command {
	return group("job", "Queued jobs (submit, get, list, cancel, retry) and what did not happen (overdue)",
		a.jobSubmitCmd(), a.jobGetCmd(), a.jobListCmd(), a.jobCancelCmd(), a.jobRetryCmd(), a.jobWatchCmd(), a.jobOverdueCmd())
}
