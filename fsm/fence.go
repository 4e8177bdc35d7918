package fsm

import (
	"strconv"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// fenceCheck runs every check of fencedCommit without changing anything. It
// returns the duplicate's result or a rejection, or a nil verdict when the
// commit is to be accepted, with the resource's record (nil when new).
func (s *state) fenceCheck(now int64, c *fsmv1.FencedCommit) (verdict any, res *Resource) {
	if c.GetResource() == "" || (c.GetLeaseName() == "") == (c.GetJobId() == 0) {
		return reject(coorderr.InvalidArgument, nil, "fenced commit needs a resource and either a lease or a job attempt"), nil
	}
	res = s.resource(c.GetResource())
	if c.GetIdempotencyKey() != "" {
		if rec := s.idempotency(c.GetResource(), c.GetIdempotencyKey()); rec != nil {
			out := &CommitResult{Accepted: true, Duplicate: true, Generation: rec.Generation, Payload: rec.Payload}
			if res != nil {
				out.MaxGeneration = res.MaxGeneration
			}
			return out, res
		}
	}
	if c.GetJobId() != 0 {
		return s.jobFenceCheck(c, res), res
	}
	l := s.lease(c.GetLeaseName())
	if l == nil {
		return reject(coorderr.LeaseNotFound, nil, "lease %q does not exist", c.GetLeaseName()), res
	}
	if c.GetGeneration() != l.Generation {
		return reject(coorderr.StaleToken, holderMeta(l),
			"token %d of lease %q is not current (current generation %d)", c.GetGeneration(), l.Name, l.Generation), res
	}
	if l.Released {
		return reject(coorderr.LeaseReleased, holderMeta(l), "lease %q generation %d was released", l.Name, l.Generation), res
	}
	if !l.Live(now) {
		return reject(coorderr.LeaseExpired, holderMeta(l),
			"lease %q generation %d expired %d ms ago", l.Name, l.Generation, now-l.ExpiresAt), res
	}
	if res != nil && (res.LeaseName != c.GetLeaseName() || res.JobID != 0) {
		return reject(coorderr.ResourceLeaseMismatch, map[string]string{"resource_lease": res.LeaseName},
			"resource %q is fenced by lease %q, not %q", res.Name, res.LeaseName, c.GetLeaseName()), res
	}
	if res != nil && c.GetGeneration() < res.MaxGeneration {
		return reject(coorderr.StaleToken, map[string]string{"max_generation": strconv.FormatUint(res.MaxGeneration, 10)},
			"token %d is below the highest accepted for %q (%d)", c.GetGeneration(), res.Name, res.MaxGeneration), res
	}
	return nil, res
}

// CheckFence answers whether a fenced commit would be accepted at cluster
// time now, without recording it: a *CommitResult (a duplicate's first
// outcome, or the would-be acceptance) or a *Rejection. A job attempt
// token is judged as of the last applied command's calendar time (a claim
// whose deadline passed since is still live until the next command, which
// the leader's dispatcher proposes at the deadline).
func (f *FSM) CheckFence(now int64, c *fsmv1.FencedCommit) any {
	f.mu.RLock()
	defer f.mu.RUnlock()
	verdict, res := f.st.fenceCheck(now, c)
	if verdict != nil {
		return verdict
	}
	out := &CommitResult{Accepted: true, Generation: c.GetGeneration(), MaxGeneration: c.GetGeneration()}
	if res != nil {
		out.MaxGeneration = max(res.MaxGeneration, c.GetGeneration())
	}
	return out
}

// fencedCommit is G4 and G6. An idempotency key seen before returns its first
// accepted outcome (so a retry after an unknown outcome learns it was
// accepted, even if the lease has lapsed since). Otherwise the generation
// must be the lease's current, live one and not below the resource's highest.
// Only accepted commits are recorded: a refused key stays free for the
// rightful holder.
func (s *state) fencedCommit(now int64, c *fsmv1.FencedCommit) any {
	verdict, res := s.fenceCheck(now, c)
	if verdict != nil {
		return verdict
	}
	n := Resource{Name: c.GetResource(), LeaseName: c.GetLeaseName(), JobID: c.GetJobId()}
	if n.JobID != 0 {
		n.LeaseName = JobTokenName(n.JobID)
	}
	if res != nil {
		n = *res
	}
	n.MaxGeneration = c.GetGeneration()
	n.LastCommitAt = now
	n.LastIdempotencyKey = c.GetIdempotencyKey()
	n.Commits++
	s.resources.ReplaceOrInsert(&n)
	if res == nil {
		s.indexJobResource(&n)
	}
	s.emitResource(&n)
	if c.GetIdempotencyKey() != "" {
		s.idem.ReplaceOrInsert(&Idempotency{Resource: n.Name, Key: c.GetIdempotencyKey(),
			Generation: c.GetGeneration(), Payload: c.GetPayload(), At: now})
		s.idemQ = append(s.idemQ, idemKey{n.Name, c.GetIdempotencyKey()})
	}
	return &CommitResult{Accepted: true, MaxGeneration: n.MaxGeneration, Generation: c.GetGeneration(), Payload: c.GetPayload()}
}
