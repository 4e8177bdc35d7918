// Package server runs a coordd node: Raft (hashicorp/raft with a raft-wal or
// bbolt log store) under the fsm package, and the gRPC services on top. See DESIGN.md.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/logstore"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Server is one coordd node.
type Server struct {
	cfg     Config
	log     *slog.Logger
	fsm     *fsm.FSM
	raft    *raft.Raft
	store   *logstore.Store
	trans   *raft.NetworkTransport
	snaps   *raft.FileSnapshotStore
	metrics *metrics
	monitor *monitor

	schedules schedules

	grpc     *grpc.Server
	grpcLis  net.Listener
	health   *health.Server
	http     *http.Server
	httpLis  net.Listener
	notifyCh chan bool

	tls     *tlsutil.Reloader // nil without TLS
	peerTLS *tlsutil.Reloader
	acl     atomic.Pointer[ACL]
	limits  *limiter

	waiters waitQueues // Acquire calls waiting for a lease (leader only)

	leader    atomic.Pointer[leaderState]
	proposals chan *proposal

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn // gRPC connections to peers, by address

	stop     chan struct{}
	wg       sync.WaitGroup
	closeOne sync.Once
	closeErr error
}

// New opens the data dir, starts Raft and serves gRPC (and HTTP when
// configured). It bootstraps a new cluster when the data dir holds no state
// and Join is empty.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger.With("node", cfg.ID),
		fsm:       fsm.New(),
		conns:     map[string]*grpc.ClientConn{},
		stop:      make(chan struct{}),
		notifyCh:  make(chan bool, 16),
		proposals: make(chan *proposal, 4*maxBatch),
		limits:    newLimiter(cfg.Limits),
	}
	s.metrics = newMetrics(s)
	s.monitor = newMonitorMetrics(s.metrics.reg)
	if err := s.start(); err != nil {
		s.shutdown()
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	cfg := s.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := s.loadTLS(); err != nil {
		return err
	}
	if cfg.ACLFile != "" {
		acl, err := LoadACL(cfg.ACLFile)
		if err != nil {
			return err
		}
		s.acl.Store(acl)
	}
	s.logSecurity()
	var err error
	if s.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return fmt.Errorf("grpc listen: %w", err)
	}
	if cfg.HTTPAddr != "" {
		if s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("http listen: %w", err)
		}
	}
	if err := s.startRaft(); err != nil {
		return err
	}

	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.ChainUnaryInterceptor(s.unaryGuard), grpc.ChainStreamInterceptor(s.streamGuard)}
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls.ServerConfig(true))))
	}
	s.grpc = grpc.NewServer(opts...)
	coordv1.RegisterCoordinatorServer(s.grpc, &coordinator{s: s})
	coordv1.RegisterClusterServer(s.grpc, &cluster{s: s})
	coordv1.RegisterJobsServer(s.grpc, &jobs{s: s})
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.goRun(func() { _ = s.grpc.Serve(s.grpcLis) })

	if s.httpLis != nil {
		mux := http.NewServeMux()
		mux.Handle("/v1/", s.httpAPI())
		mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", s.serveHealthz)
		if s.cfg.EnablePprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		}
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 64 << 10}
		if s.tls != nil {
			// Client certificates are verified when given: /metrics and
			// /healthz answer anyone, the API only verified identities.
			s.http.TLSConfig = s.tls.ServerConfig(false)
			s.goRun(func() { _ = s.http.ServeTLS(s.httpLis, "", "") })
		} else {
			s.goRun(func() { _ = s.http.Serve(s.httpLis) })
		}
	}

	s.goRun(s.runProposer)
	s.goRun(s.watchLeadership)
	s.goRun(s.registerSelf)
	if cfg.Join != "" {
		s.goRun(s.joinLoop)
	}
	s.log.Info("coordd node started", "grpc", s.GRPCAddr(), "raft", s.RaftAddr(), "http", s.HTTPAddr(),
		"data_dir", cfg.DataDir, "min_ttl", cfg.MinTTL, "retention", cfg.Retention)
	return nil
}

func (s *Server) startRaft() error {
	cfg := s.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 1024
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = 10240
	rc.NotifyCh = s.notifyCh
	rc.Logger = newRaftLogger(s.log)

	var err error
	// wal or bolt, as the data dir was created (see internal/logstore).
	s.store, err = logstore.Open(cfg.DataDir, logstore.Options{Kind: logstore.Kind(cfg.RaftLogStore),
		WALSegmentSize: cfg.RaftWALSegmentSize, Logger: rc.Logger.Named("logstore")})
	if err != nil {
		return err
	}
	logs, err := raft.NewLogCache(1024, s.store.Logs)
	if err != nil {
		return err
	}
	s.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, rc.Logger)
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	if s.peerTLS != nil {
		layer, lerr := newTLSStreamLayer(cfg.RaftAddr, s.peerTLS)
		if lerr != nil {
			return fmt.Errorf("raft transport %s: %w", cfg.RaftAddr, lerr)
		}
		s.trans = raft.NewNetworkTransportWithLogger(layer, 3, 10*time.Second, rc.Logger)
	} else if s.trans, err = raft.NewTCPTransportWithLogger(cfg.RaftAddr, nil, 3, 10*time.Second, rc.Logger); err != nil {
		return fmt.Errorf("raft transport %s: %w", cfg.RaftAddr, err)
	}
	existing, err := raft.HasExistingState(logs, s.store.Stable, s.snaps)
	if err != nil {
		return err
	}
	s.raft, err = raft.NewRaft(rc, s.fsm, logs, s.store.Stable, s.snaps, s.trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	if existing || cfg.Join != "" {
		return nil
	}
	servers := []raft.Server{{ID: rc.LocalID, Address: s.trans.LocalAddr(), Suffrage: raft.Voter}}
	if len(cfg.Peers) > 0 {
		servers = servers[:0]
		for id, addr := range cfg.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter})
		}
	}
	s.log.Info("bootstrapping a new cluster", "servers", len(servers))
	if err := s.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

func (s *Server) goRun(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// GRPCAddr is the address the gRPC server listens on.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// RaftAddr is the Raft transport address.
func (s *Server) RaftAddr() string { return string(s.trans.LocalAddr()) }

// HTTPAddr is the metrics address, or "" when disabled.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// ID is the node's Raft server id.
func (s *Server) ID() string { return s.cfg.ID }

// IsLeader reports whether this node is the leader and ready to serve.
func (s *Server) IsLeader() bool {
	ls := s.leader.Load()
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
func (s *Server) Digest() string { return s.fsm.Digest() }

// AppliedIndex is the index of the last entry this node's FSM applied.
func (s *Server) AppliedIndex() uint64 { return s.raft.AppliedIndex() }

// Raft exposes the Raft instance to tests and tools in this module.
func (s *Server) Raft() *raft.Raft { return s.raft }

// Close stops the node: it stops serving, shuts Raft down and closes the
// stores. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOne.Do(func() { s.closeErr = s.shutdown() })
	return s.closeErr
}

func (s *Server) shutdown() error {
	close(s.stop)
	if s.health != nil {
		s.health.Shutdown()
	}
	if s.grpc != nil {
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			s.grpc.Stop()
		}
	} else if s.grpcLis != nil {
		s.grpcLis.Close()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.http.Shutdown(ctx)
		cancel()
	} else if s.httpLis != nil {
		s.httpLis.Close()
	}
	var errs []error
	if s.raft != nil {
		errs = append(errs, s.raft.Shutdown().Error())
	}
	if ls := s.leader.Swap(nil); ls != nil {
		ls.cancel()
	}
	s.wg.Wait()
	if s.trans != nil {
		errs = append(errs, s.trans.Close())
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	s.connMu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = map[string]*grpc.ClientConn{}
	s.connMu.Unlock()
	s.log.Info("coordd node stopped")
	return errors.Join(errs...)
}

func (s *Server) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	if s.raft.State() == raft.Shutdown {
		http.Error(w, "shutdown", http.StatusServiceUnavailable)
		return
	}
	if _, id := s.raft.LeaderWithID(); id == "" {
		http.Error(w, "no leader", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// peerConn returns a shared client connection to a peer's gRPC address.
func (s *Server) peerConn(addr string) (*grpc.ClientConn, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if c, ok := s.conns[addr]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if s.tls != nil {
		creds = credentials.NewTLS(s.tls.ClientConfig(""))
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	s.conns[addr] = c
	return c, nil
}

// logSecurity says at start how callers are authenticated and authorized.
func (s *Server) logSecurity() {
	switch {
	case s.tls == nil:
		s.log.Warn("TLS is off: callers are not authenticated and authorization is disabled (plaintext)",
			"insecure_network", s.cfg.Insecure)
	case s.acl.Load() == nil:
		s.log.Warn("mutual TLS on, no ACL file: every identity with a certificate from the CA may do everything")
	default:
		s.log.Info("mutual TLS on, ACL enforced", "acl_file", s.cfg.ACLFile, "rules", len(s.acl.Load().Rules))
	}
}

// Counts reports the number of records per family in this node's FSM.
func (s *Server) Counts() (leases, windows, resources, idempotency int) { return s.fsm.Counts() }
