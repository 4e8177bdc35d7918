// Package logstore opens a node's Raft log and stable store (term, vote)
// in its data dir. Two stores are supported:
//
//   - wal: hashicorp/raft-wal. Log entries go to append-only segment files
//     (wal/*.wal, 64 MiB each by default, preallocated), one fsync per
//     StoreLogs batch; the stable store and the segment list live in a small
//     bbolt file (wal/wal-meta.db) written only on elections, segment
//     rotation and truncation.
//   - bolt: hashicorp/raft-boltdb/v2, log and stable store in one bbolt file
//     (raft.db). Every StoreLogs batch is a bbolt transaction: two fdatasyncs
//     (the pages, then the meta page).
//
// A data dir keeps the store it was created with: Open detects it from the
// files (raft.db or wal/wal-meta.db) and only a new data dir gets the
// requested (or default) kind. To move a node from one store to the other,
// replace it: remove it from the cluster, wipe its data dir, start it with
// the other store and let it rejoin; the leader sends it a snapshot and the
// log. Snapshots are not the log store's business (raft.FileSnapshotStore
// in the same data dir) and work the same with both.
package logstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/coordd/coordd/internal/datadir"
)

// Kind names a log store.
type Kind string

// The supported stores.
const (
	WAL  Kind = "wal"
	Bolt Kind = "bolt"
)

// Default is the kind a new data dir gets when none is requested.
const Default = WAL

// DefaultWALSegmentSize is the size of a wal segment file (raft-wal's).
const DefaultWALSegmentSize = 64 << 20

// File names inside the data dir that identify each store.
const (
	BoltFile = "raft.db"
	WALDir   = "wal"
	walMeta  = "wal-meta.db"
)

// ParseKind parses "wal" or "bolt"; "" is valid and means "the default for a
// new data dir".
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case "", WAL, Bolt:
		return k, nil
	default:
		return "", fmt.Errorf("unknown raft log store %q: want wal or bolt", s)
	}
}

// Options for Open.
type Options struct {
	// Kind is the store for a new data dir ("" = Default). An existing data
	// dir keeps the store it was created with whatever Kind says; a
	// different Kind is logged as a warning.
	Kind Kind
	// WALSegmentSize is the size of new wal segment files in bytes (0 = the
	// raft-wal default, 64 MiB). Segments are preallocated, so a data dir
	// needs this much free space for the next one.
	WALSegmentSize int
	// Logger receives the choice made at open and raft-wal's own messages.
	Logger hclog.Logger
}

// Store is an open log store.
type Store struct {
	Kind Kind
	// New reports that the data dir held no log store before Open.
	New    bool
	Logs   raft.LogStore
	Stable raft.StableStore
	// Close closes the store and releases the data dir.
	Close func() error
}

// Detect reports which store a data dir holds: "" when none.
func Detect(dir string) (Kind, error) {
	bolt, err := exists(filepath.Join(dir, BoltFile))
	if err != nil {
		return "", err
	}
	wal, err := exists(filepath.Join(dir, WALDir, walMeta))
	if err != nil {
		return "", err
	}
	switch {
	case bolt && wal:
		return "", fmt.Errorf("data dir %s holds two Raft log stores, %s (bolt) and %s/ (wal): refusing to pick one; "+
			"move away the one this node did not run with last (compare the files' modification times), "+
			"or replace the node (remove it from the cluster, wipe the data dir, rejoin)", dir, BoltFile, WALDir)
	case bolt:
		return Bolt, nil
	case wal:
		return WAL, nil
	}
	return "", nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// Open opens (or creates) the log store in dir. The data dir is locked for
// as long as the store is open: a second process on the same dir gets an
// error instead of waiting.
func Open(dir string, o Options) (*Store, error) {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	want, err := ParseKind(string(o.Kind))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// A second process on this dir fails here, naming the first, instead of
	// waiting (bbolt would wait forever for raft-wal's meta file).
	lock, err := datadir.Acquire(dir)
	if err != nil {
		return nil, err
	}
	// A data dir of a newer format is refused before any file is opened.
	if err := datadir.CheckFormat(dir); err != nil {
		lock.Release()
		return nil, err
	}
	st, err := open(dir, want, o, log)
	if err != nil {
		lock.Release()
		return nil, err
	}
	closeStore := st.Close
	st.Close = func() error {
		err := closeStore()
		lock.Release()
		return err
	}
	return st, nil
}

func open(dir string, want Kind, o Options, log hclog.Logger) (*Store, error) {
	found, err := Detect(dir)
	if err != nil {
		return nil, err
	}
	kind, origin := found, "existing data dir"
	if found == "" {
		kind, origin = want, "new data dir"
		if kind == "" {
			kind = Default
		}
	} else if want != "" && want != found {
		log.Warn("the data dir keeps the Raft log store it was created with; the requested store applies to new data dirs only "+
			"(to move this node, replace it: remove it from the cluster, wipe the data dir, rejoin)",
			"store", string(found), "requested", string(want), "data_dir", dir)
	}
	st := &Store{Kind: kind, New: found == ""}
	switch kind {
	case Bolt:
		// The freelist is rebuilt on open instead of written on every commit:
		// one page less per fsync'd transaction (etcd does the same).
		b, err := raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(dir, BoltFile),
			BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
		})
		if err != nil {
			return nil, fmt.Errorf("open raft log %s: %w", filepath.Join(dir, BoltFile), err)
		}
		st.Logs, st.Stable, st.Close = b, b, b.Close
	case WAL:
		w, err := openWAL(filepath.Join(dir, WALDir), o.WALSegmentSize, log)
		if err != nil {
			return nil, err
		}
		st.Logs, st.Stable, st.Close = w, w, w.Close
	}
	args := []any{"store", string(kind), "origin", origin, "data_dir", dir}
	if kind == WAL {
		args = append(args, "segment_size", segmentSize(o.WALSegmentSize))
	}
	log.Info("raft log store opened", args...)
	return st, nil
}

// ParseSize parses a byte size: a plain number of bytes, or a number with a
// K, KiB, M, MiB, G or GiB suffix (all powers of 1024).
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n > (1<<31-1)/mult {
		return 0, fmt.Errorf("size %q: want bytes, or a number with K, M or G (KiB, MiB, GiB) below 2 GiB", s)
	}
	return n * mult, nil
}
