// Package api serves a coordd node: the gRPC services Coordinator (with
// KeepAlive), Cluster, Queue and Schedules, the HTTP/JSON gateway, metrics
// and health;
// forwarding to the leader, validation, authentication and authorization,
// proto <-> domain conversion, and the one table that turns errors into
// statuses. It depends on the node only through the Node interface, so it
// never imports Raft, and its handlers are unit-tested with a fake node.
// See DESIGN.md.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/coordd/coordd/api/console"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/delivery"
	"github.com/coordd/coordd/internal/advertise"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/defaults"
	"github.com/coordd/coordd/internal/tlsutil"
	"github.com/coordd/coordd/node/leader"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Config is everything the API needs; Serve fills unset fields from
// Defaults and validates it once.
type Config struct {
	GRPCAddr string // listen address; port 0 picks a free one
	// GRPCAdvertise is the gRPC address this node gives the others (the
	// member table: forwarding, the leader address clients are sent to),
	// dialled as given, so a name is resolved at each connection and, with
	// TLS, is the name the certificate is verified against. Empty: the
	// bound address.
	GRPCAdvertise string
	HTTPAddr      string // metrics, health and the HTTP/JSON API; empty disables

	// TLS is the node's certificate and key and the CA of its clients; it
	// turns on TLS for gRPC and HTTP, mutual TLS for gRPC, and identities.
	TLS tlsutil.Files
	// Insecure allows plaintext listeners on non-loopback addresses.
	Insecure bool
	// ACLFile is the authorization policy (see auth.ACL), reloaded by
	// Reload. Without it, every authenticated identity may do everything.
	ACLFile string
	// Limits are per-identity caps.
	Limits auth.Limits
	// EnablePprof serves net/http/pprof under /debug/pprof/ on HTTPAddr;
	// with TLS on, only to members and identities the ACL lets administer
	// the cluster (goroutine dumps show every caller's requests).
	EnablePprof bool
	// OpenMetrics serves /metrics to anyone when TLS is on. Without it a
	// scrape needs a verified client certificate whose identity may read
	// every name or administer the cluster: the series name every
	// tenant's queues. (TLS off: /metrics is open, as everything is.)
	OpenMetrics bool

	// Listener limits (docs/security.md, "Listener limits"). HTTP: the
	// request headers must arrive within HTTPReadHeaderTimeout and the
	// whole request (headers and body) within HTTPReadTimeout; a response
	// must be written within HTTPWriteTimeout of the request (streams —
	// the console's live updates — extend their own deadline on every
	// write instead); a keep-alive connection idles at most
	// HTTPIdleTimeout. Bodies are capped at MaxMessageBytes (413).
	HTTPReadHeaderTimeout time.Duration
	HTTPReadTimeout       time.Duration
	HTTPWriteTimeout      time.Duration
	HTTPIdleTimeout       time.Duration
	// gRPC: a connection's TLS and HTTP/2 handshake must finish within
	// GRPCConnectionTimeout; the server pings a connection silent for
	// GRPCKeepaliveTime and closes it when the ping is not answered within
	// GRPCKeepaliveTimeout (half-open connections do not pile up).
	GRPCConnectionTimeout time.Duration
	GRPCKeepaliveTime     time.Duration
	GRPCKeepaliveTimeout  time.Duration
	// Delivery is the delivery of jobs to HTTP targets on this node
	// (docs/delivery.md): the allow-list, the signing secrets, the bounds.
	Delivery delivery.Options
	// ConsoleSampleInterval is how often the web console (/ui/) samples
	// this node's queue counters for its throughput chart (default 1
	// minute; the chart shows the last 60 samples).
	ConsoleSampleInterval time.Duration

	// MonitorInterval is how often the leader computes overdue windows and
	// stuck leases for metrics and logs; MaxLeaseAge is the age of a generation
	// past which its lease counts as stuck (HELD_TOO_LONG), and the window in
	// which an expired, unreleased lease counts as SILENT.
	MonitorInterval time.Duration
	MaxLeaseAge     time.Duration

	// LeaderWait is how long a read waits for a leader during an election
	// (at most the caller's deadline) before it answers NO_LEADER.
	LeaderWait time.Duration
	// ClockProbeInterval is how often the leader measures every member's
	// wall clock offset (Cluster.Clock); an offset beyond ClockOffsetWarn is
	// logged and flagged (coordd_clock_offset_exceeded).
	ClockProbeInterval time.Duration
	ClockOffsetWarn    time.Duration

	// Settings are the node's effective configuration, secrets already
	// redacted, that Cluster.Config answers (cmd/coordd's flags, the
	// environment and the --config file ConfigFile).
	Settings   []Setting
	ConfigFile string

	Logger *slog.Logger
	// Clock drives the monitor's and the clock probe's tickers and the
	// read's leader wait; its wall reading (clock.Wall) is this node's wall
	// clock in Cluster.Clock and Status.
	Clock clock.Clock
	// Metrics is the registry served on /metrics; the API registers its
	// collectors (and the Go and process collectors) in it. Give the node's
	// registry so one scrape sees both. Nil: a registry of its own.
	Metrics *prometheus.Registry
	// TracerProvider makes the API's spans (docs/tracing.md); nil: tracing
	// off, no span is started.
	TracerProvider trace.TracerProvider
}

// listenerLimitNames name the listener timeouts in validate's order.
var listenerLimitNames = []string{"http read header timeout", "http read timeout", "http write timeout",
	"http idle timeout", "grpc connection timeout", "grpc keepalive time", "grpc keepalive timeout"}

// Defaults are the values Serve gives unset fields.
// streamWorkers is how many goroutines the gRPC server keeps to run calls
// on (grpc.NumStreamWorkers): enough for the calls in flight under a heavy
// load (each waits for its commit), and cheap when idle.
const streamWorkers = 256

func Defaults() Config {
	return Config{MonitorInterval: 5 * time.Second, MaxLeaseAge: 24 * time.Hour,
		LeaderWait: 2 * time.Second, ClockProbeInterval: time.Second, ClockOffsetWarn: 500 * time.Millisecond,
		HTTPReadHeaderTimeout: 5 * time.Second, HTTPReadTimeout: 30 * time.Second, HTTPWriteTimeout: 60 * time.Second,
		HTTPIdleTimeout: 2 * time.Minute, GRPCConnectionTimeout: 10 * time.Second, GRPCKeepaliveTime: time.Minute,
		GRPCKeepaliveTimeout: 20 * time.Second}
}

func (c Config) withDefaults() Config {
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Clock = cmp.Or[clock.Clock](c.Clock, clock.Real{})
	defaults.Fill(&c, Defaults())
	return c
}

func (c Config) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		errs = append(errs, fmt.Errorf("grpc address %q: %w", c.GRPCAddr, err))
	}
	if c.GRPCAdvertise != "" {
		errs = append(errs, advertise.Check("grpc advertise address", c.GRPCAdvertise))
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			errs = append(errs, fmt.Errorf("http address %q: %w", c.HTTPAddr, err))
		}
	}
	for i, d := range []time.Duration{c.HTTPReadHeaderTimeout, c.HTTPReadTimeout, c.HTTPWriteTimeout, c.HTTPIdleTimeout,
		c.GRPCConnectionTimeout, c.GRPCKeepaliveTime, c.GRPCKeepaliveTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must be positive", listenerLimitNames[i], d))
		}
	}
	errs = append(errs, c.TLS.Validate())
	if c.ACLFile != "" && !c.TLS.Enabled() {
		errs = append(errs, errors.New("an ACL needs identities, which come from TLS client certificates: set --tls-cert/--tls-key/--tls-ca"))
	}
	if !c.TLS.Enabled() {
		errs = append(errs, tlsutil.CheckPlaintext(c.Insecure,
			tlsutil.Listener{Name: "gRPC", Addr: c.GRPCAddr}, tlsutil.Listener{Name: "HTTP", Addr: c.HTTPAddr}))
	}
	return errors.Join(errs...)
}

// Limits on input, enforced on every RPC.
const (
	MaxNameBytes    = 256
	MaxPayloadBytes = 64 << 10
	MaxPageSize     = 1000
	// MaxMessageBytes caps a gRPC request and an HTTP request body (a
	// Submit of 1,000 jobs with a few KiB of args each must fit).
	MaxMessageBytes = 4 << 20
	DefaultPageSize = 100
)

// Server is the API of one node.
type Server struct {
	cfg          Config
	log          *slog.Logger
	node         Node
	metrics      *metrics
	grpcMetrics  *grpcMetrics
	httpMetrics  *httpMetrics
	monitor      *monitor
	queueMetrics *queueMetrics
	clocks       *clocks

	calendars calendars    // compiled schedules, by spec
	tracer    trace.Tracer // nil: tracing off (tracing.go)

	grpc    *grpc.Server
	grpcLis net.Listener
	health  *health.Server
	http    *http.Server
	httpLis net.Listener

	watch   *watchService
	console *console.Console // nil without HTTP

	tls    *tlsutil.Reloader // nil without TLS
	acl    atomic.Pointer[auth.ACL]
	limits *auth.Limiter
	// schedulePuts serialises the leader's puts while it judges schedule
	// rates (scheduleRates), so two puts cannot both pass on the same sum.
	schedulePuts sync.Mutex

	// dial returns a connection to a member's gRPC address (forwarding,
	// registration); peerConn, unless a test replaces it.
	dial   func(addr string) (grpc.ClientConnInterface, error)
	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn

	stop     chan struct{}
	failed   chan error // a listener's Serve that returned before Close (Failed)
	wg       sync.WaitGroup
	closeOne sync.Once
}

// Serve listens on the configured addresses and serves n: gRPC always,
// HTTP when configured. It tells the node its gRPC address (Advertise) and
// registers the API's leader services (the absence monitor, the clock
// probe) with the node's leader lifecycle. Close the node first,
// then the Server.
func Serve(cfg Config, n Node) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	s := newServer(cfg, n)
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	n.RegisterLeaderServices(s.leaderServices()...)
	if cfg.GRPCAdvertise == "" && advertise.Unspecified(s.GRPCAddr()) {
		s.log.Warn("gRPC is bound to the unspecified address and advertised there: other nodes cannot forward calls to this one (set --grpc-advertise-addr)",
			"grpc", s.GRPCAddr())
	}
	n.Advertise(s.AdvertisedGRPCAddr(), s.addVoterOn)
	s.startDelivery()
	s.log.Info("coordd API serving", "grpc", s.GRPCAddr(), "grpc_advertised", s.AdvertisedGRPCAddr(), "http", s.HTTPAddr())
	return s, nil
}

// leaderServices are the API's leader-only work, run by the node's leader
// lifecycle with its own (node/DESIGN.md, "What runs on the leader").
func (s *Server) leaderServices() []leader.Service {
	return []leader.Service{absenceMonitor{s}, clockProbe{s}}
}

// newServer builds a Server that does not listen yet (unit tests call
// handlers on it directly).
func newServer(cfg Config, n Node) *Server {
	s := &Server{
		cfg:    cfg,
		log:    cfg.Logger.With("node", n.ID()),
		node:   n,
		limits: auth.NewLimiter(cfg.Limits),
		conns:  map[string]*grpc.ClientConn{},
		stop:   make(chan struct{}),
		failed: make(chan error, 2),
	}
	s.dial = s.peerConn
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer(TracerName)
	}
	s.metrics = newMetrics(cfg.Metrics)
	s.grpcMetrics = newGRPCMetrics(cfg.Metrics)
	s.httpMetrics = newHTTPMetrics(cfg.Metrics)
	s.monitor = newMonitorMetrics(cfg.Metrics)
	s.queueMetrics = newQueueMetrics(cfg.Metrics, s)
	s.clocks = newClocks(cfg.Metrics)
	return s
}

func (s *Server) start() error {
	cfg := s.cfg
	if cfg.TLS.Enabled() {
		var err error
		if s.tls, err = tlsutil.NewReloader(cfg.TLS); err != nil {
			return err
		}
		// The node forwards calls and probes clocks with it: the leader
		// believes forwarded identities only from a member's node
		// certificate.
		if err := s.tls.CheckNode(s.node.ID(), "the TLS certificate (--tls-cert)"); err != nil {
			return err
		}
	}
	if cfg.ACLFile != "" {
		acl, err := auth.LoadACL(cfg.ACLFile)
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

	codec := newRequestCodec() // an undecodable request is INVALID_ARGUMENT (codec.go)
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.ForceServerCodecV2(codec),
		// Per-call metrics first: they see every answer, refusals too (rpcmetrics.go).
		grpc.ChainUnaryInterceptor(s.grpcMetrics.unary, s.traceUnary, codec.unary, s.unaryGuard),
		grpc.ChainStreamInterceptor(s.grpcMetrics.stream, codec.stream, s.streamGuard),
		// The SDK pings idle connections (every 10 s by default) to notice a
		// frozen node; gRPC's default policy (5 min, only with streams)
		// would answer those pings with GOAWAY too_many_pings, ending a
		// waiting Acquire that sits alone on its connection.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: PingMinInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.GRPCKeepaliveTime, Timeout: cfg.GRPCKeepaliveTimeout}),
		grpc.ConnectionTimeout(cfg.GRPCConnectionTimeout),
		// Calls run on a pool of goroutines whose stacks have already
		// grown, instead of a new goroutine each: a fresh one grows its
		// stack (copystack) on every call, about a tenth of the leader's
		// CPU under load (docs/benchmarks.md). When every worker is busy
		// a call gets its own goroutine, as without the pool.
		grpc.NumStreamWorkers(streamWorkers)}
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls.ServerConfig(true))))
	}
	s.grpc = grpc.NewServer(opts...)
	coordv1.RegisterCoordinatorServer(s.grpc, &coordinator{s: s})
	coordv1.RegisterClusterServer(s.grpc, &cluster{s: s})
	coordv1.RegisterQueueServer(s.grpc, &queue{s: s})
	coordv1.RegisterSchedulesServer(s.grpc, &schedules{s: s})
	s.watch = newWatchService(s)
	coordv1.RegisterWatchServer(s.grpc, s.watch)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	registerReflection(s.grpc) // with the protos' comments (reflection.go)
	s.serve("gRPC", func() error { return s.grpc.Serve(s.grpcLis) })

	if s.httpLis != nil {
		mux := http.NewServeMux()
		mux.Handle("/v1/", s.httpAPI())
		if s.console, err = s.newConsole(); err != nil {
			return err
		}
		mux.Handle(console.Prefix, s.consoleHTTP(s.console))
		mux.Handle("GET /ui", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
		s.wg.Go(func() { s.console.Run(s.stop) })
		var metrics http.Handler = promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{})
		if !s.cfg.OpenMetrics {
			metrics = s.requireIdentity("metrics", s.mayScrape, metrics)
		}
		mux.Handle("/metrics", metrics)
		mux.HandleFunc("/healthz", s.serveHealthz)
		mux.HandleFunc("/livez", s.serveLivez)
		mux.HandleFunc("/readyz", s.serveReadyz)
		if s.cfg.EnablePprof {
			prof := http.NewServeMux()
			prof.HandleFunc("/debug/pprof/", pprof.Index)
			prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
			prof.HandleFunc("/debug/pprof/trace", pprof.Trace)
			prof.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.Handle("/debug/pprof/", s.requireIdentity("pprof", s.mayAdminister, prof))
		}
		s.http = &http.Server{Handler: limitBodies(mux), ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
			ReadTimeout: cfg.HTTPReadTimeout, WriteTimeout: cfg.HTTPWriteTimeout, IdleTimeout: cfg.HTTPIdleTimeout,
			MaxHeaderBytes: 64 << 10}
		if s.tls != nil {
			// Client certificates are verified when given: /healthz,
			// /livez and /readyz answer anyone; the API, /metrics (unless OpenMetrics) and
			// pprof only verified identities.
			s.http.TLSConfig = s.tls.ServerConfig(false)
			s.serve("HTTP", func() error { return s.http.ServeTLS(s.httpLis, "", "") })
		} else {
			s.serve("HTTP", func() error { return s.http.Serve(s.httpLis) })
		}
	}
	return nil
}

// serve runs one listener's Serve loop in the server's wait group. A
// return before Close is a failure (that listener no longer serves): it
// is logged and reaches Failed.
func (s *Server) serve(what string, run func() error) {
	s.wg.Go(func() {
		err := run()
		select {
		case <-s.stop:
			return // Close stopped it
		default:
		}
		err = fmt.Errorf("%s server stopped serving: %w", what, cmp.Or(err, errors.New("no error")))
		s.log.Error("the API stopped serving", "listener", what, "err", err)
		select {
		case s.failed <- err:
		default:
		}
	})
}

// Failed delivers the error of a listener (gRPC or HTTP) that stopped
// serving before Close: the node is then unreachable on it, and coordd
// exits with the error.
func (s *Server) Failed() <-chan error { return s.failed }

// GRPCAddr is the address the gRPC server listens on.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// AdvertisedGRPCAddr is the gRPC address the node advertises:
// Config.GRPCAdvertise, or the bound address.
func (s *Server) AdvertisedGRPCAddr() string { return cmp.Or(s.cfg.GRPCAdvertise, s.GRPCAddr()) }

// HTTPAddr is the HTTP address, or "" when disabled.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Gatherer exposes the metrics registry (tests and embedders).
func (s *Server) Gatherer() prometheus.Gatherer { return s.cfg.Metrics }

// Close stops serving: health reports NOT_SERVING, gRPC stops gracefully
// (at most 2 s), HTTP shuts down, peer connections close. It is safe to
// call more than once.
func (s *Server) Close() {
	s.closeOne.Do(s.shutdown)
}

func (s *Server) shutdown() {
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
	if s.console != nil {
		s.console.Close() // live-update streams never go idle
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.http.Shutdown(ctx)
		cancel()
	} else if s.httpLis != nil {
		s.httpLis.Close()
	}
	s.wg.Wait()
	s.connMu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = map[string]*grpc.ClientConn{}
	s.connMu.Unlock()
}

// Reload reads the TLS files and the ACL file again (coordd calls it on
// SIGHUP). What fails to load keeps its previous version; the error says
// what failed.
func (s *Server) Reload() error {
	var errs []error
	if s.tls != nil {
		errs = append(errs, s.tls.Reload())
	}
	if s.cfg.ACLFile != "" {
		acl, err := auth.LoadACL(s.cfg.ACLFile)
		if err != nil {
			errs = append(errs, err)
		} else {
			s.acl.Store(acl)
			s.log.Info("ACL loaded", "file", s.cfg.ACLFile, "rules", len(acl.Rules))
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.log.Error("reload failed; keeping the previous configuration where it failed", "err", err)
	}
	return err
}

func (s *Server) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	if err := s.node.Health(); err != nil {
		msg := "no leader"
		if _, ok := err.(interface{ ShuttingDown() bool }); ok {
			msg = "shutdown"
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// peerConn returns a shared client connection to a member's gRPC address,
// its advertised one: a name is resolved by the connection (again when it
// reconnects), and with TLS the server's certificate is verified against
// the host of addr (ClientConfig(""): gRPC takes the dialled authority).
func (s *Server) peerConn(addr string) (grpc.ClientConnInterface, error) {
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

// addVoterOn calls AddVoter on the member at addr (the node's registration
// and join).
func (s *Server) addVoterOn(ctx context.Context, addr string, req *coordv1.AddVoterRequest) error {
	conn, err := s.dial(addr)
	if err != nil {
		return err
	}
	_, err = coordv1.NewClusterClient(conn).AddVoter(ctx, req)
	return err
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

// registerRuntime registers the Go and process collectors once per
// registry.
func registerRuntime(reg *prometheus.Registry) {
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err)
			}
		}
	}
}
