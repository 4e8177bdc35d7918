// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"testing"
)

// batchSizeRaft is a Raft with just what setNewLogs and processLogs read:
// a log store holding entries 1..n, the pending buffer, the config and the
// FSM's channel.
func batchSizeRaft(t *testing.T, n uint64, maxAppendEntries int) *Raft {
	t.Helper()
	store := NewInmemStore()
	for i := uint64(1); i <= n; i++ {
		if err := store.StoreLog(&Log{Index: i, Term: 1, Type: LogCommand, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	r := &Raft{logs: store, pending: newPendingLogs(), fsmMutateCh: make(chan interface{}, 16), shutdownCh: make(chan struct{})}
	r.conf.Store(Config{MaxAppendEntries: maxAppendEntries})
	return r
}

// TestSetNewLogsSizedToEntries: an AppendEntries request's entries have
// room for what it carries, not for MaxAppendEntries; an empty one still
// carries an empty, non-nil slice (the same bytes on the wire).
func TestSetNewLogsSizedToEntries(t *testing.T) {
	r := batchSizeRaft(t, 10, 4)
	for _, c := range []struct {
		next, last uint64
		want       []uint64
	}{
		{3, 5, []uint64{3, 4, 5}},
		{1, 10, []uint64{1, 2, 3, 4}}, // at most MaxAppendEntries
		{6, 5, nil},
	} {
		req := &AppendEntriesRequest{}
		if err := r.setNewLogs(req, c.next, c.last); err != nil {
			t.Fatal(err)
		}
		if req.Entries == nil || len(req.Entries) != len(c.want) || cap(req.Entries) != len(c.want) {
			t.Fatalf("next %d last %d: entries %v, len %d cap %d; want %d", c.next, c.last, req.Entries == nil, len(req.Entries), cap(req.Entries), len(c.want))
		}
		for i, l := range req.Entries {
			if l.Index != c.want[i] || l.Data[0] != byte(c.want[i]) {
				t.Fatalf("next %d last %d: entry %d is %d", c.next, c.last, i, l.Index)
			}
		}
	}
}

// TestProcessLogsBatchSizedToEntries: the batches handed to the FSM have
// room for what is left to apply, at most MaxAppendEntries each.
func TestProcessLogsBatchSizedToEntries(t *testing.T) {
	r := batchSizeRaft(t, 10, 4)
	batches := func() (got [][2]int) {
		for {
			select {
			case b := <-r.fsmMutateCh:
				tuples := b.([]*commitTuple)
				got = append(got, [2]int{len(tuples), cap(tuples)})
			default:
				return got
			}
		}
	}
	r.processLogs(2, nil)
	if got := batches(); len(got) != 1 || got[0] != [2]int{2, 2} {
		t.Fatalf("applying 1-2: batches (len, cap) %v; want [[2 2]]", got)
	}
	r.processLogs(7, nil)
	if got := batches(); len(got) != 2 || got[0] != [2]int{4, 4} || got[1] != [2]int{1, 1} {
		t.Fatalf("applying 3-7: batches (len, cap) %v; want [[4 4] [1 1]]", got)
	}
	if r.getLastApplied() != 7 {
		t.Fatalf("last applied %d", r.getLastApplied())
	}
}
