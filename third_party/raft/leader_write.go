// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-metrics/compat"
)

// This file holds the leader's side of Config.ParallelLeaderWrite: the
// leader replicates new entries before they are durable in its own LogStore
// and writes them in the background (Raft thesis §10.2.1). The rules:
//
//   - Entries dispatched but not yet written are held in r.pending, which the
//     replicators (and the leader's own FSM apply) read before the LogStore.
//   - The leader records its own match index only when StoreLogs has
//     returned, so an entry commits once a quorum holds it durably; the
//     leader counts only if it is among them.
//   - A failed write makes the leader step down. What was not written is
//     forgotten locally (last log index back to the last durable entry);
//     no index is reused in the leader's term, because the term ends.
//   - Before the node writes anything else to its log (an AppendEntries or
//     InstallSnapshot it will accept, a user snapshot restore, leaving the
//     leader state) the leader's writes in progress are finished.
//   - A snapshot never covers an entry that is not durable in the local log.

// pendingLogs holds the entries the leader has dispatched but not yet
// written to its LogStore. It is empty on followers and candidates.
type pendingLogs struct {
	mu   sync.Mutex
	logs []*Log // consecutive indexes, oldest first
	// changed is closed (and replaced) whenever entries leave the buffer.
	changed chan struct{}
}

func newPendingLogs() *pendingLogs {
	return &pendingLogs{changed: make(chan struct{})}
}

// add appends newly dispatched entries.
func (p *pendingLogs) add(logs []*Log) {
	p.mu.Lock()
	p.logs = append(p.logs, logs...)
	p.mu.Unlock()
}

// get copies the entry at index into out if it is pending.
func (p *pendingLogs) get(index uint64, out *Log) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.logs) == 0 {
		return false
	}
	first := p.logs[0].Index
	if index < first || index >= first+uint64(len(p.logs)) {
		return false
	}
	*out = *p.logs[index-first]
	return true
}

// all returns the pending entries (a copy of the slice, not of the entries).
func (p *pendingLogs) all() []*Log {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Log(nil), p.logs...)
}

// len is the number of pending entries.
func (p *pendingLogs) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.logs)
}

// release drops the entries up to and including index (they are durable
// in the LogStore now).
func (p *pendingLogs) release(index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(p.logs) && p.logs[n].Index <= index {
		n++
	}
	if n == 0 {
		return
	}
	p.logs = append(p.logs[:0:0], p.logs[n:]...)
	close(p.changed)
	p.changed = make(chan struct{})
}

// clear drops every pending entry (written or forgotten).
func (p *pendingLogs) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.logs) == 0 {
		return
	}
	p.logs = nil
	close(p.changed)
	p.changed = make(chan struct{})
}

// holds reports whether an entry at or below index is pending, and the
// channel closed on the next change.
func (p *pendingLogs) holds(index uint64) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.logs) > 0 && p.logs[0].Index <= index, p.changed
}

// getLog reads the entry at index: the leader's pending entries first, then
// the LogStore. An entry leaves the pending buffer only after StoreLogs has
// returned, so a dispatched entry is always found in one of them.
func (r *Raft) getLog(index uint64, out *Log) error {
	if r.pending.get(index, out) {
		return nil
	}
	return r.logs.GetLog(index, out)
}

// waitLocalDurable waits until every entry up to index is in the local
// LogStore (nothing at or below it pending), and fails if index is beyond the
// local log, which happens only when the leader's write failed after the
// entries were committed by the followers and applied.
func (r *Raft) waitLocalDurable(index uint64) error {
	for {
		pending, changed := r.pending.holds(index)
		if !pending {
			if last := r.getLastIndex(); index > last {
				return fmt.Errorf("index %d is not in the local log (last index %d): the leader's write failed", index, last)
			}
			return nil
		}
		select {
		case <-changed:
		case <-r.shutdownCh:
			return ErrRaftShutdown
		}
	}
}

// leaderWriter writes the leader's pending entries to its LogStore, one
// StoreLogs at a time, each taking everything pending then.
type leaderWriter struct {
	r        *Raft
	kickCh   chan struct{} // new entries are pending
	stopCh   chan struct{}
	stopOnce sync.Once
	doneCh   chan struct{}
	notifyCh chan struct{} // the durable index advanced or a write failed

	mu           sync.Mutex
	durableIndex uint64
	durableTerm  uint64
	err          error
}

// startLeaderWriter starts a writer; everything up to the last log index is
// durable already.
func (r *Raft) startLeaderWriter() *leaderWriter {
	index, term := r.getLastLog()
	w := &leaderWriter{
		r:            r,
		kickCh:       make(chan struct{}, 1),
		stopCh:       make(chan struct{}),
		doneCh:       make(chan struct{}),
		notifyCh:     make(chan struct{}, 1),
		durableIndex: index,
		durableTerm:  term,
	}
	r.goFunc(w.run)
	return w
}

func (w *leaderWriter) run() {
	defer close(w.doneCh)
	for {
		select {
		case <-w.kickCh:
			if !w.writePending() {
				return
			}
		case <-w.stopCh:
			w.writePending()
			return
		}
	}
}

// writePending writes until nothing is pending; false after a failed write,
// which ends the writer (nothing after a failed entry may be written).
func (w *leaderWriter) writePending() bool {
	for {
		batch := w.r.pending.all()
		if len(batch) == 0 {
			return true
		}
		start := time.Now()
		err := w.r.logs.StoreLogs(batch)
		metrics.MeasureSince([]string{"raft", "leader", "writeLogs"}, start)
		last := batch[len(batch)-1]
		w.mu.Lock()
		if err != nil {
			w.err = err
		} else {
			w.durableIndex, w.durableTerm = last.Index, last.Term
		}
		w.mu.Unlock()
		if err == nil {
			w.r.pending.release(last.Index)
		}
		asyncNotifyCh(w.notifyCh)
		if err != nil {
			return false
		}
	}
}

// notified is the channel the leader loop watches; nil without a writer.
func (w *leaderWriter) notified() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.notifyCh
}

// result is the last durable entry and the error of a failed write.
func (w *leaderWriter) result() (index, term uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.durableIndex, w.durableTerm, w.err
}

// stop finishes the write in progress and writes what is still pending
// (unless a write failed), then returns.
func (w *leaderWriter) stop() {
	w.stopOnce.Do(func() { close(w.stopCh) })
	<-w.doneCh
}

// writeLeaderLogs hands newly dispatched entries to the writer. It returns
// false without a writer (the caller writes them itself).
func (r *Raft) writeLeaderLogs(logs []*Log) bool {
	w := r.leaderState.writer
	if w == nil {
		return false
	}
	r.pending.add(logs)
	asyncNotifyCh(w.kickCh)
	return true
}

// leaderWriteBacklogged reports that enough entries wait for the leader's
// write that new applies should wait too.
func (r *Raft) leaderWriteBacklogged() bool {
	return r.leaderState.writer != nil && r.pending.len() >= 2*r.config().MaxAppendEntries
}

// leaderWriteDone handles the writer's notification in the leader loop: it
// records the leader's own match index, or steps down after a failed write.
func (r *Raft) leaderWriteDone() {
	index, _, err := r.leaderState.writer.result()
	if err != nil {
		r.logger.Error("failed to commit logs", "error", err)
		r.setState(Follower)
		return
	}
	r.leaderState.commitment.match(r.localID, index)
}

// stopLeaderWriter finishes the leader's writes. If one failed, the entries
// that were not written are forgotten: the last log index goes back to the
// last durable entry (the followers that have them keep them; the next
// leader decides). It returns that error. With restart the writer is started
// again (the node stays leader).
func (r *Raft) stopLeaderWriter(restart bool) error {
	w := r.leaderState.writer
	if w == nil {
		return nil
	}
	w.stop()
	r.leaderState.writer = nil
	index, term, err := w.result()
	if err != nil {
		// First the last log index, then the buffer: waitLocalDurable must
		// not see an empty buffer with the old last index.
		r.setLastLog(index, term)
		r.pending.clear()
		return err
	}
	r.pending.clear() // empty already: stop wrote everything
	if restart {
		r.leaderState.commitment.match(r.localID, index)
		r.leaderState.writer = r.startLeaderWriter()
	}
	return nil
}

// rpcEndsLeadership reports whether rpc is a request that this leader will
// accept as a follower, writing the sender's entries or snapshot.
func (r *Raft) rpcEndsLeadership(rpc RPC) bool {
	switch req := rpc.Command.(type) {
	case *AppendEntriesRequest:
		return req.Term >= r.getCurrentTerm()
	case *InstallSnapshotRequest:
		return req.Term >= r.getCurrentTerm()
	}
	return false
}
