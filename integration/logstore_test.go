package integration

import (
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/logstore"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/server"
)

// A restart keeps the Raft log store the data dir has, whatever is asked;
// moving a node to the other store is replacing it, as
// internal/logstore/DESIGN.md says: remove it from the cluster, wipe its
// data dir, start it empty on the other store with Join, and the leader
// sends it the state. Both ways.
func TestRestartKeepsItsLogStoreAndARejoinMovesIt(t *testing.T) {
	for _, move := range [][2]logstore.Kind{{logstore.Bolt, logstore.WAL}, {logstore.WAL, logstore.Bolt}} {
		from, to := move[0], move[1]
		t.Run(fmt.Sprintf("%s_to_%s", from, to), func(t *testing.T) {
			c := testcluster.New(t, 3, testcluster.WithConfig(func(cfg *server.Config) {
				cfg.RaftLogStore = string(from)
			}))
			leader := c.WaitLeader()
			cc := c.Coord(leader)
			for i := 0; i < 150; i++ {
				acquire(t, cc, fmt.Sprintf("move-%d", i), "o", time.Minute)
			}
			n := c.Followers()[0]

			// Asking for the other store on the existing dir changes nothing.
			c.Stop(n)
			s, err := server.New(server.Config{ID: n.ID, DataDir: n.Dir, GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0",
				RaftLogStore: string(to), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
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
			s, err = server.New(server.Config{ID: n.ID, DataDir: n.Dir, GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0",
				Join: leader.Server.GRPCAddr(), RaftLogStore: string(to), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if k, err := logstore.Detect(n.Dir); err != nil || k != to {
				t.Fatalf("the rejoined %s runs %q (%v), want %s", n.ID, k, err, to)
			}
			acquire(t, cc, "after-move", "o", time.Minute)
			c.Eventually(n.ID+" to catch up on "+string(to), 20*time.Second, func() bool {
				return s.AppliedIndex() == leader.Server.AppliedIndex() && s.Digest() == leader.Server.Digest()
			})
			if s.Raft().LastIndex() < 150 {
				t.Fatalf("the rejoined node's last index is %d", s.Raft().LastIndex())
			}
		})
	}
}
