package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Elections on leases, after etcd's concurrency.Election: a name is a
// lease; its holder is the leader; the leader's value is the lease's value
// (set by the Acquire that elected it, replaced by Proclaim, a Renew that
// carries one — only the current holder can, and it starts no new
// generation). Campaign is a waiting Acquire: candidates are elected in
// the order they asked, each the moment its predecessor resigns or its
// lease expires. The leader's generation is its fencing token. See
// DESIGN.md "Elections".

// AcquireValue publishes value with the grant (Lease.value: what an
// election's leader tells observers), up to 4 KiB.
func AcquireValue(value []byte) AcquireOption {
	return func(o *acquireOptions) { o.value = append([]byte(nil), value...) }
}

// DefaultElectionTTL is the lease TTL of a Campaign without ElectionTTL: a
// leader that dies is replaced about this long after its last renewal.
const DefaultElectionTTL = 10 * time.Second

// ElectionOption changes a Campaign.
type ElectionOption func(*electionOptions)

type electionOptions struct {
	ttl   time.Duration
	owner string
}

// ElectionTTL sets the leadership lease's TTL (default DefaultElectionTTL).
func ElectionTTL(d time.Duration) ElectionOption { return func(o *electionOptions) { o.ttl = d } }

// ElectionOwner sets the owner id the candidate campaigns as (default the
// client's): observers see it as the leader's Owner.
func ElectionOwner(owner string) ElectionOption { return func(o *electionOptions) { o.owner = owner } }

// Leadership is one term of this process as a leader. Its context lives
// exactly while the term does: it is cancelled when the lease is lost (a
// renewal refused, or none acknowledged before the local deadline — before
// the cluster could elect anyone else, G10) or resigned. Do the leader's
// work under Context and fence its writes with Lease (or Token).
type Leadership struct {
	name  string
	lease *Lease
	mu    sync.Mutex
	value []byte
}

// Campaign blocks until this process is elected leader of name, with
// value published, or ctx ends. While another candidate leads, it waits in
// line (a waiting Acquire on the cluster's leader, resumed across leader
// changes with the same request id, so it is never elected twice). If ctx
// ends just as it is elected, the grant is released (best effort: a grant
// that cannot be found then lapses after the TTL).
func (c *Client) Campaign(ctx context.Context, name string, value []byte, opts ...ElectionOption) (*Leadership, error) {
	o := electionOptions{ttl: DefaultElectionTTL, owner: c.opts.owner}
	for _, opt := range opts {
		opt(&o)
	}
	l, err := c.Acquire(ctx, name, o.ttl, AcquireWait(), AcquireValue(value), AcquireOwner(o.owner))
	if err != nil {
		if ctx.Err() != nil {
			c.releaseIfHeld(name, o.owner)
		}
		return nil, err
	}
	return &Leadership{name: name, lease: l, value: append([]byte(nil), value...)}, nil
}

// releaseIfHeld releases name if owner holds it: a waiting Acquire whose
// context ended may have been granted as it ended (the grant comes in the
// predecessor's Release entry).
func (c *Client) releaseIfHeld(name, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.GetLease(ctx, name)
	if err != nil || l.GetOwner() != owner || l.GetReleased() || l.GetExpiresInMs() <= 0 {
		return
	}
	req := &coordv1.ReleaseRequest{Name: name, Owner: owner, Generation: l.GetGeneration()}
	_ = c.invoke(ctx, true, func(ctx context.Context, cc coordv1.CoordinatorClient) error {
		_, err := cc.Release(ctx, req)
		return err
	})
}

// Context is cancelled when the leadership ends; context.Cause says why
// (ErrLeaseLost, or ErrLeaseReleased after Resign).
func (l *Leadership) Context() context.Context { return l.lease.Context() }

// Done is closed when the leadership ends.
func (l *Leadership) Done() <-chan struct{} { return l.lease.Done() }

// Err is nil while leading, then why the leadership ended.
func (l *Leadership) Err() error { return l.lease.Err() }

// Name is the election's name.
func (l *Leadership) Name() string { return l.name }

// Generation is the leader's fencing token: it grows with every term.
func (l *Leadership) Generation() uint64 { return l.lease.Generation() }

// Token is the fencing token as "name:generation".
func (l *Leadership) Token() string { return l.lease.Token() }

// Lease is the leadership's lease, for fenced writes (Lease.FencedCommit).
func (l *Leadership) Lease() *Lease { return l.lease }

// Value is the value this leader last published.
func (l *Leadership) Value() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.value...)
}

// Proclaim publishes a new value without a new election: a renewal of the
// lease that carries it, accepted only from the current holder. When it is
// refused the leadership is over: the error wraps ErrLeaseLost and the
// context is cancelled.
func (l *Leadership) Proclaim(ctx context.Context, value []byte) error {
	ls := l.lease
	if err := ls.Err(); err != nil {
		return err
	}
	sent := ls.c.clock.Now()
	req := &coordv1.RenewRequest{Name: ls.name, Owner: ls.owner, Generation: ls.gen, Value: append([]byte{}, value...)}
	err := ls.c.invoke(ctx, true, func(ctx context.Context, cc coordv1.CoordinatorClient) error {
		_, err := cc.Renew(ctx, req)
		return err
	})
	if errors.Is(err, ErrLeaseLost) {
		ls.lose(reasonOfErr(err), err)
		return err
	}
	if err != nil {
		return err
	}
	ls.acked(sent)
	l.mu.Lock()
	l.value = append([]byte(nil), value...)
	l.mu.Unlock()
	return nil
}

// Resign ends the leadership: the context is cancelled and the lease
// released, so the next candidate is elected in the same log entry.
func (l *Leadership) Resign(ctx context.Context) error { return l.lease.Release(ctx) }

func reasonOfErr(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Reason != "" {
		return e.Reason
	}
	return coorderr.Name(coorderr.LeaseLost)
}

// Leader is an election's state as observers see it.
type Leader struct {
	Name string
	// Held: a leader holds the lease now. When false (nobody ever led, the
	// last leader resigned, or its lease expired) the fields below describe
	// the last leader, if any.
	Held       bool
	Owner      string
	Generation uint64
	Value      []byte
	// Index is the log index of the change (0 for Client.Leader's read).
	Index uint64
}

func (l Leader) String() string {
	if !l.Held {
		return fmt.Sprintf("%s: no leader (last: %q generation %d)", l.Name, l.Owner, l.Generation)
	}
	return fmt.Sprintf("%s: %q generation %d value %q", l.Name, l.Owner, l.Generation, l.Value)
}

// same reports whether two states are the same for observers (renewals of
// the same term with the same value are not changes).
func (l Leader) same(o Leader) bool {
	return l.Held == o.Held && l.Owner == o.Owner && l.Generation == o.Generation && bytes.Equal(l.Value, o.Value)
}

func leaderOf(name string, l *coordv1.Lease, index uint64) Leader {
	if l == nil {
		return Leader{Name: name, Index: index}
	}
	return Leader{Name: name, Held: !l.GetReleased() && !l.GetExpired() && l.GetExpiresInMs() > 0, Owner: l.GetOwner(),
		Generation: l.GetGeneration(), Value: l.GetValue(), Index: index}
}

// Leader reads who leads name now (a linearizable read).
func (c *Client) Leader(ctx context.Context, name string) (Leader, error) {
	l, err := c.GetLease(ctx, name)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrLeaseNotFound) {
		return Leader{Name: name}, nil
	}
	if err != nil {
		return Leader{}, err
	}
	return leaderOf(name, l, 0), nil
}

// Observe sends the election's current state and then every change:
// a new leader, a Proclaim, a resignation or an expiry (renewals are not
// changes). It runs on Watch (list, then watch, from any node; resumed
// across node restarts and re-read if ever the watch cannot resume), and
// the channel closes when ctx ends. A reader that falls far behind is
// caught up by a re-read: it then sees the latest state, not every step.
func (c *Client) Observe(ctx context.Context, name string) <-chan Leader {
	out := make(chan Leader, 16)
	go func() {
		defer close(out)
		var last *Leader
		for ctx.Err() == nil {
			w := c.Watch(ctx, name, 0, WatchInitial(), WatchFamilies(coordv1.WatchFamily_WATCH_FAMILY_LEASE))
			cur := Leader{Name: name}
			synced := false
			emit := func() bool {
				if last != nil && last.same(cur) {
					return true
				}
				select {
				case out <- cur:
					l := cur
					last = &l
					return true
				case <-ctx.Done():
					return false
				}
			}
			for resp := range w.Responses() {
				if resp.Reset {
					cur, synced = Leader{Name: name}, false
				}
				for _, e := range resp.Events {
					if e.GetKey() != name { // the watch is by prefix
						continue
					}
					cur = leaderOf(name, e.GetLease(), e.GetIndex())
					if e.GetKind() == coordv1.WatchEventKind_WATCH_EVENT_KIND_EXPIRE {
						cur.Held = false
					}
					if synced && !emit() {
						break
					}
				}
				if resp.Synced && !synced {
					synced = true
					if !emit() {
						break
					}
				}
			}
			if errors.Is(w.Err(), ErrPermissionDenied) || errors.Is(w.Err(), ErrInvalidArgument) || errors.Is(w.Err(), ErrUnauthenticated) {
				c.log.Warn("observe: the watch was refused", "election", name, "err", w.Err())
				return
			}
			// ErrWatchCompacted (or anything else): read again and go on.
		}
	}()
	return out
}
