package fsm

import (
	"cmp"

	"github.com/google/btree"
)

const btreeDegree = 32

// state is everything the log determines. Trees hold immutable records, so
// clone() is O(1) and a clone can be read while the original changes.
type state struct {
	leaseTime    int64 // highest lease time applied (ms)
	calendarTime int64 // highest calendar time applied (Unix ms)
	leases       *btree.BTreeG[*Lease]
	windows      *btree.BTreeG[*Window]
	resources    *btree.BTreeG[*Resource]
	idem         *btree.BTreeG[*Idempotency]
	members      *btree.BTreeG[*Member]
	registryJobs *btree.BTreeG[*RegistryJob]
	qjobs        *btree.BTreeG[*QueueJob] // the job queue, by id
	lastJobID    uint64                   // the last queue job id assigned
	// queueChanges counts this apply's changes to the job queue (jobs,
	// queue settings): bookkeeping for the leader's queue loops, moved to
	// FSM.queueEpoch after each apply; never replicated or decided on.
	queueChanges uint64
	fetchSeq     uint64                      // fetches applied: the round robin's start
	schedules    *btree.BTreeG[*Schedule]    // by name, tombstones included
	qtargets     *btree.BTreeG[*QueueTarget] // queues' HTTP targets, by queue (queue_target.go)
	qops         *queueOps                   // paused queues (queue_pause.go)
	qlimits      *btree.BTreeG[*QueueLimits] // queues' limits and rate buckets, by queue (queue_limits.go)
	// sidx indexes schedules (next due, tombstones) and the open jobs they
	// made. Derived: rebuilt after a restore.
	sidx *scheduleIndex
	// qidx indexes qjobs (due times, claims, availability, lists, unique
	// keys, counts). Derived: rebuilt after a restore.
	qidx *queueIndex
	// Prune queues, in apply order (so in order of completion / acceptance
	// time). Derived from the trees: not part of snapshots or the digest.
	completedQ []windowKey
	idemQ      []idemKey
	// byIdentity indexes, per identity, the names of leases it acquired, for
	// the live-lease limit. Entries whose lease moved on are dropped lazily.
	// Derived from leases: not part of snapshots or the digest, and only
	// counted (never iterated into output), so map order cannot leak.
	byIdentity map[string]map[string]struct{}
	// expiry indexes the deadlines of unreleased, unexpired leases (derived;
	// events.go). emitting and events collect the change events of the
	// command being applied while a caller wants them (ApplyBatchTo).
	expiry *btree.BTreeG[nameTime]
	// jobRes indexes the resources queue jobs fence, by job (derived;
	// queue_job_resources.go): pruning a job deletes them.
	jobRes   *btree.BTreeG[jobResKey]
	emitting bool
	events   []Event
}

type windowKey struct{ ledger, window string }
type idemKey struct{ resource, key string }

// nameTime orders named records by a time, then name: leases by deadline
// (expiry), schedules by next due and deletion time.
type nameTime struct {
	at   int64
	name string
}

func lessNameTime(a, b nameTime) bool {
	return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.name, b.name)) < 0
}

func lessLease(a, b *Lease) bool { return a.Name < b.Name }
func lessWindow(a, b *Window) bool {
	return cmp.Or(cmp.Compare(a.Ledger, b.Ledger), cmp.Compare(a.Window, b.Window)) < 0
}
func lessResource(a, b *Resource) bool { return a.Name < b.Name }
func lessIdem(a, b *Idempotency) bool {
	return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Key, b.Key)) < 0
}
func lessMember(a, b *Member) bool { return a.ID < b.ID }

func newState() *state {
	return &state{
		leases:       btree.NewG(btreeDegree, lessLease),
		windows:      btree.NewG(btreeDegree, lessWindow),
		resources:    btree.NewG(btreeDegree, lessResource),
		idem:         btree.NewG(btreeDegree, lessIdem),
		members:      btree.NewG(btreeDegree, lessMember),
		registryJobs: btree.NewG(btreeDegree, lessRegistryJob),
		qjobs:        btree.NewG(btreeDegree, lessQueueJob),
		qidx:         newQueueIndex(),
		schedules:    btree.NewG(btreeDegree, lessSchedule),
		qtargets:     btree.NewG(btreeDegree, lessQueueTarget),
		sidx:         newScheduleIndex(),
		byIdentity:   map[string]map[string]struct{}{},
		expiry:       btree.NewG(btreeDegree, lessNameTime),
		jobRes:       newJobResIndex(),
		qops:         newQueueOps(),
		qlimits:      btree.NewG(btreeDegree, lessQueueLimits),
	}
}

// indexIdentity records that identity acquired lease name.
func (s *state) indexIdentity(identity, name string) {
	if identity == "" {
		return
	}
	set := s.byIdentity[identity]
	if set == nil {
		set = map[string]struct{}{}
		s.byIdentity[identity] = set
	}
	set[name] = struct{}{}
}

// liveLeases counts the leases identity holds at now, dropping index entries
// that no longer count.
func (s *state) liveLeases(identity string, now int64) int {
	set := s.byIdentity[identity]
	n := 0
	for name := range set {
		if l := s.lease(name); l != nil && l.Identity == identity && l.Live(now) {
			n++
		} else {
			delete(set, name)
		}
	}
	return n
}

// clone returns a copy that shares records with s; the copy must only be
// read, and only its replicated parts (snapshot, digest): derived indexes
// are not copied.
func (s *state) clone() *state {
	return &state{
		leaseTime:    s.leaseTime,
		calendarTime: s.calendarTime,
		leases:       s.leases.Clone(),
		windows:      s.windows.Clone(),
		resources:    s.resources.Clone(),
		idem:         s.idem.Clone(),
		members:      s.members.Clone(),
		registryJobs: s.registryJobs.Clone(),
		qjobs:        s.qjobs.Clone(),
		lastJobID:    s.lastJobID,
		fetchSeq:     s.fetchSeq,
		schedules:    s.schedules.Clone(),
		qtargets:     s.qtargets.Clone(),
		qops:         s.qops.clone(),
		qlimits:      s.qlimits.Clone(),
	}
}

// find returns the record of t that key stands for (the fields t orders
// by), or nil.
func find[T any](t *btree.BTreeG[*T], key *T) *T {
	r, _ := t.Get(key)
	return r
}

func (s *state) lease(name string) *Lease { return find(s.leases, &Lease{Name: name}) }

func (s *state) window(ledger, window string) *Window {
	return find(s.windows, &Window{Ledger: ledger, Window: window})
}

func (s *state) resource(name string) *Resource { return find(s.resources, &Resource{Name: name}) }

func (s *state) idempotency(resource, key string) *Idempotency {
	return find(s.idem, &Idempotency{Resource: resource, Key: key})
}
