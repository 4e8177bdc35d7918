package fsm

import (
	"cmp"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/btree"

	"github.com/coordd/coordd/internal/jsonvalid"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// The job queue: one-off and delayed jobs handed to workers as fenced
// attempts. Time here is calendar time (Command.calendar_ms); see DESIGN.md
// "Jobs queue". Files: queue.go (records, limits, indexes), queue_cmds.go
// (commands), queue_reads.go, queue_attempt_token.go, queue_snapshot.go,
// queue_prune.go.

// Limits of the queue. They are part of the log's meaning: a replica
// replaying an entry must judge it as the leader did, so they only ever
// grow, never shrink.
const (
	MaxSubmitBatch       = 1000
	MaxJobArgsBytes      = 64 << 10
	MaxJobResultBytes    = 64 << 10
	MaxJobErrorBytes     = 4 << 10 // longer errors are cut, not refused
	MaxQueueNameBytes    = 128
	MaxJobKindBytes      = 256
	MaxUniqueKeyBytes    = 256
	MaxWorkerIDBytes     = 256
	MaxJobLabels         = 16
	MaxLabelKeyBytes     = 64
	MaxLabelValueBytes   = 256
	MaxJobPriority       = 100
	MinJobPriority       = -100
	MaxJobAttempts       = 100
	MaxRunAheadMs        = 366 * 24 * 3600 * 1000
	MaxVisibilityMs      = 24 * 3600 * 1000
	MaxBackoffMs         = 30 * 24 * 3600 * 1000
	MaxBackoffPermille   = 100_000 // a factor of 100
	MaxFetchBatch        = 1000
	MaxFetchQueues       = 32
	MaxJobBatch          = 1000 // heartbeat, complete, fail, cancel, retry
	MaxAttemptRecords    = 32   // attempts kept per job (older ones are dropped; numbers keep counting)
	maxJitterPPM         = 1_000_000
	DefaultQueue         = "default"
	DefaultMaxAttempts   = 25
	DefaultVisibilityMs  = 30_000
	DefaultBackoffMs     = 1_000
	DefaultBackoffMaxMs  = 3_600_000
	DefaultBackoffFactor = 2000 // permille: doubles
	// DefaultJobRetentionMs and DefaultMaxFinishedJobs are the leader's
	// defaults for Prune (see DESIGN.md for why).
	DefaultJobRetentionMs  = 7 * 24 * 3600 * 1000
	DefaultMaxFinishedJobs = 1_000_000
)

// JobState is where a queued job is. Values are fsmv1.JobState's, named
// in enums_gen.go (JobScheduled ... JobDead).
type JobState uint8

// numJobStates sizes arrays indexed by state.
const numJobStates = int(JobDead) + 1

// Final reports whether the state is an end state (only Retry leaves
// cancelled and dead; nothing leaves succeeded).
func (s JobState) Final() bool { return s == JobSucceeded || s == JobCancelled || s == JobDead }

func (s JobState) String() string {
	return fsmv1.JobState(s).String()[len("JOB_STATE_"):]
}

// AttemptOutcome is how an attempt ended (or Running). Values are
// fsmv1.AttemptOutcome's, named in enums_gen.go.
type AttemptOutcome uint8

func (o AttemptOutcome) String() string {
	return fsmv1.AttemptOutcome(o).String()[len("ATTEMPT_OUTCOME_"):]
}

// Label is a job label; a job's labels are sorted by key.
type Label struct{ Key, Value string }

// QueueJob is a queued job. Records are immutable once stored (snapshots
// and readers share them); a change stores a modified copy. Times are
// calendar ms. Field order keeps the struct at 240 bytes.
type QueueJob struct {
	ID           uint64
	RunAt        int64 // due time: available once the calendar reaches it
	BackoffMs    int64 // initial
	BackoffMaxMs int64
	VisibilityMs int64
	MaxRunMs     int64 // 0: the queue's default at each claim, else none
	CreatedAt    int64
	UpdatedAt    int64
	FinishedAt   int64 // 0 unless final
	Queue        string
	Kind         string
	UniqueKey    string
	Identity     string // who submitted it
	Args         []byte
	Labels       []Label
	// Target, when set, makes the job a delivery (queue_target.go); the
	// message is shared, never written.
	Target *fsmv1.HttpTarget
	// TraceParent and TraceState are the job's W3C trace context
	// (docs/tracing.md), opaque here; empty: none.
	TraceParent, TraceState string
	// Log holds the last MaxAttemptRecords attempts, oldest first; while
	// running, the last one is the live attempt.
	Log             []Attempt
	Priority        int32
	MaxAttempts     int32
	Attempts        uint32 // attempts handed out: the current token
	BackoffPermille uint32
	State           JobState
}

// Attempt is one hand-out of a job to a worker. Its token is (job id,
// Number): numbers only grow per job.
type Attempt struct {
	Number     uint32
	Outcome    AttemptOutcome
	Heartbeats uint32
	// DeliveryStatus and DeliveryLatencyMs: an HTTP delivery's response
	// status and latency (0 for a pull worker's attempt).
	DeliveryStatus    uint32
	StartedAt         int64
	Deadline          int64 // visibility deadline; live while > calendar
	FinishedAt        int64
	WorkerID          string
	Identity          string // the fetcher's: only it may heartbeat, complete or fail
	Error             string
	Result            []byte
	DeliveryLatencyMs int64
	// RunUntil: when max_run ends the attempt (0: no bound); Deadline
	// never passes it.
	RunUntil int64
}

// Current is the live attempt of a running job.
func (j *QueueJob) Current() (*Attempt, bool) {
	if j.State != JobRunning || len(j.Log) == 0 {
		return nil, false
	}
	return &j.Log[len(j.Log)-1], true
}

// label returns the value of j's label key, and whether j has it.
func (j *QueueJob) label(key string) (string, bool) {
	for _, l := range j.Labels {
		if l.Key == key {
			return l.Value, true
		}
	}
	return "", false
}

// attempt returns the record of attempt n if it is still kept.
func (j *QueueJob) attempt(n uint32) *Attempt {
	for i := len(j.Log) - 1; i >= 0; i-- {
		if j.Log[i].Number == n {
			return &j.Log[i]
		}
		if j.Log[i].Number < n {
			break
		}
	}
	return nil
}

// withLog returns a copy of j whose log is a private copy (so the stored
// record's log is never written). The copy is exactly as long as the log:
// a finished job keeps it for its whole retention, and room for an
// attempt that never comes would cost an Attempt (128 bytes) per job.
// claim makes its own room.
func (j *QueueJob) withLog() *QueueJob {
	n := *j
	if len(j.Log) > 0 {
		n.Log = make([]Attempt, len(j.Log))
		copy(n.Log, j.Log)
	}
	return &n
}

// FillJobDefaults sets the zero fields of a spec to the defaults (the
// server calls it before proposing; the FSM never fills anything in, so
// changing a default never changes how a logged entry replays).
func FillJobDefaults(s *fsmv1.QueueJobSpec) {
	if s.GetQueue() == "" {
		s.Queue = DefaultQueue
	}
	if s.GetMaxAttempts() == 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.GetVisibilityTimeoutMs() == 0 {
		s.VisibilityTimeoutMs = DefaultVisibilityMs
	}
	if s.GetBackoffInitialMs() == 0 && s.GetBackoffMaxMs() == 0 {
		s.BackoffInitialMs, s.BackoffMaxMs = DefaultBackoffMs, DefaultBackoffMaxMs
	}
	if s.GetBackoffMaxMs() == 0 {
		s.BackoffMaxMs = max(s.GetBackoffInitialMs(), DefaultBackoffMaxMs)
	}
	if s.GetBackoffFactorPermille() == 0 {
		s.BackoffFactorPermille = DefaultBackoffFactor
	}
	fillTargetDefaults(s.GetTarget())
}

// JobSpecRules is the version of the job-spec rules CheckJobSpec applies,
// stamped into SubmitJobs and PutSchedule (spec_rules) so that a logged
// entry replays by the rules it was proposed under (the limits only grow):
// 1 added to the FSM's guard what the server alone had checked, the text
// rules and the reserved "coordd." label keys; 2 that args are JSON (or
// empty), as every API shows them; 3 allows a target (checkTarget).
const JobSpecRules = 3

// CheckJobSpec is the one job-spec check: every rule that does not depend
// on time, for a spec with the defaults filled in. The server calls it
// wherever a spec enters (Submit, a schedule's template in PutSchedule, so
// also the HTTP gateway) and the FSM calls it again in its guard. It
// returns the offending field (the API's name) and what is wrong, or ""
// when the spec is valid. The one limit that depends on time, how far
// ahead run_at_ms may be, is CheckRunAhead: judged only at the leader's
// calendar stamp, never at a node's own (possibly stale) view.
func CheckJobSpec(s *fsmv1.QueueJobSpec) (field, problem string) {
	return checkJobSpec(s, JobSpecRules)
}

// checkJobSpec is CheckJobSpec by the rules of version rules (spec_rules):
// 0 leaves out the text rules and the reserved label keys, 1 the JSON
// rule; under 3 a target is refused.
func checkJobSpec(s *fsmv1.QueueJobSpec, rules uint32) (field, problem string) {
	text := rules >= 1
	switch {
	case rules >= 2 && len(s.GetArgs()) > 0 && !jsonvalid.Valid(s.GetArgs()):
		return "args", "must be a JSON value (an object, an array, a string, a number, true, false or null)"
	case s.GetQueue() == "" || len(s.GetQueue()) > MaxQueueNameBytes:
		return "queue", fmt.Sprintf("must be 1 to %d bytes", MaxQueueNameBytes)
	case s.GetKind() == "" || len(s.GetKind()) > MaxJobKindBytes:
		return "kind", fmt.Sprintf("must be 1 to %d bytes", MaxJobKindBytes)
	case len(s.GetArgs()) > MaxJobArgsBytes:
		return "args", fmt.Sprintf("is %d bytes; the limit is %d", len(s.GetArgs()), MaxJobArgsBytes)
	case s.GetRunAtMs() < 0:
		return "run_at", "must not be before 1970"
	case s.GetPriority() < MinJobPriority || s.GetPriority() > MaxJobPriority:
		return "priority", fmt.Sprintf("%d is outside [%d, %d]", s.GetPriority(), MinJobPriority, MaxJobPriority)
	case s.GetMaxAttempts() < 1 || s.GetMaxAttempts() > MaxJobAttempts:
		return "max_attempts", fmt.Sprintf("%d is outside [1, %d]", s.GetMaxAttempts(), MaxJobAttempts)
	case s.GetBackoffMaxMs() < 0 || s.GetBackoffMaxMs() > MaxBackoffMs:
		return "backoff_max", fmt.Sprintf("%s is outside [0s, %s]", Dur(s.GetBackoffMaxMs()), Dur(MaxBackoffMs))
	case s.GetBackoffInitialMs() < 0 || s.GetBackoffInitialMs() > s.GetBackoffMaxMs():
		return "backoff_initial", fmt.Sprintf("%s is outside [0s, backoff_max = %s]", Dur(s.GetBackoffInitialMs()), Dur(s.GetBackoffMaxMs()))
	case s.GetBackoffFactorPermille() < 1000 || s.GetBackoffFactorPermille() > MaxBackoffPermille:
		return "backoff_factor", fmt.Sprintf("%d‰ is outside [1000, %d]‰", s.GetBackoffFactorPermille(), MaxBackoffPermille)
	case s.GetVisibilityTimeoutMs() < 1 || s.GetVisibilityTimeoutMs() > MaxVisibilityMs:
		return "visibility_timeout", fmt.Sprintf("%s is outside [1ms, %s]", Dur(s.GetVisibilityTimeoutMs()), Dur(MaxVisibilityMs))
	case len(s.GetUniqueKey()) > MaxUniqueKeyBytes:
		return "unique_key", fmt.Sprintf("is %d bytes; the limit is %d", len(s.GetUniqueKey()), MaxUniqueKeyBytes)
	case len(s.GetLabels()) > MaxJobLabels:
		return "labels", fmt.Sprintf("%d labels; the limit is %d", len(s.GetLabels()), MaxJobLabels)
	case s.GetMaxRunMs() < 0 || s.GetMaxRunMs() > MaxRunMs:
		return "max_run", fmt.Sprintf("%s is outside [0s, %s]", Dur(s.GetMaxRunMs()), Dur(MaxRunMs))
	}
	if text {
		for _, f := range []struct{ name, v string }{{"queue", s.GetQueue()}, {"kind", s.GetKind()}, {"unique_key", s.GetUniqueKey()}} {
			if problem := TextProblem(f.v); problem != "" {
				return f.name, problem
			}
		}
	}
	seen := make(map[string]struct{}, len(s.GetLabels()))
	for _, l := range s.GetLabels() {
		if l.GetKey() == "" || len(l.GetKey()) > MaxLabelKeyBytes || len(l.GetValue()) > MaxLabelValueBytes {
			return "labels", fmt.Sprintf("label %q: keys are 1 to %d bytes, values up to %d", l.GetKey(), MaxLabelKeyBytes, MaxLabelValueBytes)
		}
		if problem := TextProblem(l.GetKey()); text && problem != "" {
			return "labels", fmt.Sprintf("label key %q %s", l.GetKey(), problem)
		}
		if problem := reservedLabel(l.GetKey()); text && problem != "" {
			return "labels", problem
		}
		if _, dup := seen[l.GetKey()]; dup {
			return "labels", fmt.Sprintf("label %q given twice", l.GetKey())
		}
		seen[l.GetKey()] = struct{}{}
	}
	if t := s.GetTarget(); t != nil {
		return checkTarget(t, rules)
	}
	return "", ""
}

// reservedLabel says what is wrong with a label key a submitter may not
// use (the prefix of the labels schedules give their jobs), or "".
func reservedLabel(key string) string {
	if strings.HasPrefix(key, ReservedLabelPrefix) {
		return fmt.Sprintf("label key %q: the prefix %q is reserved for the jobs schedules make", key, ReservedLabelPrefix)
	}
	return ""
}

// CheckRunAhead is the job-spec limit that depends on time: run_at at most
// MaxRunAheadMs after cal. The FSM judges it at the command's calendar
// stamp (the leader's), so no node refuses a valid job on its own stale
// calendar (a follower's is its last applied stamp: 0 just after a
// restart).
func CheckRunAhead(runAt, cal int64) (field, problem string) {
	if runAt > cal+MaxRunAheadMs {
		return "run_at", fmt.Sprintf("is %s ahead; the limit is %s", Days(runAt-cal), Days(MaxRunAheadMs))
	}
	return "", ""
}

// Days renders a duration in ms as days and the rest ("366 days",
// "400 days 12h0m0s", "366 days 1ms"), exactly.
// Dur writes milliseconds as a duration ("90s", "1h0m0s") in messages.
func Dur[T int64 | int32 | int](ms T) string { return (time.Duration(ms) * time.Millisecond).String() }

func Days(ms int64) string {
	const day = 24 * 3600 * 1000
	out := fmt.Sprintf("%d days", ms/day)
	if ms/day == 1 {
		out = "1 day"
	}
	if rest := ms % day; rest != 0 {
		out += " " + (time.Duration(rest) * time.Millisecond).String()
	}
	return out
}

// TextProblem is the text rule of names, keys and kinds: UTF-8 without
// control characters. It says what is wrong with v, or "".
func TextProblem(v string) string {
	if !utf8.ValidString(v) {
		return "is not valid UTF-8"
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return fmt.Sprintf("contains a control character (%U)", r)
		}
	}
	return ""
}

// sortedLabels copies labels sorted by key (keys are unique: checked).
func sortedLabels(in []*fsmv1.JobLabel) []Label {
	if len(in) == 0 {
		return nil
	}
	out := make([]Label, len(in))
	for i, l := range in {
		out[i] = Label{l.GetKey(), l.GetValue()}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key < out[b].Key })
	return out
}

// Index keys. Every index is a btree of small values ordered by a total
// order ending in the job id, so iteration order is deterministic.
type timeKey struct {
	at int64
	id uint64
}

type availKey struct {
	queue string
	prio  int32 // ordered high first
	runAt int64
	id    uint64
}

type queueKey struct {
	queue string
	id    uint64
}

type labelKey struct {
	key, value string
	id         uint64
}

type uniqueRef struct{ queue, key string }

func lessTime(a, b timeKey) bool { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id)) < 0 }

func lessAvail(a, b availKey) bool {
	return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(b.prio, a.prio), cmp.Compare(a.runAt, b.runAt), cmp.Compare(a.id, b.id)) < 0
}

func lessQueueKey(a, b queueKey) bool {
	return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.id, b.id)) < 0
}

func lessLabelKey(a, b labelKey) bool {
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.value, b.value), cmp.Compare(a.id, b.id)) < 0
}

func lessQueueJob(a, b *QueueJob) bool { return a.ID < b.ID }

// queueIndex is everything derived from the jobs tree: rebuilt after a
// restore, never in snapshots or the digest. Maps are only looked up,
// never iterated into output (stats are sorted by queue name).
type queueIndex struct {
	due      *btree.BTreeG[timeKey]  // scheduled and retryable, by run_at
	running  *btree.BTreeG[timeKey]  // running, by visibility deadline
	avail    *btree.BTreeG[availKey] // available, per queue by priority, run_at
	deliver  *btree.BTreeG[availKey] // available with a target, by priority, run_at (queue "")
	finOK    *btree.BTreeG[timeKey]  // succeeded, by finish time
	finOther *btree.BTreeG[timeKey]  // cancelled and dead, by finish time
	byQueue  *btree.BTreeG[queueKey]
	states   stateIDs                // by state, and by queue and state
	byKind   *btree.BTreeG[queueKey] // queue field holds the kind
	byLabel  *btree.BTreeG[labelKey]
	unique   map[uniqueRef]uint64
	stats    map[string]*queueCounts
	// live counts the jobs that are not final per submitting identity
	// (none for ""): what SubmitJobs.max_live_jobs judges.
	live map[string]int
	// runningKind counts the running jobs per (queue, kind): what kind
	// limits judge (queue_limits.go).
	runningKind map[uniqueRef]int
	// limKey is the apply path's lookup key of a queue's limits (one per
	// job claimed would be an allocation each); reads never use it.
	limKey QueueLimits
	// paused is the set of paused queues (queue_pause.go; nil: none): a
	// paused queue's available jobs with a target are in avail, not in
	// the delivery lane.
	paused map[string]bool
}

// queueCounts is a queue's job count per state, kept as jobs move, and
// counters of what happened on this replica since it started (for
// metrics; not replicated state).
type queueCounts struct {
	states     [numJobStates]uint64
	deliveries uint64 // available with a target (in the delivery lane)
	QueueCounters
}

// QueueCounters count events per queue since this replica started
// applying (they restart at 0 after a restart or a snapshot install, as
// Prometheus counters may).
type QueueCounters struct {
	Submitted, Attempts, Succeeded, Failures, Lapses, Dead, Cancelled uint64
}

func newQueueIndex() *queueIndex {
	return &queueIndex{
		due:         btree.NewG(btreeDegree, lessTime),
		running:     btree.NewG(btreeDegree, lessTime),
		avail:       btree.NewG(btreeDegree, lessAvail),
		deliver:     btree.NewG(btreeDegree, lessAvail),
		finOK:       btree.NewG(btreeDegree, lessTime),
		finOther:    btree.NewG(btreeDegree, lessTime),
		byQueue:     btree.NewG(btreeDegree, lessQueueKey),
		states:      newStateIDs(),
		byKind:      btree.NewG(btreeDegree, lessQueueKey),
		byLabel:     btree.NewG(btreeDegree, lessLabelKey),
		unique:      map[uniqueRef]uint64{},
		stats:       map[string]*queueCounts{},
		live:        map[string]int{},
		runningKind: map[uniqueRef]int{},
	}
}

func (q *queueIndex) counts(queue string) *queueCounts {
	c := q.stats[queue]
	if c == nil {
		c = &queueCounts{}
		q.stats[queue] = c
	}
	return c
}

// addStatic indexes what never changes for a job: queue, kind, labels,
// unique key.
func (q *queueIndex) addStatic(j *QueueJob) { q.static(j, true) }

// removeStatic undoes addStatic (when a job goes).
func (q *queueIndex) removeStatic(j *QueueJob) { q.static(j, false) }

// static adds (or removes) the entries that never change for j, from one
// list like dynamic's. A unique key is unindexed only while it still
// names j.
func (q *queueIndex) static(j *QueueJob, add bool) {
	setKey(q.byQueue, queueKey{j.Queue, j.ID}, add)
	setKey(q.byKind, queueKey{j.Kind, j.ID}, add)
	for _, l := range j.Labels {
		setKey(q.byLabel, labelKey{l.Key, l.Value, j.ID}, add)
	}
	if j.UniqueKey == "" {
		return
	}
	ref := uniqueRef{j.Queue, j.UniqueKey}
	switch {
	case add:
		q.unique[ref] = j.ID
	case q.unique[ref] == j.ID:
		delete(q.unique, ref)
	}
}

// addDynamic indexes what depends on the state, and counts the job.
func (q *queueIndex) addDynamic(j *QueueJob) { q.dynamic(j, true) }

// removeDynamic undoes addDynamic (before a job changes or goes).
func (q *queueIndex) removeDynamic(j *QueueJob) { q.dynamic(j, false) }

// dynamic adds (or removes) the entries that depend on j's state: one
// list of them, so that adding and removing cannot drift apart.
func (q *queueIndex) dynamic(j *QueueJob, add bool) {
	q.states.set(j.Queue, j.State, j.ID, add)
	switch j.State {
	case JobScheduled, JobRetryable:
		setKey(q.due, timeKey{j.RunAt, j.ID}, add)
	case JobAvailable:
		if j.Target != nil && !q.paused[j.Queue] {
			setKey(q.deliver, availKey{"", j.Priority, j.RunAt, j.ID}, add)
		} else {
			setKey(q.avail, availKey{j.Queue, j.Priority, j.RunAt, j.ID}, add)
		}
		if j.Target == nil {
			break
		}
		if add {
			q.counts(j.Queue).deliveries++
		} else {
			q.counts(j.Queue).deliveries--
		}
	case JobRunning:
		a, _ := j.Current()
		setKey(q.running, timeKey{a.Deadline, j.ID}, add)
		q.countRunningKind(j, add)
	case JobSucceeded:
		setKey(q.finOK, timeKey{j.FinishedAt, j.ID}, add)
	case JobCancelled, JobDead:
		setKey(q.finOther, timeKey{j.FinishedAt, j.ID}, add)
	}
	if add {
		q.counts(j.Queue).states[j.State]++
	} else {
		q.counts(j.Queue).states[j.State]--
	}
	if j.Identity != "" && !j.State.Final() {
		q.countLive(j.Identity, add)
	}
}

// countLive counts one more (or one less) live job of identity; an
// identity without any goes from the map.
func (q *queueIndex) countLive(identity string, add bool) {
	if add {
		q.live[identity]++
	} else if q.live[identity]--; q.live[identity] <= 0 {
		delete(q.live, identity)
	}
}

// setKey inserts k into t, or deletes it.
func setKey[K any](t *btree.BTreeG[K], k K, add bool) {
	if add {
		t.ReplaceOrInsert(k)
	} else {
		t.Delete(k)
	}
}

func (s *state) qjob(id uint64) *QueueJob {
	// The tree's Get keeps no reference to its key, but the key escapes
	// through the less function: a probe from a pool instead of a new
	// QueueJob (240 bytes) per lookup, several per job's way
	// through the queue on every node (docs/benchmarks.md, "A large state").
	p := jobProbes.Get().(*QueueJob)
	p.ID = id
	j := find(s.qjobs, p)
	jobProbes.Put(p)
	return j
}

// jobProbes hold QueueJobs with only an ID set, as lookup keys.
var jobProbes = sync.Pool{New: func() any { return new(QueueJob) }}

// shareNames points j's queue, kind and identity at the equal strings of
// the job with the highest id (the one submitted, or restored, just
// before it), so that a batch of jobs of one kind holds each name once
// instead of one decoded copy per job (about 40 bytes a job). Values do
// not change: nothing observable (digest, snapshots, reads) depends on it.
func (s *state) shareNames(j *QueueJob) {
	p, ok := s.qjobs.Max()
	if !ok {
		return
	}
	if j.Queue == p.Queue {
		j.Queue = p.Queue
	}
	if j.Kind == p.Kind {
		j.Kind = p.Kind
	}
	if j.Identity == p.Identity {
		j.Identity = p.Identity
	}
}

// insertJob stores a new job and indexes it.
func (s *state) insertJob(j *QueueJob) {
	s.queueChanges++
	s.shareNames(j)
	s.qjobs.ReplaceOrInsert(j)
	s.qidx.addStatic(j)
	s.qidx.addDynamic(j)
	s.emitQueueJob(EventPut, j)
}

// replaceJob stores n in place of old (same id) and moves its index
// entries.
func (s *state) replaceJob(old, n *QueueJob) {
	s.queueChanges++
	s.qidx.removeDynamic(old)
	s.qjobs.ReplaceOrInsert(n)
	s.qidx.addDynamic(n)
	s.scheduledJobMoved(old, n)
	s.emitQueueJob(EventPut, n)
}

// deleteJob removes a job and its index entries (retention). A queue's
// counts go with its last job, so they stay bounded by the queues in use.
func (s *state) deleteJob(j *QueueJob) {
	s.queueChanges++
	s.qidx.removeDynamic(j)
	s.qidx.removeStatic(j)
	s.qjobs.Delete(j)
	s.emitQueueJob(EventDelete, j)
	s.deleteJobResources(j.ID)
	if s.qidx.stats[j.Queue].states == ([numJobStates]uint64{}) {
		delete(s.qidx.stats, j.Queue)
	}
}

// advanceQueue applies what calendar time cal makes due, before every
// command: claims whose visibility deadline passed lapse, and scheduled or
// retryable jobs whose run_at arrived become available. Both walk an index
// from its earliest entry, so the cost is what changes, never a scan.
func (s *state) advanceQueue(cal int64) {
	for {
		k, ok := s.qidx.running.Min()
		if !ok || k.at > cal {
			break
		}
		s.lapse(s.qjob(k.id), cal)
	}
	for {
		k, ok := s.qidx.due.Min()
		if !ok || k.at > cal {
			break
		}
		j := s.qjob(k.id)
		n := *j
		n.State, n.UpdatedAt = JobAvailable, cal
		s.replaceJob(j, &n)
	}
}

// lapse ends a running attempt whose visibility deadline passed: the
// attempt counts (LAPSED, finished at its deadline) and the job is
// available again at once with its original run_at, or dead when that was
// its last attempt. See DESIGN.md for why a lapse counts.
func (s *state) lapse(j *QueueJob, cal int64) {
	n := j.withLog()
	a := &n.Log[len(n.Log)-1]
	if ranOut(a) {
		s.runOut(j, n, a, cal) // max_run (queue_maxrun.go)
		return
	}
	a.Outcome, a.FinishedAt = AttemptLapsed, a.Deadline
	a.Error = fmt.Sprintf("visibility timeout: no heartbeat from worker %q for %d ms", a.WorkerID, n.VisibilityMs)
	n.UpdatedAt = cal
	c := s.qidx.counts(n.Queue)
	c.Lapses++
	c.Failures++
	if int32(n.Attempts) >= n.MaxAttempts {
		n.State, n.FinishedAt = JobDead, cal
		c.Dead++
	} else {
		n.State = JobAvailable
	}
	s.replaceJob(j, n)
}
