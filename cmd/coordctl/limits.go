package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// queueLimitCmd is "queue limit QUEUE ...": a queue's concurrency and rate
// limits and its default max_run (docs/jobs.md "Limits").
func (a *app) queueLimitCmd() *cobra.Command {
	var (
		concurrency uint32
		kinds       []string
		rate        string
		burst       uint32
		maxRun      time.Duration
		clear       bool
	)
	var lim *coordv1.QueueLimits
	cmd := a.newCmd("limit QUEUE [--concurrency N] [--kind-concurrency KIND=N]... [--rate R/s] [--max-run D] | --clear",
		"Set a queue's limits: attempts running at once (per queue, per kind), attempts started per second, max_run",
		`  coordctl queue limit billing --concurrency 10 --kind-concurrency charge=2 --rate 5/s
  coordctl queue limit billing --max-run 10m
  coordctl queue limit billing --clear`,
		func(cmd *cobra.Command, pos []string) error {
			if err := cobra.ExactArgs(1)(cmd, pos); err != nil {
				return err
			}
			set := concurrency != 0 || len(kinds) > 0 || rate != "" || burst != 0 || maxRun != 0
			if clear == set {
				return fmt.Errorf("give limits (--concurrency, --kind-concurrency, --rate, --burst, --max-run) or --clear")
			}
			if clear {
				return nil
			}
			lim = &coordv1.QueueLimits{Concurrency: concurrency, Burst: burst}
			for _, k := range kinds {
				name, n, ok := strings.Cut(k, "=")
				v, err := strconv.ParseUint(n, 10, 32)
				if !ok || name == "" || err != nil || v == 0 {
					return fmt.Errorf("--kind-concurrency %q: want KIND=N with N ≥ 1", k)
				}
				if lim.KindConcurrency == nil {
					lim.KindConcurrency = map[string]uint32{}
				}
				lim.KindConcurrency[name] = uint32(v)
			}
			if rate != "" {
				r, err := strconv.ParseFloat(strings.TrimSuffix(rate, "/s"), 64)
				if err != nil || r <= 0 {
					return fmt.Errorf("--rate %q: want attempts per second, like 5/s or 0.5/s", rate)
				}
				lim.Rate = r
			}
			if maxRun < 0 {
				return fmt.Errorf("--max-run %s: negative", maxRun)
			}
			if maxRun > 0 {
				lim.MaxRun = durationpb.New(maxRun)
			}
			return nil
		},
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.Queue().SetLimits(ctx, &coordv1.QueueSetLimitsRequest{Queue: pos[0], Limits: lim})
			return a.reply("queue limit "+pos[0], resp, err, func(w io.Writer) {
				if resp.GetLimits() == nil {
					fmt.Fprintf(w, "queue %s: no limits\n", pos[0])
					return
				}
				queueLimitsTable(w, []*coordv1.QueueLimits{resp.GetLimits()})
			})
		})
	fl := cmd.Flags()
	fl.Uint32Var(&concurrency, "concurrency", 0, "at most N of the queue's attempts running at once, cluster-wide")
	fl.StringArrayVar(&kinds, "kind-concurrency", nil, "KIND=N: at most N attempts of that kind running at once, repeatable")
	fl.StringVar(&rate, "rate", "", "R/s: at most R attempts started per second (calendar time; fractions like 0.5/s too)")
	fl.Uint32Var(&burst, "burst", 0, "with --rate: attempts that may start at once after an idle spell (default one second's worth)")
	fl.DurationVar(&maxRun, "max-run", 0, "the max_run of the queue's jobs that set none: an attempt ends at its start + this, heartbeats or not")
	fl.BoolVar(&clear, "clear", false, "remove the queue's limits")
	return cmd
}

func (a *app) queueLimitsCmd() *cobra.Command {
	return a.newCmd("limits [QUEUE]", "The queues' limits", `  coordctl queue limits`, cobra.MaximumNArgs(1),
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.Queue().Limits(ctx, &coordv1.QueueLimitsRequest{Queue: firstArg(pos)})
			return a.reply("queue limits", resp, err, func(w io.Writer) { queueLimitsTable(w, resp.GetLimits()) })
		})
}

func queueLimitsTable(out io.Writer, ls []*coordv1.QueueLimits) {
	if len(ls) == 0 {
		fmt.Fprintln(out, "no limits")
		return
	}
	tab(out, func(w io.Writer) {
		row(w, "QUEUE", "CONCURRENCY", "PER KIND", "RATE", "BURST", "MAX RUN", "UPDATED BY", "UPDATED")
		for _, l := range ls {
			conc, rate, burst, mr := "-", "-", "-", "-"
			if l.GetConcurrency() > 0 {
				conc = strconv.Itoa(int(l.GetConcurrency()))
			}
			var kinds []string
			for _, k := range slices.Sorted(maps.Keys(l.GetKindConcurrency())) {
				kinds = append(kinds, fmt.Sprintf("%s=%d", k, l.GetKindConcurrency()[k]))
			}
			if l.GetRate() > 0 {
				rate, burst = strconv.FormatFloat(l.GetRate(), 'f', -1, 64)+"/s", strconv.Itoa(int(l.GetBurst()))
			}
			if l.GetMaxRun() != nil {
				mr = l.GetMaxRun().AsDuration().String()
			}
			row(w, l.GetQueue(), conc, orDash(strings.Join(kinds, ",")), rate, burst, mr, orDash(l.GetUpdatedBy()), utc(l.GetUpdatedAt().AsTime().UnixMilli()))
		}
	})
}

// runningText is a queue's running count, with its concurrency limit
// ("3/10") when it has one.
func runningText(s *coordv1.QueueStats) string {
	if s.GetConcurrencyLimit() > 0 {
		return fmt.Sprintf("%d/%d", s.GetRunning(), s.GetConcurrencyLimit())
	}
	return strconv.FormatUint(s.GetRunning(), 10)
}
