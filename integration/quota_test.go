package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Issue 32, item 5: one tenant floods every node for a few seconds with
// what the issue measured — 64 KiB-arg jobs at about 32 MiB/s offered, and
// @every 1s schedules with 60 KB args at about 500 puts/s — and keeps
// sending whatever is refused; the default quotas (judged by the leader,
// so spreading the flood over the three nodes does not multiply them)
// keep the other tenant's Acquire p99 under 120 ms (50 ms on a quiet
// machine; a loaded 2-core one measured 74 ms). Before the quotas the
// flood was all accepted and the p99 went to hundreds of ms (the issue:
// 1.4 s), which this bound still tells apart. What was accepted is judged too: at most the leader's one bucket
// of job args bytes (burst and rate, whichever nodes the flood went
// through) and the @every 1s schedules the jobs and bytes rates allow (34
// at the defaults: the 60 KB args bind first). It skips under the race
// detector, whose slowdown makes the flood's own TLS and decoding saturate
// two cores; scripts/test.sh runs it once more without the detector.
func TestQuotasKeepTheOtherTenantFast(t *testing.T) {
	if raceDetector {
		// Under the race detector the flood's own TLS and decoding take
		// the two cores from the nodes, and Raft's heartbeats with them:
		// what is measured is then the detector. scripts/test.sh runs this
		// test once more without it.
		t.Skip("measures latency: run without -race (scripts/test.sh does: go test -run TestQuotasKeepTheOtherTenantFast ./integration)")
	}
	c, certs, _ := secureCluster(t, 3, "", testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.Limits = auth.DefaultLimits()
	}))
	leader := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The other tenant: Acquire and Release one lease on the leader, as
	// fast as it can, until stop.
	other := coordAs(t, certs, leader, "ledger-svc")
	// A failure is returned, not fatal, so that the flood below is always
	// stopped and awaited before the test ends (a flood left running would
	// starve the tests after it).
	measure := func(stop time.Time) ([]time.Duration, error) {
		var lat []time.Duration
		for time.Now().Before(stop) {
			start := time.Now()
			r, err := other.Acquire(ctx, &coordv1.AcquireRequest{Name: "ledger/close", Owner: "l", Ttl: pbtime.Dur(10_000)})
			if err != nil || !r.GetAcquired() {
				return nil, fmt.Errorf("the other tenant's acquire: %v %v", r, err)
			}
			lat = append(lat, time.Since(start))
			if _, err := other.Release(ctx, &coordv1.ReleaseRequest{Name: "ledger/close", Owner: "l", Generation: r.GetLease().GetGeneration()}); err != nil {
				return nil, fmt.Errorf("the other tenant's release: %w", err)
			}
		}
		slices.Sort(lat)
		return lat, nil
	}
	if _, err := measure(time.Now().Add(500 * time.Millisecond)); err != nil { // warm up: connections, the first entries
		t.Fatal(err)
	}
	base, err := measure(time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}

	const flood = 3 * time.Second
	args := jsonArgs(64 << 10)
	schedArgs := jsonArgs(60_000)
	var accepted, refused, schedules atomic.Int64
	refusals := sync.Map{} // reason -> true
	start := time.Now()
	stop := start.Add(flood)
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		q := coordv1.NewQueueClient(connAs(t, certs.Client("billing-svc"), n.API.GRPCAddr()))
		sc := coordv1.NewSchedulesClient(connAs(t, certs.Client("billing-svc"), n.API.GRPCAddr()))
		for g := range 3 {
			wg.Go(func() {
				jobs := make([]*coordv1.NewJob, 8)
				for k := range jobs {
					jobs[k] = &coordv1.NewJob{Queue: "billing", Kind: "flood", Args: args}
				}
				// 9 senders of 512 KiB every 140 ms: about 32 MiB/s.
				for tick := time.NewTicker(140 * time.Millisecond); time.Now().Before(stop) && ctx.Err() == nil; <-tick.C {
					_, err := q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: jobs})
					count(err, len(jobs), &accepted, &refused, &refusals)
				}
			})
			wg.Go(func() {
				// 9 senders every 18 ms: about 500 puts/s.
				tick := time.NewTicker(18 * time.Millisecond)
				for k := 0; time.Now().Before(stop) && ctx.Err() == nil; k++ {
					<-tick.C
					_, err := sc.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{
						Name: fmt.Sprintf("flood-%d-%d-%d", i, g, k), Schedule: "@every 1s",
						Job: &coordv1.JobTemplate{Queue: "billing", Kind: "flood", Args: schedArgs}}})
					count(err, 1, &schedules, &refused, &refusals)
				}
			})
		}
	}
	lat, err := measure(stop)
	if err != nil {
		cancel() // stop the flood at once
		wg.Wait()
		t.Fatal(err)
	}
	wg.Wait()
	elapsed := time.Since(start) // calls still in flight at stop count too
	p99 := lat[len(lat)*99/100]
	var reasons []string
	refusals.Range(func(k, _ any) bool { reasons = append(reasons, k.(string)); return true })
	t.Logf("other tenant before the flood: %d acquires, p50 %s, p99 %s", len(base), base[len(base)/2], base[len(base)*99/100])
	t.Logf("flood: %d jobs (%d MiB) and %d schedules accepted, %d calls refused (%v); other tenant: %d acquires, p50 %s, p99 %s, max %s",
		accepted.Load(), accepted.Load()*int64(len(args))>>20, schedules.Load(), refused.Load(), reasons,
		len(lat), lat[len(lat)/2], p99, lat[len(lat)-1])
	lim := auth.DefaultLimits()
	if maxBytes := auth.MinJobBytesBurst + int64(float64(lim.JobBytesPerSecond)*elapsed.Seconds()); accepted.Load()*int64(len(args)) > maxBytes {
		t.Errorf("%d job args bytes accepted in %s: more than the leader's bucket gives (%d)", accepted.Load()*int64(len(args)), elapsed, maxBytes)
	}
	if schedules.Load() > int64(lim.ScheduleJobsPerSecond) {
		t.Errorf("%d @every 1s schedules accepted, over the jobs rate of %g/s", schedules.Load(), lim.ScheduleJobsPerSecond)
	}
	if p99 > 120*time.Millisecond && !raceDetector {
		t.Fatalf("the other tenant's acquire p99 is %s during the flood (want under 120ms; without the quotas: 175 ms to 1.4 s)", p99)
	}
}

// count adds n to ok, or one refusal (RESOURCE_EXHAUSTED, by reason) to
// refused; any other error is the test's failure, reported as a reason.
func count(err error, n int, ok, refused *atomic.Int64, reasons *sync.Map) {
	if err == nil {
		ok.Add(int64(n))
		return
	}
	code, reason, _ := errInfo(err)
	if code != codes.ResourceExhausted {
		reason = code.String() + ": " + err.Error()
	}
	refused.Add(1)
	reasons.Store(reason, true)
}

// Each quota refuses with its reason, judged on the leader whichever node
// the call enters (here a follower): job args bytes per second
// (RATE_LIMITED, "limit": "job_bytes"), live jobs (JOB_QUOTA), schedules
// (SCHEDULE_QUOTA "schedules"), their rate of jobs ("jobs_rate") and of
// args bytes ("bytes_rate"). Other identities are not affected.
func TestQuotasRefuseEachLimit(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, "", testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.Limits = auth.Limits{LiveJobsPerIdentity: 70, SchedulesPerIdentity: 2, JobBytesPerSecond: 1, ScheduleJobsPerSecond: 1.5}
		if raceDetector {
			// Replicating the 4 MiB the bytes burst lets in, over TLS under
			// the detector, can keep a follower from answering within the
			// default 250 ms leader lease, and a leader change is not what
			// this test is about: Raft's timeouts at four times the default.
			cfg.Node.HeartbeatTimeout, cfg.Node.ElectionTimeout, cfg.Node.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, time.Second
		}
	}))
	c.WaitLeader()
	f := c.Followers()[0]
	ctx := ctxT(t)
	queueAs := func(id string) coordv1.QueueClient {
		return coordv1.NewQueueClient(connAs(t, certs.Client(id), f.API.GRPCAddr()))
	}
	jobs := func(n, size int) *coordv1.QueueSubmitRequest {
		req := &coordv1.QueueSubmitRequest{}
		for range n {
			req.Jobs = append(req.Jobs, &coordv1.NewJob{Queue: "q", Kind: "k", Args: jsonArgs(size)})
		}
		return req
	}
	// Bytes: the burst (auth.MinJobBytesBurst, 4 MiB) takes 63 jobs of
	// 64 KiB (in batches of 9: an entry of 4 MiB takes a loaded follower
	// longer than a heartbeat), then the rate (1 byte/s) refuses the next.
	a := queueAs("tenant-a")
	for range 7 {
		if _, err := a.Submit(ctx, jobs(9, 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := a.Submit(ctx, jobs(2, 64<<10)) // 65 x 64 KiB > 4 MiB
	if meta := wantErr(t, err, codes.ResourceExhausted, "RATE_LIMITED"); meta["limit"] != "job_bytes" || meta["identity"] != "tenant-a" {
		t.Fatalf("job bytes: %v", meta)
	}
	// Live jobs: 70, exactly; the batch that would pass it is refused whole.
	b := queueAs("tenant-b")
	if _, err := b.Submit(ctx, jobs(69, 0)); err != nil {
		t.Fatal(err)
	}
	_, err = b.Submit(ctx, jobs(2, 0))
	if meta := wantErr(t, err, codes.ResourceExhausted, "JOB_QUOTA"); meta["live"] != "69" || meta["limit"] != "70" {
		t.Fatalf("live jobs: %v", meta)
	}
	if _, err := b.Submit(ctx, jobs(1, 0)); err != nil {
		t.Fatalf("the 70th job: %v", err)
	}
	// Schedules: their rate of jobs (1.5/s), then their count (2).
	sc := coordv1.NewSchedulesClient(connAs(t, certs.Client("tenant-c"), f.API.GRPCAddr()))
	put := func(name, expr string, args int) error {
		_, err := sc.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: name, Schedule: expr,
			Job: &coordv1.JobTemplate{Queue: "q", Kind: "k", Args: jsonArgs(args)}}})
		return err
	}
	if err := put("c1", "@every 1s", 0); err != nil {
		t.Fatal(err)
	}
	if meta := wantErr(t, put("c2", "@every 1s", 0), codes.ResourceExhausted, "SCHEDULE_QUOTA"); meta["quota"] != "jobs_rate" {
		t.Fatalf("schedule jobs rate: %v", meta)
	}
	// Replacing c1 by a slower one is judged without its old rate.
	if err := put("c1", "@every 2s", 0); err != nil {
		t.Fatalf("replacing c1: %v", err)
	}
	if meta := wantErr(t, put("c2", "@every 1m", 120), codes.ResourceExhausted, "SCHEDULE_QUOTA"); meta["quota"] != "bytes_rate" {
		t.Fatalf("schedule bytes rate: %v", meta)
	}
	if err := put("c2", "@every 1m", 0); err != nil {
		t.Fatal(err)
	}
	if meta := wantErr(t, put("c3", "@every 1h", 0), codes.ResourceExhausted, "SCHEDULE_QUOTA"); meta["quota"] != "schedules" || meta["limit"] != "2" {
		t.Fatalf("schedules: %v", meta)
	}
	// Another identity has its own quotas.
	d := coordv1.NewSchedulesClient(connAs(t, certs.Client("tenant-d"), f.API.GRPCAddr()))
	if _, err := d.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "d1", Schedule: "@every 1s",
		Job: &coordv1.JobTemplate{Queue: "q", Kind: "k"}}}); err != nil {
		t.Fatal(err)
	}
}

// The call rate of an identity is counted on the node a call enters and
// again on the leader for a call a follower forwards: writes spread over
// every node come out of one bucket (before, each node had its own, so
// three nodes tripled the rate).
func TestCallRateIsCountedOnTheLeader(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, "", testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.Limits = auth.Limits{RequestsPerSecond: 0.001, Burst: 4}
	}))
	leader := c.WaitLeader()
	fs := c.Followers()
	ctx := ctxT(t)
	acq := func(n *testcluster.Node, name string) error {
		_, err := coordAs(t, certs, n, "tenant-a").Acquire(ctx, &coordv1.AcquireRequest{Name: name, Owner: "o", Ttl: pbtime.Dur(10_000)})
		return err
	}
	for i := range 4 { // the burst, through the first follower
		if err := acq(fs[0], fmt.Sprintf("a/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The second follower has tokens of its own, the leader none left.
	if meta := wantErr(t, acq(fs[1], "a/4"), codes.ResourceExhausted, "RATE_LIMITED"); meta["identity"] != "tenant-a" {
		t.Fatalf("through another follower: %v", meta)
	}
	wantErr(t, acq(leader, "a/5"), codes.ResourceExhausted, "RATE_LIMITED")
	// Another identity is not affected.
	if _, err := coordAs(t, certs, fs[1], "tenant-b").Acquire(ctx, &coordv1.AcquireRequest{Name: "b/1", Owner: "o", Ttl: pbtime.Dur(10_000)}); err != nil {
		t.Fatal(err)
	}
}
