package fsm

import (
	"cmp"

	"github.com/google/btree"
)

// Resources fenced by queue jobs go with their jobs: a FencedCommit with a
// job attempt's token makes the resource the job's (JobID), and no other
// job may write it while the job is retained. When retention prunes the
// job, its resources are deleted in the same command, so schedules that
// fence one resource per occurrence (client/periodic: "name/<window>") do not
// grow the state forever. A late commit of the pruned job is refused
// (JOB_NOT_FOUND); the name is free again for another job. Idempotency
// records keep their own retention, so a retry of a key still answers its
// first outcome until then.

// jobResKey indexes job-fenced resources by job (derived from resources;
// rebuilt after a restore).
type jobResKey struct {
	job      uint64
	resource string
}

func lessJobRes(a, b jobResKey) bool {
	return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.resource, b.resource)) < 0
}

func newJobResIndex() *btree.BTreeG[jobResKey] { return btree.NewG(btreeDegree, lessJobRes) }

// indexJobResource notes that job fences resource.
func (s *state) indexJobResource(r *Resource) {
	if r.JobID != 0 {
		s.jobRes.ReplaceOrInsert(jobResKey{r.JobID, r.Name})
	}
}

// deleteJobResources deletes the resources job fences and reports how
// many there were.
func (s *state) deleteJobResources(job uint64) int {
	var names []string
	s.jobRes.AscendGreaterOrEqual(jobResKey{job: job}, func(k jobResKey) bool {
		if k.job != job {
			return false
		}
		names = append(names, k.resource)
		return true
	})
	for _, name := range names {
		s.jobRes.Delete(jobResKey{job, name})
		if r := s.resource(name); r != nil && r.JobID == job {
			s.resources.Delete(r)
			s.emitResourceDelete(r)
		}
	}
	return len(names)
}

// rebuildJobResources derives the index after a restore.
func (s *state) rebuildJobResources() {
	s.jobRes = newJobResIndex()
	s.resources.Ascend(func(r *Resource) bool {
		s.indexJobResource(r)
		return true
	})
}
