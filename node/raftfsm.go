package node

import (
	"io"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/internal/watchhub"
)

// raftFSM adapts the fsm package, which knows nothing of Raft, to
// raft.FSM and raft.BatchingFSM, and hands the change events of each entry,
// with its index, to the watch hub.
type raftFSM struct {
	f   *fsm.FSM
	hub *watchhub.Hub
}

var _ raft.BatchingFSM = raftFSM{}

func (r raftFSM) Apply(l *raft.Log) any { return r.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch hands the data of command entries to the FSM; other entries
// (configuration, barriers, no-ops) reach it as nil and are skipped.
func (r raftFSM) ApplyBatch(logs []*raft.Log) []any {
	entries := make([][]byte, len(logs))
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			entries[i] = l.Data
			if entries[i] == nil {
				entries[i] = []byte{} // an empty command is still a command
			}
		}
	}
	return r.f.ApplyBatchTo(entries, func(i int, evs []fsm.Event) { r.hub.Publish(logs[i].Index, evs) })
}

func (r raftFSM) Snapshot() (raft.FSMSnapshot, error) { return raftSnapshot{r.f.Snapshot()}, nil }

// Restore replaces the state with a snapshot's; the watch ring starts
// again after the snapshot's index.
func (r raftFSM) Restore(rc io.ReadCloser) error {
	if err := r.f.Restore(rc); err != nil {
		return err
	}
	r.hub.Restored()
	return nil
}

type raftSnapshot struct{ s *fsm.Snapshot }

func (s raftSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.s.Persist(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (raftSnapshot) Release() {}
