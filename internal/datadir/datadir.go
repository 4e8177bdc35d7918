// Package datadir keeps a second coordd off a data directory that one
// already uses: Lock takes an exclusive flock(2) on DIR/LOCK and writes the
// process's PID into it. The kernel releases the lock when the process exits
// or crashes, so a stale LOCK file never blocks a restart.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FileName is the lock file inside the data directory.
const FileName = "LOCK"

// HeldError says that another process holds the directory's lock.
type HeldError struct {
	Dir string
	PID int // 0 when the holder's PID could not be read
}

func (e *HeldError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("another coordd (pid %d) holds the data directory %s", e.PID, e.Dir)
	}
	return fmt.Sprintf("another coordd holds the data directory %s", e.Dir)
}

// Lock is a held data-directory lock.
type Lock struct {
	f *os.File
}

// Acquire creates dir if needed and locks it for this process, at once or
// not at all: when another process holds it, the error is a *HeldError
// naming that process's PID.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, errHeld) {
			return nil, &HeldError{Dir: dir, PID: readPID(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The PID is for the next process's message only; the lock is the flock.
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release unlocks the directory (exit does the same). The file stays: a
// process that opened it before the unlock must lock the same file.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the only descriptor releases the flock
	l.f = nil
	return err
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
