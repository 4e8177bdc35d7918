package logstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// failingMeta is raft-wal's meta store whose commits fail while fail is
// set: a full disk, or (with the process stopped right after) a crash
// before the commit.
type failingMeta struct {
	*metadb.BoltMetaDB
	fail *atomic.Bool
}

func (m failingMeta) CommitState(ps types.PersistentState) error {
	if m.fail.Load() {
		return errors.New("injected: no space left on device")
	}
	return m.BoltMetaDB.CommitState(ps)
}

const smallSegment = 8 << 10

// fillUntilSealed appends entries one by one from index `from` until an
// append fails with ErrSealed: the rotation after the append that filled
// the segment did not happen. It returns the last stored index.
func fillUntilSealed(t *testing.T, ls raft.LogStore, from uint64) uint64 {
	t.Helper()
	for i := from; i < from+10000; i++ {
		err := ls.StoreLogs([]*raft.Log{entry(i)})
		if errors.Is(err, wal.ErrSealed) {
			return i - 1
		}
		if err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
	t.Fatal("the segment never sealed")
	return 0
}

// crashBeforeRotation leaves dataDir/wal as a crash between the sealing
// append and the rotation's meta commit leaves it; it returns the last
// stored index.
func crashBeforeRotation(t *testing.T, dataDir string) uint64 {
	t.Helper()
	dir := filepath.Join(dataDir, WALDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	w, err := wal.Open(dir, wal.WithSegmentSize(smallSegment), wal.WithMetaStore(failingMeta{&metadb.BoltMetaDB{}, &fail}))
	if err != nil {
		t.Fatal(err)
	}
	storeRange(t, w, 1, 3)
	fail.Store(true)
	last := fillUntilSealed(t, w, 4)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// raft-wal alone stays wedged across restarts: its tail is sealed and
	// nothing rotates it. (If this starts failing, raft-wal fixed it and
	// completeRotation can go.)
	w, err = wal.Open(dir, wal.WithSegmentSize(smallSegment))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs([]*raft.Log{entry(last + 1)}); !errors.Is(err, wal.ErrSealed) {
		t.Fatalf("plain raft-wal after the crash: append %v, want ErrSealed", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return last
}

func TestRotationCutShortByACrashIsFinishedOnTheNextAppend(t *testing.T) {
	dataDir := t.TempDir()
	last := crashBeforeRotation(t, dataDir)
	var logs logBuf
	st := mustOpen(t, dataDir, Options{WALSegmentSize: smallSegment, Logger: logs.logger()})
	if st.Kind != WAL || st.New {
		t.Fatalf("opened %q new=%v", st.Kind, st.New)
	}
	checkRange(t, st.Logs, 1, last)
	storeRange(t, st.Logs, last+1, last+300) // several more rotations
	if !strings.Contains(logs.String(), "finished an interrupted raft log segment rotation") {
		t.Fatalf("the repair was not logged: %s", logs.String())
	}
	checkRange(t, st.Logs, 1, last+300)
	closeStore(t, st)
	st = mustOpen(t, dataDir, Options{WALSegmentSize: smallSegment})
	checkRange(t, st.Logs, 1, last+300)
	closeStore(t, st)
}

func TestRotationThatFailsAtRuntimeRecoversWhenTheDiskDoes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), WALDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	var logs logBuf
	s := &walStore{dir: dir, segSize: smallSegment, log: logs.logger(),
		newMeta: func() types.MetaStore { return failingMeta{&metadb.BoltMetaDB{}, &fail} }}
	w, err := s.openLocked()
	if err != nil {
		t.Fatal(err)
	}
	s.w = w
	storeRange(t, s, 1, 3)
	fail.Store(true)
	// The rotation fails in the background ("rotate error"); the next append
	// reopens, cannot finish the rotation either, and reports it.
	var last uint64
	for i := uint64(4); ; i++ {
		err := s.StoreLogs([]*raft.Log{entry(i)})
		if err != nil {
			if !strings.Contains(err.Error(), "raft log unavailable") || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("append %d: %v", i, err)
			}
			last = i - 1
			break
		}
		if i > 5000 {
			t.Fatal("no rotation happened")
		}
	}
	if !strings.Contains(logs.String(), "rotate error") {
		t.Fatalf("raft-wal did not log the failed rotation: %s", logs.String())
	}
	var l raft.Log
	if err := s.GetLog(1, &l); err == nil {
		t.Fatal("a read succeeded while the store was down")
	}
	if err := s.StoreLogs([]*raft.Log{entry(last + 1)}); err == nil {
		t.Fatal("an append succeeded while the disk was still full")
	}
	fail.Store(false) // space is back
	storeRange(t, s, last+1, last+200)
	checkRange(t, s, 1, last+200)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := mustOpen(t, filepath.Dir(dir), Options{WALSegmentSize: smallSegment})
	checkRange(t, st.Logs, 1, last+200)
	closeStore(t, st)
}

func TestTornIndexBlockIsRefusedNotTrusted(t *testing.T) {
	dataDir := t.TempDir()
	crashBeforeRotation(t, dataDir)
	dir := filepath.Join(dataDir, WALDir)
	// Overwrite the middle of the sealed tail's index block.
	var meta metadb.BoltMetaDB
	ps, err := meta.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	meta.Close()
	tail := ps.Segments[len(ps.Segments)-1]
	sw, err := segment.NewFiler(dir, fs.New()).RecoverTail(tail)
	if err != nil {
		t.Fatal(err)
	}
	sealed, indexStart, _ := sw.Sealed()
	entries := sw.LastIndex() - tail.BaseIndex + 1
	sw.Close()
	if !sealed {
		t.Fatal("the tail is not sealed")
	}
	f, err := os.OpenFile(filepath.Join(dir, segment.FileName(tail)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff, 0x0f}, int64(indexStart+4*(entries/2))); err != nil {
		t.Fatal(err)
	}
	f.Close()

	st := mustOpen(t, dataDir, Options{WALSegmentSize: smallSegment})
	defer closeStore(t, st)
	last, _ := st.Logs.LastIndex()
	err = st.Logs.StoreLogs([]*raft.Log{entry(last + 1)})
	if err == nil || !strings.Contains(err.Error(), "does not read back") || !strings.Contains(err.Error(), "replace this node") {
		t.Fatalf("append after a torn index: %v", err)
	}
}
