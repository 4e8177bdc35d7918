package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/api"
	"github.com/coordd/coordd/internal/auth"
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
	maxLiveJobs, maxSchedules                              uint
	jobBytesRate                                           int
	scheduleJobsRate                                       float64
	logStore                                               string
	walSegment                                             int
	listen                                                 listenLimits
	openMetrics                                            bool
	delivery                                               deliveryFlags
	tracing                                                tracingFlags
	clockOffset                                            time.Duration
	clockRate                                              float64
	version                                                bool
	// The configuration file and the effective configuration (config.go).
	configFile string
	settings   []api.Setting
}

// listenLimits are the listeners' timeouts (api.Config, docs/security.md
// "Listener limits").
type listenLimits struct {
	readHeader, read, write, idle, grpcConnect, grpcPing, grpcPingTimeout time.Duration
}

// deliveryFlags configure the delivery of jobs to HTTP targets
// (docs/delivery.md).
type deliveryFlags struct {
	allow, secrets, ca     string
	concurrency, perTarget int
}

// hiddenFlags work but are not shown by -h: the fault suite's clock hooks.
var hiddenFlags = map[string]bool{"test-clock-offset": true, "test-clock-rate": true}

// parseFlags reads the flags; every flag can also be set as COORDD_<FLAG>
// (upper case, - as _), which sets its default. A variable that does not
// parse is an error naming it. It returns nil options after -h.
func parseFlags(args []string) (*options, error) { return parseFlagsTo(os.Stderr, args) }

// parseFlagsTo is parseFlags with -h's text and flag errors written to out.
func parseFlagsTo(out io.Writer, args []string) (*options, error) {
	fs := flag.NewFlagSet("coordd", flag.ContinueOnError)
	fs.SetOutput(out)
	e := &envReader{}
	f := envFlags{fs, e}
	def := node.Defaults()
	o := &options{}
	f.str(&o.id, "id", "node1", "Raft server id, unique in the cluster")
	f.str(&o.dataDir, "data-dir", "./coordd-data", "data directory (Raft log, snapshots)")
	f.str(&o.grpcAddr, "grpc-addr", "127.0.0.1:7400", "gRPC listen address (port 0: the kernel picks one; every address bound is written to <data-dir>/addresses.json)")
	f.str(&o.raftAddr, "raft-addr", "127.0.0.1:7402", "Raft listen and advertised address (port 0: a free one, advertised as bound; see <data-dir>/addresses.json; peers need real addresses, so such a node joins with --join or starts alone)")
	f.str(&o.httpAddr, "http-addr", "127.0.0.1:7401", "metrics and health HTTP address (empty disables; port 0: a free one, see <data-dir>/addresses.json)")
	f.str(&o.peers, "peers", "", "static initial cluster: id=raft_addr,... (must include this node; no port 0)")
	f.str(&o.join, "join", "", "gRPC address of a running member to join through")
	f.duration(&o.heartbeat, "heartbeat-timeout", def.HeartbeatTimeout, "Raft heartbeat timeout")
	f.duration(&o.election, "election-timeout", def.ElectionTimeout, "Raft election timeout")
	f.duration(&o.retention, "retention", def.Retention, "how long completed windows and idempotency records are kept")
	f.duration(&o.jobRetention, "job-retention", def.JobRetention,
		"how long finished queue jobs (succeeded, cancelled, dead) are kept, on the calendar clock")
	f.uint64(&o.maxFinishedJobs, "job-max-finished", def.MaxFinishedJobs,
		"finished queue jobs kept at most (beyond it the oldest succeeded ones go first)")
	f.duration(&o.minTTL, "min-ttl", 0, "shortest lease TTL accepted (default 1.5 x election timeout, at least 1s)")
	f.str(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.str(&o.logFormat, "log-format", "text", "text or json")
	f.boolean(&o.pprof, "enable-pprof", "serve /debug/pprof/ on the HTTP address (with TLS: to members and admin identities only)")
	f.boolean(&o.openMetrics, "metrics-open", "with TLS, serve /metrics to clients without a certificate (default: a certificate whose identity may read everything, or admin)")
	ad := api.Defaults()
	for _, d := range []struct {
		p     *time.Duration
		name  string
		def   time.Duration
		usage string
	}{
		{&o.listen.readHeader, "http-read-header-timeout", ad.HTTPReadHeaderTimeout, "HTTP: time to read a request's headers"},
		{&o.listen.read, "http-read-timeout", ad.HTTPReadTimeout, "HTTP: time to read a whole request, body included"},
		{&o.listen.write, "http-write-timeout", ad.HTTPWriteTimeout, "HTTP: time to write a response (a console stream: each write)"},
		{&o.listen.idle, "http-idle-timeout", ad.HTTPIdleTimeout, "HTTP: how long a keep-alive connection may idle"},
		{&o.listen.grpcConnect, "grpc-connection-timeout", ad.GRPCConnectionTimeout, "gRPC: time for a connection's TLS and HTTP/2 handshake"},
		{&o.listen.grpcPing, "grpc-keepalive-time", ad.GRPCKeepaliveTime, "gRPC: ping a connection silent this long"},
		{&o.listen.grpcPingTimeout, "grpc-keepalive-timeout", ad.GRPCKeepaliveTimeout, "gRPC: close a connection whose ping is not answered within this"},
	} {
		f.duration(d.p, d.name, d.def, d.usage)
	}
	// TLS: PEM files, none by default.
	for _, t := range []struct {
		p           *string
		name, usage string
	}{
		{&o.tlsCert, "tls-cert", "PEM node certificate of this node (URI SAN coordd://node/<id>: coordctl certs issue ID --node): turns on TLS for gRPC and HTTP and mutual TLS for clients and peers"},
		{&o.tlsKey, "tls-key", "PEM key of --tls-cert"},
		{&o.tlsCA, "tls-ca", "PEM CA bundle that signs client (and, without --peer-tls-ca, peer) certificates"},
		{&o.peerCert, "peer-tls-cert", "PEM node certificate for Raft between peers (default: --tls-cert); peers accept only node certificates of members"},
		{&o.peerKey, "peer-tls-key", "PEM key of --peer-tls-cert"},
		{&o.peerCA, "peer-tls-ca", "PEM CA bundle of peer certificates (default: --tls-ca)"},
	} {
		f.str(t.p, t.name, "", t.usage)
	}
	f.boolean(&o.insecure, "insecure", "allow plaintext listeners on non-loopback addresses")
	f.str(&o.aclFile, "acl-file", "", "YAML authorization rules (needs TLS); reloaded on SIGHUP")
	f.uint32(&o.maxLeases, "limit-leases", 0, "live leases one identity may hold (0: unlimited)")
	f.float(&o.rateLimit, "limit-rate", 0, "calls per second one identity may make on the node it calls, and again on the leader for what a follower forwards there (0: unlimited)")
	f.int32(&o.burst, "limit-burst", "burst of --limit-rate (default: one second's worth)")
	f.int32(&o.maxKA, "limit-keepalive-streams", "KeepAlive streams one identity may open on a node (0: unlimited)")
	f.int32(&o.maxWaits, "limit-waiting-acquires", "Acquire calls with wait one identity may have queued on the leader (0: unlimited)")
	dl := auth.DefaultLimits()
	f.uint32(&o.maxLiveJobs, "limit-live-jobs", uint(dl.LiveJobsPerIdentity), "queue jobs not yet final one identity may have submitted, cluster-wide (0: unlimited)")
	f.uint32(&o.maxSchedules, "limit-schedules", uint(dl.SchedulesPerIdentity), "schedules not deleted one identity may have created, cluster-wide (0: unlimited)")
	o.jobBytesRate = parse(e, "LIMIT_JOB_BYTES_RATE", int(dl.JobBytesPerSecond), logstore.ParseSize)
	fs.Var(sizeValue{&o.jobBytesRate}, "limit-job-bytes-rate",
		"job args bytes per second one identity may submit, judged on the leader (bytes, or with K, M, G); also caps its schedules' args bytes per second at their peak rates (0: unlimited)")
	f.float(&o.scheduleJobsRate, "limit-schedule-jobs-rate", dl.ScheduleJobsPerSecond,
		"jobs per second one identity's schedules may make at their peak rates (one per shortest interval), judged on the leader at each put (0: unlimited)")
	f.str(&o.delivery.allow, "delivery-allow", "", "comma-separated hosts HTTP targets may name: host names, *.domain, *, IP addresses, CIDR prefixes (empty: no target is reachable, loopback included, and this node delivers nothing)")
	f.str(&o.delivery.secrets, "delivery-secrets", "", `file of signing secrets for HTTP targets, one a line: "<name> whsec_... [whsec_... (previous key, during a rotation)]"`)
	f.str(&o.delivery.ca, "delivery-ca", "", "PEM CA bundle that verifies HTTP targets' TLS certificates (default: the system's)")
	f.int32(&o.delivery.concurrency, "delivery-concurrency", "delivery requests in flight on this node (0: 64; -1: this node delivers nothing)")
	f.int32(&o.delivery.perTarget, "delivery-per-target", "delivery requests in flight to one target (scheme and host) from this node (0: 16)")
	f.tracing(&o.tracing)
	f.str(&o.logStore, "raft-log-store", "", "Raft log store of a new data dir: wal or bolt (default wal); an existing data dir keeps the one it was created with")
	o.walSegment = parse(e, "RAFT_WAL_SEGMENT_SIZE", logstore.DefaultWALSegmentSize, logstore.ParseSize)
	fs.Var(sizeValue{&o.walSegment}, "raft-wal-segment-size", "size of the wal store's segment files, preallocated (bytes, or with K, M, G: KiB, MiB, GiB)")
	fs.BoolVar(&o.version, "version", false, "print the version (module version, VCS revision and time, Go version) and exit")
	// Fault tests only (hidden): Go ignores libfaketime, so clock faults
	// need a hook.
	fs.DurationVar(&o.clockOffset, "test-clock-offset", 0, "FAULT TESTS ONLY: offset this node's wall clock")
	fs.Float64Var(&o.clockRate, "test-clock-rate", 1, "FAULT TESTS ONLY: scale this node's clock (elapsed time and timers)")
	// Operations (#30): the configuration file, under the flags and the
	// environment (config.go).
	f.str(&o.configFile, "config", "", "YAML file of settings, keyed by these flags' names (flags and COORDD_* variables override it)")
	if err := e.err(); err != nil {
		return nil, err
	}
	fs.Usage = func() { usage(fs) }
	var fromFile map[string]bool
	if path := configPath(fs, args); path != "" {
		var err error
		if fromFile, err = applyConfigFile(fs, path, e.used); err != nil {
			return nil, err
		}
	}
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
	o.settings = settings(fs, scanFlags(fs, args), e.used, fromFile)
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
	fmt.Fprintf(fs.Output(), "Usage: coordd [flags]\n       coordd restore --from FILE --data-dir DIR ... (a new node from a backup: coordd restore -h)\n\n"+
		"Every flag can also be set as COORDD_<FLAG> (upper case, - as _), or as a key\n"+
		"of the --config file (its name as here); a flag wins over the environment,\nwhich wins over the file.\n\n")
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

// envFlags defines flags whose defaults come from the environment: flag
// some-name from COORDD_SOME_NAME.
type envFlags struct {
	fs *flag.FlagSet
	e  *envReader
}

func envName(flag string) string { return strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) }

func (f envFlags) str(p *string, name, def, usage string) {
	f.fs.StringVar(p, name, f.e.str(envName(name), def), usage)
}

func (f envFlags) duration(p *time.Duration, name string, def time.Duration, usage string) {
	f.fs.DurationVar(p, name, f.e.duration(envName(name), def), usage)
}

func (f envFlags) boolean(p *bool, name, usage string) {
	f.fs.BoolVar(p, name, f.e.boolean(envName(name)), usage)
}

func (f envFlags) uint32(p *uint, name string, def uint, usage string) {
	f.fs.UintVar(p, name, f.e.uint32(envName(name), def), usage)
}

// int32 is uint32 into an int flag.
func (f envFlags) int32(p *int, name, usage string) {
	f.fs.IntVar(p, name, int(f.e.uint32(envName(name), 0)), usage)
}

func (f envFlags) uint64(p *uint64, name string, def uint64, usage string) {
	f.fs.Uint64Var(p, name, f.e.uint64(envName(name), def), usage)
}

func (f envFlags) float(p *float64, name string, def float64, usage string) {
	f.fs.Float64Var(p, name, f.e.float(envName(name), def), usage)
}

// envReader reads COORDD_<NAME> variables as flag defaults and collects
// the ones that do not parse.
type envReader struct {
	errs []error
	used map[string]bool // the variables (names without COORDD_) that set a default
}

func (e *envReader) mark(name string) {
	if e.used == nil {
		e.used = map[string]bool{}
	}
	e.used[name] = true
}

func (e *envReader) lookup(name string) (string, bool) { return os.LookupEnv("COORDD_" + name) }

func (e *envReader) fail(name, v string, err error) {
	e.errs = append(e.errs, fmt.Errorf("COORDD_%s=%q: %w", name, v, err))
}

func (e *envReader) err() error { return errors.Join(e.errs...) }

func (e *envReader) str(name, def string) string {
	if v, ok := e.lookup(name); ok {
		e.mark(name)
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
	e.mark(name)
	return x
}

func (e *envReader) duration(name string, def time.Duration) time.Duration {
	return parse(e, name, def, time.ParseDuration)
}

func (e *envReader) boolean(name string) bool {
	return parse(e, name, false, strconv.ParseBool)
}

func (e *envReader) uint32(name string, def uint) uint {
	return parse(e, name, def, func(v string) (uint, error) {
		n, err := strconv.ParseUint(v, 10, 32)
		return uint(n), err
	})
}

func (e *envReader) uint64(name string, def uint64) uint64 {
	return parse(e, name, def, func(v string) (uint64, error) { return strconv.ParseUint(v, 10, 64) })
}

func (e *envReader) float(name string, def float64) float64 {
	return parse(e, name, def, func(v string) (float64, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err == nil && (f < 0 || math.IsNaN(f) || math.IsInf(f, 0)) {
			err = errors.New("want a number >= 0")
		}
		return f, err
	})
}
