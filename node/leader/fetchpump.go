package leader

import "context"

// FetchPump serves the long-polling Fetch calls waiting on the leader
// whenever the queue may have changed (Poke: a committed command, a new
// waiter, a fetch that came back). Serve is the node's: it walks the
// leadership's line of waiters in arrival order and proposes the fetches
// of those whose queues have available jobs (node/queue.go).
type FetchPump struct {
	Serve func(ctx context.Context, l Leadership)
	Waker
}

func (*FetchPump) Name() string { return "fetch-pump" }

func (p *FetchPump) Run(ctx context.Context, l Leadership) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.C():
		}
		p.Serve(ctx, l)
	}
}
