package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/internal/logstore"
	"github.com/coordd/coordd/node"
)

// options are coordd's flags, after the environment.
type options struct {
	id, dataDir, grpcAddr, raftAddr, httpAddr, peers, join string
	heartbeat, election, retention, minTTL, jobRetention   time.Duration
	maxFinishedJobs                                        uint64
	logLevel, logFormat                                    string
	pprof, insecure                                        bool
	tlsCert, tlsKey, tlsCA, peerCert, peerKey, peerCA      string
	aclFile                                                string
	maxLeases                                              uint
	rateLimit                                              float64
	burst, maxKA, maxWaits                                 int
	logStore                                               string
	walSegment                                             int
	clockOffset                                            time.Duration
	clockRate                                              float64
	version                                                bool
}

// hiddenFlags work but are not shown by -h: the fault suite's clock hooks.
var hiddenFlags = map[string]bool{"test-clock-offset": true, "test-clock-rate": true}

// parseFlags reads the flags; every flag can also be set as COORDD_<FLAG>
// (upper case, - as _), which sets its default. A variable that does not
// parse is an error naming it. It returns nil options after -h.
func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("coordd", flag.ContinueOnError)
	e := &envReader{}
	def := node.Defaults()
	o := &options{}
	fs.StringVar(&o.id, "id", e.str("ID", "node1"), "Raft server id, unique in the cluster")
	fs.StringVar(&o.dataDir, "data-dir", e.str("DATA_DIR", "./coordd-data"), "data directory (Raft log, snapshots)")
	fs.StringVar(&o.grpcAddr, "grpc-addr", e.str("GRPC_ADDR", "127.0.0.1:7400"), "gRPC listen address")
	fs.StringVar(&o.raftAddr, "raft-addr", e.str("RAFT_ADDR", "127.0.0.1:7402"), "Raft listen and advertised address")
	fs.StringVar(&o.httpAddr, "http-addr", e.str("HTTP_ADDR", "127.0.0.1:7401"), "metrics and health HTTP address (empty disables)")
	fs.StringVar(&o.peers, "peers", e.str("PEERS", ""), "static initial cluster: id=raft_addr,... (must include this node)")
	fs.StringVar(&o.join, "join", e.str("JOIN", ""), "gRPC address of a running member to join through")
	fs.DurationVar(&o.heartbeat, "heartbeat-timeout", e.duration("HEARTBEAT_TIMEOUT", def.HeartbeatTimeout), "Raft heartbeat timeout")
	fs.DurationVar(&o.election, "election-timeout", e.duration("ELECTION_TIMEOUT", def.ElectionTimeout), "Raft election timeout")
	fs.DurationVar(&o.retention, "retention", e.duration("RETENTION", def.Retention), "how long completed windows and idempotency records are kept")
	fs.DurationVar(&o.jobRetention, "job-retention", e.duration("JOB_RETENTION", def.JobRetention),
		"how long finished queue jobs (succeeded, cancelled, dead) are kept, on the calendar clock")
	fs.Uint64Var(&o.maxFinishedJobs, "job-max-finished", e.uint64("JOB_MAX_FINISHED", def.MaxFinishedJobs),
		"finished queue jobs kept at most (beyond it the oldest succeeded ones go first)")
	fs.DurationVar(&o.minTTL, "min-ttl", e.duration("MIN_TTL", 0), "shortest lease TTL accepted (default 1.5 x election timeout, at least 1s)")
	fs.StringVar(&o.logLevel, "log-level", e.str("LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", e.str("LOG_FORMAT", "text"), "text or json")
	fs.BoolVar(&o.pprof, "enable-pprof", e.boolean("ENABLE_PPROF"), "serve /debug/pprof/ on the HTTP address")
	fs.StringVar(&o.tlsCert, "tls-cert", e.str("TLS_CERT", ""), "PEM certificate of this node: turns on TLS for gRPC and HTTP and mutual TLS for clients and peers")
	fs.StringVar(&o.tlsKey, "tls-key", e.str("TLS_KEY", ""), "PEM key of --tls-cert")
	fs.StringVar(&o.tlsCA, "tls-ca", e.str("TLS_CA", ""), "PEM CA bundle that signs client (and, without --peer-tls-ca, peer) certificates")
	fs.StringVar(&o.peerCert, "peer-tls-cert", e.str("PEER_TLS_CERT", ""), "PEM certificate for Raft between peers (default: --tls-cert)")
	fs.StringVar(&o.peerKey, "peer-tls-key", e.str("PEER_TLS_KEY", ""), "PEM key of --peer-tls-cert")
	fs.StringVar(&o.peerCA, "peer-tls-ca", e.str("PEER_TLS_CA", ""), "PEM CA bundle of peer certificates (default: --tls-ca)")
	fs.BoolVar(&o.insecure, "insecure", e.boolean("INSECURE"), "allow plaintext listeners on non-loopback addresses")
	fs.StringVar(&o.aclFile, "acl-file", e.str("ACL_FILE", ""), "YAML authorization rules (needs TLS); reloaded on SIGHUP")
	fs.UintVar(&o.maxLeases, "limit-leases", e.uint32("LIMIT_LEASES"), "live leases one identity may hold (0: unlimited)")
	fs.Float64Var(&o.rateLimit, "limit-rate", e.float("LIMIT_RATE"), "calls per second one identity may make on a node (0: unlimited)")
	fs.IntVar(&o.burst, "limit-burst", int(e.uint32("LIMIT_BURST")), "burst of --limit-rate (default: one second's worth)")
	fs.IntVar(&o.maxKA, "limit-keepalive-streams", int(e.uint32("LIMIT_KEEPALIVE_STREAMS")), "KeepAlive streams one identity may open on a node (0: unlimited)")
	fs.IntVar(&o.maxWaits, "limit-waiting-acquires", int(e.uint32("LIMIT_WAITING_ACQUIRES")), "Acquire calls with wait one identity may have queued on the leader (0: unlimited)")
	fs.StringVar(&o.logStore, "raft-log-store", e.str("RAFT_LOG_STORE", ""), "Raft log store of a new data dir: wal or bolt (default wal); an existing data dir keeps the one it was created with")
	o.walSegment = parse(e, "RAFT_WAL_SEGMENT_SIZE", logstore.DefaultWALSegmentSize, logstore.ParseSize)
	fs.Var(sizeValue{&o.walSegment}, "raft-wal-segment-size", "size of the wal store's segment files, preallocated (bytes, or with K, M, G: KiB, MiB, GiB)")
	fs.BoolVar(&o.version, "version", false, "print the version (module version, VCS revision and time, Go version) and exit")
	// Fault tests only (hidden): Go ignores libfaketime, so clock faults
	// need a hook.
	fs.DurationVar(&o.clockOffset, "test-clock-offset", 0, "FAULT TESTS ONLY: offset this node's wall clock")
	fs.Float64Var(&o.clockRate, "test-clock-rate", 1, "FAULT TESTS ONLY: scale this node's clock (elapsed time and timers)")
	if err := e.err(); err != nil {
		return nil, err
	}
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if _, err := logstore.ParseKind(o.logStore); err != nil {
		return nil, fmt.Errorf("--raft-log-store: %w", err)
	}
	return o, nil
}

// sizeValue is a byte-size flag (logstore.ParseSize).
type sizeValue struct{ n *int }

func (v sizeValue) String() string {
	if v.n == nil {
		return ""
	}
	if *v.n%(1<<20) == 0 && *v.n > 0 {
		return strconv.Itoa(*v.n>>20) + "MiB"
	}
	return strconv.Itoa(*v.n)
}

func (v sizeValue) Set(s string) error {
	n, err := logstore.ParseSize(s)
	if err == nil {
		*v.n = n
	}
	return err
}

// usage prints the flags except the hidden ones.
func usage(fs *flag.FlagSet) {
	fmt.Fprintf(fs.Output(), "Usage: coordd [flags]\n\nEvery flag can also be set as COORDD_<FLAG> (upper case, - as _).\n\n")
	shown := flag.NewFlagSet("coordd", flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if !hiddenFlags[f.Name] {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	shown.PrintDefaults()
}

// envReader reads COORDD_<NAME> variables as flag defaults and collects
// the ones that do not parse.
type envReader struct{ errs []error }

func (e *envReader) lookup(name string) (string, bool) { return os.LookupEnv("COORDD_" + name) }

func (e *envReader) fail(name, v string, err error) {
	e.errs = append(e.errs, fmt.Errorf("COORDD_%s=%q: %w", name, v, err))
}

func (e *envReader) err() error { return errors.Join(e.errs...) }

func (e *envReader) str(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

// parse returns COORDD_<NAME> parsed by p, def when unset or empty; a
// value that does not parse is recorded and def returned.
func parse[T any](e *envReader, name string, def T, p func(string) (T, error)) T {
	v, ok := e.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	x, err := p(strings.TrimSpace(v))
	if err != nil {
		e.fail(name, v, err)
		return def
	}
	return x
}

func (e *envReader) duration(name string, def time.Duration) time.Duration {
	return parse(e, name, def, time.ParseDuration)
}

func (e *envReader) boolean(name string) bool {
	return parse(e, name, false, strconv.ParseBool)
}

func (e *envReader) uint32(name string) uint {
	return parse(e, name, 0, func(v string) (uint, error) {
		n, err := strconv.ParseUint(v, 10, 32)
		return uint(n), err
	})
}

func (e *envReader) uint64(name string, def uint64) uint64 {
	return parse(e, name, def, func(v string) (uint64, error) { return strconv.ParseUint(v, 10, 64) })
}

func (e *envReader) float(name string) float64 {
	return parse(e, name, 0, func(v string) (float64, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err == nil && (f < 0 || math.IsNaN(f) || math.IsInf(f, 0)) {
			err = errors.New("want a number >= 0")
		}
		return f, err
	})
}
