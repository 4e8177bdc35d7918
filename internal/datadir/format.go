package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FormatFile marks a data directory with the version of its layout (the
// log store's files, Raft's snapshots and the fsm snapshot encoding in
// them): "coordd-data-format N".
const FormatFile = "FORMAT"

// Format is the data-directory format this build writes and the newest it
// opens. A release that changes the layout so that an older coordd would
// misread it bumps it; the older coordd then refuses to start on the
// directory (CheckFormat) instead of misreading it.
const Format = 1

const formatPrefix = "coordd-data-format "

// FormatError says that a data directory is in a format this build does
// not know.
type FormatError struct {
	Dir   string
	Found string // the marker's content
	Newer int    // its version when it is a newer one, else 0
}

func (e *FormatError) Error() string {
	if e.Newer > 0 {
		return fmt.Sprintf("data directory %s has format %d, newer than this coordd knows (%d): "+
			"it was written by a newer coordd; run that release (or newer), or restore this node from a backup "+
			"(docs/backup-and-upgrade.md, \"Version skew\")", e.Dir, e.Newer, Format)
	}
	return fmt.Sprintf("data directory %s: %s holds %q, not a coordd data-directory format", e.Dir, FormatFile, e.Found)
}

// CheckFormat reads dir's format marker and refuses a format this build
// does not know. A directory without a marker (new, or written by a
// coordd from before markers) gets this build's. Call it with the
// directory locked.
func CheckFormat(dir string) error {
	path := filepath.Join(dir, FormatFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return WriteFormat(dir)
	}
	if err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.Atoi(strings.TrimPrefix(s, formatPrefix))
	if !strings.HasPrefix(s, formatPrefix) || err != nil || v < 1 {
		return &FormatError{Dir: dir, Found: s}
	}
	if v > Format {
		return &FormatError{Dir: dir, Found: s, Newer: v}
	}
	return nil
}

// WriteFormat writes this build's format marker into dir (atomically).
func WriteFormat(dir string) error {
	path := filepath.Join(dir, FormatFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(formatPrefix+strconv.Itoa(Format)+"\n"), 0o644); err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	return nil
}
