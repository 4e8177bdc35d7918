package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/buildinfo"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// SaveSnapshot writes a consistent snapshot of the state to w, on the
// ready leader only: a barrier (every entry committed before the call is
// applied), then a Raft snapshot taken now (or the latest one when nothing
// was applied since), streamed from the snapshot store. start receives
// the snapshot's index, term and membership before the first byte. The
// bytes are the fsm snapshot encoding (fsm.SnapshotFormat), as a node
// restores it.
func (n *Node) SaveSnapshot(ctx context.Context, start func(*coordv1.SnapshotInfo) error, w io.Writer) error {
	if !n.IsLeader() {
		return n.notLeader()
	}
	if err := n.await(ctx, n.raft.Barrier(0)); err != nil {
		return err
	}
	if err := n.await(ctx, n.raft.Snapshot()); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return err
	}
	snaps, err := n.snaps.List()
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	if len(snaps) == 0 {
		return &NotFoundError{What: "snapshot (nothing applied yet)"}
	}
	// The store, not Raft's wrapper (indexedSnapshots): this is a read
	// for a backup, not a restore of this node's FSM.
	meta, rc, err := n.snaps.Open(snaps[0].ID)
	if err != nil {
		return fmt.Errorf("open snapshot %s: %w", snaps[0].ID, err)
	}
	defer rc.Close()
	info := &coordv1.SnapshotInfo{Index: meta.Index, Term: meta.Term, NodeId: n.cfg.ID,
		TakenAt: timestamppb.New(n.clock.Now()), SnapshotFormat: fsm.SnapshotFormat, Size: meta.Size,
		Version: buildinfo.Read().String("coordd")}
	for _, s := range meta.Configuration.Servers {
		info.Members = append(info.Members, &coordv1.Member{Id: string(s.ID), RaftAddress: string(s.Address),
			GrpcAddress: n.memberAddr(string(s.ID)), Suffrage: s.Suffrage.String()})
	}
	if err := start(info); err != nil {
		return err
	}
	began := time.Now()
	written, err := io.Copy(w, rc)
	if err != nil {
		return err
	}
	if written != meta.Size {
		return fmt.Errorf("snapshot %s: read %d bytes, Raft recorded %d", meta.ID, written, meta.Size)
	}
	n.log.Info("snapshot streamed for a backup", "id", meta.ID, "index", meta.Index, "term", meta.Term,
		"bytes", written, "took", time.Since(began))
	return nil
}
