package integration

import (
	"testing"
	"time"

	"github.com/coordd/coordd/internal/framework"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Checks written against framework.Cluster: each runs on in-process nodes
// (testcluster) and on coordd processes (proccluster).

// generationsContinueAfterFullRestart acquires and releases a lease rounds
// times, snapshots node2, kills every member (kill -9 for processes) and
// restarts them all: the next grant's generation is the one after the
// last (G1), and the members converge.
func generationsContinueAfterFullRestart[M framework.Member](t *testing.T, c framework.Cluster[M], rounds int) {
	t.Helper()
	cc := framework.Coord(c, c.WaitLeader())
	ctx := ctxT(t)
	var last *coordv1.Lease
	for range rounds {
		last = acquire(t, cc, "gen", "o", 5*time.Second)
		if _, err := cc.Release(ctx, &coordv1.ReleaseRequest{Name: "gen", Owner: "o", Generation: last.GetGeneration()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := coordv1.NewClusterClient(c.Conn(c.Members()[1])).Snapshot(ctx, &coordv1.SnapshotRequest{}); err != nil {
		t.Fatal(err)
	}
	before := c.WaitConverged()
	for _, m := range c.Members() {
		c.Kill(m)
	}
	for _, m := range c.Members() {
		c.Restart(m)
	}
	leader := c.WaitLeader()
	t.Logf("digest before the restart %s, after %s (the new leader's tick moves the clock)", before, c.WaitConverged())
	next := acquire(t, framework.Coord(c, leader), "gen", "o", 5*time.Second)
	if next.GetGeneration() != last.GetGeneration()+1 {
		t.Fatalf("generation after restarting every member %d, before %d", next.GetGeneration(), last.GetGeneration())
	}
}
