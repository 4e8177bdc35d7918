package fsm

import (
	"fmt"
	"strconv"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// acquireCheck is every decision of acquire that changes nothing (the
// acquire predicate), at lease time now and calendar time cal (the
// not-before gate of a claim is on the calendar). It returns the answer when acquire answers without a
// write: a malformed command, a claim on a completed window or before its
// not-before time, the lease live and held by another request. Otherwise
// answer is nil and acquire writes: own reports that the live lease is
// this request's grant (a retry: the same request id, owner and identity),
// else the lease is free (cur is its record, nil when it never existed).
func (s *state) acquireCheck(now, cal int64, c *fsmv1.Acquire) (answer any, cur *Lease, own bool) {
	if c.GetTtlMs() <= 0 || c.GetName() == "" || c.GetOwner() == "" {
		return reject(coorderr.InvalidArgument, nil, "acquire needs a name, an owner and a positive TTL"), nil, false
	}
	cur = s.lease(c.GetName())
	if c.GetClaimJob() != "" || c.GetClaimWindow() != "" {
		if c.GetClaimJob() == "" || c.GetClaimWindow() == "" {
			return reject(coorderr.InvalidArgument, nil, "a claim needs a job and a window"), cur, false
		}
		if w := s.window(c.GetClaimJob(), c.GetClaimWindow()); w != nil && w.Completed {
			res := &AcquireResult{At: now, Claim: &ClaimResult{Claimed: false, Window: *w}}
			if cur != nil {
				res.Lease = *cur
			}
			return res, cur, false
		}
		if nb := c.GetClaimNotBeforeMs(); cal < nb {
			return tooEarly(cal, nb, c.GetClaimJob(), c.GetClaimWindow()), cur, false
		}
	}
	if cur == nil || !cur.Live(now) {
		return nil, cur, false
	}
	if c.GetRequestId() != "" && cur.RequestID == c.GetRequestId() && cur.Owner == c.GetOwner() && cur.Identity == c.GetIdentity() {
		return nil, cur, true
	}
	return &AcquireResult{At: now, Acquired: false, Lease: *cur}, cur, false
}

// CheckAcquire answers an Acquire at lease time now and calendar time cal
// (what the leader would stamp on it) from committed state,
// without recording anything, when acquire would answer it without a
// write: the lease held by another request (not acquired), this request's
// own live grant (acquired again; not when it asks for a claim, which only
// the apply records), a completed window, a claim too early, a malformed
// command. It returns that answer (an *AcquireResult or a *Rejection) and
// true, or nil and false when only a log entry can answer (the lease is
// free). The node answers from it, waiting acquires wait on it, and the
// apply decides by the same acquireCheck, so the three cannot disagree.
func (f *FSM) CheckAcquire(now, cal int64, c *fsmv1.Acquire) (any, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	answer, cur, own := f.st.acquireCheck(now, cal, c)
	switch {
	case answer != nil:
		return answer, true
	case own && c.GetClaimJob() == "":
		return &AcquireResult{At: now, Acquired: true, Lease: *cur}, true
	default:
		return nil, false
	}
}

// acquire grants the lease when it is free, released or expired, with the
// next generation. A retry carrying the request id of the live grant gets
// that grant back instead of a second one. A claim's window is stamped at
// calendar time cal.
func (s *state) acquire(now, cal int64, c *fsmv1.Acquire) any {
	answer, cur, own := s.acquireCheck(now, cal, c)
	if answer != nil {
		return answer
	}
	if own {
		return s.withClaim(now, cal, c, &AcquireResult{At: now, Acquired: true, Lease: *cur})
	}
	if limit := c.GetMaxLiveLeases(); limit > 0 && c.GetIdentity() != "" && s.liveLeases(c.GetIdentity(), now) >= int(limit) {
		return reject(coorderr.LeaseLimit, map[string]string{"limit": strconv.FormatUint(uint64(limit), 10)},
			"identity %q already holds %d live leases, its limit", c.GetIdentity(), limit)
	}
	gen := uint64(1)
	if cur != nil {
		gen = cur.Generation + 1
	}
	l := &Lease{
		Name:       c.GetName(),
		Owner:      c.GetOwner(),
		RequestID:  c.GetRequestId(),
		Generation: gen,
		TTLMs:      c.GetTtlMs(),
		AcquiredAt: now,
		RenewedAt:  now,
		ExpiresAt:  now + c.GetTtlMs(),
		Identity:   c.GetIdentity(),
		Value:      string(c.GetValue()),
	}
	s.putLease(cur, l)
	s.indexIdentity(l.Identity, l.Name)
	res := &AcquireResult{At: now, Acquired: true, Lease: *l}
	if cur != nil && !cur.Released {
		res.TookOver, res.Previous = true, *cur
	}
	return s.withClaim(now, cal, c, res)
}

// tooEarly is the rejection of a claim at calendar time cal before its
// not-before time.
func tooEarly(cal, notBefore int64, ledger, window string) *Rejection {
	return reject(coorderr.TooEarly, map[string]string{"wait_ms": strconv.FormatInt(notBefore-cal, 10)},
		"window %s/%s may not start for %d ms (calendar time: the leader's clock); is this replica's clock ahead?",
		ledger, window, notBefore-cal)
}

// withClaim claims the Acquire's window for the holder res was granted to.
// The holder is current and live at now, so the claim cannot be refused.
func (s *state) withClaim(now, cal int64, c *fsmv1.Acquire, res *AcquireResult) any {
	if c.GetClaimJob() == "" {
		return res
	}
	out := s.claimWindow(now, cal, &fsmv1.ClaimWindow{Job: c.GetClaimJob(), Window: c.GetClaimWindow(), LeaseName: res.Lease.Name,
		Owner: res.Lease.Owner, Generation: res.Lease.Generation, Identity: res.Lease.Identity})
	cr, ok := out.(*ClaimResult)
	if !ok {
		panic(fmt.Sprintf("fsm: claim by the holder just granted was refused: %v", out)) // a bug, not an input
	}
	res.Claim = cr
	return res
}

// checkHolder is the fence of G3: (owner, generation) must be the current,
// unreleased, unexpired holder of the lease, and the caller the identity
// the generation is bound to. The identity is checked first, so another
// identity learns nothing by guessing generations.
func (s *state) checkHolder(now int64, name, owner, identity string, gen uint64) (*Lease, *Rejection) {
	l := s.lease(name)
	if l == nil {
		return nil, reject(coorderr.LeaseNotFound, nil, "lease %q does not exist", name)
	}
	if l.Identity != "" && l.Identity != identity {
		return nil, reject(coorderr.IdentityMismatch, nil,
			"lease %q generation %d is bound to the identity that acquired it, not %q", name, l.Generation, identity)
	}
	meta := holderMeta(l)
	if l.Generation != gen || l.Owner != owner {
		return nil, reject(coorderr.LeaseLost, meta,
			"lease %q generation %d of %q is not the current holder (current generation %d)", name, gen, owner, l.Generation)
	}
	if l.Released {
		return nil, reject(coorderr.LeaseReleased, meta, "lease %q generation %d was released", name, gen)
	}
	if !l.Live(now) {
		return nil, reject(coorderr.LeaseExpired, meta, "lease %q generation %d expired %d ms ago", name, gen, now-l.ExpiresAt)
	}
	return l, nil
}

func holderMeta(l *Lease) map[string]string {
	return map[string]string{
		"current_owner":      l.Owner,
		"current_generation": strconv.FormatUint(l.Generation, 10),
	}
}

func (s *state) renew(now int64, c *fsmv1.Renew) any {
	l, rej := s.checkHolder(now, c.GetName(), c.GetOwner(), c.GetIdentity(), c.GetGeneration())
	if rej != nil {
		return rej
	}
	n := *l
	if c.GetTtlMs() > 0 {
		n.TTLMs = c.GetTtlMs()
	}
	n.RenewedAt = now
	n.ExpiresAt = now + n.TTLMs
	n.Renewals++
	if c.Value != nil {
		n.Value = string(c.GetValue())
	}
	s.putLease(l, &n)
	return &LeaseResult{Lease: n}
}

// release expires the lease now but keeps the record, so the generation
// keeps growing (G1). Releasing an already released generation is harmless.
func (s *state) release(now, cal int64, c *fsmv1.Release) any {
	l := s.lease(c.GetName())
	if l != nil && l.Released && l.Generation == c.GetGeneration() && l.Owner == c.GetOwner() && l.Identity == c.GetIdentity() {
		return &ReleaseResult{At: now, Released: false, Lease: *l}
	}
	l, rej := s.checkHolder(now, c.GetName(), c.GetOwner(), c.GetIdentity(), c.GetGeneration())
	if rej != nil {
		return rej
	}
	n := *l
	n.Released = true
	n.ExpiresAt = now
	s.putLease(l, &n)
	res := &ReleaseResult{At: now, Released: true, Lease: n}
	if h := c.GetHandoff(); h != nil {
		if h.GetName() != c.GetName() {
			res.Handoff = reject(coorderr.InvalidArgument, nil, "a handoff must acquire the released lease")
		} else {
			res.Handoff = s.acquire(now, cal, h)
		}
	}
	return res
}
