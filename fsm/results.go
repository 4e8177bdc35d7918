package fsm

// Results of Apply, one type per command family. A rejection is returned as
// *Rejection instead.

// AcquireResult is the outcome of an Acquire.
type AcquireResult struct {
	Acquired bool
	Lease    Lease
}

// LeaseResult is the outcome of a Renew.
type LeaseResult struct {
	Lease Lease
}

// ReleaseResult is the outcome of a Release.
type ReleaseResult struct {
	Released bool
	Lease    Lease
}

// ClaimResult is the outcome of a ClaimWindow.
type ClaimResult struct {
	Claimed bool
	Window  Window
}

// WindowResult is the outcome of a CompleteWindow.
type WindowResult struct {
	Window Window
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
}
