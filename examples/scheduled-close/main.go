// Command scheduled-close is the daily close on the job runner: a job at
// 00:05 America/Sao_Paulo closes the previous business day for every store.
// Three replica processes run it on a shared accelerated clock (a day takes
// a few seconds); the demo kills one mid-run (and restarts it, as a deploy
// would), freezes the one running the next day past its TTL, and runs the
// third with its clock two minutes behind. Then it prints the ledger: every
// window completed once, every store's commission written once per day.
// Its job, lease and resources are its own (job scheduled-close, resources
// scheduled/store-N), apart from the daily-close example's. Its windows run
// once: on a cluster that already ran them it refuses to start; pass another
// --start:
//
//	scripts/local-cluster.sh up /tmp/coordd3
//	go run ./examples/scheduled-close --endpoints 127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430
//	scripts/local-cluster.sh down /tmp/coordd3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/jobs"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/examples/internal/demo"
	"github.com/coordd/coordd/schedule"
)

const (
	job    = "scheduled-close"
	zone   = "America/Sao_Paulo"
	stores = 4
	days   = 3
)

type config struct {
	endpoints []string
	base      time.Time // virtual time at epoch
	epoch     time.Time
	speed     float64
	skew      time.Duration
	name      string
}

func main() {
	var (
		endpoints = flag.String("endpoints", demo.Env("COORD_ENDPOINTS", "127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430"), "coordd gRPC endpoints")
		role      = flag.String("role", "demo", "demo, or replica")
		name      = flag.String("name", "A", "replica name")
		start     = flag.String("start", "2026-09-24T23:58:00", "virtual start, in "+zone)
		epoch     = flag.Int64("epoch", 0, "wall-clock unix ms at which virtual time is --start (replicas)")
		speed     = flag.Float64("speed", 14400, "virtual seconds per real second (a day = 6 s)")
		skew      = flag.Duration("skew", 0, "this replica's clock error (e.g. -2m)")
	)
	flag.Parse()
	loc, _ := time.LoadLocation(zone)
	base, err := time.ParseInLocation("2006-01-02T15:04:05", *start, loc)
	if err != nil {
		fatal(err)
	}
	cfg := config{endpoints: strings.Split(*endpoints, ","), base: base, speed: *speed, skew: *skew, name: *name}
	if *epoch == 0 {
		cfg.epoch = time.Now().Add(200 * time.Millisecond)
	} else {
		cfg.epoch = time.UnixMilli(*epoch)
	}
	demo.Role("scheduled-close", *role, func() error { return run(cfg) }, func() error { return replica(cfg) })
}

func fatal(err error) { demo.Fatal("scheduled-close", err) }

func say(name, format string, args ...any) {
	fmt.Printf("%-3s %s\n", name, fmt.Sprintf(format, args...))
}

func replica(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var clk clock.Clock = clock.Scaled{Base: cfg.base, Epoch: cfg.epoch, Speed: cfg.speed}
	if cfg.skew != 0 {
		clk = clock.Offset{Base: clk, Skew: cfg.skew}
	}
	c, err := client.New(ctx, cfg.endpoints, client.WithOwner(cfg.name))
	if err != nil {
		return err
	}
	defer c.Close()
	// Virtual time is not the cluster's: without the gate a --start in the
	// future does not wait for coordd's clock to get there.
	r := jobs.NewRunner(c, jobs.WithClock(clk), jobs.WithPollInterval(20*time.Minute), jobs.WithShutdownTimeout(time.Hour),
		jobs.WithoutClusterClockGate())
	err = r.Add(jobs.Job{
		Name: job, Schedule: jobs.Cron("5 0 * * *", zone), Window: schedule.Window{ShiftDays: -1},
		TTL: 1500 * time.Millisecond, RetryBackoff: 30 * time.Minute, CompleteWithin: 2 * time.Hour,
		CatchUp: 6 * time.Hour, // a replica that starts within 6 h of an occurrence still owes it
		Run: func(ctx context.Context, run *jobs.Run) error {
			say(cfg.name, "occurrence %s -> window %s: attempt %d, token %d (started %s late by its clock)",
				run.Occurrence.Format("Jan 02 15:04"), run.Window, run.Attempt, run.Generation,
				clk.Now().Sub(run.Occurrence).Round(time.Minute))
			for i := 1; i <= stores; i++ {
				time.Sleep(250 * time.Millisecond) // the work for one store (real time)
				// Not ctx: a frozen process wakes up mid-write. The fence decides.
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				commit, err := run.Fence(cctx, resource(i), []byte(cfg.name))
				cancel()
				var ce *client.Error
				switch {
				case errors.As(err, &ce):
					say(cfg.name, "  %s store-%d REFUSED (%s)", run.Window, i, ce.Reason)
					return err
				case err != nil:
					return err
				case commit.Duplicate:
					say(cfg.name, "  %s store-%d duplicate of token %d: not written again", run.Window, i, commit.Generation)
				default:
					say(cfg.name, "  %s store-%d ACCEPTED", run.Window, i)
				}
			}
			say(cfg.name, "  %s: all stores done", run.Window)
			return nil
		},
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// run is the demo: three replicas on one virtual clock, one killed and
// restarted, one frozen past its TTL, one with its clock behind.
func run(cfg config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.New(ctx, cfg.endpoints, client.WithOwner("demo"))
	if err != nil {
		return err
	}
	defer c.Close()
	// Every window of the demo must be fresh: a completed one would be
	// skipped, and with it the kill and the pause this demo is about.
	for d := 0; d < days; d++ {
		day := cfg.base.AddDate(0, 0, d).Format("2006-01-02")
		w, err := c.GetWindow(ctx, job, day)
		switch {
		case err == nil:
			next := cfg.base.AddDate(0, 0, days).Format("2006-01-02T15:04:05")
			return fmt.Errorf("window %s/%s already exists (state %s, by %s): this demo runs its windows once; "+
				"use a fresh cluster or another start, e.g. --start %s", job, day, w.GetState(), w.GetOwner(), next)
		case !errors.Is(err, client.ErrNotFound):
			return err
		}
	}
	// The stores' ledgers before this run (another --start wrote to them too).
	before, err := demo.Commits(ctx, c, stores, resource)
	if err != nil {
		return err
	}
	lines := make(chan string, 512)
	procs := map[string]*demo.Proc{}
	start := func(name string, skew time.Duration) error {
		p, err := demo.Spawn(name, lines, "--role", "replica", "--name", name, "--endpoints", strings.Join(cfg.endpoints, ","),
			"--start", cfg.base.Format("2006-01-02T15:04:05"), "--epoch", fmt.Sprint(cfg.epoch.UnixMilli()),
			"--speed", fmt.Sprint(cfg.speed), "--skew", skew.String())
		if err != nil {
			return err
		}
		procs[name] = p
		return nil
	}
	defer func() {
		for _, p := range procs { // stop every process we started, by PID
			p.Kill()
		}
	}()
	fmt.Printf("virtual time starts %s (%s), x%.0f: a day takes %s\n", cfg.base.Format("2006-01-02 15:04"), zone, cfg.speed,
		time.Duration(float64(24*time.Hour)/cfg.speed).Round(100*time.Millisecond))
	for _, r := range []struct {
		name string
		skew time.Duration
	}{{"A", 0}, {"B", 0}, {"C", -2 * time.Minute}} {
		if err := start(r.name, r.skew); err != nil {
			return err
		}
	}
	fmt.Println("C's clock is 2 minutes behind")
	first := cfg.base.Format("2006-01-02")
	second := cfg.base.AddDate(0, 0, 1).Format("2006-01-02")
	last := cfg.base.AddDate(0, 0, days-1).Format("2006-01-02")
	killed, paused := false, false
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if w, err := c.GetWindow(ctx, job, last); err == nil && w.GetCompletedAt() > 0 {
				time.Sleep(300 * time.Millisecond)
				for len(lines) > 0 {
					fmt.Println(<-lines)
				}
				if !killed || !paused {
					return fmt.Errorf("the demo's faults did not happen (kill -9 mid-run: %t, SIGSTOP past the TTL: %t)", killed, paused)
				}
				return ledger(ctx, c, cfg, before)
			}
		case l := <-lines:
			fmt.Println(l)
			who := strings.Fields(l)[0]
			if !killed && strings.Contains(l, first+" store-2 ACCEPTED") {
				killed = true
				fmt.Printf("--- kill -9 %s mid-run (pid %d); restarting it like a deploy would\n", who, procs[who].Cmd.Process.Pid)
				procs[who].Kill()
				if err := start(who, 0); err != nil {
					return err
				}
			}
			if !paused && strings.Contains(l, second+" store-2 ACCEPTED") {
				paused = true
				p := procs[who]
				fmt.Printf("--- SIGSTOP %s (pid %d) past its TTL\n", who, p.Cmd.Process.Pid)
				_ = p.Cmd.Process.Signal(syscall.SIGSTOP)
				go func() {
					time.Sleep(3 * time.Second)
					fmt.Printf("--- SIGCONT %s\n", who)
					_ = p.Cmd.Process.Signal(syscall.SIGCONT)
				}()
			}
		case <-ctx.Done():
			return errors.New("demo timed out")
		}
	}
}

func resource(store int) string { return fmt.Sprintf("scheduled/store-%d", store) }

// ledger checks this run: every window completed, every store got one
// accepted commission per day.
func ledger(ctx context.Context, c *client.Client, cfg config, before []uint64) error {
	fmt.Printf("\nledger of %s:\n", job)
	bad := 0
	for d := 0; d < days; d++ {
		day := cfg.base.AddDate(0, 0, d).Format("2006-01-02")
		w, err := c.GetWindow(ctx, job, day)
		if err != nil {
			return fmt.Errorf("window %s: %w", day, err)
		}
		fmt.Printf("  %s: %s by %s, token %d, %d attempt(s)\n", day, strings.TrimPrefix(w.GetState().String(), "WINDOW_STATE_"),
			w.GetOwner(), w.GetGeneration(), w.GetAttempts())
		if w.GetCompletedAt() == 0 {
			bad++
		}
	}
	for i := 1; i <= stores; i++ {
		r, err := c.GetResource(ctx, resource(i))
		if err != nil {
			return err
		}
		n := r.GetCommits() - before[i]
		verdict := "one commission per day"
		if n != days {
			verdict = fmt.Sprintf("WRONG: %d commissions in %d days", n, days)
			bad++
		}
		fmt.Printf("  store-%d: %s (%d accepted)\n", i, verdict, n)
	}
	if bad > 0 {
		return errors.New("ledger is wrong")
	}
	fmt.Println("\nevery window completed once; every store closed exactly once per day.")
	return nil
}
