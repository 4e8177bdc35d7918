//go:build !unix

package datadir

import (
	"errors"
	"os"
)

var errHeld = errors.New("held by another process")

// flock is a no-op where flock(2) does not exist: coordd runs on Unix.
func flock(*os.File) error { return nil }
