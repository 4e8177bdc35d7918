package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/coordd/coordd/internal/logstore"
	"github.com/coordd/coordd/internal/tlsutil"
)

// Config is everything a node needs; it is validated once by New.
type Config struct {
	ID       string // Raft server id, unique in the cluster
	DataDir  string
	GRPCAddr string // listen address; port 0 picks a free one
	RaftAddr string // Raft TCP listen (and advertised) address
	HTTPAddr string // metrics and health; empty disables

	// Peers is the static initial cluster: id -> Raft address. When the data
	// dir is empty and Join is empty, the node bootstraps with these peers (or
	// alone when Peers is empty).
	Peers map[string]string
	// Join is the gRPC address of a running member to ask for admission.
	Join string

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// TickInterval is how often an idle leader appends a tick so the
	// cluster clock keeps moving.
	TickInterval time.Duration
	// Retention is how long completed windows and idempotency records are
	// kept; PruneInterval is how often the leader proposes a prune.
	Retention     time.Duration
	PruneInterval time.Duration
	// SnapshotThreshold is the number of log entries between snapshots.
	SnapshotThreshold uint64
	// RaftLogStore is the Raft log store of a new data dir: "wal" or "bolt"
	// ("" = logstore.Default); an existing data dir keeps its own.
	// RaftWALSegmentSize is the wal segment file size in bytes (0 = 64 MiB).
	RaftLogStore       string
	RaftWALSegmentSize int
	// MinTTL and MaxTTL bound lease TTLs. MinTTL defaults to 1.5 x the
	// election timeout (at least 1 s): a shorter lease could lapse during a
	// failover.
	MinTTL time.Duration
	MaxTTL time.Duration
	// ApplyTimeout bounds one proposal when the caller sets no deadline.
	ApplyTimeout time.Duration

	// MonitorInterval is how often the leader computes overdue windows and
	// stuck leases for metrics and logs; OverdueLookback bounds how far back
	// expected windows are checked; MaxLeaseAge is the age of a generation
	// past which its lease counts as stuck (HELD_TOO_LONG), and the window in
	// which an expired, unreleased lease counts as SILENT.
	MonitorInterval time.Duration
	OverdueLookback time.Duration
	MaxLeaseAge     time.Duration

	// EnablePprof serves net/http/pprof under /debug/pprof/ on HTTPAddr.
	EnablePprof bool

	// TLS is the node's certificate and key and the CA of its clients; it
	// turns on TLS for gRPC and HTTP, mutual TLS for gRPC, and identities.
	// PeerTLS is used between Raft peers; when empty, TLS is.
	TLS     tlsutil.Files
	PeerTLS tlsutil.Files
	// Insecure allows plaintext listeners on non-loopback addresses.
	Insecure bool
	// ACLFile is the authorization policy (see ACL), reloaded by Reload.
	// Without it, every authenticated identity may do everything.
	ACLFile string
	// Limits are per-identity caps.
	Limits Limits

	Logger *slog.Logger
	// Clock is the node's time source; tests inject one to skew or scale it.
	Clock Clock
}

// TLSFiles names a certificate, its key and a CA bundle (PEM files).
type TLSFiles = tlsutil.Files

// Limits on input, enforced on every RPC.
const (
	MaxNameBytes    = 256
	MaxPayloadBytes = 64 << 10
	MaxPageSize     = 1000
	// MaxMessageBytes caps a gRPC request and an HTTP request body.
	MaxMessageBytes = 1 << 20
	DefaultPageSize = 100
)

// withDefaults fills unset fields.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, 500*time.Millisecond)
	def(&c.ElectionTimeout, 500*time.Millisecond)
	def(&c.LeaderLeaseTimeout, 250*time.Millisecond)
	def(&c.TickInterval, 250*time.Millisecond)
	def(&c.Retention, 30*24*time.Hour)
	def(&c.PruneInterval, time.Minute)
	def(&c.MaxTTL, 24*time.Hour)
	def(&c.ApplyTimeout, 10*time.Second)
	def(&c.MonitorInterval, 5*time.Second)
	def(&c.OverdueLookback, 7*24*time.Hour)
	def(&c.MaxLeaseAge, 24*time.Hour)
	if c.MinTTL == 0 {
		c.MinTTL = max(time.Second, c.ElectionTimeout*3/2)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 16384
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("id is required"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is required"))
	}
	for name, addr := range map[string]string{"grpc address": c.GRPCAddr, "raft address": c.RaftAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, addr, err))
		}
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			errs = append(errs, fmt.Errorf("http address %q: %w", c.HTTPAddr, err))
		}
	}
	if len(c.Peers) > 0 {
		if _, ok := c.Peers[c.ID]; !ok {
			errs = append(errs, fmt.Errorf("peers must include this node's id %q", c.ID))
		}
		if c.Join != "" {
			errs = append(errs, errors.New("peers and join are exclusive"))
		}
	}
	if c.MinTTL < c.ElectionTimeout*3/2 {
		errs = append(errs, fmt.Errorf("min TTL %s is below 1.5 x the election timeout %s", c.MinTTL, c.ElectionTimeout))
	}
	if c.MaxTTL < c.MinTTL {
		errs = append(errs, fmt.Errorf("max TTL %s is below min TTL %s", c.MaxTTL, c.MinTTL))
	}
	errs = append(errs, c.TLS.Validate(), c.PeerTLS.Validate())
	if c.PeerTLS.Enabled() && !c.TLS.Enabled() {
		errs = append(errs, errors.New("peer TLS without client TLS: set --tls-cert/--tls-key/--tls-ca too"))
	}
	if c.ACLFile != "" && !c.TLS.Enabled() {
		errs = append(errs, errors.New("an ACL needs identities, which come from TLS client certificates: set --tls-cert/--tls-key/--tls-ca"))
	}
	if !c.TLS.Enabled() && !c.Insecure {
		var open []string
		for _, l := range []struct{ name, addr string }{{"gRPC", c.GRPCAddr}, {"Raft", c.RaftAddr}, {"HTTP", c.HTTPAddr}} {
			if l.addr != "" && !isLoopback(l.addr) {
				open = append(open, l.addr+" ("+l.name+")")
			}
		}
		if len(open) > 0 {
			errs = append(errs, fmt.Errorf("refusing to listen on %s without TLS: give --tls-cert, --tls-key and --tls-ca, or --insecure to accept plaintext on the network",
				strings.Join(open, ", ")))
		}
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		errs = append(errs, errors.New("leader lease timeout must not exceed the heartbeat timeout"))
	}
	if _, err := logstore.ParseKind(c.RaftLogStore); err != nil {
		errs = append(errs, err)
	}
	if c.RaftWALSegmentSize < 0 {
		errs = append(errs, fmt.Errorf("raft wal segment size %d is negative", c.RaftWALSegmentSize))
	}
	return errors.Join(errs...)
}

// isLoopback reports whether a listen address binds loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParsePeers reads "id=raftaddr,id=raftaddr".
func ParsePeers(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("peer %q: want id=raft_address", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %q: %w", part, err)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("peer id %q given twice", id)
		}
		out[id] = addr
	}
	return out, nil
}
