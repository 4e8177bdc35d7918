package fsm

import "github.com/google/btree"

// stateIDs indexes the jobs' ids by state, and by queue and state: one tree
// of ids per state and one per (queue, state) in use. Every change of a
// job's state moves its id in both, so these updates are most of an
// apply's index work: small trees of integers compare an int at each level
// where one tree of (queue, state, id) keys over every job compared a
// struct with a queue name (about three quarters of queueIndex.dynamic's
// time in a profile at 10,000 jobs/s).
type stateIDs struct {
	byState      [numJobStates]*btree.BTreeG[uint64]
	byQueueState map[queueStateRef]*btree.BTreeG[uint64] // no empty trees
	// free is the trees' shared node free list: a (queue, state) tree that
	// empties and comes back (a queue's running jobs at low load) reuses
	// the nodes of the others instead of allocating its own.
	free *btree.FreeListG[uint64]
}

type queueStateRef struct {
	queue string
	state JobState
}

func newStateIDs() stateIDs {
	s := stateIDs{byQueueState: map[queueStateRef]*btree.BTreeG[uint64]{},
		free: btree.NewFreeListG[uint64](btree.DefaultFreeListSize)}
	for i := range s.byState {
		s.byState[i] = s.newTree()
	}
	return s
}

func (s *stateIDs) newTree() *btree.BTreeG[uint64] {
	return btree.NewWithFreeListG(btreeDegree, lessID, s.free)
}

func lessID(a, b uint64) bool { return a < b }

// set adds (or removes) id under state and under (queue, state).
func (s *stateIDs) set(queue string, state JobState, id uint64, add bool) {
	setKey(s.byState[state], id, add)
	ref := queueStateRef{queue, state}
	t := s.byQueueState[ref]
	switch {
	case add && t == nil:
		t = s.newTree()
		s.byQueueState[ref] = t
	case t == nil:
		return
	}
	setKey(t, id, add)
	if t.Len() == 0 {
		delete(s.byQueueState, ref)
	}
}

// tree is the ids in state, of queue ("": every queue); nil when none.
func (s *stateIDs) tree(queue string, state JobState) *btree.BTreeG[uint64] {
	if queue == "" {
		return s.byState[state]
	}
	return s.byQueueState[queueStateRef{queue, state}]
}

// ascend calls fn with the ids in state (of queue; "": every queue) from
// from up, until fn returns false.
func (s *stateIDs) ascend(queue string, state JobState, from uint64, fn func(id uint64) bool) {
	if t := s.tree(queue, state); t != nil {
		t.AscendGreaterOrEqual(from, fn)
	}
}

// descend calls fn with the ids in state (of queue; "": every queue) from
// top down, until fn returns false.
func (s *stateIDs) descend(queue string, state JobState, top uint64, fn func(id uint64) bool) {
	if t := s.tree(queue, state); t != nil {
		t.DescendLessOrEqual(top, fn)
	}
}
