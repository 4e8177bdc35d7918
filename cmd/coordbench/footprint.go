package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/internal/proccluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// queueFootprint (--cluster only) submits --delayed-jobs (key jobs)
// scheduled jobs with 200-byte args, due an hour ahead so that they stay
// scheduled, in batches of 1,000 from `clients` submitters; then measures
// each node's Go heap in use per job (after a forced GC when the nodes run
// with --enable-pprof: GET /debug/pprof/heap?gc=1; without it the heap
// holds garbage too and the line says gc=false) and RSS; then snapshots a
// follower, kills it (-9), restarts it and measures the time from the
// restart to (1) its gRPC API answering (Cluster.Members), (2) its replica holding every
// job (coordd_fsm_records{family="queue_jobs"}) and (3) its applied index
// reaching the commit index seen before the kill. Latency is unused.
func queueFootprint(ctx context.Context, cfg config, n int) (*result, error) {
	lc := cfg.cluster
	if lc == nil {
		return nil, errors.New("queue-footprint needs --cluster")
	}
	q, done, err := leaderQueue(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	total := qcfg.delayed
	gc := true
	before := map[string]float64{}
	for _, nd := range lc.Nodes {
		h, forced, err := nodeHeap(nd)
		if err != nil {
			return nil, err
		}
		gc = gc && forced
		before[nd.ID] = h
	}
	name := queueName("footprint")
	args := bytes.Repeat([]byte("x"), 200)
	runAt := time.Now().Add(time.Hour).UnixMilli()
	var next, errs atomic.Int64
	var lastErr atomic.Value
	t0 := time.Now()
	var wg sync.WaitGroup
	for s := 0; s < n; s++ {
		wg.Go(func() {
			for {
				from := int(next.Add(int64(qcfg.batch))) - qcfg.batch
				if from >= total {
					return
				}
				jobs := make([]*coordv1.NewJob, min(qcfg.batch, total-from))
				for i := range jobs {
					jobs[i] = &coordv1.NewJob{Queue: name, Kind: "send-report", Args: args, RunAt: pbtime.At(runAt)}
				}
				// Retried until it is applied: a retry of a submit that
				// was applied after all adds its jobs twice, so the
				// heap is divided by the jobs the nodes hold, not by N.
				for {
					sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					_, err := q.Submit(sctx, &coordv1.QueueSubmitRequest{Jobs: jobs})
					cancel()
					if err == nil {
						break
					}
					errs.Add(1)
					lastErr.Store(err.Error())
					time.Sleep(time.Second)
				}
			}
		})
	}
	wg.Wait()
	submitTook := time.Since(t0)
	if errs.Load() > 0 {
		fmt.Fprintf(os.Stderr, "queue-footprint: %d submit errors, last: %v\n", errs.Load(), lastErr.Load())
	}
	r := &result{workload: "queue-footprint", clients: n, ops: int64(total), elapsed: submitTook, errors: errs.Load()}
	r.add("jobs", total)
	r.add("args_bytes", len(args))
	r.add("gc_forced", gc)
	// Every node has applied every job before it is measured; held is
	// what they hold (more than total when a retried submit was applied
	// twice).
	held := total
	for _, nd := range lc.Nodes {
		if _, err := waitRecords(nd, total, time.Now().Add(2*time.Minute)); err != nil {
			return nil, err
		}
		if v, err := scrape("http://"+nd.HTTPAddr+"/metrics", recordsMetric); err == nil {
			held = max(held, int(v))
		}
	}
	r.add("jobs_held", held)
	var follower *proccluster.Node
	for _, nd := range lc.Nodes {
		h, _, err := nodeHeap(nd)
		if err != nil {
			return nil, err
		}
		r.add("heap_per_job_"+nd.ID, round((h-before[nd.ID])/float64(held)))
		r.add("rss_mib_"+nd.ID, round(float64(rssBytes(nd))/(1<<20)))
		if v, err := scrape("http://"+nd.HTTPAddr+"/metrics", "coordd_raft_leader"); err == nil && v == 0 && follower == nil {
			follower = nd
		}
	}
	if follower == nil {
		return nil, errors.New("queue-footprint: no follower to restart")
	}
	// What one Cluster.Status costs at this size (it hashes the state).
	ts := time.Now()
	if _, err := lc.Status(follower, time.Minute); err == nil {
		r.add("status_call_ms", time.Since(ts).Milliseconds())
	}
	cc, err := dial(follower.GRPCAddr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	ts = time.Now()
	_, err = coordv1.NewClusterClient(cc).Snapshot(sctx, &coordv1.SnapshotRequest{})
	cancel()
	cc.Close()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", follower.ID, err)
	}
	r.add("snapshot_ms", time.Since(ts).Milliseconds())
	r.add("snapshot_mib", round(float64(snapshotBytes(follower.DataDir))/(1<<20)))
	commit := commitIndex(cfg)
	lc.Stop(follower, syscall.SIGKILL)
	tr := time.Now()
	if err := lc.Restart(follower); err != nil {
		return nil, err
	}
	deadline := tr.Add(2 * time.Minute)
	// Serving: a fresh connection answers Cluster.Members (cheap; the
	// harness's own connection would wait out its reconnect backoff).
	var servingAt time.Duration
	for time.Now().Before(deadline) {
		if gcc, err := dial(follower.GRPCAddr); err == nil {
			mctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err = coordv1.NewClusterClient(gcc).Members(mctx, &coordv1.MembersRequest{})
			cancel()
			gcc.Close()
			if err == nil {
				servingAt = time.Since(tr)
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	recordsAt, err := waitRecords(follower, held, deadline)
	if err != nil {
		return nil, err
	}
	var appliedAt time.Duration
	for time.Now().Before(deadline) {
		if v, err := scrape("http://"+follower.HTTPAddr+"/metrics", "coordd_raft_applied_index"); err == nil && uint64(v) >= commit {
			appliedAt = time.Since(tr)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.add("restarted", follower.ID)
	r.add("restart_serving_ms", servingAt.Milliseconds())
	r.add("restart_all_jobs_ms", recordsAt.Sub(tr).Milliseconds())
	r.add("restart_caught_up_ms", appliedAt.Milliseconds())
	if h, _, err := nodeHeap(follower); err == nil {
		r.add("heap_per_job_restarted", round(h/float64(held)))
	}
	return r, nil
}

var heapProfiles int

// nodeHeap is a node's go_memstats_heap_inuse_bytes, after a GC when the
// node serves pprof (forced reports whether it did).
func nodeHeap(nd *proccluster.Node) (heap float64, forced bool, err error) {
	if nd.HTTPAddr == "" {
		return 0, false, fmt.Errorf("%s serves no HTTP", nd.ID)
	}
	hc := http.Client{Timeout: time.Minute}
	if resp, err := hc.Get("http://" + nd.HTTPAddr + "/debug/pprof/heap?gc=1"); err == nil {
		var w io.Writer = io.Discard
		// COORDBENCH_HEAP_DIR keeps the heap profiles (NODE-N.heap, in
		// the order taken) for go tool pprof.
		if dir := os.Getenv("COORDBENCH_HEAP_DIR"); dir != "" && resp.StatusCode == http.StatusOK {
			heapProfiles++
			if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.heap", nd.ID, heapProfiles))); err == nil {
				defer f.Close()
				w = f
			}
		}
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		forced = resp.StatusCode == http.StatusOK
	}
	heap, err = scrape("http://"+nd.HTTPAddr+"/metrics", "go_memstats_heap_inuse_bytes")
	return heap, forced, err
}

const recordsMetric = `coordd_fsm_records{family="queue_jobs"}`

// waitRecords waits until the node's replica holds at least n queue jobs
// and returns when it saw that.
func waitRecords(nd *proccluster.Node, n int, deadline time.Time) (time.Time, error) {
	for {
		v, err := scrape("http://"+nd.HTTPAddr+"/metrics", recordsMetric)
		if err == nil && v >= float64(n) {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: %v queue jobs, want %d (%v)", nd.ID, v, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// snapshotBytes is the size of the largest snapshot state file under the
// node's data dir (hashicorp/raft's file snapshot store).
func snapshotBytes(dir string) int64 {
	var best int64
	_ = walkFiles(dir, func(path string, size int64) {
		if strings.HasSuffix(path, "/state.bin") {
			best = max(best, size)
		}
	})
	return best
}

// walkFiles calls f for every regular file under dir.
func walkFiles(dir string, f func(path string, size int64)) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			f(path, info.Size())
		}
		return nil
	})
}
