package client

import (
	"context"
	"errors"
	"time"
)

// RunExclusive runs fn while holding the lease name: it tries to acquire
// once; if another owner holds it, it returns ran=false and no error.
// Otherwise fn runs with a context cancelled when the lease is lost (or ctx
// ends); the lease is released afterwards, also when fn panics (the panic
// is re-raised after the release). If the lease was lost while fn ran, the
// error wraps ErrLeaseLost.
func (c *Client) RunExclusive(ctx context.Context, name string, ttl time.Duration,
	fn func(ctx context.Context, l *Lease) error) (ran bool, err error) {
	l, err := c.Acquire(ctx, name, ttl)
	if errors.Is(err, ErrNotAcquired) {
		c.metrics.RunSkipped(name)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer func() {
		stop()
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		relErr := l.Release(rctx)
		rcancel()
		if p := recover(); p != nil {
			panic(p)
		}
		if errors.Is(relErr, ErrLeaseLost) {
			err = errors.Join(err, relErr)
		}
	}()
	return true, fn(runCtx, l)
}
