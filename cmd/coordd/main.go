// Command coordd runs a coordd node. With no flags it starts (or restarts) a
// single-node cluster with its data in ./coordd-data, gRPC on
// 127.0.0.1:7400 and metrics on 127.0.0.1:7401.
//
// A node is two layers composed here: node.New (Raft, the state machine,
// the leader's work) and api.Serve (gRPC, HTTP, security), sharing a
// logger, a clock and a metrics registry.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // every node has the same zone data: the leader computes occurrences with it

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordd/coordd/api"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/addrfile"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/buildinfo"
	"github.com/coordd/coordd/internal/tlsutil"
	"github.com/coordd/coordd/node"
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

func run(args []string) error {
	if len(args) > 0 && args[0] == "restore" { // restore.go
		return runRestore(args[1:], os.Stdout)
	}
	o, err := parseFlags(args)
	if err != nil || o == nil {
		return err
	}
	if o.version {
		fmt.Println(buildinfo.Read().String("coordd"))
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler
	switch strings.ToLower(o.logFormat) {
	case "json":
		handler = slog.NewJSONHandler(os.Stderr, hopts)
	case "text":
		handler = slog.NewTextHandler(os.Stderr, hopts)
	default:
		return fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	logger := slog.New(handler)
	logSettings(logger, o)
	peers, err := node.ParsePeers(o.peers)
	if err != nil {
		return fmt.Errorf("--peers: %w", err)
	}
	for id, addr := range peers {
		if _, port, _ := net.SplitHostPort(addr); port == "0" {
			return fmt.Errorf("--peers: %s=%s: no peer can dial port 0; a node on Raft port 0 starts alone or with --join", id, addr)
		}
	}
	tlsFiles := tlsutil.Files{Cert: o.tlsCert, Key: o.tlsKey, CA: o.tlsCA}
	peerTLS := tlsutil.Files{Cert: o.peerCert, Key: o.peerKey, CA: o.peerCA}
	if peerTLS.Enabled() && !tlsFiles.Enabled() {
		return errors.New("config: peer TLS without client TLS: set --tls-cert/--tls-key/--tls-ca too")
	}
	if !peerTLS.Enabled() {
		peerTLS = tlsFiles
	}
	var clk clock.Clock = clock.Real{}
	if o.clockOffset != 0 || o.clockRate != 1 {
		clk = clock.Skewed(o.clockOffset, o.clockRate)
		logger.Warn("test clock hook active: this node's clock is skewed", "offset", o.clockOffset, "rate", o.clockRate)
	}
	deliveryOpts, err := o.delivery.options()
	if err != nil {
		return err
	}
	// Tracing (docs/tracing.md): nil without an OTLP endpoint, and then
	// no span is made anywhere.
	tracerProvider, shutdownTracing, err := o.tracing.provider(context.Background(), o.id)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(ctx); err != nil {
			logger.Warn("flushing the trace spans failed", "err", err)
		}
	}()
	reg := prometheus.NewRegistry()
	// node.New locks the data directory before Raft opens its files: a
	// second coordd on it fails there, naming the first (internal/datadir).
	n, err := node.New(node.Config{
		ID: o.id, DataDir: o.dataDir, RaftAddr: o.raftAddr, Peers: peers, Join: o.join,
		HeartbeatTimeout: o.heartbeat, ElectionTimeout: o.election, LeaderLeaseTimeout: o.heartbeat / 2,
		Retention: o.retention, JobRetention: o.jobRetention, MaxFinishedJobs: o.maxFinishedJobs, MinTTL: o.minTTL, TLS: peerTLS,
		Insecure: o.insecure, Logger: logger, Clock: clk, Metrics: reg, RaftLogStore: o.logStore, RaftWALSegmentSize: o.walSegment,
		TracerProvider: tracerProvider,
	})
	if err != nil {
		return err
	}
	// The data dir is ours now (locked): a previous start's address file
	// goes, and the new one is written once every listener is bound.
	if err := addrfile.Remove(o.dataDir); err != nil {
		return errors.Join(err, n.Close())
	}
	srv, err := api.Serve(api.Config{
		GRPCAddr: o.grpcAddr, HTTPAddr: o.httpAddr, TLS: tlsFiles, Insecure: o.insecure, ACLFile: o.aclFile,
		Limits: auth.Limits{LeasesPerIdentity: uint32(o.maxLeases), RequestsPerSecond: o.rateLimit, Burst: o.burst,
			KeepAliveStreams: o.maxKA, WaitingAcquires: o.maxWaits, LiveJobsPerIdentity: uint32(o.maxLiveJobs),
			SchedulesPerIdentity: uint32(o.maxSchedules), JobBytesPerSecond: int64(o.jobBytesRate), ScheduleJobsPerSecond: o.scheduleJobsRate},
		EnablePprof: o.pprof, OpenMetrics: o.openMetrics, Logger: logger, Clock: clk, Metrics: reg,
		HTTPReadHeaderTimeout: o.listen.readHeader, HTTPReadTimeout: o.listen.read, HTTPWriteTimeout: o.listen.write,
		HTTPIdleTimeout: o.listen.idle, GRPCConnectionTimeout: o.listen.grpcConnect, GRPCKeepaliveTime: o.listen.grpcPing,
		GRPCKeepaliveTimeout: o.listen.grpcPingTimeout, Delivery: deliveryOpts, TracerProvider: tracerProvider,
		Settings: o.settings, ConfigFile: o.configFile,
	}, n)
	if err != nil {
		return errors.Join(err, n.Close())
	}
	// The addresses actually bound (a port 0 in a flag is the kernel's
	// pick): what tests and scripts read instead of guessing free ports.
	if err := addrfile.Write(o.dataDir, addrfile.Addresses{ID: o.id, GRPC: srv.GRPCAddr(), HTTP: srv.HTTPAddr(), Raft: n.RaftAddr()}); err != nil {
		srv.Close()
		return errors.Join(err, n.Close())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// A listener that stops serving ends coordd with its error (exit 1):
	// a node unreachable on its API must not look alive.
	serveErr := waitForStop(logger, sig, srv.Failed(), func() {
		_ = srv.Reload() // it logs what failed and keeps the previous version
		if err := n.Reload(); err != nil {
			logger.Error("reloading the peer TLS files failed; keeping the previous ones", "err", err)
		}
	})
	// The node first: waiting calls and streams end at once, so the API's
	// graceful stop is quick.
	err = errors.Join(serveErr, n.Close())
	srv.Close()
	return err
}

// logSettings logs the effective configuration in one line: every setting
// (secrets redacted), then which came from the flags, the environment and
// the file.
func logSettings(logger *slog.Logger, o *options) {
	var values []any
	from := map[string][]string{}
	for _, st := range o.settings {
		values = append(values, slog.String(st.Name, st.Value))
		if st.Source != "default" {
			from[st.Source] = append(from[st.Source], st.Name)
		}
	}
	logger.Info("effective configuration", "config_file", o.configFile, slog.Group("settings", values...),
		"from_flags", strings.Join(from["flag"], ","), "from_env", strings.Join(from["env"], ","),
		"from_file", strings.Join(from["file"], ","))
}

// waitForStop returns at SIGTERM or SIGINT (nil), or with the error of a
// listener that stopped serving; it calls reload at each SIGHUP.
func waitForStop(logger *slog.Logger, sig <-chan os.Signal, failed <-chan error, reload func()) error {
	for {
		select {
		case err := <-failed:
			logger.Error("shutting down: the API stopped serving", "err", err)
			return err
		case got := <-sig:
			if got == syscall.SIGHUP {
				logger.Info("SIGHUP: reloading TLS files and the ACL")
				reload()
				continue
			}
			logger.Info("shutting down", "signal", got.String())
			return nil
		}
	}
}
