package fsm

import (
	"strconv"
	"strings"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// A job attempt is a fencing token like a lease generation: FencedCommit
// with job_id set (and no lease_name) names the job, and its generation is
// the attempt number. In text the token is "job:<id>:<attempt>", which
// reads as lease_name "job:<id>" and generation <attempt> to the existing
// "lease_name:generation" codec; the API layer maps a lease name of that
// form to job_id (and refuses to acquire leases named "job:<digits>").

// JobTokenName is the lease-name form of job id's attempt tokens: "job:<id>".
func JobTokenName(id uint64) string { return "job:" + strconv.FormatUint(id, 10) }

// ParseJobTokenName reports whether name is "job:<id>" with a canonical
// decimal id >= 1 (no sign, no leading zeros), and returns the id.
func ParseJobTokenName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, "job:")
	if !ok || digits == "" || digits[0] == '0' {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return id, true
}

// jobFenceCheck is G4 for a job attempt: the attempt must be the job's
// live attempt at this command's calendar time (a lapsed, cancelled or
// finished attempt is refused like an expired or released lease) and not
// below the highest attempt the resource accepted. A resource is bound to
// the first job (or lease) that fenced it: attempts of different jobs are
// not comparable. A nil verdict accepts.
func (s *state) jobFenceCheck(c *fsmv1.FencedCommit, res *Resource) any {
	j := s.qjob(c.GetJobId())
	if j == nil {
		return JobNotFound(c.GetJobId())
	}
	gen := c.GetGeneration()
	if gen == 0 || gen > uint64(j.Attempts) {
		return reject(coorderr.AttemptLost, attemptMeta(j, 0), "job %d has no attempt %d (its last is %d)", j.ID, gen, j.Attempts)
	}
	n := uint32(gen)
	meta := attemptMeta(j, n)
	if n < j.Attempts {
		return reject(coorderr.StaleToken, meta, "token %s:%d is not current (the job is at attempt %d)", JobTokenName(j.ID), n, j.Attempts)
	}
	if cur, ok := j.Current(); !ok || cur.Number != n {
		return attemptOver(j, n, j.attempt(n), meta)
	}
	if res != nil && res.JobID != j.ID {
		return reject(coorderr.ResourceLeaseMismatch, map[string]string{"resource_lease": res.LeaseName},
			"resource %q is fenced by %q, not %q", res.Name, res.LeaseName, JobTokenName(j.ID))
	}
	if res != nil && gen < res.MaxGeneration {
		return reject(coorderr.StaleToken, map[string]string{"max_generation": strconv.FormatUint(res.MaxGeneration, 10)},
			"token %d is below the highest accepted for %q (%d)", gen, res.Name, res.MaxGeneration)
	}
	return nil
}
