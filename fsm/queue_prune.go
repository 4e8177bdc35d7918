package fsm

import "github.com/google/btree"

// pruneJobs applies the queue's retention: finished jobs (succeeded,
// cancelled, dead) that finished before cutoff (calendar ms; 0: none by
// age) go, and then, while more than maxFinished (0: no limit) finished
// jobs remain, the oldest succeeded job goes, or when none is left the
// oldest cancelled or dead one: failures outlive successes under the count
// limit, because they are what people come back to look at. A pruned job
// releases its unique key. Each walks a finish-time index from its oldest
// entry, so a prune costs what it removes.
func (s *state) pruneJobs(cutoff int64, maxFinished uint64) int {
	n := 0
	drop := func(t *btree.BTreeG[timeKey]) {
		k, _ := t.Min()
		s.deleteJob(s.qjob(k.id))
		n++
	}
	if cutoff > 0 {
		for _, t := range []*btree.BTreeG[timeKey]{s.qidx.finOK, s.qidx.finOther} {
			for k, ok := t.Min(); ok && k.at < cutoff; k, ok = t.Min() {
				drop(t)
			}
		}
	}
	if maxFinished > 0 {
		for uint64(s.qidx.finOK.Len()+s.qidx.finOther.Len()) > maxFinished {
			if s.qidx.finOK.Len() > 0 {
				drop(s.qidx.finOK)
			} else {
				drop(s.qidx.finOther)
			}
		}
	}
	return n
}
