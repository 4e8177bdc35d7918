package fsm

// Lease is the replicated record of a named lock. Records are immutable once
// stored in a tree (snapshots share them); a change stores a modified copy.
type Lease struct {
	Name       string
	Owner      string
	RequestID  string
	Generation uint64
	TTLMs      int64
	AcquiredAt int64 // cluster ms
	RenewedAt  int64
	ExpiresAt  int64
	Renewals   uint64
	Released   bool
	// Identity is the authenticated identity that acquired this generation
	// ("" without authorization); only it may renew or release it.
	Identity string
	// Value is what the holder published: its Acquire's, replaced by a
	// Renew that sets one (an election's Proclaim). A string, so that
	// records stay comparable.
	Value string
}

// Live reports whether the lease is held at lease time now.
func (l *Lease) Live(now int64) bool { return !l.Released && l.ExpiresAt > now }

// Window is one entry of a window ledger: the occurrence Window of the
// ledger named Ledger (the protos' `job` field, kept there for the log
// format and the public API).
type Window struct {
	Ledger         string
	Window         string
	LeaseName      string
	Owner          string
	Generation     uint64
	Attempts       uint64
	FirstStartedAt int64
	StartedAt      int64
	CompletedAt    int64
	Result         []byte
	Completed      bool
}

func (w *Window) claimedBy(lease, owner string, gen uint64) bool {
	return w.LeaseName == lease && w.Owner == owner && w.Generation == gen
}

// Resource is the fence state of a protected resource.
type Resource struct {
	Name               string
	LeaseName          string
	MaxGeneration      uint64
	LastCommitAt       int64
	LastIdempotencyKey string
	Commits            uint64
	// JobID: the resource is fenced by this queue job's attempts (then
	// LeaseName is "job:<id>", for display).
	JobID uint64
}

// Idempotency is the first accepted outcome of an idempotency key.
type Idempotency struct {
	Resource   string
	Key        string
	Generation uint64
	Payload    []byte
	At         int64
}

// Member maps a Raft server id to its gRPC address.
type Member struct {
	ID          string
	GRPCAddress string
}
