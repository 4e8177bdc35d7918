package main

import (
	"context"
	"math"
	"time"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// commandsPerOp is how many Raft log commands one counted operation
// proposes (an acquire-release cycle is an Acquire and a Release).
var commandsPerOp = map[string]int{
	"acquire-release": 2, "renew": 1, "fenced-commit": 1, "fenced-commit-hot": 1, "window-cycle": 4,
}

// clusterCounters are the tool's own cluster's counters at one instant.
type clusterCounters struct {
	at         time.Time
	cpu        int64 // utime+stime of all nodes, clock ticks
	writeBytes int64 // /proc/PID/io write_bytes of all nodes
	commit     uint64
}

// readCounters samples the cluster: the commit index always, CPU and
// bytes written only of the tool's own cluster (-1 otherwise).
func readCounters(cfg config) *clusterCounters {
	return &clusterCounters{at: time.Now(), cpu: cpuTicks(cfg), commit: commitIndex(cfg), writeBytes: writeBytes(cfg)}
}

// clusterMetric is the highest value of an unlabelled metric over the
// tool's own cluster's nodes (ok false without --cluster or if none
// answers). The tool reads Raft indexes and terms from /metrics, not
// Cluster.Status: Status computes the FSM digest, a hash of the whole
// state's snapshot encoding (seconds of CPU per call at 1,000,000 jobs).
func clusterMetric(cfg config, metric string) (best float64, ok bool) {
	if cfg.cluster == nil {
		return 0, false
	}
	for _, nd := range cfg.cluster.Nodes {
		if !nd.Running() || nd.HTTPAddr == "" {
			continue
		}
		if v, err := scrape("http://"+nd.HTTPAddr+"/metrics", metric); err == nil {
			best, ok = max(best, v), true
		}
	}
	return best, ok
}

// commitIndex is the highest commit index the nodes report.
func commitIndex(cfg config) uint64 {
	return highest(cfg, "coordd_raft_commit_index", (*coordv1.StatusResponse).GetCommitIndex)
}

// highest is the highest value of a node metric, from /metrics when the
// nodes are ours, else from each endpoint's Status (0 if none answers).
func highest(cfg config, metric string, field func(*coordv1.StatusResponse) uint64) uint64 {
	if v, ok := clusterMetric(cfg, metric); ok {
		return uint64(v)
	}
	var best uint64
	for _, ep := range cfg.endpoints {
		cc, err := dial(ep)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := coordv1.NewClusterClient(cc).Status(ctx, &coordv1.StatusRequest{})
		cancel()
		cc.Close()
		if err == nil {
			best = max(best, field(st))
		}
	}
	return best
}

// sampleCounters reads the cluster's counters at start and at end, in the
// background; the returned func waits for the second reading and adds
// what the cluster did in between to a result (addCounters).
func sampleCounters(cfg config, start, end time.Time) func(*result) {
	var before, after *clusterCounters
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		time.Sleep(time.Until(start))
		before = readCounters(cfg)
		time.Sleep(time.Until(end))
		after = readCounters(cfg)
	}()
	return func(r *result) {
		<-sampled
		addCounters(r, before, after)
	}
}

// addCounters adds what the cluster did between a and b to r: cores,
// Raft entries, commands per entry and bytes written per command (per
// node: the three nodes' write_bytes / 3).
func addCounters(r *result, a, b *clusterCounters) {
	if a == nil || b == nil {
		return
	}
	secs := b.at.Sub(a.at).Seconds()
	nodes := 3.0
	if a.cpu >= 0 {
		r.add("cluster_cores", math.Round(float64(b.cpu-a.cpu)/secs)/100) // ticks are 1/100 s
	}
	entries := int64(b.commit - a.commit)
	r.add("raft_entries_per_s", round(float64(entries)/secs))
	if cpo := commandsPerOp[r.workload]; cpo > 0 && r.ops > 0 {
		cmds := float64(r.ops) * float64(cpo) * secs / r.elapsed.Seconds()
		if entries > 0 {
			r.add("commands_per_entry", round(cmds/float64(entries)))
		}
		if a.writeBytes >= 0 {
			r.add("write_bytes_per_command_node", round(float64(b.writeBytes-a.writeBytes)/nodes/cmds))
		}
	}
}

// clusterTerm is the highest Raft term the nodes report (0 if none answers).
func clusterTerm(cfg config) uint64 {
	return highest(cfg, "coordd_raft_term", (*coordv1.StatusResponse).GetTerm)
}

// leaderChanges is how many terms began since term0: elections during a
// workload (each new term is one; a run that saw none reports 0).
func leaderChanges(cfg config, term0 uint64) int64 {
	t := clusterTerm(cfg)
	if t == 0 || term0 == 0 {
		return -1
	}
	return int64(t - term0)
}
