package integration

import (
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/coordd/coordd/api"
	"github.com/coordd/coordd/internal/logstore"
	"github.com/coordd/coordd/internal/testcluster"
	"github.com/coordd/coordd/node"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// A restart keeps the Raft log store the data dir has, whatever is asked;
// moving a node to the other store is replacing it, as
// internal/logstore/DESIGN.md says: remove it from the cluster, wipe its
// data dir, start it empty on the other store with Join, and the leader
// sends it the state. Both ways.
func TestRestartKeepsItsLogStoreAndARejoinMovesIt(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	for _, move := range [][2]logstore.Kind{{logstore.Bolt, logstore.WAL}, {logstore.WAL, logstore.Bolt}} {
		from, to := move[0], move[1]
		t.Run(fmt.Sprintf("%s_to_%s", from, to), func(t *testing.T) {
			c := testcluster.New(t, 3, testcluster.WithConfig(func(cfg *testcluster.Config) {
				cfg.Node.RaftLogStore = string(from)
			}))
			leader := c.WaitLeader()
			cc := c.Coord(leader)
			for i := 0; i < 150; i++ {
				acquire(t, cc, fmt.Sprintf("move-%d", i), "o", time.Minute)
			}
			n := c.Followers()[0]

			// Asking for the other store on the existing dir changes nothing.
			c.Stop(n)
			quiet := slog.New(slog.DiscardHandler)
			nd, err := node.New(node.Config{ID: n.ID, DataDir: n.Dir, RaftAddr: "127.0.0.1:0", RaftLogStore: string(to), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			nd.Close()
			if k, err := logstore.Detect(n.Dir); err != nil || k != from {
				t.Fatalf("%s's dir holds %q (%v) after a restart asking for %s, want the %s it had", n.ID, k, err, to, from)
			}

			ctx := ctxT(t)
			if _, err := c.Client(leader).RemoveServer(ctx, &coordv1.RemoveServerRequest{Id: n.ID}); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(n.Dir); err != nil {
				t.Fatal(err)
			}
			nd, err = node.New(node.Config{ID: n.ID, DataDir: n.Dir, RaftAddr: "127.0.0.1:0", Join: leader.API.GRPCAddr(),
				RaftLogStore: string(to), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := api.Serve(api.Config{GRPCAddr: "127.0.0.1:0", Logger: quiet}, nd)
			if err != nil {
				nd.Close()
				t.Fatal(err)
			}
			defer func() { nd.Close(); srv.Close() }() // the node first, then its API (as testcluster stops them)
			if k, err := logstore.Detect(n.Dir); err != nil || k != to {
				t.Fatalf("the rejoined %s runs %q (%v), want %s", n.ID, k, err, to)
			}
			acquire(t, cc, "after-move", "o", time.Minute)
			c.Eventually(n.ID+" to catch up on "+string(to), 20*time.Second, func() bool {
				return nd.AppliedIndex() == leader.Node.AppliedIndex() && nd.Digest() == leader.Node.Digest()
			})
			if last := nd.Raft().LastIndex(); last < 150 {
				t.Fatalf("the rejoined node's last index is %d", last)
			}
		})
	}
}
