package node

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/defaults"
	"github.com/coordd/coordd/internal/logstore"
	"github.com/coordd/coordd/internal/tlsutil"
)

// Config is everything a node needs; New fills unset fields from Defaults
// and validates it once.
type Config struct {
	ID       string // Raft server id, unique in the cluster
	DataDir  string
	RaftAddr string // Raft TCP listen (and advertised) address

	// Peers is the static initial cluster: id -> Raft address. When the data
	// dir is empty and Join is empty, the node bootstraps with these peers (or
	// alone when Peers is empty).
	Peers map[string]string
	// Join is the gRPC address of a running member to ask for admission; a
	// node with Join never bootstraps.
	Join string

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// TickInterval is how often an idle leader appends a tick so the
	// lease time keeps moving.
	TickInterval time.Duration
	// Retention is how long completed windows and idempotency records are
	// kept; PruneInterval is how often the leader proposes a prune.
	Retention     time.Duration
	PruneInterval time.Duration
	// JobRetention is how long finished queue jobs (succeeded, cancelled,
	// dead) are kept, on the calendar clock; MaxFinishedJobs caps how many
	// are kept (succeeded ones go first). Both ride on the leader's prune.
	JobRetention    time.Duration
	MaxFinishedJobs uint64
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
	// Watch bounds the ring of recent change events and the watchers
	// (zero fields: WatchDefaults).
	Watch WatchConfig
	// Probes bound /livez and /readyz (node/probes.go): StallTimeout is
	// how long a loop may not turn (or the apply loop not move while
	// entries wait) before the node is not live; ReadyMaxApplyLag is how
	// far the applied index may trail the commit index, ReadyContact how
	// long ago a follower may have last heard from its leader, for the
	// node to be ready.
	StallTimeout     time.Duration
	ReadyMaxApplyLag uint64
	ReadyContact     time.Duration

	// TLS is this node's certificate and key and the CA of its peers: Raft
	// runs over mutual TLS with it. Empty: plaintext Raft.
	TLS tlsutil.Files
	// Insecure allows a plaintext Raft listener on a non-loopback address.
	Insecure bool

	Logger *slog.Logger
	// Clock is the node's time source: the leader clock (lease and calendar time), the leader's
	// ticks, waiting acquires' expiry timers. Tests inject a fake or skewed
	// one.
	Clock clock.Clock
	// Metrics is the registry the node's collectors join (nil: a registry
	// of its own). Several nodes can live in one process.
	Metrics *prometheus.Registry
	// TracerProvider makes the leader's span of each schedule occurrence
	// it materialises (docs/tracing.md); nil: none.
	TracerProvider trace.TracerProvider
}

// Defaults are the values New gives unset fields; coordd's flags show the
// same values. MinTTL is derived from ElectionTimeout when unset.
func Defaults() Config {
	return Config{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		TickInterval:       250 * time.Millisecond,
		Retention:          30 * 24 * time.Hour,
		PruneInterval:      time.Minute,
		JobRetention:       fsm.DefaultJobRetentionMs * time.Millisecond,
		MaxFinishedJobs:    fsm.DefaultMaxFinishedJobs,
		SnapshotThreshold:  16384,
		MaxTTL:             24 * time.Hour,
		ApplyTimeout:       10 * time.Second,
		StallTimeout:       30 * time.Second,
		ReadyMaxApplyLag:   1024,
	}
}

// withDefaults fills unset fields.
func (c Config) withDefaults() Config {
	defaults.Fill(&c, Defaults())
	// A lease shorter than 1.5 election timeouts could lapse in a failover.
	c.MinTTL = cmp.Or(c.MinTTL, max(time.Second, c.ElectionTimeout*3/2))
	// A follower hears from its leader every tenth of a heartbeat timeout
	// and starts an election after one without contact.
	c.ReadyContact = cmp.Or(c.ReadyContact, max(time.Second, 2*c.HeartbeatTimeout))
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Clock = cmp.Or[clock.Clock](c.Clock, clock.Real{})
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
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
	if _, _, err := net.SplitHostPort(c.RaftAddr); err != nil {
		errs = append(errs, fmt.Errorf("raft address %q: %w", c.RaftAddr, err))
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
	if c.JobRetention < 0 {
		errs = append(errs, fmt.Errorf("job retention %s is negative", c.JobRetention))
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
	errs = append(errs, c.TLS.Validate())
	if !c.TLS.Enabled() {
		errs = append(errs, tlsutil.CheckPlaintext(c.Insecure, tlsutil.Listener{Name: "Raft", Addr: c.RaftAddr}))
	}
	return errors.Join(errs...)
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
