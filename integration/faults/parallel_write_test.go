//go:build faults

package faults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// blockStoreLogsFile is internal/logstore's failpoint file
// (BlockStoreLogsFile, defined only in builds with -tags failpoints): while it
// exists in a node's data dir, and COORDD_TEST_FAILPOINTS=block-store-logs,
// the node's StoreLogs waits before it reaches the store.
const blockStoreLogsFile = "FAILPOINT_BLOCK_STORE_LOGS"

// Scenario 19: the leader killed between the replication of acknowledged
// entries and its own write of them (the leader writes its log in parallel
// with replication, third_party/raft/README.fork.md). The leader's StoreLogs
// is blocked by the failpoint; the workload goes on, committed by the two
// followers alone (20 more acknowledged commits after the leader's write
// blocked), then kill -9: of the leader on even cycles, of every node on odd
// ones (what was acknowledged is durable on the followers, not on the
// leader). The node restarts with its shorter log and catches up; in the end
// every acknowledged write is there (checker 4), all nodes at one digest
// (checker 5), and porcupine and the other checkers hold. 2 cycles (full: 6).
func TestLeaderKilledBeforeItsOwnWrite(t *testing.T) {
	t.Setenv("COORDD_TEST_FAILPOINTS", "block-store-logs")
	r := newRun(t)
	r.workers(3, "20ms")
	r.client("holder", "hold", "--lease", "H", "--resource", "HR", "--ttl", "5s", "--interval", "20ms")
	r.await("the workload commits", 20*time.Second, func() bool { return r.commitsAccepted() > 10 })
	blockedLines := func(path string) int {
		b, _ := os.ReadFile(path)
		return strings.Count(string(b), "TEST FAILPOINT: StoreLogs blocked")
	}
	for cycle := 0; cycle < cycles(2, 6); cycle++ {
		leader := r.c.WaitLeader()
		seen := blockedLines(leader.LogPath)
		block := filepath.Join(leader.DataDir, blockStoreLogsFile)
		if err := os.WriteFile(block, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		r.await("the leader's StoreLogs blocked", 20*time.Second, func() bool { return blockedLines(leader.LogPath) > seen })
		before := r.commitsAccepted()
		r.await("20 commits acknowledged while the leader's write is blocked", 30*time.Second, func() bool {
			return r.commitsAccepted() >= before+20
		})
		acked := r.commitsAccepted() - before
		whole := cycle%2 == 1
		if whole {
			for _, nd := range r.c.Nodes {
				r.c.Kill(nd)
			}
		} else {
			r.c.Kill(leader)
		}
		if err := os.Remove(block); err != nil {
			t.Fatal(err)
		}
		if whole {
			for _, nd := range r.c.Nodes {
				r.c.Restart(nd)
			}
		} else {
			r.c.Restart(leader)
		}
		r.c.WaitLeader()
		r.c.WaitCaughtUp(leader, 30*time.Second)
		t.Logf("cycle %d: %d commits acknowledged while %s's write was blocked, then kill -9 of %s; restarted, caught up",
			cycle, acked, leader.ID, map[bool]string{false: "the leader", true: "every node"}[whole])
	}
	time.Sleep(time.Second)
	r.stopClients()
	h := r.check()
	if ok, _, _ := h.count("commit"); ok < 100 {
		t.Fatalf("only %d commits acknowledged: the workload did not run", ok)
	}
}
