package node

import (
	"testing"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// The leader's bulk service applies a started operation in batches of
// at most leader.BulkBatch jobs per entry until it is finished.
func TestBulkServiceRunsAnOperation(t *testing.T) {
	n := newTestNode(t)
	runAt := make([]int64, 1000)
	for range 5 {
		n.submit(t, "q", runAt...)
	}
	base := n.raft.count()
	r, err := n.StartBulkJobs(bg(), &fsmv1.StartBulkJobs{OpId: "op", Action: fsmv1.BulkAction_BULK_ACTION_CANCEL,
		Selector: &fsmv1.JobSelector{Queue: "q"}, Total: 5000})
	if err != nil || r.Duplicate {
		t.Fatalf("start: %+v %v", r, err)
	}
	eventually(t, "the operation finishes", func() bool {
		o, _ := n.fsm.BulkOp("op")
		return o.Finished()
	})
	o, _ := n.fsm.BulkOp("op")
	if o.Done != 5000 || o.Steps != 5 || n.fsm.QueueStats("q", 0)[0].Cancelled != 5000 {
		t.Fatalf("op %+v", o)
	}
	// The start and five steps (ticks aside).
	steps := 0
	for i := base; i < n.raft.count(); i++ {
		for _, c := range append([]*fsmv1.Command{n.raft.entry(t, i)}, n.raft.entry(t, i).GetBatch().GetCommands()...) {
			if c.GetType() == fsmv1.CommandType_COMMAND_TYPE_STEP_BULK_JOBS {
				steps++
			}
		}
	}
	if steps != 5 {
		t.Fatalf("%d steps proposed, want 5", steps)
	}
}
