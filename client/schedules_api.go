package client

import (
	"errors"
	"fmt"
)

// Sentinels of schedules (coord.v1.Schedules).
var (
	// ErrScheduleNotFound: no schedule has that name (never created, or
	// its tombstone was pruned), or a pause, resume or trigger of a deleted
	// schedule. It wraps ErrNotFound.
	ErrScheduleNotFound = fmt.Errorf("coordd: schedule not found: %w", ErrNotFound)
	// ErrScheduleOverlap: a trigger of a FORBID schedule while the job of
	// its previous occurrence is not final.
	ErrScheduleOverlap = errors.New("coordd: schedule overlap")
)
