// Command daily-close is the seed story, end to end: three replicas run the
// same daily job ("close the day for every store") against a coordd cluster.
// Each store's commission is written through FencedCommit with the
// idempotency key close-<day>-store-<id>; the window is the business day of
// the occurrence in the job's time zone, never the start time.
//
// The demo (default) starts three replica processes of itself:
//   - A starts the run and is frozen (SIGSTOP) after two stores, past its TTL;
//   - B, which was skipped while A held the lease, takes over and resumes
//     the window (attempt 2);
//   - A is resumed (SIGCONT) before B wrote anything: A's pending write is
//     refused (STALE_TOKEN) and its lease context was already cancelled;
//   - B finishes: A's two stores come back as duplicates, the rest accepted;
//   - C fires late, after the window completed, and does nothing.
//
// Then it prints the ledger and exits non-zero unless this occurrence
// wrote exactly one accepted commission for every store. A window runs once:
// on a cluster that already ran it, the demo refuses to start; pass another
// --occurrence (the next day's is a fresh window):
//
//	scripts/local-cluster.sh up /tmp/coordd3
//	go run ./examples/daily-close --endpoints 127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430
//	go run ./examples/daily-close --endpoints 127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430 --occurrence 2026-09-26T23:55:00
//	scripts/local-cluster.sh down /tmp/coordd3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // the business time zone must resolve on any machine

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/examples/internal/demo"
)

const job = "daily-close"

type config struct {
	endpoints  []string
	zone       *time.Location
	occurrence time.Time
	stores     int
	ttl        time.Duration
	step       time.Duration
}

func main() {
	var (
		endpoints  = flag.String("endpoints", demo.Env("COORD_ENDPOINTS", "127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430"), "coordd gRPC endpoints")
		zone       = flag.String("tz", "America/Sao_Paulo", "business time zone")
		occurrence = flag.String("occurrence", "2026-09-25T23:55:00", "the occurrence the schedule intended, in --tz")
		stores     = flag.Int("stores", 6, "stores to close")
		ttl        = flag.Duration("ttl", 2*time.Second, "lease TTL")
		step       = flag.Duration("step", 300*time.Millisecond, "work per store")
		role       = flag.String("role", "demo", "demo, or replica (run one replica once)")
		name       = flag.String("name", "replica", "replica name (role=replica)")
	)
	flag.Parse()
	loc, err := time.LoadLocation(*zone)
	if err != nil {
		fatal(err)
	}
	occ, err := time.ParseInLocation("2006-01-02T15:04:05", *occurrence, loc)
	if err != nil {
		fatal(fmt.Errorf("--occurrence: %w", err))
	}
	cfg := config{endpoints: strings.Split(*endpoints, ","), zone: loc, occurrence: occ, stores: *stores, ttl: *ttl, step: *step}
	demo.Role("daily-close", *role, func() error { return run(cfg) }, func() error { return replica(cfg, *name) })
}

func fatal(err error) { demo.Fatal("daily-close", err) }

// window is the business day of the occurrence, in the job's zone.
func window(cfg config) string { return cfg.occurrence.In(cfg.zone).Format("2006-01-02") }

func say(name, format string, args ...any) {
	fmt.Printf("%-9s %s\n", name, fmt.Sprintf(format, args...))
}

// replica runs the job once for the occurrence, retrying while another
// replica holds the lease (as a scheduler's catch-up would), until the
// window is complete.
func replica(cfg config, name string) error {
	ctx := context.Background()
	c, err := client.New(ctx, cfg.endpoints, client.WithOwner(name))
	if err != nil {
		return err
	}
	defer c.Close()
	day := window(cfg)
	for {
		ran, err := c.RunExclusive(ctx, job, cfg.ttl, func(lctx context.Context, l *client.Lease) error {
			claim, err := l.ClaimWindow(lctx, job, day)
			if err != nil {
				return err
			}
			if !claim.Claimed {
				say(name, "window %s already completed by %s (generation %d, %d attempts): nothing to do",
					day, claim.Window.GetOwner(), claim.Window.GetGeneration(), claim.Window.GetAttempts())
				return nil
			}
			say(name, "holds %s generation %d; claimed window %s (attempt %d)", job, l.Generation(), day, claim.Attempts)
			for i := 1; i <= cfg.stores; i++ {
				time.Sleep(cfg.step) // the work for one store
				// A fresh context, not lctx: a process that wakes from a pause
				// mid-operation sends what it was sending. The fence decides.
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				commit, err := l.FencedCommit(cctx, resource(i), key(day, i),
					[]byte(fmt.Sprintf("commission for store %d by %s (generation %d)", i, name, l.Generation())))
				cancel()
				switch {
				case err != nil:
					var ce *client.Error
					reason := err.Error()
					if errors.As(err, &ce) {
						reason = ce.Reason
					}
					say(name, "store-%d REFUSED (%s) with token %d", i, reason, l.Generation())
					return err
				case commit.Duplicate:
					say(name, "store-%d duplicate: already written by generation %d", i, commit.Generation)
				default:
					say(name, "store-%d ACCEPTED with token %d", i, l.Generation())
				}
			}
			w, err := claim.Complete(lctx, []byte(fmt.Sprintf("%d stores closed by %s", cfg.stores, name)))
			if err != nil {
				return err
			}
			say(name, "completed window %s (attempts %d)", w.GetWindow(), w.GetAttempts())
			return nil
		})
		switch {
		case errors.Is(err, client.ErrLeaseLost) || errors.Is(err, client.ErrStaleToken):
			say(name, "lost the lease: %v", err)
			return nil
		case err != nil:
			return err
		case ran:
			return nil
		}
		say(name, "skipped: another replica holds %s", job)
		time.Sleep(cfg.ttl / 4)
	}
}

// start runs a replica process; its output lines go to lines.
func start(cfg config, name string, lines chan<- string) (*demo.Proc, error) {
	return demo.Spawn(name, lines, "--role", "replica", "--name", name, "--endpoints", strings.Join(cfg.endpoints, ","),
		"--tz", cfg.zone.String(), "--occurrence", cfg.occurrence.Format("2006-01-02T15:04:05"),
		"--stores", fmt.Sprint(cfg.stores), "--ttl", cfg.ttl.String(), "--step", cfg.step.String())
}

// run is the demo: three replicas, one frozen past its TTL, one late.
func run(cfg config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(ctx, cfg.endpoints, client.WithOwner("demo"))
	if err != nil {
		return err
	}
	defer c.Close()
	day := window(cfg)
	fmt.Printf("occurrence %s (%s) -> window %s/%s\n\n", cfg.occurrence.Format(time.RFC3339), cfg.zone, job, day)
	if w, err := c.GetWindow(ctx, job, day); err == nil {
		next := cfg.occurrence.AddDate(0, 0, 1).Format("2006-01-02T15:04:05")
		return fmt.Errorf("window %s/%s already exists (state %s, by %s): this demo runs a window once; "+
			"use a fresh cluster or another occurrence, e.g. --occurrence %s", job, day, w.GetState(), w.GetOwner(), next)
	}
	// The stores' ledgers before this occurrence: earlier occurrences (other
	// --occurrence runs on this cluster) wrote to them too.
	before, err := demo.Commits(ctx, c, cfg.stores, resource)
	if err != nil {
		return err
	}

	lines := make(chan string, 256)
	var children []*demo.Proc
	defer func() {
		for _, ch := range children { // stop every process we started, by PID
			ch.Kill()
		}
	}()
	spawn := func(name string) (*demo.Proc, error) {
		ch, err := start(cfg, name, lines)
		if err == nil {
			children = append(children, ch)
		}
		return ch, err
	}
	await := func(pred func(string) bool) error {
		for {
			select {
			case l := <-lines:
				fmt.Println(l)
				if pred(l) {
					return nil
				}
			case <-ctx.Done():
				return fmt.Errorf("demo timed out")
			}
		}
	}
	a, err := spawn("A")
	if err != nil {
		return err
	}
	if err := await(func(l string) bool { return strings.HasPrefix(l, "A ") && strings.Contains(l, "claimed window") }); err != nil {
		return err
	}
	b, err := spawn("B")
	if err != nil {
		return err
	}
	if err := await(func(l string) bool { return strings.HasPrefix(l, "A ") && strings.Contains(l, "store-2 ACCEPTED") }); err != nil {
		return err
	}
	fmt.Printf("--- SIGSTOP A (pid %d): frozen past its TTL of %s\n", a.Cmd.Process.Pid, cfg.ttl)
	stopped := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	// Wake A as soon as B holds the lease, before B's first write: A's
	// pending write must be refused although its successor wrote nothing yet.
	if err := await(func(l string) bool { return strings.HasPrefix(l, "B ") && strings.Contains(l, "claimed window") }); err != nil {
		return err
	}
	fmt.Printf("--- SIGCONT A after %s\n", time.Since(stopped).Round(100*time.Millisecond))
	if err := a.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	for _, ch := range []*demo.Proc{a, b} {
		if err := drain(ctx, ch, lines); err != nil {
			return err
		}
	}
	fmt.Printf("--- C fires late, after the window completed\n")
	late, err := spawn("C")
	if err != nil {
		return err
	}
	if err := drain(ctx, late, lines); err != nil {
		return err
	}
	return ledger(ctx, c, cfg, day, before)
}

// drain prints a child's lines until it exits.
func drain(ctx context.Context, ch *demo.Proc, lines chan string) error {
	for {
		select {
		case l := <-lines:
			fmt.Println(l)
		case <-ch.Done():
			err := ch.Err()
			for {
				select {
				case l := <-lines:
					fmt.Println(l)
				default:
					if err != nil {
						return fmt.Errorf("replica %s: %w", ch.Name, err)
					}
					return nil
				}
			}
		case <-ctx.Done():
			return fmt.Errorf("replica %s did not finish", ch.Name)
		}
	}
}

// ledger checks this occurrence: the window completed, and every store got
// exactly one more accepted commission, with this day's key.
func ledger(ctx context.Context, c *client.Client, cfg config, day string, before []uint64) error {
	fmt.Printf("\nledger for %s/%s:\n", job, day)
	w, err := c.GetWindow(ctx, job, day)
	if err != nil {
		return err
	}
	fmt.Printf("  window: %s by %s, generation %d, %d attempts\n", w.GetState(), w.GetOwner(), w.GetGeneration(), w.GetAttempts())
	bad := 0
	for i := 1; i <= cfg.stores; i++ {
		r, err := c.GetResource(ctx, resource(i))
		if err != nil {
			return err
		}
		verdict := "exactly one accepted commission"
		if n := r.GetCommits() - before[i]; n != 1 || r.GetLastIdempotencyKey() != key(day, i) {
			verdict = fmt.Sprintf("WRONG: %d accepted commissions for %s", n, day)
			bad++
		}
		fmt.Printf("  store-%d: %s (max token %d, key %s)\n", i, verdict, r.GetMaxGeneration(), r.GetLastIdempotencyKey())
	}
	if w.GetState().String() != "WINDOW_STATE_COMPLETED" || bad > 0 {
		return fmt.Errorf("ledger is wrong")
	}
	fmt.Println("\nevery store was closed exactly once.")
	return nil
}

func resource(store int) string { return fmt.Sprintf("commissions/store-%d", store) }

func key(day string, store int) string { return fmt.Sprintf("close-%s-store-%d", day, store) }
