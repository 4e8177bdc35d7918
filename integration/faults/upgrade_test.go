//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/internal/datadir"
	"github.com/coordd/coordd/internal/proccluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// previousRelease is the commit the rolling-upgrade test starts its
// cluster from: the release before the one under test. Move it forward
// when a release is cut (docs/backup-and-upgrade.md, "Version skew").
const previousRelease = "a5dfa34"

// buildPreviousRelease builds coordd at previousRelease and returns the
// binary. The source comes from git archive (a read of the repository:
// nothing is added to it, not even a worktree entry) into a directory
// named by the commit, kept between runs so that Go's build cache serves
// later builds (a first build takes 1–2 minutes here). It skips the test
// when git or the commit is not available (a shallow clone, a tarball).
func buildPreviousRelease(t *testing.T) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("no git: cannot build the previous release %s", previousRelease)
	}
	commit, err := exec.Command(git, "rev-parse", "--verify", previousRelease+"^{commit}").Output()
	if err != nil {
		t.Skipf("the previous release %s is not in this checkout's git history (a shallow clone?): %v", previousRelease, err)
	}
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	src := filepath.Join(os.TempDir(), "coordd-release-"+previousRelease)
	if _, err := os.Stat(filepath.Join(src, "cmd", "coordd", "main.go")); err != nil {
		tmp, err := os.MkdirTemp(os.TempDir(), "coordd-release-"+previousRelease+".tmp-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		archive := exec.Command(git, "archive", strings.TrimSpace(string(commit)))
		archive.Dir = strings.TrimSpace(string(top)) // from a subdirectory git archives only that one
		extract := exec.Command("tar", "-x", "-C", tmp)
		pipe, err := archive.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		extract.Stdin = pipe
		if err := extract.Start(); err != nil {
			t.Fatal(err)
		}
		if err := archive.Run(); err != nil {
			t.Fatalf("git archive %s: %v", previousRelease, err)
		}
		if err := extract.Wait(); err != nil {
			t.Fatalf("tar: %v", err)
		}
		_ = os.RemoveAll(src)
		if err := os.Rename(tmp, src); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(filepath.Dir(coorddBin), "coordd-"+previousRelease)
	t0 := time.Now()
	build := exec.Command("go", "build", "-o", bin, "./cmd/coordd")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build coordd %s: %v\n%s", previousRelease, err, out)
	}
	t.Logf("built coordd %s in %s", previousRelease, time.Since(t0).Round(time.Millisecond))
	return bin
}

// refusalsAllowed are the refusals a valid call of this workload may get
// from a healthy cluster of one version: contention and races between the
// clients (a lease held by another; a window of job J that another holder
// completed first, or that a holder of the other lease, L2, claimed since:
// the work clients of L and L2 share J's windows; a commit or completion
// after the lease lapsed). Anything else (INVALID_ARGUMENT, UNIMPLEMENTED, an unknown
// reason) is a call one version refused that the other accepts.
var refusalsAllowed = map[string]bool{
	"WINDOW_COMPLETED": true, "WINDOW_CLAIMED": true, "WINDOW_NOT_CLAIMED": true, "LEASE_HELD": true,
	"LEASE_EXPIRED": true, "LEASE_LOST": true, "STALE_TOKEN": true, "LEASE_RELEASED": true,
}

// Issue #30: a rolling upgrade under load. A 3-node cluster of the previous
// release (built from previousRelease) runs lease workers (acquire, claim,
// fenced commits, complete, release), a kept-alive holder and queue
// workers while jobs are submitted; the nodes are upgraded one at a time,
// followers first and the leader last (SIGTERM, swap the binary, start on
// the same data dir, wait until it caught up), so the cluster runs mixed
// versions in between. Nothing acknowledged is lost (the checkers, every
// submitted job succeeded with one effect), the holder never lost its
// lease, and no call was refused other than by the workload's own
// contention; the retryable unavailability of a leader change is retried
// by the SDK and counted.
func TestRollingUpgrade(t *testing.T) {
	if !full() {
		t.Skip("full profile only (COORDD_FAULTS_PROFILE=full): building the previous release takes 1–2 minutes on a first run")
	}
	old := buildPreviousRelease(t)
	r := newRunOn(t, func() *proccluster.TestCluster { return proccluster.Start(t, old, 3) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const q = "upgrade"
	l := r.qworkers(q, "--concurrency", "16", "--hold", "50ms")
	r.client("lw1", "work", "--ttl", "2s", "--interval", "20ms")
	r.client("lw2", "work", "--ttl", "2s", "--interval", "20ms")
	r.client("lw3", "work", "--lease", "L2", "--resource", "R2", "--ttl", "2s", "--interval", "20ms")
	r.client("holder", "hold", "--lease", "H", "--resource", "HR", "--ttl", "5s", "--interval", "200ms")
	qc := queue.New(r.sdk(ctx, "submitter"))

	var (
		mu   sync.Mutex
		want = map[uint64]int64{}
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	wg.Go(func() {
		for b := 0; ; b++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			ids, err := submitBatches(ctx, t.Logf, qc, newJobs(t, q, fmt.Sprintf("b%d", b), 20, nil,
				queue.VisibilityTimeout(3*time.Second), queue.Backoff(100*time.Millisecond, time.Second, 2)))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for id, at := range ids {
				want[id] = at
			}
			mu.Unlock()
		}
	})
	settle := time.Duration(cycles(3, 10)) * time.Second
	time.Sleep(settle) // the old cluster under load
	leader := r.c.WaitLeader()
	var order []*proccluster.Node
	for _, nd := range r.c.Nodes {
		if nd != leader {
			order = append(order, nd)
		}
	}
	order = append(order, leader)
	for i, nd := range order {
		t0 := time.Now()
		if nd == leader { // as documented: hand leadership to an upgraded node first
			tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := coordv1.NewClusterClient(nd.Conn).TransferLeadership(tctx, &coordv1.TransferLeadershipRequest{Id: order[0].ID})
			tcancel()
			if err != nil {
				t.Fatalf("leader transfer to %s: %v", order[0].ID, err)
			}
			r.await(order[0].ID+" leads", 10*time.Second, func() bool { return r.c.Leader() == order[0] })
		}
		r.c.Stop(nd) // SIGTERM
		nd.Bin = coorddBin
		r.c.Restart(nd)
		r.c.WaitCaughtUp(nd, 60*time.Second)
		// The new binary marks the data dir with its format; the old one
		// does not know the marker (and is not bothered by it).
		if b, err := os.ReadFile(filepath.Join(nd.DataDir, datadir.FormatFile)); err != nil {
			t.Errorf("%s runs the new binary but its data dir has no %s: %v", nd.ID, datadir.FormatFile, err)
		} else {
			t.Logf("upgrade %d/3: %s (was leader: %v) stopped, swapped and caught up in %s; %s", i+1, nd.ID, nd == leader,
				time.Since(t0).Round(time.Millisecond), strings.TrimSpace(string(b)))
		}
		time.Sleep(settle) // the mixed cluster under load
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	n := len(want)
	mu.Unlock()
	r.awaitAllFinal(ctx, qc, q, n, 2*time.Minute)
	r.stopClients()
	r.checkEffects(l, want)
	h := r.check()
	if lost := lostEvents(h, "holder"); lost != 0 {
		t.Errorf("the kept-alive holder lost its lease %d times during the upgrade", lost)
	}
	refused, unknown := map[string]int{}, 0
	for _, o := range h.ops {
		if o.unknown() {
			unknown++ // the client's own timeout or a cut connection; the checkers allow either outcome
			continue
		}
		if o.ok() {
			continue
		}
		refused[o.call.Op+" "+o.ret.Reason]++
		if !refusalsAllowed[o.ret.Reason] {
			t.Errorf("%s %s (%s generation %d) refused during the upgrade: %s", o.client, o.call.Op, o.call.Lease, o.call.Gen, o.ret.Reason)
		}
	}
	var kinds []string
	for k, v := range refused {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(kinds)
	t.Logf("%d jobs submitted and succeeded across the upgrade; %d lease operations of unknown outcome; refusals by op and reason: %v",
		n, unknown, kinds)
}
