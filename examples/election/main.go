// Command election is a service that runs as a group of replicas, one of
// them the leader, elected on coordd: every replica campaigns (a waiting
// Acquire of the election's lease), the elected one publishes who it is
// (the lease's value, changed with Proclaim) and writes a ledger fenced with
// its generation, and the others observe the leader (on Watch) until their
// turn comes. When the leader resigns, the next replica is elected in the
// same log entry; when it dies or stops (SIGSTOP), the next one is elected
// once its lease expires, and the stopped one, when it wakes, finds its
// leadership context cancelled and its writes refused.
//
// Run replicas with the same --name (each until SIGINT/SIGTERM, which
// resigns):
//
//	go run ./examples/election --endpoints 127.0.0.1:7400 --id a
//
// The demo (--demo) starts two replicas as processes of itself, prints what
// an observer sees, stops the leader (it resigns: the other one is elected
// at once), then the other; it exits non-zero unless the observer saw both
// terms in order and every accepted write came from the leader of its time:
//
//	scripts/local-cluster.sh up /tmp/coordd3
//	go run ./examples/election --endpoints 127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430 --demo
//	scripts/local-cluster.sh down /tmp/coordd3
//
// A replica prints one line per event, for people and for tests:
//
//	elected id=a generation=3 at=1790000000123
//	commit id=a generation=3 seq=0 accepted sent=1790000000141 at=1790000000150
//	commit id=a generation=3 seq=7 refused reason=STALE_TOKEN sent=1790000003090 at=1790000003100
//	lost id=a generation=3 at=1790000003101 err=coordd: lease lost: no renewal ...
//	observed leader=b generation=4 held=true value="..." index=812
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordd/coordd/client"
)

type config struct {
	endpoints []string
	name      string
	id        string
	ttl       time.Duration
	interval  time.Duration
	// afterLoss: writes a replica attempts with a term's token after the
	// term ended, to show that the fence refuses them.
	afterLoss int
}

func main() {
	var (
		cfg       config
		endpoints string
		demo      bool
	)
	flag.StringVar(&endpoints, "endpoints", "127.0.0.1:7400", "comma-separated coordd gRPC addresses")
	flag.StringVar(&cfg.name, "name", "example/leader", "the election (a lease name); the ledger is NAME/ledger")
	flag.StringVar(&cfg.id, "id", "", "this replica's id (required without --demo)")
	flag.DurationVar(&cfg.ttl, "ttl", 3*time.Second, "leadership lease TTL: a dead leader is replaced this long after its last renewal")
	flag.DurationVar(&cfg.interval, "interval", 200*time.Millisecond, "how often the leader writes its ledger")
	flag.IntVar(&cfg.afterLoss, "writes-after-loss", 0, "writes to attempt with a term's token after it ended (all refused: the fence)")
	flag.BoolVar(&demo, "demo", false, "start two replicas of this program and check what an observer sees")
	flag.Parse()
	cfg.endpoints = strings.Split(endpoints, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if demo {
		err = runDemo(ctx, cfg)
	} else if cfg.id == "" {
		err = errors.New("--id is required (or --demo)")
	} else {
		var c *client.Client
		if c, err = client.New(ctx, cfg.endpoints, client.WithOwner(cfg.id)); err == nil {
			err = serve(ctx, c, cfg, os.Stdout)
			c.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "election:", err)
		os.Exit(1)
	}
}

func now() int64 { return time.Now().UnixMilli() }

// printer serialises the lines of a replica.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

// serve runs one replica until ctx ends: observe, campaign, lead, repeat.
func serve(ctx context.Context, c *client.Client, cfg config, out io.Writer) error {
	p := &printer{out: out}
	go func() {
		for l := range c.Observe(ctx, cfg.name) {
			p.printf("observed leader=%s generation=%d held=%t value=%q index=%d", l.Owner, l.Generation, l.Held, l.Value, l.Index)
		}
	}()
	for {
		lead, err := c.Campaign(ctx, cfg.name, []byte("id="+cfg.id+" elected"), client.ElectionTTL(cfg.ttl), client.ElectionOwner(cfg.id))
		switch {
		case err != nil && ctx.Err() != nil:
			return nil // stopped while waiting (Campaign released a grant made as it ended)
		case err != nil:
			return fmt.Errorf("campaign: %w", err)
		}
		p.printf("elected id=%s generation=%d at=%d", cfg.id, lead.Generation(), now())
		gen := lead.Generation()
		context.AfterFunc(lead.Context(), func() { // the moment the term ends, whatever the leader is doing
			p.printf("lost id=%s generation=%d at=%d err=%v", cfg.id, gen, now(), context.Cause(lead.Context()))
		})
		lead.Proclaim(lead.Context(), []byte(fmt.Sprintf("id=%s serving since %d", cfg.id, now()))) // a lost term says so below
		err = lead.Context().Err()
		if err == nil {
			err = work(ctx, lead, cfg, p)
		}
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := lead.Resign(rctx)
			cancel()
			p.printf("resigned id=%s generation=%d at=%d err=%v", cfg.id, lead.Generation(), now(), err)
			return nil
		}
		<-lead.Done()
		for i := range cfg.afterLoss { // a leader that ignores its context is still fenced
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			key := fmt.Sprintf("%s-%d-late-%d", cfg.id, lead.Generation(), i)
			sent := now()
			_, err := lead.Lease().FencedCommit(wctx, cfg.name+"/ledger", key, []byte(key))
			cancel()
			if err == nil {
				p.printf("commit id=%s generation=%d seq=late%d accepted sent=%d at=%d", cfg.id, lead.Generation(), i, sent, now())
			} else if e := (*client.Error)(nil); errors.As(err, &e) {
				p.printf("commit id=%s generation=%d seq=late%d refused reason=%s sent=%d at=%d", cfg.id, lead.Generation(), i, e.Reason, sent, now())
			}
		}
	}
}

// work is the leader's job: a ledger entry every interval, fenced with the
// leadership's generation, while the leadership lasts.
func work(ctx context.Context, lead *client.Leadership, cfg config, p *printer) error {
	t := time.NewTicker(cfg.interval)
	defer t.Stop()
	for seq := 0; ; seq++ {
		if lead.Context().Err() != nil {
			return nil
		}
		// The call gets its own deadline, not the leadership's context: a
		// write sent by a leader that just lost is answered by the fence.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		key := fmt.Sprintf("%s-%d-%d", cfg.id, lead.Generation(), seq)
		sent := now()
		_, err := lead.Lease().FencedCommit(wctx, cfg.name+"/ledger", key, []byte(key))
		cancel()
		switch {
		case err == nil:
			p.printf("commit id=%s generation=%d seq=%d accepted sent=%d at=%d", cfg.id, lead.Generation(), seq, sent, now())
		case ctx.Err() != nil:
			return nil
		default:
			reason := "unknown"
			var e *client.Error
			if errors.As(err, &e) {
				reason = e.Reason
			}
			p.printf("commit id=%s generation=%d seq=%d refused reason=%s sent=%d at=%d", cfg.id, lead.Generation(), seq, reason, sent, now())
			if errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrLeaseLost) {
				return nil // not the leader any more: stop working
			}
		}
		select {
		case <-t.C:
		case <-lead.Done():
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// runDemo starts two replicas, observes, stops the leader, then the other.
func runDemo(ctx context.Context, cfg config) error {
	c, err := client.New(ctx, cfg.endpoints, client.WithOwner("demo-observer"))
	if err != nil {
		return err
	}
	defer c.Close()
	cfg.name = fmt.Sprintf("%s-%d", cfg.name, now()) // a fresh election each run
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	observed := c.Observe(octx, cfg.name)
	first := <-observed
	fmt.Println("observer:", first)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	procs := map[string]*exec.Cmd{}
	for _, id := range []string{"a", "b"} {
		cmd := exec.Command(self, "--endpoints", strings.Join(cfg.endpoints, ","), "--name", cfg.name, "--id", id,
			"--ttl", cfg.ttl.String(), "--interval", cfg.interval.String())
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		procs[id] = cmd
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if !strings.HasPrefix(sc.Text(), "observed ") { // the demo's own observer prints those
					fmt.Printf("  [%s] %s\n", id, sc.Text())
				}
			}
		}()
		defer func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}()
	}
	next := func(cond func(client.Leader) bool) (client.Leader, error) {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-observed:
				if !ok {
					return l, ctx.Err()
				}
				fmt.Println("observer:", l)
				if cond(l) {
					return l, nil
				}
			case <-timeout:
				return client.Leader{}, errors.New("no such change within 30 s")
			}
		}
	}
	serving := func(l client.Leader) bool { return l.Held && strings.Contains(string(l.Value), "serving since") }
	l1, err := next(serving)
	if err != nil {
		return fmt.Errorf("waiting for the first leader: %w", err)
	}
	time.Sleep(5 * cfg.interval) // some ledger entries
	fmt.Printf("demo: stopping %s (SIGTERM: it resigns)\n", l1.Owner)
	if err := procs[l1.Owner].Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	l2, err := next(serving)
	if err != nil {
		return fmt.Errorf("waiting for the second leader: %w", err)
	}
	if l2.Owner == l1.Owner || l2.Generation != l1.Generation+1 {
		return fmt.Errorf("second term %v after %v: want the other replica, next generation", l2, l1)
	}
	time.Sleep(5 * cfg.interval)
	fmt.Printf("demo: stopping %s\n", l2.Owner)
	if err := procs[l2.Owner].Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if _, err := next(func(l client.Leader) bool { return !l.Held && l.Generation == l2.Generation }); err != nil {
		return fmt.Errorf("waiting for the last resignation: %w", err)
	}
	res, err := c.GetResource(ctx, cfg.name+"/ledger")
	if err != nil {
		return err
	}
	fmt.Printf("demo: ok: two terms (generations %d and %d), the ledger's last writer generation %d after %d writes\n",
		l1.Generation, l2.Generation, res.GetMaxGeneration(), res.GetCommits())
	if res.GetMaxGeneration() != l2.Generation {
		return fmt.Errorf("the ledger's last accepted generation is %d, want %d", res.GetMaxGeneration(), l2.Generation)
	}
	return nil
}
