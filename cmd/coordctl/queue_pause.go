package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// "queue pause|resume QUEUE" (fsm/queue_pause.go): while a queue is
// paused no fetch hands out its jobs; submits are still accepted.

func (a *app) queuePauseCmd() *cobra.Command {
	cmd := a.newCmd("pause QUEUE", "Stop handing out the queue's jobs (submits are still accepted; running attempts go on)",
		`  coordctl queue pause billing
  coordctl queue stats billing   # PAUSED: by whom, since when`, cobra.ExactArgs(1),
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.Queue().Pause(ctx, &coordv1.QueuePauseRequest{Queue: pos[0]})
			return a.reply("queue pause "+pos[0], resp, err, func(w io.Writer) {
				p := resp.GetPause()
				if resp.GetAlready() {
					fmt.Fprintf(w, "unchanged: queue %s was already paused by %s at %s\n", p.GetQueue(), orDash(p.GetPausedBy()), utc(p.GetPausedAtMs()))
					return
				}
				fmt.Fprintf(w, "queue %s paused by %s at %s: fetches hand out none of its jobs until 'coordctl queue resume %s'\n",
					p.GetQueue(), orDash(p.GetPausedBy()), utc(p.GetPausedAtMs()), p.GetQueue())
			})
		})
	cmd.Long = `Pauses a queue, for every node and through leader changes (the pause is
replicated with who paused it and when): no fetch hands out its jobs —
pull workers' long polls keep waiting, deliveries of its HTTP-target jobs
stop — while submits, heartbeats, completions, failures and lapses go on.
Pausing a paused queue changes nothing (it keeps the first pause's who and
when).`
	return cmd
}

func (a *app) queueResumeCmd() *cobra.Command {
	return a.newCmd("resume QUEUE", "Hand out the queue's jobs again (fetches take them as they come: no burst)",
		`  coordctl queue resume billing`, cobra.ExactArgs(1),
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.Queue().Resume(ctx, &coordv1.QueueResumeRequest{Queue: pos[0]})
			return a.reply("queue resume "+pos[0], resp, err, func(w io.Writer) {
				if !resp.GetWasPaused() {
					fmt.Fprintf(w, "unchanged: queue %s was not paused\n", pos[0])
					return
				}
				fmt.Fprintf(w, "queue %s resumed\n", pos[0])
			})
		})
}

// pausedText is a queue's PAUSED cell: "-", or who paused it and when.
func pausedText(s *coordv1.QueueStats) string {
	if !s.GetPaused() {
		return "-"
	}
	return fmt.Sprintf("by %s since %s", orDash(s.GetPausedBy()), utc(s.GetPausedAtMs()))
}
