package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// watchWorkload: `clients` watchers on one prefix, all on one node (the
// leader, which also does the writes: the worst case), while writers renew
// leases under that prefix at --rate changes per second. Each renewal is one
// change. Reported: changes per second achieved, events delivered, the
// delivery lag at p50/p99/max (a watcher's receipt of a change minus the
// time its writer sent the renewal: commit, apply and delivery; one
// machine, one clock; each lease has one writer, so a lease's renewal
// count names the request), the writes' own latency (write_p50_ms,
// write_p99_ms: the part of the lag that is the commit), the CPU of each
// node (the leader serves the watchers) and of this process, and watches
// that ended with an error.
func watchWorkload(ctx context.Context, cfg config, watchers int) (*result, error) {
	prefix := "wb-" + run + "-" + strconv.Itoa(watchers) + "/"
	leader, err := leaderEndpoint(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cc, done, err := leaderCoord(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	const nLeases, writers, slots = 256, 64, 64
	gens := make([]uint64, nLeases)
	// sent[k][r%slots] is when renewal r of lease k was sent (unix µs).
	sent := make([][slots]atomic.Int64, nLeases)
	renewals := make([]uint64, nLeases) // lease k's renewals so far (its writer only)
	for i := range gens {
		resp, err := cc.Acquire(ctx, &coordv1.AcquireRequest{Name: fmt.Sprintf("%s%d", prefix, i), Owner: "bench", Ttl: pbtime.Dur(600_000)})
		if err != nil || !resp.GetAcquired() {
			return nil, fmt.Errorf("acquire: %v", err)
		}
		gens[i] = resp.GetLease().GetGeneration()
	}

	// Watchers share a few SDK clients (connections), all on the leader.
	nc := min(watchers, max(cfg.conns, 1))
	wcs := make([]*client.Client, nc)
	for i := range wcs {
		if wcs[i], err = client.New(ctx, []string{leader}); err != nil {
			return nil, err
		}
		defer wcs[i].Close()
	}
	wctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	const buckets = 10_000 // 1 ms each; the last counts everything slower
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		hist      = make([]int64, buckets)
		delivered atomic.Int64
		failed    atomic.Int64
		started   sync.WaitGroup
		measuring atomic.Bool
		lastEvent atomic.Int64 // send time of the newest change seen (µs)
	)
	for i := range watchers {
		started.Add(1)
		w := wcs[i%nc].Watch(wctx, prefix, 0, client.WatchFamilies(coordv1.WatchFamily_WATCH_FAMILY_LEASE), client.WatchBuffer(64))
		wg.Go(func() {
			local := make([]int64, buckets)
			first := true
			for resp := range w.Responses() {
				if first {
					started.Done()
					first = false
				}
				now := time.Now().UnixMicro()
				for _, e := range resp.Events {
					k, err := strconv.Atoi(strings.TrimPrefix(e.GetKey(), prefix))
					if err != nil || !measuring.Load() || k >= nLeases {
						continue
					}
					at := sent[k][e.GetLease().GetRenewals()%slots].Load()
					if at == 0 {
						continue
					}
					lag := max(now-at, 0) / 1000
					local[min(lag, buckets-1)]++
					delivered.Add(1)
					if at > lastEvent.Load() {
						lastEvent.Store(at)
					}
				}
			}
			if first {
				started.Done()
			}
			if err := w.Err(); err != nil && !errors.Is(err, context.Canceled) {
				failed.Add(1)
				fmt.Fprintln(os.Stderr, "watch:", err)
			}
			mu.Lock()
			for b, n := range local {
				hist[b] += n
			}
			mu.Unlock()
		})
	}
	started.Wait()

	// Writers: renewals at --rate in total, open loop (paced per writer; a
	// writer behind its schedule sends at once).
	var (
		writes  atomic.Int64
		werrs   atomic.Int64
		writeWG sync.WaitGroup
		wlatMu  sync.Mutex
		wlat    []time.Duration
	)
	writeCtx, stopWriting := context.WithCancel(ctx)
	defer stopWriting()
	period := time.Duration(float64(time.Second) * writers / float64(cfg.rate))
	for w := range writers {
		writeWG.Go(func() {
			var lat []time.Duration
			next := time.Now()
			for i := 0; writeCtx.Err() == nil; i++ {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				next = next.Add(period)
				k := (w + i*writers) % nLeases // lease k is only this writer's
				t0 := time.Now()
				sent[k][(renewals[k]+1)%slots].Store(t0.UnixMicro())
				resp, err := cc.Renew(writeCtx, &coordv1.RenewRequest{Name: fmt.Sprintf("%s%d", prefix, k), Owner: "bench", Generation: gens[k]})
				if err != nil {
					if writeCtx.Err() == nil {
						werrs.Add(1)
					}
					continue
				}
				renewals[k] = resp.GetLease().GetRenewals()
				writes.Add(1)
				if measuring.Load() {
					lat = append(lat, time.Since(t0))
				}
			}
			wlatMu.Lock()
			wlat = append(wlat, lat...)
			wlatMu.Unlock()
		})
	}
	time.Sleep(cfg.warmup)
	measuring.Store(true)
	w0, t0 := writes.Load(), time.Now()
	cpu0, self0 := cpuByNode(cfg), selfTicks()
	time.Sleep(cfg.duration)
	elapsed := time.Since(t0)
	cpu1, self1 := cpuByNode(cfg), selfTicks()
	w1 := writes.Load()
	stopWriting()
	writeWG.Wait()
	// Let the watchers drain what was written, then stop them.
	end := time.Now().Add(-100 * time.Millisecond).UnixMicro()
	deadline := time.Now().Add(10 * time.Second)
	for lastEvent.Load() < end && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	stopWatching()
	wg.Wait()

	r := &result{workload: "watch", clients: watchers, ops: delivered.Load(), elapsed: elapsed, errors: failed.Load()}
	// The latency fields of the line are the delivery lag.
	r.lat = lagSamples(hist)
	r.add("changes_per_s", round(float64(w1-w0)/elapsed.Seconds()))
	sort.Slice(wlat, func(i, j int) bool { return wlat[i] < wlat[j] })
	if len(wlat) > 0 {
		r.add("write_p50_ms", ms(wlat[len(wlat)/2]))
		r.add("write_p99_ms", ms(wlat[min(len(wlat)-1, len(wlat)*99/100)]))
	}
	r.add("target_rate", cfg.rate)
	r.add("write_errors", werrs.Load())
	r.add("events_per_s", round(float64(delivered.Load())/elapsed.Seconds()))
	ticks := float64(clockTicks)
	for id, c1 := range cpu1 {
		role := "follower"
		if nodeAddr(cfg, id) == leader {
			role = "leader"
		}
		r.add("cpu_"+id+"_"+role, cores(c1-cpu0[id], ticks, elapsed))
	}
	r.add("cpu_bench", cores(self1-self0, ticks, elapsed))
	return r, nil
}

// lagSamples turns the histogram into sorted samples at bucket values
// (result's quantiles read them); at most ~100k samples, scaled down.
func lagSamples(hist []int64) []time.Duration {
	var total int64
	for _, n := range hist {
		total += n
	}
	scale := max(total/100_000, 1)
	var out []time.Duration
	for b, n := range hist {
		for range (n + scale - 1) / scale {
			out = append(out, time.Duration(b)*time.Millisecond)
		}
	}
	return out
}

const clockTicks = 100 // USER_HZ on Linux

// cores is CPU ticks over elapsed as cores, to 0.01.
func cores(ticks int64, hz float64, elapsed time.Duration) float64 {
	return math.Round(float64(ticks)/hz/elapsed.Seconds()*100) / 100
}

func nodeAddr(cfg config, id string) string {
	if cfg.cluster == nil {
		return ""
	}
	for _, nd := range cfg.cluster.Nodes {
		if nd.ID == id {
			return nd.GRPCAddr
		}
	}
	return ""
}

// leaderEndpoint is the leader's gRPC address.
func leaderEndpoint(ctx context.Context, cfg config) (string, error) {
	c, err := client.New(ctx, cfg.endpoints)
	if err != nil {
		return "", err
	}
	defer c.Close()
	// A new cluster's nodes learn the leader's gRPC address once it has
	// registered: ask again for a while.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, ep := range cfg.endpoints {
			st, err := c.Status(ctx, ep)
			if err == nil && st.GetLeaderAddress() != "" {
				return st.GetLeaderAddress(), nil
			}
		}
	}
	return "", errors.New("no leader found")
}
