package fsm

import (
	"fmt"
	"math"
	"sort"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Queue limits (SetQueueLimits, DESIGN.md "Limits"): a queue's
// concurrency (attempts running at once, per queue and per kind) and rate
// (attempts started per second, a token bucket on calendar time). They
// are enforced where attempts start, in FetchJobs: a fetch hands out only
// what the limits allow at its calendar stamp. A running attempt is its
// own permit: its place is taken from the running jobs themselves (the
// queue's count of running jobs, and queueIndex.runningKind), so it is
// given back exactly when the attempt ends — completed, failed,
// cancelled, lapsed at its visibility deadline or ended by max_run —
// and a frozen worker's place is reclaimed only when its attempt lapses,
// after which its token is stale and its writes refused.
//
// The bucket's state (tokens as of a calendar stamp) is in the record and
// changes only in a fetch that takes tokens, by integer arithmetic from
// the command's calendar stamp, so every replica computes the same.

// Limits of the limits (they only grow).
const (
	MaxQueueConcurrency = 1_000_000
	MaxKindLimits       = 64
	MaxRateMilli        = 100_000_000 // 100,000 attempts a second
	MaxRateBurst        = 1_000_000
	MaxRunMs            = 7 * 24 * 3600 * 1000
	// limitScan is how many available jobs of a queue one fetch (or a
	// read of what a fetch could hand out) looks at past jobs whose kind
	// is at its limit: a bound on the cost, deterministic like the rest.
	limitScan     = 1000
	microPerToken = 1_000_000
)

// KindLimit is a concurrency limit for the jobs of one kind in a queue.
type KindLimit struct {
	Kind        string
	Concurrency uint32
}

// QueueLimits is a queue's limits and its rate bucket. Immutable once
// stored; a fetch that takes tokens stores a copy.
type QueueLimits struct {
	Queue       string
	Concurrency uint32      // 0: none
	Kinds       []KindLimit // sorted by kind
	RateMilli   uint32      // attempts per 1000 s; 0: none
	Burst       uint32
	MaxRunMs    int64 // default max_run of the queue's jobs
	UpdatedBy   string
	UpdatedAt   int64
	// TokensMicro is the bucket (millionths of an attempt) as of TokensAt.
	TokensMicro int64
	TokensAt    int64
}

func lessQueueLimits(a, b *QueueLimits) bool { return a.Queue < b.Queue }

// kindLimit is the concurrency limit of kind, or 0.
func (l *QueueLimits) kindLimit(kind string) uint32 {
	i := sort.Search(len(l.Kinds), func(i int) bool { return l.Kinds[i].Kind >= kind })
	if i < len(l.Kinds) && l.Kinds[i].Kind == kind {
		return l.Kinds[i].Concurrency
	}
	return 0
}

// Tokens is the bucket at calendar time cal, in millionths of an attempt
// (math.MaxInt64 without a rate): refilled by RateMilli millionths per ms
// since TokensAt, up to Burst attempts.
func (l *QueueLimits) Tokens(cal int64) int64 {
	if l.RateMilli == 0 {
		return math.MaxInt64
	}
	full := int64(l.Burst) * microPerToken
	elapsed := max(0, cal-l.TokensAt)
	rate := int64(l.RateMilli)
	if l.TokensMicro >= full || elapsed >= (full-l.TokensMicro+rate-1)/rate {
		return full
	}
	return l.TokensMicro + elapsed*rate
}

// nextToken is when the bucket holds a whole attempt again, from cal.
func (l *QueueLimits) nextToken(cal int64) int64 {
	t := l.Tokens(cal)
	if t >= microPerToken {
		return cal
	}
	rate := int64(l.RateMilli)
	return max(cal, l.TokensAt) + (microPerToken-t+rate-1)/rate
}

// CheckQueueLimits is the check of a limits spec: the field (the API's
// name) and what is wrong, or "".
func CheckQueueLimits(sp *fsmv1.QueueLimitsSpec) (field, problem string) {
	switch {
	case sp.GetConcurrency() > MaxQueueConcurrency:
		return "concurrency", fmt.Sprintf("%d is over the limit of %d", sp.GetConcurrency(), MaxQueueConcurrency)
	case len(sp.GetKinds()) > MaxKindLimits:
		return "kind_concurrency", fmt.Sprintf("%d kinds; the limit is %d", len(sp.GetKinds()), MaxKindLimits)
	case sp.GetRateMilli() > MaxRateMilli:
		return "rate", fmt.Sprintf("%d/1000 s is over the limit of %d/s", sp.GetRateMilli(), MaxRateMilli/1000)
	case sp.GetRateMilli() > 0 && (sp.GetBurst() < 1 || sp.GetBurst() > MaxRateBurst):
		return "burst", fmt.Sprintf("%d is outside [1, %d]", sp.GetBurst(), MaxRateBurst)
	case sp.GetMaxRunMs() < 0 || sp.GetMaxRunMs() > MaxRunMs:
		return "max_run", fmt.Sprintf("%s is outside [0s, %s]", Dur(sp.GetMaxRunMs()), Dur(MaxRunMs))
	}
	for i, k := range sp.GetKinds() {
		switch {
		case k.GetKind() == "" || len(k.GetKind()) > MaxJobKindBytes || TextProblem(k.GetKind()) != "":
			return "kind_concurrency", fmt.Sprintf("kind %q: 1 to %d bytes of UTF-8 without control characters", k.GetKind(), MaxJobKindBytes)
		case k.GetConcurrency() < 1 || k.GetConcurrency() > MaxQueueConcurrency:
			return "kind_concurrency", fmt.Sprintf("kind %q: %d is outside [1, %d]", k.GetKind(), k.GetConcurrency(), MaxQueueConcurrency)
		case i > 0 && sp.GetKinds()[i-1].GetKind() >= k.GetKind():
			return "kind_concurrency", "kinds must be sorted and unique"
		}
	}
	return "", ""
}

// setQueueLimits sets or clears a queue's limits. A new rate starts with
// a full bucket.
func (s *state) setQueueLimits(cal int64, c *fsmv1.SetQueueLimits) any {
	q := c.GetQueue()
	if q == "" || len(q) > MaxQueueNameBytes {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "queue"}, "queue must be 1 to %d bytes", MaxQueueNameBytes)
	}
	sp := c.GetLimits()
	if sp == nil {
		s.qlimits.Delete(&QueueLimits{Queue: q})
		return (*QueueLimits)(nil)
	}
	if field, problem := CheckQueueLimits(sp); field != "" {
		return reject(coorderr.InvalidArgument, map[string]string{"field": field}, "%s %s", field, problem)
	}
	rec := &QueueLimits{Queue: q, Concurrency: sp.GetConcurrency(), RateMilli: sp.GetRateMilli(), Burst: sp.GetBurst(),
		MaxRunMs: sp.GetMaxRunMs(), UpdatedBy: c.GetIdentity(), UpdatedAt: cal, TokensAt: cal}
	rec.TokensMicro = int64(rec.Burst) * microPerToken
	for _, k := range sp.GetKinds() {
		rec.Kinds = append(rec.Kinds, KindLimit{k.GetKind(), k.GetConcurrency()})
	}
	s.qlimits.ReplaceOrInsert(rec)
	cp := *rec
	return &cp
}

func (s *state) queueLimits(queue string) *QueueLimits {
	if s.qlimits.Len() == 0 {
		return nil
	}
	return find(s.qlimits, &QueueLimits{Queue: queue})
}

// fetchGate is what the limits of one queue let one fetch hand out,
// counted down as it does.
type fetchGate struct {
	lim      *QueueLimits
	room     int64 // attempts the concurrency limit lets start
	tokens   int64 // the bucket, millionths
	used     int64 // tokens taken
	kindRoom map[string]int64
	cursor   availKey
	scanned  int
	job      *QueueJob // the job next returned, when it looked it up (kind limits)
	head     availKey
	found    bool
	visit    func(availKey) bool
}

// gate is the fetch gate of queue at cal, or nil when it has no limits.
func (s *state) gate(queue string, cal int64) *fetchGate {
	l := s.queueLimits(queue)
	if l == nil {
		return nil
	}
	g := &fetchGate{lim: l, room: math.MaxInt64, tokens: l.Tokens(cal), cursor: availKey{queue: queue, prio: math.MaxInt32}}
	if l.Concurrency > 0 {
		running := int64(0)
		if c := s.qidx.stats[queue]; c != nil {
			running = int64(c.states[JobRunning])
		}
		g.room = max(0, int64(l.Concurrency)-running)
	}
	return g
}

// next is the next available job of the gate's queue the limits let
// start, or false. A job whose kind is at its limit is passed over (at
// most limitScan of them).
func (g *fetchGate) next(s *state) (availKey, bool) {
	if g.room <= 0 || (g.lim.RateMilli > 0 && g.tokens < microPerToken) {
		return availKey{}, false
	}
	g.job, g.found = nil, false
	if g.visit == nil { // one closure per fetch, not one per job
		g.visit = func(a availKey) bool {
			if a.queue != g.lim.Queue {
				return false
			}
			if len(g.lim.Kinds) > 0 {
				j := s.qjob(a.id)
				if lim := g.lim.kindLimit(j.Kind); lim > 0 && g.roomOf(s, j.Kind, lim) <= 0 {
					g.scanned++
					return g.scanned < limitScan
				}
				g.job = j
			}
			g.head, g.found = a, true
			return false
		}
	}
	s.qidx.avail.AscendGreaterOrEqual(g.cursor, g.visit)
	if g.found {
		g.cursor = g.head
		g.cursor.id++ // the next key after head
	}
	return g.head, g.found
}

func (g *fetchGate) roomOf(s *state, kind string, lim uint32) int64 {
	if r, ok := g.kindRoom[kind]; ok {
		return r
	}
	if g.kindRoom == nil {
		g.kindRoom = map[string]int64{}
	}
	r := max(0, int64(lim)-int64(s.qidx.runningKind[uniqueRef{g.lim.Queue, kind}]))
	g.kindRoom[kind] = r
	return r
}

// took counts a job the fetch handed out.
func (g *fetchGate) took(j *QueueJob) {
	g.room--
	if g.lim.RateMilli > 0 {
		g.tokens -= microPerToken
		g.used += microPerToken
	}
	if r, ok := g.kindRoom[j.Kind]; ok { // next asked roomOf for every limited kind
		g.kindRoom[j.Kind] = r - 1
	}
}

// settle stores the bucket after a fetch that took tokens.
func (s *state) settleGate(g *fetchGate, cal int64) {
	if g == nil || g.used == 0 {
		return
	}
	n := *g.lim
	n.TokensMicro, n.TokensAt = g.lim.Tokens(cal)-g.used, max(cal, g.lim.TokensAt)
	s.qlimits.ReplaceOrInsert(&n)
}

// countRunningKind keeps queueIndex.runningKind: the running jobs per
// (queue, kind), what kind limits judge.
func (q *queueIndex) countRunningKind(j *QueueJob, add bool) {
	k := uniqueRef{j.Queue, j.Kind}
	if add {
		q.runningKind[k]++
	} else if q.runningKind[k]--; q.runningKind[k] <= 0 {
		delete(q.runningKind, k)
	}
}

// Fetchable is how many of queue's available jobs (without a target) a
// fetch at calendar time cal could hand out, at most max: the available
// jobs, or with limits what the limits allow. For the leader's long polls.
func (f *FSM) Fetchable(queue string, cal int64, limit uint64) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.fetchable(queue, cal, limit)
}

func (s *state) fetchable(queue string, cal int64, limit uint64) uint64 {
	c := s.qidx.stats[queue]
	if c == nil || !s.qidx.fetchable(queue) { // a paused queue hands nothing out
		return 0
	}
	avail := min(limit, c.states[JobAvailable]-c.deliveries)
	g := s.gate(queue, cal)
	if g == nil {
		return avail
	}
	if len(g.lim.Kinds) == 0 { // no job needs looking at
		n := min(avail, uint64(g.room))
		if g.lim.RateMilli > 0 {
			n = min(n, uint64(max(0, g.tokens/microPerToken)))
		}
		return n
	}
	n := uint64(0)
	for n < avail {
		k, ok := g.next(s)
		if !ok {
			break
		}
		n++
		if g.job == nil {
			g.job = s.qjob(k.id)
		}
		g.took(g.job)
	}
	return n
}

// QueueLimitsOf lists the queues' limits by queue name (queue "": all),
// their buckets as stored (Tokens(cal) is the bucket at cal).
func (f *FSM) QueueLimitsOf(queue string) []QueueLimits {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []QueueLimits
	f.st.qlimits.Ascend(func(l *QueueLimits) bool {
		if queue == "" || l.Queue == queue {
			out = append(out, *l)
		}
		return true
	})
	return out
}

// nextRefill is the earliest calendar time a queue with limits, available
// jobs and room to run them, but an empty bucket, has a token again: when
// the leader must look at its long polls again though nothing was
// committed.
func (s *state) nextRefill() (int64, bool) {
	var at int64
	ok := false
	s.qlimits.Ascend(func(l *QueueLimits) bool {
		if l.RateMilli == 0 || l.Tokens(s.calendarTime) >= microPerToken {
			return true
		}
		c := s.qidx.stats[l.Queue]
		if c == nil || c.states[JobAvailable] <= c.deliveries || !s.qidx.fetchable(l.Queue) {
			return true
		}
		if l.Concurrency > 0 && c.states[JobRunning] >= uint64(l.Concurrency) {
			return true
		}
		if t := l.nextToken(s.calendarTime); !ok || t < at {
			at, ok = t, true
		}
		return true
	})
	return at, ok
}

func queueLimitsRecord(l *QueueLimits) *fsmv1.QueueLimitsRecord {
	r := &fsmv1.QueueLimitsRecord{Queue: l.Queue, UpdatedBy: l.UpdatedBy, UpdatedAtMs: l.UpdatedAt, TokensMicro: l.TokensMicro, TokensAtMs: l.TokensAt,
		Limits: &fsmv1.QueueLimitsSpec{Concurrency: l.Concurrency, RateMilli: l.RateMilli, Burst: l.Burst, MaxRunMs: l.MaxRunMs}}
	for _, k := range l.Kinds {
		r.Limits.Kinds = append(r.Limits.Kinds, &fsmv1.KindLimit{Kind: k.Kind, Concurrency: k.Concurrency})
	}
	return r
}

func queueLimitsFromRecord(r *fsmv1.QueueLimitsRecord) (*QueueLimits, error) {
	sp := r.GetLimits()
	if r.GetQueue() == "" {
		return nil, fmt.Errorf("snapshot: queue limits without a queue")
	}
	if field, problem := CheckQueueLimits(sp); field != "" {
		return nil, fmt.Errorf("snapshot: queue %q limits: %s %s", r.GetQueue(), field, problem)
	}
	l := &QueueLimits{Queue: r.GetQueue(), Concurrency: sp.GetConcurrency(), RateMilli: sp.GetRateMilli(), Burst: sp.GetBurst(),
		MaxRunMs: sp.GetMaxRunMs(), UpdatedBy: r.GetUpdatedBy(), UpdatedAt: r.GetUpdatedAtMs(), TokensMicro: r.GetTokensMicro(), TokensAt: r.GetTokensAtMs()}
	for _, k := range sp.GetKinds() {
		l.Kinds = append(l.Kinds, KindLimit{k.GetKind(), k.GetConcurrency()})
	}
	return l, nil
}

// gates are the fetch gates of queues (nil for a queue without limits;
// nil altogether when no queue has any).
func (s *state) gates(queues []string, cal int64) []*fetchGate {
	if s.qlimits.Len() == 0 {
		return make([]*fetchGate, len(queues))
	}
	out := make([]*fetchGate, len(queues))
	for i, q := range queues {
		out[i] = s.gate(q, cal)
	}
	return out
}
