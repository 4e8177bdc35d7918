// Command coordd runs a coordd node. With no flags it starts (or restarts) a
// single-node cluster with its data in ./coordd-data, gRPC on
// 127.0.0.1:7400 and metrics on 127.0.0.1:7401.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coordd/coordd/internal/buildinfo"
	"github.com/coordd/coordd/internal/datadir"
	"github.com/coordd/coordd/server"
)

func main() {
	// coordd's heap is small and mostly long-lived records; trading memory
	// for fewer collections saves CPU on the hot path. GOGC still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "coordd:", err)
		os.Exit(1)
	}
}

// env returns COORDD_<NAME> or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv("COORDD_" + name); ok {
		return v
	}
	return def
}

// envParsed returns COORDD_<NAME> parsed by parse, or def when unset or
// unparsable.
func envParsed[T any](name string, def T, parse func(string) (T, error)) T {
	if v, ok := os.LookupEnv("COORDD_" + name); ok {
		if x, err := parse(v); err == nil {
			return x
		}
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	return envParsed(name, def, time.ParseDuration)
}

func uintEnv(name string, def uint) uint {
	return envParsed(name, def, func(v string) (uint, error) {
		n, err := strconv.ParseUint(v, 10, 32)
		return uint(n), err
	})
}

func floatEnv(name string, def float64) float64 {
	return envParsed(name, def, func(v string) (float64, error) { return strconv.ParseFloat(v, 64) })
}

func run(args []string) error {
	fs := flag.NewFlagSet("coordd", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: coordd [flags]\n\nEvery flag can also be set as COORDD_<FLAG> (upper case, - as _).\n\n")
		fs.PrintDefaults()
	}
	var (
		id        = fs.String("id", env("ID", "node1"), "Raft server id, unique in the cluster")
		dataDir   = fs.String("data-dir", env("DATA_DIR", "./coordd-data"), "data directory (Raft log, snapshots)")
		grpcAddr  = fs.String("grpc-addr", env("GRPC_ADDR", "127.0.0.1:7400"), "gRPC listen address")
		raftAddr  = fs.String("raft-addr", env("RAFT_ADDR", "127.0.0.1:7402"), "Raft listen and advertised address")
		httpAddr  = fs.String("http-addr", env("HTTP_ADDR", "127.0.0.1:7401"), "metrics and health HTTP address (empty disables)")
		peers     = fs.String("peers", env("PEERS", ""), "static initial cluster: id=raft_addr,... (must include this node)")
		join      = fs.String("join", env("JOIN", ""), "gRPC address of a running member to join through")
		heartbeat = fs.Duration("heartbeat-timeout", envDuration("HEARTBEAT_TIMEOUT", 500*time.Millisecond), "Raft heartbeat timeout")
		election  = fs.Duration("election-timeout", envDuration("ELECTION_TIMEOUT", 500*time.Millisecond), "Raft election timeout")
		retention = fs.Duration("retention", envDuration("RETENTION", 30*24*time.Hour), "how long completed windows and idempotency records are kept")
		minTTL    = fs.Duration("min-ttl", envDuration("MIN_TTL", 0), "shortest lease TTL accepted (default 1.5 x election timeout, at least 1s)")
		logLevel  = fs.String("log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error")
		logFormat = fs.String("log-format", env("LOG_FORMAT", "text"), "text or json")
		pprofOn   = fs.Bool("enable-pprof", env("ENABLE_PPROF", "") == "true", "serve /debug/pprof/ on the HTTP address")
		tlsCert   = fs.String("tls-cert", env("TLS_CERT", ""), "PEM certificate of this node: turns on TLS for gRPC and HTTP and mutual TLS for clients and peers")
		tlsKey    = fs.String("tls-key", env("TLS_KEY", ""), "PEM key of --tls-cert")
		tlsCA     = fs.String("tls-ca", env("TLS_CA", ""), "PEM CA bundle that signs client (and, without --peer-tls-ca, peer) certificates")
		peerCert  = fs.String("peer-tls-cert", env("PEER_TLS_CERT", ""), "PEM certificate for Raft between peers (default: --tls-cert)")
		peerKey   = fs.String("peer-tls-key", env("PEER_TLS_KEY", ""), "PEM key of --peer-tls-cert")
		peerCA    = fs.String("peer-tls-ca", env("PEER_TLS_CA", ""), "PEM CA bundle of peer certificates (default: --tls-ca)")
		insecure  = fs.Bool("insecure", env("INSECURE", "") == "true", "allow plaintext listeners on non-loopback addresses")
		aclFile   = fs.String("acl-file", env("ACL_FILE", ""), "YAML authorization rules (needs TLS); reloaded on SIGHUP")
		maxLeases = fs.Uint("limit-leases", uintEnv("LIMIT_LEASES", 0), "live leases one identity may hold (0: unlimited)")
		rateLimit = fs.Float64("limit-rate", floatEnv("LIMIT_RATE", 0), "calls per second one identity may make on a node (0: unlimited)")
		burst     = fs.Int("limit-burst", int(uintEnv("LIMIT_BURST", 0)), "burst of --limit-rate (default: one second's worth)")
		maxKA     = fs.Int("limit-keepalive-streams", int(uintEnv("LIMIT_KEEPALIVE_STREAMS", 0)), "KeepAlive streams one identity may open on a node (0: unlimited)")
		maxWaits  = fs.Int("limit-waiting-acquires", int(uintEnv("LIMIT_WAITING_ACQUIRES", 0)), "Acquire calls with wait one identity may have queued on the leader (0: unlimited)")
		// Fault tests only: Go ignores libfaketime, so clock faults need a hook.
		clockOffset = fs.Duration("test-clock-offset", 0, "FAULT TESTS ONLY: offset this node's wall clock")
		clockRate   = fs.Float64("test-clock-rate", 1, "FAULT TESTS ONLY: scale this node's monotonic clock")
		version     = fs.Bool("version", false, "print the version (module version, VCS revision and time, Go version) and exit")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *version {
		fmt.Println(buildinfo.Read().String("coordd"))
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler
	switch strings.ToLower(*logFormat) {
	case "json":
		handler = slog.NewJSONHandler(os.Stderr, opts)
	case "text":
		handler = slog.NewTextHandler(os.Stderr, opts)
	default:
		return fmt.Errorf("--log-format %q: want text or json", *logFormat)
	}
	logger := slog.New(handler)
	peerMap, err := server.ParsePeers(*peers)
	if err != nil {
		return fmt.Errorf("--peers: %w", err)
	}
	var clk server.Clock
	if *clockOffset != 0 || *clockRate != 1 {
		clk = server.NewSkewedClock(*clockOffset, *clockRate)
		logger.Warn("test clock hook active: this node's clock is skewed", "offset", *clockOffset, "rate", *clockRate)
	}
	// Before Raft opens its files: a second coordd on this directory fails
	// here, naming the first, instead of timing out on the Raft log.
	lock, err := datadir.Acquire(*dataDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	srv, err := server.New(server.Config{
		ID: *id, DataDir: *dataDir, GRPCAddr: *grpcAddr, RaftAddr: *raftAddr, HTTPAddr: *httpAddr,
		Peers: peerMap, Join: *join, HeartbeatTimeout: *heartbeat, ElectionTimeout: *election,
		LeaderLeaseTimeout: *heartbeat / 2, Retention: *retention, MinTTL: *minTTL, Logger: logger, EnablePprof: *pprofOn,
		Clock: clk,
		TLS:   server.TLSFiles{Cert: *tlsCert, Key: *tlsKey, CA: *tlsCA}, PeerTLS: server.TLSFiles{Cert: *peerCert, Key: *peerKey, CA: *peerCA},
		Insecure: *insecure, ACLFile: *aclFile,
		Limits: server.Limits{LeasesPerIdentity: uint32(*maxLeases), RequestsPerSecond: *rateLimit, Burst: *burst, KeepAliveStreams: *maxKA,
			WaitingAcquires: *maxWaits},
	})
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for got := range sig {
		if got == syscall.SIGHUP {
			logger.Info("SIGHUP: reloading TLS files and the ACL")
			_ = srv.Reload() // it logs what failed and keeps the previous version
			continue
		}
		logger.Info("shutting down", "signal", got.String())
		break
	}
	return srv.Close()
}
