//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/pbtime"
	"github.com/coordd/coordd/internal/proccluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// backupState is what a cluster holds, read through the API: every lease,
// the window ledger of job J, the fenced resources, every queue job and
// every schedule.
type backupState struct {
	leases    map[string]*coordv1.Lease
	windows   map[string]*coordv1.Window
	resources map[string]*coordv1.Resource
	jobs      map[uint64]*coordv1.QueueJob
	schedules map[string]*coordv1.Schedule
	lastJob   uint64
}

func readBackupState(t *testing.T, ctx context.Context, c *client.Client, resources []string) *backupState {
	t.Helper()
	s := &backupState{leases: map[string]*coordv1.Lease{}, windows: map[string]*coordv1.Window{},
		resources: map[string]*coordv1.Resource{}, jobs: map[uint64]*coordv1.QueueJob{}, schedules: map[string]*coordv1.Schedule{}}
	for tok := ""; ; {
		p, err := c.ListLeases(ctx, "", tok, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range p.GetLeases() {
			s.leases[l.GetName()] = l
		}
		if tok = p.GetNextPageToken(); tok == "" {
			break
		}
	}
	for tok := ""; ; {
		p, err := c.ListWindows(ctx, "J", tok, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range p.GetWindows() {
			s.windows[w.GetJob()+"/"+w.GetWindow()] = w
		}
		if tok = p.GetNextPageToken(); tok == "" {
			break
		}
	}
	for _, name := range resources {
		res, err := c.GetResource(ctx, name)
		if err != nil {
			t.Fatalf("resource %s: %v", name, err)
		}
		s.resources[name] = res
	}
	for tok := ""; ; {
		p, err := c.Queue().List(ctx, &coordv1.QueueListRequest{PageSize: 1000, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range p.GetJobs() {
			s.jobs[j.GetId()] = j
			s.lastJob = max(s.lastJob, j.GetId())
		}
		if tok = p.GetNextPageToken(); tok == "" {
			break
		}
	}
	for sc, err := range c.ListSchedules(ctx, "", false) {
		if err != nil {
			t.Fatal(err)
		}
		s.schedules[sc.GetSpec().GetName()] = sc
	}
	return s
}

// loadQueueAndSchedules leaves jobs in every state and a few schedules:
// per state 4 jobs (SUCCEEDED, DEAD, RUNNING, CANCELLED, AVAILABLE) and
// bulk SCHEDULED jobs (run_at a day ahead); three hourly schedules, one of
// them paused.
func loadQueueAndSchedules(t *testing.T, ctx context.Context, c *client.Client, bulk int) {
	t.Helper()
	q := c.Queue()
	submit := func(queue string, n int, tweak func(*coordv1.NewJob)) {
		for done := 0; done < n; {
			k := min(500, n-done)
			req := &coordv1.QueueSubmitRequest{}
			for i := 0; i < k; i++ {
				j := &coordv1.NewJob{Queue: queue, Kind: "bk", Args: []byte(fmt.Sprintf(`{"n":%d}`, done+i)), MaxAttempts: 1,
					VisibilityTimeout: pbtime.Dur((10 * time.Minute).Milliseconds())}
				if tweak != nil {
					tweak(j)
				}
				req.Jobs = append(req.Jobs, j)
			}
			if _, err := q.Submit(ctx, req); err != nil {
				t.Fatalf("submit to %s: %v", queue, err)
			}
			done += k
		}
	}
	fetch := func(queue string, n int) []*coordv1.ClaimedJob {
		var out []*coordv1.ClaimedJob
		for len(out) < n {
			resp, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{queue}, Max: uint32(n - len(out)),
				WorkerId: "bk-worker", Wait: pbtime.Dur(1000)})
			if err != nil {
				t.Fatalf("fetch %s: %v", queue, err)
			}
			out = append(out, resp.GetJobs()...)
		}
		return out
	}
	submit("bk-ok", 4, nil)
	var done []*coordv1.JobCompletion
	for _, cj := range fetch("bk-ok", 4) {
		done = append(done, &coordv1.JobCompletion{JobId: cj.GetJob().GetId(), Attempt: cj.GetAttempt().GetNumber(), Result: []byte(`"ok"`)})
	}
	if _, err := q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "bk-worker", Completions: done}); err != nil {
		t.Fatal(err)
	}
	submit("bk-fail", 4, nil)
	var failed []*coordv1.JobFailure
	for _, cj := range fetch("bk-fail", 4) {
		failed = append(failed, &coordv1.JobFailure{JobId: cj.GetJob().GetId(), Attempt: cj.GetAttempt().GetNumber(), Error: "boom"})
	}
	if _, err := q.Fail(ctx, &coordv1.QueueFailRequest{WorkerId: "bk-worker", Failures: failed}); err != nil {
		t.Fatal(err)
	}
	submit("bk-run", 4, nil)
	fetch("bk-run", 4) // left running (visibility 10 min)
	submit("bk-cancel", 4, nil)
	l, err := q.List(ctx, &coordv1.QueueListRequest{Queue: "bk-cancel", PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range l.GetJobs() {
		if _, err := q.Cancel(ctx, &coordv1.QueueCancelRequest{Id: j.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	submit("bk-avail", 4, nil)
	dayAhead := time.Now().Add(24 * time.Hour).UnixMilli()
	submit("bk-later", bulk, func(j *coordv1.NewJob) { j.RunAt = pbtime.At(dayAhead) })
	for i := 0; i < 3; i++ {
		spec := &coordv1.ScheduleSpec{Name: fmt.Sprintf("bk-sched-%d", i), Schedule: "@every 1h",
			Job: &coordv1.JobTemplate{Queue: "bk-sched", Kind: "tick"}}
		if _, err := c.PutSchedule(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.PauseSchedule(ctx, "bk-sched-1"); err != nil {
		t.Fatal(err)
	}
}

// restoreCluster kills every node, wipes its data dir and restores it from
// file as a member of a new cluster of the same nodes (every node from the
// same file, --peers of all), then starts them; it returns how long the
// restores took and how long until a leader served.
func restoreCluster(t *testing.T, c *proccluster.TestCluster, file string, bump uint64) (restore, serve time.Duration) {
	t.Helper()
	for _, nd := range c.Nodes {
		c.Kill(nd)
	}
	var peers []string
	for _, nd := range c.Nodes {
		peers = append(peers, nd.ID+"="+nd.RaftAddr)
		if err := os.RemoveAll(nd.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	for i, nd := range c.Nodes {
		args := []string{"restore", "--from", file, "--data-dir", nd.DataDir, "--id", nd.ID, "--raft-addr", nd.RaftAddr,
			"--peers", strings.Join(peers, ","), "--bump-generations", fmt.Sprint(bump)}
		if i == 1 {
			args = append(args, "--raft-log-store", otherLogStore()) // whatever the log store
		}
		out, err := exec.Command(coorddBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("coordd restore %s: %v\n%s", nd.ID, err, out)
		}
		t.Logf("%s: %s", nd.ID, strings.TrimSpace(string(out)))
	}
	restore = time.Since(t0)
	t1 := time.Now()
	for _, nd := range c.Nodes {
		c.Restart(nd)
	}
	c.WaitLeader()
	return restore, time.Since(t1)
}

func otherLogStore() string {
	if logStore == "wal" {
		return "bolt"
	}
	return "wal"
}

// The "Done when" (#30): a snapshot saved from a loaded 3-node
// cluster (leases with several generations, fenced resources, windows
// completed, queue jobs in every state, schedules), every node wiped and a
// new 3-node cluster restored from the file (one node on the other log
// store): every acknowledged generation, resource, window, job and
// schedule is there, the next grant of each lease is above every
// generation seen (G1), a token held at the backup no longer commits, and
// the nodes converge.
func TestBackupRestoreWholeCluster(t *testing.T) {
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(ctx, r.c.Endpoints(), client.WithOwner("bk"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r.client("w1", "work", "--ttl", "2s", "--interval", "20ms")
	r.client("w2", "work", "--ttl", "2s", "--interval", "20ms")
	r.client("w3", "work", "--lease", "L2", "--resource", "R2", "--ttl", "2s", "--interval", "20ms")
	bulk := cycles(2000, 50000)
	loadQueueAndSchedules(t, ctx, c, bulk)
	r.await("several generations of L and L2, windows completed", 60*time.Second, func() bool {
		h := loadHistory(t, r.dir)
		gens, completes := map[string]int{}, 0
		for _, o := range h.ops {
			if o.call.Op == "acquire" && o.ok() && o.ret.Accepted {
				gens[o.call.Lease]++
			}
			if o.call.Op == "complete" && o.ok() {
				completes++
			}
		}
		return gens["L"] >= 5 && gens["L2"] >= 5 && completes >= 2
	})
	r.stopClients()
	// A lease held at the backup, with a fenced commit: its token must not
	// commit after the restore.
	held, err := c.Acquire(ctx, "held-at-backup", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.FencedCommit(ctx, "HR", held.Token(), "before-backup", []byte("x")); err != nil {
		t.Fatal(err)
	}
	h := r.check()
	before := readBackupState(t, ctx, c, []string{"R", "R2", "HR"})

	file := filepath.Join(r.dir, "backup.snap")
	t0 := time.Now()
	out, err := exec.Command(coordctlBin, "--endpoints", strings.Join(r.c.Endpoints(), ","), "snapshot", "save", file).CombinedOutput()
	if err != nil {
		t.Fatalf("coordctl snapshot save: %v\n%s", err, out)
	}
	saveTook := time.Since(t0)
	t.Logf("%s", strings.TrimSpace(string(out)))
	table, err := exec.Command(coordctlBin, "snapshot", "inspect", file).CombinedOutput()
	if err != nil {
		t.Fatalf("coordctl snapshot inspect: %v\n%s", err, table)
	}
	t.Logf("coordctl snapshot inspect:\n%s", table)
	js, err := exec.Command(coordctlBin, "-o", "json", "snapshot", "inspect", file).CombinedOutput()
	if err != nil {
		t.Fatalf("coordctl snapshot inspect: %v\n%s", err, js)
	}
	var insp struct {
		Header struct {
			Index, Term, Size uint64
			Members           []struct{ ID string }
		}
		Counts struct {
			Leases, Windows, Resources, Jobs, Schedules int
			MaxGeneration                               uint64 `json:"max_generation"`
		}
	}
	if err := json.Unmarshal(js, &insp); err != nil {
		t.Fatalf("inspect output %s: %v", js, err)
	}
	if insp.Counts.Leases != len(before.leases) || insp.Counts.Jobs != len(before.jobs) ||
		insp.Counts.Schedules != len(before.schedules) || insp.Counts.Windows < len(before.windows) ||
		insp.Counts.Resources != len(before.resources) || len(insp.Header.Members) != 3 || insp.Header.Index == 0 {
		t.Fatalf("inspect: %s; the cluster holds %d leases, %d windows of J, %d resources, %d jobs, %d schedules", js,
			len(before.leases), len(before.windows), len(before.resources), len(before.jobs), len(before.schedules))
	}
	t.Logf("backup: %d bytes at index %d for %d leases, %d windows, %d resources, %d jobs, %d schedules; saved in %s",
		insp.Header.Size, insp.Header.Index, insp.Counts.Leases, insp.Counts.Windows, insp.Counts.Resources,
		insp.Counts.Jobs, insp.Counts.Schedules, saveTook.Round(time.Millisecond))

	// Every generation any client saw, per lease.
	maxSeen := map[string]uint64{}
	for _, o := range h.ops {
		maxSeen[o.call.Lease] = max(maxSeen[o.call.Lease], o.call.Gen, o.ret.Gen)
	}
	const bump = 1000
	restoreTook, serveTook := restoreCluster(t, r.c, file, bump)
	t.Logf("restore of 3 data dirs: %s; leader serving %s after the starts", restoreTook.Round(time.Millisecond), serveTook.Round(time.Millisecond))

	after := readBackupState(t, ctx, c, []string{"R", "R2", "HR"})
	for name, b := range before.leases {
		a := after.leases[name]
		if a == nil || a.GetGeneration() != b.GetGeneration()+bump || !a.GetReleased() {
			t.Errorf("lease %s: before %v, after the restore %v (want generation %d, released)", name, b, a, b.GetGeneration()+bump)
		}
	}
	for k, b := range before.windows {
		if a := after.windows[k]; !proto.Equal(a, b) {
			t.Errorf("window %s: before %v, after %v", k, b, a)
		}
	}
	for k, b := range before.resources {
		// last_commit_at is a lease-time stamp rendered on the calendar
		// through the lease clock's lag, which grew by the outage.
		a := proto.Clone(after.resources[k]).(*coordv1.Resource)
		b = proto.Clone(b).(*coordv1.Resource)
		a.LastCommitAt, b.LastCommitAt = nil, nil
		if !proto.Equal(a, b) {
			t.Errorf("resource %s: before %v, after %v", k, b, a)
		}
	}
	states := map[coordv1.JobState]int{}
	for id, b := range before.jobs {
		states[b.GetState()]++
		if a := after.jobs[id]; !proto.Equal(a, b) {
			t.Errorf("job %d: before %v, after %v", id, b, a)
		}
	}
	for k, b := range before.schedules {
		if a := after.schedules[k]; !proto.Equal(a, b) {
			t.Errorf("schedule %s: before %v, after %v", k, b, a)
		}
	}
	t.Logf("after the restore: %d leases, %d windows, %d resources, %d jobs (%v), %d schedules as before",
		len(before.leases), len(before.windows), len(before.resources), len(before.jobs), states, len(before.schedules))
	for _, st := range []coordv1.JobState{coordv1.JobState_JOB_STATE_SUCCEEDED, coordv1.JobState_JOB_STATE_DEAD,
		coordv1.JobState_JOB_STATE_RUNNING, coordv1.JobState_JOB_STATE_CANCELLED, coordv1.JobState_JOB_STATE_AVAILABLE,
		coordv1.JobState_JOB_STATE_SCHEDULED} {
		if states[st] == 0 {
			t.Errorf("the backup held no job in state %s", st)
		}
	}
	// Every acknowledged commit is still there (its key answers as a
	// duplicate of its generation), and the highest token covers them.
	for lease, lh := range h.byLease() {
		if lease != "" {
			checkDurable(t, r.c.Endpoints(), lh, lease)
		}
	}
	// The token held at the backup is dead: its lease was released.
	if _, err := c.FencedCommit(ctx, "HR", held.Token(), "after-restore", []byte("y")); err == nil {
		t.Error("a fenced commit with the token held at the backup was accepted after the restore")
	} else {
		t.Logf("token held at the backup: %v", err)
	}
	// The next grant of each lease is above every generation seen, and
	// commits.
	for name, b := range before.leases {
		l, err := c.Acquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatalf("acquire %s after the restore: %v", name, err)
		}
		if g := l.Generation(); g <= maxSeen[name] || g <= b.GetGeneration() {
			t.Errorf("lease %s: first grant after the restore is %d, a generation up to %d was seen (%d in the backup)",
				name, g, max(maxSeen[name], b.GetGeneration()), b.GetGeneration())
		}
		_ = l.Release(ctx)
	}
	// A new job's id is above every id of the backup.
	sub, err := c.Queue().Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "bk-new", Kind: "bk"}}})
	if err != nil {
		t.Fatal(err)
	}
	if id := sub.GetJobs()[0].GetId(); id <= before.lastJob {
		t.Errorf("a job submitted after the restore got id %d, the backup's last is %d", id, before.lastJob)
	}
	d := r.c.WaitConverged()
	t.Logf("all restored nodes at digest %s", d[:12])
}

// snapshot save given only a follower's endpoint streams from the leader;
// a restore refuses a data dir that is not empty, a corrupt file, and a
// file of a newer format; a node refuses a data dir of a newer format.
func TestRestoreRefusals(t *testing.T) {
	r := newRun(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "b.snap")
	leader := r.c.WaitLeader()
	var follower *proccluster.Node
	for _, nd := range r.c.Nodes {
		if nd != leader {
			follower = nd
		}
	}
	out, err := exec.Command(coordctlBin, "--endpoints", follower.GRPCAddr, "snapshot", "save", file).CombinedOutput()
	if err != nil {
		t.Fatalf("save through the follower %s: %v\n%s", follower.ID, err, out)
	}
	if !strings.Contains(string(out), "from "+leader.ID+" ") {
		t.Errorf("save through the follower %s: %s, want the leader %s's snapshot", follower.ID, out, leader.ID)
	}
	restore := func(from, data string) (string, error) {
		out, err := exec.Command(coorddBin, "restore", "--from", from, "--data-dir", data, "--id", "x", "--raft-addr", "127.0.0.1:1").CombinedOutput()
		return string(out), err
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(full, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "raft.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := restore(file, full); err == nil || !strings.Contains(out, "is not empty") {
		t.Errorf("restore into a data dir that is not empty: %v %s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(dir, "corrupt.snap")
	b2 := append([]byte(nil), b...)
	b2[len(b2)-1] ^= 0xff
	if err := os.WriteFile(corrupt, b2, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := restore(corrupt, filepath.Join(dir, "d1")); err == nil || !strings.Contains(out, "checksum mismatch") {
		t.Errorf("restore of a corrupt file: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "d1")); err == nil {
		t.Error("a refused restore left a data dir")
	}
	newer := filepath.Join(dir, "newer.snap")
	if err := os.WriteFile(newer, append([]byte("coordd-backup-v9\n"), b[len("coordd-backup-v1\n"):]...), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := restore(newer, filepath.Join(dir, "d2")); err == nil || !strings.Contains(out, "backup format v9 is newer") {
		t.Errorf("restore of a newer format: %v %s", err, out)
	}
	// A node on a data dir of a newer format refuses to start, saying so.
	nd := r.c.Nodes[2]
	r.c.Stop(nd)
	if err := os.WriteFile(filepath.Join(nd.DataDir, "FORMAT"), []byte("coordd-data-format 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(coorddBin, "--id", nd.ID, "--data-dir", nd.DataDir, "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--http-addr", "")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "has format 2, newer than this coordd knows (1)") {
		t.Errorf("coordd on a newer data-dir format: %v\n%s", err, out)
	}
	t.Logf("refusal: %s", strings.TrimSpace(string(out)))
}
