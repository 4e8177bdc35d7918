// Command scheduled-close is the daily close as a recurring job: a job
// declared in code (client/periodic) becomes a coordd schedule, the cluster's
// leader makes one queue job per occurrence, and whichever replica is free
// runs it, closing every store of that period with writes fenced by the
// attempt's token.
//
// In production the schedule would be "5 0 * * *" in America/Sao_Paulo,
// closing the previous business day (window shift -1). To show days in
// seconds the demo runs one occurrence every 4 s (each one a "day"). Three
// replica processes run it; the demo kills one mid-run (and restarts it,
// as a deploy would) and freezes the one running the next occurrence past
// its visibility timeout. Then it prints the ledger: every occurrence's
// job succeeded once, every store written once per occurrence (the frozen
// replica's late writes are refused or answered as duplicates: no second
// effect). Each run has a schedule of its own
// (scheduled-close-<time>), deleted at the end:
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/periodic"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/examples/internal/demo"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

const (
	stores = 4
	days   = 3
	every  = 4 * time.Second
	// visibility is the job attempts' visibility timeout: a frozen or dead
	// replica's attempt lapses this long after its last heartbeat.
	visibility = 1500 * time.Millisecond
)

func main() {
	var (
		endpoints = flag.String("endpoints", demo.Env("COORD_ENDPOINTS", "127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430"), "coordd gRPC endpoints")
		role      = flag.String("role", "demo", "demo, or replica")
		name      = flag.String("name", "A", "replica name")
		sched     = flag.String("schedule", "", "schedule (and job) name (replicas; the demo picks one)")
	)
	flag.Parse()
	eps := strings.Split(*endpoints, ",")
	demo.Role("scheduled-close", *role, func() error { return runDemo(eps) }, func() error { return replica(eps, *name, *sched) })
}

func say(name, format string, args ...any) {
	fmt.Printf("%-3s %s\n", name, fmt.Sprintf(format, args...))
}

func resource(store int) string { return fmt.Sprintf("scheduled/store-%d", store) }

// closeJob is the job every replica declares: the same spec, so the
// schedule is put once and the others change nothing.
func closeJob(sched, replica string) periodic.Job {
	return periodic.Job{
		Name: sched, Schedule: periodic.Every(every), Queue: "scheduled-close", Concurrency: periodic.Allow,
		VisibilityTimeout: visibility, RetryBackoff: 100 * time.Millisecond,
		Run: func(ctx context.Context, run *periodic.Run) error {
			say(replica, "occurrence %s: attempt %d, token %s", run.Window, run.Attempt, run.Token)
			for i := 1; i <= stores; i++ {
				time.Sleep(250 * time.Millisecond) // the work for one store
				// Not ctx: a frozen process wakes up mid-write. The fence decides.
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				commit, err := run.Fence(cctx, resource(i), []byte(replica))
				cancel()
				var ce *client.Error
				switch {
				case errors.As(err, &ce):
					say(replica, "  %s store-%d REFUSED (%s)", run.Window, i, ce.Reason)
					return err
				case err != nil:
					return err
				case commit.Duplicate:
					say(replica, "  %s store-%d duplicate of token %s: not written again", run.Window, i,
						queue.Token(run.QueueJob().ID, uint32(commit.Generation)))
				default:
					say(replica, "  %s store-%d ACCEPTED", run.Window, i)
				}
			}
			say(replica, "  %s: all stores done", run.Window)
			return nil
		},
	}
}

func replica(eps []string, name, sched string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c, err := client.New(ctx, eps, client.WithOwner(name))
	if err != nil {
		return err
	}
	defer c.Close()
	r := periodic.NewRunner(c, periodic.WithConcurrency(1),
		periodic.WithWorkerOptions(queue.WithWorkerID(name), queue.WithPollWait(500*time.Millisecond)))
	if err := r.Add(closeJob(sched, name)); err != nil {
		return err
	}
	return r.Run(ctx)
}

func runDemo(eps []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(ctx, eps, client.WithOwner("demo"))
	if err != nil {
		return err
	}
	defer c.Close()
	sched := strings.ReplaceAll("scheduled-close-"+time.Now().UTC().Format("20060102-150405.000"), ".", "-")
	lines := make(chan string, 512)
	procs := map[string]*demo.Proc{}
	start := func(name string) error {
		p, err := demo.Spawn(name, lines, "--role", "replica", "--name", name, "--endpoints", strings.Join(eps, ","), "--schedule", sched)
		if err != nil {
			return err
		}
		procs[name] = p
		return nil
	}
	defer func() {
		for _, p := range procs { // stop every process we started, by PID
			p.Kill()
			<-p.Done()
		}
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		if _, err := c.DeleteSchedule(dctx, sched); err == nil {
			fmt.Printf("schedule %s deleted\n", sched)
		}
	}()
	fmt.Printf("schedule %s: an occurrence every %s (a \"day\"), jobs in queue scheduled-close, visibility timeout %s\n",
		sched, every, visibility)
	for _, name := range []string{"A", "B", "C"} {
		if err := start(name); err != nil {
			return err
		}
	}
	var windows []string // the occurrences, in order
	killed, paused := false, false
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			done, err := firstDone(ctx, c, sched)
			if err != nil {
				return err
			}
			if done == nil {
				continue
			}
			time.Sleep(300 * time.Millisecond)
			for len(lines) > 0 {
				fmt.Println(<-lines)
			}
			if !killed || !paused {
				return fmt.Errorf("the demo's faults did not happen (kill -9 mid-run: %t, SIGSTOP past the visibility timeout: %t)", killed, paused)
			}
			return ledger(ctx, c, sched, done)
		case l := <-lines:
			fmt.Println(l)
			f := strings.Fields(l)
			if len(f) >= 3 && f[1] == "occurrence" && !slices.Contains(windows, strings.TrimSuffix(f[2], ":")) {
				windows = append(windows, strings.TrimSuffix(f[2], ":"))
			}
			if len(f) == 0 {
				continue
			}
			who := f[0]
			if !killed && len(windows) >= 1 && strings.Contains(l, windows[0]+" store-2 ACCEPTED") {
				killed = true
				p := procs[who]
				fmt.Printf("--- kill -9 %s mid-run (pid %d); restarting it like a deploy would\n", who, p.Cmd.Process.Pid)
				p.Kill()
				<-p.Done()
				if err := start(who); err != nil {
					return err
				}
			}
			if !paused && len(windows) >= 2 && strings.Contains(l, windows[1]+" store-2 ACCEPTED") {
				paused = true
				p := procs[who]
				fmt.Printf("--- SIGSTOP %s (pid %d) past its visibility timeout\n", who, p.Cmd.Process.Pid)
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

// firstDone returns the first `days` occurrences of the schedule once all
// their jobs are final (oldest first), or nil while they are not.
func firstDone(ctx context.Context, c *client.Client, sched string) ([]*coordv1.ScheduleOccurrence, error) {
	resp, err := c.GetSchedule(ctx, sched, 1)
	if errors.Is(err, client.ErrNotFound) {
		return nil, nil // not put yet
	}
	if err != nil {
		return nil, err
	}
	var occ []*coordv1.ScheduleOccurrence
	recent := resp.GetRecent()
	for i := len(recent) - 1; i >= 0 && len(occ) < days; i-- {
		if recent[i].GetJobId() != 0 {
			occ = append(occ, recent[i])
		}
	}
	if len(occ) < days {
		return nil, nil
	}
	for _, o := range occ {
		switch o.GetJobState() {
		case coordv1.JobState_JOB_STATE_SUCCEEDED, coordv1.JobState_JOB_STATE_DEAD, coordv1.JobState_JOB_STATE_CANCELLED:
		default:
			return nil, nil
		}
	}
	return occ, nil
}

// ledger checks this run: every occurrence's job succeeded, every store got
// one accepted write per occurrence.
func ledger(ctx context.Context, c *client.Client, sched string, occ []*coordv1.ScheduleOccurrence) error {
	fmt.Printf("\nledger of %s:\n", sched)
	bad := 0
	for _, o := range occ {
		state := strings.ToLower(strings.TrimPrefix(o.GetJobState().String(), "JOB_STATE_"))
		fmt.Printf("  %s: job %d %s, %d attempt(s)\n", o.GetWindow(), o.GetJobId(), state, o.GetAttempts())
		if o.GetJobState() != coordv1.JobState_JOB_STATE_SUCCEEDED {
			bad++
		}
		for i := 1; i <= stores; i++ {
			r, err := c.GetResource(ctx, resource(i)+"/"+o.GetWindow())
			if err != nil {
				return err
			}
			if r.GetCommits() != 1 {
				fmt.Printf("    store-%d: WRONG: %d writes\n", i, r.GetCommits())
				bad++
			}
		}
	}
	if bad > 0 {
		return errors.New("ledger is wrong")
	}
	fmt.Println("\nevery window completed once; every store closed exactly once per day.")
	return nil
}
