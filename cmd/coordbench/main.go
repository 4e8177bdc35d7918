// Command coordbench is a load generator for coordd, on the Go SDK. Every
// workload prints one JSON line, and a table at the end.
//
//	coordbench --cluster --coordd-bin ./bin/coordd                 # start 3 nodes, run everything
//	coordbench --endpoints 127.0.0.1:7410,... --workload acquire-release --clients 64
//	coordbench --cluster --workload queue,queue-single,queue-delayed --clients 8 --queue-rate 10000
//	coordbench --cluster --raft-log-store wal,bolt --rounds 2    # a fresh cluster per store, alternating
//	coordbench --cluster --workload acquire-release,http-acquire-release,queue-single:raw=1,http-queue --first leader,follower
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordd/coordd/internal/proccluster"
)

type config struct {
	endpoints []string
	duration  time.Duration
	clients   []int
	names     int
	warmup    time.Duration
	wait      bool
	leases    int
	ttl       time.Duration
	reps      int
	conns     int
	rate      int                  // watch: changes per second
	cluster   *proccluster.Cluster // --cluster: the nodes the tool started
	// httpEndpoints are the nodes' HTTP base URLs (http://host:port), in
	// the order of first, for the http-* workloads.
	httpEndpoints []string
	first         string // the --first order of this run ("": as given)
}

// result is one workload's line: the common fields first, then extras.
type result struct {
	workload string
	clients  int
	ops      int64
	elapsed  time.Duration
	lat      []time.Duration
	errors   int64
	extra    [][2]any // ordered key/value pairs
}

func (r *result) add(k string, v any) { r.extra = append(r.extra, [2]any{k, v}) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (r *result) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(q*float64(len(r.lat))))]
}

func (r *result) opsPerS() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func (r *result) json() string {
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	var b bytes.Buffer
	kv := [][2]any{{"system", "coordd"}, {"workload", r.workload}, {"clients", r.clients}, {"ops", r.ops},
		{"ops_per_s", round(r.opsPerS())}, {"p50_ms", ms(r.quantile(0.50))}, {"p99_ms", ms(r.quantile(0.99))},
		{"max_ms", ms(r.quantile(1))}, {"errors", r.errors}}
	b.WriteByte('{')
	for i, p := range append(kv, r.extra...) {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(p[0])
		v, _ := json.Marshal(p[1])
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.String()
}

func round(f float64) float64 { return float64(int64(f*10)) / 10 }

func main() {
	var cfg config
	var (
		endpoints = flag.String("endpoints", os.Getenv("COORD_ENDPOINTS"), "coordd gRPC endpoints (comma-separated)")
		httpEps   = flag.String("http-endpoints", "", "with --endpoints: the nodes' HTTP addresses (host:port or http://host:port, comma-separated) for the http-* workloads; --cluster uses its nodes'")
		cluster   = flag.Bool("cluster", false, "start a local three-node cluster from --coordd-bin and tear it down")
		bin       = flag.String("coordd-bin", "", "coordd binary for --cluster (default: build it from this module)")
		workloads = flag.String("workload", "acquire-release,contended,renew,keepalive,fenced-commit,fenced-commit-hot,window-cycle",
			"comma-separated workloads: acquire-release, contended, renew, grpc-floor (the leader's gRPC health check: one unary round trip with no work behind it), keepalive, fenced-commit, fenced-commit-hot, window-cycle, failover, schedules (clients = every-second schedules whose jobs 3 replicas run), "+
				"queue (clients = workers; submit in batches at --queue-rate), queue-single (clients = submitters, one job per Submit), queue-sdk-single (queue-single through the SDK's queue.Client.Submit on --conns clients; --submit-coalescing), queue-delayed (clients = workers; --delayed-jobs due 1 s to --delay-max ahead), queue-footprint (--cluster; clients = submitters of --delayed-jobs jobs with 200-byte args due in an hour: heap per job on each node, then a follower snapshotted, killed and restarted, timed; run the nodes with --coordd-args=--enable-pprof for a GC before each heap reading), watch (clients = watchers on one prefix, --rate changes/s), "+
				"http-acquire-release (acquire-release over HTTP/JSON), http-queue (queue-single over HTTP/JSON, raw HTTP workers: compare queue-single:raw=1); the http-* workloads send round-robin over the nodes, or with --first all to the first node of the order; "+
				"an item may carry its own settings: NAME:key=value:... with keys clients, duration, warmup, rate, batch, concurrency, workers, jobs, delay-max, fetch-max, raw (e.g. queue:rate=100:duration=30s:clients=4)")
		clients = flag.String("clients", "64", "comma-separated client counts (each workload runs once per count)")
		first   = flag.String("first", "", "comma-separated endpoint orders to run each workload with: leader (the leader's endpoint first), follower (followers first, the leader last); default: as given")
	)
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "time per workload")
	flag.IntVar(&cfg.names, "names", 8, "names for the contended workload")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "run each closed-loop workload this long before measuring")
	flag.BoolVar(&cfg.wait, "wait", true, "contended: waiting acquires (queued on the leader, handed over at release); false: poll every 1 ms")
	flag.IntVar(&cfg.leases, "leases", 10000, "live leases for renew and keepalive")
	flag.DurationVar(&cfg.ttl, "ttl", 3*time.Second, "lease TTL for keepalive")
	flag.IntVar(&cfg.reps, "reps", 5, "repetitions for failover")
	flag.IntVar(&cfg.conns, "conns", 4, "SDK clients (connection sets) the workers share; 0 = one per worker")
	flag.IntVar(&cfg.rate, "rate", 5000, "watch: changes per second (renewals under the watched prefix)")
	flag.BoolVar(&qcfg.raw, "queue-raw", false, "queue workloads: raw gRPC workers (fetch --fetch-max, complete each batch) instead of the SDK's")
	flag.IntVar(&qcfg.concurrency, "queue-concurrency", qcfg.concurrency, "queue workloads: handlers per SDK worker")
	flag.IntVar(&qcfg.rate, "queue-rate", 0, "queue: jobs/s to submit (0: as fast as the cluster takes them)")
	flag.IntVar(&qcfg.batch, "queue-batch", qcfg.batch, "queue, queue-delayed: jobs per Submit (at most 1,000)")
	flag.IntVar(&qcfg.fetchMax, "fetch-max", qcfg.fetchMax, "queue workloads with --queue-raw: jobs per Fetch")
	flag.IntVar(&qcfg.workers, "queue-workers", qcfg.workers, "queue-single: workers completing the jobs")
	flag.IntVar(&qcfg.coalesce, "submit-coalescing", qcfg.coalesce, "queue-sdk-single: Submit RPCs in flight per SDK client before concurrent Submits coalesce (0: off, one RPC per call)")
	flag.IntVar(&qcfg.delayed, "delayed-jobs", qcfg.delayed, "queue-delayed, queue-footprint: jobs to submit")
	flag.DurationVar(&qcfg.delayMax, "delay-max", qcfg.delayMax, "queue-delayed: the latest run_at ahead (the earliest is 1 s)")
	stores := flag.String("raft-log-store", "", "with --cluster: the nodes' Raft log store(s), comma-separated (wal, bolt); each gets a fresh cluster, in turn (default: coordd's)")
	rounds := flag.Int("rounds", 1, "with --cluster: run everything this many times, each store in turn (wal, bolt, wal, bolt, ...)")
	cpuProfile := flag.String("cpuprofile", "", "write the load generator's CPU profile to this file")
	clusterDir := flag.String("cluster-dir", "", "with --cluster: keep the nodes' data dirs and logs under this directory (one subdirectory per cluster) instead of a removed temporary one")
	nodeArgs := flag.String("coordd-args", "", "with --cluster: extra coordd flags for every node, space-separated (e.g. --enable-pprof); the nodes' HTTP addresses are printed to stderr")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "coordbench:", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "coordbench:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if err := qcfg.check(); err != nil {
		fatal(err)
	}
	var specs []workloadSpec
	for _, w := range strings.Split(*workloads, ",") {
		s, err := parseWorkloadSpec(w)
		if err != nil {
			fatal(err)
		}
		specs = append(specs, s)
	}
	for _, c := range strings.Split(*clients, ",") {
		var n int
		if _, err := fmt.Sscan(c, &n); err != nil || n <= 0 {
			fatal(fmt.Errorf("--clients %q", c))
		}
		cfg.clients = append(cfg.clients, n)
	}
	var results []*result
	// runAll runs every workload once per client count and endpoint order;
	// tag goes first into each line's extra fields.
	runAll := func(tag [][2]any) {
		for _, spec := range specs {
			w, run := spec.name, workloadFuncs[spec.name]
			counts := cfg.clients
			if spec.clients != nil {
				counts = spec.clients
			}
			if w == "keepalive" || w == "failover" {
				counts = counts[:1]
			}
			for _, f := range strings.Split(*first, ",") {
				ocfg := cfg
				saved := qcfg
				spec.apply(&ocfg, &qcfg)
				eps, err := ordered(cfg.endpoints, f, leaderOf)
				if err != nil {
					fatal(err)
				}
				ocfg.endpoints = eps
				if len(cfg.httpEndpoints) > 0 {
					if ocfg.httpEndpoints, err = ordered(cfg.httpEndpoints, f, httpLeader); err != nil {
						fatal(err)
					}
				}
				ocfg.first = f
				for _, c := range counts {
					r, err := run(context.Background(), ocfg, c)
					if err != nil {
						fatal(fmt.Errorf("%s: %w", w, err))
					}
					if f != "" {
						r.add("first", f)
					}
					head := append([][2]any(nil), tag...)
					if spec.raw != "" {
						head = append(head, [2]any{"spec", spec.raw})
					}
					r.extra = append(head, r.extra...)
					fmt.Println(r.json())
					results = append(results, r)
				}
				qcfg = saved
			}
		}
	}
	if *cluster {
		path := *bin
		if path == "" {
			dir, err := os.MkdirTemp("", "coordbench-bin-")
			if err != nil {
				fatal(err)
			}
			defer os.RemoveAll(dir)
			atExit = append(atExit, func() { os.RemoveAll(dir) })
			if path, err = proccluster.Build(dir, "./cmd/coordd", "coordd"); err != nil {
				fatal(err)
			}
		}
		storeList := []string{""}
		if *stores != "" {
			storeList = strings.Split(*stores, ",")
		}
		for round := 1; round <= *rounds; round++ {
			for _, store := range storeList {
				var tag [][2]any
				flags := strings.Fields(*nodeArgs)
				if store != "" {
					flags = append(flags, "--raft-log-store", store)
					tag = append(tag, [2]any{"raft_log_store", store})
				}
				if *rounds > 1 {
					tag = append(tag, [2]any{"round", round})
				}
				dir := ""
				if *clusterDir != "" {
					var err error
					if dir, err = os.MkdirTemp(*clusterDir, "cluster-"); err != nil {
						fatal(err)
					}
				}
				lc, err := startCluster(path, dir, flags...)
				if err != nil {
					fatal(err)
				}
				atExit = append(atExit, lc.Close) // fatal exits without running defers
				cfg.cluster = lc
				if *nodeArgs != "" {
					for _, nd := range lc.Nodes {
						fmt.Fprintf(os.Stderr, "coordbench: node %s pid %d grpc %s http %s\n", nd.ID, nd.Cmd.Process.Pid, nd.GRPCAddr, nd.HTTPAddr)
					}
				}
				cfg.endpoints = lc.Endpoints()
				cfg.httpEndpoints = nil
				for _, nd := range lc.Nodes {
					cfg.httpEndpoints = append(cfg.httpEndpoints, "http://"+nd.HTTPAddr)
				}
				runAll(tag)
				lc.Close()
				atExit = atExit[:len(atExit)-1]
			}
		}
	} else if *endpoints != "" {
		cfg.endpoints = strings.Split(*endpoints, ",")
		if *httpEps != "" {
			var err error
			if cfg.httpEndpoints, err = httpBases(*httpEps); err != nil {
				fatal(err)
			}
		}
		runAll(nil)
	} else {
		fatal(fmt.Errorf("give --endpoints or --cluster"))
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nWORKLOAD\tCLIENTS\tOPS/S\tP50 MS\tP99 MS\tMAX MS\tERRORS\tEXTRA")
	for _, r := range results {
		var extra []string
		for _, p := range r.extra {
			extra = append(extra, fmt.Sprintf("%v=%v", p[0], p[1]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%d\t%s\n", r.workload, r.clients, r.opsPerS(), ms(r.quantile(0.5)),
			ms(r.quantile(0.99)), ms(r.quantile(1)), r.errors, strings.Join(extra, " "))
	}
	tw.Flush()
}

// atExit runs on fatal errors (os.Exit skips deferred calls).
var atExit []func()

// startCluster starts three coordd processes on loopback (warnings only;
// HTTP for the forwarded-calls counter; extraArgs for every node) and waits for a leader. The nodes die with coordbench (Pdeathsig)
// and are killed by PID at the end or on a fatal error.
func startCluster(bin, dir string, extraArgs ...string) (*proccluster.Cluster, error) {
	nodes := proccluster.LoopbackNodes(3, true, append([]string{"--log-level", "warn"}, extraArgs...)...)
	lc, err := proccluster.Launch(bin, nodes, proccluster.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	if _, err := lc.WaitLeader(20 * time.Second); err != nil {
		lc.Close()
		return nil, err
	}
	return lc, nil
}

func fatal(err error) {
	for _, f := range atExit {
		f()
	}
	pprof.StopCPUProfile()
	fmt.Fprintln(os.Stderr, "coordbench:", err)
	os.Exit(1)
}
