package node

import (
	"context"
	"errors"
	"io"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/internal/watchhub"
)

// Watch: the FSM emits the change events of every entry it applies; the
// apply path (raftfsm.go) hands them, numbered by log index and position,
// to the node's hub (node/internal/watchhub: the ring, the watchers, their
// limits). This file is the glue: the node's settings, Node.Watch and
// the snapshot index the hub needs. See DESIGN.md "Watch".

// WatchConfig bounds the watch ring and the watchers of a node: Events and
// Bytes bound the ring of recent change events (how far back a watch may
// start or resume, and how far a watcher may fall behind before it is
// dropped), MaxWatchers caps the watches served at once, and a watcher
// whose prefix saw no change while others did hears its resume position
// at most every ProgressInterval.
type WatchConfig = watchhub.Config

// WatchDefaults are the watch settings New gives unset fields.
func WatchDefaults() WatchConfig { return watchhub.Defaults() }

// Watch delivers the change events of this node's applied state, from
// position from (index 0: from the next entry applied), to send: first a
// batch with the start position (and, with initial, a View of the state
// there), then batches of events that match, in log order, each with the
// position to resume after it. Events are shared: send must not keep or
// change them after it returns. It returns when ctx ends, send fails, the
// node shuts down (ErrShutdown), or the watch cannot go on (an error with
// WatchRefused: the start is no longer held, the watcher fell off the
// ring, or a snapshot replaced the state). A send blocked on a slow client
// does not hold it up: Watch returns, and the caller ends the stream,
// which ends the send.
//
// No log entry is written: the node serves from what it applied, which a
// follower may have applied a little later than the leader.
func (n *Node) Watch(ctx context.Context, from fsm.Position, initial bool, match func(*fsm.Event) bool,
	send func(fsm.WatchBatch) error) error {
	err := n.watch.Watch(ctx, n.ctx.Done(), n.fsm, from, initial, match, send)
	if errors.Is(err, watchhub.ErrStopped) {
		return ErrShutdown
	}
	return err
}

// Watchers is the number of watches this node serves.
func (n *Node) Watchers() int { return n.watch.Watchers() }

// indexedSnapshots tells the hub the index of the snapshot raft opens:
// raft opens a snapshot right before it restores the FSM from it (at
// start and on InstallSnapshot), and the FSM's Restore is not told.
type indexedSnapshots struct {
	raft.SnapshotStore
	hub *watchhub.Hub
}

func (s indexedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err == nil {
		s.hub.OpeningSnapshot(meta.Index)
	}
	return meta, rc, err
}
