// Package node is one coordd node below the API: Raft (hashicorp/raft with
// a raft-wal or bbolt log store, internal/logstore) under the fsm package, the proposer and its group
// commit, the leader's lifecycle and clock (lease and calendar time), waiting acquires, and
// membership. Its API is typed: Propose a command body and get the FSM's
// result; Read committed state, linearizable or stale; Acquire, the one
// entry point that decides between answering from state, proposing and
// waiting. The api package serves it over gRPC and HTTP through a narrow
// interface and never imports this package. See DESIGN.md.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/logstore"
	"github.com/coordd/coordd/internal/probe"
	"github.com/coordd/coordd/internal/tlsutil"
	"github.com/coordd/coordd/node/internal/watchhub"
	"github.com/coordd/coordd/node/leader"
)

// raftAPI is the part of *raft.Raft the node uses; unit tests replace it
// with a fake that applies entries to the FSM in process.
type raftAPI interface {
	Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture
	Barrier(timeout time.Duration) raft.Future
	VerifyLeader() raft.Future
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	State() raft.RaftState
	CurrentTerm() uint64
	CommitIndex() uint64
	AppliedIndex() uint64
	LastIndex() uint64
	LastContact() time.Time
	GetConfiguration() raft.ConfigurationFuture
	AddVoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	RemoveServer(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	LeadershipTransfer() raft.Future
	LeadershipTransferToServer(id raft.ServerID, address raft.ServerAddress) raft.Future
	RegisterObserver(or *raft.Observer)
	DeregisterObserver(or *raft.Observer)
	Snapshot() raft.SnapshotFuture
	Shutdown() raft.Future
}

var _ raftAPI = (*raft.Raft)(nil)

// logCacheEntries is the size of the Raft log cache in entries (see
// startRaft).
const logCacheEntries = 256

// Node is one coordd node.
type Node struct {
	cfg     Config
	log     *slog.Logger
	clock   clock.Clock
	fsm     *fsm.FSM
	raft    raftAPI
	store   *logstore.Store
	trans   *raft.NetworkTransport
	snaps   *raft.FileSnapshotStore
	peerTLS *tlsutil.Reloader // nil: plaintext Raft
	metrics *metrics

	notifyCh  chan bool
	leader    atomic.Pointer[leaderState]
	proposals chan *proposal
	queued    atomic.Int64  // commands with the proposer, not yet in an entry
	queueSeen atomic.Uint64 // the fsm.QueueEpoch the queue's loops were last woken for
	waiters   waitQueues    // Acquire calls waiting for a lease (leader only)
	// services run while this node leads (node/leader); the node's own
	// that other code wakes are kept here too.
	services    *leader.Lifecycle
	dispatcher  *leader.Dispatch
	fetchPump   *leader.FetchPump
	materialise *leader.Materialise
	bulk        *leader.Bulk  // bulk operations on jobs (node/commands.go)
	watch       *watchhub.Hub // recent change events and their watchers (node/internal/watchhub)

	advertised atomic.Pointer[string] // this node's gRPC address, once Advertise ran
	raftBound  string                 // the Raft listener's address (RaftAddr: the advertised one)

	leaderSigMu sync.Mutex
	leaderSig   chan struct{} // closed (and replaced) when the known leader may have changed
	observer    *raft.Observer

	// live pings the node's loops for /livez (probes.go).
	live      *probe.Tracker
	livePings livePings

	// futures counts the goroutines blocked on a Raft future (await).
	futures atomic.Int64

	ctx      context.Context // ends at Close
	stop     context.CancelFunc
	wg       sync.WaitGroup
	closeOne sync.Once
	closeErr error
}

// New opens the data dir and starts Raft, the proposer and the leadership
// lifecycle. It bootstraps a new cluster when the data dir holds no state
// and Join is empty. The node serves nothing by itself: api.Serve does,
// and tells it its gRPC address (Advertise).
func New(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	n := newNode(cfg)
	if err := n.startRaft(); err != nil {
		_ = n.Close()
		return nil, err
	}
	n.start()
	n.log.Info("coordd node started", "raft", n.RaftAddr(), "raft_bound", n.RaftBoundAddr(), "data_dir", cfg.DataDir,
		"min_ttl", cfg.MinTTL, "retention", cfg.Retention)
	return n, nil
}

// newNode builds a node without Raft (startRaft or a unit test sets it).
func newNode(cfg Config) *Node {
	ctx, stop := context.WithCancel(context.Background())
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger.With("node", cfg.ID),
		clock:     cfg.Clock,
		fsm:       fsm.New(),
		watch:     watchhub.New(cfg.Watch, cfg.Clock),
		notifyCh:  make(chan bool, 16),
		leaderSig: make(chan struct{}),
		proposals: make(chan *proposal, 4*maxBatch),
		ctx:       ctx,
		stop:      stop,
	}
	n.metrics = newMetrics(n, cfg.Metrics)
	n.newLiveness()
	n.newLeaderServices()
	return n
}

// newLeaderServices builds what runs while this node leads, one service
// per file of node/leader (node/DESIGN.md, "What runs on the leader").
func (n *Node) newLeaderServices() {
	cfg := n.cfg
	n.dispatcher = &leader.Dispatch{Clock: n.clock, Log: n.log, NextDue: n.fsm.NextJobDue, Retry: cfg.TickInterval}
	n.fetchPump = &leader.FetchPump{Serve: n.serveFetches}
	n.materialise = &leader.Materialise{Clock: n.clock, Log: n.log, Rounds: n.materialiseRounds,
		NextDue: n.fsm.NextScheduleDue, Done: n.metrics.materialised}
	n.bulk = &leader.Bulk{Clock: n.clock, Log: n.log, Running: func() []fsm.BulkOp { return n.fsm.BulkOps(true) }}
	n.services = leader.NewLifecycle(n.log, n.clock)
	n.services.Register(
		&leader.Tick{Clock: n.clock, Log: n.log, Interval: cfg.TickInterval},
		&leader.Prune{Clock: n.clock, Log: n.log, Interval: cfg.PruneInterval, Retention: cfg.Retention,
			JobRetention: cfg.JobRetention, MaxFinishedJobs: cfg.MaxFinishedJobs},
		n.dispatcher, n.fetchPump, n.materialise, n.bulk)
}

// start runs the node's loops.
func (n *Node) start() {
	n.wg.Go(n.runProposer)
	n.wg.Go(n.watchLeadership)
	n.wg.Go(func() { n.watch.RunReaper(n.ctx) })
}

func (n *Node) startRaft() error {
	cfg := n.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if cfg.TLS.Enabled() {
		var err error
		if n.peerTLS, err = tlsutil.NewReloader(cfg.TLS); err != nil {
			return fmt.Errorf("peer %w", err)
		}
		// No peer would accept another certificate.
		if err := n.peerTLS.CheckNode(cfg.ID, "the peer TLS certificate (--peer-tls-cert, default --tls-cert)"); err != nil {
			return err
		}
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 1024
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = 10240
	// One disk write on a commit's critical path instead of two in sequence
	// (third_party/raft/README.fork.md).
	rc.ParallelLeaderWrite = !cfg.RaftSerialLeaderWrite
	rc.NotifyCh = n.notifyCh
	rc.Logger = newRaftLogger(n.log)

	var err error
	// wal or bolt, as the data dir was created (see internal/logstore).
	n.store, err = logstore.Open(cfg.DataDir, logstore.Options{Kind: logstore.Kind(cfg.RaftLogStore),
		WALSegmentSize: cfg.RaftWALSegmentSize, Logger: rc.Logger.Named("logstore")})
	if err != nil {
		return err
	}
	// The cache serves the entries a follower just behind needs without a
	// read from the store. It holds entries, not bytes: 256 keep its memory
	// bounded under batches (a 1,000-job Submit is a ~270 KB entry: 1,024
	// of them held ~270 MB on the leader, a quarter of the memory of 1M
	// queued jobs; docs/benchmarks.md "Job queue").
	logs, err := raft.NewLogCache(logCacheEntries, n.store.Logs)
	if err != nil {
		return err
	}
	n.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, rc.Logger)
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	// Both layers advertise Config.RaftAdvertise (default: the bound
	// address) and dial peers by the names of the configuration
	// (transport.go).
	var layer *tlsStreamLayer
	var stream raft.StreamLayer
	if n.peerTLS != nil {
		layer, err = newTLSStreamLayer(cfg.RaftAddr, cfg.RaftAdvertise, n.peerTLS)
		stream = layer
	} else {
		var plain *tcpStreamLayer
		plain, err = newTCPStreamLayer(cfg.RaftAddr, cfg.RaftAdvertise)
		stream = plain
	}
	if err != nil {
		return fmt.Errorf("raft transport %s: %w", cfg.RaftAddr, err)
	}
	n.raftBound = stream.(interface{ BoundAddr() string }).BoundAddr()
	n.trans = raft.NewNetworkTransportWithLogger(stream, 3, 10*time.Second, rc.Logger)
	existing, err := raft.HasExistingState(logs, n.store.Stable, n.snaps)
	if err != nil {
		return err
	}
	r, err := raft.NewRaft(rc, raftFSM{f: n.fsm, hub: n.watch}, logs, n.store.Stable, indexedSnapshots{n.snaps, n.watch}, n.trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	if layer != nil {
		layer.setServers(n.servers)
	}
	n.observeLeader(r)
	n.observeMoves(r)
	if existing || cfg.Join != "" {
		return nil
	}
	servers := []raft.Server{{ID: rc.LocalID, Address: n.trans.LocalAddr(), Suffrage: raft.Voter}}
	if len(cfg.Peers) > 0 {
		servers = servers[:0]
		for id, addr := range cfg.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter})
		}
		// Every node must bootstrap the same configuration, so the peers
		// stay as given; registerSelf then replaces this node's entry
		// with the address it advertises.
		if self := cfg.Peers[cfg.ID]; self != n.RaftAddr() {
			n.log.Warn("--peers names this node at another address than it advertises; its entry will be updated to the advertised one (set --raft-advertise-addr to the name --peers gives)",
				"peers", self, "advertised", n.RaftAddr())
		}
	}
	n.log.Info("bootstrapping a new cluster", "servers", len(servers))
	if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// ID is the node's Raft server id.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr is the Raft address this node advertises: Config.RaftAdvertise,
// or the bound address when that is unset. It is the node's entry in the
// Raft configuration.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// RaftBoundAddr is the address the Raft listener bound (port 0 resolved).
func (n *Node) RaftBoundAddr() string { return n.raftBound }

// TTLRange is the range of lease TTLs this node accepts.
func (n *Node) TTLRange() (lo, hi time.Duration) { return n.cfg.MinTTL, n.cfg.MaxTTL }

// Leading reports whether this node leads (it may still be applying its
// predecessors' entries: calls then wait for it to be ready).
func (n *Node) Leading() bool { return n.leader.Load() != nil }

// LeaderChanged returns a channel that is closed when the leader this
// node knows may have changed (an election started or ended, this node
// gained or lost leadership). Read Leader and Leading after taking it.
func (n *Node) LeaderChanged() <-chan struct{} {
	n.leaderSigMu.Lock()
	defer n.leaderSigMu.Unlock()
	return n.leaderSig
}

// leaderChanged wakes everyone waiting on LeaderChanged.
func (n *Node) leaderChanged() {
	n.leaderSigMu.Lock()
	close(n.leaderSig)
	n.leaderSig = make(chan struct{})
	n.leaderSigMu.Unlock()
}

// observeLeader turns Raft's leader observations into leaderChanged.
func (n *Node) observeLeader(r raftAPI) {
	ch := make(chan raft.Observation, 16)
	n.observer = raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(n.observer)
	n.wg.Go(func() {
		for {
			select {
			case <-ch:
				n.leaderChanged()
			case <-n.ctx.Done():
				return
			}
		}
	})
}

// IsLeader reports whether this node is the leader and ready to serve.
func (n *Node) IsLeader() bool {
	ls := n.leader.Load()
	if ls == nil {
		return false
	}
	select {
	case <-ls.ready:
		return true
	default:
		return false
	}
}

// Digest is the FSM digest (see fsm.FSM.Digest).
func (n *Node) Digest() string { return n.fsm.Digest() }

// AppliedIndex is the index of the last entry this node's FSM applied.
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// Counts reports the number of records per family in this node's FSM.
func (n *Node) Counts() (leases, windows, resources, idempotency int) { return n.fsm.Counts() }

// Raft exposes the Raft instance to tests and tools in this module.
func (n *Node) Raft() *raft.Raft {
	r, _ := n.raft.(*raft.Raft)
	return r
}

// Reload reads the peer TLS files again (coordd calls it on SIGHUP); on
// error the previous certificate stays.
func (n *Node) Reload() error {
	if n.peerTLS == nil {
		return nil
	}
	return n.peerTLS.Reload()
}

// Close stops the node: leader-only work and waiting acquires end at once,
// Raft shuts down and the stores close. Close the API after the node (its
// graceful stop is then quick). It is safe to call more than once.
func (n *Node) Close() error {
	n.closeOne.Do(func() { n.closeErr = n.shutdown() })
	return n.closeErr
}

func (n *Node) shutdown() error {
	n.stop()
	var errs []error
	if n.observer != nil {
		n.raft.DeregisterObserver(n.observer)
	}
	if n.raft != nil {
		errs = append(errs, n.raft.Shutdown().Error())
	}
	if ls := n.leader.Swap(nil); ls != nil {
		ls.cancel()
	}
	n.wg.Wait()
	n.awaitFutures(futureGrace)
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	n.log.Info("coordd node stopped")
	return errors.Join(errs...)
}

// futureGrace is how long Close waits for Raft to answer the futures the
// node still waits on, after Raft shut down.
const futureGrace = 200 * time.Millisecond

// awaitFutures waits (real time, at most grace) until no goroutine blocks
// on a Raft future, and logs those left: futures still queued in Raft when
// it shut down, which it never answers. They hold a goroutine each until
// the process ends; nothing else can stop them.
func (n *Node) awaitFutures(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for n.futures.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if left := n.futures.Load(); left > 0 {
		n.log.Warn("Raft futures left unanswered at shutdown (queued when Raft stopped)", "futures", left)
	}
}

// sleep waits d on the node's clock, or until wake fires (nil: never);
// false when ctx ended.
func (n *Node) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := n.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-wake:
	case <-ctx.Done():
	}
	return ctx.Err() == nil
}
