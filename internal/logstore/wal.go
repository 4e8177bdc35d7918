package logstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// walStore is raft-wal behind a lock that lets it be reopened in place.
//
// raft-wal (v0.4.2) rotates to a new segment in the background after the
// append that fills one: it marks the old segment sealed in its meta file
// and creates the next file. If that fails (the disk is full: the next
// segment is preallocated, or the meta file cannot grow) it only logs
// "rotate error", and every later append fails with ErrSealed until the
// process restarts. If the process dies between the sealing append and the
// meta commit (kill -9, power loss), the reopened WAL recovers the sealed
// file as its tail and fails every append the same way, restart or not.
// walStore handles both: on ErrSealed it closes the WAL, finishes the
// rotation on disk (completeRotation) and reopens, then retries the append
// once. Until a reopen succeeds (say the disk is still full) the store
// answers with that error, and every append tries again.
type walStore struct {
	dir     string
	segSize int
	log     hclog.Logger

	mu      sync.RWMutex // exclusive only while reopening
	w       *wal.WAL     // nil after a failed reopen
	lastErr error        // why w is nil
	closed  bool

	newMeta func() types.MetaStore // tests: a meta store to open with (nil: raft-wal's)
}

var (
	_ raft.LogStore          = (*walStore)(nil)
	_ raft.StableStore       = (*walStore)(nil)
	_ raft.MonotonicLogStore = (*walStore)(nil)
)

func segmentSize(n int) int {
	if n <= 0 {
		return DefaultWALSegmentSize
	}
	return n
}

func openWAL(dir string, segSize int, log hclog.Logger) (*walStore, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("raft log dir: %w", err)
	}
	s := &walStore{dir: dir, segSize: segmentSize(segSize), log: log}
	w, err := s.openLocked()
	if err != nil {
		return nil, err
	}
	s.w = w
	return s, nil
}

func (s *walStore) openLocked() (*wal.WAL, error) {
	meta := s.meta()
	w, err := wal.Open(s.dir, wal.WithSegmentSize(s.segSize), wal.WithLogger(s.log), wal.WithMetaStore(meta))
	if err != nil {
		// A failed Open leaves the meta file open, and its lock would make
		// the next attempt wait forever.
		_ = meta.Close()
		return nil, fmt.Errorf("open raft log %s: %w", s.dir, err)
	}
	return w, nil
}

// meta is a fresh meta store for one open.
func (s *walStore) meta() types.MetaStore {
	if s.newMeta != nil {
		return s.newMeta()
	}
	return &metadb.BoltMetaDB{}
}

// reopenLocked closes the WAL, finishes an interrupted rotation and opens it
// again. s.mu must be held exclusively.
func (s *walStore) reopenLocked() error {
	if s.closed {
		return wal.ErrClosed
	}
	if s.w != nil {
		if err := s.w.Close(); err != nil {
			s.log.Warn("closing the raft log before reopening it", "error", err)
		}
		s.w = nil
	}
	done, err := completeRotation(s.dir, s.segSize, s.meta())
	if err == nil {
		if done {
			s.log.Warn("finished an interrupted raft log segment rotation", "dir", s.dir)
		}
		var w *wal.WAL
		if w, err = s.openLocked(); err == nil {
			s.w, s.lastErr = w, nil
			return nil
		}
	}
	s.lastErr = fmt.Errorf("raft log unavailable until it can be reopened: %w", err)
	return s.lastErr
}

// get runs f on the open WAL under the shared lock.
func (s *walStore) get(f func(w *wal.WAL) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		if s.closed {
			return wal.ErrClosed
		}
		return s.lastErr
	}
	return f(s.w)
}

func (s *walStore) FirstIndex() (n uint64, err error) {
	err = s.get(func(w *wal.WAL) (e error) { n, e = w.FirstIndex(); return })
	return
}

func (s *walStore) LastIndex() (n uint64, err error) {
	err = s.get(func(w *wal.WAL) (e error) { n, e = w.LastIndex(); return })
	return
}

func (s *walStore) GetLog(index uint64, l *raft.Log) error {
	return s.get(func(w *wal.WAL) error { return w.GetLog(index, l) })
}

func (s *walStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *walStore) StoreLogs(logs []*raft.Log) error {
	err := s.get(func(w *wal.WAL) error { return w.StoreLogs(logs) })
	if err == nil || !(errors.Is(err, wal.ErrSealed) || s.broken()) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Another append may have reopened it meanwhile; a sealed tail is only
	// ever fixed by a reopen, so try the append first.
	if s.w != nil {
		if err = s.w.StoreLogs(logs); !errors.Is(err, wal.ErrSealed) {
			return err
		}
	}
	if err := s.reopenLocked(); err != nil {
		return err
	}
	return s.w.StoreLogs(logs)
}

// broken reports a failed reopen (s.w is nil but the store is not closed).
func (s *walStore) broken() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w == nil && !s.closed
}

func (s *walStore) DeleteRange(min, max uint64) error {
	return s.get(func(w *wal.WAL) error { return w.DeleteRange(min, max) })
}

func (s *walStore) Set(key, val []byte) error {
	return s.get(func(w *wal.WAL) error { return w.Set(key, val) })
}

func (s *walStore) Get(key []byte) (v []byte, err error) {
	err = s.get(func(w *wal.WAL) (e error) { v, e = w.Get(key); return })
	return
}

func (s *walStore) SetUint64(key []byte, val uint64) error {
	return s.get(func(w *wal.WAL) error { return w.SetUint64(key, val) })
}

func (s *walStore) GetUint64(key []byte) (v uint64, err error) {
	err = s.get(func(w *wal.WAL) (e error) { v, e = w.GetUint64(key); return })
	return
}

// IsMonotonic tells raft to clear the whole log after installing a
// snapshot: the WAL refuses appends with a gap.
func (s *walStore) IsMonotonic() bool { return true }

func (s *walStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.w == nil {
		return nil
	}
	err := s.w.Close()
	s.w = nil
	return err
}

// completeRotation finishes a segment rotation that stopped between the
// append that sealed the tail segment (its index block is on disk) and the
// meta commit that records the seal and the next segment. It must run with
// the WAL closed. It reports whether it changed anything.
//
// It does what raft-wal's rotation does: the tail gets its seal time, last
// index and index offset, and a new, empty segment follows it (raft-wal
// creates the missing file when it opens). Before committing, every entry
// is read back through the sealed segment's index and compared with the
// entry found by scanning the file, so a torn index block is refused
// instead of trusted.
func completeRotation(dir string, segSize int, meta types.MetaStore) (bool, error) {
	defer meta.Close()
	ps, err := meta.Load(dir)
	if err != nil {
		return false, fmt.Errorf("raft log meta: %w", err)
	}
	n := len(ps.Segments)
	if n == 0 || !ps.Segments[n-1].SealTime.IsZero() {
		return false, nil
	}
	tail := ps.Segments[n-1]
	filer := segment.NewFiler(dir, fs.New())
	sw, err := filer.RecoverTail(tail)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // raft-wal creates a missing tail itself
	}
	if err != nil {
		return false, fmt.Errorf("raft log tail segment: %w", err)
	}
	defer sw.Close()
	sealed, indexStart, err := sw.Sealed()
	if err != nil || !sealed {
		return false, err
	}
	tail.SealTime = time.Now()
	tail.MaxIndex = sw.LastIndex()
	tail.IndexStart = indexStart
	if tail.MaxIndex < tail.MinIndex {
		return false, fmt.Errorf("raft log: sealed tail segment %d holds no entries", tail.ID)
	}
	r, err := filer.Open(tail)
	if err != nil {
		return false, fmt.Errorf("raft log: sealed tail segment %d: %w", tail.ID, err)
	}
	defer r.Close()
	for idx := tail.MinIndex; idx <= tail.MaxIndex; idx++ {
		if err := sameEntry(r, sw, idx); err != nil {
			return false, fmt.Errorf("raft log: sealed tail segment %d does not read back (%w); replace this node: "+
				"remove it from the cluster, wipe its data dir, rejoin", tail.ID, err)
		}
	}
	ps.Segments[n-1] = tail
	ps.Segments = append(ps.Segments, types.SegmentInfo{
		ID: ps.NextSegmentID, BaseIndex: tail.MaxIndex + 1, MinIndex: tail.MaxIndex + 1,
		SizeLimit: uint32(segSize), Codec: wal.CodecBinaryV1, CreateTime: time.Now(),
	})
	ps.NextSegmentID++
	if err := meta.CommitState(ps); err != nil {
		return false, fmt.Errorf("raft log meta: %w", err)
	}
	return true, nil
}

func sameEntry(sealed, scanned types.SegmentReader, idx uint64) error {
	a, err := sealed.GetLog(idx)
	if err != nil {
		return fmt.Errorf("entry %d through the index: %w", idx, err)
	}
	defer a.Close()
	b, err := scanned.GetLog(idx)
	if err != nil {
		return fmt.Errorf("entry %d: %w", idx, err)
	}
	defer b.Close()
	if !bytes.Equal(a.Bs, b.Bs) {
		return fmt.Errorf("entry %d differs through the index", idx)
	}
	return nil
}
