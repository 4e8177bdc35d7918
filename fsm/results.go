package fsm

// Results of Apply, one type per command family. A rejection is returned as
// *Rejection instead.

// AcquireResult is the outcome of an Acquire.
type AcquireResult struct {
	At       int64 // the lease time it was decided at
	Acquired bool
	Lease    Lease
	// TookOver is set when the grant replaced a generation that expired
	// without a release (its holder lost the lease); Previous is that record.
	TookOver bool
	Previous Lease
	// Claim is the outcome of the Acquire's claim, when it asked for one:
	// the new holder's claim, or Claimed=false with the completed window
	// (then nothing was granted).
	Claim *ClaimResult
}

// LeaseResult is the outcome of a Renew.
type LeaseResult struct {
	Lease Lease
}

// ReleaseResult is the outcome of a Release.
type ReleaseResult struct {
	At       int64
	Released bool
	Lease    Lease
	// Handoff is the outcome of the Release's handoff Acquire, when it had
	// one and the release succeeded: an *AcquireResult or a *Rejection.
	Handoff any
}

// ClaimResult is the outcome of a ClaimWindow.
type ClaimResult struct {
	Claimed bool
	Window  Window
}

// WindowResult is the outcome of a CompleteWindow.
type WindowResult struct {
	Window Window
	// Released: the command asked for a release and released the lease.
	Released bool
}

// CommitResult is the outcome of a FencedCommit.
type CommitResult struct {
	Accepted      bool
	Duplicate     bool
	MaxGeneration uint64
	Generation    uint64
	Payload       []byte
}

// PruneResult counts what a Prune removed.
type PruneResult struct {
	Windows     int
	Idempotency int
	Jobs        int // finished queue jobs
	Schedules   int // tombstones of deleted schedules
}
