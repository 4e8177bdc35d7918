package fsm

import (
	"strconv"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// claimWindow claims an incomplete window for the current lease holder.
// Each distinct holder (lease, owner, generation) counts one attempt; a
// repeat by the same holder is the same attempt. The holder is judged at
// lease time now; the window's times are calendar time cal.
func (s *state) claimWindow(now, cal int64, c *fsmv1.ClaimWindow) any {
	if c.GetJob() == "" || c.GetWindow() == "" {
		return reject(coorderr.InvalidArgument, nil, "claim needs a job and a window")
	}
	if w := s.window(c.GetJob(), c.GetWindow()); w != nil && w.Completed {
		return &ClaimResult{Claimed: false, Window: *w}
	}
	if _, rej := s.checkHolder(now, c.GetLeaseName(), c.GetOwner(), c.GetIdentity(), c.GetGeneration()); rej != nil {
		return rej
	}
	w := s.window(c.GetJob(), c.GetWindow())
	var n Window
	switch {
	case w == nil:
		n = Window{Ledger: c.GetJob(), Window: c.GetWindow(), FirstStartedAt: cal}
	case w.claimedBy(c.GetLeaseName(), c.GetOwner(), c.GetGeneration()):
		return &ClaimResult{Claimed: true, Window: *w}
	default:
		n = *w
	}
	n.Attempts++
	n.LeaseName, n.Owner, n.Generation = c.GetLeaseName(), c.GetOwner(), c.GetGeneration()
	n.StartedAt = cal
	s.windows.ReplaceOrInsert(&n)
	s.emitWindow(EventPut, &n)
	return &ClaimResult{Claimed: true, Window: n}
}

// completeWindow completes a window claimed by the caller, at most once (G5).
// A repeat by the holder that completed it returns the record.
// The holder is judged at lease time now; the completion is stamped at
// calendar time cal.
func (s *state) completeWindow(now, cal int64, c *fsmv1.CompleteWindow) any {
	w := s.window(c.GetJob(), c.GetWindow())
	if w != nil && w.Completed {
		if w.claimedBy(c.GetLeaseName(), c.GetOwner(), c.GetGeneration()) {
			return s.releaseAfterComplete(now, cal, c, &WindowResult{Window: *w})
		}
		return reject(coorderr.WindowCompleted, windowMeta(w),
			"window %s/%s was completed by %q generation %d", w.Ledger, w.Window, w.Owner, w.Generation)
	}
	if _, rej := s.checkHolder(now, c.GetLeaseName(), c.GetOwner(), c.GetIdentity(), c.GetGeneration()); rej != nil {
		return rej
	}
	if w == nil || !w.claimedBy(c.GetLeaseName(), c.GetOwner(), c.GetGeneration()) {
		return reject(coorderr.WindowNotClaimed, nil,
			"window %s/%s is not claimed by lease %q generation %d", c.GetJob(), c.GetWindow(), c.GetLeaseName(), c.GetGeneration())
	}
	n := *w
	n.Completed = true
	n.CompletedAt = cal
	n.Result = c.GetResult()
	s.windows.ReplaceOrInsert(&n)
	s.emitWindow(EventPut, &n)
	s.completedQ = append(s.completedQ, windowKey{n.Ledger, n.Window})
	s.noteCompletion(&n)
	return s.releaseAfterComplete(now, cal, c, &WindowResult{Window: n})
}

// releaseAfterComplete releases the lease when the CompleteWindow asked for
// it. The completion stands whatever the release finds (a retry whose first
// call released already, a lease that expired since).
func (s *state) releaseAfterComplete(now, cal int64, c *fsmv1.CompleteWindow, res *WindowResult) *WindowResult {
	if !c.GetRelease() {
		return res
	}
	if r, ok := s.release(now, cal, &fsmv1.Release{Name: c.GetLeaseName(), Owner: c.GetOwner(), Generation: c.GetGeneration(),
		Identity: c.GetIdentity()}).(*ReleaseResult); ok {
		res.Released = r.Released
	}
	return res
}

func windowMeta(w *Window) map[string]string {
	return map[string]string{
		"completed_by":         w.Owner,
		"completed_generation": strconv.FormatUint(w.Generation, 10),
		"completed_at_ms":      strconv.FormatInt(w.CompletedAt, 10),
	}
}
