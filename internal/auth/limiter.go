package auth

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits are per-identity caps; zero means unlimited. DefaultLimits are
// coordd's defaults; docs/security.md ("Limits") says which are judged
// where.
type Limits struct {
	// LeasesPerIdentity caps the live leases one identity holds (enforced
	// in the FSM, exactly, as Acquire's max_live_leases).
	LeasesPerIdentity uint32
	// RequestsPerSecond and Burst rate-limit calls (and KeepAlive stream
	// opens) per identity on the node a call enters. Excess calls are
	// refused at once, never queued.
	RequestsPerSecond float64
	Burst             int
	// KeepAliveStreams caps open KeepAlive streams per identity on a node.
	KeepAliveStreams int
	// WaitingAcquires caps Acquire calls with wait queued per identity on
	// the leader (each holds a call open until it is granted).
	WaitingAcquires int
	// LiveJobsPerIdentity caps the queue jobs one identity submitted that
	// are not final (enforced in the FSM, exactly, as SubmitJobs'
	// max_live_jobs).
	LiveJobsPerIdentity uint32
	// SchedulesPerIdentity caps the schedules one identity created that are
	// not deleted (enforced in the FSM, exactly, as PutSchedule's
	// max_schedules).
	SchedulesPerIdentity uint32
	// JobBytesPerSecond rate-limits the job args bytes one identity submits
	// (Submit, and PutSchedule's template), judged on the leader before it
	// proposes: a token bucket of burst max(rate, MinJobBytesBurst). It
	// also caps the args bytes per second an identity's schedules make at
	// their peak rates (ScheduleRates).
	JobBytesPerSecond int64
	// ScheduleJobsPerSecond caps the sum of the peak rates of jobs (one per
	// shortest interval) of the schedules one identity created, judged on
	// the leader at each put (ScheduleRates).
	ScheduleJobsPerSecond float64
}

// MinJobBytesBurst is the smallest burst of JobBytesPerSecond: a request
// of the largest size (a 4 MiB message) always fits an idle bucket.
const MinJobBytesBurst = 4 << 20

// DefaultLimits are coordd's defaults (its --limit-* flags): the call rate,
// leases, streams and waits unlimited; quotas on jobs and schedules that
// a normal user does not reach.
func DefaultLimits() Limits {
	return Limits{LiveJobsPerIdentity: 1_000_000, SchedulesPerIdentity: 1_000, JobBytesPerSecond: 2 << 20, ScheduleJobsPerSecond: 100}
}

// Limiter holds the per-identity rate limiters and counts of one node.
type Limiter struct {
	cfg     Limits
	mu      sync.Mutex
	rates   map[string]*rate.Limiter
	bytes   map[string]*rate.Limiter
	streams map[string]int
	waits   map[string]int
}

// NewLimiter returns a limiter enforcing cfg.
func NewLimiter(cfg Limits) *Limiter {
	return &Limiter{cfg: cfg, rates: map[string]*rate.Limiter{}, bytes: map[string]*rate.Limiter{}, streams: map[string]int{}, waits: map[string]int{}}
}

// bucket returns identity's token bucket in m, made on first use.
func (l *Limiter) bucket(m map[string]*rate.Limiter, identity string, r float64, burst int) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := m[identity]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(r), burst)
		m[identity] = b
	}
	return b
}

// AllowJobBytes takes n job args bytes of identity from its bucket, or
// refuses them (JobBytesLimited); nothing is taken on a refusal. Like the
// quotas on jobs and schedules it does not apply to "" (TLS off: no
// tenants to keep apart).
func (l *Limiter) AllowJobBytes(identity string, n int) error {
	r := l.cfg.JobBytesPerSecond
	if r <= 0 || n == 0 || identity == "" {
		return nil
	}
	b := l.bucket(l.bytes, identity, float64(r), int(max(r, MinJobBytesBurst)))
	if b.AllowN(time.Now(), n) {
		return nil
	}
	return &Error{Kind: JobBytesLimited,
		Msg:  fmt.Sprintf("identity %q is over its rate of job args bytes (%d bytes/s, burst %d); retry later", identity, r, b.Burst()),
		Meta: map[string]string{"identity": identity, "limit": "job_bytes"}}
}

// ScheduleRates refuses (ScheduleQuota) the schedules of identity, as a put
// would leave them, when their peak rates (jobsPerSec: the sum of one job
// per shortest interval; bytesPerSec: the same weighted by each template's
// args bytes) are over ScheduleJobsPerSecond or JobBytesPerSecond.
func (l *Limiter) ScheduleRates(identity string, jobsPerSec, bytesPerSec float64) error {
	refuse := func(quota string, limit, got float64, unit string) error {
		return &Error{Kind: ScheduleQuota,
			Msg: fmt.Sprintf("identity %q's schedules would make %.4g %s at their peak, over its limit of %.4g; nothing changed",
				identity, got, unit, limit),
			Meta: map[string]string{"identity": identity, "quota": quota, "limit": strconv.FormatFloat(limit, 'g', -1, 64)}}
	}
	if identity == "" {
		return nil
	}
	if r := l.cfg.ScheduleJobsPerSecond; r > 0 && jobsPerSec > r {
		return refuse("jobs_rate", r, jobsPerSec, "jobs/s")
	}
	if r := float64(l.cfg.JobBytesPerSecond); r > 0 && bytesPerSec > r {
		return refuse("bytes_rate", r, bytesPerSec, "args bytes/s")
	}
	return nil
}

// Allow takes one call of identity from its token bucket, or refuses it
// (RateLimited).
func (l *Limiter) Allow(identity string) error {
	if l.cfg.RequestsPerSecond <= 0 {
		return nil
	}
	burst := l.cfg.Burst
	if burst <= 0 {
		burst = max(1, int(l.cfg.RequestsPerSecond))
	}
	r := l.bucket(l.rates, identity, l.cfg.RequestsPerSecond, burst)
	if r.Allow() {
		return nil
	}
	return &Error{Kind: RateLimited,
		Msg:  fmt.Sprintf("identity %q is over its request rate (%g/s, burst %d); retry later", identity, l.cfg.RequestsPerSecond, r.Burst()),
		Meta: map[string]string{"identity": identity}}
}

// OpenStream counts one more KeepAlive stream of identity (StreamLimit);
// the returned function gives it back.
func (l *Limiter) OpenStream(identity string) (func(), error) {
	return l.hold(l.streams, l.cfg.KeepAliveStreams, identity, StreamLimit, "KeepAlive streams open on this node")
}

// StartWait counts one more waiting Acquire of identity (WaitLimit); the
// returned function gives it back.
func (l *Limiter) StartWait(identity string) (func(), error) {
	return l.hold(l.waits, l.cfg.WaitingAcquires, identity, WaitLimit, "waiting Acquire calls")
}

// hold counts one more open thing of identity in counts, up to limit (0:
// unlimited); the returned function gives it back.
func (l *Limiter) hold(counts map[string]int, limit int, identity string, kind Kind, what string) (func(), error) {
	if limit <= 0 {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if counts[identity] >= limit {
		return nil, &Error{Kind: kind, Msg: fmt.Sprintf("identity %q already has %d %s, its limit", identity, limit, what),
			Meta: map[string]string{"identity": identity}}
	}
	counts[identity]++
	return func() {
		l.mu.Lock()
		if counts[identity]--; counts[identity] == 0 {
			delete(counts, identity)
		}
		l.mu.Unlock()
	}, nil
}
